"""Issue 14, what held at 0.1.0 and must keep holding: concurrent runs and per-user KGs.

The adversarial run found 0 cross-talk in 400 concurrent runs and 392 KG resolutions.
These regression tests run one compiled graph per surface under concurrent runs (asyncio
tasks and threads) whose model answers from its own conversation only, and one
``KGResolveMiddleware`` agent for many users at once.  Sized to take about a second in
all: cross-talk needs runs in flight together, not hundreds of them
(``TOOLGUARD_ADVERSARIAL_RUNS=200`` runs the issue's size).
"""

from __future__ import annotations

import asyncio
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from adversarial.support import (
    SURFACES,
    Effects,
    Surface,
    ask,
    assert_valid_history,
    build,
    calls,
)
from toolguard import KGResolveMiddleware, KGStore
from toolguard.testing import ScriptedChatModel
from toolguard_graphs import create_guarded_agent

RUNS = int(os.environ.get("TOOLGUARD_ADVERSARIAL_RUNS", "30"))
THREADED = max(1, RUNS // 4)


def _step(messages: list[BaseMessage]) -> AIMessage:
    """A model that reads only its own conversation: weather for the asked city, then done."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(f"Answer: {last.content}")
    city = re.search(r"in (City\d+)", str(last.content))
    assert city is not None
    return calls(("get_weather", {"city": city.group(1)}, f"w-{city.group(1)}"))


def _check(out: dict[str, Any], i: int) -> None:
    assert out["messages"][-1].content == f"Answer: sunny, 21 C in City{i}"
    assert f"City{i}" in str(out["messages"][0].content)
    assert_valid_history(out["messages"])


@pytest.mark.parametrize("surface", SURFACES)
def test_concurrent_runs_never_cross_talk(surface: Surface) -> None:
    effects = Effects()
    graph, _ = build(surface, [_step] * (4 * RUNS + 10), effects.tools())

    async def all_runs() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(
            graph.ainvoke(ask(f"What's the weather in City{i}?")) for i in range(RUNS))))

    for i, out in enumerate(asyncio.run(all_runs())):
        _check(out, i)
    threaded = THREADED  # and from threads, sync
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda i: graph.invoke(ask(f"What's the weather in City{i}?")),
                             range(threaded)))
    for i, out in enumerate(outs):
        _check(out, i)
    assert sorted(effects.ran("get_weather")) == sorted(
        [f"City{i}" for i in range(RUNS)] + [f"City{i}" for i in range(threaded)])


USERS = RUNS


def _kg_step(messages: list[BaseMessage]) -> AIMessage:
    """Books where the resolved fact in the prompt says the user's mother lives."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(f"Done: {last.content}")
    found = re.search(r"\[\w+, lives_in, (Town\d+)\]", str(last.content))
    assert found is not None, last.content
    return calls(("get_weather", {"city": found.group(1)}, "w"))


def test_kg_resolution_is_isolated_per_user_under_concurrency() -> None:
    store = InMemoryStore()
    kg = KGStore(store)
    for u in range(USERS):
        kg.add_many(f"u{u}", [("Bob", "mother", f"Mum{u}"), (f"Mum{u}", "lives_in", f"Town{u}")])
    effects = Effects()
    model = ScriptedChatModel(script=[_kg_step] * (2 * USERS + 10))
    graph = create_guarded_agent(model, effects.tools(), kg=KGResolveMiddleware(), store=store)

    async def run(u: int) -> dict[str, Any]:
        return await graph.ainvoke(  # type: ignore[no-any-return]
            {"messages": [HumanMessage("What's the weather where my mom lives?")]},
            {"configurable": {"user_id": f"u{u}", "kg_speaker": "Bob"}})

    async def all_runs() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(run(u) for u in range(USERS))))

    for u, out in enumerate(asyncio.run(all_runs())):
        assert out["messages"][-1].content == f"Done: sunny, 21 C in Town{u}"
        grounding = " ".join(out["kg_grounding"])
        assert f"Town{u}" in grounding
        assert not re.search(rf"Town(?!{u}\b)\d+", grounding), grounding  # no one else's
        assert_valid_history(out["messages"])
    assert sorted(effects.ran("get_weather")) == sorted(f"Town{u}" for u in range(USERS))
