"""A labelled suite of hallucinated tool calls built from BFCL v4 gold calls, and its scorer.

Cases follow ``docs/DATA.md`` §2b (RelyToolBench's four hallucination types):

==================  ===============  ======================================================
perturbation        label            what changes in one gold call
==================  ===============  ======================================================
``gold``            ``None``         nothing (every call must be allowed)
``fabricated``      ``type``         the tool name becomes a plausible name not in the list
``irrelevant_tool`` ``type``         another tool of the record, with schema-valid arguments
``drop_required``   ``format``       a required key the gold call has is removed
``rename_key``      ``format``       a key is renamed to a plausible unknown key
``wrong_type``      ``format``       a value gets a wrong JSON type (``5`` -> ``"five"``)
``invented_value``  ``content``      a name/place/id/date found in the question -> invented
``invented_number`` ``content``      a number found in the question -> another number
``repeat``          ``timing``       multi-turn: a successful call is repeated at once
``next_call``       ``None``         multi-turn: the next gold call, with the real history
==================  ===============  ======================================================

Single-turn cases come from ``simple_python``, ``multiple``, ``parallel``, ``live_simple`` and
``live_multiple``; multi-turn ones from ``multi_turn_base`` replayed in BFCL's executable
environments (:mod:`toolguard_evals.bfcl`).  Everything is drawn from ``random.Random`` seeded with
``f"{seed}:{record_id}"``, so a record's cases do not depend on the limits.

:func:`run_suite` scores any ``Guard``-like object; :func:`main` builds, runs, prints a
table and writes JSON (``toolguard eval detectors --json PATH``).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import random
import re
import string
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, Literal, Protocol, get_args

from jsonschema import Draft202012Validator
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from pydantic import BaseModel, ConfigDict, Field

from toolguard.specs import GORILLA_TO_JSON_SCHEMA, ToolSpec
from toolguard_evals import bfcl

# ============================================================================ labels
Label = Literal["type", "timing", "format", "content"]
"""RelyToolBench's hallucination types (``toolguard.types.HallucinationType``)."""

Perturbation = Literal[
    "gold",
    "fabricated",
    "irrelevant_tool",
    "drop_required",
    "rename_key",
    "wrong_type",
    "invented_value",
    "invented_number",
    "repeat",
    "next_call",
]
"""How a case was made from its gold call(s); see the module docstring."""

PERTURBATION_LABELS: Final[dict[Perturbation, Label | None]] = {
    "gold": None,
    "fabricated": "type",
    "irrelevant_tool": "type",
    "drop_required": "format",
    "rename_key": "format",
    "wrong_type": "format",
    "invented_value": "content",
    "invented_number": "content",
    "repeat": "timing",
    "next_call": None,
}

SINGLE_TURN_PERTURBATIONS: Final[tuple[Perturbation, ...]] = (
    "fabricated",
    "irrelevant_tool",
    "drop_required",
    "rename_key",
    "wrong_type",
    "invented_value",
    "invented_number",
)

ScoreClass = Literal["type", "type_irrelevant", "timing", "format", "content"]
"""Classes scored in ``per_type``: ``type`` is the fabricated (unknown-tool) class,
``type_irrelevant`` the wrong-tool-of-the-list class; both are predicted as ``type``."""

SCORE_CLASSES: Final[tuple[ScoreClass, ...]] = get_args(ScoreClass)

SUITE_CATEGORIES: Final[tuple[bfcl.SingleTurnCategory, ...]] = (
    "simple_python",
    "multiple",
    "parallel",
    "live_simple",
    "live_multiple",
)
DEFAULT_LIMIT_PER_CATEGORY: Final[int | None] = None
"""Records per single-turn category; ``None`` = all (2092 usable records, ~13.6k cases with
the multi-turn ones; building takes ~3 s and the deterministic guard ~10 s on one core)."""
DEFAULT_TIMING_EPISODES: Final = 200
"""``multi_turn_base`` episodes (all 200); each gives one ``repeat`` and one ``next_call`` case."""

GUARD_MODES: Final[dict[str, dict[str, Any]]] = {
    "deterministic": {},
    "deterministic-norelevance": {"relevance": "off"},
    "embedding": {"relevance": "embedding"},
}
"""Mode name -> keyword arguments for ``toolguard.Guard`` (``embedding`` needs the ``embed``
extra)."""


# ============================================================================ records
class Case(BaseModel):
    """One labelled check: the conversation, the tool list and what is wrong with the last call.

    Attributes:
        id: ``"{record_id}:{perturbation}"``.
        category: BFCL category of the source record (``"multi_turn_base"`` for multi-turn).
        perturbation: See :data:`Perturbation`.
        label: The hallucination type of the target call, ``None`` for clean cases.
        messages: LangChain messages; the last is an ``AIMessage`` whose ``tool_calls`` have
            ids ``call_0``, ``call_1``, ... (multi-turn: numbered across the episode).
        tools: BFCL function docs available to the model.
        tools_key: SHA-1 of ``tools`` (guards are cached per key).
        target: Index of the perturbed call in the last message's ``tool_calls``; ``None``
            for clean cases, where every call must be allowed.
        metadata: JSON-able details of the perturbation (key, old/new value, strategy, ...).

    """

    model_config = ConfigDict(frozen=True)

    id: str
    category: str
    perturbation: Perturbation
    label: Label | None
    messages: list[AnyMessage]
    tools: list[dict[str, Any]]
    tools_key: str
    target: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def calls(self) -> list[ToolCall]:
        """The tool calls under check (those of the last message)."""
        last = self.messages[-1]
        return list(last.tool_calls) if isinstance(last, AIMessage) else []

    @property
    def score_class(self) -> ScoreClass | None:
        """The ``per_type`` class of the case (``None`` for clean cases)."""
        if self.perturbation == "irrelevant_tool":
            return "type_irrelevant"
        return self.label


class Suite(BaseModel):
    """The cases plus how they were drawn.

    Attributes:
        seed: Seed of every random choice.
        limit_per_category: Records per single-turn category (``None``: all).
        timing_episodes: ``multi_turn_base`` episodes used.
        cases: The cases, grouped by record, in category order.
        skipped: Record id -> why it was left out (gold calls that break their own docs).

    """

    seed: int
    limit_per_category: int | None
    timing_episodes: int
    cases: list[Case]
    skipped: dict[str, str] = Field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Count the cases per perturbation, in :data:`PERTURBATION_LABELS` order."""
        c = Counter(case.perturbation for case in self.cases)
        return {p: c[p] for p in PERTURBATION_LABELS if c[p]}


def tools_key(tools: Sequence[Mapping[str, Any]]) -> str:
    """Stable key of a tool list (SHA-1 of its canonical JSON)."""
    blob = json.dumps(list(tools), sort_keys=True, default=str)
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()


# ============================================================================ messages
def question_messages(question: Sequence[Sequence[Mapping[str, Any]]]) -> list[BaseMessage]:
    """BFCL question turns -> LangChain messages (user/system/assistant roles).

    Raises:
        ValueError: For an unknown role.

    """
    out: list[BaseMessage] = []
    for turn in question:
        for m in turn:
            out.append(_message(m))
    return out


def _message(m: Mapping[str, Any]) -> BaseMessage:
    role, content = m.get("role"), str(m.get("content") or "")
    if role == "user":
        return HumanMessage(content)
    if role == "system":
        return SystemMessage(content)
    if role == "assistant":
        return AIMessage(content)
    raise ValueError(f"unknown BFCL role {role!r}")


def _tool_call(name: str, args: Mapping[str, Any], call_id: str) -> ToolCall:
    return ToolCall(name=name, args=dict(args), id=call_id, type="tool_call")


def calls_message(calls: Sequence[tuple[str, Mapping[str, Any]]], *, start: int = 0) -> AIMessage:
    """Build an ``AIMessage`` with ``calls`` as tool calls, ids ``call_{start}``, ...."""
    return AIMessage(
        content="",
        tool_calls=[_tool_call(n, a, f"call_{start + i}") for i, (n, a) in enumerate(calls)],
    )


# ============================================================================ schema helpers
def _props(doc: Mapping[str, Any]) -> dict[str, Any]:
    params = doc.get("parameters") or {}
    props = params.get("properties") if isinstance(params, Mapping) else None
    return dict(props) if isinstance(props, Mapping) else {}


def _required(doc_or_schema: Mapping[str, Any]) -> list[str]:
    params = doc_or_schema.get("parameters", doc_or_schema)
    req = params.get("required") if isinstance(params, Mapping) else None
    return [str(r) for r in req] if isinstance(req, list) else []


def _json_type(schema: Any) -> str | None:
    if not isinstance(schema, Mapping) or not isinstance(schema.get("type"), str):
        return None
    return GORILLA_TO_JSON_SCHEMA.get(schema["type"])


def _is_json_type(value: Any, json_type: str) -> bool:
    if json_type == "string":
        return isinstance(value, str)
    if json_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if json_type == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if json_type == "boolean":
        return isinstance(value, bool)
    if json_type == "array":
        return isinstance(value, list)
    if json_type == "object":
        return isinstance(value, dict)
    return False


@functools.lru_cache(maxsize=4096)
def _validator_for(doc_json: str) -> Draft202012Validator:
    spec = ToolSpec.from_bfcl(json.loads(doc_json))
    return Draft202012Validator(spec.parameters)


def _validator(doc: Mapping[str, Any]) -> Draft202012Validator:
    return _validator_for(json.dumps(doc, sort_keys=True, default=str))


def _schema_errors(doc: Mapping[str, Any], args: Mapping[str, Any]) -> list[str]:
    errors = [e.message for e in _validator(doc).iter_errors(dict(args))]
    props = _props(doc)
    errors += [f"unknown parameter {k!r}" for k in args if props and k not in props]
    return errors


def gold_problems(record: Mapping[str, Any]) -> list[str]:
    """Why a record's gold calls cannot serve as clean cases (empty if they can).

    A gold call must name a tool of the record and validate against that tool's schema
    (Gorilla types mapped as :meth:`toolguard.specs.ToolSpec.from_bfcl`), with no unknown keys.
    19 BFCL v4 records fail: enum values outside the enum, ``True`` for ``"True"``-string
    enums, required keys with no gold value, gold keys the doc does not have.
    """
    docs = {d["name"]: d for d in record.get("function") or []}
    out: list[str] = []
    for name, args in bfcl.gold_calls(record):
        doc = docs.get(name)
        if doc is None:
            out.append(f"gold tool {name!r} is not in the record's function list")
            continue
        out += [f"{name}: {e[:160]}" for e in _schema_errors(doc, args)]
    return out


# ============================================================================ vocabularies
_VERB_SYNONYMS: Final[dict[str, tuple[str, ...]]] = {
    "get": ("fetch", "retrieve", "lookup"),
    "fetch": ("get", "retrieve"),
    "find": ("search", "locate", "lookup"),
    "search": ("find", "query", "lookup"),
    "calculate": ("compute", "estimate"),
    "calc": ("compute",),
    "compute": ("calculate",),
    "create": ("make", "add", "new"),
    "add": ("create", "insert"),
    "update": ("modify", "edit", "change"),
    "delete": ("remove", "erase"),
    "remove": ("delete",),
    "list": ("get_all", "show"),
    "send": ("post", "dispatch"),
    "book": ("reserve",),
    "set": ("configure", "update"),
    "check": ("verify", "validate"),
    "convert": ("transform",),
    "predict": ("forecast",),
    "analyze": ("evaluate", "inspect"),
    "generate": ("create", "produce"),
    "play": ("start",),
    "order": ("purchase", "buy"),
    "lookup": ("search", "find"),
}
_NAME_SUFFIXES: Final = ("_v2", "_advanced", "_details", "_info", "_data", "_by_name", "_lookup")
_GENERIC_TOOLS: Final = (
    "search_web",
    "lookup_information",
    "query_database",
    "get_details",
    "fetch_data",
    "run_query",
    "api_request",
    "knowledge_base.lookup",
    "web.search",
    "get_info",
)
_KEY_SYNONYMS: Final[dict[str, str]] = {
    "location": "place",
    "city": "town",
    "name": "title",
    "date": "day",
    "query": "search_term",
    "number": "num",
    "id": "identifier",
    "amount": "value",
    "type": "kind",
    "category": "group",
    "limit": "max_results",
    "language": "lang",
    "count": "num_items",
    "unit": "units",
    "units": "unit_type",
    "time": "timestamp",
    "price": "cost",
    "text": "content",
    "message": "msg",
    "user": "username",
    "email": "email_address",
    "year": "yr",
    "country": "nation",
    "address": "addr",
    "description": "desc",
    "length": "size",
    "start": "begin",
    "end": "finish",
    "from": "source",
    "to": "target",
    "value": "val",
    "values": "vals",
    "data": "payload",
    "url": "link",
    "path": "filepath",
    "mode": "method",
    "format": "fmt",
    "size": "dimension",
    "rate": "ratio",
    "duration": "period",
    "age": "years_old",
}
_KEY_SUFFIXES: Final = ("_value", "_name", "_id", "_str", "_param")
_CITY_STATE: Final = (
    "Tucson, AZ", "Boise, ID", "Duluth, MN", "Macon, GA", "Provo, UT", "Fresno, CA",
    "Spokane, WA", "Tulsa, OK", "Akron, OH", "Dayton, OH", "Reno, NV", "Mobile, AL",
    "Eugene, OR", "Laredo, TX", "Lansing, MI", "Peoria, IL",
)
_CITIES: Final = (
    "Tucson", "Boise", "Duluth", "Macon", "Provo", "Fresno", "Spokane", "Tulsa", "Akron",
    "Bruges", "Porto", "Lyon", "Graz", "Utrecht", "Gdansk", "Tampere", "Aarhus", "Bilbao",
    "Cork", "Trieste", "Kraków", "Leipzig", "Valparaíso", "Mendoza", "Hobart", "Nagoya",
)
_FIRST_NAMES: Final = (
    "Marisol", "Tobias", "Ingrid", "Desmond", "Priya", "Anselm", "Leonora", "Casimir",
    "Yolanda", "Fergus", "Odalys", "Bartholomew", "Saoirse", "Ezequiel", "Henrike", "Quentin",
)
_LAST_NAMES: Final = (
    "Okonkwo", "Lindqvist", "Haverford", "Castellano", "Pemberton", "Vasquez-Ortiz", "Brannigan",
    "Thorsen", "Achterberg", "Delacroix", "Fairweather", "Novakovic", "Quimby", "Ravensworth",
)
_PROPER_NOUNS: Final = (
    "Crimson Harbor", "Bluewater", "Silverline", "Northgate", "Oakridge", "Maple Crest",
    "Stonebridge", "Amberfield", "Ironwood", "Harborview", "Redstone", "Willowbrook",
)
_COMMON_NOUNS: Final = (
    "umbrella", "lantern", "saddle", "compass", "furnace", "trombone", "pelican", "ledger",
    "turnip", "anchor", "quilt", "marble", "gazebo", "thimble", "walrus", "kettle",
)
_PERSON_TOKENS: Final = frozenset({
    "person", "user", "username", "author", "artist", "player", "actor", "director",
    "contact", "recipient", "customer", "owner", "patient", "employee", "receiver", "sender",
    "singer", "composer", "writer", "friend", "manager", "doctor", "celebrity", "athlete",
    "student", "teacher", "guest", "passenger", "member", "individual", "who",
})
_LOCATION_TOKENS: Final = frozenset({
    "city", "location", "place", "destination", "origin", "country", "state", "region",
    "address", "area", "venue", "town", "departure", "arrival", "airport", "where", "from",
    "to", "province", "county", "capital", "locale", "loc", "addr", "street", "zip",
})
_SETTING_TOKENS: Final = frozenset({
    "unit", "units", "format", "mode", "sort", "order", "style", "version", "precision",
})
"""Key tokens of settings chosen from a closed set the doc does not enumerate (``temp_unit``):
inventing one is not a fact only the user could give, so ``invented_value`` leaves them."""
_SMALL_WORDS: Final = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)
_TENS_WORDS: Final = (
    "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
)


def number_words(n: int) -> str:
    """English words for an integer: ``25`` -> ``"twenty-five"``, ``-3`` -> ``"minus three"``."""
    if n < 0:
        return "minus " + number_words(-n)
    if n < 20:
        return _SMALL_WORDS[n]
    if n < 100:
        tens, rest = divmod(n, 10)
        return _TENS_WORDS[tens] + (f"-{_SMALL_WORDS[rest]}" if rest else "")
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
    digits = " ".join(_SMALL_WORDS[int(d)] for d in frac if d.isdigit())
    return f"{number_words(int(whole))} point {digits}"


def _key_tokens(key: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key)
    return [t.lower() for t in re.split(r"[_\W]+", spaced) if t]


# ============================================================================ the record view
@dataclass(slots=True)
class _Record:
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
class _Perturbed:
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


def _choice_sorted(rng: random.Random, items: Iterable[Any]) -> Any:
    pool = sorted(items, key=lambda x: json.dumps(x, sort_keys=True, default=str))
    return rng.choice(pool) if pool else None


# ============================================================================ perturbations
def _fabricated(rec: _Record) -> _Perturbed | None:
    i = rec.rng.randrange(len(rec.calls))
    name, args = rec.calls[i]
    new, strategy = fabricate_name(name, rec.docs.keys(), rec.rng)
    return _Perturbed(_with_call(rec.calls, i, new, dict(args)), i,
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
            candidates = [name + s for s in _NAME_SUFFIXES]
        else:
            candidates = list(_GENERIC_TOOLS)
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
    for verb, synonyms in _VERB_SYNONYMS.items():
        m = re.search(rf"(^|_)((?i:{verb}))(?=_|$|[A-Z])", last)
        if m is None:
            continue
        original = m.group(2)
        for syn in synonyms:
            word = syn.capitalize() if original[:1].isupper() else syn
            out.append(prefix + last[: m.start(2)] + word + last[m.end(2):])
    return out


def _irrelevant_tool(rec: _Record) -> _Perturbed | None:
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
        if args is not None and not _schema_errors(doc, args):
            return _Perturbed(_with_call(rec.calls, i, other, args), i,
                              {"gold_tool": gold_name, "tool": other,
                               "keys": sorted(args)})
    return None


def _build_args(
    schema: Mapping[str, Any], gold_args: Mapping[str, Any], rec: _Record
) -> dict[str, Any] | None:
    """Arguments for the required keys of an object schema, grounded where possible."""
    props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    out: dict[str, Any] = {}
    for key in _required(schema):
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
               rec: _Record) -> Any:
    jt = _json_type(schema)
    if key in gold_args and jt is not None and _is_json_type(gold_args[key], jt) and (
        "enum" not in schema or gold_args[key] in schema["enum"]
    ):
        return gold_args[key]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    default = schema.get("default")
    if default is not None and jt is not None and _is_json_type(default, jt):
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
        if isinstance(items, Mapping) and _json_type(items) is not None:
            item = _value_for(key, items, {}, rec)
            return [] if item is _NO_VALUE else [item]
        return []
    if jt == "object":
        return _build_args(schema, {}, rec) or {}
    return _NO_VALUE


def _grounded_string(gold_args: Mapping[str, Any], rec: _Record) -> str:
    strings = [v for v in gold_args.values() if isinstance(v, str) and len(v) >= 2]
    if strings:
        return str(strings[0])
    words: list[str] = re.findall(r"[A-Za-z][A-Za-z'-]{3,}", rec.text)
    capitalised = [w for w in words if w[0].isupper()]
    return (capitalised or words or ["request"])[-1]


def _drop_required(rec: _Record) -> _Perturbed | None:
    cands = [(i, k) for i, (n, a) in enumerate(rec.calls) for k in _required(rec.docs[n])
             if k in a]
    if not cands:
        return None
    i, key = rec.rng.choice(cands)
    name, args = rec.calls[i]
    new = {k: v for k, v in args.items() if k != key}
    return _Perturbed(_with_call(rec.calls, i, name, new), i, {"key": key})


def _rename_key(rec: _Record) -> _Perturbed | None:
    cands = [(i, k) for i, (_, a) in enumerate(rec.calls) for k in a]
    if not cands:
        return None
    i, key = rec.rng.choice(cands)
    name, args = rec.calls[i]
    taken = set(_props(rec.docs[name])) | set(args)
    new_key, strategy = rename_key(key, taken, rec.rng)
    new = {(new_key if k == key else k): v for k, v in args.items()}
    return _Perturbed(_with_call(rec.calls, i, name, new), i,
                      {"key": key, "new_key": new_key, "strategy": strategy,
                       "required": key in _required(rec.docs[name])})


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
            if key.lower() in _KEY_SYNONYMS:
                cands.append(_KEY_SYNONYMS[key.lower()])
            if tokens and tokens[-1] in _KEY_SYNONYMS and len(tokens) > 1:
                cands.append("_".join([*tokens[:-1], _KEY_SYNONYMS[tokens[-1]]]))
        elif strategy == "case":
            if "_" in key.strip("_"):
                head, *rest = key.split("_")
                cands = [head + "".join(p[:1].upper() + p[1:] for p in rest if p)]
            elif re.search(r"[a-z][A-Z]", key):
                cands = ["_".join(_key_tokens(key))]
            else:
                cands = []
        else:
            cands = [key + s for s in _KEY_SUFFIXES]
        cands = [c for c in cands if c and c not in used]
        if cands:
            return rng.choice(cands), strategy
    return f"{key}_value_{rng.randrange(100)}", "suffix"  # pragma: no cover


def _wrong_type(rec: _Record) -> _Perturbed | None:
    cands: list[tuple[int, str]] = []
    for i, (name, args) in enumerate(rec.calls):
        props = _props(rec.docs[name])
        for key, value in args.items():
            sub = props.get(key)
            if not isinstance(sub, Mapping) or sub.get("type") == "any":
                continue
            jt = _json_type(sub)
            if jt is not None and _is_json_type(value, jt):
                cands.append((i, key))
    rec.rng.shuffle(cands)
    for i, key in cands:
        name, args = rec.calls[i]
        jt = _json_type(_props(rec.docs[name])[key])
        assert jt is not None
        new_value = wrong_type_value(args[key], jt, rec.rng)
        new = {**args, key: new_value}
        errors = _validator(rec.docs[name]).iter_errors(new)
        if any(e.validator == "type" for e in errors):
            return _Perturbed(_with_call(rec.calls, i, name, new), i,
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
    if re.search(r"\d", value) and not tokens & _LOCATION_TOKENS:
        return "numbered"
    if (tokens & _LOCATION_TOKENS or _CITY_STATE_RE.match(value)
            or value.casefold() in {c.casefold() for c in (*_CITIES, *_CITY_STATE)}):
        return "location"
    titled = bool(words) and all(w[:1].isupper() and w.replace("-", "").replace("'", "")
                                 .isalpha() for w in words)
    if titled and len(words) <= 3 and (tokens & _PERSON_TOKENS or key.lower() in
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


def invent_string(key: str, value: str, rec: _Record) -> tuple[str, StringKind] | None:
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
        fallback = _CITY_STATE if _CITY_STATE_RE.match(value) else _CITIES
    elif kind == "person":
        n_words = len(value.split())
        fallback = tuple(f"{f} {last}" for f in _FIRST_NAMES for last in _LAST_NAMES) if (
            n_words > 1) else _FIRST_NAMES
    elif kind == "proper":
        fallback = _PROPER_NOUNS
    else:
        fallback = _COMMON_NOUNS
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


def _invented_value(rec: _Record) -> _Perturbed | None:
    cands: list[tuple[int, str]] = []
    for i, (name, args) in enumerate(rec.calls):
        props = _props(rec.docs[name])
        for key, value in args.items():
            sub = props.get(key)
            if (isinstance(value, str) and len(value) >= 3 and _json_type(sub) == "string"
                    and _content_schema_ok(sub) and value.casefold() in rec.folded
                    and not set(_key_tokens(key)) & _SETTING_TOKENS
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
        if _schema_errors(rec.docs[name], new):
            continue
        return _Perturbed(_with_call(rec.calls, i, name, new), i,
                          {"key": key, "kind": kind, "old": args[key], "new": new_value})
    return None


def _invented_number(rec: _Record) -> _Perturbed | None:
    cands: list[tuple[int, str]] = []
    for i, (name, args) in enumerate(rec.calls):
        props = _props(rec.docs[name])
        for key, value in args.items():
            sub = props.get(key)
            if (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and _json_type(sub) in ("integer", "number") and _content_schema_ok(sub)
                    and float(value) in _numbers(rec.text)):
                cands.append((i, key))
    rec.rng.shuffle(cands)
    for i, key in cands:
        name, args = rec.calls[i]
        sub = _props(rec.docs[name])[key]
        new_value = invent_number(args[key], rec, sub)
        if new_value is None:
            continue
        new = {**args, key: new_value}
        if _schema_errors(rec.docs[name], new):
            continue
        return _Perturbed(_with_call(rec.calls, i, name, new), i,
                          {"key": key, "old": args[key], "new": new_value})
    return None


def invent_number(
    value: int | float, rec: _Record, schema: Mapping[str, Any]
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


_PERTURBERS: Final[dict[Perturbation, Callable[[_Record], _Perturbed | None]]] = {
    "fabricated": _fabricated,
    "irrelevant_tool": _irrelevant_tool,
    "drop_required": _drop_required,
    "rename_key": _rename_key,
    "wrong_type": _wrong_type,
    "invented_value": _invented_value,
    "invented_number": _invented_number,
}


# ============================================================================ building
def single_turn_cases(
    record: Mapping[str, Any],
    category: str,
    *,
    seed: int = 0,
    perturbations: Sequence[Perturbation] = SINGLE_TURN_PERTURBATIONS,
) -> list[Case]:
    """Build the gold case and one case per applicable perturbation of a single-turn record.

    Args:
        record: A record from :func:`toolguard_evals.bfcl.load_category` (with ``ground_truth``).
        category: Its category name.
        seed: Suite seed; the record's choices use ``random.Random(f"{seed}:{id}")``.
        perturbations: Which perturbations to try (each gives at most one case).

    Returns:
        ``[gold_case, *perturbed_cases]`` (``[]`` for a record without gold calls).

    """
    calls = bfcl.gold_calls(record)
    if not calls:
        return []
    docs = {d["name"]: d for d in record["function"]}
    tools = list(record["function"])
    key = tools_key(tools)
    prefix = question_messages(record["question"])
    text = "\n".join(str(m.content) for m in prefix)
    rec = _Record(
        id=record["id"], category=category, docs=docs, calls=calls, text=text,
        folded=text.casefold(), doc_text=json.dumps(tools, ensure_ascii=False).casefold(),
        rng=random.Random(f"{seed}:{record['id']}"),
    )

    def case(p: Perturbation, cs: Sequence[tuple[str, dict[str, Any]]], target: int | None,
             meta: dict[str, Any]) -> Case:
        return Case(id=f"{record['id']}:{p}", category=category, perturbation=p,
                    label=PERTURBATION_LABELS[p], messages=[*prefix, calls_message(cs)],
                    tools=tools, tools_key=key, target=target, metadata=meta)

    out = [case("gold", calls, None, {"calls": len(calls)})]
    for p in perturbations:
        made = _PERTURBERS[p](rec)
        if made is not None:
            out.append(case(p, made.calls, made.target, made.metadata))
    return out


@dataclass(frozen=True, slots=True)
class _Step:
    turn: int
    ai_pos: int  # index of the AIMessage that makes the call
    source: str
    result: bfcl.ExecResult


def multi_turn_cases(episode: bfcl.MultiTurnEpisode, *, seed: int = 0) -> list[Case]:
    """Build a ``repeat`` (timing) and a ``next_call`` (clean) case from a multi-turn episode.

    The gold calls are replayed in the real environment, one ``AIMessage`` per call, each
    answered by a ``ToolMessage`` with the real result.  ``repeat``: after a random
    successful call, the identical call again; its metadata tell whether running it again
    would change the environment's public state (``harmful``), whether it would fail
    (``repeat_ok``) and whether its output would be the same (``same_output``).
    ``next_call``: a random gold call with the real history before it.

    Raises:
        ValueError: If a gold call does not parse or fit its method.

    """
    rng = random.Random(f"{seed}:{episode.id}")
    env = bfcl.BFCLEnvironment.for_episode(episode)
    messages: list[BaseMessage] = []
    steps: list[_Step] = []
    for t, turn in enumerate(episode.turns):
        messages += [_message(m) for m in turn]
        for source in episode.gold[t]:
            result = env.execute(source)
            call_id = f"call_{len(steps)}"
            steps.append(_Step(t, len(messages), source, result))
            messages.append(AIMessage(content="",
                                      tool_calls=[_tool_call(result.name, result.args, call_id)]))
            messages.append(ToolMessage(content=result.content, tool_call_id=call_id,
                                        name=result.name,
                                        status="success" if result.ok else "error"))
    if not steps:
        return []
    out: list[Case] = []
    ok_steps = [j for j, s in enumerate(steps) if s.result.ok]
    if ok_steps:
        j = rng.choice(ok_steps)
        step = steps[j]
        effect = _repeat_effect(episode, steps[: j + 1])
        tools = episode.tools_at(step.turn)
        out.append(Case(
            id=f"{episode.id}:repeat@{j}", category=episode.category, perturbation="repeat",
            label="timing",
            messages=[*messages[: step.ai_pos + 2],
                      AIMessage(content="", tool_calls=[
                          _tool_call(step.result.name, step.result.args, f"call_{len(steps)}")])],
            tools=tools, tools_key=tools_key(tools), target=0,
            metadata={"step": j, "turn": step.turn, "call": step.source, **effect},
        ))
    k = rng.randrange(len(steps))
    step = steps[k]
    tools = episode.tools_at(step.turn)
    earlier = {(s.result.name, json.dumps(s.result.args, sort_keys=True, default=str))
               for s in steps[:k]}
    out.append(Case(
        id=f"{episode.id}:next_call@{k}", category=episode.category, perturbation="next_call",
        label=None, messages=[*messages[: step.ai_pos + 1]], tools=tools,
        tools_key=tools_key(tools), target=None,
        metadata={"step": k, "turn": step.turn, "call": step.source,
                  "repeats_earlier_call": (step.result.name, json.dumps(
                      step.result.args, sort_keys=True, default=str)) in earlier},
    ))
    return out


def _repeat_effect(episode: bfcl.MultiTurnEpisode, steps: Sequence[_Step]) -> dict[str, Any]:
    """Replay ``steps``, then run the last one again on a deep copy and compare states."""
    env = bfcl.BFCLEnvironment.for_episode(episode)
    for s in steps:
        env.execute(s.source)
    before = env.state()
    clone = env.clone()
    last = steps[-1].result
    again = clone.call(last.name, last.args)
    harmful = clone.state() != before
    return {
        "harmful": harmful,
        "effect": "harmful" if harmful else "harmless",
        "repeat_ok": again.ok,
        "same_output": again.content == last.content,
    }


def build_suite(
    *,
    seed: int = 0,
    limit_per_category: int | None = DEFAULT_LIMIT_PER_CATEGORY,
    categories: Sequence[bfcl.SingleTurnCategory] = SUITE_CATEGORIES,
    timing_episodes: int = DEFAULT_TIMING_EPISODES,
    perturbations: Sequence[Perturbation] = SINGLE_TURN_PERTURBATIONS,
) -> Suite:
    """Build the labelled suite.

    Args:
        seed: Seed of every random choice (record sampling and perturbations).
        limit_per_category: Records sampled per single-turn category (``None``: all).
            Records whose gold breaks its own docs (:func:`gold_problems`) are skipped
            before sampling.
        categories: Single-turn categories (a subset of :data:`SUITE_CATEGORIES`).
        timing_episodes: ``multi_turn_base`` episodes sampled (0 disables multi-turn cases).
        perturbations: Single-turn perturbations to apply.

    Returns:
        The :class:`Suite`; about ``6 * limit_per_category * len(categories)
        + 2 * timing_episodes`` cases.

    Raises:
        ValueError: For a negative limit or an unknown category/perturbation.
        toolguard_evals.bfcl.BFCLNotInstalledError: If ``bfcl-eval`` is not installed.

    """
    if limit_per_category is not None and limit_per_category < 0:
        raise ValueError("limit_per_category must be >= 0")
    if timing_episodes < 0:
        raise ValueError("timing_episodes must be >= 0")
    unknown = [p for p in perturbations if p not in _PERTURBERS]
    if unknown:
        raise ValueError(f"unknown single-turn perturbations {unknown}; expected some of "
                         f"{list(_PERTURBERS)}")
    cases: list[Case] = []
    skipped: dict[str, str] = {}
    for category in categories:
        usable = []
        for record in bfcl.load_category(category):
            problems = gold_problems(record)
            if problems:
                skipped[record["id"]] = "; ".join(problems)[:300]
            else:
                usable.append(record)
        for record in _sample(usable, limit_per_category, f"{seed}:{category}"):
            cases += single_turn_cases(record, category, seed=seed, perturbations=perturbations)
    if timing_episodes:
        episodes = bfcl.load_multi_turn("multi_turn_base")
        for episode in _sample(episodes, timing_episodes, f"{seed}:multi_turn_base"):
            cases += multi_turn_cases(episode, seed=seed)
    return Suite(seed=seed, limit_per_category=limit_per_category,
                 timing_episodes=timing_episodes, cases=cases, skipped=skipped)


def _sample(items: Sequence[Any], limit: int | None, seed: str) -> list[Any]:
    if limit is None or limit >= len(items):
        return list(items)
    picked = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in picked]


# ============================================================================ scoring
class VerdictLike(Protocol):
    """What :func:`run_suite` reads from a verdict (``toolguard.Verdict``)."""

    @property
    def action(self) -> str: ...
    @property
    def hallucination(self) -> str | None: ...
    @property
    def reason(self) -> str: ...


class GuardLike(Protocol):
    """What :func:`run_suite` calls (``toolguard.Guard``)."""

    def check(self, messages: Sequence[BaseMessage]) -> Sequence[VerdictLike]: ...


GuardFactory = Callable[[list[dict[str, Any]]], GuardLike]
"""Builds a guard for a list of BFCL docs, e.g. ``lambda tools: Guard(tools)``."""


def guard_factory(mode: str = "deterministic") -> GuardFactory:
    """Return a factory building ``toolguard.Guard(tools, **GUARD_MODES[mode])``.

    Raises:
        ValueError: For a mode not in :data:`GUARD_MODES`.

    """
    if mode not in GUARD_MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {list(GUARD_MODES)}")
    from toolguard import Guard

    kwargs = GUARD_MODES[mode]
    return lambda tools: Guard(tools, **kwargs)


@dataclass(frozen=True, slots=True)
class _Outcome:
    case: Case
    predicted: str  # hallucination type, else the action if not allowed, else "none"
    flagged: bool  # the scored verdict was not "allow" or named a hallucination
    blocked_any: bool  # any call of the message was not allowed
    collateral: bool  # a call other than the target was not allowed
    verdict: VerdictLike | None


def _outcome(case: Case, verdicts: Sequence[VerdictLike]) -> _Outcome:
    def pred(v: VerdictLike) -> str:
        return v.hallucination or ("none" if v.action == "allow" else v.action)

    blocked = [v for v in verdicts if v.action != "allow"]
    if case.target is None:
        scored = blocked[0] if blocked else next(
            (v for v in verdicts if v.hallucination), None)
        collateral = False
    else:
        scored = verdicts[case.target]
        collateral = any(v.action != "allow" for j, v in enumerate(verdicts) if j != case.target)
    predicted = "none" if scored is None else pred(scored)
    flagged = scored is not None and (scored.action != "allow" or bool(scored.hallucination))
    return _Outcome(case, predicted, flagged, bool(blocked), collateral, scored)


def run_suite(
    cases: Sequence[Case], guard_factory: GuardFactory, *, seed: int | None = None
) -> dict[str, Any]:
    """Run ``guard_factory(case.tools).check(case.messages)`` on every case and score it.

    One guard is built per distinct tool list (:attr:`Case.tools_key`).  For a perturbed case
    the verdict of the target call is scored; for a clean case every call must be allowed.

    Args:
        cases: The cases (e.g. ``build_suite().cases``).
        guard_factory: Builds a guard from BFCL docs (see :func:`guard_factory`).
        seed: Recorded in the output.

    Returns:
        ``{"cases": int, "seed", "wall_s", "check_ms_per_case",
        "per_type": {class: {"precision", "recall", "f1", "support"}},
        "false_block_rate": float, "false_block_rate_single_turn", "false_block_rate_multi_turn",
        "per_perturbation": {name: {"n", "detected", "flagged_any", "collateral"}},
        "per_category": {category: {"gold", "false_block_rate", "perturbed", "detected"}},
        "timing_by_effect": {"harmful"|"harmless"|"repeat_fails": {"n", "detected"}},
        "content_by_kind": {kind: {"n", "detected"}},
        "confusion": {class|"none": {predicted: count}},
        "examples": {"false_blocks": [...], "misses": {class: [...]}}}``.
        ``detected`` is the share flagged with the right type; for clean perturbations
        (``gold``, ``next_call``) it is the share left alone (every call allowed).
        ``per_type`` classes: ``type`` = fabricated, ``type_irrelevant`` = irrelevant_tool;
        a ``type`` prediction on either counts as correct for both.  Precision for class
        ``t`` = cases predicted ``t`` whose label is ``t`` / cases predicted ``t``.

    Raises:
        ValueError: If a guard returns another number of verdicts than there are calls.

    """
    started = time.perf_counter()
    guards: dict[str, GuardLike] = {}
    outcomes: list[_Outcome] = []
    check_s = 0.0
    for case in cases:
        guard = guards.get(case.tools_key)
        if guard is None:
            guard = guards[case.tools_key] = guard_factory(list(case.tools))
        t0 = time.perf_counter()
        verdicts = list(guard.check(case.messages))
        check_s += time.perf_counter() - t0
        if len(verdicts) != len(case.calls):
            raise ValueError(f"{case.id}: {len(verdicts)} verdicts for {len(case.calls)} calls")
        outcomes.append(_outcome(case, verdicts))
    report = score(outcomes)
    report["seed"] = seed
    report["guards_built"] = len(guards)
    report["check_ms_per_case"] = round(1000 * check_s / max(len(cases), 1), 4)
    report["wall_s"] = round(time.perf_counter() - started, 3)
    return report


def _share(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def _correct(o: _Outcome) -> bool:
    if o.case.label is None:
        return not o.blocked_any
    return o.predicted == o.case.label


def score(outcomes: Sequence[_Outcome]) -> dict[str, Any]:
    """Compute the metrics of :func:`run_suite` from per-case outcomes (no timing keys)."""
    report: dict[str, Any] = {"cases": len(outcomes)}
    per_type: dict[str, dict[str, Any]] = {}
    for cls in SCORE_CLASSES:
        predicted_as = "type" if cls.startswith("type") else cls
        members = [o for o in outcomes if o.case.score_class == cls]
        hits = sum(o.predicted == predicted_as for o in members)
        predicted = [o for o in outcomes if o.predicted == predicted_as]
        right = sum(o.case.label == predicted_as for o in predicted)
        p, r = _share(right, len(predicted)), _share(hits, len(members))
        f1 = round(2 * p * r / (p + r), 4) if p is not None and r is not None and p + r else (
            0.0 if p is not None and r is not None else None)
        per_type[cls] = {"precision": p, "recall": r, "f1": f1, "support": len(members)}
    report["per_type"] = per_type

    clean = [o for o in outcomes if o.case.label is None]
    single = [o for o in clean if o.case.perturbation == "gold"]
    multi = [o for o in clean if o.case.perturbation == "next_call"]
    report["false_block_rate"] = _share(sum(o.blocked_any for o in clean), len(clean))
    report["false_block_rate_single_turn"] = _share(sum(o.blocked_any for o in single),
                                                    len(single))
    report["false_block_rate_multi_turn"] = _share(sum(o.blocked_any for o in multi), len(multi))

    per_p: dict[str, dict[str, Any]] = {}
    for name in PERTURBATION_LABELS:
        group = [o for o in outcomes if o.case.perturbation == name]
        if group:
            per_p[name] = {
                "n": len(group),
                "detected": _share(sum(_correct(o) for o in group), len(group)),
                "flagged_any": _share(sum(o.flagged or o.blocked_any for o in group), len(group)),
                "collateral": _share(sum(o.collateral for o in group), len(group)),
            }
    report["per_perturbation"] = per_p

    per_cat: dict[str, dict[str, Any]] = {}
    for cat in dict.fromkeys(o.case.category for o in outcomes):
        group = [o for o in outcomes if o.case.category == cat]
        g = [o for o in group if o.case.label is None]
        pos = [o for o in group if o.case.label is not None]
        per_cat[cat] = {
            "gold": len(g),
            "false_block_rate": _share(sum(o.blocked_any for o in g), len(g)),
            "perturbed": len(pos),
            "detected": _share(sum(_correct(o) for o in pos), len(pos)),
        }
    report["per_category"] = per_cat

    def breakdown(group: Iterable[_Outcome], key: Callable[[_Outcome], str]) -> dict[str, Any]:
        buckets: dict[str, list[_Outcome]] = defaultdict(list)
        for o in group:
            buckets[key(o)].append(o)
        return {k: {"n": len(v), "detected": _share(sum(_correct(o) for o in v), len(v))}
                for k, v in sorted(buckets.items())}

    repeats = [o for o in outcomes if o.case.perturbation == "repeat"]
    report["timing_by_effect"] = {
        **breakdown(repeats, lambda o: str(o.case.metadata.get("effect"))),
        **breakdown([o for o in repeats if not o.case.metadata.get("repeat_ok")],
                    lambda o: "repeat_fails"),
    }
    report["content_by_kind"] = breakdown(
        [o for o in outcomes if o.case.perturbation == "invented_value"],
        lambda o: str(o.case.metadata.get("kind")))

    confusion: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        confusion[o.case.score_class or "none"][o.predicted] += 1
    report["confusion"] = {k: dict(sorted(v.items())) for k, v in sorted(confusion.items())}

    false_blocks = [_example(o) for o in clean if o.blocked_any][:5]
    misses: dict[str, list[dict[str, Any]]] = {}
    for cls in SCORE_CLASSES:
        missed = [o for o in outcomes if o.case.score_class == cls and not _correct(o)]
        misses[cls] = [_example(o) for o in missed[:5]]
    report["examples"] = {"false_blocks": false_blocks, "misses": misses}
    return report


def _example(o: _Outcome) -> dict[str, Any]:
    calls = o.case.calls
    call = calls[o.case.target] if o.case.target is not None else (calls[0] if calls else None)
    return {
        "id": o.case.id,
        "category": o.case.category,
        "perturbation": o.case.perturbation,
        "call": None if call is None else {"name": call["name"], "args": call["args"]},
        "metadata": o.case.metadata,
        "action": None if o.verdict is None else o.verdict.action,
        "hallucination": None if o.verdict is None else o.verdict.hallucination,
        "reason": "" if o.verdict is None else o.verdict.reason[:400],
    }


# ============================================================================ entry point
def main(
    json_path: str | None,
    *,
    seed: int = 0,
    limit_per_category: int | None = DEFAULT_LIMIT_PER_CATEGORY,
    modes: Sequence[str] = ("deterministic",),
) -> dict[str, Any]:
    """Build the suite, run each guard mode, print a table and write JSON.

    Args:
        json_path: Where to write the report (``None``: print only).
        seed: Suite seed.
        limit_per_category: Records per single-turn category (``None``: all 2111 records).
        modes: Guard modes (:data:`GUARD_MODES`).  With several, the report has
            ``by_mode: {mode: report}`` plus the first mode's keys at top level.

    Returns:
        The report of :func:`run_suite`, plus ``mode``, ``counts`` (cases per
        perturbation), ``skipped_records`` (id -> reason), ``build_s`` and ``limit_per_category``.

    Raises:
        ValueError: For an empty or unknown mode list.

    """
    if not modes:
        raise ValueError("modes must name at least one mode")
    factories = {m: guard_factory(m) for m in modes}  # fail fast on unknown modes
    t0 = time.perf_counter()
    suite = build_suite(seed=seed, limit_per_category=limit_per_category)
    build_s = round(time.perf_counter() - t0, 3)
    by_mode: dict[str, dict[str, Any]] = {}
    for mode, factory in factories.items():
        result = run_suite(suite.cases, factory, seed=seed)
        result.update(mode=mode, counts=suite.counts(), skipped_records=suite.skipped,
                      build_s=build_s, limit_per_category=limit_per_category)
        by_mode[mode] = result
        _print_report(result)
    report = dict(by_mode[modes[0]])
    if len(modes) > 1:
        report["by_mode"] = by_mode
    if json_path is not None:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    return report


def _fmt(x: Any) -> str:
    return "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def _print_report(r: Mapping[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    title = (f"toolguard detectors on BFCL v4 — mode={r.get('mode')} seed={r.get('seed')} "
             f"cases={r['cases']}")
    t = Table(title=title)
    for col in ("class", "precision", "recall", "f1", "support"):
        t.add_column(col, justify="left" if col == "class" else "right")
    for cls, m in r["per_type"].items():
        t.add_row(cls, _fmt(m["precision"]), _fmt(m["recall"]), _fmt(m["f1"]), str(m["support"]))
    console.print(t)
    p = Table(title="per perturbation")
    for col in ("perturbation", "label", "n", "detected", "flagged_any", "collateral"):
        p.add_column(col, justify="left" if col in ("perturbation", "label") else "right")
    for name, m in r["per_perturbation"].items():
        label = PERTURBATION_LABELS.get(name)
        p.add_row(name, str(label), str(m["n"]), _fmt(m["detected"]), _fmt(m["flagged_any"]),
                  _fmt(m["collateral"]))
    console.print(p)
    console.print(
        f"false block rate: {_fmt(r['false_block_rate'])} "
        f"(single-turn gold {_fmt(r['false_block_rate_single_turn'])}, "
        f"multi-turn next call {_fmt(r['false_block_rate_multi_turn'])})"
    )
    console.print("timing by effect: " + ", ".join(
        f"{k} {_fmt(v['detected'])} (n={v['n']})" for k, v in r["timing_by_effect"].items()))
    console.print("content by kind: " + ", ".join(
        f"{k} {_fmt(v['detected'])} (n={v['n']})" for k, v in r["content_by_kind"].items()))
    console.print("false block rate per category: " + ", ".join(
        f"{k} {_fmt(v['false_block_rate'])}" for k, v in r["per_category"].items()))
    console.print(
        f"check: {r['check_ms_per_case']} ms/case, wall {r['wall_s']} s, "
        f"build {r.get('build_s', '-')} s, guards built {r.get('guards_built')}, "
        f"skipped records {len(r.get('skipped_records') or {})}"
    )
