"""Graph-state helpers shared by toolguard's middleware and LangGraph nodes.

- :func:`messages_of` reads the message list of a state (a mapping or an object).
- :func:`merge_counters` is the reducer of toolguard's counters; :func:`count_verdicts`
  turns one step's verdicts into counter increments.
- :func:`can_interrupt` says whether a node may pause with ``interrupt()`` (it needs a
  checkpointer to resume).
- :func:`close_dangling_calls` repairs a history where the user wrote a new message while
  tool calls were still unanswered (an ``ask_user`` interrupt answered with a new message
  instead of ``Command(resume=...)``): every tool call gets exactly one answer before the
  next user message, or providers reject the history.
- :func:`internal_config` (from :mod:`toolguard.internal`, re-exported) tags toolguard's own
  model calls (judges, the pre-check, the KG generator) so they never appear in the user's
  ``stream_mode="messages"`` stream.
- :func:`emit` sends a custom stream event (``stream_mode="custom"``) when a writer exists.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from toolguard.conversation import marked_tool_message
from toolguard.internal import INTERNAL_RUN_PREFIX, internal_config
from toolguard.types import Verdict

__all__ = [
    "CHECKPOINTER_KEY",
    "INTERNAL_RUN_PREFIX",
    "can_interrupt",
    "close_dangling_calls",
    "count_verdicts",
    "emit",
    "internal_config",
    "merge_counters",
    "messages_of",
    "validate_ask_user",
]

CHECKPOINTER_KEY = "__pregel_checkpointer"
"""``config["configurable"]`` key LangGraph sets when the graph has a checkpointer
(``langgraph._internal._constants.CONFIG_KEY_CHECKPOINTER``)."""



def messages_of(state: Any, key: str = "messages") -> list[BaseMessage]:
    """The messages under ``key`` of a state mapping or object (``[]`` when absent)."""
    value = state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)
    return list(value or [])


def merge_counters(
    left: Mapping[str, int] | None, right: Mapping[str, int] | None
) -> dict[str, int]:
    """Reducer that adds counters key by key (``None`` counts as empty)."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        out[key] = out.get(key, 0) + int(value)
    return out


_ACTION_COUNTER = {"allow": "allowed", "block": "blocked", "ask_user": "asked_user",
                   "change_tools": "change_tools"}


def count_verdicts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """Counter increments for one step.

    Keys: ``checked``, ``allowed``, ``blocked``, ``asked_user``, ``change_tools``, and one
    per registered detector kind (:data:`toolguard.detectors.DETECTORS`) counting the calls
    not allowed for that reason.
    """
    from toolguard.detectors.base import DETECTORS

    out: dict[str, int] = {"checked": len(verdicts), "allowed": 0, "blocked": 0,
                           "asked_user": 0, "change_tools": 0, **dict.fromkeys(DETECTORS, 0)}
    for v in verdicts:
        out[_ACTION_COUNTER[v.action]] += 1
        kind = v.kind or (v.evidence[0].detector if v.evidence else None)
        if v.action != "allow" and kind is not None:
            out[kind] = out.get(kind, 0) + 1
    return out


def validate_ask_user(mode: str) -> None:
    """Check an ``ask_user`` option (``"auto"``, ``"interrupt"`` or ``"end"``).

    Raises:
        toolguard.errors.ConfigurationError: Any other value.
    """
    from toolguard.errors import ConfigurationError

    if mode not in ("auto", "interrupt", "end"):
        raise ConfigurationError(f"ask_user must be 'auto', 'interrupt' or 'end', got {mode!r}")


def can_interrupt(mode: str, config: RunnableConfig | None) -> bool:
    """Whether to ask through ``interrupt()`` in ``ask_user`` mode ``mode``.

    ``"interrupt"``: always; ``"end"``: never (the turn ends with the question);
    ``"auto"``: when the running graph has a checkpointer (an interrupt needs one to resume).
    """
    if mode != "auto":
        return mode == "interrupt"
    return ((config or {}).get("configurable") or {}).get(CHECKPOINTER_KEY) is not None


def close_dangling_calls(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The update that answers tool calls left unanswered before the latest user message.

    When a user writes a new message instead of resuming an ``ask_user`` interrupt, the
    ``AIMessage`` whose calls were being asked about stays unanswered and the new
    ``HumanMessage`` follows it: a history providers reject.  The update removes the user
    message(s) after the dangling calls, answers each dangling call with a "not executed"
    ``ToolMessage`` and adds the user message(s) back after them (``add_messages``
    semantics: ``RemoveMessage``, then copies with the id suffixed ``.moved``: a re-added
    id would keep its old place).

    Returns:
        ``[]`` when nothing dangles.
    """
    last_user = next((i for i in range(len(messages) - 1, -1, -1)
                      if isinstance(messages[i], HumanMessage)), None)
    if last_user is None:
        return []
    # calls can only dangle in the turn before the new message: look back to its start
    start = next((i for i in range(last_user - 1, -1, -1)
                  if isinstance(messages[i], HumanMessage)), -1) + 1
    answered = {m.tool_call_id for m in messages[start:] if isinstance(m, ToolMessage)}
    answers: list[BaseMessage] = []
    first_after: int | None = None
    for pos in range(start, last_user):
        m = messages[pos]
        if not isinstance(m, AIMessage):
            continue
        for call in [*m.tool_calls, *m.invalid_tool_calls]:
            cid = call.get("id")
            if cid and cid not in answered:
                answers.append(marked_tool_message(
                    "Not executed: the user wrote a new message before this call could run "
                    "(a question about it was left unanswered).",
                    tool_call_id=cid, name=str(call.get("name") or ""),
                    mark={"closed": "dangling"}))
                answered.add(cid)
                if first_after is None:
                    first_after = pos + 1
    if not answers or first_after is None:
        return []
    # every message after the dangling AIMessage that is not a tool answer moves after them;
    # add_messages keeps a re-added id in place, so the moved copies get new ids
    moved = [m for m in messages[first_after:] if not isinstance(m, ToolMessage)]
    if any(m.id is None for m in moved):
        return []  # cannot move messages without ids (add_messages assigns them in graphs)
    copies = [m.model_copy(update={"id": f"{m.id}.moved"}) for m in moved]
    return [*(RemoveMessage(id=str(m.id)) for m in moved), *answers, *copies]


def emit(event: Mapping[str, Any], writer: Callable[[Any], None] | None = None) -> None:
    """Send ``{"toolguard": event}`` as a custom stream event (``stream_mode="custom"``).

    Uses ``writer`` when given (a middleware's ``runtime.stream_writer``), else LangGraph's
    current stream writer; outside a graph run it does nothing.
    """
    payload = {"toolguard": dict(event)}
    if writer is None:
        from langgraph.config import get_stream_writer

        with contextlib.suppress(RuntimeError):
            writer = get_stream_writer()
    if writer is not None:
        writer(payload)
