"""Three-way pre-check scores (proceed / ask_user / no_suitable_tool) by verifier split.

Used by ``toolguard eval abstain`` for every mode, so the learned pre-check and the
deterministic one are read side by side on the same cases:

- :func:`three_way`: per-label precision, recall and F1 (percent), macro-F1 over the labels
  the cases expect, exact accuracy, and false abstains (feasible cases answered with an
  abstain) on first and on later user turns.
- :func:`by_split`: the same per split of the verifier's data (:func:`case_split`):
  ``eval`` (evaluation-only: never in training, thresholds or rules), ``dev`` (training
  sources held out of training, thresholds chosen on them), ``train`` (seen in training)
  and ``none`` (RelyToolBench G3: neither).
- :func:`trained_verifier`: the model folder and dev-calibrated thresholds of a folder
  written by ``toolguard verifier train``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from toolguard_evals.verifier.data import request_id, split_of

if TYPE_CHECKING:
    from toolguard_evals.abstain import Case

LABELS: Final = ("proceed", "ask_user", "no_suitable_tool")


def case_source(case: Case) -> tuple[str, str]:
    """``(source, request id)`` of an abstain case, in the verifier data's naming.

    RelyToolBench ids are ``{file}:{query_id}``; BFCL single-turn subsets are categories and
    multi-turn ids ``{episode}:turn{t}``; dialogue ids ``{domain}-{k}:turn{t}:{kind}``; the
    request id is :func:`~toolguard_evals.verifier.data.request_id`'s.
    """
    if case.subset in ("Original", "Missing Parameter", "Unmatched Tools"):
        source = f"rtb:{case.id.split(':')[0]}"
        return source, request_id(source, case.id)
    if case.subset.startswith("dialogues_"):
        dialogue = case.id.split(":")[0]
        return f"dialogues:{dialogue.rsplit('-', 1)[0]}", dialogue
    if ":turn" in case.id:
        source = f"bfcl:multi_turn_{case.subset.removesuffix('_feasible')}"
        return source, request_id(source, case.id.rsplit(":", 1)[0])
    return f"bfcl:{case.subset}", case.id


def case_split(case: Case) -> str:
    """``eval``, ``dev``, ``train`` or ``none`` (module docstring)."""
    source, request_id = case_source(case)
    try:
        return split_of(source, request_id)
    except ValueError:
        return "none"


def _pct(num: int, den: int) -> float | None:
    return round(100.0 * num / den, 2) if den else None


def three_way(cases: Sequence[Case], predictions: Sequence[str]) -> dict[str, Any]:
    """Per-label precision / recall / F1, macro-F1, accuracy and false abstains (percent).

    Returns:
        ``{"n", "accuracy", "macro_f1", "per_label": {label: {"precision", "recall",
        "f1", "n"}}, "false_abstain": {"first_turns", "later_turns", "n_first",
        "n_later"}}``; a rate is ``None`` without cases; macro-F1 averages the labels
        that some case expects.
    """
    pairs = list(zip((c.expected for c in cases), predictions, strict=True))
    per: dict[str, dict[str, Any]] = {}
    f1s: list[float] = []
    for label in LABELS:
        tp = sum(g == label and p == label for g, p in pairs)
        n_pred = sum(p == label for _, p in pairs)
        n_gold = sum(g == label for g, _ in pairs)
        f1 = 200.0 * tp / (n_pred + n_gold) if n_pred + n_gold else None
        per[label] = {"precision": _pct(tp, n_pred), "recall": _pct(tp, n_gold),
                      "f1": None if f1 is None else round(f1, 2), "n": n_gold}
        if n_gold:
            f1s.append(f1 or 0.0)
    first = [p != "proceed" for c, p in zip(cases, predictions, strict=True)
             if c.expected == "proceed" and c.turn == 0]
    later = [p != "proceed" for c, p in zip(cases, predictions, strict=True)
             if c.expected == "proceed" and c.turn > 0]
    return {"n": len(pairs), "accuracy": _pct(sum(g == p for g, p in pairs), len(pairs)),
            "macro_f1": round(sum(f1s) / len(f1s), 2) if f1s else None, "per_label": per,
            "false_abstain": {"first_turns": _pct(sum(first), len(first)),
                              "later_turns": _pct(sum(later), len(later)),
                              "n_first": len(first), "n_later": len(later)}}


def by_split(cases: Sequence[Case], predictions: Sequence[str]) -> dict[str, Any]:
    """:func:`three_way` per verifier split that has cases (``eval`` first)."""
    groups: dict[str, tuple[list[Case], list[str]]] = {}
    for c, p in zip(cases, predictions, strict=True):
        cs, ps = groups.setdefault(case_split(c), ([], []))
        cs.append(c)
        ps.append(p)
    order = ("eval", "dev", "train", "none")
    return {name: three_way(*groups[name]) for name in order if name in groups}


def trained_verifier(folder: str | Path) -> tuple[str, dict[str, float]]:
    """The folder to load and the dev thresholds of a ``verifier train`` output.

    Returns:
        ``(folder, {"fit_threshold": x, "slot_threshold": y})`` as
        :class:`toolguard.verifier.LearnedVerifier` reads them (thresholds only when the
        folder has its ``calibration.json``).

    Raises:
        toolguard.errors.ConfigurationError: The folder holds no verifier.
    """
    from toolguard.verifier import LearnedVerifier

    found = LearnedVerifier(folder).thresholds
    return str(folder), {k: v for k, v in found.items() if k in ("fit_threshold",
                                                                 "slot_threshold")}


def print_by_split(report: dict[str, Any]) -> None:
    """Print the three-way table per split with rich."""
    from rich.console import Console
    from rich.table import Table

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    table = Table(title=f"three-way pre-check ({report['mode']}) by verifier split "
                        "(eval = evaluation-only)")
    cols = ("split", "n", "acc", "macro-F1", "proceed P/R", "ask_user P/R", "no_tool P/R",
            "false abstain 1st / later %")
    for col in cols:
        table.add_column(col, justify="left" if col == "split" else "right")
    for name, row in {"all": report["three_way"], **report["by_split"]}.items():
        pl = row["per_label"]
        fa = row["false_abstain"]
        table.add_row(name, str(row["n"]), fmt(row["accuracy"]), fmt(row["macro_f1"]),
                      *(f"{fmt(pl[lab]['precision'])}/{fmt(pl[lab]['recall'])}"
                        for lab in LABELS),
                      f"{fmt(fa['first_turns'])} (n={fa['n_first']}) / "
                      f"{fmt(fa['later_turns'])} (n={fa['n_later']})")
    Console().print(table)


__all__ = ["LABELS", "by_split", "case_source", "case_split", "print_by_split", "three_way",
           "trained_verifier"]
