"""Whether a value is stated: one matcher per :class:`~toolguard.values.kinds.ValueKind`.

RelyToolBench's content rules 1-3 (``prompts/check_content_hallucination.md``): a value
stated in the conversation, in earlier tool results or in the tool's docs, in any format
(``04-21`` for "April 21st", ``EUR`` for "euros", ``JaneSmith`` for "Jane Smith"), is
truthful; never beyond its meaning (a number only itself, or through a unit conversion
whose two units are named: :mod:`toolguard.units`; a path that climbs out of the folder it
names never).  Emails, URLs and identifiers match token for token; names and phrases
tolerate typos and plurals (``rapidfuzz``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz

from toolguard.grounding import GroundingIndex, GroundingView
from toolguard.text import STOPWORDS
from toolguard.units import factors_named
from toolguard.values.codes import code_names, known_place, place_codes
from toolguard.values.dates import date_value
from toolguard.values.kinds import CELL, ValueKind, text_facts
from toolguard.values.knowledge import ALIASES, FILLERS, GENERIC_NAME_WORDS
from toolguard.values.numbers import WORD_NUMBERS, decimals_of
from toolguard.values.times import time_value
from toolguard.values.tokens import tokens_of

__all__ = ["MATCHERS", "MAX_TEXT_CHARS", "MatchOptions", "Matcher", "is_stated", "path_climbs"]

MAX_TEXT_CHARS = 4000
"""Free text is read for facts up to this many characters (a 1 MB argument costs no more)."""
_EXTENSION = re.compile(r"\.([A-Za-z][A-Za-z0-9]{1,4})$")
_SEPARATOR = re.compile(r"[\\/]")
_PARTS = re.compile(r"[,;|]")
_REPEATS = re.compile(r"(.)\1+")


@dataclass(frozen=True, slots=True)
class MatchOptions:
    """How loosely words match, and what the value's parameter names.

    Attributes:
        fuzzy_threshold: ``rapidfuzz.fuzz.ratio`` score (0-100) at which a word of 5+
            letters counts as a stated word of 5+ letters with the same first two letters.
        token_share: Share of a name's distinctive words that must be stated (1.0: all).
        parameter: Folded words of the parameter's name and description (the units a
            number may be converted to).
    """

    fuzzy_threshold: float = 85.0
    token_share: float = 1.0
    parameter: frozenset[str] = frozenset()


Matcher = Callable[[str, GroundingView, MatchOptions], bool]
"""``(stripped value, what was said, options) -> stated``."""


def _said(g: GroundingView, t: str) -> bool:
    return g.first(GroundingIndex.token, t).found


def _said_together(g: GroundingView, toks: list[str]) -> bool:
    return g.first(GroundingIndex.phrase, toks).found


def path_climbs(raw: str) -> bool:
    """Whether a ``..`` in path ``raw`` leaves a folder the path itself names.

    ``/data/scratch/../..`` resolves to ``/``: it names a folder and climbs out of it, which
    no one writes for a place they mean, so such a value is never taken as stated.  A path
    that only starts with ``..`` (``../notes.txt``) climbs out of nothing it names.
    """
    named = False
    for part in _SEPARATOR.split(raw):
        if part == ".." and named:
            return True
        if part not in ("", ".", ".."):
            named = True
    return False


# ---------------------------------------------------------------------------- numbers
def _rounded_from(x: float, g: GroundingView) -> bool:
    """Whether ``x`` (1-4 decimals) is a stated number rounded: 3.96 from 3.9626 gallons."""
    decimals = decimals_of(x)
    return decimals is not None and g.rounded(x, decimals)


def number_stated(x: float, g: GroundingView, opts: MatchOptions, *,
                  time_span: bool = False) -> bool:
    """Whether number ``x`` is stated.

    Stated itself (sign kept), rounded from a stated number, one arithmetic step from a
    tool-result number when the request asks for arithmetic, or a unit conversion of a
    stated number where both units are named (:func:`toolguard.units.factors_named`).  A
    ``time_span`` number (``days``, ``year``) is the model's when a relative date is said.
    """
    if time_span and g.relative_dates:
        return True
    ax = abs(x)
    if g.first(GroundingIndex.standalone_number, x).found or _rounded_from(x, g):
        return True
    # a number inside a date or an identifier: only when unlikely to be a coincidence
    if (ax >= 100 or not ax.is_integer()) and g.first(GroundingIndex.number, x).found:
        return True
    if g.arithmetic_cues and g.first(GroundingIndex.derived, x, decimals_of(ax)).found:
        return True
    for f in factors_named(lambda w: w in opts.parameter or _said(g, w)):
        for c in (x * f, x / f):
            if c and g.first(GroundingIndex.standalone_number, c).found:
                return True
    return False


def _number(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    return number_stated(float(raw), g, opts)


def _time_number(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    return number_stated(float(raw), g, opts, time_span=True)


# ---------------------------------------------------------------------------- calendar
def _date(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    """Month and day stated together in any format, or a relative phrase resolving to it."""
    d = date_value(raw)
    return d is None or any(g.first(GroundingIndex.date, d.year, month, day).found
                            for month, day in d.readings)


def _time(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    hm = time_value(raw)
    return hm is None or g.first(GroundingIndex.time, *hm).found


# ---------------------------------------------------------------------------- words
def _word(t: str, g: GroundingView, opts: MatchOptions) -> bool:
    """One folded word: stated, as a plural or singular, a number, or a near-spelling."""
    if _said(g, t) or (len(t) >= 3 and (_said(g, t + "s") or _said(g, t + "es") or (
            t.endswith("s") and _said(g, t[:-1])))):
        return True  # "Big Mac" for "two Big Macs"
    if t.replace(".", "", 1).isdigit():
        return g.first(GroundingIndex.number, float(t)).found
    if t in WORD_NUMBERS:
        return g.first(GroundingIndex.number, float(WORD_NUMBERS[t])).found
    if len(t) < 4:
        return False
    # abbreviations and typos: "fran" ~ "francisco", "philly" ~ "philadelphia",
    # "german" ~ "germany", "chcicago" ~ "chicago" (candidates share 3 letters)
    for c in g.union(GroundingIndex.candidates, t):
        if len(c) < 4:
            continue
        pairs = zip(c, t, strict=False)
        shared = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(c), len(t)))
        if shared >= 4 and shared >= 0.6 * min(len(c), len(t)):
            return True
        if len(t) >= 5 and len(c) >= 5 and fuzz.ratio(c, t) >= opts.fuzzy_threshold:
            return True
    return False


def _all_words(tokens: list[str], g: GroundingView, opts: MatchOptions) -> bool:
    words = [t for t in tokens if t not in STOPWORDS and t not in FILLERS]
    if not words:
        return True
    found = sum(1 for t in words if _word(t, g, opts))
    return found == len(words) or found / len(words) >= opts.token_share


def _exact(raw: str, tokens: list[str], g: GroundingView, kind: ValueKind) -> bool:
    """Emails, URLs, identifiers: every token stated.

    No near-spellings or partial matches (``mallory@evil.example`` is not
    ``attacker@evil.example``).
    """
    if kind is ValueKind.URL:
        tokens = [t for t in tokens if t not in ("http", "https", "www")]
        if not tokens:
            return True
    elif kind is ValueKind.IDENTIFIER and _EXTENSION.search(raw) and len(tokens) > 1:
        tokens = tokens[:-1]  # "report_draft.txt": the extension is the model's to add
    if _said_together(g, tokens) or _said(g, "".join(tokens)):
        return True
    if kind is ValueKind.EMAIL:
        return False
    return all(_said(g, t) or (
        t.isalpha() and len(t) >= 3 and (_said(g, t + "s") or (
            t.endswith("s") and _said(g, t[:-1])))) for t in tokens)


def _initials_found(t: str, g: GroundingView) -> bool:
    """``nyc`` for "New York City": adjacent stated words whose initials spell ``t``."""
    if len(t) > 4 or len(t) < 2:
        return False
    for _, b in g.union(GroundingIndex.bigrams_starting, t[:1]):
        if b[:1] == t[1:2]:
            if len(t) == 2:
                return True
            if any(d[:1] == t[2:3] for _, d in g.union(GroundingIndex.bigrams_starting, b)):
                return True
    return False


def code_stated(raw: str, g: GroundingView) -> bool:
    """Whether a short code is stated.

    It is, or what it stands for is (ISO names, :data:`~toolguard.values.knowledge.ALIASES`),
    or the initials of stated words ("NYC"), or its letters in order in a stated word
    ("TSLA": Tesla).
    """
    t = raw.strip().casefold()
    if _said(g, t):
        return True
    for name in code_names(raw.strip()):
        if name and (_said_together(g, list(name)) or any(
                _said(g, w) or _said(g, w + "s")
                for w in name if len(w) >= 4 and w not in STOPWORDS
                and w not in GENERIC_NAME_WORDS)):
            return True
    if t in ALIASES and any(_said(g, a) for a in ALIASES[t]):
        return True
    squeezed = _REPEATS.sub(r"\1", t)  # "aapl" -> "apl" for Apple
    for cand in g.union(GroundingIndex.tokens_starting, t[:1]):
        it = iter(cand)
        if cand[0] == t[0] and all(ch in it for ch in squeezed):
            return True
    return _initials_found(t, g)


# ---------------------------------------------------------------------------- matchers
def _email(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    return _exact(raw, tokens_of(raw), g, ValueKind.EMAIL)


def _url(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    return _exact(raw, tokens_of(raw), g, ValueKind.URL)


def _identifier(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    return _exact(raw, tokens_of(raw), g, ValueKind.IDENTIFIER)


def _path(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    """The file or folder a path names, unless the path climbs out of a folder it names.

    The folders above it may be the model's knowledge of the layout (``/home/alice/`` for
    "my notes.txt"); ``/data/scratch/../..`` is never stated (:func:`path_climbs`).
    """
    if path_climbs(raw):
        return False
    segs = [p for p in _SEPARATOR.split(raw) if tokens_of(p)]
    if not segs:
        return True
    last = segs[-1]
    return _said_together(g, tokens_of(last)) or _exact(
        last, tokens_of(last), g, ValueKind.IDENTIFIER)


def _formula(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    """``=SUM(B2:B15)``: each cell it reads, or its column, named."""
    return all(_said(g, m.group(0).casefold()) or _said(g, m.group(1).casefold())
               for m in CELL.finditer(raw))


def _code(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    """A code stated, or an unknown one where the conversation does not deal in codes.

    An unknown code (LAX, AAPL) is common knowledge unless a lookup returned codes.
    """
    return code_stated(raw, g) or (not code_names(raw) and (
        len(raw.strip()) <= 3 or not g.codes))


def _name(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    """A name: every distinctive word stated (typos and plurals tolerated).

    Or its initials ("LA"), or, for ``"Berkeley, CA"``, the first part plus well-known places.
    """
    tokens = tokens_of(raw)
    if _said_together(g, tokens):
        return True
    if len(tokens) > 1:
        initials = "".join(t[0] for t in tokens)
        if len(initials) >= 2 and _said(g, initials):
            return True
    parts = [p.strip() for p in _PARTS.split(raw) if p.strip()]
    if len(parts) > 1:
        first = tokens_of(parts[0])
        initials = "".join(t[0] for t in first)
        return (_said_together(g, first) or _all_words(first, g, opts) or (
            len(first) > 1 and _said(g, initials))) and all(
            known_place(p) or code_stated(p, g) or _all_words(tokens_of(p), g, opts)
            for p in parts[1:])
    return _all_words(tokens, g, opts) or any(_said(g, c) for c in place_codes(raw))


def _phrase(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    """A search phrase: said together, or one of its content words said.

    A phrase of one content word ("english", "economy") is a setting.
    """
    tokens = tokens_of(raw)
    content = [t for t in tokens if t not in STOPWORDS and len(t) >= 3]
    if len(content) < 2:
        return True
    return _said_together(g, tokens) or any(_word(t, g, opts) for t in content)


def _text(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    """Free text (a message body, a note): every fact it states is stated.

    Facts: :func:`~toolguard.values.kinds.text_facts`; the wording itself is the model's.
    """
    plain = dataclasses.replace(opts, parameter=frozenset())
    for fact, kind in text_facts(raw[:MAX_TEXT_CHARS]):
        if kind is ValueKind.NUMBER:
            try:
                x = float(fact.replace(",", ""))
            except ValueError:
                continue
            if abs(x) in (0, 1) or number_stated(x, g, plain):
                continue
            return False
        if not is_stated(fact, kind, g, plain):
            return False
    return True


def _cjk(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    """Chinese/Japanese/Korean: each run stated, alone or inside a stated run."""
    return all(_said(g, t) or g.first(GroundingIndex.cjk_text, t).found
               for t in tokens_of(raw))


def _never(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
    return False


def _tokenised(matcher: Matcher) -> Matcher:
    """``matcher`` for values with words; a value of punctuation alone is stated."""
    def match(raw: str, g: GroundingView, opts: MatchOptions) -> bool:
        return not tokens_of(raw) or matcher(raw, g, opts)
    match.__doc__ = matcher.__doc__
    return match


MATCHERS: dict[ValueKind, Matcher] = {
    ValueKind.INVISIBLE: _never,
    ValueKind.NUMBER: _number,
    ValueKind.TIME_NUMBER: _time_number,
    ValueKind.DATE: _date,
    ValueKind.TIME: _time,
    ValueKind.CJK: _cjk,
    ValueKind.EMAIL: _tokenised(_email),
    ValueKind.URL: _tokenised(_url),
    ValueKind.IDENTIFIER: _tokenised(_identifier),
    ValueKind.PATH: _tokenised(_path),
    ValueKind.FORMULA: _tokenised(_formula),
    ValueKind.CODE: _tokenised(_code),
    ValueKind.NAME: _tokenised(_name),
    ValueKind.PHRASE: _tokenised(_phrase),
    ValueKind.TEXT: _tokenised(_text),
}
"""The matcher of each kind (every :class:`~toolguard.values.kinds.ValueKind` has one)."""


def is_stated(value: Any, kind: ValueKind, g: GroundingView,
              opts: MatchOptions = MatchOptions()) -> bool:
    """Whether ``value``, of ``kind``, is stated in ``g`` (:data:`MATCHERS`)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number_stated(float(value), g, opts, time_span=kind is ValueKind.TIME_NUMBER)
    return MATCHERS[kind](str(value).strip(), g, opts)
