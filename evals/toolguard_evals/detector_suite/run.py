"""Run the suite: one guard per tool list, ``Guard.check`` on every case, through the runner.

:func:`run_suite` runs any ``Guard``-like object on the cases with
:func:`toolguard_evals.runner.map_cases` (in this thread, one case after another: the checks
are CPU-bound and deterministic) and scores the verdicts
(:mod:`toolguard_evals.detector_suite.scoring`).  :func:`main` is ``toolguard eval
detectors``: build, run each guard mode, print, write JSON.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from langchain_core.messages import BaseMessage

from toolguard_evals.detector_suite.build import DEFAULT_LIMIT_PER_CATEGORY, build_suite
from toolguard_evals.detector_suite.records import Case
from toolguard_evals.detector_suite.report import print_report
from toolguard_evals.detector_suite.scoring import VerdictLike, outcome, score
from toolguard_evals.runner import map_cases, write_json

GUARD_MODES: Final[dict[str, dict[str, Any]]] = {
    "deterministic": {},
    "deterministic-norelevance": {"relevance": "off"},
    "embedding": {"relevance": "embedding"},
    "learned": {"relevance": "learned"},
}
"""Mode name -> keyword arguments for ``toolguard.Guard`` (``embedding`` needs the ``embed``
extra; ``learned`` the ``learned`` extra and a trained verifier named by the
``TOOLGUARD_VERIFIER`` environment variable)."""


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


def run_suite(
    cases: Sequence[Case],
    guard_factory: GuardFactory,
    *,
    seed: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Run ``guard_factory(case.tools).check(case.messages)`` on every case and score it.

    One guard is built per distinct tool list (:attr:`Case.tools_key`), before any check.
    For a perturbed case the verdict of the target call is scored; for a clean case every
    call must be allowed (:func:`~toolguard_evals.detector_suite.scoring.outcome`).

    Args:
        cases: The cases (e.g. ``build_suite().cases``); their ids must be unique.
        guard_factory: Builds a guard from BFCL docs (see :func:`guard_factory`).
        seed: Recorded in the output.
        progress: Show the runner's progress bar on stderr.

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
        ``check_ms_per_case`` is the mean time of one case's check (guard built before),
        ``wall_s`` the whole call (building the guards and scoring included).

    Raises:
        ValueError: If a guard returns another number of verdicts than there are calls,
            or for duplicate case ids.

    """
    started = time.perf_counter()
    guards: dict[str, GuardLike] = {}
    for case in cases:
        if case.tools_key not in guards:
            guards[case.tools_key] = guard_factory(list(case.tools))

    def check(case: Case) -> dict[str, Any]:
        verdicts = list(guards[case.tools_key].check(case.messages))
        if len(verdicts) != len(case.calls):
            raise ValueError(f"{case.id}: {len(verdicts)} verdicts for {len(case.calls)} calls")
        return {"verdicts": verdicts}

    run = map_cases(cases, check, case_id=lambda c: c.id, description="Guard.check",
                    progress=progress, raise_errors=True)
    report = score([outcome(c, run.outputs[c.id]["verdicts"]) for c in cases])
    report["seed"] = seed
    report["guards_built"] = len(guards)
    report["check_ms_per_case"] = round(
        1000 * sum(run.case_seconds.values()) / max(len(cases), 1), 4)
    report["wall_s"] = round(time.perf_counter() - started, 3)
    return report


def main(
    json_path: str | None,
    *,
    seed: int = 0,
    limit_per_category: int | None = DEFAULT_LIMIT_PER_CATEGORY,
    modes: Sequence[str] = ("deterministic",),
    progress: bool = True,
    suite_b: bool = True,
) -> dict[str, Any]:
    """Build the suite, run each guard mode, print a table and write JSON.

    With ``suite_b`` the second, independent suite (:mod:`toolguard_evals.suite_b`: the
    dialogue corpus, RelyToolBench's ToolBench APIs, CRITICTOOL's tool docs) runs too, and
    the report gains ``by_suite: {"bfcl": report, "suite_b": report}`` (first mode) so both
    are read side by side (issue 16: never tune on one suite only).

    Args:
        json_path: Where to write the report (``None``: print only).
        seed: Suite seed.
        limit_per_category: Records per single-turn category (``None``: all 2111 records).
        modes: Guard modes (:data:`GUARD_MODES`).  With several, the report has
            ``by_mode: {mode: report}`` plus the first mode's keys at top level.
        progress: Show the runner's progress bar on stderr.
        suite_b: Also build and run suite B (``by_suite`` in the report).

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
        result = run_suite(suite.cases, factory, seed=seed, progress=progress)
        result.update(mode=mode, counts=suite.counts(), skipped_records=suite.skipped,
                      build_s=build_s, limit_per_category=limit_per_category)
        by_mode[mode] = result
        print_report(result)
    report = dict(by_mode[modes[0]])
    if len(modes) > 1:
        report["by_mode"] = by_mode
    if suite_b:
        from toolguard_evals import suite_b as sb

        t1 = time.perf_counter()
        second = sb.build(seed=seed)
        b_report = sb.run(second.cases, mode=modes[0])
        b_report.update(build_s=round(time.perf_counter() - t1, 3), counts=second.counts())
        sb.print_report(b_report)
        report["by_suite"] = {"bfcl": by_mode[modes[0]], "suite_b": b_report}
    write_json(json_path, report)
    return report
