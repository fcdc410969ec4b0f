"""Score the suite: verdicts -> per-case :class:`Outcome` s -> metrics.

Pure functions of the cases and the guard's verdicts (no guard calls, no timing), so the
metrics can be recomputed from saved verdicts.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from toolguard_evals.detector_suite.records import (
    PERTURBATION_LABELS,
    SCORE_CLASSES,
    Case,
)


class VerdictLike(Protocol):
    """What scoring reads from a verdict (``toolguard.Verdict``)."""

    @property
    def action(self) -> str: ...
    @property
    def hallucination(self) -> str | None: ...
    @property
    def reason(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """One case and how its verdicts score (the input of :func:`score`)."""

    case: Case
    predicted: str  # hallucination type, else the action if not allowed, else "none"
    flagged: bool  # the scored verdict was not "allow" or named a hallucination
    blocked_any: bool  # any call of the message was not allowed
    collateral: bool  # a call other than the target was not allowed
    verdict: VerdictLike | None


def outcome(case: Case, verdicts: Sequence[VerdictLike]) -> Outcome:
    """Score one case's verdicts (one per call of :attr:`Case.calls`, in order).

    For a perturbed case the verdict of the target call is scored; for a clean case the
    first verdict that is not ``allow`` (else the first naming a hallucination), and every
    call must be allowed.
    """

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
    return Outcome(case, predicted, flagged, bool(blocked), collateral, scored)

def _share(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def _correct(o: Outcome) -> bool:
    if o.case.label is None:
        return not o.blocked_any
    return o.predicted == o.case.label


def score(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Compute the metrics of :func:`~toolguard_evals.detector_suite.run.run_suite`.

    From per-case outcomes only: every key of its report but the timing ones.
    """
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

    def breakdown(group: Iterable[Outcome], key: Callable[[Outcome], str]) -> dict[str, Any]:
        buckets: dict[str, list[Outcome]] = defaultdict(list)
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


def _example(o: Outcome) -> dict[str, Any]:
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
