"""Report the suite: rich tables and summary lines of a ``run_suite`` report.

Per class and per perturbation, then the false-block, timing, content and speed lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolguard_evals.detector_suite.records import PERTURBATION_LABELS


def _fmt(x: Any) -> str:
    return "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def print_report(r: Mapping[str, Any]) -> None:
    """Print the per-class table, the per-perturbation table and the summary lines."""
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
