"""The ask-user protocol: one typed interrupt for the guard, the pre-check and the KG resolver.

When toolguard needs something only the user can give (RelyToolBench's TalkToUser), it
pauses the graph with :func:`langgraph.types.interrupt` and an :class:`AskUserRequest`.
The request is shaped like LangChain's ``HITLRequest`` (``action_requests`` +
``review_configs``), so a UI that renders ``HumanInTheLoopMiddleware`` requests renders
toolguard's too, and carries toolguard's own ``questions`` list for UIs that know it::

    {"type": "toolguard.ask_user",
     "action_requests": [{"name": "book_table", "args": {...},
                          "description": "Which restaurant should I use for book_table?"}],
     "review_configs": [{"action_name": "book_table",
                         "allowed_decisions": ["respond", "edit", "approve", "reject"]}],
     "questions": [{"tool_call_id": "c1", "tool_name": "book_table", "source": "guard",
                    "question": "Which restaurant ...?", "missing": ["restaurant"]}]}

Resume with ``Command(resume=value)`` where ``value`` is one of (:data:`AskUserResume`):

- a string: the answer to every question;
- ``{tool_call_id: answer}`` (or ``{tool_name: answer}``) strings;
- a LangChain ``HITLResponse``, ``{"decisions": [...]}``, one decision per action request:
  ``respond`` (``message`` is the user's answer; the call does not run), ``edit``
  (``edited_action.args`` replace the call's arguments and it runs), ``approve`` (the call
  runs as proposed: the user vouches for its values), ``reject`` (it does not run; the
  optional ``message`` tells the model why).

The guard asks the confirmations of one step (calls that are complete, whose values the
user is asked to approve: :attr:`toolguard.types.Verdict.confirm`) as one question: its
action request is named :data:`CONFIRM_CALLS` when it covers several calls, and one
decision (``approve``, ``reject`` or ``respond``) answers them all.

Questions without a tool call (the pre-check, the KG resolver) accept ``respond`` only;
other decisions there count as an answer with their ``message`` (or an empty one).  A
value of another shape is refused by LangGraph before it is saved (the interrupt's
``response_schema``), so the same question can be answered again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, Union

from langchain.agents.middleware.human_in_the_loop import (
    ActionRequest,
    DecisionType,
    HITLResponse,
    ReviewConfig,
)
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import interrupt
from typing_extensions import TypedDict

from toolguard.conversation import MARK_KEY, marked_tool_message

__all__ = [
    "ASK_USER_TYPE",
    "CONFIRM_CALLS",
    "Answer",
    "AskQuestion",
    "AskSource",
    "AskUserRequest",
    "AskUserResume",
    "answer_text",
    "answered_tool_message",
    "ask_request",
    "ask_user",
    "read_answers",
    "user_message",
]

logger = logging.getLogger("toolguard")

ASK_USER_TYPE = "toolguard.ask_user"
"""The ``type`` of every toolguard ask-user interrupt payload."""

AskSource = Literal["guard", "precheck", "kg"]
"""Who asks: the guard (a proposed call), the pre-check (before the model acts), or the
KG resolver (a personal reference it cannot resolve)."""


class AskQuestion(TypedDict):
    """One question for the user.

    Attributes:
        tool_call_id: The call the question is about (``None`` for the pre-check and KG).
        tool_name: The tool concerned, if any.
        question: The text to show the user.
        missing: What is missing: parameter names, or the model's / resolver's words.
        source: Who asks (:data:`AskSource`).
        args: The proposed call's arguments (guard questions only); for a confirmation of
            several calls, ``{"calls": [{"id", "name", "args"}, ...]}``.
        tool_call_ids: For one confirmation of several calls of a step: their ids
            (``tool_call_id`` is the first).  One decision answers them all: ``approve``,
            ``reject`` or ``respond`` (``edit`` changes one call: it is not offered).
    """

    tool_call_id: str | None
    tool_name: str | None
    question: str
    missing: list[str]
    source: AskSource
    args: NotRequired[dict[str, Any]]
    tool_call_ids: NotRequired[list[str]]


class AskUserRequest(TypedDict):
    """The interrupt payload (module docstring): HITL-shaped plus ``questions``."""

    type: Literal["toolguard.ask_user"]
    action_requests: list[ActionRequest]
    review_configs: list[ReviewConfig]
    questions: list[AskQuestion]


AskUserResume = Union[str, HITLResponse, dict[str, str]]  # noqa: UP007 (a runtime type)
"""Resume values :func:`ask_user` accepts (checked by LangGraph before they are saved)."""

_CALL_DECISIONS: list[DecisionType] = ["respond", "edit", "approve", "reject"]
_GROUP_DECISIONS: list[DecisionType] = ["respond", "approve", "reject"]
_TEXT_DECISIONS: list[DecisionType] = ["respond"]
CONFIRM_CALLS = "toolguard.confirm_calls"
"""The ``name`` of the action request of one confirmation that covers several calls."""


@dataclass(frozen=True, slots=True)
class Answer:
    """The user's answer to one :class:`AskQuestion`.

    Attributes:
        kind: ``respond`` (an answer in ``text``), ``edit`` (run with ``args``),
            ``approve`` (run as proposed) or ``reject`` (do not run; ``text`` says why).
        text: The user's words (may be ``""``).
        args: For ``edit``: the arguments to run the call with.
    """

    kind: Literal["respond", "edit", "approve", "reject"]
    text: str = ""
    args: dict[str, Any] | None = field(default=None)


def ask_request(questions: Sequence[AskQuestion]) -> AskUserRequest:
    """The interrupt payload for ``questions`` (one action request per question)."""
    actions: list[ActionRequest] = []
    configs: list[ReviewConfig] = []
    for q in questions:
        grouped = len(q.get("tool_call_ids") or ()) > 1
        name = CONFIRM_CALLS if grouped else q["tool_name"] or f"toolguard.{q['source']}"
        actions.append(ActionRequest(name=name, args=dict(q.get("args") or {}),
                                     description=q["question"]))
        allowed = (_GROUP_DECISIONS if grouped else _CALL_DECISIONS if q["tool_call_id"]
                   else _TEXT_DECISIONS)
        configs.append(ReviewConfig(action_name=name, allowed_decisions=list(allowed)))
    return AskUserRequest(type="toolguard.ask_user", action_requests=actions,
                          review_configs=configs, questions=list(questions))


def ask_user(questions: Sequence[AskQuestion]) -> list[Answer]:
    """Interrupt with :func:`ask_request` and read the resume value (one answer per question).

    Must run inside a LangGraph node with a checkpointer.  On resume LangGraph re-runs the
    node and this call returns the answers.

    Raises:
        langgraph.errors.GraphInterrupt: The first time (this is how the graph pauses).
    """
    value = interrupt(ask_request(questions),
                      response_schema=AskUserResume)  # type: ignore[call-overload]
    return read_answers(value, questions)


def read_answers(value: Any, questions: Sequence[AskQuestion]) -> list[Answer]:
    """One :class:`Answer` per question from a resume value (see the module docstring).

    Lenient by design (a guard must not crash the graph on a UI's answer): a missing answer
    is ``respond`` with ``""``; a decision a question does not allow counts as ``respond``
    with its message; extra decisions are ignored (each case is logged).
    """
    if isinstance(value, Mapping) and isinstance(value.get("decisions"), list):
        decisions = list(value["decisions"])
        if len(decisions) != len(questions):
            logger.warning("toolguard: %d decisions for %d questions; the missing ones count "
                           "as empty answers", len(decisions), len(questions))
        out: list[Answer] = []
        for i, q in enumerate(questions):
            d = decisions[i] if i < len(decisions) and isinstance(decisions[i], Mapping) else {}
            out.append(_decision_answer(d, q))
        return out
    if isinstance(value, Mapping):
        return [Answer("respond", str(value.get(q["tool_call_id"] or "", value.get(
            q["tool_name"] or "", "")))) for q in questions]
    return [Answer("respond", "" if value is None else str(value)) for _ in questions]


def _decision_answer(decision: Mapping[str, Any], q: AskQuestion) -> Answer:
    kind = decision.get("type")
    message = str(decision.get("message") or "")
    on_call = q["tool_call_id"] is not None
    if kind == "edit" and on_call and len(q.get("tool_call_ids") or ()) > 1:
        logger.warning("toolguard: an edit decision on a confirmation of several calls; "
                       "read as an answer")
        return Answer("respond", message)
    if kind == "edit" and on_call:
        action = decision.get("edited_action")
        args = action.get("args") if isinstance(action, Mapping) else None
        if isinstance(args, Mapping):
            return Answer("edit", args=dict(args))
        logger.warning("toolguard: an edit decision without edited_action.args; read as no answer")
        return Answer("respond", "")
    if kind in ("approve", "reject") and on_call:
        return Answer(kind, message)
    if kind != "respond":
        logger.warning("toolguard: decision %r is not allowed for a %s question; read as an "
                       "answer", kind, q["source"])
    return Answer("respond", message)


def answer_text(question: str, answer: Answer) -> str:
    """The text the model gets for an answered question (a ``ToolMessage`` or user turn)."""
    if answer.kind == "reject":
        why = f" The user said: {answer.text}" if answer.text else ""
        return (f"Not executed: the user declined this call when asked: {question}.{why} "
                "Do not retry it unless the user asks for it.")
    return f"The user was asked: {question}\nThe user answered: {answer.text}"


def user_message(text: str, mark: str, **metadata: Any) -> AIMessage:
    """An ``AIMessage`` toolguard writes to the user (a question, a "cannot do", a stop).

    ``response_metadata[MARK_KEY]`` is ``mark`` (``ask_user``, ``no_suitable_tool``,
    ``change_tools``, ``finish``, ``loop``) so routers and readers can tell toolguard's
    messages from the model's.
    """
    return AIMessage(text, response_metadata={MARK_KEY: mark, **metadata})


def answered_tool_message(tool_call_id: str, tool_name: str, question: str,
                          answer: Answer) -> ToolMessage:
    """The ``ToolMessage`` answering a call the user answered (``respond``) or declined.

    The call did not run: toolguard's mark (:func:`~toolguard.conversation.toolguard_mark`,
    ``{"asked": question, "answer": kind}``, plus ``"said": text`` for a ``respond``) says
    so, and an identical call after the user confirmed its values is not taken for a repeat
    of a call that succeeded.  ``said`` is the user's own answer: the conversation reads it
    as the user's words, not as the tool's output.
    """
    mark: dict[str, Any] = {"asked": question, "answer": answer.kind}
    if answer.kind == "respond" and answer.text:
        mark["said"] = answer.text
    return marked_tool_message(answer_text(question, answer), tool_call_id=tool_call_id,
                               name=tool_name,
                               status="error" if answer.kind == "reject" else "success",
                               mark=mark)
