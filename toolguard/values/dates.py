"""Calendar dates in English text and in values.

ISO 8601, D/M/Y and M/D/Y, month names, days and months stated apart, day spans, and phrases
relative to today.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from toolguard.values.numbers import MONTH_NAMES, WORD_NUMBERS
from toolguard.values.tokens import fold, tokens_of

__all__ = [
    "DATE_VALUE",
    "MONTH_NAMES",
    "RELATIVE_DATE",
    "TODAY_IS",
    "DateValue",
    "date_value",
    "dates_in",
    "has_month_name",
    "may_name_relative_date",
    "partial_dates_in",
    "relative_candidates",
    "spans_in",
    "today_in",
]

_MONTH_RE = "|".join(sorted(MONTH_NAMES, key=len, reverse=True))
_MONTH_SET = frozenset(MONTH_NAMES)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY = "(?:" + "|".join(_WEEKDAYS) + ")"

DATE_VALUE = re.compile(
    r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[T ][\d:.]+Z?)?$"
    r"|^(\d{1,2})[/.-](\d{1,2})[/.-](\d{2,4})$"
    r"|^(?:--)?(\d{1,2})[/-](\d{1,2})$")
"""A value that is a date: ISO 8601 (``2026-04-21``, ``2026-04-21T10:00``), D/M/Y or M/D/Y
(``21/4/2026``, ``4.21.26``), or a month and day without a year (``04-21``, ``21-04``,
``4/21``, ISO's ``--04-21``)."""

_ISO_DATE = re.compile(r"(?<!\d)(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)")
_DMY_DATE = re.compile(r"(?<!\d)(?<!\d[-/.])(\d{1,2})[-/.](\d{1,2})(?:[-/.](\d{2,4}))?(?![\d])")
_WORD_DATE = re.compile(
    r"\b(?:(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(" + _MONTH_RE + r")\b\.?"
    r"|(" + _MONTH_RE + r")\b\.?\s*(?:the\s+)?(\d{1,2})(?:st|nd|rd|th)?\b)", re.I)
_WORD_DATE_OF = re.compile(
    r"\b(\d{1,2})(?:st|nd|rd|th)?\s+of\s+(?:this|next|last|the\s+coming)\s+(" + _MONTH_RE + r")\b",
    re.I)
_DAY_ONLY = re.compile(r"\b(?:the|on|by|from|until|till)\s+(\d{1,2})(?:st|nd|rd|th)\b", re.I)
_MONTH_ONLY = re.compile(r"\b(" + _MONTH_RE + r")\b", re.I)
_SPAN = re.compile(r"\b(\d{1,2}|[a-z]+)\s+(nights?|days?|weeks?)\b", re.I)
TODAY_IS = re.compile(r"\btoday\s+is\b[^.\n]{0,40}?(\d{4})-(\d{1,2})-(\d{1,2})", re.I)
"""A text giving today's date ("Today is Monday, 2026-03-02")."""

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


@dataclass(frozen=True, slots=True)
class DateValue:
    """A date value read: its year when it has one, and the ``(month, day)`` readings.

    Attributes:
        year: The year (two digits read as 20xx), ``None`` for a month and day alone.
        readings: ``(month, day)`` pairs it may mean: one for ISO 8601, both orders for
            ``4/5/2026`` or ``04-05`` (an order that is no calendar day is dropped).
    """

    year: int | None
    readings: tuple[tuple[int, int], ...]


def _valid_md(month: int, day: int) -> bool:
    return 1 <= month <= 12 and 1 <= day <= 31


def date_value(raw: str) -> DateValue | None:
    """The date a value names (:data:`DATE_VALUE`), ``None`` if it is not one."""
    m = DATE_VALUE.match(raw.strip())
    if m is None:
        return None
    if m.group(1):
        return DateValue(int(m.group(1)), ((int(m.group(2)), int(m.group(3))),))
    if m.group(4):
        a, b, y = int(m.group(4)), int(m.group(5)), int(m.group(6))
        year: int | None = y + 2000 if y < 100 else y
    else:
        a, b, year = int(m.group(7)), int(m.group(8)), None
    return DateValue(year, tuple(md for md in ((a, b), (b, a)) if _valid_md(*md)) or ((a, b),))


def _month_number(word: str) -> int:
    """The month a case-insensitive match of a month name names (0 if none).

    ``re.I`` matches some non-ASCII letters to ASCII ones (Turkish ``İ``, ``ı`` to ``i``),
    which ``str.lower`` keeps apart: folded here.
    """
    folded = fold(word)
    return MONTH_NAMES.get(folded) or MONTH_NAMES.get(folded.replace("ı", "i"), 0)


def has_month_name(text: str) -> bool:
    """Whether a token of ``text`` is a month name: the month patterns need one."""
    return not _MONTH_SET.isdisjoint(tokens_of(text))


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


def partial_dates_in(text: str) -> set[tuple[int, int]]:
    """Days and months stated apart.

    ``(0, day)`` for "on the 9th", ``(month, 0)`` for a month name ("currently is sep 2023";
    "may" only capitalised: the verb is not a month).
    """
    out: set[tuple[int, int]] = set()
    for m in _DAY_ONLY.finditer(text):
        if 1 <= int(m.group(1)) <= 31:
            out.add((0, int(m.group(1))))
    for m in _MONTH_ONLY.finditer(text) if has_month_name(text) else ():
        month = _month_number(m.group(1))
        if month and (month != 5 or text[m.start():m.start() + 1] == "M"):
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


def today_in(text: str) -> dt.date | None:
    """The date a text gives for today ("Today is Monday, 2026-03-02"), if any."""
    m = TODAY_IS.search(text)
    if m is None or not _valid_md(int(m.group(2)), int(m.group(3))):
        return None
    try:
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def may_name_relative_date(text: str) -> bool:
    """Cheap necessary condition for :data:`RELATIVE_DATE` (one of its words, or ``5 pm``)."""
    low = text.lower()
    return any(p in low for p in _RELATIVE_PARTS) or bool(_AMPM.search(text))


def relative_candidates(phrase: str, today: dt.date) -> set[dt.date]:
    """Dates a relative phrase may name, from ``today`` (generous: a week's slack)."""
    p = phrase.lower()
    days = [today + dt.timedelta(days=k) for k in range(-7, 15)]
    wd = re.search("|".join(_WEEKDAYS), p)
    if wd:
        target = _WEEKDAYS.index(wd.group(0))
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
