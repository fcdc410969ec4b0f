"""Rewriting a user request with the facts its personal references resolve to (KGETool).

KGETool (FamilyTool paper) extracts a sub-KG for the request and appends it to the query
as ``The extra information for the query is ([Bob, mother, Alice], [Alice,
prefer_dinnertime, dinnertime_0002]).``.  :func:`rewrite_request` does that to a
``HumanMessage`` (same id, so ``add_messages`` replaces it) and records what it did in
``additional_kwargs["toolguard_kg"]``, so a request is never resolved twice.  Shared by
:class:`~toolguard.KGResolveMiddleware` and :class:`~toolguard.nodes.KGResolveNode`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from toolguard.conversation import message_text
from toolguard.kg.graph import Triple
from toolguard.kg.resolver import Resolution

__all__ = ["EXTRA_INFO", "KG_KEY", "Rewrite", "format_sub_kg", "grounding_of", "kg_record",
           "question_for", "rewrite_request", "speaker_and_user", "unresolved_request"]

EXTRA_INFO = "The extra information for the query is"
"""KGETool's lead-in for the sub-KG appended to the query (FamilyTool data)."""
KG_KEY = "toolguard_kg"
"""Key of :func:`kg_record`: in a rewritten request's ``additional_kwargs`` (so it is never
resolved twice) and in a KG question's ``response_metadata``."""


def format_sub_kg(triples: Sequence[Triple]) -> str:
    """``([Bob, mother, Alice], [Alice, prefer_city, city_0002])`` as in FamilyTool."""
    return "(" + ", ".join(f"[{h}, {r}, {t}]" for h, r, t in triples) + ")"


def grounding_of(resolution: Resolution) -> list[str]:
    """Strings the content detector may treat as grounded: entities and triples."""
    return [*resolution.entities, *(f"{h} {r} {t}" for h, r, t in resolution.triples)]


def kg_record(res: Resolution) -> dict[str, Any]:
    """What a resolution is recorded as under :data:`KG_KEY`.

    ``{"programs": [...], "triples": [[head, relation, tail], ...], "missing": [...]}``;
    a rewritten request adds ``"answer"`` (the user's answer to the question asked).
    """
    return {"programs": list(res.programs), "triples": [list(t) for t in res.triples],
            "missing": list(res.missing)}


def question_for(missing: Sequence[str]) -> str:
    """The clarification question naming the missing links."""
    return ("I could not resolve part of your request from what I know about you: "
            + "; ".join(missing) + ". Could you tell me?")


def unresolved_request(messages: Sequence[BaseMessage]) -> HumanMessage | None:
    """The last message if it is a ``HumanMessage`` not resolved yet, else ``None``."""
    last = messages[-1] if messages else None
    if not isinstance(last, HumanMessage) or KG_KEY in (last.additional_kwargs or {}):
        return None
    return last


def speaker_and_user(*sources: Any, user_key: str = "user_id",
                     speaker_key: str = "kg_speaker") -> tuple[str | None, str | None]:
    """``(user id, speaker)`` from the first source that has them.

    Sources are mappings (``config["configurable"]``, the state) or objects (a runtime
    ``context`` dataclass); the speaker defaults to the user id.
    """
    def pick(key: str) -> Any:
        for src in sources:
            value = src.get(key) if isinstance(src, Mapping) else getattr(src, key, None)
            if value not in (None, ""):
                return value
        return None

    user, speaker = pick(user_key), pick(speaker_key)
    speaker = speaker if speaker is not None else user
    return (None if user is None else str(user), None if speaker is None else str(speaker))


@dataclass(frozen=True, slots=True)
class Rewrite:
    """The rewritten request and the values it grounds.

    Attributes:
        message: The new ``HumanMessage`` (same id as the original).
        grounding: Entities and triples that count as grounded for the guard.
    """

    message: HumanMessage
    grounding: list[str]


def rewrite_request(message: HumanMessage, res: Resolution,
                    answer: str | None = None, question: str | None = None) -> Rewrite | None:
    """The request with the resolved sub-KG (and the user's answer) appended.

    Returns:
        ``None`` when the resolution found nothing and nothing was asked.
    """
    if not res.triples and answer is None:
        return None
    record = kg_record(res)
    text = message_text(message)
    grounding = grounding_of(res)
    if answer is not None:
        record["answer"] = answer
        text = f"{text}\n(Asked: {question} The user answered: {answer})"
        grounding.append(answer)
    if res.triples:
        text = f"{text}  {EXTRA_INFO} {format_sub_kg(res.triples)}."
    new = HumanMessage(
        content=text, id=message.id, name=message.name,
        additional_kwargs={**(message.additional_kwargs or {}), KG_KEY: record},
        response_metadata=dict(message.response_metadata or {}),
    )
    return Rewrite(new, grounding)
