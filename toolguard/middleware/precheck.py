"""The Structured Verification pre-check (ICT paper) as LangChain v1 ``create_agent`` middleware.

Example:
    >>> from toolguard import PrecheckMiddleware
    >>> middleware = PrecheckMiddleware()   # deterministic rules over the agent's tools
    >>> # agent = create_agent(model, tools, middleware=[middleware], checkpointer=saver)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Annotated, Any, Literal, NotRequired

from langchain.agents.middleware.types import ModelRequest, PrivateStateAttr, hook_config
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.runtime import Runtime
from typing_extensions import Unpack

from toolguard.errors import ConfigurationError
from toolguard.middleware._base import ToolguardMiddleware, ToolguardState, with_update
from toolguard.precheck import Precheck, PrecheckDecision, PrecheckOptions, abstain_message
from toolguard.protocol import AskQuestion, ask_user
from toolguard.state import can_interrupt, emit, validate_ask_user

__all__ = ["PrecheckMiddleware", "PrecheckMiddlewareState"]

PENDING_KEY = "toolguard_precheck"
_CACHE_SIZE = 64


class PrecheckMiddlewareState(ToolguardState):
    """:class:`~toolguard.middleware._base.ToolguardState` plus the pending question.

    ``toolguard_precheck`` (private) holds an ``ask_user`` decision waiting on the user, so
    a resume (even after a restart) asks exactly what was asked and an LLM pre-check is not
    asked twice.
    """

    toolguard_precheck: NotRequired[Annotated[dict[str, Any] | None, PrivateStateAttr]]


class PrecheckMiddleware(ToolguardMiddleware[PrecheckMiddlewareState]):
    """Decide before the model acts: proceed, ask the user, or say no tool fits (ICT).

    On each new user request (the model call right after a ``HumanMessage``), the
    pre-check reads the conversation's goal (:class:`~toolguard.conversation.Goal`) and
    the tools the model is offered:

    - ``proceed``: the model is called as usual.
    - ``no_suitable_tool`` (RelyToolBench's ChangeTools): the model is **not** called; the
      turn ends with a message to the user (``response_metadata["toolguard"] ==
      "no_suitable_tool"``).
    - ``ask_user`` (TalkToUser): the model is not called; its answer is the question
      (``"ask_user"``).  With a checkpointer (``ask_user="auto"``) the graph then pauses
      with an :class:`~toolguard.protocol.AskUserRequest`; on ``Command(resume=answer)``
      the answer joins the conversation as a user message and the model acts on the
      request and the answer.  Without one, the turn ends with the question and the
      user's next message is read together with the request it answers.

    The pre-check never asks twice in a row: after the user answered a question toolguard
    asked, ``ask_user`` becomes ``proceed`` (when unsure, proceed).  LLM modes call their
    model as an internal call: it never appears in the agent's message stream.  Counters
    ``precheck_proceed`` / ``precheck_ask_user`` / ``precheck_no_suitable_tool`` go into
    ``state["toolguard"]``.

    Args:
        precheck: A configured :class:`~toolguard.precheck.Precheck` (its tools), used as
            is; mutually exclusive with ``tools`` and options.
        tools: Decide over these tools instead of the model call's tools.
        ask_user: ``"auto"``, ``"interrupt"`` or ``"end"`` (see above).
        **options: Keyword options of :class:`~toolguard.precheck.Precheck` (``mode``,
            ``model``, ``fallback``, ``relevance``, ``missing_info``; for
            ``mode="learned"``: ``verifier``, ``fit_threshold``, ``slot_threshold``,
            ``top_k``, ...).  One verifier folder is loaded once, whatever the tool sets.

    Raises:
        toolguard.errors.ConfigurationError: An unknown ``ask_user`` mode, ``precheck``
            together with ``tools`` or options, or an invalid pre-check option.
    """

    state_schema = PrecheckMiddlewareState

    def __init__(
        self,
        *,
        precheck: Precheck | None = None,
        tools: Iterable[Any] | None = None,
        ask_user: Literal["auto", "interrupt", "end"] = "auto",
        **options: Unpack[PrecheckOptions],
    ) -> None:
        super().__init__()
        validate_ask_user(ask_user)
        if precheck is not None and (tools is not None or options):
            raise ConfigurationError("pass precheck= alone, or tools= / Precheck options")
        self.ask_user = ask_user
        self.options: PrecheckOptions = options
        self._fixed = precheck if precheck is not None else (
            Precheck(list(tools), **self.options) if tools is not None else None)
        if self._fixed is None:
            Precheck([], **self.options)  # validate the options now
        self._prechecks: dict[tuple[Any, ...], Precheck] = {}

    def precheck_for(self, tools: Sequence[BaseTool | dict[str, Any]]) -> Precheck:
        """The pre-check for a tool set (built once per set; the fixed one if given)."""
        if self._fixed is not None:
            return self._fixed
        key = tuple(id(t) if not isinstance(t, dict) else repr(sorted(t.items()))
                    for t in tools)
        found = self._prechecks.get(key)
        if found is None:
            if len(self._prechecks) >= _CACHE_SIZE:
                self._prechecks.pop(next(iter(self._prechecks)))
            found = self._prechecks[key] = Precheck(list(tools), **self.options)
        return found

    # ------------------------------------------------------------------ model call
    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Any]
    ) -> Any:
        """Decide first; call the model only on ``proceed``."""
        history = _history(request)
        if not _decides(request.messages):
            return handler(request)
        decision = self.precheck_for(list(request.tools)).decide(history)
        if decision.decision == "proceed":
            return with_update(handler(request), _counters(decision))
        return self._abstain(decision)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[Any]]
    ) -> Any:
        """Async twin of :meth:`wrap_model_call`."""
        history = _history(request)
        if not _decides(request.messages):
            return await handler(request)
        decision = await self.precheck_for(list(request.tools)).adecide(history)
        if decision.decision == "proceed":
            return with_update(await handler(request), _counters(decision))
        return self._abstain(decision)

    def _abstain(self, decision: PrecheckDecision) -> Any:
        update: dict[str, Any] = _counters(decision)
        if decision.decision == "ask_user" and can_interrupt(self.ask_user, _config()):
            update[PENDING_KEY] = decision.model_dump(mode="json")
        emit({"event": "precheck", "decision": decision.decision, "reason": decision.reason,
              "missing": list(decision.missing)})
        return with_update(abstain_message(decision), update)

    # ------------------------------------------------------------------ after the model
    @hook_config(can_jump_to=["model"])
    def after_model(self, state: PrecheckMiddlewareState,
                    runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Ask the pending question (interrupt); the answer goes to the model as a user turn."""
        pending = state.get(PENDING_KEY)
        if not pending:
            return None
        decision = PrecheckDecision.model_validate(pending)
        (answer,) = ask_user([AskQuestion(
            tool_call_id=None, tool_name=decision.tool, question=decision.message,
            missing=list(decision.missing), source="precheck")])
        return {"messages": [HumanMessage(answer.text)], PENDING_KEY: None, "jump_to": "model"}

    @hook_config(can_jump_to=["model"])
    async def aafter_model(self, state: PrecheckMiddlewareState,
                           runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`after_model`."""
        return self.after_model(state, runtime)


def _history(request: ModelRequest[Any]) -> list[BaseMessage]:
    """The conversation the model would see, as is (the pre-check keeps it between calls)."""
    return request.messages  # type: ignore[return-value]


def _decides(messages: Sequence[BaseMessage]) -> bool:
    """A model call right after a user message (not after tool results)."""
    return bool(messages) and isinstance(messages[-1], HumanMessage)


def _counters(decision: PrecheckDecision) -> dict[str, Any]:
    return {"toolguard": {f"precheck_{decision.decision}": 1}}


def _config() -> Any:
    try:
        return get_config()
    except RuntimeError:  # pragma: no cover - outside a graph run
        return {}
