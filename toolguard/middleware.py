"""LangChain v1 agent middleware: toolguard's retry controller inside ``create_agent``.

Example:
    >>> from langchain.agents import create_agent
    >>> from toolguard.middleware import RetryControllerMiddleware
    >>> middleware = RetryControllerMiddleware(max_retries=3, on_exhausted="finish")
    >>> # agent = create_agent(model, tools, middleware=[middleware])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware.types import AgentMiddleware, AgentState, hook_config
from langchain_core.messages import ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from toolguard.controller import NEW_RUN, RetryController, merge_controller_counters


class ControllerState(AgentState[Any]):
    """Agent state plus the controller's counters (see ``RetryController``)."""

    toolguard_controller: NotRequired[Annotated[dict[str, Any], merge_controller_counters]]


class RetryControllerMiddleware(AgentMiddleware[ControllerState, Any, Any]):
    """Bounded retry -> skip -> finish (CRITICTOOL) as ``create_agent`` middleware.

    Tool calls go through :meth:`RetryController.wrap_tool_call` (and its async twin);
    before each model call, a run that must finish (a ``finish`` policy fired or a cap was
    hit) jumps to the end with a message telling the user what failed.

    Args:
        controller: A configured controller; default ``RetryController(**options)``.
        **options: Keyword options for :class:`~toolguard.controller.RetryController`
            (its ``state_key`` must stay ``"toolguard_controller"``).

    Raises:
        ValueError: If both ``controller`` and options are given, or the state key differs.
    """

    state_schema = ControllerState

    def __init__(self, controller: RetryController | None = None, **options: Any) -> None:
        super().__init__()
        if controller is not None and options:
            raise ValueError("pass either controller= or RetryController options, not both")
        self.controller = controller or RetryController(**options)
        if self.controller.state_key != "toolguard_controller":
            raise ValueError("RetryControllerMiddleware needs state_key='toolguard_controller'")

    def wrap_tool_call(
        self, request: Any, handler: Callable[[Any], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        """Run the tool under the controller."""
        return self.controller.wrap_tool_call(request, handler)

    async def awrap_tool_call(
        self, request: Any, handler: Callable[[Any], Awaitable[ToolMessage | Command[Any]]]
    ) -> ToolMessage | Command[Any]:
        """Async twin of :meth:`wrap_tool_call`."""
        return await self.controller.awrap_tool_call(request, handler)

    def before_agent(self, state: ControllerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """A new invocation is a new run: clear ``finished`` and the per-run counters."""
        if state.get("toolguard_controller"):
            return {"toolguard_controller": NEW_RUN}
        return None

    async def abefore_agent(
        self, state: ControllerState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`before_agent`."""
        return self.before_agent(state, runtime)

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: ControllerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """End the run with a message to the user once the controller says finish."""
        if not self.controller.finished(state):
            return None
        return {**self.controller.finish_update(state), "jump_to": "end"}

    @hook_config(can_jump_to=["end"])
    async def abefore_model(
        self, state: ControllerState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`before_model`."""
        return self.before_model(state, runtime)
