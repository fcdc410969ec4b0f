"""Benchmark: deterministic KG resolution time per query on an N-triple KG.

The KG is FamilyTool's ``familykg-b.txt`` (when ``--data-dir`` has it) grown with synthetic
families to ``triples`` triples; queries mix one- to three-hop possessive chains, pronouns
and two references per request.  :func:`main` times the resolver alone on an in-memory
graph; :func:`sweep_store` the middleware's per-turn path
(``KGResolveMiddleware.before_agent`` over a LangGraph ``InMemoryStore``) at 500 / 5,000 /
50,000 triples, cold, warm and after a write.  Numbers depend on the machine.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.runtime import Runtime
from langgraph.store.memory import InMemoryStore
from rich.table import Table

from toolguard.kg import DeterministicPathGenerator, KGStore, KnowledgeGraph
from toolguard.middleware.kg import KGResolveMiddleware
from toolguard_evals.runner import print_table, quantile, write_json

ATTRS = ("prefer_city", "prefer_dining_location", "prefer_hotel_location", "prefer_song",
         "prefer_travel_city", "prefer_dinnertime", "prefer_airline", "favourite_restaurant",
         "prefer_doctor", "prefer_coffee", "home", "birthday", "prefer_book", "phone_number")
QUERIES = (
    "Book a table at my {k1}'s favourite restaurant.",
    "Find flights from my {k1}'s preferred city to her favourite travel city.",
    "Play my {k1}'s {k2}'s favourite song, please.",
    "Call the doctor my {k1} prefers.",
    "Get me a coffee like my {k1} usually drinks near my home.",
    "Remind me of my {k1}'s {k2}'s birthday.",
    "Book a hotel in the place my {k1} likes to travel to.",
    "Set an alarm at the dinner time my {k1} prefers.",
)
KIN = ("mother", "father", "wife", "son", "mom", "dad")


def build_kg(triples: int, data_dir: str | None = None, seed: int = 0) -> KnowledgeGraph:
    """FamilyTool's base KG (if found) plus synthetic families up to ``triples`` triples."""
    kg = KnowledgeGraph()
    if data_dir:
        for cand in (Path(data_dir) / "familykg-b.txt", Path(data_dir) / "KG" / "familykg-b.txt"):
            if cand.is_file():
                kg = KnowledgeGraph.from_file(cand)
                break
    rng = random.Random(seed)
    fam = 0
    while len(kg) < triples:
        fam += 1
        me, wife, son, mom, dad = (f"{n}{fam}" for n in ("Sam", "Ann", "Tim", "Meg", "Ron"))
        for h, r, t in ((me, "wife", wife), (me, "son", son), (me, "mother", mom),
                        (me, "father", dad), (wife, "husband", me), (son, "father", me),
                        (son, "mother", wife), (mom, "son", me), (dad, "son", me),
                        (dad, "wife", mom), (mom, "husband", dad)):
            kg.add(h, r, t)
        for person in (me, wife, son, mom, dad):
            for attr in rng.sample(ATTRS, 6):
                kg.add(person, attr, f"{attr.split('_', 1)[-1]}_{person.lower()}")
    while len(kg) > triples:  # trim the last synthetic preference triples
        kg.remove(*kg.triples()[-1])
    return kg


def _texts(kg: KnowledgeGraph, n: int, seed: int) -> list[str]:
    """``n`` requests by speakers of ``kg`` (people with a mother)."""
    speakers = [e for e in kg.entities if kg.is_head(e) and kg.tails(e, "mother")]
    rng = random.Random(seed)
    return [f"<speak>Speaker: {rng.choice(speakers)}</speak> "
            + rng.choice(QUERIES).format(k1=rng.choice(KIN), k2=rng.choice(KIN))
            for _ in range(n)]


STORE_SIZES = (500, 5000, 50000)


def sweep_store(sizes: Sequence[int] = STORE_SIZES, *, turns: int = 200,
                budget_s: float = 30.0, data_dir: str | None = None,
                seed: int = 0) -> list[dict[str, Any]]:
    """Time the middleware's per-turn KG path through an ``InMemoryStore`` per KG size.

    Each size gets a fresh store holding the user's KG (``add_many`` through
    :class:`~toolguard.kg.KGStore`) and a small KG of a second user, and a fresh
    :class:`~toolguard.KGResolveMiddleware` reading the agent's store
    (``runtime.store``).  A turn is one ``before_agent`` call on a new request.  The first
    turn is timed apart (``cold_ms``: the graph is read for the first time); then up to
    ``turns`` turns are timed, stopping early (after at least 3) once ``budget_s`` seconds
    are spent; then one triple is added through ``KGStore`` and the next turn is timed
    (``after_write_ms``).

    Returns:
        One row per size: ``{"size", "p50_ms", "p99_ms", "turns", "cold_ms",
        "after_write_ms"}``.

    Raises:
        ValueError: ``turns`` < 1 or a size < 1.
    """
    if turns < 1 or any(s < 1 for s in sizes):
        raise ValueError("turns and sizes must be >= 1")
    rows: list[dict[str, Any]] = []
    for size in sizes:
        kg = build_kg(size, data_dir, seed)
        base = InMemoryStore()
        kgs = KGStore(base)
        kgs.add_many("u1", kg.triples())
        kgs.add_many("u2", [("Zoe", "mother", "Ada"), ("Ada", "prefer_city", "city_1")])
        middleware = KGResolveMiddleware(ask_user="end")
        runtime: Runtime[Any] = Runtime(context={"user_id": "u1"}, store=base)
        texts = _texts(kg, turns + 2, seed)

        cold = _turn(middleware, runtime, texts[0])
        times: list[float] = []
        spent = time.perf_counter()
        for text in texts[1:turns + 1]:
            times.append(_turn(middleware, runtime, text))
            if len(times) >= 3 and time.perf_counter() - spent > budget_s:
                break
        kgs.add("u1", "Sam1", "prefer_tea", "tea_sam1")
        after_write = _turn(middleware, runtime, texts[-1])
        rows.append({"size": len(kg), "p50_ms": quantile(times, 0.5),
                     "p99_ms": quantile(times, 0.99), "turns": len(times), "cold_ms": cold,
                     "after_write_ms": after_write})
    return rows


def _turn(middleware: KGResolveMiddleware, runtime: Runtime[Any], text: str) -> float:
    """One ``before_agent`` on a new request, in milliseconds."""
    state: Any = {"messages": [HumanMessage(text)]}
    start = time.perf_counter()
    middleware.before_agent(state, runtime)
    return (time.perf_counter() - start) * 1000


def store_table(rows: Sequence[dict[str, Any]]) -> Table:
    """:func:`sweep_store` rows as a table (milliseconds)."""
    table = Table(title="KG per turn through a LangGraph store (KGResolveMiddleware, ms)")
    for col in ("triples", "p50", "p99", "turns", "cold", "after write"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["size"]), f"{r['p50_ms']:.3f}", f"{r['p99_ms']:.3f}",
                      str(r["turns"]), f"{r['cold_ms']:.1f}", f"{r['after_write_ms']:.1f}")
    return table


def main_store(json_path: str | None = None, *, turns: int = 200, budget_s: float = 30.0,
               data_dir: str | None = None) -> list[dict[str, Any]]:
    """Run :func:`sweep_store`, print its table, write ``{"kg_store": rows}`` if asked."""
    rows = sweep_store(turns=turns, budget_s=budget_s, data_dir=data_dir)
    print_table(store_table(rows))
    write_json(json_path, {"kg_store": rows})
    return rows


def main(queries: int = 2000, triples: int = 500, data_dir: str | None = None,
         json_path: str | None = None, seed: int = 0) -> dict[str, Any]:
    kg = build_kg(triples, data_dir, seed)
    gen = DeterministicPathGenerator(kg)
    texts = _texts(kg, queries, seed)
    for t in texts[:50]:  # warm caches
        gen.resolve(t)
    times = []
    resolved = 0
    for t in texts:
        start = time.perf_counter()
        res = gen.resolve(t)
        times.append((time.perf_counter() - start) * 1000)
        resolved += bool(res.triples)
    times.sort()
    report = {
        "kg_triples": len(kg), "queries": queries, "resolved_share": resolved / queries,
        "p50_ms": quantile(times, 0.5), "p99_ms": quantile(times, 0.99),
        "mean_ms": statistics.fmean(times),
    }
    from rich.console import Console

    table = Table(title=f"KG resolution, {len(kg)}-triple KG, {queries} queries")
    for col in ("p50 ms", "p99 ms", "mean ms", "resolved"):
        table.add_column(col, justify="right")
    table.add_row(f"{report['p50_ms']:.2f}", f"{report['p99_ms']:.2f}",
                  f"{report['mean_ms']:.2f}", f"{100 * report['resolved_share']:.0f}%")
    Console().print(table)
    if json_path:
        out = Path(json_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return report


if __name__ == "__main__":  # pragma: no cover
    import sys

    if sys.argv[1:2] == ["store"]:
        main_store(sys.argv[2] if len(sys.argv) > 2 else None)
    else:
        main()
