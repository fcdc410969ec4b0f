"""Bounded retry -> skip -> finish (CRITICTOOL) as LangChain v1 ``create_agent`` middleware.

Example:
    >>> from langchain.agents import create_agent
    >>> from toolguard import RetryControllerMiddleware
    >>> from toolguard.retry import RetryPolicy
    >>> middleware = RetryControllerMiddleware(
    ...     policy=RetryPolicy(max_retries=3, on_failure="finish"))
    >>> # agent = create_agent(model, tools, middleware=[middleware])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware.types import AgentState, OmitFromInput, hook_config
from langchain_core.messages import ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from toolguard.errors import ConfigurationError
from toolguard.middleware._base import ToolguardMiddleware
from toolguard.retry import RetryController, RetryPolicy
from toolguard.state import emit

__all__ = ["RetryControllerMiddleware", "RetryControllerState"]


class RetryControllerState(AgentState[Any]):
    """Agent state plus the controller's thread totals (``toolguard_controller``).

    Totals (``tool_calls``, ``retries``, ``internal_errors``, ``environment_errors``,
    ``skips``, ``finishes``, ``refused``) add up over the thread; ``run_tool_calls``,
    ``consecutive_failures``, ``finished`` and ``finish_reason`` describe the current run
    (user turn).  They are in the agent's output, not its input.
    """

    toolguard_controller: NotRequired[Annotated[dict[str, Any], OmitFromInput]]


class RetryControllerMiddleware(ToolguardMiddleware[RetryControllerState]):
    """Retry transient tool errors, then skip the step or finish the run (CRITICTOOL).

    - ``wrap_tool_call``: the call runs under :meth:`RetryController.wrap_tool_call`
      (retries with backoff, no blind retry of an ambiguous failure of a non-idempotent
      tool, caps per run); its one answer carries a
      :class:`~toolguard.retry.RetryRecord`.
    - ``before_model``: one node per step reads the run's answers
      (:meth:`RetryController.tally`), updates ``toolguard_controller`` and, when the run
      must finish, jumps to the end with a message telling the user what failed.  Because
      it runs once after all parallel calls of a step, a ``finish`` stops the run even
      when other calls ran beside the failing one.

    A run is one user turn: its counters are read from the turn's answers, so a new user
    message starts a new run and checkpoints, interrupts and restarts keep them.

    Args:
        controller: A configured controller (caps per run, sleep functions); its
            ``state_key`` must stay ``"toolguard_controller"``.  Default
            ``RetryController(policy)``.
        policy: The :class:`~toolguard.retry.RetryPolicy` of a default controller
            (LangChain's ``ToolRetryMiddleware`` option names: ``max_retries``,
            ``initial_delay``, ``backoff_factor``, ``max_delay``, ``jitter``,
            ``on_failure``).

    Raises:
        toolguard.errors.ConfigurationError: Both ``controller`` and ``policy`` are given,
            or the state key differs.
    """

    state_schema = RetryControllerState

    def __init__(self, controller: RetryController | None = None, *,
                 policy: RetryPolicy | None = None) -> None:
        super().__init__()
        if controller is not None and policy is not None:
            raise ConfigurationError("pass either controller= or policy=, not both (a "
                                     "controller has its policy: RetryController(policy))")
        self.controller = controller or RetryController(policy)
        if self.controller.state_key != "toolguard_controller":
            raise ConfigurationError(
                "RetryControllerMiddleware needs state_key='toolguard_controller'")

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

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: RetryControllerState,
                     runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Tally the step's answers; end the run with a message when it must finish."""
        update = self.controller.finish_update(state)
        if not update:
            return None
        if "messages" in update:
            emit({"event": "finish", "reason": update[self.controller.state_key].get(
                "finish_reason")}, getattr(runtime, "stream_writer", None))
            update["jump_to"] = "end"
        return update

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: RetryControllerState,
                            runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`before_model`."""
        return self.before_model(state, runtime)
