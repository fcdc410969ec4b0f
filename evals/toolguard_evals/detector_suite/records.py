"""The suite's records: labels, perturbations, :class:`Case` and :class:`Suite`.

Everything the other modules of :mod:`toolguard_evals.detector_suite` (and other suites
built on the same cases, e.g. :mod:`toolguard_evals.suite_b`) share.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, get_args

from langchain_core.messages import AIMessage, AnyMessage, ToolCall
from pydantic import BaseModel, ConfigDict, Field

from toolguard_evals import bfcl

Label = Literal["type", "timing", "format", "content"]
"""RelyToolBench's hallucination types (``toolguard.types.HallucinationType``)."""

Perturbation = Literal[
    "gold",
    "fabricated",
    "irrelevant_tool",
    "drop_required",
    "rename_key",
    "wrong_type",
    "invented_value",
    "invented_number",
    "repeat",
    "next_call",
]
"""How a case was made from its gold call(s); see :mod:`toolguard_evals.detector_suite`."""

PERTURBATION_LABELS: Final[dict[Perturbation, Label | None]] = {
    "gold": None,
    "fabricated": "type",
    "irrelevant_tool": "type",
    "drop_required": "format",
    "rename_key": "format",
    "wrong_type": "format",
    "invented_value": "content",
    "invented_number": "content",
    "repeat": "timing",
    "next_call": None,
}

SINGLE_TURN_PERTURBATIONS: Final[tuple[Perturbation, ...]] = (
    "fabricated",
    "irrelevant_tool",
    "drop_required",
    "rename_key",
    "wrong_type",
    "invented_value",
    "invented_number",
)

ScoreClass = Literal["type", "type_irrelevant", "timing", "format", "content"]
"""Classes scored in ``per_type``: ``type`` is the fabricated (unknown-tool) class,
``type_irrelevant`` the wrong-tool-of-the-list class; both are predicted as ``type``."""

SCORE_CLASSES: Final[tuple[ScoreClass, ...]] = get_args(ScoreClass)

SUITE_CATEGORIES: Final[tuple[bfcl.SingleTurnCategory, ...]] = (
    "simple_python",
    "multiple",
    "parallel",
    "live_simple",
    "live_multiple",
)
"""BFCL v4 single-turn categories the suite draws records from."""


class Case(BaseModel):
    """One labelled check: the conversation, the tool list and what is wrong with the last call.

    Attributes:
        id: ``"{record_id}:{perturbation}"``.
        category: BFCL category of the source record (``"multi_turn_base"`` for multi-turn).
        perturbation: See :data:`Perturbation`.
        label: The hallucination type of the target call, ``None`` for clean cases.
        messages: LangChain messages; the last is an ``AIMessage`` whose ``tool_calls`` have
            ids ``call_0``, ``call_1``, ... (multi-turn: numbered across the episode).
        tools: BFCL function docs available to the model.
        tools_key: SHA-1 of ``tools`` (guards are cached per key).
        target: Index of the perturbed call in the last message's ``tool_calls``; ``None``
            for clean cases, where every call must be allowed.
        metadata: JSON-able details of the perturbation (key, old/new value, strategy, ...).

    """

    model_config = ConfigDict(frozen=True)

    id: str
    category: str
    perturbation: Perturbation
    label: Label | None
    messages: list[AnyMessage]
    tools: list[dict[str, Any]]
    tools_key: str
    target: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def calls(self) -> list[ToolCall]:
        """The tool calls under check (those of the last message)."""
        last = self.messages[-1]
        return list(last.tool_calls) if isinstance(last, AIMessage) else []

    @property
    def score_class(self) -> ScoreClass | None:
        """The ``per_type`` class of the case (``None`` for clean cases)."""
        if self.perturbation == "irrelevant_tool":
            return "type_irrelevant"
        return self.label


class Suite(BaseModel):
    """The cases plus how they were drawn.

    Attributes:
        seed: Seed of every random choice.
        limit_per_category: Records per single-turn category (``None``: all).
        timing_episodes: ``multi_turn_base`` episodes used.
        cases: The cases, grouped by record, in category order.
        skipped: Record id -> why it was left out (gold calls that break their own docs).

    """

    seed: int
    limit_per_category: int | None
    timing_episodes: int
    cases: list[Case]
    skipped: dict[str, str] = Field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Count the cases per perturbation, in :data:`PERTURBATION_LABELS` order."""
        c = Counter(case.perturbation for case in self.cases)
        return {p: c[p] for p in PERTURBATION_LABELS if c[p]}


def tools_key(tools: Sequence[Mapping[str, Any]]) -> str:
    """Stable key of a tool list (SHA-1 of its canonical JSON)."""
    blob = json.dumps(list(tools), sort_keys=True, default=str)
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()
