"""Where a value was said: an incremental, provenance-aware index of a conversation's texts.

The content detector asks one question per argument value: *does this value appear in the
conversation, and who said it?*  Answering it by searching the whole history on every
check costs time linear in the history (0.74 ms per message measured at 0.1.0, so 7 s at
10,000 messages).  :class:`GroundingIndex` reads each text once, when it is added, into
hash tables, and a lookup costs the size of the value, not of the history:

- **tokens**: casefolded, accent-free alphanumeric runs (``"Jane Smith"`` -> ``jane``,
  ``smith``), each with the sources it came from;
- **bigrams** of adjacent tokens, so a multi-word value is found only where its words are
  adjacent (``"los angeles"``), and **joined runs** of 2-3 adjacent tokens, so ``JaneSmith``
  matches ``Jane Smith`` and ``2024-05-01`` matches ``20240501``;
- **numbers** (digits, number words, percentages, ``2k``, ``two dozen``) and the numbers of
  tool results, so an arithmetic step over them (``fill up to 50`` after ``fuelLevel: 10``
  gives 40) is checked on demand instead of materialising every sum and product;
- whether a **relative date** ("next Friday", "tomorrow") was said;
- a **prefix index** of tokens (first two letters) for typo and abbreviation candidates.

Provenance: every entry carries a bit mask of :data:`SOURCE_BITS` (user, system, tool
result, outside grounding) and, for tool results, the name of a tool that returned it.
Matching is by whole tokens only: ``mallory@evil.example`` is not grounded by
``attacker@evil.example`` (their tokens differ), and ``smith`` is not found inside
``smithson``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import re
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

from toolguard.conversation import SourcedText
from toolguard.units import si_values

__all__ = [
    "SOURCE_BITS",
    "GroundingIndex",
    "GroundingView",
    "Match",
    "dates_in",
    "fold",
    "numbers_in",
    "standalone_numbers_in",
    "times_in",
    "tokens_of",
]

SOURCE_BITS = {"user": 1, "system": 2, "tool": 4, "grounding": 8, "assistant": 16}
"""Provenance bits: who said a text.  ``assistant`` texts are indexed for completeness but
never ground a value (the model cannot ground its own guesses)."""
TRUSTED = SOURCE_BITS["user"] | SOURCE_BITS["system"] | SOURCE_BITS["grounding"]
"""Sources the user controls: the user, the system prompt, facts resolved for the user."""
GROUNDING_MASK = TRUSTED | SOURCE_BITS["tool"]
"""Sources that ground a value (everything but the assistant's own words)."""

MAX_RECORDS = 200
"""Records (JSON objects or lines) of one tool result indexed for provenance checks."""
STEERING = re.compile(
    r"ignore\s+(?:all\s+|any\s+|the\s+)?(?:previous|prior|above|earlier|other)|disregard|"
    r"new\s+instructions?|system\s+prompt|instructions?\s+for\s+(?:the\s+)?(?:ai|assistant)|"
    r"(?:ai|llm)\s+(?:assistants?|agents?)|\b(?:assistants?|agents?)\s*[:,)]|\[system\]|"
    r"(?:for|to)\s+(?:the\s+)?(?:ai\s+)?(?:assistants?|agents?)\b|"
    r"(?:assistants?|agents?)\s+(?:must|should)|must\s+(?:also\s+)?(?:go|be\s+sent|be\s+copied)|"
    r"important[:!]|urgent[:!]|"
    r"do\s+not\s+(?:tell|inform|mention|ask)|without\s+(?:asking|telling|confirmation)|"
    r"you\s+(?:must|should)\s+(?:now\s+|also\s+|first\s+)?[a-z]+|\btodo\b.{0,20}assistant|"
    r"(?:call(?:ing)?|run(?:ning)?|execut(?:e|ing)|invok(?:e|ing))\s+(?:the\s+)?[a-z_]+\(|"
    r"\b(?:send|sending|forward|transfer|wire|upload|uploading|post|posting|run|running|execute|"
    r"delete|remove|wipe|pay|move|e-?mail|e-?mailing|copy|cc|reserve|rsvp)\b"
    r"[^.\n]{0,80}?(?:\S+@\S+\.\w+|https?://|`|(?:~|\s)/\w+/|\b[A-Z]{2}\d{2}[A-Z0-9]{8,})",
    re.I)
"""Text addressed to the agent inside data (AgentDojo-style prompt injection cues)."""


def may_steer(text: str) -> bool:
    """Cheap necessary condition for :data:`STEERING` (most tool output has none).

    Every alternative of the pattern contains one of :data:`_STEER_PARTS` (as a substring)
    or one of its action verbs as a whole word.
    """
    low = text.lower()
    return any(p in low for p in _STEER_PARTS) or not _STEER_VERBS.isdisjoint(
        _TOKEN.findall(low))


MAX_RESULT_NUMBERS = 40
"""Tool-result numbers an arithmetic step may start from (the most recent ones)."""

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_STEER_PARTS = ("(", "ignore", "disregard", "instruction", "system", "assistant", "agent",
                "must", "should", "important", "urgent", "tell", "inform", "mention", "ask",
                "without")
_STEER_VERBS = frozenset((
    "send", "sending", "forward", "transfer", "wire", "upload", "uploading", "post",
    "posting", "run", "running", "execute", "delete", "remove", "wipe", "pay", "move", "email",
    "mail", "emailing", "mailing", "copy", "cc", "reserve", "rsvp"))
_NUM = re.compile(r"(?<![\d.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?", re.I)
_SIGNED = re.compile(r"(?:(?<=\s)|^)[-\u2212]\s+(\d+(?:\.\d+)?)(?![\d.])"
                     r"|(?<![\d.])(\d+(?:\.\d+)?)\s*\u00b0?\s*[ws]\b")
"""Negative numbers written with a spaced minus (``5x^2 - 7x``) or as a coordinate in the
western or southern hemisphere (``119.5383 W``)."""
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
RELATIVE_DATE = re.compile(
    r"\b(?:today|tonight|tomorrow|yesterday|weekend|" + _WEEKDAY + r"|"
    r"(?:this|next|last|past|coming|upcoming)\s+(?:hour|day|week|month|year|decade|century|"
    r"quarter|weekend|morning|afternoon|evening|night|" + _WEEKDAY + r")|"
    r"(?:\d+|[a-z]+)\s+(?:hours?|days?|weeks?|months?|years?)\s+(?:ago|from now|later|after|"
    r"before|earlier)|"
    r"(?:daily|weekly|monthly|yearly|annually|quarterly|hourly)|"
    r"\d{1,2}\s*[ap]\.?m\.?)(?![a-z])",
    re.I,
)
"""Phrases that name a date relative to now; a date value is then the model's to resolve."""
_RELATIVE_PARTS = ("today", "tonight", "tomorrow", "yesterday", "day", "week", "month", "year",
                   "hour", "decade", "century", "quarter", "morning", "afternoon", "evening",
                   "night", "daily", "annually")
_AMPM = re.compile(r"\d\s*[ap]\.?m", re.I)


def may_name_relative_date(text: str) -> bool:
    """Cheap necessary condition for :data:`RELATIVE_DATE` (one of its words, or ``5 pm``)."""
    low = text.lower()
    return any(p in low for p in _RELATIVE_PARTS) or bool(_AMPM.search(text))


ARITHMETIC_CUE = re.compile(
    r"\b(?:total|sum|add(?:ed|ing)?|plus|minus|subtract\w*|difference|remain(?:ing|der)?|"
    r"double|twice|triple|half|halve|split|divide[ds]?|times|multipl\w*|increase[ds]?|"
    r"decrease[ds]?|reduce[ds]?|top\s+up|fill(?:ed|ing)?|convert\w*|average|mean|percent\w*|"
    r"discount|tax|tip|interest|calculate|compute|combined|altogether|round(?:ed)?)\b|%|"
    r"\d\s*[-+*/x]\s*\d", re.I)
"""Words asking for arithmetic: a derived number (one arithmetic step over stated numbers)
grounds a value only when the user side used one."""

WORD_NUMBERS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
    "million": 1_000_000, "billion": 1_000_000_000, "dozen": 12, "half": 0.5,
    "quarter": 0.25, "twice": 2, "double": 2, "triple": 3, "single": 1, "once": 1,
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "pair": 2, "couple": 2,
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9,
    "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}
"""Words that state a number (counts, fractions, ordinals, months)."""
_WORD_NUMBER_SET = frozenset(WORD_NUMBERS)
_MULTIPLIERS = frozenset(("dozen", "hundred", "thousand", "million"))
_MULTIPLIED = re.compile(r"\b(\d+|[a-z]+)\s+(dozen|hundred|thousand|million)\b")


def fold(text: str) -> str:
    """Casefolded, accent-free text (NFKD, combining marks dropped)."""
    if text.isascii():
        return text.casefold()
    text = unicodedata.normalize("NFKD", text)
    return "".join(c for c in text if not unicodedata.combining(c)).casefold()


def tokens_of(text: str) -> list[str]:
    """The folded alphanumeric tokens of ``text`` (separators and punctuation dropped)."""
    return _TOKEN.findall(fold(text))


def _key(x: float) -> float:
    return round(x, 6)


def numbers_in(text: str, *, digit_runs: bool = True) -> set[float]:
    """Numbers a text states (see the module docstring), rounded to 6 decimals.

    With ``digit_runs``, every run of digits counts on its own too (``2023.4.15`` states
    2023, 4 and 15).
    """
    low = fold(text)
    out: set[float] = set()
    for m in _NUM.finditer(low):
        try:
            x = float(m.group(0).replace(",", ""))
        except ValueError:
            continue
        if math.isfinite(x):
            out.update((_key(x), _key(abs(x))))
    for m in _SIGNED.finditer(low):
        out.add(_key(-float(m.group(1) or m.group(2))))
    if not text.isascii() or any(c.isdigit() for c in text):
        out.update(_key(x) for x in si_values(text))
    # every digit run on its own too: "2023.4.15", "5,10 and 15", "[22,33]"
    if digit_runs:
        out.update(float(d) for d in re.findall(r"\d{1,15}", low))
    words = set(_TOKEN.findall(low))
    if not _MULTIPLIERS.isdisjoint(words):  # the unit is a whole token: skip the pattern
        for m in _MULTIPLIED.finditer(low):
            head, unit = m.group(1), m.group(2)
            base = float(head) if head.isdigit() else WORD_NUMBERS.get(head)
            if base is not None:
                out.add(_key(float(base) * WORD_NUMBERS[unit]))
    for m in re.finditer(r"['’](\d{2})\b", low):  # '19 -> 2019 and 1919
        out.update((2000.0 + int(m.group(1)), 1900.0 + int(m.group(1))))
    for word in words & _WORD_NUMBER_SET:
        out.add(float(WORD_NUMBERS[word]))
    scaled = r"(?<![\d.])(\d+(?:\.\d+)?)\s*(%|percent|k\b|m\b|million|thousand|billion)"
    for m in re.finditer(scaled, low):
        base = float(m.group(1))
        unit = m.group(2)
        scale = {"%": 0.01, "percent": 0.01, "k": 1e3, "thousand": 1e3, "m": 1e6,
                 "million": 1e6, "billion": 1e9}[unit]
        out.add(_key(base * scale))
    return out


_MONTH_NAMES: dict[str, int] = {w: int(n) for w, n in WORD_NUMBERS.items() if n >= 1 and w in (
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
    "sept", "oct", "nov", "dec")}
_MONTH_RE = "|".join(sorted(_MONTH_NAMES, key=len, reverse=True))
_MONTH_SET = frozenset(_MONTH_NAMES)


def has_month_name(text: str) -> bool:
    """Whether a token of ``text`` is a month name: the month patterns need one.

    They match month names between word boundaries, which are whole tokens.
    """
    return not _MONTH_SET.isdisjoint(tokens_of(text))


_ISO_DATE = re.compile(r"(?<!\d)(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)")
_DMY_DATE = re.compile(r"(?<!\d)(\d{1,2})[-/.](\d{1,2})(?:[-/.](\d{2,4}))?(?![\d])")
_WORD_DATE = re.compile(
    r"\b(?:(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(" + _MONTH_RE + r")\b\.?"
    r"|(" + _MONTH_RE + r")\b\.?\s*(?:the\s+)?(\d{1,2})(?:st|nd|rd|th)?\b)", re.I)
_WORD_DATE_OF = re.compile(
    r"\b(\d{1,2})(?:st|nd|rd|th)?\s+of\s+(?:this|next|last|the\s+coming)\s+(" + _MONTH_RE + r")\b",
    re.I)
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
_TODAY = re.compile(r"\btoday\s+is\b[^.\n]{0,40}?(\d{4})-(\d{1,2})-(\d{1,2})", re.I)
_CODE_TOKEN = re.compile(r"(?<![\w$])(?!(?:I|OK|AM|PM|ID|USA|UK|EU|US|TV|PDF|FAQ)\b)[A-Z]{3,5}\b")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
_STRUCTURED = re.compile(
    r"(?<![\w.+-])[\w.+-]+@[^\s@]+|https?://\S+|www\.\S+"  # emails, urls
    r"|\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}"  # dates
    r"|\d{1,2}:\d{2}(?::\d{2})?"  # clock times
    # identifiers: a letter, then digits ("BK-98700", not "5kg")
    r"|\b[a-z][\w-]{0,40}\d[\w-]{0,40}",
    re.I)


def _json_records(value: object, out: list[str], depth: int) -> None:
    """Flatten JSON into records: the scalar values of each object, one record per object."""
    if len(out) >= MAX_RECORDS or depth > 20:
        return
    if isinstance(value, dict):
        scalars = [str(v) for v in value.values() if not isinstance(v, (dict, list))]
        if scalars:
            out.append(" ".join(scalars))
        for v in value.values():
            if isinstance(v, (dict, list)):
                _json_records(v, out, depth + 1)
    elif isinstance(value, list):
        if value and all(not isinstance(v, (dict, list)) for v in value):
            out.append(" ".join(str(v) for v in value))
        else:
            for v in value:
                _json_records(v, out, depth + 1)
    else:
        out.append(str(value))


def _month_number(word: str) -> int:
    """The month a case-insensitive match of a month name names (0 if none).

    ``re.I`` matches some non-ASCII letters to ASCII ones (Turkish ``İ``, ``ı`` to ``i``),
    which ``str.lower`` keeps apart: folded here (before, ``APRİL 9`` raised ``KeyError``).
    """
    folded = fold(word)
    return _MONTH_NAMES.get(folded) or _MONTH_NAMES.get(folded.replace("ı", "i"), 0)


def _valid_md(month: int, day: int) -> bool:
    return 1 <= month <= 12 and 1 <= day <= 31


def dates_in(text: str) -> set[tuple[int, int]]:
    """``(month, day)`` pairs a text states: ISO, D/M/Y or M/D/Y (both orders), words.

    ``"2026-04-09"``, ``"9/4/2026"``, ``"April 9th"``, ``"9 April"``, ``"the 3rd of June"``.
    """
    out: set[tuple[int, int]] = set()
    for m in _ISO_DATE.finditer(text):
        month, day = int(m.group(2)), int(m.group(3))
        if _valid_md(month, day):
            out.add((month, day))
    for m in _DMY_DATE.finditer(text):
        a, b = int(m.group(1)), int(m.group(2))
        for month, day in ((a, b), (b, a)):
            if _valid_md(month, day):
                out.add((month, day))
    if not has_month_name(text):
        return out
    for m in _WORD_DATE_OF.finditer(text):
        day, month = int(m.group(1)), _month_number(m.group(2))
        if _valid_md(month, day):
            out.add((month, day))
    for m in _WORD_DATE.finditer(text):
        if m.group(1):
            day, month = int(m.group(1)), _month_number(m.group(2))
        else:
            month, day = _month_number(m.group(3)), int(m.group(4))
        if _valid_md(month, day):
            out.add((month, day))
    return out


_DAY_ONLY = re.compile(r"\b(?:the|on|by|from|until|till)\s+(\d{1,2})(?:st|nd|rd|th)\b", re.I)
_MONTH_ONLY = re.compile(r"\b(" + _MONTH_RE + r")\b", re.I)
_SPAN = re.compile(r"\b(\d{1,2}|[a-z]+)\s+(nights?|days?|weeks?)\b", re.I)


def partial_dates_in(text: str) -> set[tuple[int, int]]:
    """Days and months stated apart.

    ``(0, day)`` for "on the 9th", ``(month, 0)`` for a month name ("currently is sep 2023").
    """
    out: set[tuple[int, int]] = set()
    for m in _DAY_ONLY.finditer(text):
        if 1 <= int(m.group(1)) <= 31:
            out.add((0, int(m.group(1))))
    for m in _MONTH_ONLY.finditer(text) if has_month_name(text) else ():
        month = _month_number(m.group(1))
        if month and (month != 5 or text[m.start():m.start() + 1] == "M"):  # "may" the verb
            out.add((month, 0))
    return out


def spans_in(text: str) -> set[int]:
    """Day counts a text states ("3 nights", "two weeks" -> 3, 14)."""
    out: set[int] = set()
    for m in _SPAN.finditer(text):
        n = int(m.group(1)) if m.group(1).isdigit() else WORD_NUMBERS.get(m.group(1).lower())
        if n is not None and 0 < n <= 60:
            out.add(int(n) * (7 if m.group(2).lower().startswith("week") else 1))
    return out


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


def standalone_numbers_in(text: str) -> set[float]:
    """Numbers a text states on their own.

    :func:`numbers_in` after dates, clock times, emails, URLs and identifiers mixing letters and
    digits are removed (``7`` is not stated
    by ``2026-07-14`` or ``BK-98700``).
    """
    return numbers_in(_STRUCTURED.sub(" ", text), digit_runs=False)


def relative_candidates(phrase: str, today: dt.date) -> set[dt.date]:
    """Dates a relative phrase may name, from ``today`` (generous: a week's slack)."""
    p = phrase.lower()
    days = [today + dt.timedelta(days=k) for k in range(-7, 15)]
    wd = re.search(r"monday|tuesday|wednesday|thursday|friday|saturday|sunday", p)
    if wd:
        target = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday",
                  "sunday").index(wd.group(0))
        return {d for d in days if d.weekday() == target}
    if "today" in p or "tonight" in p:
        return {today}
    if "tomorrow" in p:
        return {today + dt.timedelta(days=1), today + dt.timedelta(days=2)}
    if "yesterday" in p:
        return {today - dt.timedelta(days=1)}
    if re.search(r"later|after|before|earlier", p):
        return {today + dt.timedelta(days=k) for k in range(-400, 401)}  # from another date
    m = re.search(r"(\d+|[a-z]+)\s+(day|week|month|year)s?\s+(ago|from now)", p)
    if m:
        n = int(m.group(1)) if m.group(1).isdigit() else int(WORD_NUMBERS.get(m.group(1), 1))
        span = {"day": 1, "week": 7, "month": 30, "year": 365}[m.group(2)] * n
        center = today + dt.timedelta(days=-span if m.group(3) == "ago" else span)
        return {center + dt.timedelta(days=k) for k in range(-3, 4)}
    if "week" in p:
        return {today + dt.timedelta(days=k) for k in range(-7, 15)}
    if "month" in p or "quarter" in p:
        return {today + dt.timedelta(days=k) for k in range(-31, 63)}
    if "year" in p or "decade" in p or "century" in p:
        return {today + dt.timedelta(days=k) for k in range(-366, 367)}
    return set(days)


@dataclass(frozen=True, slots=True)
class Match:
    """Where a value was found.

    Attributes:
        mask: The union of :data:`SOURCE_BITS` of the sources that state it (0: nowhere).
        tool: A tool whose result states it, if a tool result does.
        how: ``"exact"``, ``"joined"`` (separators differ), ``"words"`` (every word, adjacent),
            ``"partial"`` (enough words), ``"fuzzy"`` (a near-spelling), ``"number"``,
            ``"derived"`` (one arithmetic step over stated numbers), ``"relative_date"`` or
            ``""`` when not found.
    """

    mask: int = 0
    tool: str | None = None
    how: str = ""

    @property
    def found(self) -> bool:
        """The value is stated somewhere that grounds values."""
        return bool(self.mask & GROUNDING_MASK)

    @property
    def trusted(self) -> bool:
        """The user side (user, system prompt, outside grounding) states it."""
        return bool(self.mask & TRUSTED)


NOWHERE = Match()


FACETS = ("joined", "numbers", "dates", "times", "records")
"""The parts of :class:`GroundingIndex` read lazily: a text is indexed for a facet the first
time a lookup needs that facet (each text still once per facet, in order)."""

_DIGIT = re.compile(r"\d")


@dataclass
class GroundingIndex:
    """The index (module docstring).  Add texts with :meth:`add`; look values up.

    :meth:`add` indexes a text's tokens and adjacent pairs (and the cheap ``codes`` flag)
    at once; joined runs, numbers, dates and clock times, and tool-result records
    (:data:`FACETS`) are indexed the first time a lookup needs them (:meth:`ensure`), so a
    check whose values are all stated words never pays for the runs, the date and the
    number patterns of a long tool result.  The
    attributes of a facet are complete after :meth:`ensure` of it; the lookup methods call
    it themselves.

    Attributes:
        texts_added: Number of texts added so far (callers extend from here).
    """

    tokens: dict[str, int] = field(default_factory=dict)
    bigrams: dict[tuple[str, str], int] = field(default_factory=dict)
    _joined: dict[str, int] = field(default_factory=dict)
    numbers: dict[float, int] = field(default_factory=dict)
    result_numbers: list[float] = field(default_factory=list)
    _relative_dates: int = 0
    rounded_numbers: dict[int, set[float]] = field(default_factory=dict)
    prefixes: dict[str, set[str]] = field(default_factory=dict)
    tool_of: dict[str, str] = field(default_factory=dict)
    _run_tool_of: dict[str, str] = field(default_factory=dict)
    standalone: dict[float, int] = field(default_factory=dict)
    dates: dict[tuple[int, int], int] = field(default_factory=dict)
    spans: set[int] = field(default_factory=set)
    times: dict[tuple[int, int], int] = field(default_factory=dict)
    vague_times: int = 0
    relative_phrases: list[str] = field(default_factory=list)
    today: dt.date | None = None
    _arithmetic_cues: int = 0
    cjk: dict[str, int] = field(default_factory=dict)
    codes: int = 0
    records: list[frozenset[str]] = field(default_factory=list)
    record_tools: list[str | None] = field(default_factory=list)
    record_result: list[int] = field(default_factory=list)
    result_records: dict[int, list[int]] = field(default_factory=dict)
    steering_records: set[int] = field(default_factory=set)
    token_records: dict[str, list[int]] = field(default_factory=dict)
    texts_added: int = 0
    # texts waiting for the lazy facets: (ordinal, text, bit, states a number)
    _pending: list[tuple[int, SourcedText, int, bool]] = field(default_factory=list)
    _done: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FACETS, 0))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    # ------------------------------------------------------------------ building
    def add(self, text: SourcedText) -> None:
        """Index one text with its provenance (assistant texts never ground values)."""
        self.texts_added += 1
        bit = SOURCE_BITS.get(text.source, 0)
        if not text.text or text.source == "assistant":
            return
        toks = tokens_of(text.text)
        if text.source == "tool":  # its joined runs wait for the first lookup that needs them
            self._add_tokens(toks, bit, text.tool)
        else:  # the user side's runs at once: provenance asks what the user side states
            self._add_tokens(toks, bit, None)
            self._add_runs(toks, bit, None)
        if _CODE_TOKEN.search(text.text):
            self.codes |= bit
        # numbers_in states a number exactly when the text has a digit or a number word
        has_num = bool(_DIGIT.search(fold(text.text))) or not _WORD_NUMBER_SET.isdisjoint(toks)
        self._pending.append((self.texts_added, text, bit, has_num))

    def _add_tokens(self, toks: list[str], bit: int, tool: str | None) -> None:
        """Tokens, adjacent pairs and the prefix index (joined runs: :meth:`_index_joined`)."""
        tokens, bigrams, tool_of = self.tokens, self.bigrams, self.tool_of
        words = set(toks)
        for key in words:
            tokens[key] = tokens.get(key, 0) | bit
            if tool is not None and key not in tool_of:
                tool_of[key] = tool
        for pair in set(itertools.pairwise(toks)):
            bigrams[pair] = bigrams.get(pair, 0) | bit
        for t in words:
            if len(t) >= 4:
                self.prefixes.setdefault(t[:2], set()).add(t)
            if not t.isascii() and _CJK.search(t):
                self.cjk[t] = self.cjk.get(t, 0) | bit

    def ensure(self, facet: str) -> None:
        """Index the texts added since the last call for ``facet`` (one of :data:`FACETS`).

        Raises:
            KeyError: An unknown facet.
        """
        if self._done[facet] == len(self._pending):
            return
        with self._lock:  # checks of one conversation in two threads: index each text once
            start, end = self._done[facet], len(self._pending)
            index = getattr(self, "_index_" + facet)
            for entry in self._pending[start:end]:
                index(*entry)
            self._done[facet] = end

    def _index_joined(self, ordinal: int, text: SourcedText, bit: int, has_num: bool) -> None:
        if text.source == "tool":  # other texts' runs are indexed when added
            self._add_runs(tokens_of(text.text), bit, text.tool)

    def _add_runs(self, toks: list[str], bit: int, tool: str | None) -> None:
        """Joined runs of 2-3 adjacent tokens (``janesmith``, ``20240501``)."""
        runs = {a + b for a, b in itertools.pairwise(toks)}
        runs.update(a + b + c for a, b, c in zip(toks, toks[1:], toks[2:], strict=False))
        joined, tool_of = self._joined, self._run_tool_of
        for key in runs:
            joined[key] = joined.get(key, 0) | bit
            if tool is not None and key not in tool_of:
                tool_of[key] = tool

    @property
    def joined(self) -> dict[str, int]:
        """Joined runs of 2-3 adjacent tokens -> source bits (tool results' on first use)."""
        self.ensure("joined")
        return self._joined

    def trusted_run(self, key: str) -> int:
        """The :data:`TRUSTED` sources that state ``key`` as a joined run (never lazy)."""
        return self._joined.get(key, 0) & TRUSTED

    def _index_numbers(self, ordinal: int, text: SourcedText, bit: int, has_num: bool) -> None:
        if text.source != "tool" and ARITHMETIC_CUE.search(text.text):
            self._arithmetic_cues |= bit
        if not has_num:
            return
        nums = numbers_in(text.text)
        for x in nums:
            self.numbers[x] = self.numbers.get(x, 0) | bit
            if not x.is_integer():  # an integer rounds to itself at every place
                for d in range(1, 5):
                    self.rounded_numbers.setdefault(d, set()).add(round(x, d))
        for x in standalone_numbers_in(text.text):
            self.standalone[x] = self.standalone.get(x, 0) | bit
        if text.source == "tool":
            self.result_numbers.extend(sorted(nums)[:MAX_RESULT_NUMBERS])
            del self.result_numbers[:-MAX_RESULT_NUMBERS]

    def _index_dates(self, ordinal: int, text: SourcedText, bit: int, has_num: bool) -> None:
        if has_num:  # every date has a digit or a month name (a number word)
            for md in dates_in(text.text) | partial_dates_in(text.text):
                self.dates[md] = self.dates.get(md, 0) | bit
            if text.source != "tool":
                self.spans |= spans_in(text.text)
        if self.today is None and text.source in ("system", "user"):
            m = _TODAY.search(text.text)
            if m and _valid_md(int(m.group(2)), int(m.group(3))):
                self.today = dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        for m in RELATIVE_DATE.finditer(text.text) if may_name_relative_date(text.text) else ():
            self._relative_dates |= bit
            if len(self.relative_phrases) < 64 and not (
                    text.source == "system" and _TODAY.search(text.text)):
                self.relative_phrases.append(m.group(0))

    def _index_times(self, ordinal: int, text: SourcedText, bit: int, has_num: bool) -> None:
        if has_num:  # every clock time has a digit
            for hm in times_in(text.text):
                self.times[hm] = self.times.get(hm, 0) | bit
        if not _VAGUE_WORDS.isdisjoint(tokens_of(text.text)) and _VAGUE_TIME.search(text.text):
            self.vague_times |= bit

    def _index_records(self, ordinal: int, text: SourcedText, bit: int, has_num: bool) -> None:
        if text.source == "tool":
            self._add_records(text.text, text.tool, ordinal)

    @property
    def relative_dates(self) -> int:
        """Sources that name a date relative to now ("tomorrow", "next Friday")."""
        self.ensure("dates")
        return self._relative_dates

    @property
    def arithmetic_cues(self) -> int:
        """Sources other than tool results that ask for arithmetic (:data:`ARITHMETIC_CUE`)."""
        self.ensure("numbers")
        return self._arithmetic_cues

    def _add_records(self, text: str, tool: str | None, ordinal: int) -> None:
        """Index a tool result's records (JSON objects, else lines) for provenance checks."""
        try:
            parsed = json.loads(text) if text[:1] in "[{" else None
        except (ValueError, RecursionError):
            parsed = None
        chunks: list[str] = []
        if parsed is not None:
            _json_records(parsed, chunks, 0)
        else:
            chunks = [ln for ln in text.splitlines() if ln.strip()][:MAX_RECORDS]
        for chunk in chunks[:MAX_RECORDS]:
            toks = frozenset(t for t in tokens_of(chunk) if len(t) >= 2)
            i = len(self.records)
            self.records.append(toks)
            self.record_tools.append(tool)
            self.record_result.append(ordinal)
            self.result_records.setdefault(ordinal, []).append(i)
            if may_steer(chunk) and STEERING.search(chunk):
                self.steering_records.add(i)
            for t in toks:
                self.token_records.setdefault(t, []).append(i)

    def records_with(self, toks: Iterable[str]) -> list[int]:
        """Indices of tool-result records that contain every token of ``toks``."""
        self.ensure("records")
        lists = [self.token_records.get(t) for t in toks]
        if not lists or any(r is None for r in lists):
            return []
        first, *rest = sorted((r for r in lists if r is not None), key=len)
        return sorted(set(first).intersection(*rest))

    def extend(self, texts: Iterable[SourcedText]) -> None:
        """:meth:`add` each text."""
        for t in texts:
            self.add(t)

    # ------------------------------------------------------------------ lookups
    def _match(self, mask: int, key: str, how: str) -> Match:
        """``how`` is ``"joined"`` for a joined run: the tool that first stated that run."""
        if not mask & SOURCE_BITS["tool"]:
            return Match(mask, None, how)
        return Match(mask, (self._run_tool_of if how == "joined" else self.tool_of).get(key),
                     how)

    def token(self, t: str) -> Match:
        """A single folded token, as a token or as a joined run of tokens."""
        if t in self.tokens:
            return self._match(self.tokens[t], t, "exact")
        if t in self.joined:
            return self._match(self.joined[t], t, "joined")
        return NOWHERE

    def phrase(self, toks: list[str]) -> Match:
        """Folded tokens stated together.

        Each adjacent pair of the value must be adjacent somewhere, or the whole value be
        stated joined without separators (``JaneSmith`` for ``jane smith``).  The match
        names the sources of the adjacent words when some source that grounds values
        states them so (the joined runs are then never read), else those of the joined
        form: whether the value is found does not depend on the order.
        """
        if not toks:
            return NOWHERE
        if len(toks) == 1:
            return self.token(toks[0])
        joined = "".join(toks)
        if joined in self.tokens:
            return self.token(joined)
        mask = GROUNDING_MASK | SOURCE_BITS["assistant"]
        for a, b in itertools.pairwise(toks):
            mask &= self.bigrams.get((a, b), 0)
            if not mask:
                break
        if mask & GROUNDING_MASK:
            return self._match(mask, toks[0], "words")
        if joined in self.joined:
            return self.token(joined)
        return self._match(mask, toks[0], "words") if mask else NOWHERE

    def number(self, x: float) -> Match:
        """A stated number: ``x`` itself, sign kept.

        A percentage grounds its fraction only where a percentage is stated ("5 %" states
        5 and 0.05: :func:`numbers_in`); a positive ``x`` is also grounded by a stated
        ``-x`` (a hyphen before digits reads as a minus sign), a negative one never by ``|x|``.
        """
        self.ensure("numbers")
        mask = self.numbers.get(_key(x))
        return Match(mask, None, "number") if mask else NOWHERE

    def derived(self, x: float, decimals: int | None = None) -> Match:
        """``x`` as one arithmetic step from a tool-result number and any stated number.

        ``+ - * /`` in both orders, checked on demand: O(:data:`MAX_RESULT_NUMBERS`).  With
        ``decimals`` (1-4), a result rounded to that many places counts too (36.8 for
        49.967 - 13.2).
        """
        self.ensure("numbers")
        for a in self.result_numbers:
            cands = [x - a, a - x, x + a, x * a]
            if a:
                cands.append(x / a)
            if x:
                cands.append(a / x)
            for c in cands:
                mask = self.numbers.get(_key(c))
                if mask:
                    return Match(mask | SOURCE_BITS["tool"], None, "derived")
            # x = round(a op b): b lies within half a unit of the last place of c
            if decimals is not None and any(self.rounded(c, decimals) for c in cands[:3]):
                return Match(SOURCE_BITS["tool"], None, "derived")
        return NOWHERE

    def standalone_number(self, x: float) -> Match:
        """A number stated on its own (not a digit run inside a date, time or identifier).

        Sign kept, as in :meth:`number`.
        """
        self.ensure("numbers")
        mask = self.standalone.get(_key(x))
        return Match(mask, None, "number") if mask else NOWHERE

    def date(self, year: int | None, month: int, day: int) -> Match:
        """A calendar date: its month and day stated together.

        Or a relative phrase that resolves to it from the conversation's "today" (any date
        when today is unknown).
        """
        self.ensure("dates")
        mask = self.dates.get((month, day), 0) or (
            self.dates.get((0, day), 0) & self.dates.get((month, 0), 0))
        if mask:
            return Match(mask, None, "exact")
        if year is not None and self.spans:  # "3 nights from 1st June" -> 4 June
            try:
                target = dt.date(year, month, day)
            except ValueError:
                return NOWHERE
            for span in self.spans:
                start = target - dt.timedelta(days=span)
                mask = self.dates.get((start.month, start.day), 0)
                if mask:
                    return Match(mask, None, "derived")
        if not self.relative_phrases:
            return NOWHERE
        if self.today is None or year is None:
            return Match(self.relative_dates, None, "relative_date")
        try:
            target = dt.date(year, month, day)
        except ValueError:
            return NOWHERE
        for phrase in self.relative_phrases:
            if target in relative_candidates(phrase, self.today):
                return Match(self.relative_dates, None, "relative_date")
        return NOWHERE

    def time(self, hour: int, minute: int) -> Match:
        """A clock time stated (24-hour ``(hour, minute)``).

        Or a vague one ("this afternoon", "in two hours") the model had to resolve.
        """
        self.ensure("times")
        mask = self.times.get((hour, minute), 0)
        if mask:
            return Match(mask, None, "exact")
        if self.vague_times:
            return Match(self.vague_times, None, "relative_date")
        return NOWHERE

    def cjk_text(self, value: str) -> Match:
        """A Chinese/Japanese/Korean value stated inside a stated run (no spaces to split on)."""
        mask = 0
        for run, m in self.cjk.items():
            if value in run:
                mask |= m
        return Match(mask, None, "exact") if mask else NOWHERE

    def rounded(self, x: float, decimals: int) -> bool:
        """Whether a stated number rounds to ``x`` at ``decimals`` places."""
        self.ensure("numbers")
        r = round(x, decimals)
        return r in self.rounded_numbers.get(decimals, ()) or (
            r.is_integer() and _key(r) in self.numbers)

    def candidates(self, t: str) -> set[str]:
        """Indexed tokens of 4+ letters sharing the first two letters of ``t``.

        Typo and abbreviation candidates: "chcicago" -> "chicago", "fran" -> "francisco".
        """
        return self.prefixes.get(t[:2], set()) if len(t) >= 2 else set()


class GroundingView:
    """Several indexes read as one (the conversation, outside grounding, the tool's docs).

    Every lookup answers with the union of their matches.
    """

    def __init__(self, indexes: Iterable[GroundingIndex]) -> None:
        self.indexes = [g for g in indexes if g is not None]
        self._arithmetic_cues: int | None = None
        self._relative_dates: int | None = None
        self.codes = 0
        for g in self.indexes:
            self.codes |= g.codes

    @property
    def relative_dates(self) -> int:
        """Sources of the indexes that name a relative date (dates indexed on first use)."""
        if self._relative_dates is None:
            self._relative_dates = 0
            for g in self.indexes:
                self._relative_dates |= g.relative_dates
        return self._relative_dates

    @property
    def arithmetic_cues(self) -> int:
        """Sources that ask for arithmetic; settable (the content detector reads the request)."""
        if self._arithmetic_cues is None:
            self._arithmetic_cues = 0
            for g in self.indexes:
                self._arithmetic_cues |= g.arithmetic_cues
        return self._arithmetic_cues

    @arithmetic_cues.setter
    def arithmetic_cues(self, value: int) -> None:
        self._arithmetic_cues = value

    def _first(self, name: str, *args: object) -> Match:
        for g in self.indexes:
            m: Match = getattr(g, name)(*args)
            if m.found:
                return m
        return NOWHERE

    def token(self, t: str) -> Match:
        """See :meth:`GroundingIndex.token`."""
        return self._first("token", t)

    def phrase(self, toks: list[str]) -> Match:
        """See :meth:`GroundingIndex.phrase`."""
        return self._first("phrase", toks)

    def number(self, x: float) -> Match:
        """See :meth:`GroundingIndex.number`."""
        return self._first("number", x)

    def standalone_number(self, x: float) -> Match:
        """See :meth:`GroundingIndex.standalone_number`."""
        return self._first("standalone_number", x)

    def derived(self, x: float, decimals: int | None = None) -> Match:
        """See :meth:`GroundingIndex.derived` (tool-result numbers of the conversation)."""
        return self._first("derived", x, decimals)

    def date(self, year: int | None, month: int, day: int) -> Match:
        """See :meth:`GroundingIndex.date`."""
        return self._first("date", year, month, day)

    def time(self, hour: int, minute: int) -> Match:
        """See :meth:`GroundingIndex.time`."""
        return self._first("time", hour, minute)

    def cjk_text(self, value: str) -> Match:
        """See :meth:`GroundingIndex.cjk_text`."""
        return self._first("cjk_text", value)

    def rounded(self, x: float, decimals: int) -> bool:
        """See :meth:`GroundingIndex.rounded`."""
        return any(g.rounded(x, decimals) for g in self.indexes)

    def candidates(self, t: str) -> set[str]:
        """See :meth:`GroundingIndex.candidates`."""
        out: set[str] = set()
        for g in self.indexes:
            out |= g.candidates(t)
        return out

    def tokens_starting(self, letter: str) -> set[str]:
        """Stated tokens of 4+ letters starting with ``letter``."""
        out: set[str] = set()
        for g in self.indexes:
            for key, toks in g.prefixes.items():
                if key[:1] == letter:
                    out |= toks
        return out

    def bigrams_starting(self, first: str) -> Iterable[tuple[str, str]]:
        """Stated adjacent word pairs whose first word starts with ``first``."""
        for g in self.indexes:
            for (a, b), mask in g.bigrams.items():
                if a.startswith(first) and mask & GROUNDING_MASK:
                    yield a, b
