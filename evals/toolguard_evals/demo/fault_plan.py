"""Which call of a demo episode fails, how and how often (docs/DATA.md §2c).

The faults themselves (exception types, :func:`~toolguard_evals.faults.make_fault`) are
:mod:`toolguard_evals.faults`'; a :class:`FaultPlan` is drawn per episode and applied the
same way in every mode by :class:`~toolguard_evals.demo.tools.EpisodeTools`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from toolguard_evals.faults import (
    FAULT_KINDS,
    FaultKind,
    InjectedFault,
    make_fault,
)

DEMO_FAULT_KINDS: Final[tuple[FaultKind, ...]] = (
    "transient_timeout", "transient_429", "permanent_403")
"""Faults :func:`plan_fault` draws from by default (any of
:data:`toolguard_evals.faults.FAULT_KINDS` may be asked for)."""


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Which call of an episode fails, how and how often (DATA.md §2c).

    The first state-changing (``write``) tool the agent executes in the episode is the
    target; its first ``failures`` executions fail (every one when ``failures`` is ``None``:
    ``permanent_403``).  The exceptions are :mod:`toolguard_evals.faults`' (``InjectedTimeout``, a
    ``TimeoutError``; ``InjectedHTTPError`` with ``status_code`` and ``headers``, e.g.
    ``Retry-After``), built by :func:`toolguard_evals.faults.make_fault`.  Faults leave the
    environment untouched, except ``ambiguous_timeout``, which executes the call and then
    raises the timeout.

    Attributes:
        kind: One of :data:`toolguard_evals.faults.FAULT_KINDS`.
        failures: Failing executions of the target tool (1-2), or ``None`` for permanent.
    """

    kind: FaultKind
    failures: int | None

    def error(self) -> InjectedFault:
        """The exception one failing execution raises."""
        return make_fault(self.kind)


def plan_fault(
    episode_id: str, seed: int = 0, *, kinds: Sequence[FaultKind] = DEMO_FAULT_KINDS
) -> FaultPlan:
    """The fault of one episode, drawn with ``random.Random(f"{seed}:{episode_id}:fault")``.

    Transient kinds fail 1 or 2 times (a retry policy reaches the gold state, DATA.md
    §2c); ``permanent_403`` fails every time (the right action is skip or finish).

    Raises:
        ValueError: For an empty or unknown ``kinds``.
    """
    if not kinds or any(k not in FAULT_KINDS for k in kinds):
        raise ValueError(f"kinds must name fault kinds among {list(FAULT_KINDS)}")
    rng = random.Random(f"{seed}:{episode_id}:fault")
    kind = rng.choice(list(kinds))
    failures = rng.choice((1, 2))
    return FaultPlan(kind=kind, failures=None if kind == "permanent_403" else failures)
