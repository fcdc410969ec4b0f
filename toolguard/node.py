"""A LangGraph node that guards tool calls between the model node and the tool node.

Wiring (any ``StateGraph`` with a ``messages`` channel)::

    guard = GuardNode(Guard(tools))
    builder.add_node("model", call_model)
    builder.add_node("guard", guard)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "guard", END: END})
    builder.add_conditional_edges("guard", guard.route, ["tools", "model", END])
    builder.add_edge("tools", "model")

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph import END, MessagesState
from langgraph.types import Send, interrupt
from typing_extensions import TypedDict

from toolguard.guard import Guard
from toolguard.types import HALLUCINATION_TYPES, Verdict

AskUserMode = Literal["auto", "interrupt", "end"]

_CHECKPOINTER_KEY = "__pregel_checkpointer"  # langgraph._internal._constants.CONFIG_KEY_CHECKPOINTER


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
    """``MessagesState`` plus the guard's counters under ``toolguard``."""

    toolguard: Annotated[dict[str, int], merge_counters]


def count_verdicts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """Counters for one batch of verdicts (see :class:`GuardCounters`)."""
    out = {"checked": len(verdicts), "allowed": 0, "blocked": 0, "asked_user": 0,
           "change_tools": 0, **dict.fromkeys(HALLUCINATION_TYPES, 0)}
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
        name: str = "guard",
    ) -> None:
        if ask_user not in ("auto", "interrupt", "end"):
            raise ValueError(f"ask_user must be 'auto', 'interrupt' or 'end', got {ask_user!r}")
        super().__init__(self._run, afunc=self._arun, name=name)
        self.guard = guard
        self.messages_key = messages_key
        self.counters_key = counters_key
        self.ask_user = ask_user
        self.tools_node = tools_node
        self.model_node = model_node

    # ------------------------------------------------------------------ node
    def _messages(self, state: Any) -> list[AnyMessage]:
        msgs = state.get(self.messages_key) if isinstance(state, Mapping) else getattr(
            state, self.messages_key, None)
        if not msgs:
            raise ValueError(f"GuardNode: no messages under {self.messages_key!r}")
        return list(msgs)

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = self._messages(state)
        if not _pending(messages):
            return {}
        verdicts = self.guard.check(messages)
        return self._update(messages, verdicts, config)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = self._messages(state)
        if not _pending(messages):
            return {}
        verdicts = await self.guard.acheck(messages)
        return self._update(messages, verdicts, config)

    def _update(
        self, messages: list[AnyMessage], verdicts: list[Verdict], config: RunnableConfig
    ) -> dict[str, Any]:
        """Shared by sync and async: ToolMessages for refused calls, interrupt or question."""
        out: list[BaseMessage] = []
        asks = [v for v in verdicts if v.action == "ask_user"]
        end_turn = bool(asks) and not self._can_interrupt(config)
        answers: dict[str, str] = {}
        if asks and not end_turn:
            answers = _collect_answers(asks)
        for v in verdicts:
            call_id = v.tool_call_id or ""
            if v.action == "ask_user" and not end_turn:
                out.append(_tool_message(
                    v, f"{v.reason}\nThe user was asked: {v.question}\n"
                       f"The user answered: {answers.get(call_id, '')}"))
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
        if self.counters_key is not None:
            update[self.counters_key] = count_verdicts(verdicts)
        return update

    def _can_interrupt(self, config: RunnableConfig) -> bool:
        if self.ask_user == "interrupt":
            return True
        if self.ask_user == "end":
            return False
        return (config.get("configurable") or {}).get(_CHECKPOINTER_KEY) is not None

    # ------------------------------------------------------------------ routing
    def route(self, state: Any) -> list[Send] | str:
        """Conditional edge after the guard node.

        Returns:
            One ``Send(tools_node, ...)`` per allowed (still unanswered) call; else
            ``END`` if the guard ended the turn with a question; else ``model_node``.
        """
        messages = self._messages(state)
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
            Send(self.tools_node, {"__type": "tool_call_with_context", "tool_call": call,
                                   "state": snapshot})
            for call in pending
        ]


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


def _tool_message(v: Verdict, content: str, *, hallucination: bool = True) -> ToolMessage:
    return ToolMessage(
        content=content,
        tool_call_id=v.tool_call_id or "",
        name=v.tool_name,
        status="error",
        artifact={"toolguard": v.model_dump(mode="json")} if hallucination else None,
    )


__all__ = [
    "GuardCounters",
    "GuardNode",
    "GuardState",
    "count_verdicts",
    "merge_counters",
]
