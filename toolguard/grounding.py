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

import itertools
import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

from toolguard.conversation import SourcedText

__all__ = [
    "SOURCE_BITS",
    "GroundingIndex",
    "Match",
    "fold",
    "numbers_in",
    "tokens_of",
]

SOURCE_BITS = {"user": 1, "system": 2, "tool": 4, "grounding": 8, "assistant": 16}
"""Provenance bits: who said a text.  ``assistant`` texts are indexed for completeness but
never ground a value (the model cannot ground its own guesses)."""
TRUSTED = SOURCE_BITS["user"] | SOURCE_BITS["system"] | SOURCE_BITS["grounding"]
"""Sources the user controls: the user, the system prompt, facts resolved for the user."""
GROUNDING_MASK = TRUSTED | SOURCE_BITS["tool"]
"""Sources that ground a value (everything but the assistant's own words)."""

MAX_RESULT_NUMBERS = 40
"""Tool-result numbers an arithmetic step may start from (the most recent ones)."""

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_NUM = re.compile(r"(?<![\d.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?", re.I)
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
RELATIVE_DATE = re.compile(
    r"\b(?:today|tonight|tomorrow|yesterday|weekend|" + _WEEKDAY + r"|"
    r"(?:this|next|last|past|coming|upcoming)\s+(?:hour|day|week|month|year|decade|century|"
    r"quarter|weekend|morning|afternoon|evening|night|" + _WEEKDAY + r")|"
    r"(?:\d+|[a-z]+)\s+(?:hours?|days?|weeks?|months?|years?)\s+(?:ago|from now)|"
    r"(?:daily|weekly|monthly|yearly|annually|quarterly|hourly)|"
    r"\d{1,2}\s*[ap]\.?m\.?)(?![a-z])",
    re.I,
)
"""Phrases that name a date relative to now; a date value is then the model's to resolve."""

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


def numbers_in(text: str) -> set[float]:
    """Numbers a text states (see the module docstring), rounded to 6 decimals."""
    low = fold(text)
    out: set[float] = set()
    for m in _NUM.finditer(low):
        try:
            x = float(m.group(0).replace(",", ""))
        except ValueError:
            continue
        if math.isfinite(x):
            out.update((_key(x), _key(abs(x))))
    # every digit run on its own too: "2023.4.15", "5,10 and 15", "[22,33]"
    out.update(float(d) for d in re.findall(r"\d{1,15}", low))
    for m in re.finditer(r"\b(\d+|[a-z]+)\s+(dozen|hundred|thousand|million)\b", low):
        head, unit = m.group(1), m.group(2)
        base = float(head) if head.isdigit() else WORD_NUMBERS.get(head)
        if base is not None:
            out.add(_key(float(base) * WORD_NUMBERS[unit]))
    for m in re.finditer(r"['’](\d{2})\b", low):  # '19 -> 2019 and 1919
        out.update((2000.0 + int(m.group(1)), 1900.0 + int(m.group(1))))
    for word in _TOKEN.findall(low):
        if word in WORD_NUMBERS:
            out.add(float(WORD_NUMBERS[word]))
    for m in re.finditer(r"(\d+(?:\.\d+)?)\s*(%|percent|k\b|m\b|million|thousand|billion)", low):
        base = float(m.group(1))
        unit = m.group(2)
        scale = {"%": 0.01, "percent": 0.01, "k": 1e3, "thousand": 1e3, "m": 1e6,
                 "million": 1e6, "billion": 1e9}[unit]
        out.add(_key(base * scale))
    return out


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


@dataclass
class GroundingIndex:
    """The index (module docstring).  Add texts with :meth:`add`; look values up.

    Attributes:
        texts_added: Number of texts added so far (callers extend from here).
    """

    tokens: dict[str, int] = field(default_factory=dict)
    bigrams: dict[tuple[str, str], int] = field(default_factory=dict)
    joined: dict[str, int] = field(default_factory=dict)
    numbers: dict[float, int] = field(default_factory=dict)
    result_numbers: list[float] = field(default_factory=list)
    relative_dates: int = 0
    rounded_numbers: dict[int, set[float]] = field(default_factory=dict)
    prefixes: dict[str, set[str]] = field(default_factory=dict)
    tool_of: dict[str, str] = field(default_factory=dict)
    texts_added: int = 0

    # ------------------------------------------------------------------ building
    def add(self, text: SourcedText) -> None:
        """Index one text with its provenance (assistant texts never ground values)."""
        self.texts_added += 1
        bit = SOURCE_BITS.get(text.source, 0)
        if not text.text or text.source == "assistant":
            return
        toks = tokens_of(text.text)
        tool = text.tool if text.source == "tool" else None
        for i, t in enumerate(toks):
            self._put(self.tokens, t, bit, tool)
            if len(t) >= 4:
                self.prefixes.setdefault(t[:2], set()).add(t)
            if i:
                self.bigrams[(toks[i - 1], t)] = self.bigrams.get((toks[i - 1], t), 0) | bit
                self._put(self.joined, toks[i - 1] + t, bit, tool)
                if i > 1:
                    self._put(self.joined, toks[i - 2] + toks[i - 1] + t, bit, tool)
        nums = numbers_in(text.text)
        for x in nums:
            self.numbers[x] = self.numbers.get(x, 0) | bit
            if not x.is_integer():  # an integer rounds to itself at every place
                for d in range(1, 5):
                    self.rounded_numbers.setdefault(d, set()).add(round(x, d))
        if text.source == "tool":
            self.result_numbers.extend(sorted(nums)[:MAX_RESULT_NUMBERS])
            del self.result_numbers[:-MAX_RESULT_NUMBERS]
        if RELATIVE_DATE.search(text.text):
            self.relative_dates |= bit

    def extend(self, texts: Iterable[SourcedText]) -> None:
        """:meth:`add` each text."""
        for t in texts:
            self.add(t)

    def _put(self, table: dict[str, int], key: str, bit: int, tool: str | None) -> None:
        table[key] = table.get(key, 0) | bit
        if tool is not None and key not in self.tool_of:
            self.tool_of[key] = tool

    # ------------------------------------------------------------------ lookups
    def _match(self, mask: int, key: str, how: str) -> Match:
        return Match(mask, self.tool_of.get(key) if mask & SOURCE_BITS["tool"] else None, how)

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
        stated joined without separators (``JaneSmith`` for ``jane smith``).
        """
        if not toks:
            return NOWHERE
        if len(toks) == 1:
            return self.token(toks[0])
        joined = "".join(toks)
        if joined in self.tokens or joined in self.joined:
            return self.token(joined)
        mask = GROUNDING_MASK | SOURCE_BITS["assistant"]
        for a, b in itertools.pairwise(toks):
            mask &= self.bigrams.get((a, b), 0)
            if not mask:
                return NOWHERE
        return self._match(mask, toks[0], "words")

    def number(self, x: float) -> Match:
        """A stated number (``x``, or ``x`` as a percentage of a stated one)."""
        for cand in (_key(x), _key(abs(x)), _key(x * 100), _key(x / 100) if x else None):
            if cand is not None and cand in self.numbers:
                return Match(self.numbers[cand], None, "number")
        return NOWHERE

    def derived(self, x: float, decimals: int | None = None) -> Match:
        """``x`` as one arithmetic step from a tool-result number and any stated number.

        ``+ - * /`` in both orders, checked on demand: O(:data:`MAX_RESULT_NUMBERS`).  With
        ``decimals`` (1-4), a result rounded to that many places counts too (36.8 for
        49.967 - 13.2).
        """
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

    def rounded(self, x: float, decimals: int) -> bool:
        """Whether a stated number rounds to ``x`` at ``decimals`` places."""
        r = round(x, decimals)
        return r in self.rounded_numbers.get(decimals, ()) or (
            r.is_integer() and _key(r) in self.numbers)

    def candidates(self, t: str) -> set[str]:
        """Indexed tokens of 4+ letters sharing the first two letters of ``t``.

        Typo and abbreviation candidates: "chcicago" -> "chicago", "fran" -> "francisco".
        """
        return self.prefixes.get(t[:2], set()) if len(t) >= 2 else set()
