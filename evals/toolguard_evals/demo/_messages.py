"""Conversation helpers shared by the episode runner and the scorer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ToolMessage,
)


def is_toolguard_message(m: BaseMessage) -> bool:
    """An ``AIMessage`` toolguard wrote, not the model (``ask_user`` question, ``finish``)."""
    return isinstance(m, AIMessage) and bool((m.response_metadata or {}).get("toolguard"))


def calls_of(m: AIMessage) -> list[dict[str, Any]]:
    """Valid and invalid tool calls of a message, as dicts with ``id``, ``name``, ``args``."""
    out: list[dict[str, Any]] = [dict(tc) for tc in m.tool_calls]
    out += [{**dict(itc), "invalid": True} for itc in m.invalid_tool_calls]
    return out


def unanswered(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The calls of ``messages`` (as :func:`calls_of` gives them) no ``ToolMessage`` answers."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    return [c for m in messages if isinstance(m, AIMessage)
            for c in calls_of(m) if c.get("id") not in answered]


def model_steps(messages: Sequence[BaseMessage]) -> int:
    """How many ``AIMessage`` s of ``messages`` the model wrote (toolguard's are not counted)."""
    return sum(1 for m in messages if isinstance(m, AIMessage) and not is_toolguard_message(m))


def add_counters(
    total: dict[str, int], value: Any, aliases: Mapping[str, str] | None = None
) -> None:
    """Add the numeric counters of ``value`` (a state's counter dict) into ``total``."""
    if not isinstance(value, Mapping):
        return
    aliases = aliases or {}
    for key, n in value.items():
        if isinstance(n, (int, float)) and not isinstance(n, bool):
            k = aliases.get(str(key), str(key))
            total[k] = total.get(k, 0) + int(n)
