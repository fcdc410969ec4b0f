"""RelyToolBench's tool-hallucination guard as LangChain v1 ``create_agent`` middleware.

Example:
    >>> from langchain.agents import create_agent
    >>> from toolguard import GuardMiddleware
    >>> middleware = GuardMiddleware()          # the agent's own tools, deterministic rules
    >>> # agent = create_agent(model, tools, middleware=[middleware], checkpointer=saver)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired

from langchain.agents.middleware.types import (
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
    hook_config,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from typing_extensions import Unpack

from toolguard.conversation import message_text
from toolguard.guard import Guard, GuardOptions
from toolguard.middleware._base import ToolguardMiddleware, ToolguardState, with_update
from toolguard.protocol import ask_user
from toolguard.state import (
    can_interrupt,
    close_dangling_calls,
    count_verdicts,
    emit,
    merge_counters,
    validate_ask_user,
)
from toolguard.steps import (
    DEFAULT_MAX_REFUSED_STEPS,
    AskMode,
    look_up_first,
    plan_step,
    refused_steps,
    validate_refusal_budget,
    with_unique_ids,
)
from toolguard.types import Verdict

__all__ = ["GuardMiddleware", "GuardMiddlewareState", "not_answered_by_guard"]

logger = logging.getLogger("toolguard")

VERDICTS_KEY = "toolguard_verdicts"
GROUNDING_KEY = "kg_grounding"
_GUARD_CACHE_SIZE = 64

AskUserMode = Literal["auto", "interrupt", "end"]


class GuardMiddlewareState(ToolguardState):
    """:class:`~toolguard.middleware._base.ToolguardState` plus the guard's last verdicts.

    ``toolguard_verdicts`` holds the verdicts on the latest ``AIMessage`` (private),
    written by the model node and read by ``after_model``: checkpointed, so a resume after
    an ``ask_user`` interrupt (even in another process) answers exactly what was asked and
    an LLM judge is not asked twice.
    """

    toolguard_verdicts: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


class GuardMiddleware(ToolguardMiddleware[GuardMiddlewareState]):
    """Check every tool call the model proposes before it reaches a tool (RelyToolBench).

    - **Model call** (``wrap_model_call``): the calls of the model's ``AIMessage`` are
      checked against the tools the model was offered in that call (the agent's own
      tools; ``tools=`` overrides them), with the conversation the model saw plus the
      system prompt and any KG grounding.  Call ids are made unique.  The verdicts go into
      graph state with the message.
    - **After the model** (``after_model``): each refused call gets exactly one error
      ``ToolMessage`` before the tool node, so ``create_agent`` routes only the allowed
      ones (the pattern of ``HumanInTheLoopMiddleware``); a timing repeat gets the
      earlier result.  ``ask_user`` interrupts with a HITL-shaped
      :class:`~toolguard.protocol.AskUserRequest` when the agent has a checkpointer
      (``ask_user="auto"``), else the turn ends with the question; ``change_tools`` ends
      the turn with a message to the user.  A message with only malformed calls goes back
      to the model.  Verdicts that refused a call are sent as custom stream events
      (``stream_mode="custom"``: ``{"toolguard": {"event": "verdict", ...}}``).
    - **Before a run's first model call** (in ``wrap_model_call``, no graph node of its
      own): tool calls left unanswered when the user wrote a new message instead of
      answering a question are answered "not executed", before the new message, in the
      model's view and in state (with the model's answer), so the history stays valid.

    Place it **last** in ``middleware=[...]``: ``after_model`` hooks run in reverse order,
    so the guard checks a call before other middleware (``HumanInTheLoopMiddleware``)
    shows it to a person.  With HITL's batched mode, pass
    ``InterruptOnConfig(..., when=not_answered_by_guard)`` so a reviewer is never asked
    about a call the guard already refused; ``interrupt_mode="per_call"`` needs nothing
    (refused calls never reach the tool node).

    Args:
        tools: Check against these tools instead of the model call's tools (any form
            :class:`~toolguard.specs.ToolSpec` accepts); needed only outside
            ``create_agent``.
        guard: A configured :class:`~toolguard.guard.Guard` to use as is (its tools);
            mutually exclusive with ``tools`` and guard options.
        ask_user: ``"auto"`` (interrupt when the agent has a checkpointer, else end the
            turn with the question), ``"interrupt"`` or ``"end"``.
        max_refused_steps: The refusal budget: after this many model steps in a row whose
            calls were all blocked, the next such step ends the turn with a message to the
            user (:func:`toolguard.steps.refused_steps`), so a model that answers every
            refusal with another refused call stops within ``max_refused_steps + 1`` model
            calls of its first refusal; ``None``: no budget (the agent's recursion limit).
        look_up_first: Before asking the user for values that appear nowhere (a *content*
            verdict), send the call back to the model once per turn with the reason, so it
            can look the values up with another tool or ask in its own words
            (:func:`toolguard.steps.look_up_first`); needs two or more tools.
        **guard_options: Keyword options of :class:`~toolguard.guard.Guard`
            (``detectors``, ``relevance`` (``"learned"`` with ``verifier=``),
            ``judge_model``, ``content_llm_mode``, ``fail_open``, ``detector_options``).

    Raises:
        toolguard.errors.ConfigurationError: An unknown ``ask_user`` mode, ``guard``
            together with ``tools`` or options, an invalid guard option, or
            ``max_refused_steps`` < 1.
    """

    state_schema = GuardMiddlewareState

    def __init__(
        self,
        *,
        tools: Iterable[Any] | None = None,
        guard: Guard | None = None,
        ask_user: AskUserMode = "auto",
        max_refused_steps: int | None = DEFAULT_MAX_REFUSED_STEPS,
        look_up_first: bool = False,
        **guard_options: Unpack[GuardOptions],
    ) -> None:
        from toolguard.errors import ConfigurationError

        super().__init__()
        validate_ask_user(ask_user)
        self.max_refused_steps = validate_refusal_budget(max_refused_steps)
        if guard is not None and (tools is not None or guard_options):
            raise ConfigurationError("pass guard= alone, or tools= / Guard options")
        self.ask_user = ask_user
        self.look_up_first = bool(look_up_first)
        self.guard_options: GuardOptions = guard_options
        self._fixed = guard if guard is not None else (
            Guard(tools, **self.guard_options) if tools is not None else None)
        if self._fixed is None:
            Guard([], **self.guard_options)  # validate the options now, not at the first call
        self._guards: dict[tuple[Any, ...], Guard] = {}
        self._last: Guard | None = self._fixed

    # ------------------------------------------------------------------ guards
    def guard_for(self, tools: Sequence[BaseTool | Mapping[str, Any]]) -> Guard:
        """The guard for a tool set (built once per set and kept; the fixed one if given)."""
        if self._fixed is not None:
            return self._fixed
        key = tuple(_tool_key(t) for t in tools)
        guard = self._guards.get(key)
        if guard is None:
            if len(self._guards) >= _GUARD_CACHE_SIZE:
                self._guards.pop(next(iter(self._guards)))
            guard = self._guards[key] = Guard(tools, **self.guard_options)
        self._last = guard
        return guard

    # ------------------------------------------------------------------ model call
    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Any]
    ) -> Any:
        """Answer dangling calls, call the model, then check the calls of its answer."""
        request, repair = _repaired(request)
        response = _with_repair(handler(request), repair)
        prepared = self._prepare(request, response)
        if prepared is None:
            return response
        guard, history, message, grounding = prepared
        verdicts = guard.check([*history, message], extra_grounding=grounding)
        return self._checked(response, message, self._deferred(verdicts, history, guard))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[Any]]
    ) -> Any:
        """Async twin of :meth:`wrap_model_call`."""
        request, repair = _repaired(request)
        response = _with_repair(await handler(request), repair)
        prepared = self._prepare(request, response)
        if prepared is None:
            return response
        guard, history, message, grounding = prepared
        verdicts = await guard.acheck([*history, message], extra_grounding=grounding)
        return self._checked(response, message, self._deferred(verdicts, history, guard))

    def _prepare(
        self, request: ModelRequest[Any], response: Any
    ) -> tuple[Guard, list[BaseMessage], AIMessage, list[str]] | None:
        message = _ai_of(response)
        if message is None or not (message.tool_calls or message.invalid_tool_calls):
            return None
        skip = _structured_output_names(request)
        if skip and all(tc.get("name") in skip for tc in message.tool_calls) and not (
                message.invalid_tool_calls):
            return None  # structured output: create_agent answers it itself
        message = with_unique_ids(message, ensure_id=True) or message
        values: Any = (request.state or {}).get(GROUNDING_KEY) or []
        grounding = [str(v) for v in values]
        if request.system_message is not None:  # the system prompt grounds values too
            grounding.insert(0, message_text(request.system_message))
        # the conversation as the model saw it (no copy; the guard keeps it between steps)
        history: list[BaseMessage] = request.messages  # type: ignore[assignment]
        return self.guard_for(list(request.tools)), history, message, grounding

    def _deferred(self, verdicts: list[Verdict], before: Sequence[BaseMessage],
                  guard: Guard) -> list[Verdict]:
        """``verdicts`` with content asks sent back to the model first, if so configured."""
        if not self.look_up_first:
            return verdicts
        return look_up_first(verdicts, before, n_tools=len(guard.tools))

    def _checked(self, response: Any, message: AIMessage, verdicts: list[Verdict]) -> Any:
        """The model's result with ``message`` (unique call ids) and the verdicts in state."""
        original = _ai_of(response)
        if message is not original:
            inner = response.model_response if isinstance(response, ExtendedModelResponse) \
                else response
            if isinstance(inner, ModelResponse):
                inner = ModelResponse(result=[message if m is original else m
                                              for m in inner.result],
                                      structured_response=inner.structured_response)
            else:
                inner = message
            response = ExtendedModelResponse(
                model_response=inner if isinstance(inner, ModelResponse)
                else ModelResponse(result=[inner]),
                command=response.command if isinstance(response, ExtendedModelResponse)
                else None)
        return with_update(response, {
            VERDICTS_KEY: {"message_id": message.id,
                           "verdicts": [v.model_dump(mode="json") for v in verdicts]},
            "toolguard": count_verdicts(verdicts)})

    # ------------------------------------------------------------------ after the model
    @hook_config(can_jump_to=["end", "model"])
    def after_model(self, state: GuardMiddlewareState,
                    runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Answer refused calls, ask the user, or end the turn (see the class docstring)."""
        step = self._step(state)
        if step is None:
            return None
        message, verdicts, counts, before = step
        if not verdicts:
            return None
        if counts is None and all(v.action == "allow" for v in verdicts):
            _observe(verdicts, getattr(runtime, "stream_writer", None))
            return None  # counted with the model call's update; nothing to answer
        mode: AskMode = "interrupt" if can_interrupt(self.ask_user, _config()) else "end"
        refused = refused_steps(before)
        plan = plan_step(message, verdicts, ask=mode, refused_before=refused,
                         stop_after=self.max_refused_steps)
        if plan.questions:
            plan = plan_step(message, verdicts, ask=mode, answers=ask_user(plan.questions),
                             refused_before=refused,
                             stop_after=self.max_refused_steps)
        _observe(verdicts, getattr(runtime, "stream_writer", None))
        # counted with the model call's update unless checked here
        update: dict[str, Any] = {"toolguard": counts} if counts is not None else {}
        out: list[BaseMessage] = [plan.edited] if plan.edited is not None else []
        out.extend(plan.messages)
        if out:
            update["messages"] = out
        if plan.end_turn:
            update["jump_to"] = "end"
        elif plan.back_to_model:
            update["jump_to"] = "model"
        return update

    @hook_config(can_jump_to=["end", "model"])
    async def aafter_model(self, state: GuardMiddlewareState,
                           runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`after_model` (the verdicts were computed with ``acheck``)."""
        return self.after_model(state, runtime)

    def _step(self, state: Mapping[str, Any]
              ) -> tuple[AIMessage, list[Verdict], dict[str, int] | None,
                         list[BaseMessage]] | None:
        """The latest ``AIMessage`` with calls, its verdicts, counters to add, the messages before.

        The verdicts are those on its unanswered calls.  The counters are ``None`` when the
        model call checked (and counted) this message; else they count it here, minus the
        model call's count of a message another middleware removed in its place (each call
        is counted once).
        """
        messages = list(state.get("messages") or [])
        pos = next((i for i in range(len(messages) - 1, -1, -1)
                    if isinstance(messages[i], AIMessage | HumanMessage)), None)
        if pos is None or not isinstance(messages[pos], AIMessage):
            return None
        message = messages[pos]
        assert isinstance(message, AIMessage)
        if not (message.tool_calls or message.invalid_tool_calls):
            return None
        answered = {m.tool_call_id for m in messages[pos + 1:] if isinstance(m, ToolMessage)}
        if all(c.get("id") in answered for c in [*message.tool_calls,
                                                 *message.invalid_tool_calls]):
            return None  # nothing left to decide (a structured response create_agent answered)
        record = state.get(VERDICTS_KEY) or {}
        counts: dict[str, int] | None = None
        if record.get("message_id") == message.id and message.id is not None:
            verdicts = [Verdict.model_validate(v) for v in record.get("verdicts") or []]
        else:  # not checked in the model call (another middleware replaced the message)
            verdicts = self._recheck(messages[:pos + 1], state)
            counts = count_verdicts(verdicts)
            if record.get("verdicts") and record.get("message_id") not in {
                    m.id for m in messages}:  # the checked message was removed: uncount it
                old = count_verdicts([Verdict.model_validate(v) for v in record["verdicts"]])
                counts = merge_counters(counts, {k: -n for k, n in old.items()})
        return (message, [v for v in verdicts if v.tool_call_id not in answered], counts,
                messages[:pos])

    def _recheck(self, messages: list[BaseMessage], state: Mapping[str, Any]) -> list[Verdict]:
        guard = self._last
        if guard is None:
            logger.warning("toolguard: no tool set known for an unchecked AIMessage; its "
                           "calls are let through (pass tools= to GuardMiddleware)")
            return []
        grounding = [str(v) for v in state.get(GROUNDING_KEY) or []]
        return self._deferred(guard.check(messages, extra_grounding=grounding),
                              messages[:-1], guard)


def not_answered_by_guard(request: Any) -> bool:
    """``InterruptOnConfig(when=...)`` predicate: the call has no answer yet.

    With ``HumanInTheLoopMiddleware`` in batched mode, a reviewer is otherwise asked
    about calls the guard already refused (and a reject would answer them twice).
    """
    call_id = request.tool_call.get("id")
    return not any(isinstance(m, ToolMessage) and m.tool_call_id == call_id
                   for m in reversed(list(request.state.get("messages") or [])))


def _config() -> Any:
    try:
        return get_config()
    except RuntimeError:  # pragma: no cover - outside a graph run
        return {}


def _ai_of(response: Any) -> AIMessage | None:
    """The ``AIMessage`` of a model call's result."""
    if isinstance(response, AIMessage):
        return response
    inner = response.model_response if isinstance(response, ExtendedModelResponse) else response
    if isinstance(inner, ModelResponse):
        return next((m for m in reversed(inner.result) if isinstance(m, AIMessage)), None)
    return None


def _repaired(request: ModelRequest[Any]) -> tuple[ModelRequest[Any], list[BaseMessage]]:
    """The request with calls left dangling by a new user message answered, and the fix.

    Only a new user message can leave calls dangling, so only a model call whose last
    message is a ``HumanMessage`` (a run's first) looks, back to the previous user
    message.  Formerly a ``before_agent`` node; a graph node costs about as much per run
    as the guard's whole check.

    Returns:
        ``(request, [])`` when nothing dangles; else the request whose messages hold the
        answers before the user message, and the state update that does the same
        (:func:`~toolguard.state.close_dangling_calls`).
    """
    messages = request.messages
    if not messages or not isinstance(messages[-1], HumanMessage):
        return request, []
    fix = close_dangling_calls(messages)
    if not fix:
        return request, []
    repaired: Any = add_messages(list[Any](messages), list[Any](fix))
    return request.override(messages=repaired), fix


def _with_repair(response: Any, repair: list[BaseMessage]) -> Any:
    """``response`` with ``repair`` written to state before the model's messages."""
    if not repair:
        return response
    if isinstance(response, ExtendedModelResponse):
        return ExtendedModelResponse(model_response=_with_repair(response.model_response,
                                                                 repair),
                                     command=response.command)
    if isinstance(response, ModelResponse):
        return ModelResponse(result=[*repair, *response.result],
                             structured_response=response.structured_response)
    return ModelResponse(result=[*repair, response])


def _structured_output_names(request: ModelRequest[Any]) -> set[str]:
    """Names of structured-output tools (``ToolStrategy``): create_agent answers those."""
    specs = getattr(request.response_format, "schema_specs", None) or []
    return {str(getattr(s, "name", "")) for s in specs if getattr(s, "name", None)}


def _tool_key(tool: Any) -> Any:
    if isinstance(tool, Mapping):
        return json.dumps(tool, sort_keys=True, default=str)
    return ("tool", id(tool))


def _observe(verdicts: Sequence[Verdict], writer: Callable[[Any], None] | None) -> None:
    """Custom stream events for refused calls, and the verdicts on the LangSmith run."""
    for v in verdicts:
        if v.action != "allow":
            emit({"event": "verdict", "tool_call_id": v.tool_call_id, "tool": v.tool_name,
                  "action": v.action, "hallucination": v.hallucination,
                  "reason": v.reason[:500]}, writer)
    try:
        from langsmith.run_helpers import get_current_run_tree
    except ImportError:  # pragma: no cover - langsmith comes with langchain-core
        return
    run = get_current_run_tree()
    if run is not None:
        run.add_metadata({"toolguard_verdicts": [
            {"tool": v.tool_name, "action": v.action, "hallucination": v.hallucination}
            for v in verdicts]})
