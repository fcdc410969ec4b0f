"""Numbers stated in English text, and the words that ask for arithmetic.

Digits, number words, percentages, ``2k``, ``two dozen``, SI quantities
(:func:`toolguard.units.si_values`).
"""

from __future__ import annotations

import math
import re

from toolguard.units import si_values
from toolguard.values.tokens import TOKEN, fold

__all__ = [
    "ARITHMETIC_CUE",
    "MONTH_NAMES",
    "WORD_NUMBERS",
    "decimals_of",
    "may_state_number",
    "number_key",
    "numbers_in",
    "standalone_numbers_in",
]

MONTH_NAMES: dict[str, int] = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9,
    "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}
"""English month names and their abbreviations, by month number."""

WORD_NUMBERS: dict[str, float] = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
    "million": 1_000_000, "billion": 1_000_000_000, "dozen": 12, "half": 0.5,
    "quarter": 0.25, "twice": 2, "double": 2, "triple": 3, "single": 1, "once": 1,
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "pair": 2, "couple": 2,
    **MONTH_NAMES,
}
"""English words that state a number (counts, fractions, ordinals, and the
:data:`MONTH_NAMES`: a month name states its number)."""
_WORD_NUMBER_SET = frozenset(WORD_NUMBERS)

ARITHMETIC_CUE = re.compile(
    r"\b(?:total|sum|add(?:ed|ing)?|plus|minus|subtract\w*|difference|remain(?:ing|der)?|"
    r"double|twice|triple|half|halve|split|divide[ds]?|times|multipl\w*|increase[ds]?|"
    r"decrease[ds]?|reduce[ds]?|top\s+up|fill(?:ed|ing)?|convert\w*|average|mean|percent\w*|"
    r"discount|tax|tip|interest|calculate|compute|combined|altogether|round(?:ed)?)\b|%|"
    r"\d\s*[-+*/x]\s*\d", re.I)
"""Words asking for arithmetic: a derived number (one arithmetic step over stated numbers)
grounds a value only when the user side used one."""

_NUM = re.compile(r"(?<![\d.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?", re.I)
_SIGNED = re.compile(r"(?:(?<=\s)|^)[-\u2212]\s+(\d+(?:\.\d+)?)(?![\d.])"
                     r"|(?<![\d.])(\d+(?:\.\d+)?)\s*\u00b0?\s*[ws]\b")
"""Negative numbers written with a spaced minus (``5x^2 - 7x``) or as a coordinate in the
western or southern hemisphere (``119.5383 W``)."""
_MULTIPLIERS = frozenset(("dozen", "hundred", "thousand", "million"))
_MULTIPLIED = re.compile(r"\b(\d+|[a-z]+)\s+(dozen|hundred|thousand|million)\b")
_SCALED = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*(%|percent|k\b|m\b|million|thousand|billion)")
_SCALES = {"%": 0.01, "percent": 0.01, "k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6,
           "billion": 1e9}
_YEAR_SHORT = re.compile(r"['’](\d{2})\b")
_DIGITS = re.compile(r"\d{1,15}")
_DIGIT = re.compile(r"\d")
_STRUCTURED = re.compile(
    r"(?<![\w.+-])[\w.+-]+@[^\s@]+|https?://\S+|www\.\S+"  # emails, urls
    r"|\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}"  # dates
    r"|\d{1,2}:\d{2}(?::\d{2})?"  # clock times
    # identifiers: a letter, then digits ("BK-98700", not "5kg")
    r"|\b[a-z][\w-]{0,40}\d[\w-]{0,40}",
    re.I)
"""Spans whose digits are not numbers on their own: emails, URLs, dates, clock times,
identifiers."""


def number_key(x: float) -> float:
    """``x`` rounded to 6 decimals: how numbers are compared."""
    return round(x, 6)


def decimals_of(x: float) -> int | None:
    """Decimal places of ``x`` when 1-4 (``None`` for integers and longer fractions)."""
    text = repr(x)
    if "e" in text or "." not in text:
        return None
    decimals = len(text.split(".")[1].rstrip("0"))
    return decimals if 1 <= decimals <= 4 else None


def may_state_number(text: str, tokens: list[str]) -> bool:
    """Whether :func:`numbers_in` may find a number: ``text`` has a digit or a number word.

    ``tokens`` are the folded tokens of ``text`` (:func:`~toolguard.values.tokens.tokens_of`).
    """
    return bool(_DIGIT.search(fold(text))) or not _WORD_NUMBER_SET.isdisjoint(tokens)


def numbers_in(text: str, *, digit_runs: bool = True) -> set[float]:
    """Numbers a text states, keyed by :func:`number_key`.

    Digits (sign kept: ``-500`` states -500 and 500, a hyphen before digits reading both
    ways), number words (``two dozen`` -> 24), percentages (``5 %`` -> 5 and 0.05), ``2k``,
    ``3 million``, ``'19`` (2019 and 1919), SI quantities (``100µF`` -> 0.0001).  With
    ``digit_runs``, every run of digits counts on its own too (``2023.4.15`` states 2023, 4
    and 15).
    """
    low = fold(text)
    out: set[float] = set()
    for m in _NUM.finditer(low):
        try:
            x = float(m.group(0).replace(",", ""))
        except ValueError:
            continue
        if math.isfinite(x):
            out.update((number_key(x), number_key(abs(x))))
    for m in _SIGNED.finditer(low):
        out.add(number_key(-float(m.group(1) or m.group(2))))
    if not text.isascii() or any(c.isdigit() for c in text):
        out.update(number_key(x) for x in si_values(text))
    if digit_runs:  # "2023.4.15", "5,10 and 15", "[22,33]"
        out.update(float(d) for d in _DIGITS.findall(low))
    words = set(TOKEN.findall(low))
    if not _MULTIPLIERS.isdisjoint(words):  # the unit is a whole token: skip the pattern
        for m in _MULTIPLIED.finditer(low):
            head, unit = m.group(1), m.group(2)
            base = float(head) if head.isdigit() else WORD_NUMBERS.get(head)
            if base is not None:
                out.add(number_key(float(base) * WORD_NUMBERS[unit]))
    for m in _YEAR_SHORT.finditer(low):
        out.update((2000.0 + int(m.group(1)), 1900.0 + int(m.group(1))))
    for word in words & _WORD_NUMBER_SET:
        out.add(float(WORD_NUMBERS[word]))
    for m in _SCALED.finditer(low):
        out.add(number_key(float(m.group(1)) * _SCALES[m.group(2)]))
    return out


def standalone_numbers_in(text: str) -> set[float]:
    """Numbers a text states on their own.

    :func:`numbers_in` after dates, clock times, emails, URLs and identifiers mixing letters
    and digits are removed (``7`` is not stated by ``2026-07-14`` or ``BK-98700``).
    """
    return numbers_in(_STRUCTURED.sub(" ", text), digit_runs=False)
