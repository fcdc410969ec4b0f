"""Dialogue prefixes as LangChain messages.

A prefix is the system message, every earlier turn in full (``HumanMessage``; one
``AIMessage`` per gold call with ``tool_calls=[{"id": "call_n", ...}]`` followed by the
``ToolMessage`` with the backend's result; the assistant's closing ``AIMessage``), then the
current turn's user message and, optionally, its first ``step`` calls with their results.
"""

from __future__ import annotations

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)

from toolguard_evals.dialogues.records import Dialogue, Step, Turn

MARK_KEY = "toolguard"
"""``response_metadata`` key the pre-check marks its own abstain messages with
(``toolguard.precheck.MARK_KEY``)."""


def call_message(step: Step) -> AIMessage:
    """The ``AIMessage`` that makes the gold call ``step``."""
    return AIMessage(content="", tool_calls=[ToolCall(name=step.name, args=dict(step.args),
                                                       id=step.call_id, type="tool_call")])


def result_message(step: Step) -> ToolMessage:
    """The ``ToolMessage`` with the backend's result of ``step``."""
    return ToolMessage(content=step.result, tool_call_id=step.call_id, name=step.name,
                       status="success")


def turn_messages(turn: Turn, *, mark_abstains: bool = False) -> list[BaseMessage]:
    """A whole turn: user message, calls and results, the assistant's closing text.

    Args:
        turn: The turn.
        mark_abstains: Put ``response_metadata={"toolguard": label}`` on the closing message
            of an ``ask_user`` / ``no_suitable_tool`` turn, as toolguard's pre-check marks
            its own questions (off: the assistant wrote it itself).
    """
    out: list[BaseMessage] = [HumanMessage(turn.user)]
    for step in turn.steps:
        out += [call_message(step), result_message(step)]
    if turn.assistant:
        meta = ({MARK_KEY: turn.label} if mark_abstains and turn.label != "proceed" else {})
        out.append(AIMessage(content=turn.assistant, response_metadata=meta))
    return out


def to_messages(dialogue: Dialogue, *, turn: int | None = None, step: int | None = None,
                mark_abstains: bool = False) -> list[BaseMessage]:
    """The dialogue up to a decision point, as LangChain messages.

    Args:
        dialogue: The dialogue.
        turn: Stop in this turn (``None``: the whole dialogue).  The turn's user message is
            included; its calls only as far as ``step`` says.
        step: Calls of turn ``turn`` to include (with their results); ``None``: none.
        mark_abstains: See :func:`turn_messages`.

    Raises:
        IndexError: If ``turn`` or ``step`` is out of range.
    """
    msgs: list[BaseMessage] = [SystemMessage(dialogue.system)]
    if turn is None:
        for t in dialogue.turns:
            msgs += turn_messages(t, mark_abstains=mark_abstains)
        return msgs
    if not 0 <= turn < len(dialogue.turns):
        raise IndexError(f"{dialogue.id} has {len(dialogue.turns)} turns, not {turn + 1}")
    for t in dialogue.turns[:turn]:
        msgs += turn_messages(t, mark_abstains=mark_abstains)
    current = dialogue.turns[turn]
    msgs.append(HumanMessage(current.user))
    if step is not None:
        if not 0 <= step <= len(current.steps):
            raise IndexError(f"{dialogue.id} turn {turn} has {len(current.steps)} steps")
        for s in current.steps[:step]:
            msgs += [call_message(s), result_message(s)]
    return msgs


__all__ = ["MARK_KEY", "call_message", "result_message", "to_messages", "turn_messages"]
