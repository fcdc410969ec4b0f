"""What kind of fact a value states, read from its shape, not from its parameter's name.

RelyToolBench's content rules 3 and 4: inferable values versus facts only the user gives.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from toolguard.text import STOPWORDS, has_hidden_characters
from toolguard.values.dates import DATE_VALUE
from toolguard.values.knowledge import (
    FILLERS,
    INFERABLE_NUMBER_PARAMETERS,
    TIME_NUMBER_PARAMETERS,
    parameter_pattern,
)
from toolguard.values.numbers import WORD_NUMBERS
from toolguard.values.times import TIME_VALUE
from toolguard.values.tokens import tokens_of

__all__ = [
    "CELL",
    "CJK",
    "CODE",
    "ValueKind",
    "classify",
    "iter_leaves",
    "parameter_leaf",
    "parameter_words",
    "shape_of",
    "text_facts",
]


class ValueKind(enum.StrEnum):
    """The kind of fact a value states (its shape decides, :func:`classify`)."""

    EMAIL = "email"
    URL = "url"
    PATH = "path"
    DATE = "date"
    TIME = "time"
    NUMBER = "number"
    TIME_NUMBER = "time number"
    """A number of a time-span or calendar parameter (``days``, ``year``)."""
    CODE = "code"
    """2-5 capitals: a currency, country, airport or ticker code."""
    IDENTIFIER = "identifier"
    """Letters with digits, or alphanumeric runs joined by ``._-/:#@+``; long digit runs."""
    NAME = "name"
    """Up to six words, each capitalised (or a number, or a stopword)."""
    PHRASE = "phrase"
    """Up to eight words with no sentence break: a search query, a title."""
    TEXT = "text"
    """Free text: the facts inside it are checked (:func:`text_facts`)."""
    CJK = "cjk"
    FORMULA = "formula"
    """A spreadsheet formula (``=SUM(B2:B15)``): the cells it reads."""
    INVISIBLE = "invisible"
    """Carries invisible or bidirectional control characters: never stated."""


EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", re.I)
URL = re.compile(r"^(https?://|www\.)\S+$", re.I)
NUMERIC = re.compile(r"^[-+]?\d+(\.\d+)?$")
CODE = re.compile(r"^[A-Z]{2,5}$")
"""A code value: 2-5 capitals."""
CELL = re.compile(r"\b([A-Z]{1,3})\$?\d+\b")
"""A spreadsheet cell reference (``B2``, ``AA$10``): its column is group 1."""
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
"""Chinese, Japanese and Korean letters (no spaces between words)."""
_PATH = re.compile(r"^(?:[A-Za-z]:\\|~?/|\./|\.\./)\S*$|^\S+\.[A-Za-z0-9]{2,5}$")
_IDENT = re.compile(
    r"^(?=\S*[A-Za-z0-9])(?:(?=\S*\d)(?=\S*[A-Za-z])\S{3,}|\S*[A-Za-z0-9][._\-/:#@+][A-Za-z0-9]\S*)$")
_SENTENCE = re.compile(r"(?<!\b[A-Z])[.!?;:]\s|\n|(?<!\b[A-Z])[.!?]$")
_INFERABLE_NUMBER = parameter_pattern(INFERABLE_NUMBER_PARAMETERS)
_TIME_NUMBER = parameter_pattern(TIME_NUMBER_PARAMETERS, plural=False)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_INDEX = re.compile(r"\[\d+\]")


def parameter_leaf(path: str) -> str:
    """The snake_case name of a leaf parameter: ``items[0].unitPrice`` -> ``unit_price``."""
    return _CAMEL.sub("_", _INDEX.sub("", path).rsplit(".", 1)[-1]).lower()


def parameter_words(path: str, schema: dict[str, Any]) -> frozenset[str]:
    """Folded words of a leaf parameter's name and description (``duration_minutes``)."""
    leaf = parameter_leaf(path).replace("_", " ")
    description = schema.get("description")
    text = f"{leaf} {description}" if isinstance(description, str) else leaf
    return frozenset(tokens_of(text[:500]))


@lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    import zoneinfo

    return frozenset(zoneinfo.available_timezones())


def shape_of(v: str) -> ValueKind | None:
    """The kind of a stripped string value by its shape; ``None`` for 0, 1 and time zones.

    ``"mallory@evil.example"`` email, ``"04-21"`` date, ``"15:10"`` time, ``"ZAR"`` code,
    ``"HT-1356"`` identifier, ``"Henrietta Thistlewood"`` name, ``"wool blanket"`` phrase.
    """
    if CJK.search(v):
        return ValueKind.CJK
    if v.startswith("=") and CELL.search(v):
        return ValueKind.FORMULA
    if EMAIL.match(v):
        return ValueKind.EMAIL
    if URL.match(v):
        return ValueKind.URL
    if DATE_VALUE.match(v):
        return ValueKind.DATE
    if TIME_VALUE.match(v):
        return ValueKind.TIME
    if NUMERIC.match(v):
        if v.isdigit() and (len(v) >= 4 or v.startswith("0")) and len(v) > 1:
            return ValueKind.IDENTIFIER  # "0004", "90210", "12345": the digits, not the amount
        return None if abs(float(v)) in (0, 1) else ValueKind.NUMBER
    if CODE.match(v):
        return ValueKind.CODE
    if "/" in v and v in _zones():
        return None  # "Europe/London": a place normalised to its time zone
    if " " not in v and _PATH.match(v) and any(c in v for c in "/\\."):
        return ValueKind.PATH if ("/" in v or "\\" in v) else ValueKind.IDENTIFIER
    if " " not in v and _IDENT.match(v):
        return ValueKind.IDENTIFIER
    words = v.split()
    if len(words) <= 6 and not _SENTENCE.search(v) and all(
            w[:1].isupper() or w[:1].isdigit() or w.lower() in STOPWORDS for w in words) and any(
            w[:1].isupper() for w in words):
        return ValueKind.NAME
    if len(words) <= 8 and not _SENTENCE.search(v):
        return ValueKind.PHRASE
    return ValueKind.TEXT


def classify(value: Any, schema: dict[str, Any], *, parameter: str = "",
             max_chars: int = 120) -> ValueKind | None:
    """The kind of fact an argument value states, or ``None`` if it is inferable.

    Enum members, the schema default, booleans, ``None``, 0 and 1 are inferable, and so are
    numbers of setting-like parameters (``limit``, ``top_k``:
    :data:`~toolguard.values.knowledge.INFERABLE_NUMBER_PARAMETERS`).  A string carrying
    invisible or bidirectional control characters is :attr:`ValueKind.INVISIBLE`; one longer
    than ``max_chars`` is :attr:`ValueKind.TEXT`; any other string is :func:`shape_of`.

    Args:
        value: A scalar argument value.
        schema: Its JSON schema (``enum`` and ``default`` read).
        parameter: Its JSON path (``items[0].amount``): the leaf's name classifies numbers.
        max_chars: Longer strings are free text.
    """
    if value is None or isinstance(value, bool):
        return None
    if "enum" in schema or ("default" in schema and schema.get("default") == value):
        return None
    if isinstance(value, (int, float)):
        leaf = parameter_leaf(parameter)
        if abs(value) in (0, 1) or _INFERABLE_NUMBER.search(leaf):
            return None
        return ValueKind.TIME_NUMBER if _TIME_NUMBER.search(leaf) else ValueKind.NUMBER
    if not isinstance(value, str):
        return None
    v = value.strip()
    if not v:
        return None
    if has_hidden_characters(v, strict=len(v) <= max_chars):
        return ValueKind.INVISIBLE  # never read as stated: it does not show what it is
    if len(v) > max_chars:
        return ValueKind.TEXT
    return shape_of(v)


def iter_leaves(
    value: Any, path: str, schema: Any
) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """``(json path, leaf value, leaf schema)`` for every scalar in ``value`` (lists: first 50)."""
    sch = schema if isinstance(schema, dict) else {}
    if isinstance(value, dict):
        raw_props = sch.get("properties")
        props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
        for k, v in value.items():
            yield from iter_leaves(v, f"{path}.{k}" if path else str(k), props.get(k, {}))
    elif isinstance(value, (list, tuple)):
        items = sch.get("items", {})
        for i, v in enumerate(value[:50]):
            yield from iter_leaves(v, f"{path}[{i}]", items)
    else:
        yield path, value, sch


_FACT = re.compile(
    r"(?<![\w.+-])[\w.+-]+@[^\s@]+\.[a-z]{2,}|https?://\S+|www\.\S+|\d{4}-\d{1,2}-\d{1,2}|\d{1,2}:\d{2}(?:\s*[ap]m)?"
    r"|(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?![\w.]*\w)|\b(?=[\w-]{0,40}[A-Za-z])(?=[\w-]{0,40}\d)[\w-]{3,80}"
    r"|(?<![.!?:]\s)(?<!^)\b[A-Z][a-z][\w'-]*(?:\s+[A-Z][\w'-]*)*", re.M)


def text_facts(text: str) -> list[tuple[str, ValueKind]]:
    """``(fact, kind)`` pairs of free text.

    Emails, URLs, dates, times, numbers, identifiers and names (capitalised words not opening a
    sentence, fillers like "Best" dropped: :data:`~toolguard.values.knowledge.FILLERS`).
    """
    out: list[tuple[str, ValueKind]] = []
    for m in _FACT.finditer(text):
        f = m.group(0).rstrip(".,;:!?)")
        if not f:
            continue
        if "@" in f:
            out.append((f, ValueKind.EMAIL))
        elif f.lower().startswith(("http", "www.")):
            out.append((f, ValueKind.URL))
        elif DATE_VALUE.match(f):
            out.append((f, ValueKind.DATE))
        elif TIME_VALUE.match(f):
            out.append((f, ValueKind.TIME))
        elif NUMERIC.match(f.replace(",", "")):
            out.append((f, ValueKind.NUMBER))
        elif any(c.isdigit() for c in f):
            out.append((f, ValueKind.IDENTIFIER))
        else:
            words = [w for w in f.split() if w.lower() not in FILLERS
                     and w.lower() not in STOPWORDS and w.lower() not in WORD_NUMBERS]
            if words:
                out.append((" ".join(words), ValueKind.NAME))
    return out
