"""A thread-safe least-recently-used map, shared by the learned models' caches.

:class:`~toolguard.verifier.LearnedVerifier` keeps pair scores and text embeddings in it,
:class:`~toolguard.slot_scorer.SlotScorer` its context token vectors and document vectors.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["LRUCache"]


class LRUCache:
    """A thread-safe least-recently-used map.

    Args:
        size: Entries kept (0: keeps nothing); the least recently used go first.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, keys: Sequence[Any]) -> dict[Any, Any]:
        """The entries of ``keys`` that are kept (each becomes the most recently used)."""
        found = {}
        with self._lock:
            for k in keys:
                if k in self._items:
                    found[k] = self._items[k]
                    self._items.move_to_end(k)
        return found

    def put_many(self, items: Mapping[Any, Any]) -> None:
        """Keep ``items``, dropping the least recently used beyond ``size``."""
        if not self.size:
            return
        with self._lock:
            for k, v in items.items():
                self._items[k] = v
                self._items.move_to_end(k)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
