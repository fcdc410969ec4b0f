"""The seven single-call perturbations of both detector suites, over a :class:`Target`.

Each takes a :class:`~toolguard_evals.detector_suite.target.Target` (a gold step: its
call(s), tools and conversation) and returns a
:class:`~toolguard_evals.detector_suite.target.Perturbed` call list, or ``None`` when it
does not apply; :data:`PERTURBERS` maps the names to them (labels:
:data:`~toolguard_evals.detector_suite.records.PERTURBATION_LABELS`):

==================  ======================================================================
``fabricated``      the tool name becomes a plausible name not in the list
``irrelevant_tool`` another tool of the list (none the target avoids), schema-valid,
                    grounded arguments
``drop_required``   a required key the gold call has is removed
``rename_key``      a key is renamed to a plausible unknown key
``wrong_type``      a value gets a wrong JSON type (``5`` -> ``"five"``)
``invented_value``  a string the user stated -> one stated nowhere (:mod:`.values`)
``invented_number`` a number the user stated -> one stated nowhere
==================  ======================================================================

Arguments and invented values follow the target's declared value kinds when it has them
(suite B's sources), else the value's shape (BFCL).  The target's
:class:`~toolguard_evals.detector_suite.target.Sampling` says how choices are drawn.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from random import Random
from typing import Any, Final

from langchain_core.messages import AIMessage

from toolguard_evals.detector_suite._schema import (
    doc_props,
    doc_validator,
    is_json_type,
    required_keys,
    schema_errors,
    schema_type,
)
from toolguard_evals.detector_suite._vocab import (
    GENERIC_TOOLS,
    KEY_SUFFIXES,
    KEY_SYNONYMS,
    NAME_SUFFIXES,
    SETTING_TOKENS,
    VERB_SYNONYMS,
)
from toolguard_evals.detector_suite.records import Perturbation
from toolguard_evals.detector_suite.target import Perturbed, Target
from toolguard_evals.detector_suite.values import (
    invent_kind_number,
    invent_number,
    invent_string,
    invent_value,
    key_tokens,
    numbers_of,
    string_kind,
    words_for,
)
from toolguard_evals.dialogues.records import ValueKind


# ============================================================================ type
def _fabricated(t: Target) -> Perturbed | None:
    rng = t.rng("fabricated")
    i = t.pick_call(rng)
    name, args = t.calls[i]
    new, strategy = fabricate_name(name, t.docs.keys(), rng)
    return Perturbed(t.with_call(i, new, dict(args)), i,
                     {"gold_tool": name, "tool": new, "strategy": strategy})


def fabricate_name(name: str, existing: Iterable[str], rng: Random) -> tuple[str, str]:
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



def _irrelevant_tool(t: Target) -> Perturbed | None:
    if len(t.docs) < 2:
        return None
    rng = t.rng("irrelevant_tool")
    excluded = t.avoid | {n for n, _ in t.calls}
    i = t.pick_call(rng)
    gold_name, gold_args = t.calls[i]
    others = sorted(n for n in t.docs if n not in excluded)
    rng.shuffle(others)
    if t.sampling.tools_with_args_first:
        # a call with grounded arguments is the harder case
        others.sort(key=lambda n: not required_keys(t.docs[n]))
    earlier = {(tc["name"], json.dumps(tc["args"], sort_keys=True))
               for m in t.history if isinstance(m, AIMessage) for tc in m.tool_calls}
    for other in others:
        doc = t.docs[other]
        args = (_build_args(doc.get("parameters") or {}, gold_args, t) if t.kinds is None
                else _kind_args(t, doc, gold_args, rng))
        # never an exact repeat of an earlier call (that would also be a timing case)
        if args is not None and not schema_errors(doc, args) and (
                other, json.dumps(args, sort_keys=True)) not in earlier:
            return Perturbed(t.with_call(i, other, args), i,
                             {"gold_tool": gold_name, "tool": other, "keys": sorted(args)})
    return None


def _build_args(
    schema: Mapping[str, Any], gold_args: Mapping[str, Any], t: Target
) -> dict[str, Any] | None:
    """Arguments for the required keys of an object schema, grounded where possible."""
    props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    out: dict[str, Any] = {}
    for key in required_keys(schema):
        sub = props.get(key) if isinstance(props, Mapping) else None
        if not isinstance(sub, Mapping):
            return None
        value = _value_for(key, sub, gold_args, t)
        if value is _NO_VALUE:
            return None
        out[key] = value
    return out


_NO_VALUE: Final = object()


def _value_for(key: str, schema: Mapping[str, Any], gold_args: Mapping[str, Any],
               t: Target) -> Any:
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
        return _grounded_string(gold_args, t)
    if jt in ("integer", "number"):
        numbers = sorted(n for n in numbers_of(t.text) if n.is_integer() or jt == "number")
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
            item = _value_for(key, items, {}, t)
            return [] if item is _NO_VALUE else [item]
        return []
    if jt == "object":
        return _build_args(schema, {}, t) or {}
    return _NO_VALUE


def _grounded_string(gold_args: Mapping[str, Any], t: Target) -> str:
    strings = [v for v in gold_args.values() if isinstance(v, str) and len(v) >= 2]
    if strings:
        return str(strings[0])
    words: list[str] = re.findall(r"[A-Za-z][A-Za-z'-]{3,}", t.text)
    capitalised = [w for w in words if w[0].isupper()]
    return (capitalised or words or ["request"])[-1]




def _kind_args(t: Target, doc: Mapping[str, Any], gold_args: Mapping[str, Any],
               rng: Random) -> dict[str, Any] | None:
    """Arguments for the required parameters of ``doc`` stated in the conversation, by kind.

    A gold value that fits, an enum value, the default, ``True``, a stated value of the same
    kind (or any stated number in bounds), or the doc's own example; ``None`` if a
    parameter gets none.
    """
    assert t.kinds is not None
    props = doc_props(doc)
    kinds = t.kinds.get(doc["name"], {})
    out: dict[str, Any] = {}
    for key in required_keys(doc):
        sub = props.get(key)
        if not isinstance(sub, Mapping):
            return None
        jt = schema_type(sub)
        if key in gold_args and _fits(gold_args[key], jt) and (
                "enum" not in sub or gold_args[key] in sub["enum"]):
            out[key] = gold_args[key]
            continue
        if isinstance(sub.get("enum"), list) and sub["enum"]:
            out[key] = rng.choice(sub["enum"])
            continue
        if "default" in sub and _fits(sub["default"], jt):
            out[key] = sub["default"]
            continue
        if jt == "boolean":
            out[key] = True
            continue
        kind = kinds.get(key)
        item_jt = schema_type(sub.get("items")) if jt == "array" else jt
        same = [v for k, v in t.pool if k == kind and kind is not None and _fits(v, item_jt)]
        if not same and item_jt in ("integer", "number"):
            same = [v for k, v in t.pool if _fits(v, item_jt) and not isinstance(v, bool)
                    and (sub.get("minimum") is None or v >= sub["minimum"])
                    and (sub.get("maximum") is None or v <= sub["maximum"])]
        if not same and "example_value" in sub and _fits(sub["example_value"], item_jt):
            same = [sub["example_value"]]  # grounded in the tool's own doc (rule 2)
        if not same:
            return None
        value = rng.choice(same)
        out[key] = [value] if jt == "array" else value
    return out


def _fits(value: Any, jt: str | None) -> bool:
    return jt is not None and is_json_type(value, jt)


# ============================================================================ format
def _drop_required(t: Target) -> Perturbed | None:
    cands = [(i, k) for i, (n, a) in enumerate(t.calls) for k in required_keys(t.docs[n])
             if k in a]
    if not cands:
        return None
    i, key = t.rng("drop_required").choice(cands)
    name, args = t.calls[i]
    new = {k: v for k, v in args.items() if k != key}
    return Perturbed(t.with_call(i, name, new), i, {"key": key})


def _rename_key(t: Target) -> Perturbed | None:
    cands = [(i, k) for i, (_, a) in enumerate(t.calls) for k in t.keys(a)]
    if not cands:
        return None
    rng = t.rng("rename_key")
    i, key = rng.choice(cands)
    name, args = t.calls[i]
    taken = set(doc_props(t.docs[name])) | set(args)
    new_key, strategy = rename_key(key, taken, rng)
    new = {(new_key if k == key else k): v for k, v in args.items()}
    return Perturbed(t.with_call(i, name, new), i,
                     {"key": key, "new_key": new_key, "strategy": strategy,
                      "required": key in required_keys(t.docs[name])})


def rename_key(key: str, taken: Iterable[str], rng: Random) -> tuple[str, str]:
    """Make up a plausible key that is not ``key`` and not in ``taken``.

    Strategies, in random order: ``synonym`` (``location`` -> ``place``), ``case``
    (``start_date`` <-> ``startDate``), ``suffix`` (``city`` -> ``city_name``).
    """
    used = set(taken) | {key}
    strategies = ["synonym", "case", "suffix"]
    rng.shuffle(strategies)
    for strategy in strategies:
        if strategy == "synonym":
            tokens = key_tokens(key)
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
                cands = ["_".join(key_tokens(key))]
            else:
                cands = []
        else:
            cands = [key + s for s in KEY_SUFFIXES]
        cands = [c for c in cands if c and c not in used]
        if cands:
            return rng.choice(cands), strategy
    return f"{key}_value_{rng.randrange(100)}", "suffix"  # pragma: no cover



def _wrong_type(t: Target) -> Perturbed | None:
    rng = t.rng("wrong_type")
    cands: list[tuple[int, str]] = []
    for i, (name, args) in enumerate(t.calls):
        props = doc_props(t.docs[name])
        for key in t.keys(args):
            sub = props.get(key)
            if not isinstance(sub, Mapping) or sub.get("type") == "any":
                continue
            jt = schema_type(sub)
            if jt is not None and is_json_type(args[key], jt):
                cands.append((i, key))
    rng.shuffle(cands)
    for i, key in cands:
        name, args = t.calls[i]
        jt = schema_type(doc_props(t.docs[name])[key])
        assert jt is not None
        new_value = wrong_type_value(args[key], jt, rng)
        new = {**args, key: new_value}
        errors = doc_validator(t.docs[name]).iter_errors(new)
        if any(e.validator == "type" for e in errors):
            return Perturbed(t.with_call(i, name, new), i,
                             {"key": key, "expected": jt, "old": args[key], "new": new_value})
    return None


def wrong_type_value(value: Any, json_type: str, rng: Random) -> Any:
    """Return a value of another JSON type standing for ``value``, as models get it wrong.

    ``integer``/``number`` -> words (``25`` -> ``"twenty-five"``); ``string`` -> a number
    (its digits, else a small random integer); ``boolean`` -> ``"true"``/``"false"``;
    ``array`` -> its items joined by ``", "``; ``object`` -> its JSON text.
    """
    if json_type in ("integer", "number"):
        return words_for(value)
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




# ============================================================================ content
def _content_schema_ok(schema: Any) -> bool:
    return isinstance(schema, Mapping) and not any(
        k in schema for k in ("enum", "format", "pattern", "const"))


def invented_value(t: Target, *, avoid_kinds: Iterable[str] = (),
                   only_kinds: Iterable[str] | None = None) -> Perturbed | None:
    """A string the user stated, replaced by one stated nowhere (``invented_value``).

    With declared kinds, rarer kinds are tried first (credentials, URLs, formulas... before
    ids and keywords), ``avoid_kinds`` last and, if given, only ``only_kinds``; the value is
    made by :func:`~toolguard_evals.detector_suite.values.invent_value`.  Without, a string
    of the conversation whose shape is not free text is replaced by
    :func:`~toolguard_evals.detector_suite.values.invent_string`.
    """
    if t.kinds is None:
        return _invented_by_shape(t)
    return _invented_by_kind(t, avoid_kinds, only_kinds)


def _invented_by_shape(t: Target) -> Perturbed | None:
    rng = t.rng("invented_value")
    cands: list[tuple[int, str]] = []
    for i, (name, args) in enumerate(t.calls):
        props = doc_props(t.docs[name])
        for key in t.keys(args):
            value, sub = args[key], props.get(key)
            if (isinstance(value, str) and len(value) >= 3 and schema_type(sub) == "string"
                    and _content_schema_ok(sub) and value.casefold() in t.folded
                    and not set(key_tokens(key)) & SETTING_TOKENS
                    and string_kind(key, value) != "text"):
                cands.append((i, key))
    rng.shuffle(cands)
    for i, key in cands:
        name, args = t.calls[i]
        made = invent_string(key, args[key], t, rng)
        if made is None:
            continue
        new_value, kind = made
        new = {**args, key: new_value}
        if schema_errors(t.docs[name], new):
            continue
        return Perturbed(t.with_call(i, name, new), i,
                         {"key": key, "kind": kind, "old": args[key], "new": new_value})
    return None


def value_slots(t: Target) -> list[tuple[str, int | None, ValueKind]]:
    """``(key, list index or None, kind)`` of the string values ``invented_value`` may change."""
    assert t.kinds is not None, "value slots need declared kinds"
    name, args = t.calls[0]
    props = doc_props(t.docs[name])
    kinds = t.kinds.get(name, {})
    out: list[tuple[str, int | None, ValueKind]] = []
    for key, value in args.items():
        kind = kinds.get(key)
        sub = props.get(key) or {}
        if kind is None or kind in ("number", "amount") or "enum" in sub:
            continue
        if isinstance(value, str) and value.strip():
            out.append((key, None, kind))
        elif isinstance(value, list) and value and isinstance(value[0], str) and not (
                isinstance(sub.get("items"), Mapping) and "enum" in sub["items"]):
            out.append((key, 0, kind))
    return out


COMMON_KINDS: Final = frozenset({"identifier", "keyword", "secret"})
"""Kinds tried last by ``invented_value`` (the suite would otherwise be mostly ids)."""
RARE_KINDS: Final = frozenset({"username", "password", "url", "formula", "email", "address",
                                "phone"})
"""Kinds a dialogue gets an extra ``invented_value`` case for when its two picks missed them."""



def _invented_by_kind(t: Target, avoid_kinds: Iterable[str],
                      only_kinds: Iterable[str] | None) -> Perturbed | None:
    assert t.grounding is not None, "a target with declared kinds has a grounding"
    rng = t.rng("invented_value")
    name, gold_args = t.calls[0]
    slots = value_slots(t)
    if only_kinds is not None:
        wanted = set(only_kinds)
        slots = [s for s in slots if s[2] in wanted]
    skip = set(avoid_kinds)
    by_kind: dict[str, list[tuple[str, int | None, ValueKind]]] = defaultdict(list)
    for s in slots:
        by_kind[s[2]].append(s)
    # rarer kinds first, so the suite covers credentials, URLs, formulas, ... and not
    # mostly ids: ``COMMON_KINDS`` go last
    order = sorted(by_kind, key=lambda k: (k in skip, k in COMMON_KINDS, rng.random()))
    for kind in order:
        for key, idx, vk in by_kind[kind]:
            gold = gold_args[key] if idx is None else gold_args[key][idx]
            made = invent_value(vk, key, str(gold), t.grounding, rng)
            if made is None:
                continue
            value: Any = made.value
            if idx is not None:
                value = [made.value, *gold_args[key][1:]]
            args = {**gold_args, key: value}
            if schema_errors(t.docs[name], args):
                continue
            path = key if idx is None else f"{key}[{idx}]"
            return Perturbed(t.with_call(0, name, args), 0,
                             {"key": path, "kind": vk, "old": gold, "new": made.value,
                              "invented": made.fact, "keep": list(made.keep)})
    return None


def _invented_number(t: Target) -> Perturbed | None:
    rng = t.rng("invented_number")
    if t.kinds is not None:
        return _invented_number_by_kind(t, rng)
    cands: list[tuple[int, str]] = []
    for i, (name, args) in enumerate(t.calls):
        props = doc_props(t.docs[name])
        for key in t.keys(args):
            value, sub = args[key], props.get(key)
            if (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and schema_type(sub) in ("integer", "number") and _content_schema_ok(sub)
                    and float(value) in numbers_of(t.text)):
                cands.append((i, key))
    rng.shuffle(cands)
    for i, key in cands:
        name, args = t.calls[i]
        sub = doc_props(t.docs[name])[key]
        new_value = invent_number(args[key], t, sub, rng)
        if new_value is None:
            continue
        new = {**args, key: new_value}
        if schema_errors(t.docs[name], new):
            continue
        return Perturbed(t.with_call(i, name, new), i,
                         {"key": key, "old": args[key], "new": new_value})
    return None


def _invented_number_by_kind(t: Target, rng: Random) -> Perturbed | None:
    assert t.kinds is not None and t.grounding is not None
    name, gold_args = t.calls[0]
    props = doc_props(t.docs[name])
    kinds = t.kinds.get(name, {})
    keys = [k for k in t.keys(gold_args)
            if isinstance(gold_args[k], int | float) and not isinstance(gold_args[k], bool)
            and kinds.get(k) is not None and "enum" not in (props.get(k) or {})]
    rng.shuffle(keys)
    for key in keys:
        new = invent_kind_number(gold_args[key], props.get(key) or {}, t.grounding, rng)
        if new is None:
            continue
        args = {**gold_args, key: new}
        if schema_errors(t.docs[name], args):
            continue
        return Perturbed(t.with_call(0, name, args), 0,
                         {"key": key, "kind": kinds.get(key), "old": gold_args[key],
                          "new": new})
    return None


# ============================================================================ registry
PERTURBERS: Final[dict[Perturbation, Callable[[Target], Perturbed | None]]] = {
    "fabricated": _fabricated,
    "irrelevant_tool": _irrelevant_tool,
    "drop_required": _drop_required,
    "rename_key": _rename_key,
    "wrong_type": _wrong_type,
    "invented_value": invented_value,
    "invented_number": _invented_number,
}
"""Single-call perturbation name -> function (each gives at most one case per target)."""

__all__ = ["COMMON_KINDS", "PERTURBERS", "RARE_KINDS", "fabricate_name", "invented_value",
           "rename_key", "value_slots", "wrong_type_value"]
