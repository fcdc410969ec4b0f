"""Records shared by the conversation reader and the grounding index: a text with its source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Source", "SourcedText"]

Source = Literal["user", "system", "assistant", "tool", "grounding"]
"""Who said a text: the user, the system prompt, the assistant, a tool result, or grounding
given from outside the conversation (resolved KG facts)."""


@dataclass(frozen=True, slots=True)
class SourcedText:
    """A text and where it came from.

    Attributes:
        text: The text (content blocks joined).
        source: ``user``, ``system``, ``assistant``, ``tool`` (a tool result) or
            ``grounding`` (given from outside, e.g. resolved KG facts).
        index: Position of its message in the conversation (``-1`` for ``grounding``).
        tool: For ``tool``: the name of the tool whose result it is.
    """

    text: str
    source: Source
    index: int = -1
    tool: str | None = None
