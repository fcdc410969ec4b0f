"""Issue 14, defect 8 (timeouts): async feedback names the timeout; no wait for hung tools.

At 0.1.0 the async path answered a timed-out call ``TimeoutError: `` (``asyncio.wait_for``
raises it without a message) where the sync path said ``timed out after 1 s``, and an async
run with a hung *synchronous* tool returned its answer on time but ``asyncio.run`` then
waited (11 s) for the loop's default executor, whose worker was still running the tool.
A sync tool in an async run now runs in its own daemon thread (``toolguard.retry.timeout``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool, StructuredTool

from adversarial.support import (
    MODES,
    SURFACES,
    Surface,
    ask,
    assert_valid_history,
    build,
    calls,
    controller,
    invoke,
    only_answer,
    tool_answers,
)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set when the test ends, so hung tools end their threads."""
    event = threading.Event()
    yield event
    event.set()


def _booking(release: threading.Event, done: list[str], *, asynchronous: bool) -> BaseTool:
    def book_table(restaurant: str, city: str) -> str:
        release.wait(10)
        done.append(restaurant)
        return "booked"

    async def abook_table(restaurant: str, city: str) -> str:
        await asyncio.sleep(10)
        done.append(restaurant)
        return "booked"

    tool = StructuredTool.from_function(
        func=None if asynchronous else book_table,
        coroutine=abook_table if asynchronous else None, name="book_table",
        description="Book a table at a restaurant in a city.")
    tool.metadata = {"effects": "write"}
    return tool


BOOK = calls(("book_table", {"restaurant": "Chez Luc", "city": "Paris"}, "b"))
ASK = "Book a table at Chez Luc in Paris"


@pytest.mark.parametrize(("mode", "asynchronous"), [("sync", False), ("async", False),
                                                    ("async", True)],
                         ids=["sync-run", "async-run-sync-tool", "async-run-async-tool"])
@pytest.mark.parametrize("surface", SURFACES)
def test_every_timeout_names_its_limit(surface: Surface, mode: str, asynchronous: bool,
                                       release: threading.Event) -> None:
    done: list[str] = []
    graph, _ = build(surface, [BOOK.model_copy(), AIMessage("Could not book.")],
                     [_booking(release, done, asynchronous=asynchronous)],
                     ctl=controller(timeout_s=0.05))
    out = invoke(graph, ask(ASK), mode=mode)
    answer = str(only_answer(out["messages"], "b").content)
    assert "TimeoutError: tool call timed out after 0.05 s" in answer
    assert "not idempotent" in answer  # a write that timed out is not repeated
    assert done == []
    assert_valid_history(out["messages"])


@pytest.mark.parametrize("surface", SURFACES)
def test_asyncio_run_does_not_wait_for_a_hung_sync_tool(surface: Surface,
                                                         release: threading.Event) -> None:
    done: list[str] = []
    graph, _ = build(surface, [BOOK.model_copy(), AIMessage("Could not book.")],
                     [_booking(release, done, asynchronous=False)],
                     ctl=controller(timeout_s=0.05))
    started = time.perf_counter()
    out = asyncio.run(graph.ainvoke(ask(ASK)))  # shuts its default executor down
    assert time.perf_counter() - started < 2  # was: until the tool returned (10 s here)
    assert "timed out" in str(only_answer(out["messages"], "b").content)
    assert done == []


def _quote(release: threading.Event) -> BaseTool:
    def get_quote(city: str) -> str:
        release.wait(10)
        return "late"

    tool = StructuredTool.from_function(func=get_quote, description="Get a quote for a city.")
    tool.metadata = {"effects": "read"}
    return tool


@pytest.mark.parametrize("mode", MODES)
def test_a_write_queued_behind_hung_tools_never_runs_after_its_timeout(
        mode: str, release: threading.Event) -> None:
    sent = threading.Event()

    def send_message(to: str, body: str = "") -> str:
        sent.set()
        return "sent"

    mail = StructuredTool.from_function(func=send_message,
                                        description="Send a message to an address.")
    mail.metadata = {"effects": "write"}
    script: list[Any] = [
        calls(*[("get_quote", {"city": f"c{i}"}, f"q{i}") for i in range(12)]),
        calls(("send_message", {"to": "ops@example.com", "body": "hi"}, "m")),
        AIMessage("done")]
    graph, _ = build("agent", script, [_quote(release), mail],
                     ctl=controller(timeout_s=0.5, max_retries=0,
                                    max_consecutive_failures=None))
    cities = ", ".join(f"c{i}" for i in range(12))  # every value named: nothing is asked
    out = invoke(graph, ask(f"Quotes for {cities}, then message ops@example.com"), mode=mode)
    assert len(tool_answers(out["messages"])) == 13  # the message call was proposed
    timed_out = "timed out" in str(only_answer(out["messages"], "m").content)
    release.set()
    assert not (timed_out and sent.wait(1)), "the message was sent after its timeout answer"


async def test_a_tools_own_timeout_error_keeps_its_message() -> None:
    async def get_quote(city: str) -> str:
        raise TimeoutError("upstream read timed out after 30 s")

    tool = StructuredTool.from_function(coroutine=get_quote, name="get_quote",
                                        description="Get a quote for a city.")
    graph, _ = build("agent", [calls(("get_quote", {"city": "Paris"}, "q")),
                               AIMessage("Sorry.")], [tool],
                     ctl=controller(timeout_s=5, max_retries=0))
    out = await graph.ainvoke(ask("Quote for Paris"))
    assert "upstream read timed out after 30 s" in str(only_answer(out["messages"],
                                                                   "q").content)


def _streaming_quote(city: str) -> str:
    from langgraph.config import get_stream_writer

    get_stream_writer()({"progress": city})
    return f"quote for {city}"


@pytest.mark.parametrize("surface", SURFACES)
def test_a_sync_tool_under_a_timeout_still_streams(surface: Surface) -> None:
    """The tool runs on its own loop in a daemon thread; its stream events still arrive."""
    tool = StructuredTool.from_function(func=_streaming_quote, name="get_quote",
                                        description="Get a quote for a city.")
    tool.metadata = {"effects": "read"}
    script = [calls(("get_quote", {"city": "Paris"}, "q")), AIMessage("ok")] * 2
    graph, _ = build(surface, script, [tool], ctl=controller(timeout_s=5))

    async def stream() -> tuple[list[Any], list[str]]:
        custom = [chunk async for mode, chunk in graph.astream(
            ask("Quote for Paris"), stream_mode=["updates", "custom"]) if mode == "custom"]
        events = [e["event"] async for e in graph.astream_events(ask("Quote for Paris"),
                                                                 version="v2")]
        return custom, events

    custom, events = asyncio.run(stream())
    assert {"progress": "Paris"} in custom
    assert "on_tool_start" in events and "on_tool_end" in events
