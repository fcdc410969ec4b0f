"""Per-user knowledge graphs persisted through LangGraph's ``BaseStore``.

One namespace per user, ``(*prefix, user_id)`` (default ``("toolguard", "kg", user_id)``),
one item per triple: key ``json.dumps([head, relation, tail])``, value
``{"head", "relation", "tail", "seq"}`` where ``seq`` (nanoseconds at insertion) keeps
FamilyTool's insertion order ("first tail" in greedy extraction).  A user's resolution
reads only that user's namespace, so one user's KG is never visible to another.  Works
with any ``BaseStore`` (``InMemoryStore`` in tests, SQLite/Postgres stores in production);
sync and async twins share the same pure helpers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from langgraph.store.base import BaseStore, Item

from toolguard.errors import KGError
from toolguard.kg.graph import KnowledgeGraph, Triple

_PAGE = 500


def _check_user(user_id: object) -> str:
    if not isinstance(user_id, str) or not user_id.strip():
        raise KGError(f"user_id must be a non-empty string, got {user_id!r}")
    if "." in user_id:
        raise KGError(f"user_id must not contain '.', got {user_id!r} "
                         "(LangGraph namespace labels cannot)")
    return user_id


def _check_triple(triple: Sequence[Any]) -> Triple:
    if not (isinstance(triple, list | tuple) and len(triple) == 3
            and all(isinstance(v, str) and v for v in triple)):
        raise KGError(f"a triple is (head, relation, tail) of non-empty strings, "
                         f"got {triple!r}")
    return (triple[0], triple[1], triple[2])


def _key(triple: Triple) -> str:
    return json.dumps(list(triple), ensure_ascii=False)


def _to_graph(items: Iterable[Item]) -> KnowledgeGraph:
    rows = sorted(((int(it.value.get("seq", 0)), it.key, it.value) for it in items),
                  key=lambda r: (r[0], r[1]))
    return KnowledgeGraph((v["head"], v["relation"], v["tail"]) for _, _, v in rows)


class KGStore:
    """Per-user triples in a LangGraph ``BaseStore``.

    Args:
        store: Any LangGraph store.
        prefix: Namespace prefix; a user's triples live under ``(*prefix, user_id)``.

    Raises:
        toolguard.errors.KGError: On an empty prefix or a prefix label containing ``.``.
    """

    def __init__(self, store: BaseStore, *, prefix: Sequence[str] = ("toolguard", "kg")) -> None:
        if not prefix or any(not isinstance(p, str) or not p or "." in p for p in prefix):
            raise KGError(f"prefix must be non-empty labels without '.', got {prefix!r}")
        self.store = store
        self.prefix = tuple(prefix)

    def namespace(self, user_id: str) -> tuple[str, ...]:
        """The namespace of ``user_id`` (``ValueError`` on an empty id or one with ``.``)."""
        return (*self.prefix, _check_user(user_id))

    # ------------------------------------------------------------------ sync
    def add(self, user_id: str, head: str, relation: str, tail: str) -> bool:
        """Add one triple to the user's KG; False if it was already there."""
        triple = _check_triple((head, relation, tail))
        ns = self.namespace(user_id)
        if self.store.get(ns, _key(triple)) is not None:
            return False
        self.store.put(ns, _key(triple), {"head": head, "relation": relation, "tail": tail,
                                          "seq": time.time_ns()}, index=False)
        return True

    def add_many(self, user_id: str, triples: Iterable[Sequence[str]]) -> int:
        """Add triples in order; returns how many were new."""
        return sum(self.add(user_id, *_check_triple(t)) for t in triples)

    def remove(self, user_id: str, head: str, relation: str, tail: str) -> bool:
        """Remove one triple; False if it was not there."""
        triple = _check_triple((head, relation, tail))
        ns = self.namespace(user_id)
        if self.store.get(ns, _key(triple)) is None:
            return False
        self.store.delete(ns, _key(triple))
        return True

    def load(self, user_id: str) -> KnowledgeGraph:
        """The user's KG (empty for an unknown user), in insertion order."""
        ns = self.namespace(user_id)
        items: list[Item] = []
        offset = 0
        while True:
            page = self.store.search(ns, limit=_PAGE, offset=offset)
            offset += len(page)
            items.extend(it for it in page if tuple(it.namespace) == ns)
            if len(page) < _PAGE:
                return _to_graph(items)

    # ------------------------------------------------------------------ async
    async def aadd(self, user_id: str, head: str, relation: str, tail: str) -> bool:
        """Async twin of :meth:`add`."""
        triple = _check_triple((head, relation, tail))
        ns = self.namespace(user_id)
        if await self.store.aget(ns, _key(triple)) is not None:
            return False
        await self.store.aput(ns, _key(triple), {"head": head, "relation": relation,
                                                 "tail": tail, "seq": time.time_ns()},
                              index=False)
        return True

    async def aadd_many(self, user_id: str, triples: Iterable[Sequence[str]]) -> int:
        """Async twin of :meth:`add_many`."""
        n = 0
        for t in triples:
            n += await self.aadd(user_id, *_check_triple(t))
        return n

    async def aremove(self, user_id: str, head: str, relation: str, tail: str) -> bool:
        """Async twin of :meth:`remove`."""
        triple = _check_triple((head, relation, tail))
        ns = self.namespace(user_id)
        if await self.store.aget(ns, _key(triple)) is None:
            return False
        await self.store.adelete(ns, _key(triple))
        return True

    async def aload(self, user_id: str) -> KnowledgeGraph:
        """Async twin of :meth:`load`."""
        ns = self.namespace(user_id)
        items: list[Item] = []
        offset = 0
        while True:
            page = await self.store.asearch(ns, limit=_PAGE, offset=offset)
            offset += len(page)
            items.extend(it for it in page if tuple(it.namespace) == ns)
            if len(page) < _PAGE:
                return _to_graph(items)
