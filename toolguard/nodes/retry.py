"""The retry controller in a hand-built ``StateGraph``: wrap the tool node, gate after it.

``create_agent`` users add :class:`~toolguard.RetryControllerMiddleware` instead.  In a
hand-built graph the controller wraps the ``ToolNode`` and :class:`RetryGateNode` runs once
after every tool step (a plain edge ``tools -> gate``, so all parallel calls of the step
have been answered)::

    controller = RetryController(RetryPolicy(on_failure="finish"))
    gate = RetryGateNode(controller)
    builder.add_node("tools", ToolNode(tools, wrap_tool_call=controller.wrap_tool_call,
                                       awrap_tool_call=controller.awrap_tool_call,
                                       handle_tool_errors=False))
    builder.add_node("retry_gate", gate)
    builder.add_edge("tools", "retry_gate")
    builder.add_conditional_edges("retry_gate", gate.route, ["model", END])
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph import END

from toolguard.conversation import MARK_KEY
from toolguard.retry import RetryController
from toolguard.state import messages_of

__all__ = ["RetryGateNode"]


class RetryGateNode(RunnableLambda[Any, dict[str, Any]]):
    """Tallies a tool step (:meth:`RetryController.tally`) and finishes the run when it must.

    Writes the controller's totals under its ``state_key``; when a ``finish`` policy fired,
    a cap was hit or too many calls failed in a row, it appends the finish message and
    :meth:`route` goes to ``END`` — once per step, so a ``finish`` stops the run even when
    other calls ran beside the failing one.

    Args:
        controller: The controller that wraps the tool node.
        model_node: Where :meth:`route` goes when the run goes on.
        name: The node's name.
    """

    def __init__(self, controller: RetryController, *, model_node: str = "model",
                 name: str = "retry_gate") -> None:
        super().__init__(self._run, name=name)
        self.controller = controller
        self.model_node = model_node

    def _run(self, state: Any) -> dict[str, Any]:
        return self.controller.finish_update(state)

    def route(self, state: Any) -> str:
        """``END`` after the finish message, else ``model_node``."""
        msgs = messages_of(state)
        last = msgs[-1] if msgs else None
        if isinstance(last, AIMessage) and (last.response_metadata or {}).get(
                MARK_KEY) == "finish":
            return END
        return self.model_node
