"""Pre-check cases from the dialogue corpus: one case per user turn (a decision point).

The case's messages are the conversation up to and including the user message
(:func:`toolguard_evals.dialogues.messages.to_messages`), its tools the domain's tools and its
expected label the turn's :attr:`~toolguard_evals.dialogues.records.Turn.label`.  Subsets:

==================================  ==========================================================
subset                              turns
==================================  ==========================================================
``dialogues_feasible_first_turn``   the first turn of a dialogue, feasible (``proceed``)
``dialogues_feasible_followup``     every later feasible turn: new requests, answers to the
                                    assistant's question, credentials, confirmations,
                                    selections, corrections, anaphora
``dialogues_ask_user``              a value the user must give is missing (``ask_user``)
``dialogues_no_suitable_tool``      no tool of the domain can do it
==================================  ==========================================================

The case id is ``{dialogue id}:turn{t}:{turn kind}`` (kinds: :data:`TurnKind`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from toolguard.specs import ToolSpec
from toolguard_evals.abstain import Case
from toolguard_evals.dialogues.corpus import DEFAULT_PER_DOMAIN, build_corpus
from toolguard_evals.dialogues.messages import to_messages
from toolguard_evals.dialogues.records import Corpus, Dialogue, Turn

SUBSETS: Final = ("dialogues_feasible_first_turn", "dialogues_feasible_followup",
                  "dialogues_ask_user", "dialogues_no_suitable_tool")


def subset_of(turn: Turn, index: int) -> str:
    """The subset of turn ``index`` (see module docstring)."""
    if turn.label == "proceed":
        return SUBSETS[0] if index == 0 else SUBSETS[1]
    return SUBSETS[2] if turn.label == "ask_user" else SUBSETS[3]


def dialogue_cases(dialogue: Dialogue, tools: Sequence[ToolSpec], *,
                   mark_abstains: bool = False) -> list[Case]:
    """One case per turn of ``dialogue``."""
    return [Case(id=f"{dialogue.id}:turn{t}:{turn.kind}", subset=subset_of(turn, t),
                 tools=list(tools),
                 messages=to_messages(dialogue, turn=t, mark_abstains=mark_abstains),
                 expected=turn.label, turn=t)
            for t, turn in enumerate(dialogue.turns)]


def corpus_specs(corpus: Corpus) -> dict[str, list[ToolSpec]]:
    """Domain -> its tools as specs, with their effects."""
    return {dom: [ToolSpec.from_openai(doc, effects=corpus.effects[dom][doc["name"]])
                  for doc in docs] for dom, docs in corpus.tools.items()}


def load_dialogue_cases(seed: int = 0, limit: int | None = None, *,
                        mark_abstains: bool = False) -> list[Case]:
    """Pre-check cases of the dialogue corpus.

    Args:
        seed: Corpus seed.
        limit: Dialogues per domain (``None``: :data:`DEFAULT_PER_DOMAIN`).
        mark_abstains: Mark the assistant's earlier questions as toolguard's own (see
            :func:`toolguard_evals.dialogues.messages.turn_messages`).

    Raises:
        ValueError: If ``limit`` < 1.
    """
    if limit is not None and limit < 1:
        raise ValueError("limit must be >= 1 (or None for the default corpus)")
    corpus = build_corpus(seed=seed, per_domain=limit or DEFAULT_PER_DOMAIN)
    specs = corpus_specs(corpus)
    return [c for d in corpus.dialogues
            for c in dialogue_cases(d, specs[d.domain], mark_abstains=mark_abstains)]


__all__ = ["SUBSETS", "corpus_specs", "dialogue_cases", "load_dialogue_cases", "subset_of"]
