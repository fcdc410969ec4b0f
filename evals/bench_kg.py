"""Benchmark: deterministic KG resolution time per query on an N-triple KG.

The KG is FamilyTool's ``familykg-b.txt`` (when ``--data-dir`` has it) grown with
synthetic families (a speaker, spouse, children, parents, each with preference triples)
to ``triples`` triples; queries mix one- to three-hop possessive chains, pronouns and
two references per request.  Prints p50 / p99 / mean in milliseconds (target: p50 <= 5 ms
for 500 triples, issue 4).  A benchmark, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from toolguard.kg import DeterministicPathGenerator, KnowledgeGraph
from toolguard_evals.runner import quantile

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


def main(queries: int = 2000, triples: int = 500, data_dir: str | None = None,
         json_path: str | None = None, seed: int = 0) -> dict[str, Any]:
    kg = build_kg(triples, data_dir, seed)
    speakers = [e for e in kg.entities if kg.is_head(e) and kg.tails(e, "mother")]
    gen = DeterministicPathGenerator(kg)
    rng = random.Random(seed)
    texts = [f"<speak>Speaker: {rng.choice(speakers)}</speak> "
             + rng.choice(QUERIES).format(k1=rng.choice(KIN), k2=rng.choice(KIN))
             for _ in range(queries)]
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
    from rich.table import Table

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
    main()
