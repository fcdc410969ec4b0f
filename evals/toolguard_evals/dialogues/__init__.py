"""An evaluation corpus of multi-turn tool-use dialogues, written for toolguard.

Ten domains of our own design (:func:`~toolguard_evals.dialogues.corpus.domains`: travel,
banking, calendar, mail, files, shop, helpdesk, home, stocks, sheets), each with 7-10 tools as
OpenAI function schemas, an effect per tool and an executable in-memory backend.  Dialogues
are generated from a seed by scenario templates (several wordings per intent, values drawn
from pools); every tool result in a dialogue is the backend's real result.  Turns carry the
pre-check label (``proceed`` / ``ask_user`` / ``no_suitable_tool``), the gold calls and the
assistant's text.

- :func:`build_corpus` -> :class:`Corpus` (JSON round trip: ``Corpus.to_json`` /
  ``Corpus.from_json``);
- :func:`to_messages`: a dialogue prefix as LangChain messages;
- :func:`load_dialogue_cases`: pre-check cases (``toolguard eval abstain --dataset
  dialogues``);
- ``toolguard_evals.suite_b``: labelled hallucinated calls built on the dialogues.

No text, tool or value comes from API-Bank or FamilyTool (:data:`SOURCES`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolguard_evals.dialogues.corpus import DEFAULT_PER_DOMAIN, build_corpus, domain, domains
from toolguard_evals.dialogues.messages import to_messages
from toolguard_evals.dialogues.records import (
    SOURCES,
    Corpus,
    Dialogue,
    Step,
    Turn,
    TurnKind,
    ValueKind,
)

if TYPE_CHECKING:
    from toolguard_evals.abstain import Case


def load_dialogue_cases(seed: int = 0, limit: int | None = None) -> list[Case]:
    """Pre-check cases, one per user turn.

    See :func:`toolguard_evals.dialogues.cases.load_dialogue_cases`.
    """
    from toolguard_evals.dialogues.cases import load_dialogue_cases as load

    return load(seed=seed, limit=limit)


__all__ = ["DEFAULT_PER_DOMAIN", "SOURCES", "Corpus", "Dialogue", "Step", "Turn", "TurnKind",
           "ValueKind", "build_corpus", "domain", "domains", "load_dialogue_cases",
           "to_messages"]
