"""The detector interface shared by the four tool-hallucination detectors."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from toolguard.context import CheckContext, ProposedCall
from toolguard.types import HallucinationType, Verdict


class Detector(ABC):
    """Checks one proposed tool call; returns a :class:`~toolguard.types.Verdict` or ``None``.

    ``None`` means the detector found nothing.  Detectors are run in order by
    :class:`~toolguard.guard.Guard` and the first verdict wins.  Deterministic
    detectors implement :meth:`check` only; detectors backed by an LLM judge override
    :meth:`acheck` too, sharing prompt building and parsing with :meth:`check`.
    """

    kind: ClassVar[HallucinationType]

    @abstractmethod
    def check(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        """Check ``call`` in ``ctx``; ``None`` if nothing is wrong."""

    async def acheck(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        """Async twin of :meth:`check` (deterministic detectors run inline)."""
        return self.check(call, ctx)
