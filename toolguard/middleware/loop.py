"""The loop guard as LangChain v1 ``create_agent`` middleware: a nudge, then a stop.

Example:
    >>> from toolguard import LoopGuardMiddleware
    >>> middleware = LoopGuardMiddleware(max_repeats=2, tool_thresholds={"search": 5})
    >>> # agent = create_agent(model, tools, middleware=[middleware], checkpointer=saver)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired

from langchain.agents.middleware.types import (
    ModelRequest,
    PrivateStateAttr,
    hook_config,
)
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime
from typing_extensions import Unpack

from toolguard.conversation import Conversation
from toolguard.errors import ConfigurationError, LoopDetectedError
from toolguard.loop import (
    LoopGuard,
    LoopGuardOptions,
    LoopVerdict,
    nudges_from_messages,
    plan_loop_step,
    unseen_refused_step,
)
from toolguard.middleware._base import ToolguardMiddleware, ToolguardState, with_update
from toolguard.specs import ToolSpec, declared_traits
from toolguard.state import emit, messages_of

__all__ = ["LoopGuardMiddleware", "LoopGuardState"]

LOOP_KEY = "toolguard_loop"
TOOLS_KEY = "toolguard_loop_tools"

ExitBehavior = Literal["end", "error"]
"""What a stop does: ``end`` the turn with a message to the user, or also raise
:class:`~toolguard.errors.LoopDetectedError` from ``invoke``."""


class LoopGuardState(ToolguardState):
    """:class:`~toolguard.middleware._base.ToolguardState` plus the loop guard's records.

    Both keys are private (not in the agent's input or output) and checkpointed, so
    interrupts, resumes and restarts keep them:

    - ``toolguard_loop``: ``{"turn": str, "nudges": {signature: int}, "stop": dict | None}``
      — the user turn the record belongs to (id of its ``HumanMessage``), the nudges given
      per loop signature in it, and the stop that ended it (read by ``after_agent`` for
      ``exit_behavior="error"``).
    - ``toolguard_loop_tools``: ``{tool name: {"effects": ..., "repeatable": ...}}`` for the
      tools the model was offered whose traits differ from the defaults (written by the
      model call, read after it).
    """

    toolguard_loop: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]
    toolguard_loop_tools: NotRequired[Annotated[dict[str, dict[str, Any]], PrivateStateAttr]]


class LoopGuardMiddleware(ToolguardMiddleware[LoopGuardState]):
    """Stop tool-call loops: a nudge to the model first, then a hard stop.

    Detects, in the current user turn (:class:`~toolguard.loop.LoopGuard`, where each kind
    is defined precisely): the same failing call again (``repeated_failure``), a tool that
    does not exist called again after it was refused (``unknown_tool``), A-B-A-B
    oscillation (``oscillation``), and calls that bring nothing new (``no_progress``).
    Successful state-changing calls in between reset the counts (a read after a write is
    not a loop); tools declare ``metadata={"effects": "read"}`` (or ``"write"``) and
    ``{"repeatable": True}``, or MCP's ``readOnlyHint``
    (:func:`~toolguard.specs.declared_traits`); undeclared tools count as possibly
    state-changing.

    - ``wrap_model_call``: notes the ``effects`` / ``repeatable`` of the tools the model
      is offered (in private state), unless the loop guard was given ``tools``.
    - ``after_model``: reads the latest ``AIMessage``'s calls.  A call that would continue
      a loop is answered with exactly one error ``ToolMessage`` (the nudge: what is looping
      and what to do instead) and never runs; a call another guard already refused (e.g.
      :class:`~toolguard.GuardMiddleware`'s "not a valid tool") keeps its answer with the
      nudge added.  Once a loop's ``max_nudges`` nudges are spent, it stops: every call of
      the step still unanswered is answered "not executed", the user gets an
      ``AIMessage`` marked ``response_metadata["toolguard"] == "loop"``, and the run jumps
      to the end.  Counters ``loop_nudges`` / ``loop_stops`` go to the shared ``toolguard``
      state key; custom stream events ``{"toolguard": {"event": "loop", ...}}`` are sent.
    - ``before_model``: a step whose calls were all refused by a guard that then sent the
      run straight back to the model (skipping this ``after_model``; ``GuardMiddleware``
      does so) is checked here, before the next model call, the same way.
    - ``after_agent`` (``exit_behavior="error"`` only): raises
      :class:`~toolguard.errors.LoopDetectedError` when this run was stopped.  The stop's
      answers and message are written first (the checkpointed history stays valid: every
      call answered, so the thread can go on with a new user message); the exception
      then leaves ``invoke``, as ``ToolCallLimitMiddleware(exit_behavior="error")``'s does.

    Place it before :class:`~toolguard.GuardMiddleware` in ``middleware=[...]``
    (``after_model`` hooks run in reverse order): the guard refuses made-up tools and bad
    calls first, the loop guard sees those refusals.

    Args:
        guard: A configured :class:`~toolguard.loop.LoopGuard`; mutually exclusive with
            its options.
        exit_behavior: ``"end"`` (default) or ``"error"`` (see above).
        **options: Keyword options of :class:`~toolguard.loop.LoopGuard` (``max_repeats``,
            ``max_unknown_tool_calls``, ``no_progress_window``, ``oscillation_cycles``,
            ``oscillation_periods``, ``max_nudges``, ``tool_thresholds``, ``ignore_args``,
            ``tools``, ``kinds``).

    Raises:
        toolguard.errors.ConfigurationError: An unknown ``exit_behavior``, ``guard``
            together with options, or an invalid option (the message states the bound).
    """

    state_schema = LoopGuardState

    def __init__(
        self,
        *,
        guard: LoopGuard | None = None,
        exit_behavior: ExitBehavior = "end",
        **options: Unpack[LoopGuardOptions],
    ) -> None:
        super().__init__()
        if exit_behavior not in ("end", "error"):
            raise ConfigurationError(
                f"exit_behavior must be 'end' or 'error', got {exit_behavior!r}")
        if guard is not None and options:
            raise ConfigurationError("pass guard= alone, or LoopGuard options")
        try:
            self.guard = guard if guard is not None else LoopGuard(**options)
        except TypeError as exc:  # an unknown keyword
            raise ConfigurationError(f"LoopGuardMiddleware: {exc}") from exc
        self.exit_behavior: ExitBehavior = exit_behavior
        self._learn_tools = not self.guard.specs

    # ------------------------------------------------------------------ model call
    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Any]
    ) -> Any:
        """Call the model; note the offered tools' traits when they changed."""
        return self._noted(request, handler(request))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[Any]]
    ) -> Any:
        """Async twin of :meth:`wrap_model_call`."""
        return self._noted(request, await handler(request))

    def _noted(self, request: ModelRequest[Any], response: Any) -> Any:
        if not self._learn_tools:
            return response
        traits = _traits(request.tools)
        if traits == ((request.state or {}).get(TOOLS_KEY) or {}):
            return response
        return with_update(response, {TOOLS_KEY: traits})

    # ------------------------------------------------------------------ after the model
    @hook_config(can_jump_to=["end"])
    def after_model(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Nudge or stop the calls that would continue a loop (see the class docstring)."""
        messages = messages_of(state)
        return self._act(state, Conversation.read(messages), runtime)

    @hook_config(can_jump_to=["end"])
    async def aafter_model(self, state: LoopGuardState,
                           runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`after_model`."""
        return self.after_model(state, runtime)

    # ------------------------------------------------------------------ before the model
    @hook_config(can_jump_to=["end"])
    def before_model(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Check a step whose calls another guard refused before this one saw them.

        A middleware later in the list whose ``after_model`` answers every call of a step
        and jumps straight back to the model (``GuardMiddleware`` does when it refuses all
        of them) skips this one's ``after_model``; the step is checked here instead, before
        the next model call: a nudge is added to those answers, or the turn stops.
        """
        conv = Conversation.read(messages_of(state))
        if not unseen_refused_step(conv):
            return None
        return self._act(state, conv, runtime)

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: LoopGuardState,
                            runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`before_model`."""
        return self.before_model(state, runtime)

    def _act(self, state: Mapping[str, Any], conv: Conversation,
             runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Check the latest step; the state update that nudges or stops, or ``None``."""
        turn = _turn(conv.messages)
        record = _record(state)
        stored: dict[str, int] = dict(record.get("nudges") or {}) \
            if record.get("turn") == turn else {}
        derived = nudges_from_messages(conv)
        nudges = {s: max(stored.get(s, 0), derived.get(s, 0)) for s in {*stored, *derived}}
        verdicts = self.guard.check(conv, nudges=nudges, tools=self._tools(state))
        if not verdicts:
            return None
        plan = plan_loop_step(conv, verdicts)
        writer = getattr(runtime, "stream_writer", None)
        for v in verdicts:
            if plan.stop and v.action != "stop":
                continue
            emit({"event": "loop", "action": v.action, "kind": v.kind, "tool": v.tool_name,
                  "tool_call_id": v.tool_call_id, "signature": v.signature,
                  "count": v.count, "reason": v.reason[:500]}, writer)
        for signature in plan.nudged:
            nudges[signature] = nudges.get(signature, 0) + 1
        update: dict[str, Any] = {}
        if plan.messages:
            update["messages"] = plan.messages
        if plan.stop:
            assert plan.stop_verdict is not None
            update["toolguard"] = {"loop_stops": 1}
            update[LOOP_KEY] = {"turn": turn, "nudges": nudges,
                                "stop": plan.stop_verdict.model_dump(mode="json")}
            update["jump_to"] = "end"
        else:
            update["toolguard"] = {"loop_nudges": len(plan.nudged)}
            update[LOOP_KEY] = {"turn": turn, "nudges": nudges, "stop": None}
        return update

    # ------------------------------------------------------------------ after the agent
    def after_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Raise :class:`LoopDetectedError` for a stop in this turn (``exit_behavior="error"``).

        Raises:
            toolguard.errors.LoopDetectedError: The turn was stopped by the loop guard.
        """
        if self.exit_behavior != "error":
            return None
        record = _record(state)
        stop = record.get("stop")
        if not stop or record.get("turn") != _turn(messages_of(state)):
            return None
        verdict = LoopVerdict.model_validate(stop)
        raise LoopDetectedError(
            f"tool-call loop stopped ({verdict.kind}, {verdict.signature}): {verdict.reason}",
            verdict=verdict)

    async def aafter_agent(self, state: LoopGuardState,
                           runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`after_agent`."""
        return self.after_agent(state, runtime)

    # ------------------------------------------------------------------ helpers
    def _tools(self, state: Mapping[str, Any]) -> list[ToolSpec] | None:
        if not self._learn_tools:
            return None
        traits = state.get(TOOLS_KEY) or {}
        return [ToolSpec(name=name, **dict(t)) for name, t in traits.items()]


def _record(state: Mapping[str, Any]) -> dict[str, Any]:
    value = state.get(LOOP_KEY)
    return dict(value) if isinstance(value, Mapping) else {}


def _turn(messages: Sequence[BaseMessage]) -> str:
    """The current user turn: id (else position) of the latest ``HumanMessage``."""
    for pos in range(len(messages) - 1, -1, -1):
        m = messages[pos]
        if isinstance(m, HumanMessage):
            return str(m.id) if m.id else f"#{pos}"
    return ""


def _traits(tools: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """``effects`` / ``repeatable`` of LangChain tools that declare them (metadata)."""
    out: dict[str, dict[str, Any]] = {}
    for t in tools:
        if not isinstance(t, BaseTool):
            continue
        meta = declared_traits(t.metadata)  # toolguard's keys, else MCP annotations
        entry: dict[str, Any] = {}
        if meta.get("effects") in ("read", "write"):
            entry["effects"] = meta["effects"]
        if meta.get("repeatable"):
            entry["repeatable"] = True
        if entry:
            out[t.name] = entry
    return out
