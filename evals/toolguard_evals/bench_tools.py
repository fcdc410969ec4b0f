"""Benchmark: what a guarded step costs as the tool set grows (5 / 50 / 500 / 2,000 tools).

Per tool count, p50 / p99 in milliseconds: ``construct`` (``Guard(tools)``), ``first_step``
(``Guard.check`` on a conversation's first call), ``first_step_scan`` (a call sharing no
word with the request, so every tool is scored) and ``precheck_decide``.  Tools are BFCL v4
function docs (synthetic ones without ``bfcl-eval``) given as dicts, LangChain tools or
:class:`~toolguard.ToolSpec` s (``form``).  Numbers depend on the machine.

Run: ``python -m toolguard_evals.bench_tools [--json PATH]``.
"""

from __future__ import annotations

import keyword
import random
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import StructuredTool
from pydantic import BaseModel, Field, create_model
from rich.table import Table

from toolguard import Guard, Precheck, ToolSpec
from toolguard_evals.runner import print_table, quantile, write_json

SIZES: Final = (5, 50, 500, 2000)
MEASURES: Final = ("construct", "first_step", "first_step_scan", "precheck_decide")
ToolForm = Literal["dict", "tool", "spec"]
FORMS: Final[tuple[ToolForm, ...]] = ("dict", "tool", "spec")


@dataclass(frozen=True, slots=True)
class _Case:
    """A request, the gold call for it, and the tool docs it needs."""

    question: str
    call: str
    args: dict[str, Any]


def _bfcl_pool() -> tuple[list[dict[str, Any]], list[tuple[int, _Case]]]:
    """BFCL docs in file order and ``(index of the gold doc, case)`` per gold record."""
    from toolguard_evals import bfcl

    docs: dict[str, dict[str, Any]] = {}
    order: dict[str, int] = {}
    cases: list[tuple[int, _Case]] = []
    for cat in ("simple_python", "multiple", "parallel", "live_simple", "live_multiple"):
        for rec in bfcl.load_category(cat):
            for doc in rec["function"]:
                name = str(doc["name"])
                if name not in docs:
                    docs[name], order[name] = doc, len(order)
            calls = bfcl.gold_calls(rec)
            turn = rec["question"][0] if rec["question"] else []
            text = next((m["content"] for m in turn if m.get("role") == "user"), "")
            if calls and text and calls[0][0] in order:
                name, args = calls[0]
                cases.append((order[name], _Case(str(text)[:500], name, args)))
    for irr in ("irrelevance", "live_irrelevance"):
        for rec in bfcl.load_category(irr):
            for doc in rec["function"]:
                docs.setdefault(str(doc["name"]), doc)
    return list(docs.values()), cases


_NOUNS = ("weather", "flight", "hotel", "stock", "invoice", "playlist", "recipe", "ticket",
          "account", "order", "route", "movie", "patient", "contract", "parcel", "meeting")
_VERBS = ("get", "book", "cancel", "search", "update", "create", "list", "delete")


def _synthetic_pool(n: int = 1600, seed: int = 0) -> tuple[list[dict[str, Any]],
                                                               list[tuple[int, _Case]]]:
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = []
    cases: list[tuple[int, _Case]] = []
    for i in range(n):
        verb, noun = rng.choice(_VERBS), rng.choice(_NOUNS)
        name = f"{verb}_{noun}_{i}"
        docs.append({"name": name, "description": f"{verb.title()} a {noun} by its id.",
                     "parameters": {"type": "dict", "required": [f"{noun}_id"], "properties": {
                         f"{noun}_id": {"type": "string", "description": f"The {noun} id."},
                         "limit": {"type": "integer", "description": "At most this many."}}}})
        cases.append((i, _Case(f"Please {verb} the {noun} {1000 + i}.", name,
                               {f"{noun}_id": str(1000 + i)})))
    return docs, cases


def tool_pool() -> tuple[list[dict[str, Any]], list[tuple[int, _Case]], str]:
    """``(docs, cases, source)``: BFCL when installed, else synthetic."""
    try:
        docs, cases = _bfcl_pool()
        return docs, cases, "bfcl"
    except ImportError:
        docs, cases = _synthetic_pool()
        return docs, cases, "synthetic"


def _take(docs: Sequence[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while len(out) < size:
        doc = dict(docs[len(out) % len(docs)])
        if len(out) >= len(docs):
            doc["name"] = f"{doc['name']}_{len(out) // len(docs)}"
        out.append(doc)
    return out


def _as_form(docs: Sequence[dict[str, Any]], form: ToolForm) -> list[Any]:
    if form == "dict":
        return list(docs)
    specs = [ToolSpec.coerce(d) for d in docs]
    if form == "spec":
        return specs
    return [StructuredTool(name=s.name, description=s.description, args_schema=_model(s),
                           func=_noop) for s in specs]


_PY_TYPES: Final[dict[str, Any]] = {"string": str, "integer": int, "number": float,
                                     "boolean": bool, "array": list, "object": dict}


def _model(spec: ToolSpec) -> type[BaseModel]:
    """A pydantic ``args_schema`` for a spec, as ``@tool`` builds one from a signature."""
    fields: dict[str, Any] = {}
    for i, (name, schema) in enumerate(spec.properties.items()):
        kind = _PY_TYPES.get(schema.get("type", ""), Any) if isinstance(schema, dict) else Any
        desc = str(schema.get("description", "")) if isinstance(schema, dict) else ""
        # a name pydantic refuses as a field ("_class", "model_x", "from") gets an alias
        plain = name.isidentifier() and not keyword.iskeyword(name) and not name.startswith(
            ("_", "model_"))
        field_name, alias = (name, None) if plain else (f"field_{i}", name)
        if name in spec.required:
            fields[field_name] = (kind, Field(description=desc, alias=alias))
        else:
            fields[field_name] = (kind | None, Field(default=None, description=desc,
                                                     alias=alias))
    with warnings.catch_warnings():  # BFCL names like "schema" shadow BaseModel attributes
        warnings.filterwarnings("ignore", message="Field name .* shadows an attribute",
                                category=UserWarning)
        return create_model(f"{spec.name}_args", **fields)


def _noop(**_: Any) -> str:
    return "ok"


def _timed(fn: Callable[[], Any], reps: int) -> tuple[float, float]:
    fn()  # untimed: caches that a long-lived agent has warm
    times: list[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return quantile(times, 0.5), quantile(times, 0.99)


def sweep_tools(sizes: Sequence[int] = SIZES, *, reps: int = 30,
                forms: Sequence[ToolForm] = ("dict", "tool"),
                measures: Sequence[str] = MEASURES) -> list[dict[str, Any]]:
    """Time :data:`MEASURES` per tool count and tool form (see the module docstring).

    Returns:
        One row per (form, size, measure): ``{"size", "form", "measure", "p50_ms",
        "p99_ms", "source"}``.

    Raises:
        ValueError: ``reps`` < 1, a size < 1, or an unknown form or measure.
    """
    if reps < 1:
        raise ValueError("reps must be >= 1")
    if any(s < 1 for s in sizes):
        raise ValueError("sizes must be >= 1")
    if bad := [f for f in forms if f not in FORMS] + [m for m in measures if m not in MEASURES]:
        raise ValueError(f"unknown form or measure {bad}; expected {FORMS} / {MEASURES}")
    docs, cases, source = tool_pool()
    rows: list[dict[str, Any]] = []
    for form in forms:
        for size in sizes:
            chosen = _take(docs, size)
            tools = _as_form(chosen, form)
            names = [str(d["name"]) for d in chosen]
            case = next((c for i, c in cases if i < size), None)
            if case is None:  # no gold record among the first docs: call the first tool
                case = _Case(f"Use {names[0]} please.", names[0], {})
            other = _unrelated(chosen, case.question)
            Guard(tools)
            Precheck(tools)  # "after the first": the tools were seen by a guard and a pre-check
            results: dict[str, tuple[float, float]] = {}
            if "construct" in measures:
                results["construct"] = _timed(lambda: Guard(tools), reps)  # noqa: B023
            if "first_step" in measures:
                results["first_step"] = _first_step(tools, case.question, case.call,
                                                    case.args, reps)
            if "first_step_scan" in measures:
                results["first_step_scan"] = _first_step(tools, case.question, other, {}, reps)
            if "precheck_decide" in measures:
                pre = Precheck(tools)
                request: list[BaseMessage] = [HumanMessage(case.question)]
                results["precheck_decide"] = _timed(lambda: pre.decide(request),  # noqa: B023
                                                    reps)
            for measure, (p50, p99) in results.items():
                rows.append({"size": size, "form": form, "measure": measure,
                             "p50_ms": p50, "p99_ms": p99, "source": source})
    return rows


def _unrelated(docs: Sequence[dict[str, Any]], question: str) -> str:
    """A tool whose name and description share no word with the question (else the last)."""
    words = {w.lower().strip(".,?!'\"") for w in question.split()}
    for doc in reversed(docs):
        text = f"{doc['name'].replace('_', ' ')} {doc.get('description', '')}".lower()
        if not words & set(text.split()):
            return str(doc["name"])
    return str(docs[-1]["name"])


def _first_step(tools: Sequence[Any], question: str, call: str, args: dict[str, Any],
                reps: int) -> tuple[float, float]:
    messages: list[BaseMessage] = [
        HumanMessage(question), AIMessage("", tool_calls=[{"name": call, "args": args,
                                                           "id": "call_1"}])]
    times: list[float] = []
    for i in range(reps + 1):
        guard = Guard(tools)  # a guard just built from tools seen before (not timed)
        start = time.perf_counter()
        guard.check(messages)
        if i:  # the first one is untimed
            times.append((time.perf_counter() - start) * 1000)
    return quantile(times, 0.5), quantile(times, 0.99)


def table(rows: Sequence[dict[str, Any]]) -> Table:
    """The rows as a table: one line per (form, size), p50 / p99 per measure."""
    out = Table(title=f"tool-count sweep (ms, p50 / p99; tools from {rows[0]['source']})"
                if rows else "tool-count sweep")
    measures = list(dict.fromkeys(r["measure"] for r in rows))
    out.add_column("form")
    out.add_column("tools", justify="right")
    for m in measures:
        out.add_column(m, justify="right")
    lines: dict[tuple[str, int], dict[str, str]] = {}
    for r in rows:
        lines.setdefault((r["form"], r["size"]), {})[r["measure"]] = (
            f"{r['p50_ms']:.3f} / {r['p99_ms']:.3f}")
    for (form, size), cells in lines.items():
        out.add_row(form, str(size), *(cells.get(m, "-") for m in measures))
    return out


def main(json_path: str | None = None, *, reps: int = 30,
         forms: Sequence[ToolForm] = ("dict", "tool")) -> list[dict[str, Any]]:
    rows = sweep_tools(reps=reps, forms=forms)
    print_table(table(rows))
    write_json(json_path, {"tools": rows})
    return rows


if __name__ == "__main__":  # pragma: no cover
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--forms", default="dict,tool")
    ns = parser.parse_args()
    main(ns.json, reps=ns.reps, forms=[f for f in ns.forms.split(",") if f])
