"""From verdicts to the messages of one step: shared by the middleware and the LangGraph node.

:func:`plan_step` turns the guard's verdicts on one ``AIMessage`` into what the graph must
add so that **every tool call is answered by exactly one ToolMessage** and refused calls
never reach a tool:

- ``allow``: nothing; the agent's router sends the call to the tool node.
- ``block`` (fabricated tool, bad format, ungrounded repeat, irrelevant tool with a better
  one): one error ``ToolMessage`` with the verdict's actionable feedback (a timing repeat
  carries the earlier result); the model goes on.
- ``ask_user`` (TalkToUser): with an interrupt, the user's answers (``respond``, ``edit``,
  ``approve``, ``reject``; see :mod:`toolguard.protocol`) decide each asked call; without
  one, the turn ends with the question as an ``AIMessage`` and every call of the step is
  answered "not executed".  The step's confirmations (:attr:`~toolguard.types.Verdict.confirm`:
  complete calls the user is asked to approve) are one question, answered once.
- ``change_tools`` (ChangeTools): the turn ends with a message telling the user no
  available tool fits; every call of the step is answered "not executed".

A step whose calls are all malformed (``invalid_tool_calls`` only) is answered and sent
back to the model (``back_to_model``): LangChain's ``create_agent`` would otherwise end
the run on a message without valid tool calls.

A refusal budget keeps a model that answers every refusal with another refused call from
running to the recursion limit: with ``stop_after=N``, a step whose calls are all blocked,
after ``N`` such steps in a row since the user's last message (:func:`refused_steps`),
ends the turn with a message to the user that names the last refusal (mark ``loop``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from toolguard.conversation import (
    MARK_KEY,
    MAX_ARGS_DEPTH,
    marked_tool_message,
    nested_too_deep,
    parse_args,
    toolguard_mark,
)
from toolguard.protocol import Answer, AskQuestion, answered_tool_message, user_message
from toolguard.types import Verdict

__all__ = ["DEFAULT_MAX_REFUSED_STEPS", "AskMode", "StepPlan", "look_up_first", "plan_step",
           "refused_steps", "validate_refusal_budget", "verdict_message", "with_unique_ids"]

AskMode = Literal["interrupt", "end"]

DEFAULT_MAX_REFUSED_STEPS = 4
"""Refused steps in a row after which the next one ends the turn (see :func:`plan_step`):
the turn ends at most 4 model calls after the first refusal.  The loop guard's stops, when
it runs, come earlier; this is the guard's own backstop."""


def validate_refusal_budget(value: int | None) -> int | None:
    """Check a ``max_refused_steps`` option: ``None`` or an int >= 1.

    Raises:
        toolguard.errors.ConfigurationError: Anything else.
    """
    from toolguard.errors import ConfigurationError

    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 1):
        raise ConfigurationError(f"max_refused_steps must be None or an int >= 1, got {value!r}")
    return value


@dataclass
class StepPlan:
    """What one step adds to the graph state.

    Attributes:
        messages: ``ToolMessage`` s for the calls that must not run, then, when the turn
            ends, the ``AIMessage`` for the user; in order.
        edited: The step's ``AIMessage`` with arguments the user edited (same id, so
            ``add_messages`` replaces it), or ``None``.
        end_turn: The turn ends here (a question or a "no tool fits" message).
        back_to_model: The message had only malformed calls (no valid tool calls), all now
            answered: the model must see the answers (``create_agent`` would end the run).
        questions: Questions to ask before the plan is final (``ask="interrupt"`` without
            ``answers``): the adapter interrupts, then calls :func:`plan_step` again with
            the answers.
    """

    messages: list[BaseMessage] = field(default_factory=list)
    edited: AIMessage | None = None
    end_turn: bool = False
    back_to_model: bool = False
    questions: list[AskQuestion] = field(default_factory=list)


def verdict_message(v: Verdict, content: str | None = None) -> ToolMessage:
    """The error ``ToolMessage`` answering a call toolguard did not let run.

    The verdict is its mark (:func:`~toolguard.conversation.toolguard_mark`:
    ``response_metadata["toolguard"]``, copied to ``artifact["toolguard"]`` for UIs).
    """
    return marked_tool_message(v.feedback() if content is None else content,
                               tool_call_id=v.tool_call_id or "", name=v.tool_name,
                               mark=v.model_dump(mode="json"))


def _question(group: Sequence[Verdict], args_by_id: dict[str, dict[str, Any]]
              ) -> AskQuestion:
    v = group[0]
    missing = [e.parameter for u in group for e in u.evidence if e.parameter]
    if len(group) == 1:
        q = AskQuestion(tool_call_id=v.tool_call_id, tool_name=v.tool_name,
                        question=v.question or v.reason, missing=missing, source="guard")
        args = args_by_id.get(v.tool_call_id or "")
        if args is not None:
            q["args"] = dict(args)
        return q
    lines = [f"{n}. {u.question or u.reason}" for n, u in enumerate(group, 1)]
    return AskQuestion(
        tool_call_id=v.tool_call_id, tool_name=v.tool_name,
        question=f"Please confirm these {len(group)} planned calls together:\n"
                 + "\n".join(lines),
        missing=missing, source="guard",
        args={"calls": [{"id": u.tool_call_id, "name": u.tool_name,
                         "args": dict(args_by_id.get(u.tool_call_id or "", {}))}
                        for u in group]},
        tool_call_ids=[str(u.tool_call_id) for u in group])


def _groups(asks: Sequence[Verdict]) -> list[list[Verdict]]:
    """One group per question: the step's confirmations together, other asks alone."""
    confirms = [v for v in asks if v.confirm]
    out: list[list[Verdict]] = []
    for v in asks:
        if not v.confirm:
            out.append([v])
        elif v is confirms[0]:
            out.append(confirms)
    return out


def refused_steps(messages: Sequence[BaseMessage]) -> int:
    """Model steps in a row at the end of ``messages`` whose every call toolguard refused.

    Counted back to the latest ``HumanMessage``; a step is an ``AIMessage`` the model wrote
    (not toolguard's own) with calls, each answered by a ``ToolMessage`` carrying a refusing
    verdict (a mark with an ``action`` other than ``allow``).  A step with a call that ran,
    was answered by the user, or is still unanswered, and a text reply, end the count.

    Returns:
        The number of such steps (0 when the last step was not refused).
    """
    answers: dict[str, ToolMessage] = {}
    count = 0
    for m in reversed(messages):
        if isinstance(m, HumanMessage):
            break
        if isinstance(m, ToolMessage):
            answers[m.tool_call_id] = m
            continue
        if not isinstance(m, AIMessage) or (m.response_metadata or {}).get(MARK_KEY):
            continue
        calls = [*m.tool_calls, *m.invalid_tool_calls]
        if not calls:
            break
        for call in calls:
            answer = answers.get(str(call.get("id") or ""))
            mark = toolguard_mark(answer) if answer is not None else None
            if mark is None or mark.get("action") in (None, "allow"):
                return count
        count += 1
    return count


def _sent_back(mark: Mapping[str, Any] | None) -> bool:
    """A mark of a call :func:`look_up_first` sent back to the model."""
    return (mark is not None and mark.get("action") == "block"
            and mark.get("hallucination") == "content")


def look_up_first(verdicts: Sequence[Verdict], before: Sequence[BaseMessage], *,
                  n_tools: int) -> list[Verdict]:
    """Send calls with ungiven values back to the model once per turn, before asking.

    A content verdict (RelyToolBench's *content* type: a value only the user can give
    appears nowhere; ``ask_user``, not a confirmation) becomes ``block`` with the same
    reason, which tells the model not to guess and to ask the user or obtain the values with
    another tool first.  The model may then look the value up with a read tool (a contact
    search for an email) or ask in its own words; a value still invented is asked of the
    user.  Only the first step of a turn with such verdicts is sent back: when a call of this
    turn (since the latest ``HumanMessage``) was already sent back, the verdicts are
    returned unchanged; so are they when the agent has a single tool (``n_tools <= 1``:
    nothing else could find the value).

    Args:
        verdicts: One step's verdicts.
        before: The messages before the step's ``AIMessage``.
        n_tools: The number of tools the model was offered.

    Returns:
        The verdicts, with those sent back as ``block`` (``hallucination`` stays
        ``content``: the mark a later step reads).
    """
    eligible = [v.action == "ask_user" and v.hallucination == "content" and not v.confirm
                for v in verdicts]
    if not any(eligible) or n_tools <= 1:
        return list(verdicts)
    for m in reversed(before):
        if isinstance(m, HumanMessage):
            break
        if _sent_back(toolguard_mark(m)):
            return list(verdicts)
    return [v.model_copy(update={"action": "block", "question": None}) if e else v
            for v, e in zip(verdicts, eligible, strict=True)]


def plan_step(
    message: AIMessage,
    verdicts: Sequence[Verdict],
    *,
    ask: AskMode,
    answers: Sequence[Answer] | None = None,
    refused_before: int = 0,
    stop_after: int | None = None,
) -> StepPlan:
    """Plan the answers of one step (see the module docstring).

    Args:
        message: The ``AIMessage`` whose calls were checked (unique, non-empty call ids).
        verdicts: One verdict per call still to be answered, in call order.
        ask: ``"interrupt"`` to ask the user in the graph, ``"end"`` to end the turn with
            the question.
        answers: The user's answers to the plan's ``questions``, in order, once asked.
        refused_before: Refused steps in a row before this one (:func:`refused_steps`).
        stop_after: The refusal budget: when this step's calls are all blocked and
            ``refused_before >= stop_after``, the turn ends; ``None``: no budget.

    Returns:
        The :class:`StepPlan`; with ``questions`` and nothing else when the adapter must
        interrupt first.
    """
    if (stop_after is not None and refused_before >= stop_after and verdicts
            and all(v.action == "block" for v in verdicts)
            and len(verdicts) == len(message.tool_calls) + len(message.invalid_tool_calls)):
        plan = StepPlan(messages=[verdict_message(v) for v in verdicts], end_turn=True)
        why = verdicts[-1].reason.removeprefix("Error:").strip().split(". ")[0].rstrip(".")
        plan.messages.append(user_message(
            f"I stopped working on this request: the tool calls I proposed were refused "
            f"{refused_before + 1} times in a row (the last one because {why}). Please "
            "rephrase the request or give the missing details.", "loop"))
        return plan
    asks = [v for v in verdicts if v.action == "ask_user"]
    args_by_id = {str(tc.get("id")): dict(tc["args"]) if isinstance(tc.get("args"), dict)
                  else {} for tc in message.tool_calls}
    groups = _groups(asks)
    if asks and ask == "interrupt" and answers is None:
        return StepPlan(questions=[_question(g, args_by_id) for g in groups])
    plan = StepPlan()
    by_id = {v.tool_call_id: answer
             for g, answer in zip(groups, answers or (), strict=False) for v in g}
    changes = [v for v in verdicts if v.action == "change_tools"]
    plan.end_turn = bool(changes) or (bool(asks) and ask == "end")
    edits: dict[str, dict[str, Any]] = {}
    for v in verdicts:
        cid = v.tool_call_id or ""
        if v.action == "ask_user" and ask == "interrupt":
            answer = by_id.get(v.tool_call_id, Answer("respond", ""))
            if answer.kind == "edit" and answer.args is not None and not plan.end_turn:
                edits[cid] = answer.args
            elif answer.kind == "approve" and not plan.end_turn:
                pass  # the user vouches for the values: the call runs as proposed
            elif answer.kind in ("edit", "approve"):
                plan.messages.append(verdict_message(v, "Not executed: the turn ended before "
                                                        "this call could run."))
            else:
                q = v.question or v.reason
                plan.messages.append(answered_tool_message(cid, v.tool_name, q, answer))
        elif v.action == "ask_user":
            plan.messages.append(verdict_message(
                v, f"Not executed: waiting for the user's answer to: {v.question or v.reason}"))
        elif v.action != "allow":
            plan.messages.append(verdict_message(v))
        elif plan.end_turn:
            plan.messages.append(marked_tool_message(
                "Not executed: the turn ended with a message to the user before this call "
                "could run.", tool_call_id=cid, name=v.tool_name, mark={"closed": "end_turn"}))
    if edits:
        calls = [{**tc, "args": edits[str(tc.get("id"))]} if str(tc.get("id")) in edits
                 else tc for tc in message.tool_calls]
        plan.edited = message.model_copy(update={"tool_calls": calls})
    if plan.end_turn:
        if changes:
            plan.messages.append(user_message(
                "None of my available tools can do this request, so I did not call any. "
                f"({changes[0].reason}) Please provide a suitable tool or rephrase the "
                "request.", "change_tools"))
        else:
            plan.messages.append(user_message(
                "\n".join(dict.fromkeys(v.question or v.reason for v in asks)), "ask_user"))
        return plan
    # create_agent sends a message whose valid calls are all answered back to the model by
    # itself; only a message with malformed calls alone would end the run there
    plan.back_to_model = not message.tool_calls and bool(verdicts)
    return plan


def with_unique_ids(message: AIMessage, *, ensure_id: bool = False) -> AIMessage | None:
    """A copy of ``message`` ready for the tool node, or ``None`` if it already is.

    Its tool calls get distinct, non-empty ids, and arguments given as a JSON string (some
    providers, hand-built messages) that parse to an object are replaced by the object.
    A call whose arguments nest deeper than
    :data:`~toolguard.conversation.MAX_ARGS_DEPTH` levels becomes an invalid tool call
    with its arguments dropped (``args=""``, ``error`` saying why): the guard refuses it
    anyway, and LangGraph's checkpoint serializer cannot store such a message (msgpack
    stops at ~250 levels), so keeping it would crash the run at the next checkpoint.  The
    copy keeps the message id, so ``add_messages`` replaces the original in place; with
    ``ensure_id`` a missing message id is assigned (``toolguard-<uuid4>``).
    """
    seen: set[str] = set()
    calls, changed_valid = _unique_ids(message.tool_calls, "toolguard_call", seen)
    invalid, changed_invalid = _unique_ids(message.invalid_tool_calls, "toolguard_invalid",
                                           seen)
    for i, call in enumerate(calls):
        if isinstance(call.get("args"), str):
            parsed, error = parse_args(call["args"])
            if error is None:
                calls[i] = {**call, "args": parsed}
                changed_valid = True
    deep = [c for c in calls if nested_too_deep(c.get("args"))]
    if deep:
        calls = [c for c in calls if not any(c is d for d in deep)]
        invalid = [*invalid, *({"type": "invalid_tool_call", "id": c["id"],
                                "name": c.get("name"), "args": "",
                                "error": f"arguments are nested deeper than {MAX_ARGS_DEPTH} "
                                         "levels (dropped)"} for c in deep)]
        changed_valid = True
    if not (changed_valid or changed_invalid or (ensure_id and message.id is None)):
        return None
    update: dict[str, Any] = {"tool_calls": calls, "invalid_tool_calls": invalid}
    if ensure_id and message.id is None:
        update["id"] = f"toolguard-{uuid.uuid4()}"
    return message.model_copy(update=update)


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
