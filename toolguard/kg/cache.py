"""Per-user knowledge graphs and resolvers kept between turns, keyed by user and KG version.

:class:`KGCache` keeps, per ``(store, prefix, user)``, the user's
:class:`~toolguard.kg.graph.KnowledgeGraph` and its
:class:`~toolguard.kg.resolver.DeterministicPathGenerator` (whose people / relation tables
are built once per graph).  A turn costs one ``get`` of the user's version item
(:meth:`~toolguard.kg.store.KGStore.version`) while the version is unchanged; after a
change through any :class:`~toolguard.kg.store.KGStore` the graph is read again in one
``search`` (:meth:`~toolguard.kg.store.KGStore.load_versioned`).  Triples written to the
store behind ``KGStore`` 's back (no version change) are seen once the entry is
``max_age_s`` seconds old.  Used by :class:`~toolguard.kg.turn.KGTurnResolver`, the engine
of :class:`~toolguard.KGResolveMiddleware` and :class:`~toolguard.nodes.KGResolveNode`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Unpack

from toolguard.errors import ConfigurationError
from toolguard.kg.graph import KnowledgeGraph
from toolguard.kg.plan import Plan, ReadGraph, ReadVersion, adrive, drive
from toolguard.kg.resolver import DeterministicPathGenerator, ResolverOptions
from toolguard.kg.store import KGStore

__all__ = ["KGCache"]


@dataclass(frozen=True, slots=True)
class _Entry:
    base: Any  # the BaseStore (held, so its id is not reused while the entry lives)
    version: str | None
    loaded_at: float  # time.monotonic()
    kg: KnowledgeGraph
    resolver: DeterministicPathGenerator
    size: int  # triples (len(kg) walks the graph: counted once)


class KGCache:
    """Per-user ``(KnowledgeGraph, DeterministicPathGenerator)`` by KG version (see module).

    Args:
        max_users: Users kept (least recently used dropped first), >= 1.
        max_triples: Triples kept over all users (least recently used users dropped first;
            the user just read is always kept), >= 1.
        max_age_s: Seconds after which a user's graph is read again even when its version
            is unchanged (bounds how long triples written to the store directly go
            unseen); ``None``: only on a version change; ``0``: every turn.
        **resolver_options: Keyword options of :class:`DeterministicPathGenerator`.

    Raises:
        toolguard.errors.ConfigurationError: A bound out of range or an invalid resolver
            option.
    """

    def __init__(self, *, max_users: int = 256, max_triples: int = 500_000,
                 max_age_s: float | None = 60.0,
                 **resolver_options: Unpack[ResolverOptions]) -> None:
        if max_users < 1:
            raise ConfigurationError("max_users must be >= 1")
        if max_triples < 1:
            raise ConfigurationError("max_triples must be >= 1")
        if max_age_s is not None and max_age_s < 0:
            raise ConfigurationError("max_age_s must be >= 0 or None")
        DeterministicPathGenerator(KnowledgeGraph(), **resolver_options)  # validate eagerly
        self.max_users = max_users
        self.max_triples = max_triples
        self.max_age_s = max_age_s
        self.resolver_options: ResolverOptions = resolver_options
        self._entries: OrderedDict[tuple[int, tuple[str, ...], str], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.loads = 0
        """Graphs read from a store so far (a miss, a version change or an expired entry)."""

    # ------------------------------------------------------------------ lookup
    def _fresh(self, store: KGStore, user_id: str) -> _Entry | None:
        """The entry of ``user_id`` if it may be used without checking the version."""
        entry = self._entries.get(_key(store, user_id))
        if entry is None or entry.base is not store.store:
            return None
        if self.max_age_s is not None and time.monotonic() - entry.loaded_at > self.max_age_s:
            return None
        return entry

    def _keep(self, store: KGStore, user_id: str, kg: KnowledgeGraph,
              version: str | None, loaded_at: float) -> DeterministicPathGenerator:
        self.loads += 1
        entry = _Entry(store.store, version, loaded_at, kg,
                       DeterministicPathGenerator(kg, **self.resolver_options), len(kg))
        key = _key(store, user_id)
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            total = sum(e.size for e in self._entries.values())
            while len(self._entries) > 1 and (len(self._entries) > self.max_users
                                              or total > self.max_triples):
                _, dropped = self._entries.popitem(last=False)
                total -= dropped.size
        return entry.resolver

    def _hit(self, store: KGStore, user_id: str) -> None:
        with self._lock:
            key = _key(store, user_id)
            if key in self._entries:
                self._entries.move_to_end(key)

    def lookup(self, store: KGStore, user_id: str) -> Plan[DeterministicPathGenerator]:
        """:meth:`resolver` as a plan (:mod:`toolguard.kg.plan`): yields the store reads.

        A :class:`~toolguard.kg.plan.ReadVersion` when a cached graph may be used, then a
        :class:`~toolguard.kg.plan.ReadGraph` if its version changed (or none was cached).
        """
        entry = self._fresh(store, user_id)
        if entry is not None:
            version: str | None = yield ReadVersion(store, user_id)
            if version == entry.version:
                self._hit(store, user_id)
                return entry.resolver
        loaded_at = time.monotonic()
        kg, version = yield ReadGraph(store, user_id)
        return self._keep(store, user_id, kg, version, loaded_at)

    def resolver(self, store: KGStore, user_id: str) -> DeterministicPathGenerator:
        """The resolver over ``user_id`` 's current graph in ``store``.

        One ``get`` (the version) when the cached graph is current; else the graph is read
        (one ``search``) and a resolver built.

        Raises:
            toolguard.errors.KGError: An invalid user id.
        """
        return drive(self.lookup(store, user_id))

    async def aresolver(self, store: KGStore, user_id: str) -> DeterministicPathGenerator:
        """Async :meth:`resolver` (``aget`` / ``asearch``)."""
        return await adrive(self.lookup(store, user_id))

    def graph(self, store: KGStore, user_id: str) -> KnowledgeGraph:
        """The user's current graph (as :meth:`resolver`; do not mutate it)."""
        return self.resolver(store, user_id).kg

    def clear(self) -> None:
        """Forget every user (the next turn reads each graph again)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _key(store: KGStore, user_id: str) -> tuple[int, tuple[str, ...], str]:
    return (id(store.store), store.prefix, user_id)
