"""What the perturbations work on: one gold step (its call(s), its tools, its conversation).

Both detector suites build :class:`Target` s from their sources (BFCL records here, the
dialogues, RelyToolBench and CRITICTOOL in :mod:`toolguard_evals.suite_b`) and hand them to
:data:`toolguard_evals.detector_suite.perturb.PERTURBERS`.  How a suite draws its random
choices is part of its definition (:class:`Sampling`): the same target drawn another way
gives other cases.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, ToolCall

from toolguard_evals.detector_suite.records import (
    PERTURBATION_LABELS,
    Case,
    Perturbation,
    tools_key,
)
from toolguard_evals.detector_suite.values import Grounding, numbers_of
from toolguard_evals.dialogues.records import ValueKind

Call = tuple[str, dict[str, Any]]
"""A tool call as ``(name, arguments)``."""


@dataclass(frozen=True, slots=True)
class Sampling:
    """How a suite draws its choices (changing a field changes the suite's cases).

    Attributes:
        stream: ``"target"``: one ``Random(f"{seed}:{id}")`` per target, consumed by the
            perturbations in order, the call to perturb drawn from it too (BFCL's parallel
            records have several); ``"perturbation"``: one ``Random(f"{seed}:{id}:{name}")``
            per perturbation (targets of one call).
        sorted_keys: Candidate keys are listed sorted before a draw (else in the call's order).
        tools_with_args_first: ``irrelevant_tool`` tries tools with required parameters first.
    """

    stream: Literal["target", "perturbation"] = "target"
    sorted_keys: bool = False
    tools_with_args_first: bool = False


BFCL_SAMPLING = Sampling()
"""The BFCL suite's draws."""
SUITE_B_SAMPLING = Sampling(stream="perturbation", sorted_keys=True, tools_with_args_first=True)
"""Suite B's draws."""


@dataclass(frozen=True, slots=True)
class Perturbed:
    """A perturbed call list: ``calls[target]`` is the wrong call, ``metadata`` says how."""

    calls: list[Call]
    target: int
    metadata: dict[str, Any]


@dataclass(eq=False)
class Target:
    """One gold step to perturb.

    Attributes:
        id: Record id; case ids are ``{id}:{perturbation}``.
        category: The cases' category.
        history: The conversation before the step.
        tools: Function docs ``{name, description, parameters}`` offered at the step.
        calls: The step's gold calls (one, or several parallel ones).
        seed: Suite seed.
        sampling: How choices are drawn.
        call_ids: Ids of the calls (default ``call_0``, ``call_1``, ...).
        kinds: Tool -> parameter -> declared value kind (``None``: a setting, not a user
            fact).  Without it (``None``) values are invented from their shape.
        avoid: Tools never used as ``irrelevant_tool`` (besides the gold ones).
        pool: ``(kind, value)`` pairs stated in the conversation, for the arguments of an
            ``irrelevant_tool`` call when kinds are declared.
        grounding: What a value invented by kind must be absent from.
        meta: Metadata put on every case of the target.
    """

    id: str
    category: str
    history: list[BaseMessage]
    tools: list[dict[str, Any]]
    calls: list[Call]
    seed: int
    sampling: Sampling = BFCL_SAMPLING
    call_ids: list[str] | None = None
    kinds: Mapping[str, Mapping[str, ValueKind | None]] | None = None
    avoid: frozenset[str] = frozenset()
    pool: list[tuple[ValueKind | None, Any]] = field(default_factory=list)
    grounding: Grounding | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ draws
    def rng(self, perturbation: str) -> Random:
        """The random stream of ``perturbation`` (see :class:`Sampling`)."""
        if self.sampling.stream == "perturbation":
            return Random(f"{self.seed}:{self.id}:{perturbation}")
        return self._stream

    @functools.cached_property
    def _stream(self) -> Random:
        return Random(f"{self.seed}:{self.id}")

    def pick_call(self, rng: Random) -> int:
        """The index of the call to perturb (drawn only from a per-target stream)."""
        return rng.randrange(len(self.calls)) if self.sampling.stream == "target" else 0

    def keys(self, args: Mapping[str, Any]) -> list[str]:
        """``args``' keys in the order candidates are listed."""
        return sorted(args) if self.sampling.sorted_keys else list(args)

    # ------------------------------------------------------------------ tools
    @functools.cached_property
    def docs(self) -> dict[str, dict[str, Any]]:
        """Tool name -> its doc."""
        return {d["name"]: d for d in self.tools}

    @functools.cached_property
    def tools_key(self) -> str:
        """:func:`~toolguard_evals.detector_suite.records.tools_key` of the tools."""
        return tools_key(self.tools)

    # ------------------------------------------------------------------ text
    @functools.cached_property
    def text(self) -> str:
        """The conversation's text (every message's content, one per line)."""
        return "\n".join(str(m.content) for m in self.history)

    @functools.cached_property
    def folded(self) -> str:
        """:attr:`text`, casefolded."""
        return self.text.casefold()

    @functools.cached_property
    def doc_text(self) -> str:
        """The tools' JSON, casefolded."""
        return json.dumps(self.tools, ensure_ascii=False).casefold()

    def absent(self, value: str) -> bool:
        """``value`` occurs neither in the conversation nor in the docs (casefolded)."""
        v = value.casefold()
        return v not in self.folded and v not in self.doc_text

    def number_absent(self, value: int | float) -> bool:
        """No number token of the conversation or docs equals ``value``."""
        return float(value) not in numbers_of(self.text) and float(value) not in numbers_of(
            self.doc_text)

    # ------------------------------------------------------------------ cases
    def message(self, calls: Sequence[Call]) -> AIMessage:
        """An ``AIMessage`` making ``calls`` with the target's call ids."""
        ids = self.call_ids or [f"call_{i}" for i in range(len(calls))]
        return AIMessage(content="", tool_calls=[
            ToolCall(name=n, args=dict(a), id=ids[i], type="tool_call")
            for i, (n, a) in enumerate(calls)])

    def case(self, perturbation: Perturbation, calls: Sequence[Call], target: int | None,
             metadata: Mapping[str, Any]) -> Case:
        """The :class:`Case` of ``calls`` after the history (metadata after :attr:`meta`)."""
        return Case(id=f"{self.id}:{perturbation}", category=self.category,
                    perturbation=perturbation, label=PERTURBATION_LABELS[perturbation],
                    messages=[*self.history, self.message(calls)], tools=self.tools,
                    tools_key=self.tools_key, target=target,
                    metadata={**self.meta, **metadata})

    def with_call(self, i: int, name: str, args: dict[str, Any]) -> list[Call]:
        """The gold calls with call ``i`` replaced."""
        out = [(n, dict(a)) for n, a in self.calls]
        out[i] = (name, args)
        return out


__all__ = ["BFCL_SAMPLING", "SUITE_B_SAMPLING", "Call", "Perturbed", "Sampling", "Target"]
