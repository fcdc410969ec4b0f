"""Where a value was said: an incremental, provenance-aware index of a conversation's texts.

:class:`GroundingIndex` reads each text once, when it is added, into hash tables, so a lookup
costs the size of the value, not of the history:

- **tokens**: folded alphanumeric runs (:func:`~toolguard.values.tokens.tokens_of`), each
  with the sources it came from;
- **bigrams** of adjacent tokens, so a multi-word value is found only where its words are
  adjacent (``"los angeles"``), and **joined runs** of 2-3 adjacent tokens, so ``JaneSmith``
  matches ``Jane Smith`` and ``2024-05-01`` matches ``20240501``;
- **numbers**, **dates** and **clock times** (:mod:`toolguard.values`), and the numbers of
  tool results, so an arithmetic step over them is checked on demand;
- **records** of tool results for provenance checks: one record per result, the whole
  text (JSON, YAML or prose alike), never a line or an object on its own, read on first need
  as a record of fields (:class:`RecordFields`);
- a **prefix index** of tokens (first two letters) for typo and abbreviation candidates.

Every entry carries a bit mask of :data:`SOURCE_BITS` (user, system, tool result, outside
grounding) and, for tool results, the name of a tool that returned it.  Matching is by whole
tokens only: ``mallory@evil.example`` is not grounded by ``attacker@evil.example``.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib
import itertools
import json
import operator
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

from toolguard.records import SourcedText
from toolguard.values.dates import (
    RELATIVE_DATE,
    TODAY_IS,
    dates_in,
    may_name_relative_date,
    partial_dates_in,
    relative_candidates,
    spans_in,
    today_in,
)
from toolguard.values.kinds import CJK
from toolguard.values.knowledge import UNCODED_CAPITALS
from toolguard.values.numbers import (
    ARITHMETIC_CUE,
    may_state_number,
    number_key,
    numbers_in,
    standalone_numbers_in,
)
from toolguard.values.times import states_vague_time, times_in
from toolguard.values.tokens import tokens_of

__all__ = [
    "FACETS",
    "GROUNDING_MASK",
    "MAX_FIELD_TOKENS",
    "NOWHERE",
    "RELATIVE_DATE",
    "SOURCE_BITS",
    "TRUSTED",
    "GroundingIndex",
    "GroundingView",
    "Match",
    "RecordFields",
    "dates_in",
    "field_key",
    "path_pattern",
    "record_fields_of",
    "times_in",
    "tokens_of",
]
"""``RELATIVE_DATE``, ``dates_in``, ``times_in`` and ``tokens_of`` are re-exported from
:mod:`toolguard.values` (their home)."""

SOURCE_BITS = {"user": 1, "system": 2, "tool": 4, "grounding": 8, "assistant": 16}
"""Provenance bits: who said a text.  ``assistant`` texts are indexed for completeness but
never ground a value (the model cannot ground its own guesses)."""
TRUSTED = SOURCE_BITS["user"] | SOURCE_BITS["system"] | SOURCE_BITS["grounding"]
"""Sources the user controls: the user, the system prompt, facts resolved for the user."""
GROUNDING_MASK = TRUSTED | SOURCE_BITS["tool"]
"""Sources that ground a value (everything but the assistant's own words)."""

MAX_RESULT_NUMBERS = 40
"""Tool-result numbers an arithmetic step may start from (the most recent ones)."""

_CODE_TOKEN = re.compile(r"(?<![\w$])(?!(?:" + "|".join(UNCODED_CAPITALS) + r")\b)[A-Z]{3,5}\b")
"""A 3-5 capital word that may be a code a lookup returned (a ticker, an airport)."""

P = ParamSpec("P")
T = TypeVar("T")


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


def _facets() -> tuple[str, ...]:
    return FACETS


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
        records: One per tool result (its tokens of 2+ characters); ``record_tools``,
            ``record_texts`` and ``record_positions`` (the index of its ``ToolMessage`` in
            the conversation) give each one's tool, text and place.
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
    record_texts: list[str] = field(default_factory=list)
    record_positions: list[int] = field(default_factory=list)
    _record_fields: dict[int, RecordFields] = field(default_factory=dict)
    _record_numbers: dict[int, frozenset[float]] = field(default_factory=dict)
    _marks: dict[Callable[[str], bool], tuple[int, set[int]]] = field(default_factory=dict)
    token_records: dict[str, list[int]] = field(default_factory=dict)
    texts_added: int = 0
    # texts waiting for the lazy facets: (ordinal, text, bit, states a number)
    _pending: list[tuple[int, SourcedText, int, bool]] = field(default_factory=list)
    _done: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_facets(), 0))
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
        has_num = may_state_number(text.text, toks)
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
            if not t.isascii() and CJK.search(t):
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
            index = _FACET_INDEXERS[facet]
            for entry in self._pending[start:end]:
                index(self, *entry)
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
            self.today = today_in(text.text)
        for m in RELATIVE_DATE.finditer(text.text) if may_name_relative_date(text.text) else ():
            self._relative_dates |= bit
            if len(self.relative_phrases) < 64 and not (
                    text.source == "system" and TODAY_IS.search(text.text)):
                self.relative_phrases.append(m.group(0))

    def _index_times(self, ordinal: int, text: SourcedText, bit: int, has_num: bool) -> None:
        if has_num:  # every clock time has a digit
            for hm in times_in(text.text):
                self.times[hm] = self.times.get(hm, 0) | bit
        if states_vague_time(text.text):
            self.vague_times |= bit

    def _index_records(self, ordinal: int, text: SourcedText, bit: int, has_num: bool) -> None:
        if text.source == "tool":
            self._add_record(text, ordinal)

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

    def _add_record(self, text: SourcedText, ordinal: int) -> None:
        """Index a tool result as one record: its whole text, whatever its format.

        A record judged line by line lets a value on a line of its own escape the text
        around it (YAML wraps a sentence); a JSON object judged alone does the same.
        """
        toks = frozenset(t for t in tokens_of(text.text) if len(t) >= 2)
        i = len(self.records)
        self.records.append(toks)
        self.record_tools.append(text.tool)
        self.record_result.append(ordinal)
        self.record_positions.append(text.index)
        self.result_records.setdefault(ordinal, []).append(i)
        self.record_texts.append(text.text)
        for t in toks:
            self.token_records.setdefault(t, []).append(i)

    def record_fields(self, i: int) -> RecordFields:
        """The fields of record ``i`` (:class:`RecordFields`), parsed once per record.

        A value that is a whole field of a structured result (an id, an account, a sender)
        is data the tool returned; one inside a longer text (a subject, a body, a page) is
        whatever its author wrote.
        """
        done = self._record_fields.get(i)
        if done is None:
            done = record_fields_of(self.record_texts[i])
            self._record_fields[i] = done
        return done

    def record_numbers(self, i: int) -> frozenset[float]:
        """The numbers record ``i``'s text states anywhere (:func:`numbers_in`, keyed)."""
        done = self._record_numbers.get(i)
        if done is None:
            done = frozenset(number_key(x) for x in numbers_in(self.record_texts[i]))
            self._record_numbers[i] = done
        return done

    def records_with(self, toks: Iterable[str]) -> list[int]:
        """Indices of tool-result records that contain every token of ``toks``."""
        self.ensure("records")
        lists = [self.token_records.get(t) for t in toks]
        if not lists or any(r is None for r in lists):
            return []
        first, *rest = sorted((r for r in lists if r is not None), key=len)
        return sorted(set(first).intersection(*rest))

    def marked_records(self, mark: Callable[[str], bool]) -> set[int]:
        """Indices of tool-result records whose text ``mark`` accepts.

        Each record is read once per ``mark`` (the answer is kept and extended as records
        are added): the provenance detector marks records addressed to the agent.
        """
        self.ensure("records")
        with self._lock:
            done, marked = self._marks.get(mark, (0, set()))
            texts = self.record_texts
            marked.update(i for i in range(done, len(texts)) if mark(texts[i]))
            self._marks[mark] = (len(texts), marked)
        return marked

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

        A percentage grounds its fraction only where a percentage is stated ("5 %" states 5
        and 0.05: :func:`~toolguard.values.numbers.numbers_in`); a positive ``x`` is also
        grounded by a stated ``-x`` (a hyphen before digits reads as a minus sign), a negative
        one never by ``|x|``.
        """
        self.ensure("numbers")
        mask = self.numbers.get(number_key(x))
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
                mask = self.numbers.get(number_key(c))
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
        mask = self.standalone.get(number_key(x))
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
            r.is_integer() and number_key(r) in self.numbers)

    def candidates(self, t: str) -> set[str]:
        """Indexed tokens of 4+ letters sharing the first two letters of ``t``.

        Typo and abbreviation candidates: "chcicago" -> "chicago", "fran" -> "francisco".
        """
        return self.prefixes.get(t[:2], set()) if len(t) >= 2 else set()

    def tokens_starting(self, letter: str) -> set[str]:
        """Stated tokens of 4+ letters starting with ``letter``."""
        out: set[str] = set()
        for key, toks in self.prefixes.items():
            if key[:1] == letter:
                out |= toks
        return out

    def bigrams_starting(self, first: str) -> list[tuple[str, str]]:
        """Adjacent word pairs whose first word starts with ``first`` (grounding sources)."""
        return [(a, b) for (a, b), mask in self.bigrams.items()
                if a.startswith(first) and mask & GROUNDING_MASK]


MAX_FIELD_TOKENS = 8
"""Tokens of the longest string that counts as a field value of a structured tool result;
a longer string is free text, one opaque value."""
_YAML_LINE = re.compile(r"^(?:- |[\w][\w .-]{0,40}: )", re.M)
_MAILBOX = re.compile(r"^[^<>@]*<([^<>\s]+@[^<>\s]+)>$")
"""RFC 5322's ``display-name <addr-spec>``: the address is a value of its field."""
_INDEX_PART = re.compile(r"\[\d+\]")

FieldKey = tuple[str, ...] | float
"""How a field value is compared: its folded tokens, or a number (:func:`number_key`)."""


@dataclass(frozen=True, slots=True)
class RecordFields:
    """One tool result read as a record of fields.

    A JSON or YAML result is a tree; each scalar leaf is a field at its JSON path
    (``[2].sender``, ``transactions[0].amount``); a CSV-like table (a header of names, then
    rows of as many cells) is a list of rows.  A string leaf of up to
    :data:`MAX_FIELD_TOKENS` tokens is a *value* (an id, an account, a name); a longer one
    is free text, one opaque value (``texts``): nothing inside it is a field.  A result
    that is one short line (a bare IBAN) is one value at path ``""``; prose has no fields.

    Attributes:
        values: Field value (:data:`FieldKey`) -> the paths that hold it whole.
        texts: ``(path, text)`` of every string that is not one short line: the free-text
            fields and the sentences (``""``: a prose result).
        raw: Field value -> its text as the result wrote it (first one seen).
        by_pattern: A path with its list indices dropped (``[].sender``) -> the values
            found there; only paths that end in a named key.
    """

    values: dict[FieldKey, tuple[str, ...]]
    texts: tuple[tuple[str, str], ...]
    raw: dict[FieldKey, str]
    by_pattern: dict[str, frozenset[FieldKey]]

    def paths(self, key: FieldKey) -> tuple[str, ...]:
        """The paths where ``key`` is a whole field (``()``: nowhere)."""
        return self.values.get(key, ())

    def inside(self, toks: tuple[str, ...]) -> str | None:
        """The path of the first text that states ``toks`` as adjacent words, else ``None``."""
        n = len(toks)
        for path, text in self.texts:
            words = tokens_of(text)
            if any(tuple(words[k:k + n]) == toks for k in range(len(words) - n + 1)):
                return path
        return None


def path_pattern(path: str) -> str:
    """``path`` with its list indices dropped: ``[2].sender`` -> ``[].sender``."""
    return _INDEX_PART.sub("[]", path)


def field_key(value: Any) -> FieldKey | None:
    """How a scalar compares as a field value, or ``None`` for free text and non-values.

    Numbers (and strings that are one number) compare as numbers; other strings by their
    folded tokens when they have 1 to :data:`MAX_FIELD_TOKENS` of them.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return number_key(float(value))
    text = str(value).strip()
    try:
        return number_key(float(text.replace(",", ""))) if _NUMERIC.match(text) else (
            _token_key(text))
    except ValueError:
        return _token_key(text)


_NUMERIC = re.compile(r"^[-+]?\d[\d,]*(?:\.\d+)?$")


def _token_key(text: str) -> tuple[str, ...] | None:
    toks = tuple(tokens_of(text))
    return toks if 0 < len(toks) <= MAX_FIELD_TOKENS else None


def record_fields_of(text: str) -> RecordFields:
    """A tool result's text read as a :class:`RecordFields`."""
    values: dict[FieldKey, list[str]] = {}
    raw: dict[FieldKey, str] = {}
    texts: list[tuple[str, str]] = []
    patterns: dict[str, set[FieldKey]] = {}

    def add(key: FieldKey, path: str, shown: str) -> None:
        paths = values.setdefault(key, [])
        if len(paths) < 16:
            paths.append(path)
        raw.setdefault(key, shown)
        pattern = path_pattern(path)
        if pattern and not pattern.endswith("]"):
            patterns.setdefault(pattern, set()).add(key)

    data = _parsed(text)
    if data is None:
        data = _table(text)
    if data is None:  # prose: one value when it is one short line, else one text
        stripped = text.strip()
        leaves: Iterable[tuple[str, object]] = (
            [("", stripped)] if stripped and "\n" not in stripped else [])
        if stripped and "\n" in stripped:
            texts.append(("", text))
    else:
        leaves = _leaves(data, "")
    for path, leaf in leaves:
        key = field_key(leaf)
        shown = str(leaf)
        if isinstance(leaf, str) and (key is None or " " in leaf.strip()):
            texts.append((path, leaf))
        if key is None:
            continue
        add(key, path, shown)
        mailbox = _MAILBOX.match(shown.strip()) if isinstance(leaf, str) else None
        if mailbox is not None:
            address = _token_key(mailbox.group(1))
            if address is not None:
                add(address, path, mailbox.group(1))
    return RecordFields(values={k: tuple(v) for k, v in values.items()}, texts=tuple(texts),
                        raw=raw, by_pattern={p: frozenset(k) for p, k in patterns.items()})


def _parsed(text: str) -> object:
    """A tool result as JSON or YAML data; ``None`` for prose (or a lone scalar)."""
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        try:
            return json.loads(stripped)
        except (ValueError, RecursionError):
            return None
    if not _YAML_LINE.match(stripped):
        return None
    yaml: Any = importlib.import_module("yaml")  # PyYAML, a dependency of langchain-core
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, when built with it
    try:
        data = yaml.load(stripped, Loader=loader)  # a safe loader
    except (yaml.YAMLError, ValueError, RecursionError):
        return None
    return data if isinstance(data, (dict, list)) else None


_HEADER_CELL = re.compile(r"^[A-Za-z][\w .-]{0,30}$")


def _table(text: str) -> list[dict[str, str]] | None:
    """A CSV-like result (a header row, then rows of as many cells) as rows of fields.

    The header has at least two cells, each a short name; a row with another number of
    cells (a comment, a sentence with a comma) is not a row and stays out.  ``None`` when
    no row matches: the result is prose.
    """
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) < 2:
        return None
    sep = next((c for c in (",", "\t", ";") if c in lines[0]), None)
    if sep is None:
        return None
    header = [c.strip() for c in lines[0].split(sep)]
    if len(header) < 2 or not all(_HEADER_CELL.match(c) for c in header):
        return None
    rows = [dict(zip(header, (c.strip() for c in ln.split(sep)), strict=True))
            for ln in lines[1:501] if ln.count(sep) == len(header) - 1]
    return rows or None


def _leaves(data: object, path: str, depth: int = 0) -> Iterable[tuple[str, object]]:
    """``(JSON path, scalar)`` of a parsed result (lists: the first 500 items)."""
    if depth > 20:
        return
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, f"{path}.{k}" if path else str(k), depth + 1)
    elif isinstance(data, list):
        for n, v in enumerate(data[:500]):
            yield from _leaves(v, f"{path}[{n}]", depth + 1)
    elif data is not None and not isinstance(data, bool):
        yield path, data


_FACET_INDEXERS: dict[str, Callable[[GroundingIndex, int, SourcedText, int, bool], None]] = {
    "joined": GroundingIndex._index_joined,
    "numbers": GroundingIndex._index_numbers,
    "dates": GroundingIndex._index_dates,
    "times": GroundingIndex._index_times,
    "records": GroundingIndex._index_records,
}
"""How each lazy facet indexes one pending text ``(ordinal, text, source bit, states a
number)``."""
FACETS: tuple[str, ...] = tuple(_FACET_INDEXERS)
"""The parts of :class:`GroundingIndex` read lazily: a text is indexed for a facet the first
time a lookup needs that facet (each text still once per facet, in order)."""


def _union(masks: Iterable[int]) -> int:
    return functools.reduce(operator.or_, masks, 0)


class GroundingView:
    """Several indexes read as one (the conversation, outside grounding, the tool's docs).

    A lookup is any :class:`GroundingIndex` method, passed unbound with its arguments:
    ``view.first(GroundingIndex.token, "paris")`` answers with the first index that finds
    the value, :meth:`union` joins the answers of every index.
    """

    def __init__(self, indexes: Iterable[GroundingIndex]) -> None:
        self.indexes = [g for g in indexes if g is not None]
        self.codes = _union(g.codes for g in self.indexes)

    @functools.cached_property
    def relative_dates(self) -> int:
        """Sources of the indexes that name a relative date (dates indexed on first use)."""
        return _union(g.relative_dates for g in self.indexes)

    @functools.cached_property
    def arithmetic_cues(self) -> int:
        """Sources that ask for arithmetic; settable (the content detector reads the request)."""
        return _union(g.arithmetic_cues for g in self.indexes)

    def first(self, lookup: Callable[Concatenate[GroundingIndex, P], Match],
              *args: P.args, **kwargs: P.kwargs) -> Match:
        """The first index's match of ``lookup`` that finds the value, else :data:`NOWHERE`."""
        for g in self.indexes:
            m = lookup(g, *args, **kwargs)
            if m.found:
                return m
        return NOWHERE

    def union(self, lookup: Callable[Concatenate[GroundingIndex, P], Iterable[T]],
              *args: P.args, **kwargs: P.kwargs) -> set[T]:
        """Every index's answers to ``lookup``, joined."""
        out: set[T] = set()
        for g in self.indexes:
            out.update(lookup(g, *args, **kwargs))
        return out

    def rounded(self, x: float, decimals: int) -> bool:
        """See :meth:`GroundingIndex.rounded`."""
        return any(g.rounded(x, decimals) for g in self.indexes)
