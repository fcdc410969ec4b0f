"""Typed records of the dialogue corpus; every record round-trips through JSON.

A :class:`Dialogue` is a list of :class:`Turn` s.  A turn is one user message, the label
the Structured Verification pre-check should give at that point (ICT paper: ``proceed``,
``ask_user``, ``no_suitable_tool``), the gold tool calls the assistant makes for it
(:class:`Step`, each with the in-memory backend's real result) and the assistant's text
that ends the turn (its answer, or the question it asks the user).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

Label = Literal["proceed", "ask_user", "no_suitable_tool"]
"""The pre-check's decision for a user turn (``toolguard.precheck.PrecheckLabel``; kept as
its own literal so the corpus loads without the library)."""

Effect = Literal["read", "write"]
"""Whether a tool changes the backend's state (``toolguard.specs.Effects`` without unknown)."""

TurnKind = Literal[
    "request",  # a new request that states what is needed
    "vague_request",  # a new request missing a value the user must give (ask_user)
    "answer",  # the user answers the assistant's question with the missing value(s)
    "credentials",  # the user gives username/password/PIN after being asked
    "confirm",  # "Yes, that's correct." after the assistant proposed an action
    "select",  # "the second one" after a list of options
    "correction",  # "no, make it Friday": a value of the previous request changes
    "anaphora",  # "do the same for Berlin", "send it to her"
    "infeasible",  # no tool of the domain can do it (no_suitable_tool)
]
"""What the user does in a turn (the decision points are split by it in reports)."""

TURN_KINDS: Final[tuple[TurnKind, ...]] = get_args(TurnKind)

ValueKind = Literal[
    "username", "password", "secret", "identifier", "code", "email", "url", "address",
    "formula", "keyword", "person", "location", "date", "time", "title", "free_text",
    "phone", "number", "amount",
]
"""What an argument value is, for inventing a wrong one of the same kind (suite B)."""

VALUE_KINDS: Final[tuple[ValueKind, ...]] = get_args(ValueKind)

SOURCES: Final[tuple[str, ...]] = ("toolguard_evals.dialogues (templates written for toolguard)",)
"""Where the corpus comes from: templates and value pools of this package only.  No text,
tool, domain or value is taken from API-Bank or FamilyTool (kept aside as external tests)."""


class Step(BaseModel):
    """One gold tool call and what the backend returned.

    Attributes:
        call_id: ``call_{n}``, numbered over the dialogue.
        name: Tool name.
        args: Arguments (valid against the tool's JSON Schema).
        result: The backend's result as JSON text.
        derived: Argument name -> how its value follows from the conversation when it is
            not quoted verbatim (``"date: this Friday"``, ``"composed from the request"``).
    """

    model_config = ConfigDict(frozen=True)

    call_id: str
    name: str
    args: dict[str, Any]
    result: str
    derived: dict[str, str] = Field(default_factory=dict)


class Turn(BaseModel):
    """One user message and what should follow it.

    Attributes:
        user: The user's message.
        label: What the pre-check should decide for it (given the conversation so far).
        kind: See :data:`TurnKind`.
        steps: Gold calls of the turn, in order (empty unless ``label == "proceed"``).
        assistant: The assistant's text that ends the turn (answer or question).
        missing: ``ask_user`` turns: the parameters whose values the user has not given.
    """

    model_config = ConfigDict(frozen=True)

    user: str
    label: Label
    kind: TurnKind
    steps: list[Step] = Field(default_factory=list)
    assistant: str = ""
    missing: list[str] = Field(default_factory=list)


class Dialogue(BaseModel):
    """A multi-turn conversation in one domain.

    Attributes:
        id: ``{domain}-{index:03d}``.
        domain: Domain name (:data:`toolguard_evals.dialogues.domains.DOMAINS`).
        scenarios: Names of the scenario templates it was built from, in order.
        seed: Corpus seed.
        backend_seed: Seed of the backend state (replaying the steps on
            ``domain.backend(backend_seed)`` gives the same results).
        system: The system message (assistant role, today's date).
        turns: The turns.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    domain: str
    scenarios: list[str]
    seed: int
    backend_seed: str
    system: str
    turns: list[Turn]

    def steps(self) -> list[tuple[int, int, Step]]:
        """``(turn index, step index within the turn, step)`` for every gold call, in order."""
        return [(t, s, step) for t, turn in enumerate(self.turns)
                for s, step in enumerate(turn.steps)]


class Corpus(BaseModel):
    """The dialogues plus the tools of their domains.

    Attributes:
        seed: Seed of every random choice.
        sources: Where the texts and tools come from (:data:`SOURCES`).
        tools: Domain -> function docs ``{name, description, parameters}`` (OpenAI form).
        effects: Domain -> tool -> :data:`Effect`.
        dialogues: The dialogues, grouped by domain.
    """

    model_config = ConfigDict(frozen=True)

    seed: int
    sources: list[str] = Field(default_factory=lambda: list(SOURCES))
    tools: dict[str, list[dict[str, Any]]]
    effects: dict[str, dict[str, Effect]]
    dialogues: list[Dialogue]

    def to_json(self, path: str | Path | None = None) -> str:
        """The corpus as JSON text (written to ``path`` if given)."""
        text = self.model_dump_json(indent=1)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> Corpus:
        """Read a corpus written by :meth:`to_json` (JSON text or a file path)."""
        if isinstance(text_or_path, Path) or not str(text_or_path).lstrip().startswith("{"):
            text = Path(text_or_path).read_text(encoding="utf-8")
        else:
            text = str(text_or_path)
        return cls.model_validate(json.loads(text))


__all__ = ["SOURCES", "TURN_KINDS", "VALUE_KINDS", "Corpus", "Dialogue", "Effect", "Label",
           "Step", "Turn", "TurnKind", "ValueKind"]
