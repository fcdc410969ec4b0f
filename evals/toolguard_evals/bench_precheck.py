"""Latency of the deterministic pre-check per case, over real RelyToolBench and BFCL cases.

For every case of the abstain evaluation (:mod:`toolguard_evals.abstain`) the time of
``Precheck(tools).decide(messages)`` is measured with ``time.perf_counter`` (milliseconds):
``build`` includes constructing the :class:`~toolguard.precheck.Precheck` (what a graph node
built per request pays), ``decide`` reuses one built per case (what
:class:`~toolguard.precheck_node.PrecheckNode` pays).  Each case is run ``repeats`` times
after one untimed warm-up pass over all cases (stem and tool-term caches filled, as in a
long-running process).  Prints p50/p99 per dataset; numbers depend on the machine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolguard.precheck import Precheck
from toolguard_evals.abstain import Case, load_cases
from toolguard_evals.runner import latency_summary


def time_cases(cases: Sequence[Case], *, repeats: int = 3) -> dict[str, Any]:
    """p50/p99/mean in ms of build+decide and decide alone over ``cases``.

    Raises:
        ValueError: ``repeats`` < 1.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    for c in cases:  # warm-up
        Precheck(c.tools).decide(c.messages)
    build: list[float] = []
    decide: list[float] = []
    for c in cases:
        for _ in range(repeats):
            t0 = time.perf_counter()
            pre = Precheck(c.tools)
            t1 = time.perf_counter()
            pre.decide(c.messages)
            t2 = time.perf_counter()
            build.append(1000 * (t2 - t0))
            decide.append(1000 * (t2 - t1))
    return {
        "cases": len(cases),
        "build_and_decide_ms": latency_summary(build),
        "decide_ms": latency_summary(decide),
    }


def main(*, datasets: Sequence[str] = ("relytoolbench", "bfcl"), limit: int | None = None,
         repeats: int = 3, json_path: str | Path | None = None) -> dict[str, Any]:
    """Time the pre-check on each dataset, print a table, write JSON if asked."""
    from rich.console import Console
    from rich.table import Table

    report: dict[str, Any] = {}
    for ds in datasets:
        cases = load_cases(ds, limit=limit)  # type: ignore[arg-type]
        report[ds] = time_cases(cases, repeats=repeats)
    table = Table(title="deterministic pre-check latency per case (ms)")
    for col in ("dataset", "cases", "decide p50", "decide p99", "build+decide p50",
                "build+decide p99"):
        table.add_column(col, justify="left" if col == "dataset" else "right")
    for ds, row in report.items():
        table.add_row(ds, str(row["cases"]), f"{row['decide_ms']['p50']:.3f}",
                      f"{row['decide_ms']['p99']:.3f}",
                      f"{row['build_and_decide_ms']['p50']:.3f}",
                      f"{row['build_and_decide_ms']['p99']:.3f}")
    Console().print(table)
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return report


__all__ = ["main", "time_cases"]
