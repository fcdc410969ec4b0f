"""The loop guard: ``LoopGuard`` on hand-built conversations, ``LoopGuardMiddleware`` in
real ``create_agent`` graphs.

Graphs run ``toolguard.testing.ScriptedChatModel`` over real LangChain tools that record
every execution with its tool call id (``InjectedToolCallId``), so a test can prove a
blocked call never ran.  Every graph's final history is checked: each tool call answered
by exactly one ``ToolMessage``.
"""

from __future__ import annotations

import asyncio
import doctest
import itertools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, ToolException
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

import toolguard.loop as loop_module
import toolguard.middleware.loop as middleware_loop_module
from toolguard.conversation import MARK_KEY
from toolguard.errors import ConfigurationError, LoopDetectedError
from toolguard.kg import KnowledgeGraph
from toolguard.loop import (
    LoopGuard,
    LoopVerdict,
    nudges_from_messages,
    plan_loop_step,
)
from toolguard.middleware import (
    GuardMiddleware,
    KGResolveMiddleware,
    PrecheckMiddleware,
    RetryControllerMiddleware,
)
from toolguard.middleware.loop import LoopGuardMiddleware
from toolguard.retry import RetryController, RetryPolicy
from toolguard.specs import ToolSpec
from toolguard.testing import ScriptedChatModel

UNAVAILABLE = "service unavailable"


# ---------------------------------------------------------------------------- tools
class Toolbox:
    """Real tools with one ``query: str`` argument that record (name, call id, query)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str, str]] = []

    def count(self, name: str, query: str | None = None) -> int:
        return sum(1 for n, _, q in self.runs if n == name and query in (None, q))

    def ids(self) -> set[str]:
        return {cid for _, cid, _ in self.runs}

    def make(
        self,
        name: str,
        answer: Callable[[str], str],
        *,
        effects: str | None = None,
        repeatable: bool = False,
        description: str | None = None,
    ) -> BaseTool:
        """A tool answering ``answer(query)``; ``answer`` may raise ``ToolException``."""
        runs = self.runs

        def run(query: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
            runs.append((name, tool_call_id, query))
            return answer(query)

        async def arun(query: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
            await asyncio.sleep(0)
            return run(query, tool_call_id)

        t = StructuredTool.from_function(func=run, coroutine=arun, name=name,
                                         description=description or f"The {name} tool.")
        t.handle_tool_error = True  # a ToolException becomes an error ToolMessage
        meta: dict[str, Any] = {}
        if effects:
            meta["effects"] = effects
        if repeatable:
            meta["repeatable"] = True
        t.metadata = meta or None
        return t

    def failing(self, name: str = "search", **kw: Any) -> BaseTool:
        def fail(query: str) -> str:
            raise ToolException(UNAVAILABLE)
        kw.setdefault("description", f"{name.capitalize()} the web for a query, e.g. the "
                                     "weather in a city.")
        return self.make(name, fail, **kw)

    def flaky(self, name: str, failures: int, **kw: Any) -> BaseTool:
        left = [failures]

        def answer(query: str) -> str:
            if left[0] > 0:
                left[0] -= 1
                raise ToolException("503 temporarily unavailable")
            return f"{name}: found {query}"
        return self.make(name, answer, **kw)

    def constant(self, name: str, text: str, **kw: Any) -> BaseTool:
        return self.make(name, lambda q: text, **kw)

    def echo(self, name: str, **kw: Any) -> BaseTool:
        return self.make(name, lambda q: f"{name} result for {q}", **kw)


@pytest.fixture
def box() -> Toolbox:
    return Toolbox()


# ---------------------------------------------------------------------------- scripts
_ids = itertools.count()


def step(*calls: tuple[str, str]) -> AIMessage:
    """One model step calling ``(tool, query)`` pairs (fresh message, unique call ids)."""
    return AIMessage("", tool_calls=[
        {"name": n, "args": {"query": q}, "id": f"call_{next(_ids)}"} for n, q in calls])


def steps(n: int, *calls: tuple[str, str]) -> list[AIMessage]:
    return [step(*calls) for _ in range(n)]


def say(text: str) -> AIMessage:
    return AIMessage(text)


def agent(script: list[Any], tools: list[BaseTool], *middleware: Any,
          checkpointer: Any = None) -> tuple[Any, ScriptedChatModel]:
    model = ScriptedChatModel(script=script)
    graph = create_agent(model=model, tools=tools, middleware=list(middleware),
                         checkpointer=checkpointer)
    return graph, model


def ask(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text)]}


def run(graph: Any, value: Any, config: Any = None, *, mode: str = "sync") -> Any:
    """``invoke``, or ``ainvoke`` in a fresh event loop (``mode="async"``)."""
    if mode == "async":
        return asyncio.run(graph.ainvoke(value, config))
    return graph.invoke(value, config)


# ---------------------------------------------------------------------------- checks
def assert_answered_once(messages: list[BaseMessage]) -> None:
    """Every tool call is answered by exactly one ToolMessage, right after its AIMessage.

    Matched per step (ids may repeat across steps), as providers check a history.
    """
    for pos, m in enumerate(messages):
        if not isinstance(m, AIMessage) or not m.tool_calls:
            continue
        answers: list[str] = []
        for later in messages[pos + 1:]:
            if not isinstance(later, ToolMessage):
                break
            answers.append(later.tool_call_id)
        expected = [str(tc["id"]) for tc in [*m.tool_calls, *m.invalid_tool_calls]]
        assert sorted(answers) == sorted(expected), (
            f"step {pos}: calls {expected} answered by {answers}")
    for pos, m in enumerate(messages):
        if isinstance(m, ToolMessage):
            before = next(x for x in reversed(messages[:pos]) if not isinstance(x, ToolMessage))
            assert isinstance(before, AIMessage) and before.tool_calls, f"orphan answer at {pos}"


def loop_answers(messages: list[BaseMessage], action: str | None = None) -> list[ToolMessage]:
    """The loop guard's answers (``artifact["toolguard"]["loop"]``), optionally by action."""
    out = []
    for m in messages:
        if isinstance(m, ToolMessage) and isinstance(m.artifact, dict):
            loop = (m.artifact.get("toolguard") or {}).get("loop")
            if loop is not None and action in (None, loop.get("action")):
                out.append(m)
    return out


def loop_kind(message: ToolMessage) -> str:
    return str(message.artifact["toolguard"]["loop"]["kind"])


def stop_message(messages: list[BaseMessage]) -> AIMessage:
    last = messages[-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert last.response_metadata.get(MARK_KEY) == "loop", last
    return last


def assert_blocked_never_ran(messages: list[BaseMessage], box: Toolbox) -> None:
    blocked = {m.tool_call_id for m in loop_answers(messages)}
    assert blocked, "nothing was blocked"
    assert not blocked & box.ids(), f"blocked calls ran: {blocked & box.ids()}"


# ---------------------------------------------------------------------------- the same failing call
@pytest.mark.parametrize(("max_repeats", "max_nudges"), [(1, 0), (2, 1), (3, 2)])
def test_failing_call_repeated_50_times_runs_at_most_max_repeats(
    box: Toolbox, max_repeats: int, max_nudges: int
) -> None:
    graph, model = agent(steps(50, ("search", "weather in Paris")), [box.failing()],
                         LoopGuardMiddleware(max_repeats=max_repeats, max_nudges=max_nudges))
    out = graph.invoke(ask("search weather in Paris"))
    msgs = out["messages"]
    assert box.count("search") == max_repeats
    assert model.position == max_repeats + max_nudges + 1  # the model was called no more
    nudges = loop_answers(msgs, "nudge")
    assert len(nudges) == max_nudges
    assert all(loop_kind(m) == "repeated_failure" and m.status == "error" for m in nudges)
    assert all("without success" in str(m.content) and UNAVAILABLE in str(m.content)
               for m in nudges)
    assert len(loop_answers(msgs, "stop")) == 1
    assert UNAVAILABLE in str(stop_message(msgs).content)
    assert out["toolguard"].get("loop_nudges", 0) == max_nudges
    assert out["toolguard"]["loop_stops"] == 1
    assert_answered_once(msgs)
    assert_blocked_never_ran(msgs, box)


def test_failing_call_in_the_recommended_chain(box: Toolbox) -> None:
    """The order ``toolguard_graphs.create_guarded_agent`` builds; the controller retries
    inside each call, the loop guard bounds the model's repeats of it."""
    weather = box.failing("get_weather", description="Get the current weather for a city.")
    sleeps: list[float] = []
    chain = [RetryControllerMiddleware(RetryController(RetryPolicy(max_retries=1),
                                                       sleep=sleeps.append)),
             KGResolveMiddleware(kg=KnowledgeGraph()), PrecheckMiddleware(),
             LoopGuardMiddleware(), GuardMiddleware()]
    graph, model = agent(steps(50, ("get_weather", "Paris")), [weather], *chain)
    out = graph.invoke(ask("What is the weather in Paris?"))
    msgs = out["messages"]
    assert box.count("get_weather") == 4  # 2 calls x (1 attempt + 1 retry)
    assert len(sleeps) == 2
    assert model.position == 4
    assert [loop_kind(m) for m in loop_answers(msgs)] == ["repeated_failure"] * 2
    counters = out["toolguard"]
    assert (counters["loop_nudges"], counters["loop_stops"]) == (1, 1)
    assert counters["checked"] == 4 and counters["precheck_proceed"] == 1
    stop_message(msgs)
    assert_answered_once(msgs)
    assert_blocked_never_ran(msgs, box)


def test_exit_behavior_error_raises_after_answering(box: Toolbox) -> None:
    saver = InMemorySaver()
    script: list[Any] = [*steps(4, ("search", "weather in Paris")),
                         say("Sorry, the search service is down.")]
    graph, model = agent(script, [box.failing()],
                         LoopGuardMiddleware(exit_behavior="error"), checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(LoopDetectedError, match="repeated_failure"):
        graph.invoke(ask("search weather in Paris"), config)
    assert box.count("search") == 2 and model.position == 4
    msgs = graph.get_state(config).values["messages"]
    assert_answered_once(msgs)  # the checkpointed history stays valid
    stop_message(msgs)
    assert_blocked_never_ran(msgs, box)
    # the thread goes on with a new user message, without raising again
    out = graph.invoke(ask("ok, what now?"), config)
    assert out["messages"][-1].content == "Sorry, the search service is down."
    assert model.position == 5


def test_exit_behavior_error_without_checkpointer(box: Toolbox) -> None:
    graph, model = agent(steps(50, ("search", "weather in Paris")), [box.failing()],
                         LoopGuardMiddleware(exit_behavior="error", max_nudges=0))
    with pytest.raises(LoopDetectedError) as info:
        graph.invoke(ask("search weather in Paris"))
    assert "search" in str(info.value)
    assert box.count("search") == 2 and model.position == 3


async def test_failing_call_async_end_and_error(box: Toolbox) -> None:
    graph, model = agent(steps(50, ("search", "weather in Paris")), [box.failing()],
                         LoopGuardMiddleware(), GuardMiddleware())
    out = await graph.ainvoke(ask("search weather in Paris"))
    assert box.count("search") == 2 and model.position == 4
    assert_answered_once(out["messages"])
    assert_blocked_never_ran(out["messages"], box)
    stop_message(out["messages"])

    graph, model = agent(steps(50, ("search", "weather in Paris")), [box.failing()],
                         LoopGuardMiddleware(exit_behavior="error"))
    with pytest.raises(LoopDetectedError):
        await graph.ainvoke(ask("search weather in Paris"))
    assert box.count("search") == 4 and model.position == 4


def test_parallel_identical_failing_calls_count_against_the_budget(box: Toolbox) -> None:
    script: list[Any] = [step(("search", "Paris")),
                         step(("search", "Paris"), ("search", "Paris"), ("search", "Paris")),
                         say("giving up")]
    graph, _ = agent(script, [box.failing()], LoopGuardMiddleware(max_repeats=2))
    out = graph.invoke(ask("search Paris"))
    msgs = out["messages"]
    assert box.count("search") == 2  # one of the three ran; two were nudged
    assert len(loop_answers(msgs, "nudge")) == 2
    assert out["toolguard"] == {"loop_nudges": 1}  # one nudge per signature and step
    assert_answered_once(msgs)
    assert_blocked_never_ran(msgs, box)


def test_stop_answers_every_pending_call_of_the_step(box: Toolbox) -> None:
    time = box.echo("get_time", effects="read")
    script = [step(("search", "Paris"), ("get_time", f"city {i}")) for i in range(10)]
    graph, model = agent(script, [box.failing(), time], LoopGuardMiddleware())
    out = graph.invoke(ask("search Paris and the time"))
    msgs = out["messages"]
    assert model.position == 4
    assert box.count("search") == 2
    assert box.count("get_time") == 3  # it ran beside the nudge, not beside the stop
    last_step = [m for m in msgs if isinstance(m, AIMessage) and m.tool_calls][-1]
    time_id = last_step.tool_calls[1]["id"]
    assert time_id not in box.ids()
    closed = [m for m in loop_answers(msgs, "stop") if m.tool_call_id == time_id]
    assert len(closed) == 1 and "Not executed" in str(closed[0].content)
    assert_answered_once(msgs)


def test_stream_events(box: Toolbox) -> None:
    graph, _ = agent(steps(50, ("search", "Paris")), [box.failing()], LoopGuardMiddleware())
    events = [chunk["toolguard"] for chunk in graph.stream(ask("search Paris"),
                                                           stream_mode="custom")
              if isinstance(chunk, dict) and "toolguard" in chunk]
    assert [(e["event"], e["action"], e["kind"]) for e in events] == [
        ("loop", "nudge", "repeated_failure"), ("loop", "stop", "repeated_failure")]


# ---------------------------------------------------------------------------- unknown tools
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_unknown_tool_again_after_the_guard_refused_it(box: Toolbox, mode: str) -> None:
    graph, model = agent(steps(50, ("hex", "hex color")), [box.echo("search")],
                         LoopGuardMiddleware(), GuardMiddleware())
    out = run(graph, ask("find the hex color"), mode=mode)
    msgs = out["messages"]
    assert model.position == 3
    answers = [m for m in msgs if isinstance(m, ToolMessage)]
    assert len(answers) == 3
    # 1: the guard's refusal; 2: the same answer with the nudge added; 3: the stop
    assert "not a valid tool" in str(answers[0].content)
    assert loop_answers([answers[0]]) == []
    assert "not a valid tool" in str(answers[1].content)
    assert "there is no tool named 'hex'" in str(answers[1].content)
    assert loop_kind(answers[1]) == "unknown_tool"
    assert answers[1].artifact["toolguard"]["hallucination"] == "type"  # the guard's verdict kept
    stop_message(msgs)
    assert out["toolguard"]["loop_nudges"] == 1 and out["toolguard"]["loop_stops"] == 1
    assert out["toolguard"]["type"] == 3
    assert box.runs == []
    assert_answered_once(msgs)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_unknown_tool_stop_raises_with_exit_behavior_error(box: Toolbox, mode: str) -> None:
    graph, model = agent(steps(50, ("hex", "hex color")), [box.echo("search")],
                         LoopGuardMiddleware(exit_behavior="error"), GuardMiddleware())
    with pytest.raises(LoopDetectedError, match="unknown_tool"):
        run(graph, ask("find the hex color"), mode=mode)
    assert model.position == 3 and box.runs == []


def test_unknown_tool_without_the_guard(box: Toolbox) -> None:
    graph, model = agent(steps(50, ("hex", "hex color")), [box.echo("search")],
                         LoopGuardMiddleware(max_unknown_tool_calls=2))
    out = graph.invoke(ask("find the hex color"))
    msgs = out["messages"]
    answers = [m for m in msgs if isinstance(m, ToolMessage)]
    assert model.position == 4
    assert ["not a valid tool" in str(m.content) for m in answers] == [True, True, False, False]
    assert [loop_kind(m) for m in loop_answers(msgs)] == ["unknown_tool", "unknown_tool"]
    stop_message(msgs)
    assert_answered_once(msgs)


# ---------------------------------------------------------------------------- oscillation
def test_oscillation_of_calls_the_guard_refuses(box: Toolbox) -> None:
    """The guard refuses identical reads (timing) and sends the run straight back to the
    model, skipping this after_model: the loop guard checks such steps before the model."""
    a = box.constant("lookup_a", "a: 42", effects="read")
    b = box.constant("lookup_b", "b: 17", effects="read")
    script = [step(("lookup_a" if i % 2 == 0 else "lookup_b", "x")) for i in range(50)]
    graph, model = agent(script, [a, b], LoopGuardMiddleware(), GuardMiddleware())
    out = graph.invoke(ask("look up x"))
    msgs = out["messages"]
    assert (box.count("lookup_a"), box.count("lookup_b")) == (1, 1)
    assert model.position == 6
    answers = [m for m in msgs if isinstance(m, ToolMessage)]
    assert [loop_kind(m) for m in loop_answers(msgs)] == ["oscillation"]
    nudged = loop_answers(msgs)[0]
    assert nudged is answers[4]
    assert "returned this result already" in str(nudged.content)  # the guard's answer ...
    assert "going round in a cycle" in str(nudged.content)  # ... with the nudge added
    assert out["toolguard"]["timing"] == 4
    assert out["toolguard"]["loop_nudges"] == 1 and out["toolguard"]["loop_stops"] == 1
    stop_message(msgs)
    assert_answered_once(msgs)


def test_a_b_a_b_oscillation(box: Toolbox) -> None:
    a = box.constant("lookup_a", "a: 42", effects="read")
    b = box.constant("lookup_b", "b: 17", effects="read")
    script = [step(("lookup_a" if i % 2 == 0 else "lookup_b", "x")) for i in range(50)]
    graph, model = agent(script, [a, b], LoopGuardMiddleware())
    out = graph.invoke(ask("look up x"))
    msgs = out["messages"]
    assert (box.count("lookup_a"), box.count("lookup_b")) == (2, 2)
    assert model.position == 6
    blocked = loop_answers(msgs)
    assert [loop_kind(m) for m in blocked] == ["oscillation", "oscillation"]
    assert "lookup_a -> lookup_b" in str(blocked[0].content)
    stop_message(msgs)
    assert_answered_once(msgs)
    assert_blocked_never_ran(msgs, box)


def test_oscillation_with_new_results_is_not_a_loop(box: Toolbox) -> None:
    counter = iter(range(1000))
    click = box.make("click_next", lambda q: "clicked")
    read = box.make("read_page", lambda q: f"page {next(counter)}", effects="read")
    script: list[Any] = [step(("click_next" if i % 2 == 0 else "read_page", "x"))
                         for i in range(12)]
    graph, _ = agent([*script, say("done")], [click, read], LoopGuardMiddleware())
    out = graph.invoke(ask("read every page x"))
    assert box.count("click_next") == 6 and box.count("read_page") == 6
    assert loop_answers(out["messages"]) == []


def test_period_three_only_when_asked(box: Toolbox) -> None:
    tools = [box.constant(n, f"{n}: same", effects="read") for n in ("a", "b", "c")]
    names = ["a", "b", "c"] * 3
    default, _ = agent([*[step((n, "x")) for n in names], say("done")], tools,
                       LoopGuardMiddleware())
    out = default.invoke(ask("x"))
    assert [loop_kind(m) for m in loop_answers(out["messages"])] == []
    assert len(box.runs) == 9

    box.runs.clear()
    three, model = agent([*[step((n, "x")) for n in names], say("done")], tools,
                         LoopGuardMiddleware(oscillation_periods=(2, 3)))
    out = three.invoke(ask("x"))
    msgs = out["messages"]
    assert len(box.runs) == 6  # a-b-c twice, then the third pass is the loop
    assert [loop_kind(m) for m in loop_answers(msgs)] == ["oscillation", "oscillation"]
    assert model.position == 8
    stop_message(msgs)


# ---------------------------------------------------------------------------- no new information
def test_reads_that_bring_nothing_new(box: Toolbox) -> None:
    docs = box.constant("search_docs", "No results found.", effects="read")
    script = [step(("search_docs", f"query {i}")) for i in range(50)]
    graph, model = agent(script, [docs], LoopGuardMiddleware())
    out = graph.invoke(ask("search the docs"))
    msgs = out["messages"]
    # 1 new + 3 identical results; the 5th is nudged; one more runs; the 7th stops
    assert box.count("search_docs") == 5
    assert model.position == 7
    assert [loop_kind(m) for m in loop_answers(msgs)] == ["no_progress"] * 2
    assert [m.artifact["toolguard"]["loop"]["action"] for m in loop_answers(msgs)] == [
        "nudge", "stop"]
    stop_message(msgs)
    assert_answered_once(msgs)
    assert_blocked_never_ran(msgs, box)


def test_empty_results_count_from_the_first(box: Toolbox) -> None:
    docs = box.constant("search_docs", "[]", effects="read")
    graph, model = agent([step(("search_docs", f"q{i}")) for i in range(50)], [docs],
                         LoopGuardMiddleware(no_progress_window=2))
    out = graph.invoke(ask("search the docs"))
    assert box.count("search_docs") == 3  # 2 empty, nudge, 1 more, stop
    assert model.position == 5
    stop_message(out["messages"])


def test_identical_results_of_an_undeclared_tool_need_identical_arguments(box: Toolbox) -> None:
    status = box.constant("status", "running")  # effects unknown: could be a write
    varied = [step(("status", f"job {i}")) for i in range(8)]
    graph, _ = agent([*varied, say("done")], [status], LoopGuardMiddleware())
    out = graph.invoke(ask("check the jobs"))
    assert box.count("status") == 8 and loop_answers(out["messages"]) == []

    box.runs.clear()
    graph, _ = agent([*steps(20, ("status", "job 1")), say("done")], [status],
                     LoopGuardMiddleware())
    out = graph.invoke(ask("check the job"))
    assert box.count("status") == 5  # 1 + 3 repeats, nudge, 1 more, stop
    assert [loop_kind(m) for m in loop_answers(out["messages"])] == ["no_progress"] * 2


def test_repeatable_tool_is_never_a_loop_when_it_succeeds(box: Toolbox) -> None:
    scroll = box.constant("scroll_down", "scrolled", repeatable=True)
    graph, _ = agent([*steps(12, ("scroll_down", "page")), say("done")], [scroll],
                     LoopGuardMiddleware())
    out = graph.invoke(ask("scroll the page"))
    assert box.count("scroll_down") == 12
    assert loop_answers(out["messages"]) == []


# ---------------------------------------------------------------------------- no false positives
def test_same_read_after_a_successful_write_is_not_a_loop(box: Toolbox) -> None:
    """deer-flow#2511: a repeat after the world changed is legitimate."""
    store: dict[str, str] = {}

    def read(query: str) -> str:
        if query not in store:
            raise ToolException(f"{query} not found")
        return store[query]

    def save(query: str) -> str:
        store[query] = "saved"
        return f"saved {query}"

    tools = [box.make("read_file", read, effects="read"),
             box.make("write_file", save, effects="write")]
    script: list[Any] = [*steps(2, ("read_file", "notes")), step(("write_file", "notes")),
                         *steps(2, ("read_file", "notes")), say("done")]
    graph, _ = agent(script, tools, LoopGuardMiddleware(max_repeats=2))
    out = graph.invoke(ask("read notes"))
    assert box.count("read_file") == 4 and box.count("write_file") == 1
    assert loop_answers(out["messages"]) == []
    assert out["messages"][-1].content == "done"

    # the control: without the write, the third identical failing read is a loop
    box.runs.clear()
    store.clear()
    script = [*steps(3, ("read_file", "notes")), say("done")]
    graph, _ = agent(script, tools, LoopGuardMiddleware(max_repeats=2))
    out = graph.invoke(ask("read notes"))
    assert box.count("read_file") == 2
    assert [loop_kind(m) for m in loop_answers(out["messages"])] == ["repeated_failure"]


def test_batch_of_writes_with_distinct_results_is_not_a_loop(box: Toolbox) -> None:
    """deer-flow#2511: RNA-seq style batches call one tool many times."""
    process = box.make("process_sample", lambda q: f"wrote {q}.bam")
    script: list[Any] = [step(("process_sample", f"sample_{i:02d}")) for i in range(20)]
    graph, _ = agent([*script, say("done")], [process], LoopGuardMiddleware())
    out = graph.invoke(ask("process all samples"))
    assert box.count("process_sample") == 20
    assert loop_answers(out["messages"]) == []


def test_retry_after_a_transient_failure_that_then_succeeds(box: Toolbox) -> None:
    flaky = box.flaky("get_quote", failures=1, effects="read")
    script: list[Any] = [*steps(2, ("get_quote", "ACME")), say("ACME is at 42")]
    graph, _ = agent(script, [flaky], LoopGuardMiddleware(max_repeats=2), GuardMiddleware())
    out = graph.invoke(ask("get quote for ACME"))
    assert box.count("get_quote") == 2
    assert loop_answers(out["messages"]) == []
    assert str(out["messages"][-1].content) == "ACME is at 42"


def test_pagination_with_different_arguments_is_not_a_loop(box: Toolbox) -> None:
    pages = box.echo("list_orders", effects="read")
    script: list[Any] = [step(("list_orders", f"page {i}")) for i in range(1, 16)]
    graph, _ = agent([*script, say("done")], [pages], LoopGuardMiddleware(), GuardMiddleware())
    out = graph.invoke(ask("list orders, every page"))
    assert box.count("list_orders") == 15
    assert loop_answers(out["messages"]) == []
    assert_answered_once(out["messages"])


def test_a_second_user_turn_starts_fresh(box: Toolbox) -> None:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "fresh"}}
    script: list[Any] = [*steps(3, ("search", "Paris")), say("The search is down."),
                         *steps(3, ("search", "Paris")), say("Still down.")]
    graph, model = agent(script, [box.failing()], LoopGuardMiddleware(), checkpointer=saver)
    out = graph.invoke(ask("search Paris"), config)
    assert box.count("search") == 2 and len(loop_answers(out["messages"], "nudge")) == 1
    out = graph.invoke(ask("please try the search for Paris again"), config)
    msgs = out["messages"]
    assert box.count("search") == 4  # two more runs: the count started again
    assert len(loop_answers(msgs, "nudge")) == 2  # one per turn
    assert loop_answers(msgs, "stop") == []
    assert msgs[-1].content == "Still down."
    assert model.position == len(script)
    assert_answered_once(msgs)


# ---------------------------------------------------------------------------- thresholds
def test_per_tool_thresholds(box: Toolbox) -> None:
    script: list[Any] = [*steps(6, ("search", "Paris")), *steps(6, ("fetch", "Paris"))]
    mw = LoopGuardMiddleware(tool_thresholds={"search": 4}, max_nudges=0)
    graph, _ = agent([*script[:6], say("next")], [box.failing(), box.failing("fetch")], mw)
    graph.invoke(ask("search Paris"))
    assert box.count("search") == 4
    graph, _ = agent(script[6:], [box.failing(), box.failing("fetch")], mw)
    out = graph.invoke(ask("fetch Paris"))
    assert box.count("fetch") == 2  # the default max_repeats
    stop_message(out["messages"])

    box.runs.clear()
    mapping = LoopGuardMiddleware(tool_thresholds={"search": {"max_repeats": 3}}, max_nudges=0)
    graph, _ = agent(steps(10, ("search", "Paris")), [box.failing()], mapping)
    graph.invoke(ask("search Paris"))
    assert box.count("search") == 3


def test_ignore_args_compares_calls_without_free_text(box: Toolbox) -> None:
    script = [AIMessage("", tool_calls=[{"name": "search", "id": f"r{i}", "args": {
        "query": "Paris", "description": f"attempt number {i}"}}]) for i in range(20)]
    runs: list[str] = []

    def run(query: str, description: str = "") -> str:
        runs.append(query)
        raise ToolException(UNAVAILABLE)

    t = StructuredTool.from_function(func=run, name="search", description="Search.")
    t.handle_tool_error = True
    graph, _ = agent(script, [t], LoopGuardMiddleware(ignore_args=["description"]))
    graph.invoke(ask("search Paris"))
    assert len(runs) == 2
    runs.clear()
    graph, _ = agent(script[:8], [t], LoopGuardMiddleware(kinds=["repeated_failure"]))
    with pytest.raises(IndexError):  # never a loop: the script runs out
        graph.invoke(ask("search Paris"))
    assert len(runs) == 8


# ---------------------------------------------------------------------------- checkpoints
def test_nudges_survive_a_checkpoint_and_a_new_process(box: Toolbox) -> None:
    """Nudges are in checkpointed state: a fresh agent resuming the thread stops the loop."""
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "resume"}}
    answers: list[str] = []

    def ask_human(query: str) -> str:
        answer = interrupt({"question": query})
        answers.append(str(answer))
        return str(answer)

    def tools() -> list[BaseTool]:
        # reading the user's answer changes nothing: the same failing call is still a loop
        return [box.failing(), box.make("ask_human", ask_human, effects="read")]

    first = [*steps(3, ("search", "Paris")), step(("ask_human", "the search is down: go on?"))]
    graph, _ = agent(first, tools(), LoopGuardMiddleware(), checkpointer=saver)
    out = graph.invoke(ask("search Paris"), config)
    assert "__interrupt__" in out
    state = graph.get_state(config).values
    record = state["toolguard_loop"]
    assert list(record["nudges"].values()) == [1]
    assert next(iter(record["nudges"])).startswith("repeated_failure:search:")
    assert state["toolguard"] == {"loop_nudges": 1}

    # a new middleware instance and model: what it knows comes from the checkpoint
    second = [*steps(5, ("search", "Paris"))]
    graph2, model2 = agent(second, tools(), LoopGuardMiddleware(), checkpointer=saver)
    out = graph2.invoke(Command(resume="yes, try again"), config)
    msgs = out["messages"]
    assert answers == ["yes, try again"]
    assert model2.position == 1  # the next identical call is the stop: no second nudge
    assert box.count("search") == 2
    stop_message(msgs)
    assert out["toolguard"] == {"loop_nudges": 1, "loop_stops": 1}
    assert_answered_once(msgs)
    assert_blocked_never_ran(msgs, box)


def test_learned_tool_traits_are_in_state(box: Toolbox) -> None:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "traits"}}
    tools = [box.echo("get_time", effects="read"), box.echo("scroll", repeatable=True),
             box.echo("plain")]
    graph, _ = agent([say("hi")], tools, LoopGuardMiddleware(), checkpointer=saver)
    graph.invoke(ask("hello"), config)
    assert graph.get_state(config).values["toolguard_loop_tools"] == {
        "get_time": {"effects": "read"}, "scroll": {"repeatable": True}}


def test_stored_nudges_are_honoured_for_their_turn_only() -> None:
    """The checkpointed record counts, even when the messages no longer show the nudge."""
    q = {"query": "Paris"}
    msgs: list[BaseMessage] = [HumanMessage("search Paris", id="h1"),
                               _ai(("search", q, "a")), _fail("a"),
                               _ai(("search", q, "b")), _fail("b"),
                               _ai(("search", q, "c"))]
    [probe] = LoopGuard().check(msgs)
    mw = LoopGuardMiddleware()
    runtime: Any = SimpleNamespace(stream_writer=None)

    def state(**extra: Any) -> Any:
        return {"messages": msgs, **extra}

    fresh = mw.after_model(state(), runtime)
    assert fresh is not None and "jump_to" not in fresh
    assert fresh["toolguard_loop"] == {"turn": "h1", "nudges": {probe.signature: 1},
                                       "stop": None}
    record = {"turn": "h1", "nudges": {probe.signature: 1}, "stop": None}
    stopped = mw.after_model(state(toolguard_loop=record), runtime)
    assert stopped is not None and stopped["jump_to"] == "end"
    assert stopped["toolguard_loop"]["stop"]["signature"] == probe.signature
    again = mw.after_model(state(toolguard_loop={**record, "turn": "h0"}), runtime)
    assert again is not None and "jump_to" not in again


# ---------------------------------------------------------------------------- engine
@pytest.mark.parametrize("module", [loop_module, middleware_loop_module])
def test_docstring_examples_run(module: Any) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted >= 1


def _ai(*calls: tuple[str, dict[str, Any], str]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in calls])


def _fail(call_id: str, text: str = "Error: timeout") -> ToolMessage:
    return ToolMessage(text, tool_call_id=call_id, status="error")


def _ok(call_id: str, text: str) -> ToolMessage:
    return ToolMessage(text, tool_call_id=call_id)


READ = [ToolSpec(name="search", effects="read"), ToolSpec(name="get", effects="read"),
        ToolSpec(name="save", effects="write")]


def test_engine_repeated_failure_verdict() -> None:
    q = {"q": "x"}
    msgs: list[BaseMessage] = [HumanMessage("find x"),
                               _ai(("search", q, "a")), _fail("a", "Error: timeout 1"),
                               _ai(("search", {"q": "other"}, "b")), _fail("b"),
                               _ai(("search", q, "c")), _fail("c", "Error: timeout 2"),
                               _ai(("search", q, "d"))]
    guard = LoopGuard(tools=READ)
    [v] = guard.check(msgs)
    assert (v.kind, v.action, v.tool_call_id, v.count, v.threshold, v.nudges) == (
        "repeated_failure", "nudge", "d", 2, 2, 0)
    assert v.last_error == "Error: timeout 2"
    assert v.signature.startswith("repeated_failure:search:")
    assert "without success" in v.feedback() and "ask the user" in v.feedback()
    [stop] = guard.check(msgs, nudges={v.signature: 1})
    assert stop.action == "stop" and stop.nudges == 1
    assert LoopGuard(max_repeats=3, no_progress_window=4, tools=READ).check(msgs) == []
    assert LoopVerdict.model_validate_json(v.model_dump_json()) == v


def test_engine_world_changes() -> None:
    q = {"q": "x"}
    before: list[BaseMessage] = [HumanMessage("find x"),
                                 _ai(("get", q, "a")), _fail("a"),
                                 _ai(("get", q, "b")), _fail("b")]
    tail = [_ai(("get", q, "z"))]
    read_between = [_ai(("search", {"q": "y"}, "r")), _ok("r", "y found")]
    write_between = [_ai(("save", {"q": "y"}, "w")), _ok("w", "saved")]
    failed_write = [_ai(("save", {"q": "y"}, "w")), _fail("w")]
    undeclared = [_ai(("other", {"q": "y"}, "o")), _ok("o", "done")]
    guard = LoopGuard(tools=READ)
    assert [v.kind for v in guard.check([*before, *read_between, *tail])] == [
        "repeated_failure"]
    assert guard.check([*before, *write_between, *tail]) == []
    assert [v.kind for v in guard.check([*before, *failed_write, *tail])] == [
        "repeated_failure"]
    assert guard.check([*before, *undeclared, *tail]) == []  # unknown effects: may write
    # ... unless the caller says the tool only reads
    assert guard.check([*before, *undeclared, *tail],
                       tools=[ToolSpec(name="other", effects="read")]) != []


def test_engine_scope_and_steps() -> None:
    q = {"q": "x"}
    history: list[BaseMessage] = [HumanMessage("find x"), _ai(("get", q, "a")), _fail("a"),
                                  _ai(("get", q, "b")), _fail("b")]
    guard = LoopGuard(tools=READ)
    assert guard.check([*history, _ai(("get", q, "c"))]) != []
    # a new user turn starts fresh
    assert guard.check([*history, HumanMessage("try again"), _ai(("get", q, "c"))]) == []
    # the latest step is over (a text answer follows): nothing to check
    assert guard.check([*history, AIMessage("I give up")]) == []
    # calls a tool already answered get no verdict
    assert guard.check([*history, _ai(("get", q, "c")), _fail("c")]) == []


def test_engine_reused_call_ids_are_matched_per_step() -> None:
    q = {"q": "x"}
    msgs: list[BaseMessage] = [HumanMessage("find x")]
    for _ in range(2):
        msgs += [_ai(("get", q, "call_0")), _fail("call_0")]
    msgs.append(_ai(("get", q, "call_0")))
    [v] = LoopGuard(tools=READ).check(msgs)
    assert v.count == 2


def test_engine_unknown_tool_from_toolnode_and_guard_answers() -> None:
    node = ToolMessage("Error: hex is not a valid tool, try one of [search].",
                       tool_call_id="a", status="error")
    msgs: list[BaseMessage] = [HumanMessage("hex"), _ai(("hex", {"c": 1}, "a")), node,
                               _ai(("hex", {"c": 2}, "b"))]
    [v] = LoopGuard().check(msgs)
    assert (v.kind, v.count, v.answered) == ("unknown_tool", 1, False)
    # an answer another guard already wrote: the verdict says so, the plan extends it
    verdict = {"hallucination": "type", "evidence": [{"code": "unknown_tool"}]}
    refusal = ToolMessage("Error: 'hex' is not a valid tool", tool_call_id="b", status="error",
                          id="msg-b", artifact={"toolguard": verdict},
                          response_metadata={"toolguard": verdict})
    msgs2 = [*msgs, refusal]
    [v2] = LoopGuard().check(msgs2)
    assert v2.answered and v2.kind == "unknown_tool"
    plan = plan_loop_step(msgs2, [v2])
    [replaced] = plan.messages
    assert isinstance(replaced, ToolMessage) and replaced.id == "msg-b"
    assert str(replaced.content).startswith("Error: 'hex' is not a valid tool")
    assert "there is no tool named 'hex'" in str(replaced.content)
    assert replaced.artifact["toolguard"]["hallucination"] == "type"
    assert replaced.artifact["toolguard"]["loop"]["kind"] == "unknown_tool"
    assert replaced.response_metadata["toolguard"]["loop"]["kind"] == "unknown_tool"
    assert plan.nudged == [v2.signature] and not plan.stop


def test_engine_plan_stop_answers_every_pending_call() -> None:
    q = {"q": "x"}
    last = _ai(("get", q, "c"), ("search", {"q": "y"}, "d"))
    last.invalid_tool_calls = [{"name": "get", "args": "{bad", "id": "e", "error": None,
                                "type": "invalid_tool_call"}]
    msgs: list[BaseMessage] = [HumanMessage("x"), _ai(("get", q, "a")), _fail("a"),
                               _ai(("get", q, "b")), _fail("b"), last]
    guard = LoopGuard(max_nudges=0, tools=READ)
    verdicts = guard.check(msgs)
    assert [(v.tool_call_id, v.action) for v in verdicts] == [("c", "stop")]
    plan = plan_loop_step(msgs, verdicts)
    assert plan.stop and plan.stop_verdict == verdicts[0]
    assert [getattr(m, "tool_call_id", None) for m in plan.messages] == ["c", "d", "e", None]
    final = plan.messages[-1]
    assert isinstance(final, AIMessage) and final.response_metadata[MARK_KEY] == "loop"
    assert_answered_once([*msgs, *plan.messages])


def test_engine_nudges_are_read_from_the_answers() -> None:
    q = {"q": "x"}
    msgs: list[BaseMessage] = [HumanMessage("x"), _ai(("get", q, "a")), _fail("a"),
                               _ai(("get", q, "b")), _fail("b"),
                               _ai(("get", q, "c"), ("get", q, "d"))]
    guard = LoopGuard(tools=READ)
    verdicts = guard.check(msgs)
    assert [v.action for v in verdicts] == ["nudge", "nudge"]
    plan = plan_loop_step(msgs, verdicts)
    msgs += plan.messages
    assert nudges_from_messages(msgs) == {verdicts[0].signature: 1}  # one per step
    msgs.append(_ai(("get", q, "e")))
    assert [v.action for v in guard.check(msgs)] == ["stop"]
    # a new turn forgets them
    assert nudges_from_messages([*msgs, HumanMessage("again")]) == {}


def test_engine_oscillation_and_no_progress() -> None:
    msgs: list[BaseMessage] = [HumanMessage("x")]
    for i in range(2):
        msgs += [_ai(("get", {"q": "a"}, f"a{i}")), _ok(f"a{i}", "A"),
                 _ai(("search", {"q": "b"}, f"b{i}")), _ok(f"b{i}", "B")]
    [v] = LoopGuard(tools=READ).check([*msgs, _ai(("get", {"q": "a"}, "n"))])
    assert (v.kind, v.cycle, v.count) == ("oscillation", ("get", "search"), 2)
    # continuing with B, or a third call, is not this cycle
    assert LoopGuard(tools=READ).check([*msgs, _ai(("search", {"q": "b"}, "n"))]) == []
    assert LoopGuard(tools=READ, kinds=["no_progress"]).check(
        [*msgs, _ai(("get", {"q": "a"}, "n"))]) == []

    docs: list[BaseMessage] = [HumanMessage("x")]
    for i in range(4):
        docs += [_ai(("search", {"q": str(i)}, f"s{i}")), _ok(f"s{i}", "nothing")]
    [np] = LoopGuard(tools=READ).check([*docs, _ai(("search", {"q": "new"}, "n"))])
    assert (np.kind, np.count, np.threshold, np.signature) == (
        "no_progress", 3, 3, "no_progress:search")
    assert LoopGuard(tools=READ, no_progress_window=4).check(
        [*docs, _ai(("search", {"q": "new"}, "n"))]) == []
    assert LoopGuard(tools=READ, tool_thresholds={"search": {"no_progress_window": 4}}).check(
        [*docs, _ai(("search", {"q": "new"}, "n"))]) == []


@pytest.mark.parametrize(("options", "message"), [
    ({"max_repeats": 0}, "max_repeats must be an integer >= 1, got 0"),
    ({"max_unknown_tool_calls": 0}, "max_unknown_tool_calls must be an integer >= 1"),
    ({"no_progress_window": 0}, "no_progress_window must be an integer >= 1"),
    ({"oscillation_cycles": 1}, "oscillation_cycles must be an integer >= 2"),
    ({"max_nudges": -1}, "max_nudges must be an integer >= 0"),
    ({"max_repeats": True}, "max_repeats must be an integer >= 1"),
    ({"oscillation_periods": (1,)}, r"oscillation_periods must hold integers in \[2, 4\]"),
    ({"oscillation_periods": (5,)}, r"oscillation_periods must hold integers in \[2, 4\]"),
    ({"kinds": ["loops"]}, "unknown loop kind 'loops'"),
    ({"tool_thresholds": {"search": 0}}, r"tool_thresholds\['search'\]\['max_repeats'\] must"),
    ({"tool_thresholds": {"search": {"retries": 2}}}, "unknown keys"),
    ({"ignore_args": "description"}, "ignore_args must be a collection"),
    ({"tools": [42]}, "tools:"),
    ({"oscillation_periods": 2}, "oscillation_periods must be a collection"),
    ({"tool_thresholds": [("search", 2)]}, "tool_thresholds must map tool names"),
])
def test_engine_options_are_validated(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        LoopGuard(**options)
    with pytest.raises(ConfigurationError, match=message):
        LoopGuardMiddleware(**options)


def test_middleware_options_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="exit_behavior must be 'end' or 'error'"):
        LoopGuardMiddleware(exit_behavior="continue")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="guard= alone"):
        LoopGuardMiddleware(guard=LoopGuard(), max_repeats=3)
    with pytest.raises(ConfigurationError, match="max_repeatz"):
        LoopGuardMiddleware(max_repeatz=3)
    guard = LoopGuard(max_repeats=5)
    assert LoopGuardMiddleware(guard=guard).guard is guard
