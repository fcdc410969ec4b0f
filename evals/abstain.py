"""Abstain evaluation (ICT paper): does the pre-check abstain exactly when it should?

Binary task with *abstain* as the positive class (``ask_user`` or ``no_suitable_tool``);
accuracy and F1 in percent, as the ICT paper reports them.

- ``relytoolbench`` (``../shared/data/relytoolbench``, DATA.md §4): ``Original`` (feasible,
  163/124/61 records), ``Missing Parameter`` (``*_missing_all_arguments``, should ask),
  ``Unmatched Tools`` (``*_with_unmatched_tools``, no suitable tool); plus ``3-way``, the
  accuracy of the exact decision over all three subsets.
- ``bfcl`` (BFCL v4, DATA.md §2a): ``irrelevance`` and ``live_irrelevance`` (abstain) vs
  ``simple_python``, ``multiple``, ``live_simple``, ``live_multiple`` (feasible).

Per subset: an abstain subset is scored together with its feasible counterpart(s) (Missing
Parameter and Unmatched Tools with Original; irrelevance with simple_python + multiple;
live_irrelevance with live_simple + live_multiple), so F1 counts false abstains; ``n`` is the
subset's own size.  A feasible subset has no positives: its accuracy is 100 minus the false
abstain rate and its ``f1`` is ``None``.  ``overall`` pools every case of the dataset.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from toolguard.precheck import Precheck, PrecheckLabel, PrecheckMode
from toolguard.specs import ToolSpec

Dataset = Literal["relytoolbench", "bfcl"]
DEFAULT_RTB_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "relytoolbench"
_RTB_GROUPS = ("G1_instruction", "G2_category", "G3_instruction")
_RTB_SUBSETS: dict[str, tuple[str, PrecheckLabel]] = {
    "Original": ("", "proceed"),
    "Missing Parameter": ("_missing_all_arguments", "ask_user"),
    "Unmatched Tools": ("_with_unmatched_tools", "no_suitable_tool"),
}
_BFCL_SUBSETS: dict[str, PrecheckLabel] = {
    "irrelevance": "no_suitable_tool",
    "live_irrelevance": "no_suitable_tool",
    "simple_python": "proceed",
    "multiple": "proceed",
    "live_simple": "proceed",
    "live_multiple": "proceed",
}
_PAIRS: dict[str, tuple[str, ...]] = {
    "Missing Parameter": ("Original",),
    "Unmatched Tools": ("Original",),
    "irrelevance": ("simple_python", "multiple"),
    "live_irrelevance": ("live_simple", "live_multiple"),
}


@dataclass(frozen=True, slots=True)
class Case:
    """One labelled request: its subset, the tools, the messages and the expected label."""

    id: str
    subset: str
    tools: list[ToolSpec]
    messages: list[dict[str, Any]]
    expected: PrecheckLabel


def load_relytoolbench(data_dir: str | Path | None = None, *,
                       limit: int | None = None) -> list[Case]:
    """RelyToolBench cases (``limit``: first records per file).

    Raises:
        FileNotFoundError: If a subset file is missing.
    """
    root = Path(data_dir) if data_dir else DEFAULT_RTB_DIR
    cases: list[Case] = []
    for subset, (suffix, label) in _RTB_SUBSETS.items():
        for group in _RTB_GROUPS:
            path = root / f"{group}{suffix}.json"
            records = json.loads(path.read_text(encoding="utf-8"))
            for r in records[:limit]:
                tools = [ToolSpec.from_toolbench(a) for a in r["api_list"]]
                uniq = list({t.name: t for t in tools}.values())
                cases.append(Case(id=f"{group}{suffix}:{r['query_id']}", subset=subset,
                                  tools=uniq, expected=label,
                                  messages=[{"role": "user", "content": r["query"]}]))
    return cases


def load_bfcl(*, limit: int | None = None) -> list[Case]:
    """BFCL v4 single-turn cases (needs ``bfcl-eval``; ``limit``: records per category)."""
    from evals.bfcl import load_category

    cases: list[Case] = []
    for cat, label in _BFCL_SUBSETS.items():
        for r in load_category(cat, limit=limit):  # type: ignore[arg-type]
            tools = list({d["name"]: ToolSpec.from_bfcl(d) for d in r["function"]}.values())
            msgs = [m for turn in r["question"] for m in turn]
            cases.append(Case(id=r["id"], subset=cat, tools=tools, messages=msgs,
                              expected=label))
    return cases


def _binary(pairs: Sequence[tuple[bool, bool]]) -> tuple[float, float | None]:
    """(accuracy %, F1 % of the positive class or None without positives) of (gold, pred)."""
    if not pairs:
        return 0.0, None
    tp = sum(g and p for g, p in pairs)
    fp = sum(p and not g for g, p in pairs)
    fn = sum(g and not p for g, p in pairs)
    acc = 100.0 * sum(g == p for g, p in pairs) / len(pairs)
    if tp + fn == 0:
        return round(acc, 2), None
    f1 = 200.0 * tp / (2 * tp + fp + fn) if tp else 0.0
    return round(acc, 2), round(f1, 2)


def score(cases: Sequence[Case], predictions: Sequence[PrecheckLabel],
          *, mode: str = "deterministic") -> dict[str, Any]:
    """Score predictions (see module docstring for the pairing of subsets)."""
    by_subset: dict[str, list[tuple[bool, bool]]] = {}
    exact: list[bool] = []
    for c, p in zip(cases, predictions, strict=True):
        by_subset.setdefault(c.subset, []).append((c.expected != "proceed", p != "proceed"))
        exact.append(c.expected == p)
    per: dict[str, dict[str, Any]] = {}
    for name, pairs in by_subset.items():
        pool = list(pairs)
        for other in _PAIRS.get(name, ()):
            pool += by_subset.get(other, [])
        acc, f1 = _binary(pool if name in _PAIRS else pairs)
        per[name] = {"accuracy": acc, "f1": f1, "n": len(pairs)}
    acc, f1 = _binary([x for pairs in by_subset.values() for x in pairs])
    report: dict[str, Any] = {"mode": mode, "overall": {"accuracy": acc, "f1": f1},
                              "per_subset": per}
    if any(c.expected == "ask_user" for c in cases):
        per["3-way"] = {"accuracy": round(100.0 * sum(exact) / len(exact), 2), "f1": None,
                        "n": len(exact)}
    return report


def run(cases: Sequence[Case], *, mode: PrecheckMode = "deterministic") -> dict[str, Any]:
    """Run the pre-check on every case and score it (adds ``latency_ms_p50``)."""
    preds: list[PrecheckLabel] = []
    times: list[float] = []
    for c in cases:
        t0 = time.perf_counter()
        preds.append(Precheck(c.tools, mode=mode).decide(c.messages).decision)
        times.append(1000 * (time.perf_counter() - t0))
    report = score(cases, preds, mode=mode)
    times.sort()
    report["latency_ms_p50"] = round(times[len(times) // 2], 3) if times else None
    return report


def print_table(report: dict[str, Any]) -> None:
    """Print the per-subset table with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"abstain pre-check ({report['mode']})")
    for col in ("subset", "n", "accuracy %", "F1 %"):
        table.add_column(col, justify="left" if col == "subset" else "right")
    for name, row in report["per_subset"].items():
        f1 = "-" if row["f1"] is None else f"{row['f1']:.1f}"
        table.add_row(name, str(row["n"]), f"{row['accuracy']:.1f}", f1)
    ov = report["overall"]
    table.add_row("overall", "", f"{ov['accuracy']:.1f}",
                  "-" if ov["f1"] is None else f"{ov['f1']:.1f}")
    Console().print(table)


def main(dataset: Dataset, *, mode: PrecheckMode = "deterministic",
         data_dir: str | Path | None = None, json_path: str | Path | None = None,
         limit: int | None = None) -> dict[str, Any]:
    """Evaluate the pre-check on ``dataset``; print the table, write JSON if asked.

    Raises:
        ValueError: For an unknown dataset.
    """
    if dataset == "relytoolbench":
        cases = load_relytoolbench(data_dir, limit=limit)
    elif dataset == "bfcl":
        cases = load_bfcl(limit=limit)
    else:
        raise ValueError(f"unknown dataset {dataset!r}; expected 'relytoolbench' or 'bfcl'")
    report = run(cases, mode=mode)
    report["dataset"] = dataset
    print_table(report)
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return report
