"""The single-turn perturbations: one gold call of a record made wrong in one way.

Each perturbation (``fabricated``, ``irrelevant_tool``, ``drop_required``, ``rename_key``,
``wrong_type``, ``invented_value``, ``invented_number``; see
:mod:`toolguard_evals.detector_suite`) takes a :class:`Record` (the record's docs, gold calls,
conversation text and its own ``random.Random``) and returns a :class:`Perturbed` call list,
or ``None`` when it does not apply.  :data:`PERTURBERS` maps names to them.  The public
helpers (:func:`fabricate_name`, :func:`rename_key`, :func:`wrong_type_value`,
:func:`string_kind`, :func:`invent_string`, :func:`invent_number`, :func:`number_words`)
are shared with other suites built the same way.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import random
import re
import string
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Literal

from toolguard_evals import bfcl
from toolguard_evals.detector_suite._schema import (
    doc_props,
    doc_validator,
    is_json_type,
    required_keys,
    schema_errors,
    schema_type,
)
from toolguard_evals.detector_suite._vocab import (
    CITIES,
    CITY_STATE,
    COMMON_NOUNS,
    FIRST_NAMES,
    GENERIC_TOOLS,
    KEY_SUFFIXES,
    KEY_SYNONYMS,
    LAST_NAMES,
    LOCATION_TOKENS,
    NAME_SUFFIXES,
    PERSON_TOKENS,
    PROPER_NOUNS,
    SETTING_TOKENS,
    SMALL_WORDS,
    TENS_WORDS,
    VERB_SYNONYMS,
)
from toolguard_evals.detector_suite.records import SUITE_CATEGORIES, Perturbation


# ============================================================================ words
def number_words(n: int) -> str:
    """English words for an integer: ``25`` -> ``"twenty-five"``, ``-3`` -> ``"minus three"``."""
    if n < 0:
        return "minus " + number_words(-n)
    if n < 20:
        return SMALL_WORDS[n]
    if n < 100:
        tens, rest = divmod(n, 10)
        return TENS_WORDS[tens] + (f"-{SMALL_WORDS[rest]}" if rest else "")
    for size, word in ((10**9, "billion"), (10**6, "million"), (1000, "thousand"),
                       (100, "hundred")):
        if n >= size:
            head, rest = divmod(n, size)
            tail = f" {number_words(rest)}" if rest else ""
            return f"{number_words(head)} {word}{tail}"
    raise AssertionError("unreachable")


def _words_for(value: int | float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return number_words(int(value))
    whole, _, frac = format(Decimal(repr(float(value))), "f").partition(".")
    digits = " ".join(SMALL_WORDS[int(d)] for d in frac if d.isdigit())
    return f"{number_words(int(whole))} point {digits}"


def _key_tokens(key: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key)
    return [t.lower() for t in re.split(r"[_\W]+", spaced) if t]


# ============================================================================ the record view
@dataclass(slots=True)
class Record:
    """What the perturbations of one single-turn record need."""

    id: str
    category: str
    docs: dict[str, dict[str, Any]]
    calls: list[tuple[str, dict[str, Any]]]
    text: str  # the conversation text (all roles)
    folded: str  # ``text`` casefolded
    doc_text: str  # the docs' JSON, casefolded
    rng: random.Random

    def absent(self, value: str) -> bool:
        """``value`` occurs neither in the conversation nor in the docs (casefolded)."""
        v = value.casefold()
        return v not in self.folded and v not in self.doc_text

    def number_absent(self, value: int | float) -> bool:
        """No number token of the conversation or docs equals ``value``."""
        return float(value) not in _numbers(self.text) and float(value) not in _numbers(
            self.doc_text)


@dataclass(frozen=True, slots=True)
class Perturbed:
    """A perturbed call list: ``calls[target]`` is the wrong call, ``metadata`` says how."""

    calls: list[tuple[str, dict[str, Any]]]
    target: int
    metadata: dict[str, Any]


_NUMBER_RE = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")


@functools.lru_cache(maxsize=8192)
def _numbers(text: str) -> frozenset[float]:
    out: set[float] = set()
    for m in _NUMBER_RE.finditer(text):
        try:
            out.add(float(m.group(0).replace(",", "")))
        except ValueError:
            continue
    return frozenset(out)


def _with_call(
    calls: Sequence[tuple[str, dict[str, Any]]], i: int, name: str, args: dict[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    out = [(n, dict(a)) for n, a in calls]
    out[i] = (name, args)
    return out


# ============================================================================ perturbations
def _fabricated(rec: Record) -> Perturbed | None:
    i = rec.rng.randrange(len(rec.calls))
    name, args = rec.calls[i]
    new, strategy = fabricate_name(name, rec.docs.keys(), rec.rng)
    return Perturbed(_with_call(rec.calls, i, new, dict(args)), i,
                      {"gold_tool": name, "tool": new, "strategy": strategy})


def fabricate_name(name: str, existing: Iterable[str], rng: random.Random) -> tuple[str, str]:
    """Make up a plausible tool name not in ``existing`` (case-insensitively).

    Strategies, in random order: ``synonym`` (swap the verb: ``get_weather`` ->
    ``fetch_weather``), ``suffix`` (``get_weather_v2``), ``generic`` (``search_web``).

    Returns:
        ``(new_name, strategy)``.

    """
    taken = {n.casefold() for n in existing}
    strategies = ["synonym", "suffix", "generic"]
    rng.shuffle(strategies)
    for strategy in strategies:
        if strategy == "synonym":
            candidates = _synonym_names(name)
        elif strategy == "suffix":
            candidates = [name + s for s in NAME_SUFFIXES]
        else:
            candidates = list(GENERIC_TOOLS)
        candidates = [c for c in candidates if c.casefold() not in taken]
        if candidates:
            return rng.choice(candidates), strategy
    for k in range(1000):  # pragma: no cover - every strategy exhausted
        fallback = f"{name}_{k}"
        if fallback.casefold() not in taken:
            return fallback, "suffix"
    raise AssertionError("unreachable")


def _synonym_names(name: str) -> list[str]:
    head, dot, last = name.rpartition(".")
    prefix = head + dot
    out: list[str] = []
    for verb, synonyms in VERB_SYNONYMS.items():
        m = re.search(rf"(^|_)((?i:{verb}))(?=_|$|[A-Z])", last)
        if m is None:
            continue
        original = m.group(2)
        for syn in synonyms:
            word = syn.capitalize() if original[:1].isupper() else syn
            out.append(prefix + last[: m.start(2)] + word + last[m.end(2):])
    return out


def _irrelevant_tool(rec: Record) -> Perturbed | None:
    if len(rec.docs) < 2:
        return None
    gold_names = {n for n, _ in rec.calls}
    i = rec.rng.randrange(len(rec.calls))
    gold_name, gold_args = rec.calls[i]
    others = sorted(n for n in rec.docs if n not in gold_names)
    rec.rng.shuffle(others)
    for other in others:
        doc = rec.docs[other]
        args = _build_args(doc.get("parameters") or {}, gold_args, rec)
        if args is not None and not schema_errors(doc, args):
            return Perturbed(_with_call(rec.calls, i, other, args), i,
                              {"gold_tool": gold_name, "tool": other,
                               "keys": sorted(args)})
    return None


def _build_args(
    schema: Mapping[str, Any], gold_args: Mapping[str, Any], rec: Record
) -> dict[str, Any] | None:
    """Arguments for the required keys of an object schema, grounded where possible."""
    props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    out: dict[str, Any] = {}
    for key in required_keys(schema):
        sub = props.get(key) if isinstance(props, Mapping) else None
        if not isinstance(sub, Mapping):
            return None
        value = _value_for(key, sub, gold_args, rec)
        if value is _NO_VALUE:
            return None
        out[key] = value
    return out


_NO_VALUE: Final = object()


def _value_for(key: str, schema: Mapping[str, Any], gold_args: Mapping[str, Any],
               rec: Record) -> Any:
    jt = schema_type(schema)
    if key in gold_args and jt is not None and is_json_type(gold_args[key], jt) and (
        "enum" not in schema or gold_args[key] in schema["enum"]
    ):
        return gold_args[key]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    default = schema.get("default")
    if default is not None and jt is not None and is_json_type(default, jt):
        return default
    if jt in ("string", None):
        return _grounded_string(gold_args, rec)
    if jt in ("integer", "number"):
        numbers = sorted(n for n in _numbers(rec.text) if n.is_integer() or jt == "number")
        lo, hi = schema.get("minimum"), schema.get("maximum")
        numbers = [n for n in numbers if (lo is None or n >= lo) and (hi is None or n <= hi)]
        if numbers:
            return int(numbers[0]) if jt == "integer" else numbers[0]
        return int(lo) if isinstance(lo, (int, float)) else 1
    if jt == "boolean":
        return True
    if jt == "array":
        items = schema.get("items")
        if isinstance(items, Mapping) and schema_type(items) is not None:
            item = _value_for(key, items, {}, rec)
            return [] if item is _NO_VALUE else [item]
        return []
    if jt == "object":
        return _build_args(schema, {}, rec) or {}
    return _NO_VALUE


def _grounded_string(gold_args: Mapping[str, Any], rec: Record) -> str:
    strings = [v for v in gold_args.values() if isinstance(v, str) and len(v) >= 2]
    if strings:
        return str(strings[0])
    words: list[str] = re.findall(r"[A-Za-z][A-Za-z'-]{3,}", rec.text)
    capitalised = [w for w in words if w[0].isupper()]
    return (capitalised or words or ["request"])[-1]


def _drop_required(rec: Record) -> Perturbed | None:
    cands = [(i, k) for i, (n, a) in enumerate(rec.calls) for k in required_keys(rec.docs[n])
             if k in a]
    if not cands:
        return None
    i, key = rec.rng.choice(cands)
    name, args = rec.calls[i]
    new = {k: v for k, v in args.items() if k != key}
    return Perturbed(_with_call(rec.calls, i, name, new), i, {"key": key})


def _rename_key(rec: Record) -> Perturbed | None:
    cands = [(i, k) for i, (_, a) in enumerate(rec.calls) for k in a]
    if not cands:
        return None
    i, key = rec.rng.choice(cands)
    name, args = rec.calls[i]
    taken = set(doc_props(rec.docs[name])) | set(args)
    new_key, strategy = rename_key(key, taken, rec.rng)
    new = {(new_key if k == key else k): v for k, v in args.items()}
    return Perturbed(_with_call(rec.calls, i, name, new), i,
                      {"key": key, "new_key": new_key, "strategy": strategy,
                       "required": key in required_keys(rec.docs[name])})


def rename_key(key: str, taken: Iterable[str], rng: random.Random) -> tuple[str, str]:
    """Make up a plausible key that is not ``key`` and not in ``taken``.

    Strategies, in random order: ``synonym`` (``location`` -> ``place``), ``case``
    (``start_date`` <-> ``startDate``), ``suffix`` (``city`` -> ``city_name``).
    """
    used = set(taken) | {key}
    strategies = ["synonym", "case", "suffix"]
    rng.shuffle(strategies)
    for strategy in strategies:
        if strategy == "synonym":
            tokens = _key_tokens(key)
            cands = []
            if key.lower() in KEY_SYNONYMS:
                cands.append(KEY_SYNONYMS[key.lower()])
            if tokens and tokens[-1] in KEY_SYNONYMS and len(tokens) > 1:
                cands.append("_".join([*tokens[:-1], KEY_SYNONYMS[tokens[-1]]]))
        elif strategy == "case":
            if "_" in key.strip("_"):
                head, *rest = key.split("_")
                cands = [head + "".join(p[:1].upper() + p[1:] for p in rest if p)]
            elif re.search(r"[a-z][A-Z]", key):
                cands = ["_".join(_key_tokens(key))]
            else:
                cands = []
        else:
            cands = [key + s for s in KEY_SUFFIXES]
        cands = [c for c in cands if c and c not in used]
        if cands:
            return rng.choice(cands), strategy
    return f"{key}_value_{rng.randrange(100)}", "suffix"  # pragma: no cover


def _wrong_type(rec: Record) -> Perturbed | None:
    cands: list[tuple[int, str]] = []
    for i, (name, args) in enumerate(rec.calls):
        props = doc_props(rec.docs[name])
        for key, value in args.items():
            sub = props.get(key)
            if not isinstance(sub, Mapping) or sub.get("type") == "any":
                continue
            jt = schema_type(sub)
            if jt is not None and is_json_type(value, jt):
                cands.append((i, key))
    rec.rng.shuffle(cands)
    for i, key in cands:
        name, args = rec.calls[i]
        jt = schema_type(doc_props(rec.docs[name])[key])
        assert jt is not None
        new_value = wrong_type_value(args[key], jt, rec.rng)
        new = {**args, key: new_value}
        errors = doc_validator(rec.docs[name]).iter_errors(new)
        if any(e.validator == "type" for e in errors):
            return Perturbed(_with_call(rec.calls, i, name, new), i,
                              {"key": key, "expected": jt, "old": args[key], "new": new_value})
    return None


def wrong_type_value(value: Any, json_type: str, rng: random.Random) -> Any:
    """Return a value of another JSON type standing for ``value``, as models get it wrong.

    ``integer``/``number`` -> words (``25`` -> ``"twenty-five"``); ``string`` -> a number
    (its digits, else a small random integer); ``boolean`` -> ``"true"``/``"false"``;
    ``array`` -> its items joined by ``", "``; ``object`` -> its JSON text.
    """
    if json_type in ("integer", "number"):
        return _words_for(value)
    if json_type == "string":
        digits = re.findall(r"-?\d+(?:\.\d+)?", value)
        if digits:
            number = float(digits[0])
            return int(number) if number.is_integer() else number
        return rng.randint(1, 100)
    if json_type == "boolean":
        return "true" if value else "false"
    if json_type == "array":
        return ", ".join(json.dumps(v) if isinstance(v, (dict, list)) else str(v) for v in value)
    if json_type == "object":
        return json.dumps(value)
    raise ValueError(f"no wrong-type rule for JSON type {json_type!r}")


# ---------------------------------------------------------------------------- content
_DATE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_CITY_STATE_RE = re.compile(r"^[A-Z][\w .'-]+, [A-Z]{2}$")
_ID_CHARS = re.compile(r"[_\-@/.:#]")
_PROTECTED = re.compile(r"^[a-z]+://|www\.|\.(?:com|org|net|io|edu|gov|txt|pdf|csv|json|py|"
                        r"jpg|png|html|md)\b|@", re.I)

StringKind = Literal["date", "id", "numbered", "location", "person", "proper", "text"]


def string_kind(key: str, value: str) -> StringKind:
    """Classify a string argument, to invent one of the same kind."""
    if _DATE_RE.match(value):
        return "date"
    words = value.split()
    if len(words) == 1 and (re.search(r"\d", value) or _ID_CHARS.search(value)):
        return "id"
    tokens = set(_key_tokens(key))
    if re.search(r"\d", value) and not tokens & LOCATION_TOKENS:
        return "numbered"
    if (tokens & LOCATION_TOKENS or _CITY_STATE_RE.match(value)
            or value.casefold() in {c.casefold() for c in (*CITIES, *CITY_STATE)}):
        return "location"
    titled = bool(words) and all(w[:1].isupper() and w.replace("-", "").replace("'", "")
                                 .isalpha() for w in words)
    if titled and len(words) <= 3 and (tokens & PERSON_TOKENS or key.lower() in
                                       {"name", "full_name", "first_name", "last_name"}):
        return "person"
    if any(w[:1].isupper() for w in words):
        return "proper"
    return "text"


@functools.cache
def _value_pool() -> dict[str, tuple[str, ...]]:
    """Key -> distinct gold string values over the suite's categories (for same-kind values)."""
    pool: dict[str, set[str]] = defaultdict(set)
    for category in SUITE_CATEGORIES:
        for record in bfcl.load_category(category):
            for _, args in bfcl.gold_calls(record):
                for k, v in args.items():
                    if isinstance(v, str) and 3 <= len(v) <= 60:
                        pool[k].add(v)
    return {k: tuple(sorted(v)) for k, v in pool.items()}


def invent_string(key: str, value: str, rec: Record) -> tuple[str, StringKind] | None:
    """Invent a value of the same kind as ``value`` that occurs nowhere in the record.

    - ``date`` (``YYYY-MM-DD``): shifted by 3-300 days.
    - ``id`` (one token with digits or ``_-@/.:#``): every letter/digit redrawn, except
      URL schemes, ``www.``, common extensions and ``@``.
    - ``numbered`` (several words with digits, e.g. ``"Room 101"``): digits redrawn.
    - ``location``/``person``/``proper``/``text``: the same key's gold value from another
      BFCL record, if one of the same kind is absent here, else a fixed list (cities,
      ``"City, ST"``, first/last names, proper nouns, common nouns).

    Returns:
        ``(new_value, kind)``, or ``None`` if nothing absent could be made.

    """
    kind = string_kind(key, value)
    rng = rec.rng
    gold = value.casefold()

    def ok(v: str) -> bool:
        return bool(v) and v.casefold() != gold and gold not in v.casefold() and (
            v.casefold() not in gold) and rec.absent(v)

    if kind == "date":
        y, m, d = (int(x) for x in value.split("-"))
        try:
            base = dt.date(y, m, d)
        except ValueError:
            base = dt.date(y, 1, 1)
        for _ in range(20):
            shifted = base + dt.timedelta(days=rng.choice((-1, 1)) * rng.randint(3, 300))
            if ok(shifted.isoformat()):
                return shifted.isoformat(), kind
        return None
    if kind in ("id", "numbered"):
        for _ in range(20):
            new = _redraw(value, rng, digits_only=kind == "numbered")
            if ok(new):
                return new, kind
        return None
    pool = [v for v in _value_pool().get(key, ()) if string_kind(key, v) == kind and ok(v)]
    if pool:
        return rng.choice(pool), kind
    fallback: tuple[str, ...]
    if kind == "location":
        fallback = CITY_STATE if _CITY_STATE_RE.match(value) else CITIES
    elif kind == "person":
        n_words = len(value.split())
        fallback = tuple(f"{f} {last}" for f in FIRST_NAMES for last in LAST_NAMES) if (
            n_words > 1) else FIRST_NAMES
    elif kind == "proper":
        fallback = PROPER_NOUNS
    else:
        fallback = COMMON_NOUNS
    options = [v for v in fallback if ok(v)]
    return (rng.choice(options), kind) if options else None


def _redraw(value: str, rng: random.Random, *, digits_only: bool = False) -> str:
    keep = [False] * len(value)
    for m in _PROTECTED.finditer(value):
        for j in range(m.start(), m.end()):
            keep[j] = True
    out = []
    for ch, kept in zip(value, keep, strict=True):
        if kept or not ch.isascii() or (digits_only and not ch.isdigit()):
            out.append(ch)
        elif ch.isdigit():
            out.append(rng.choice(string.digits))
        elif ch.islower():
            out.append(rng.choice(string.ascii_lowercase))
        elif ch.isupper():
            out.append(rng.choice(string.ascii_uppercase))
        else:
            out.append(ch)
    return "".join(out)


def _content_schema_ok(schema: Any) -> bool:
    return isinstance(schema, Mapping) and not any(
        k in schema for k in ("enum", "format", "pattern", "const"))


def _invented_value(rec: Record) -> Perturbed | None:
    cands: list[tuple[int, str]] = []
    for i, (name, args) in enumerate(rec.calls):
        props = doc_props(rec.docs[name])
        for key, value in args.items():
            sub = props.get(key)
            if (isinstance(value, str) and len(value) >= 3 and schema_type(sub) == "string"
                    and _content_schema_ok(sub) and value.casefold() in rec.folded
                    and not set(_key_tokens(key)) & SETTING_TOKENS
                    and string_kind(key, value) != "text"):
                cands.append((i, key))
    rec.rng.shuffle(cands)
    for i, key in cands:
        name, args = rec.calls[i]
        made = invent_string(key, args[key], rec)
        if made is None:
            continue
        new_value, kind = made
        new = {**args, key: new_value}
        if schema_errors(rec.docs[name], new):
            continue
        return Perturbed(_with_call(rec.calls, i, name, new), i,
                          {"key": key, "kind": kind, "old": args[key], "new": new_value})
    return None


def _invented_number(rec: Record) -> Perturbed | None:
    cands: list[tuple[int, str]] = []
    for i, (name, args) in enumerate(rec.calls):
        props = doc_props(rec.docs[name])
        for key, value in args.items():
            sub = props.get(key)
            if (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and schema_type(sub) in ("integer", "number") and _content_schema_ok(sub)
                    and float(value) in _numbers(rec.text)):
                cands.append((i, key))
    rec.rng.shuffle(cands)
    for i, key in cands:
        name, args = rec.calls[i]
        sub = doc_props(rec.docs[name])[key]
        new_value = invent_number(args[key], rec, sub)
        if new_value is None:
            continue
        new = {**args, key: new_value}
        if schema_errors(rec.docs[name], new):
            continue
        return Perturbed(_with_call(rec.calls, i, name, new), i,
                          {"key": key, "old": args[key], "new": new_value})
    return None


def invent_number(
    value: int | float, rec: Record, schema: Mapping[str, Any]
) -> int | float | None:
    """Invent another number of the same type, within the schema's bounds, that no text mentions."""
    lo, hi = schema.get("minimum"), schema.get("maximum")
    default = schema.get("default")
    if isinstance(value, int):
        deltas = [1, 2, 3, 4, 5, 7, 10, 12, 25, 100]
        cands: list[int | float] = [value + d for d in deltas]
        cands += [value - d for d in deltas] + [value * 2, value * 3, value * 10]
    else:
        decimals = len(repr(value).partition(".")[2]) or 1
        step = 10.0 ** -min(decimals, 6)
        cands = [round(value + k * step, decimals) for k in (1, 2, 3, 5, 7, 11, -1, -2, -3, -5)]
        cands += [round(value * f, decimals) for f in (1.5, 2.0, 0.5)]
    rec.rng.shuffle(cands)
    for c in cands:
        if c in (value, default) or value >= 0 > c:
            continue
        if (lo is not None and c < lo) or (hi is not None and c > hi):
            continue
        if rec.number_absent(c):
            return c
    return None


# ============================================================================ registry
PERTURBERS: Final[dict[Perturbation, Callable[[Record], Perturbed | None]]] = {
    "fabricated": _fabricated,
    "irrelevant_tool": _irrelevant_tool,
    "drop_required": _drop_required,
    "rename_key": _rename_key,
    "wrong_type": _wrong_type,
    "invented_value": _invented_value,
    "invented_number": _invented_number,
}
"""Single-turn perturbation name -> function (each gives at most one case per record)."""
