"""A LangGraph node that guards tool calls between the model node and the tool node.

Wiring (any ``StateGraph`` with a ``messages`` channel)::

    guard = GuardNode(Guard(tools))
    builder.add_node("model", call_model)
    builder.add_node("guard", guard)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "guard" if needs_guard(s) else END, ["guard", END])
    builder.add_conditional_edges("guard", guard.route, ["tools", "model", END])
    builder.add_edge("tools", "model")

:func:`needs_guard` routes to the guard also when a message's calls are all malformed
(``invalid_tool_calls`` only, which a check of ``tool_calls`` alone would miss).

The node answers every call that is not allowed with exactly one ``ToolMessage``
(``status="error"``, the verdict's actionable text); :meth:`GuardNode.route` then sends
only the unanswered (allowed) calls to the tool node, one ``Send`` each, so a blocked
call never reaches a tool.  ``ask_user`` verdicts call :func:`langgraph.types.interrupt`
when the graph has a checkpointer; the resume value (the user's answer) is written into
the call's ``ToolMessage`` and the model goes on.  Without a checkpointer the turn ends
with an ``AIMessage`` asking the question, and the message's other calls are answered as
not executed (the history stays valid: every call has one answer before the question).

Counters (see :class:`GuardCounters`) are written to ``counters_key`` when set, so they
live in graph state and survive checkpoints and resumes.

Known limitation: LangGraph re-runs a node on resume, so the verdicts of a step waiting
on an interrupt are kept in process memory (bounded) and reused when it resumes in the same
process.  After a restart they are recomputed: identical in deterministic mode, possibly
different with an LLM judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph import END, MessagesState
from langgraph.types import Send, interrupt
from typing_extensions import TypedDict

from toolguard.context import parse_args
from toolguard.controller import merge_controller_counters
from toolguard.guard import Guard
from toolguard.types import HALLUCINATION_TYPES, Verdict

AskUserMode = Literal["auto", "interrupt", "end"]

# langgraph._internal._constants.CONFIG_KEY_CHECKPOINTER
_CHECKPOINTER_KEY = "__pregel_checkpointer"


def validate_ask_user(mode: str) -> None:
    """Check an ``ask_user`` option of a node (shared by the guard, pre-check and KG nodes).

    Raises:
        ValueError: ``mode`` is not ``"auto"``, ``"interrupt"`` or ``"end"``.
    """
    if mode not in ("auto", "interrupt", "end"):
        raise ValueError(f"ask_user must be 'auto', 'interrupt' or 'end', got {mode!r}")


def can_interrupt(mode: str, config: RunnableConfig) -> bool:
    """Whether a node in ``ask_user`` ``mode`` asks through ``interrupt()``.

    ``"interrupt"``: always; ``"end"``: never (the turn ends with the question);
    ``"auto"``: when the running graph has a checkpointer (an interrupt needs one to resume).
    """
    if mode != "auto":
        return mode == "interrupt"
    return (config.get("configurable") or {}).get(_CHECKPOINTER_KEY) is not None


class GuardCounters(TypedDict, total=False):
    """Running totals kept in graph state (summed by :func:`merge_counters`).

    Keys: ``checked`` (calls seen), ``allowed``, ``blocked``, ``asked_user``,
    ``change_tools``, and one per hallucination type (``type``, ``timing``, ``format``,
    ``content``) counting calls not allowed for that reason.
    """

    checked: int
    allowed: int
    blocked: int
    asked_user: int
    change_tools: int
    type: int
    timing: int
    format: int
    content: int


def merge_counters(
    left: Mapping[str, int] | None, right: Mapping[str, int] | None
) -> dict[str, int]:
    """Reducer that adds counters key by key (``None`` counts as empty)."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        out[key] = out.get(key, 0) + int(value)
    return out


class GuardState(MessagesState):
    """``MessagesState`` plus the guard's counters and pending questions.

    ``toolguard`` holds :class:`GuardCounters`; ``toolguard_pending`` the ``ask_user``
    verdicts waiting on the user (see :class:`AskUserNode`); ``toolguard_controller`` the
    retry controller's counters (see :class:`~toolguard.controller.RetryController`).
    """

    toolguard: Annotated[dict[str, int], merge_counters]
    toolguard_pending: list[dict[str, Any]]
    toolguard_controller: Annotated[dict[str, Any], merge_controller_counters]


def count_verdicts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """Counters for one batch of verdicts (see :class:`GuardCounters`)."""
    out: dict[str, int] = {"checked": len(verdicts), "allowed": 0, "blocked": 0,
                           "asked_user": 0, "change_tools": 0}
    out.update(dict.fromkeys(HALLUCINATION_TYPES, 0))
    names = {"allow": "allowed", "block": "blocked", "ask_user": "asked_user",
             "change_tools": "change_tools"}
    for v in verdicts:
        out[names[v.action]] += 1
        if v.action != "allow" and v.hallucination is not None:
            out[v.hallucination] += 1
    return out


class GuardNode(RunnableLambda[Any, dict[str, Any]]):
    """Drop-in LangGraph node running a :class:`~toolguard.guard.Guard` (sync and async).

    Args:
        guard: The guard to run.
        messages_key: The state key holding the messages.
        counters_key: State key for :class:`GuardCounters` (needs a reducer such as
            :func:`merge_counters`, as in :class:`GuardState`), or ``None`` to keep none.
        ask_user: ``"auto"`` interrupts when the graph has a checkpointer and otherwise
            ends the turn with the question; ``"interrupt"`` / ``"end"`` force one way.
        tools_node: Name of the tool node :meth:`route` sends allowed calls to.
        model_node: Name of the model node :meth:`route` goes back to.
        pending_key: State key (last-value channel) for ``ask_user`` verdicts waiting on the
            user.  When set, the guard node does not interrupt itself: it stores the verdicts
            and :meth:`route` goes to ``ask_node`` (an :class:`AskUserNode`), which interrupts.
            The verdicts then live in graph state, so a resume after a restart answers
            exactly what was asked (an LLM judge is not asked again).  ``None``: the guard
            node interrupts itself and keeps the verdicts in process memory until resumed.
        ask_node: Name of the :class:`AskUserNode`.
        grounding_key: State key holding texts whose values count as grounded for the
            content detector (a list of strings, e.g. the facts a
            :class:`~toolguard.kg.KGResolveNode` resolved into ``state["kg_grounding"]``);
            ``None``: only the conversation grounds values.
        name: The node's name.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        messages_key: str = "messages",
        counters_key: str | None = None,
        ask_user: AskUserMode = "auto",
        tools_node: str = "tools",
        model_node: str = "model",
        pending_key: str | None = None,
        ask_node: str = "ask_user",
        grounding_key: str | None = None,
        name: str = "guard",
    ) -> None:
        validate_ask_user(ask_user)
        super().__init__(self._run, afunc=self._arun, name=name)
        self.guard = guard
        self.messages_key = messages_key
        self.counters_key = counters_key
        self.ask_user = ask_user
        self.tools_node = tools_node
        self.model_node = model_node
        self.pending_key = pending_key
        self.ask_node = ask_node
        self.grounding_key = grounding_key
        # verdicts of steps waiting on an interrupt, so a resume does not re-judge them
        # (an LLM judge could answer differently); in-process, bounded
        self._memo: dict[tuple[Any, ...], list[Verdict]] = {}
        self._memo_size = 1024

    # ------------------------------------------------------------------ node
    def _messages(self, state: Any) -> list[AnyMessage]:
        msgs = state.get(self.messages_key) if isinstance(state, Mapping) else getattr(
            state, self.messages_key, None)
        if not msgs:
            raise ValueError(f"GuardNode: no messages under {self.messages_key!r}")
        return list(msgs)

    def _prepare(
        self, state: Any, config: RunnableConfig
    ) -> tuple[list[AnyMessage], AIMessage | None, list[Verdict] | None, tuple[Any, ...] | None]:
        """Prepare one step.

        Returns:
            The messages with unique call ids, the rewritten ``AIMessage`` (if ids were
            fixed), the verdicts remembered for this step (a resume re-runs the node), and
            the memo key.
        """
        messages = self._messages(state)
        last = messages[-1]
        if not isinstance(last, AIMessage) or not (last.tool_calls or last.invalid_tool_calls):
            return messages, None, [], None
        fixed = _with_unique_ids(last)
        if fixed is not None:
            messages = [*messages[:-1], fixed]
        conf = config.get("configurable") or {}
        key = (conf.get("thread_id"), conf.get("checkpoint_ns", ""), last.id,
               len(messages)) if last.id and conf.get("thread_id") is not None else None
        return messages, fixed, self._memo.get(key) if key else None, key

    def _grounding(self, state: Any) -> tuple[str, ...]:
        """Texts under ``grounding_key`` (a str or a list of values; others ignored)."""
        if self.grounding_key is None:
            return ()
        value = _get(state, self.grounding_key)
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list | tuple):
            return tuple(str(v) for v in value if v is not None)
        return ()

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages, fixed, verdicts, key = self._prepare(state, config)
        if verdicts is None:
            verdicts = self.guard.check(messages, extra_grounding=self._grounding(state))
        return self._update(messages, fixed, verdicts, config, key)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages, fixed, verdicts, key = self._prepare(state, config)
        if verdicts is None:
            verdicts = await self.guard.acheck(messages,
                                               extra_grounding=self._grounding(state))
        return self._update(messages, fixed, verdicts, config, key)

    def _update(
        self,
        messages: list[AnyMessage],
        fixed: AIMessage | None,
        verdicts: list[Verdict],
        config: RunnableConfig,
        key: tuple[Any, ...] | None,
    ) -> dict[str, Any]:
        """Shared by sync and async: ToolMessages for refused calls, interrupt or question."""
        if not verdicts:
            return {}
        out: list[BaseMessage] = [fixed] if fixed is not None else []
        asks = [v for v in verdicts if v.action == "ask_user"]
        end_turn = bool(asks) and not self._can_interrupt(config)
        deferred = bool(asks) and not end_turn and self.pending_key is not None
        answers: dict[str, str] = {}
        if asks and not end_turn and not deferred:
            if key is not None:  # the resume re-runs this node: keep the verdicts asked about
                self._memo[key] = verdicts
                while len(self._memo) > self._memo_size:
                    self._memo.pop(next(iter(self._memo)))
            answers = _collect_answers(asks)
            if key is not None:
                self._memo.pop(key, None)
        for v in verdicts:
            if v.action == "ask_user" and deferred:
                continue  # answered by the ask-user node after the interrupt
            if v.action == "ask_user" and not end_turn:
                out.append(_answer_message(v, answers.get(v.tool_call_id or "", "")))
            elif v.action != "allow":
                out.append(_tool_message(v, v.feedback()))
            elif end_turn:
                out.append(_tool_message(
                    v, "Not executed: waiting for the user's answer to a clarification "
                       "question asked in the same step.", hallucination=False))
        if end_turn:
            questions = [v.question or v.reason for v in asks]
            out.append(AIMessage(
                "\n".join(dict.fromkeys(questions)),
                response_metadata={"toolguard": "ask_user"},
            ))
        update: dict[str, Any] = {self.messages_key: out} if out else {}
        if deferred and self.pending_key is not None:
            update[self.pending_key] = [v.model_dump(mode="json") for v in asks]
        if self.counters_key is not None:
            update[self.counters_key] = count_verdicts(verdicts)
        return update

    def _can_interrupt(self, config: RunnableConfig) -> bool:
        return can_interrupt(self.ask_user, config)

    # ------------------------------------------------------------------ routing
    def route(self, state: Any) -> list[Send] | str:
        """Conditional edge after the guard node.

        Returns:
            ``ask_node`` while ``ask_user`` verdicts wait in ``pending_key``; else one
            ``Send(tools_node, ...)`` per allowed (still unanswered) call; else ``END`` if the
            guard ended the turn with a question; else ``model_node``.
        """
        messages = self._messages(state)
        if self.pending_key is not None and _get(state, self.pending_key):
            return self.ask_node
        last = messages[-1]
        if isinstance(last, AIMessage) and (last.response_metadata or {}).get(
            "toolguard"
        ) == "ask_user":
            return END
        pending = _pending(messages)
        if not pending:
            return self.model_node
        snapshot = dict(state) if isinstance(state, Mapping) else state
        return [
            Send(self.tools_node, {"__type": "tool_call_with_context",
                                   "tool_call": _parsed(call), "state": snapshot})
            for call in pending
        ]


def needs_guard(state: Any, *, messages_key: str = "messages") -> bool:
    """Whether the last message is an ``AIMessage`` with tool calls, valid or not.

    Use it instead of ``tools_condition`` in front of the guard: a message with only
    ``invalid_tool_calls`` (malformed arguments) must reach the guard to be answered.
    """
    msgs = state.get(messages_key) if isinstance(state, Mapping) else getattr(
        state, messages_key, None)
    last = msgs[-1] if msgs else None
    return isinstance(last, AIMessage) and bool(last.tool_calls or last.invalid_tool_calls)


def _parsed(call: Any) -> Any:
    """A tool call whose JSON-string arguments are parsed (the guard already checked them)."""
    if isinstance(call.get("args"), str):
        args, _ = parse_args(call["args"])
        return {**call, "args": args or {}}
    return call


def _with_unique_ids(message: AIMessage) -> AIMessage | None:
    """A copy of ``message`` whose tool calls have distinct, non-empty ids.

    ``None`` if they already do.  The copy keeps the message id, so ``add_messages``
    replaces the original in place.
    """
    seen: set[str] = set()
    calls, changed_valid = _unique_ids(message.tool_calls, "toolguard_call", seen)
    invalid, changed_invalid = _unique_ids(message.invalid_tool_calls, "toolguard_invalid", seen)
    if not (changed_valid or changed_invalid):
        return None
    return message.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


def _unique_ids(calls: Sequence[Any], prefix: str, seen: set[str]) -> tuple[list[Any], bool]:
    """Calls with ids made non-empty and unique (among ``seen``, which is updated)."""
    out: list[Any] = []
    changed = False
    for i, call in enumerate(calls):
        cid = call.get("id") or f"{prefix}_{i}"
        while cid in seen:
            cid = f"{cid}_{i}"
        changed |= cid != call.get("id")
        seen.add(cid)
        out.append({**call, "id": cid})
    return out, changed


def _pending(messages: Sequence[BaseMessage]) -> list[Any]:
    """Tool calls of the last ``AIMessage`` that no ``ToolMessage`` after it answers."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, AIMessage):
            answered = {t.tool_call_id for t in messages[i + 1:] if isinstance(t, ToolMessage)}
            return [tc for tc in m.tool_calls if tc.get("id") not in answered]
    return []


def _collect_answers(asks: list[Verdict]) -> dict[str, str]:
    payload = {
        "type": "toolguard.ask_user",
        "questions": [
            {
                "tool_call_id": v.tool_call_id,
                "tool_name": v.tool_name,
                "question": v.question or v.reason,
                "missing": [e.parameter for e in v.evidence if e.parameter],
            }
            for v in asks
        ],
    }
    answer = interrupt(payload)
    if isinstance(answer, Mapping):
        return {str(k): str(v) for k, v in answer.items()}
    return {v.tool_call_id or "": str(answer) for v in asks}


def _get(state: Any, key: str) -> Any:
    return state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)


def _answer_message(v: Verdict, answer: str) -> ToolMessage:
    return _tool_message(
        v, f"{v.reason}\nThe user was asked: {v.question}\nThe user answered: {answer}")


class AskUserNode(RunnableLambda[Any, dict[str, Any]]):
    """Interrupts for the ``ask_user`` verdicts a :class:`GuardNode` left in ``pending_key``.

    On resume (``Command(resume=answer)``: a string for every question, or a dict
    ``{tool_call_id: answer}``) each asked call gets one ``ToolMessage`` carrying the
    question and the answer, and the pending list is cleared.  Route it with the guard's
    :meth:`GuardNode.route`.  The node holds no judge, so re-running it on resume is cheap
    and cannot change what was asked.

    Args:
        pending_key: The state key the guard node writes pending verdicts to.
        messages_key: The state key holding the messages.
        name: The node's name.
    """

    def __init__(
        self,
        *,
        pending_key: str = "toolguard_pending",
        messages_key: str = "messages",
        name: str = "ask_user",
    ) -> None:
        super().__init__(self._run, name=name)
        self.pending_key = pending_key
        self.messages_key = messages_key

    def _run(self, state: Any) -> dict[str, Any]:
        pending = [Verdict.model_validate(d) for d in _get(state, self.pending_key) or []]
        if not pending:
            return {}
        answers = _collect_answers(pending)
        return {
            self.messages_key: [
                _answer_message(v, answers.get(v.tool_call_id or "", "")) for v in pending
            ],
            self.pending_key: [],
        }


def _tool_message(v: Verdict, content: str, *, hallucination: bool = True) -> ToolMessage:
    return ToolMessage(
        content=content,
        tool_call_id=v.tool_call_id or "",
        name=v.tool_name,
        status="error",
        artifact={"toolguard": v.model_dump(mode="json")} if hallucination else None,
    )


__all__ = [
    "AskUserNode",
    "GuardCounters",
    "GuardNode",
    "GuardState",
    "count_verdicts",
    "merge_counters",
    "needs_guard",
]
