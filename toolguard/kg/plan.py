"""The I/O steps of KG resolution, run by the two drivers of :mod:`toolguard._plan`.

A *plan* is a generator that yields what needs I/O and receives the reply, as
``Precheck._steps`` does for model calls; it holds every decision, so the sync and the async
entry points differ only in the driver that runs it:

- :class:`ReadVersion`: the user's KG version token (:meth:`KGStore.version
  <toolguard.kg.store.KGStore.version>`, one store ``get``); reply ``str | None``.
- :class:`ReadGraph`: the user's KG and its version, read together
  (:meth:`KGStore.load_versioned <toolguard.kg.store.KGStore.load_versioned>`, one
  ``search`` per page); reply ``(KnowledgeGraph, str | None)``.
- :class:`AskUser`: an ask-user interrupt (:func:`toolguard.protocol.ask_user`); reply: one
  :class:`~toolguard.protocol.Answer` per question.  The first time it raises LangGraph's
  ``GraphInterrupt``; on resume the node runs again and the plan receives the answers.
- :class:`Notify`: an event for the adapter's callback (a custom stream event); reply
  ``None``.

:func:`~toolguard._plan.drive` runs a plan with the sync store methods,
:func:`~toolguard._plan.adrive` with the async ones (``aget`` / ``asearch``); both are
shared with the retry controller.  Used by :meth:`toolguard.kg.cache.KGCache.lookup` and
:meth:`toolguard.kg.turn.KGTurnResolver.plan`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolguard._plan import Plan, Step, adrive, drive
from toolguard.kg.graph import KnowledgeGraph
from toolguard.kg.store import KGStore
from toolguard.protocol import Answer, AskQuestion, ask_user

__all__ = ["AskUser", "Notify", "Plan", "ReadGraph", "ReadVersion", "Step", "adrive", "drive"]

@dataclass(frozen=True, slots=True)
class ReadVersion:
    """Read ``user_id`` 's KG version token (one ``get``); an invalid id raises ``KGError``."""

    store: KGStore
    user_id: str

    def run(self) -> str | None:
        """``store.version(user_id)``."""
        return self.store.version(self.user_id)

    async def arun(self) -> str | None:
        """``await store.aversion(user_id)``."""
        return await self.store.aversion(self.user_id)


@dataclass(frozen=True, slots=True)
class ReadGraph:
    """Read ``user_id`` 's KG and version (``search`` per page); a bad id raises ``KGError``."""

    store: KGStore
    user_id: str

    def run(self) -> tuple[KnowledgeGraph, str | None]:
        """``store.load_versioned(user_id)``."""
        return self.store.load_versioned(self.user_id)

    async def arun(self) -> tuple[KnowledgeGraph, str | None]:
        """``await store.aload_versioned(user_id)``."""
        return await self.store.aload_versioned(self.user_id)


@dataclass(frozen=True, slots=True)
class AskUser:
    """Ask the user ``questions`` through an interrupt (needs a checkpointer to resume)."""

    questions: Sequence[AskQuestion]

    def run(self) -> list[Answer]:
        """:func:`~toolguard.protocol.ask_user`: raises ``GraphInterrupt`` the first time."""
        return ask_user(self.questions)

    async def arun(self) -> list[Answer]:
        """The same call: LangGraph's ``interrupt()`` is synchronous in async nodes too."""
        return self.run()


@dataclass(frozen=True, slots=True)
class Notify:
    """Give ``event`` to ``callback`` (an adapter's stream writer)."""

    callback: Callable[[Mapping[str, Any]], None]
    event: Mapping[str, Any]

    def run(self) -> None:
        """``callback(event)``."""
        self.callback(self.event)

    async def arun(self) -> None:
        """``callback(event)`` (writing a stream event does not block)."""
        self.run()
