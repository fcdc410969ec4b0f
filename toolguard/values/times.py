"""Clock times in English text and in values, and the vague times a model has to resolve.

24-hour and am/pm clocks (``15:10``, ``3:10 pm``, ``5 pm``, ``7 o'clock``); "this afternoon",
"in two hours".
"""

from __future__ import annotations

import re

from toolguard.values.tokens import tokens_of

__all__ = ["TIME_VALUE", "states_vague_time", "time_value", "times_in"]

TIME_VALUE = re.compile(r"^(\d{1,2}):(\d{2})(?::\d{2})?\s*([ap]\.?m\.?)?$", re.I)
"""A value that is a clock time: ``15:10``, ``3:10 pm``, ``09:30:00``."""

_CLOCK = re.compile(r"(?<![\d:])(\d{1,2})(?::|\.|h)(\d{2})(?::\d{2})?\s*"
                    r"(a\.?m\.?|p\.?m\.?)?(?![\d])",
                    re.I)
_HOUR_AMPM = re.compile(r"(?<![\d:])(\d{1,2})\s*(a\.?m\.?|p\.?m\.?|o'?clock)(?![a-z])", re.I)
_VAGUE_TIME = re.compile(
    r"\b(?:now|noon|midday|midnight|morning|afternoon|evening|tonight|night|lunch(?:time)?|"
    r"breakfast|dinner|asap|soon|later|early|late|half\s+past|quarter\s+(?:past|to)|"
    r"in\s+(?:an?|\d+|[a-z]+)\s+(?:hours?|minutes?|mins?)|same\s+time|usual\s+time)\b", re.I)
_VAGUE_WORDS = frozenset((
    "now", "noon", "midday", "midnight", "morning", "afternoon", "evening", "tonight", "night",
    "lunch", "lunchtime", "breakfast", "dinner", "asap", "soon", "later", "early", "late",
    "half", "quarter", "hour", "hours", "minute", "minutes", "min", "mins", "time"))
"""Every cue of :data:`_VAGUE_TIME` ends in one of these whole words."""


def time_value(raw: str) -> tuple[int, int] | None:
    """The 24-hour ``(hour, minute)`` a value names (:data:`TIME_VALUE`), else ``None``."""
    m = TIME_VALUE.match(raw.strip())
    if m is None:
        return None
    h, mi = int(m.group(1)), int(m.group(2))
    if m.group(3) and m.group(3).lower().startswith("p") and h < 12:
        h += 12
    return h % 24, mi


def times_in(text: str) -> set[tuple[int, int]]:
    """``(hour, minute)`` clock times a text states, on a 24-hour clock.

    ``"15:10"``, ``"3:10 pm"``, ``"9.30"``, ``"5 pm"``, ``"7 o'clock"`` (a bare hour gives both
    its morning and afternoon readings when no am/pm says which).
    """
    out: set[tuple[int, int]] = set()

    def put(h: int, mi: int, ampm: str | None) -> None:
        if not (0 <= h <= 24 and 0 <= mi <= 59):
            return
        suffix = (ampm or "").lower().replace(".", "")
        if suffix.startswith("p") and h < 12:
            out.add((h + 12, mi))
        elif suffix.startswith("a") and h == 12:
            out.add((0, mi))
        else:
            out.add((h % 24, mi))
            if not suffix and h <= 12:
                out.add(((h + 12) % 24, mi))
    for m in _CLOCK.finditer(text):
        put(int(m.group(1)), int(m.group(2)), m.group(3))
    for m in _HOUR_AMPM.finditer(text):
        put(int(m.group(1)), 0, m.group(2) if not m.group(2).lower().startswith("o") else None)
    return out


def states_vague_time(text: str) -> bool:
    """Whether ``text`` names a time the model must resolve ("this afternoon", "soon")."""
    return not _VAGUE_WORDS.isdisjoint(tokens_of(text)) and bool(_VAGUE_TIME.search(text))
