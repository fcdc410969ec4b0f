"""Per-user knowledge graphs persisted through LangGraph's ``BaseStore``.

One namespace per user, ``(*prefix, user_id)`` (default ``("toolguard", "kg", user_id)``),
one item per triple: key ``json.dumps([head, relation, tail])``, value
``{"head", "relation", "tail", "seq"}`` where ``seq`` (nanoseconds at insertion, strictly
increasing within a process) keeps FamilyTool's insertion order ("first tail" in greedy
extraction).  A user's resolution reads only that user's namespace, so one user's KG is
never visible to another.  Works with any ``BaseStore`` (``InMemoryStore`` in tests,
SQLite/Postgres stores in production); sync and async twins share the same pure helpers.

**Versions.**  Every change through :class:`KGStore` (``add``, ``add_many``, ``remove``)
writes, after the triples, a new random token to the item ``"version"`` of the
sub-namespace ``(*prefix, user_id, "meta")``.  :meth:`KGStore.version` reads it with one
``get``; :meth:`KGStore.load_versioned` reads it in the same search as the triples.  A
reader that caches a graph per version (:class:`~toolguard.kg.cache.KGCache`) sees every
change made through any :class:`KGStore` on the same store, in any process, at its next
read.  Triples written to the store directly (``store.put`` under the user's namespace)
do not change the version: a cache sees them when its entry expires (``max_age_s``).

**Reading.**  :meth:`KGStore.load` reads the user's namespace with one ``search`` of up to
``page_size`` items (default 100,000; more items page on with offsets).  Stores return
a namespace's items in their own order (insertion order in ``InMemoryStore``,
``updated_at`` in Postgres); the graph is rebuilt in ``seq`` order either way.
"""

from __future__ import annotations

import json
import threading
import time
import unicodedata
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from toolguard.errors import KGError
from toolguard.kg.graph import KnowledgeGraph, Triple

PAGE_SIZE = 100_000
"""Items one ``search`` asks for when a graph is loaded (see :class:`KGStore`)."""
META = "meta"
"""Last label of a user's metadata namespace ``(*prefix, user_id, META)``."""
VERSION_KEY = "version"
"""Key of the version item in the metadata namespace."""

_seq_lock = threading.Lock()
_last_seq = 0


def _next_seqs(n: int) -> range:
    """``n`` insertion stamps: nanoseconds, strictly increasing within the process."""
    global _last_seq
    with _seq_lock:
        start = max(time.time_ns(), _last_seq + 1)
        _last_seq = start + n - 1
    return range(start, start + n)


def _label_problem(label: object) -> str | None:
    """Why ``label`` cannot be a namespace label, else ``None``.

    LangGraph's stores refuse labels that are not strings, are empty, or contain ``.`` or
    NUL when a namespace is *read* (``InvalidNamespaceError``), but a batch of put
    operations may write them; checking the same rules before any write keeps a user's KG
    readable.  Other control characters are refused too.
    """
    if not isinstance(label, str) or not label.strip():
        return "must be a non-empty string"
    if "." in label:
        return "must not contain '.' (LangGraph namespace labels cannot)"
    if any(unicodedata.category(c) == "Cc" for c in label):
        return "must not contain control characters such as NUL"
    return None


def _check_user(user_id: object) -> str:
    problem = _label_problem(user_id)
    if problem is not None:
        raise KGError(f"user_id {problem}, got {user_id!r}")
    assert isinstance(user_id, str)
    return user_id


def _check_triple(triple: Sequence[Any]) -> Triple:
    if not (isinstance(triple, list | tuple) and len(triple) == 3
            and all(isinstance(v, str) and v for v in triple)):
        raise KGError(f"a triple is (head, relation, tail) of non-empty strings, "
                         f"got {triple!r}")
    return (triple[0], triple[1], triple[2])


def _checked_batch(triples: Iterable[Sequence[Any]]) -> list[Triple]:
    """Every triple validated before any is written; repeats dropped, order kept.

    Raises:
        toolguard.errors.KGError: On the first invalid triple (nothing is written).
    """
    if isinstance(triples, str | bytes) or not isinstance(triples, Iterable):
        raise KGError(f"triples must be an iterable of (head, relation, tail), got "
                      f"{type(triples).__name__}")
    return list(dict.fromkeys(_check_triple(t) for t in triples))


def _key(triple: Triple) -> str:
    return json.dumps(list(triple), ensure_ascii=False)


def _put_ops(ns: tuple[str, ...], triples: Sequence[Triple]) -> list[PutOp]:
    return [PutOp(ns, _key(t), {"head": t[0], "relation": t[1], "tail": t[2], "seq": seq},
                  index=False)
            for t, seq in zip(triples, _next_seqs(len(triples)), strict=True)]


def _bump_op(meta_ns: tuple[str, ...]) -> PutOp:
    return PutOp(meta_ns, VERSION_KEY, {"version": uuid.uuid4().hex, "at": time.time_ns()},
                 index=False)


def _version_of(item: Item | None) -> str | None:
    value = item.value.get("version") if item is not None else None
    return value if isinstance(value, str) else None


def _to_graph(items: Iterable[Item]) -> KnowledgeGraph:
    """The triples of ``items`` in ``seq`` order (key order on ties); others are skipped."""
    rows: list[tuple[int, str, str, str, str]] = []
    for it in items:
        v = it.value
        if not isinstance(v, dict):
            continue
        h, r, t = v.get("head"), v.get("relation"), v.get("tail")
        if isinstance(h, str) and isinstance(r, str) and isinstance(t, str) and h and r and t:
            seq = v.get("seq", 0)
            rows.append((seq if type(seq) is int else int(seq or 0), it.key, h, r, t))
    rows.sort(key=lambda row: (row[0], row[1]))  # keys are unique within a namespace
    return KnowledgeGraph((h, r, t) for _, _, h, r, t in rows)


class KGStore:
    """Per-user triples in a LangGraph ``BaseStore`` (see the module docstring).

    Args:
        store: Any LangGraph store.
        prefix: Namespace prefix; a user's triples live under ``(*prefix, user_id)``.
        page_size: Items asked for by one ``search`` when a graph is read (>= 1).

    Raises:
        toolguard.errors.KGError: On an empty prefix, a prefix label containing ``.``, or
            ``page_size`` < 1.
    """

    def __init__(self, store: BaseStore, *, prefix: Sequence[str] = ("toolguard", "kg"),
                 page_size: int = PAGE_SIZE) -> None:
        if not prefix or any(_label_problem(p) is not None for p in prefix):
            raise KGError("prefix must be non-empty labels without '.' or control "
                          f"characters, got {prefix!r}")
        if not isinstance(page_size, int) or page_size < 1:
            raise KGError(f"page_size must be an integer >= 1, got {page_size!r}")
        self.store = store
        self.prefix = tuple(prefix)
        self.page_size = page_size

    def namespace(self, user_id: str) -> tuple[str, ...]:
        """The namespace of ``user_id``.

        Raises:
            toolguard.errors.KGError: An empty id, or one with ``.`` or a control
                character such as NUL (the same id is refused on write and on read).
        """
        return (*self.prefix, _check_user(user_id))

    def meta_namespace(self, user_id: str) -> tuple[str, ...]:
        """The namespace of ``user_id`` 's version item: ``(*prefix, user_id, "meta")``."""
        return (*self.namespace(user_id), META)

    @staticmethod
    def _split(ns: tuple[str, ...], items: Iterable[Item],
               triples: list[Item]) -> str | None:
        """Keep the user's triple items in ``triples``; the version token, if among items."""
        version: str | None = None
        meta = (*ns, META)
        for it in items:
            namespace = tuple(it.namespace)
            if namespace == ns:
                triples.append(it)
            elif namespace == meta and it.key == VERSION_KEY:
                version = _version_of(it)
        return version

    # ------------------------------------------------------------------ sync
    def add(self, user_id: str, head: str, relation: str, tail: str) -> bool:
        """Add one triple to the user's KG; False if it was already there."""
        return self.add_many(user_id, [(head, relation, tail)]) == 1

    def add_many(self, user_id: str, triples: Iterable[Sequence[str]]) -> int:
        """Add triples in order, all or nothing; returns how many were new.

        Every triple is validated before anything is written: one invalid triple raises
        and stores nothing.  The new triples and the new version go to the store in one
        ``batch`` (a store that runs a batch in one transaction writes all or none).

        Raises:
            toolguard.errors.KGError: An invalid user id or triple (nothing written).
        """
        ns = self.namespace(user_id)
        todo = _checked_batch(triples)
        if not todo:
            return 0
        found = self.store.batch([GetOp(ns, _key(t)) for t in todo])
        new = [t for t, item in zip(todo, found, strict=True) if item is None]
        if new:  # the triples and the version in one batch
            self.store.batch([*_put_ops(ns, new), _bump_op((*ns, META))])
        return len(new)

    def remove(self, user_id: str, head: str, relation: str, tail: str) -> bool:
        """Remove one triple; False if it was not there."""
        triple = _check_triple((head, relation, tail))
        ns = self.namespace(user_id)
        if self.store.get(ns, _key(triple)) is None:
            return False
        # the delete (a put of None) and the version in one batch
        self.store.batch([PutOp(ns, _key(triple), None), _bump_op((*ns, META))])
        return True

    def version(self, user_id: str) -> str | None:
        """The user's KG version token (one ``get``).

        ``None`` before the first change made through a :class:`KGStore`.
        """
        return _version_of(self.store.get(self.meta_namespace(user_id), VERSION_KEY))

    def load(self, user_id: str) -> KnowledgeGraph:
        """The user's KG (empty for an unknown user), in insertion order."""
        return self.load_versioned(user_id)[0]

    def load_versioned(self, user_id: str) -> tuple[KnowledgeGraph, str | None]:
        """The user's KG and its version token, read together.

        One ``search`` per :attr:`page_size` items (one for a graph that fits a page).
        """
        ns = self.namespace(user_id)
        triples: list[Item] = []
        version: str | None = None
        offset = 0
        while True:
            page = self.store.search(ns, limit=self.page_size, offset=offset)
            offset += len(page)
            version = self._split(ns, page, triples) or version
            if len(page) < self.page_size:
                return _to_graph(triples), version

    # ------------------------------------------------------------------ async
    async def aadd(self, user_id: str, head: str, relation: str, tail: str) -> bool:
        """Async twin of :meth:`add`."""
        return await self.aadd_many(user_id, [(head, relation, tail)]) == 1

    async def aadd_many(self, user_id: str, triples: Iterable[Sequence[str]]) -> int:
        """Async twin of :meth:`add_many`."""
        ns = self.namespace(user_id)
        todo = _checked_batch(triples)
        if not todo:
            return 0
        found = await self.store.abatch([GetOp(ns, _key(t)) for t in todo])
        new = [t for t, item in zip(todo, found, strict=True) if item is None]
        if new:
            await self.store.abatch([*_put_ops(ns, new), _bump_op((*ns, META))])
        return len(new)

    async def aremove(self, user_id: str, head: str, relation: str, tail: str) -> bool:
        """Async twin of :meth:`remove`."""
        triple = _check_triple((head, relation, tail))
        ns = self.namespace(user_id)
        if await self.store.aget(ns, _key(triple)) is None:
            return False
        await self.store.abatch([PutOp(ns, _key(triple), None), _bump_op((*ns, META))])
        return True

    async def aversion(self, user_id: str) -> str | None:
        """Async twin of :meth:`version`."""
        return _version_of(await self.store.aget(self.meta_namespace(user_id), VERSION_KEY))

    async def aload(self, user_id: str) -> KnowledgeGraph:
        """Async twin of :meth:`load`."""
        return (await self.aload_versioned(user_id))[0]

    async def aload_versioned(self, user_id: str) -> tuple[KnowledgeGraph, str | None]:
        """Async twin of :meth:`load_versioned`."""
        ns = self.namespace(user_id)
        triples: list[Item] = []
        version: str | None = None
        offset = 0
        while True:
            page = await self.store.asearch(ns, limit=self.page_size, offset=offset)
            offset += len(page)
            version = self._split(ns, page, triples) or version
            if len(page) < self.page_size:
                return _to_graph(triples), version
