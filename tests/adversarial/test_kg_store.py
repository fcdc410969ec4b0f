"""Issue 14, defect 8 (KG): ``KGStore.add_many`` is all-or-nothing.

At 0.1.0 ``add_many`` stored 1 of 2 valid triples before rejecting a bad one: a batch that
fails validation must leave the user's KG as it was.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from toolguard import KGError, KGStore

BATCHES: list[list[Any]] = [
    [("Bob", "mother", "Alice"), ("Alice", "lives_in", "Lyon"), ("bad",)],
    [("Bob", "mother", "Alice"), ("Alice", "", "Lyon")],
    [("Bob", "mother", "Alice"), ("Alice", "lives_in", 42)],
]


@pytest.mark.parametrize("batch", BATCHES, ids=["short", "empty", "not-a-string"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_batch_with_a_bad_triple_stores_nothing(mode: str, batch: list[Any]) -> None:
    kg = KGStore(InMemoryStore())
    kg.add("u1", "Carol", "sister", "Bob")
    with pytest.raises(KGError):
        if mode == "async":
            asyncio.run(kg.aadd_many("u1", batch))
        else:
            kg.add_many("u1", iter(batch))  # a generator is checked before anything is stored
    assert kg.load("u1").triples() == [("Carol", "sister", "Bob")]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_valid_batch_is_stored_in_order_for_its_user_only(mode: str) -> None:
    kg = KGStore(InMemoryStore())
    batch = [("Bob", "mother", "Alice"), ("Alice", "lives_in", "Lyon"),
             ("Bob", "mother", "Alice")]
    added = asyncio.run(kg.aadd_many("u1", batch)) if mode == "async" else kg.add_many(
        "u1", batch)
    assert added == 2
    assert kg.load("u1").triples() == batch[:2]
    assert kg.load("u2").triples() == []
