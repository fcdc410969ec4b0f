"""Benchmark: toolguard's overhead per tool call (deterministic path), from one run.

Each number comes from a named :class:`Measurement` in :data:`MEASUREMENTS`: ``check``
(p50 / p99 of ``Guard.check`` per call over BFCL gold calls), ``step`` (a ``ToolNode`` step
with and without ``GuardNode``) and ``agent_step`` (one ``create_agent`` step with and
without ``GuardMiddleware``, real BFCL tools); the two variants of a pair are timed
alternately after warm-up (:func:`time_pair`).  ``--sweeps`` (:data:`SWEEPS`) adds
``Guard.check`` by history length (:func:`bench_history_check`), the ``create_agent`` ratio
by turn (:func:`bench_history_agent`), by tool count
(:func:`toolguard_evals.bench_tools.sweep_tools`) and by KG size
(:func:`toolguard_evals.bench_kg.sweep_store`).

Run: ``toolguard bench overhead [--sweeps] [--json PATH]``.  Numbers depend on the machine.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import statistics
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel, Field
from rich.table import Table

from toolguard import Guard, GuardMiddleware
from toolguard.nodes import GuardNode
from toolguard.testing import ScriptedChatModel
from toolguard_evals import bench_kg, bench_tools
from toolguard_evals.runner import print_table, quantile, write_json

AGENT_EPISODE: Final = "multi_turn_base_56"
"""The BFCL episode of ``agent_step``: its first user turn and first gold call
(``get_zipcode_based_on_city(city='San Francisco')``, read-only, grounded), with the 22
``VehicleControlAPI`` tools of that turn."""


FINAL_ANSWER: Final = "Done."
"""The scripted model's answer once the ``agent_step`` case's tool has run."""


HISTORY_SIZES: Final = (10, 100, 1000, 10000)
"""Messages in the history at the checks of the ``history`` sweep."""
AGENT_TURNS: Final = (10, 100, 400)
"""Turns of the long ``create_agent`` conversation around which the ``agent_by_turn`` sweep
compares a guarded step with a plain one."""


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Sizes of one benchmark run.

    Attributes:
        calls: ``Guard.check`` calls timed, >= 1.
        steps: Timed steps per variant of each pair, >= 1.
        warmup: Untimed steps per variant before timing, >= 0.
        history_sizes: ``history`` sweep: messages in the checked history, each >= 2.
        history_checks: ``history`` sweep: warm checks timed per history size, >= 1.
        memory_checks: ``history`` sweep: further checks per size whose memory peak is
            traced (``tracemalloc``, untimed), >= 1.
        agent_turns: ``agent_by_turn`` sweep: the turns of the long conversation around
            which steps are compared, each >= 1.
        agent_window: ``agent_by_turn`` sweep: consecutive turns timed around each of
            ``agent_turns`` (from ``turn - window // 2``, never turn 1), >= 1.
        tool_sizes: ``tools`` sweep: tool counts (:func:`bench_tools.sweep_tools`), >= 1.
        tool_reps: ``tools`` sweep: timed runs per measure, >= 1.
        kg_sizes: ``kg`` sweep: KG sizes in triples (:func:`bench_kg.sweep_store`), >= 1.
        kg_turns: ``kg`` sweep: turns timed per KG size, >= 1.
    """

    calls: int = 2000
    steps: int = 300
    warmup: int = 20
    history_sizes: tuple[int, ...] = HISTORY_SIZES
    history_checks: int = 50
    memory_checks: int = 5
    agent_turns: tuple[int, ...] = AGENT_TURNS
    agent_window: int = 20
    tool_sizes: tuple[int, ...] = bench_tools.SIZES
    tool_reps: int = 20
    kg_sizes: tuple[int, ...] = bench_kg.STORE_SIZES
    kg_turns: int = 100

    def __post_init__(self) -> None:
        if self.calls < 1 or self.steps < 1 or self.warmup < 0:
            raise ValueError("calls and steps must be >= 1, warmup >= 0")
        if min((self.history_checks, self.memory_checks, self.agent_window, self.tool_reps,
                self.kg_turns, *self.agent_turns, *self.tool_sizes, *self.kg_sizes)) < 1 or (
                self.history_sizes and min(self.history_sizes) < 2):
            raise ValueError("sweep sizes, turns and repetitions must be >= 1 "
                             "(history sizes >= 2)")


@dataclass(frozen=True, slots=True)
class Measurement:
    """One named measurement of the benchmark.

    Attributes:
        name: Key of its numbers in the report (and the JSON).
        title: What it measures, for the table.
        run: ``(config) -> numbers`` (JSON-able).
        rows: ``numbers -> [(label, value text), ...]`` for the summary table (none: the
            measurement has no section there).
        tables: ``numbers -> [Table, ...]`` printed after the summary table (a sweep's
            detail), or ``None``.
    """

    name: str
    title: str
    run: Callable[[BenchConfig], Any]
    rows: Callable[[Any], list[tuple[str, str]]]
    tables: Callable[[Any], list[Table]] | None = None


# ---------------------------------------------------------------------------- pairs
def time_pair(plain: Callable[[], Any], guarded: Callable[[], Any], *, steps: int,
              warmup: int) -> tuple[list[float], list[float]]:
    """Time ``plain()`` and ``guarded()`` alternately; milliseconds per call of each.

    ``warmup`` untimed calls of each first; then ``steps`` timed calls of each, plain first
    on even steps and guarded first on odd ones.
    """
    for _ in range(warmup):
        plain()
        guarded()
    tp: list[float] = []
    tg: list[float] = []
    for i in range(steps):
        order = ((plain, tp), (guarded, tg)) if i % 2 == 0 else ((guarded, tg), (plain, tp))
        for fn, sink in order:
            t0 = time.perf_counter()
            fn()
            sink.append((time.perf_counter() - t0) * 1000)
    return tp, tg


def pair_summary(plain_ms: Sequence[float], guarded_ms: Sequence[float]) -> dict[str, float]:
    """p50 / p99 of each variant (ms), ``ratio`` of the p50s and ``overhead_ms`` between them."""
    p50p, p50g = quantile(plain_ms, 0.5), quantile(guarded_ms, 0.5)
    return {"plain_p50_ms": p50p, "plain_p99_ms": quantile(plain_ms, 0.99),
            "guarded_p50_ms": p50g, "guarded_p99_ms": quantile(guarded_ms, 0.99),
            "ratio": p50g / p50p, "overhead_ms": p50g - p50p, "steps": len(plain_ms)}


def _pair_rows(plain: str, guarded: str) -> Callable[[Mapping[str, Any]], list[tuple[str, str]]]:
    def rows(s: Mapping[str, Any]) -> list[tuple[str, str]]:
        return [(f"{plain} p50 / p99 (ms)", f"{s['plain_p50_ms']:.3f} / {s['plain_p99_ms']:.3f}"),
                (f"{guarded} p50 / p99 (ms)",
                 f"{s['guarded_p50_ms']:.3f} / {s['guarded_p99_ms']:.3f}"),
                ("ratio guarded / plain (p50)", f"{s['ratio']:.2f}"),
                ("overhead per step p50 (ms)", f"{s['overhead_ms']:.3f}")]

    return rows


# ---------------------------------------------------------------------------- Guard.check
def _cases(limit: int) -> list[tuple[list[Any], list[BaseMessage]]]:
    try:
        from toolguard_evals.bfcl import gold_calls, load_category
    except ImportError:
        load_category = None  # type: ignore[assignment]
    out: list[tuple[list[Any], list[BaseMessage]]] = []
    if load_category is not None:
        try:
            for cat in ("simple_python", "multiple", "live_simple", "live_multiple"):
                for rec in load_category(cat)[: limit // 4]:
                    calls = gold_calls(rec)
                    user = "\n".join(
                        t["content"] for turn in rec["question"] for t in turn
                        if t.get("role") == "user"
                    )
                    ai = AIMessage("", tool_calls=[
                        {"name": n, "args": a, "id": f"c{i}"} for i, (n, a) in enumerate(calls[:1])
                    ])
                    out.append((rec["function"], [HumanMessage(user), ai]))
        except (FileNotFoundError, RuntimeError):
            out = []
    if not out:
        fn = {"name": "get_weather", "description": "Get the current weather for a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                             "unit": {"type": "string", "enum": ["c", "f"]}},
                             "required": ["city"]}}
        msgs: list[BaseMessage] = [
            HumanMessage("What's the weather in Paris in celsius?"),
            AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris",
                                                                       "unit": "c"}, "id": "1"}]),
        ]
        out = [([fn], msgs)] * limit
    return out


def bench_check(calls: int) -> dict[str, float]:
    """Time ``Guard.check`` per call; returns p50/p99/mean in ms and the case count."""
    cases = _cases(max(calls // 4, 40))
    guards = [Guard(tools) for tools, _ in cases]  # tool specs are built once, like an agent
    for g, (_, msgs) in zip(guards, cases, strict=True):  # warm-up
        g.check(msgs)
    times: list[float] = []
    i = 0
    while len(times) < calls:
        g, (_, msgs) = guards[i % len(cases)], cases[i % len(cases)]
        t0 = time.perf_counter()
        g.check(msgs)
        times.append((time.perf_counter() - t0) * 1000)
        i += 1
    return {"p50_ms": quantile(times, 0.5), "p99_ms": quantile(times, 0.99),
            "mean_ms": statistics.fmean(times), "n": len(times), "distinct_cases": len(cases)}


def _check_rows(c: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [("Guard.check per call p50 (ms)", f"{c['p50_ms']:.3f}"),
            ("Guard.check per call p99 (ms)", f"{c['p99_ms']:.3f}"),
            ("calls timed / distinct BFCL cases", f"{c['n']} / {c['distinct_cases']}")]


# ---------------------------------------------------------------------------- ToolNode step
@tool
def noop(x: int) -> str:
    """Do nothing and return ok."""
    return "ok"


def _graphs() -> tuple[Any, Any]:
    plain = StateGraph(MessagesState)
    plain.add_node("tools", ToolNode([noop]))
    plain.add_edge(START, "tools")
    plain.add_edge("tools", END)
    node = GuardNode(Guard([noop]), model_node=END)
    guarded = StateGraph(MessagesState)
    guarded.add_node("guard", node)
    guarded.add_node("tools", ToolNode([noop]))
    guarded.add_edge(START, "guard")
    guarded.add_conditional_edges("guard", node.route, ["tools", END])
    guarded.add_edge("tools", END)
    return plain.compile(), guarded.compile()


def bench_step(steps: int, warmup: int = 20) -> dict[str, float]:
    """A plain vs a guarded ``ToolNode`` step (ms), interleaved (see :func:`pair_summary`)."""
    plain, guarded = _graphs()
    state = {"messages": [HumanMessage("call noop with x=3"),
                          AIMessage("", tool_calls=[{"name": "noop", "args": {"x": 3},
                                                     "id": "n1"}])]}
    out: dict[str, Any] = {}
    tp, tg = time_pair(lambda: out.__setitem__("plain", plain.invoke(state)),
                       lambda: out.__setitem__("guarded", guarded.invoke(state)),
                       steps=steps, warmup=warmup)
    assert out["plain"]["messages"][-1].content == out["guarded"]["messages"][-1].content == "ok"
    return pair_summary(tp, tg)


# ---------------------------------------------------------------------------- agent step
@dataclass(frozen=True, slots=True)
class AgentCase:
    """What one ``create_agent`` step runs: a user message, the model's call, real tools."""

    source: str
    user: str
    call: dict[str, Any]
    tools: list[BaseTool]


def _bfcl_agent_case() -> AgentCase:
    """:data:`AGENT_EPISODE`'s first turn with its tools on a live BFCL environment."""
    from toolguard.specs import gorilla_to_json_schema
    from toolguard_evals import bfcl
    from toolguard_evals.demo.data import episodes_by_id
    from toolguard_evals.demo.tools import method_effects

    (episode,) = episodes_by_id([AGENT_EPISODE])
    env = bfcl.BFCLEnvironment.for_episode(episode)
    parsed = bfcl.parse_call(episode.gold[0][0])

    def make(doc: Mapping[str, Any]) -> BaseTool:
        name = str(doc["name"])
        schema = gorilla_to_json_schema(doc.get("parameters") or {})
        schema["type"] = "object"
        schema.setdefault("properties", {})

        def run(**kwargs: Any) -> str:
            return env.call(name, kwargs).content

        return StructuredTool.from_function(
            func=run, name=name, description=str(doc.get("description") or ""),
            args_schema=schema, metadata={"effects": method_effects(
                env.methods.get(name), name)})

    return AgentCase(source=f"BFCL {episode.id}",
                     user="\n".join(str(m["content"]) for m in episode.turns[0]),
                     call={"name": parsed.name, "args": env.bind(parsed)},
                     tools=[make(d) for d in episode.tools_at(0)])


def get_weather(city: str, unit: str = "c") -> str:
    """Get the current weather for a city (``unit``: ``c`` or ``f``)."""
    return f'{{"city": "{city}", "temperature": {21 if unit == "c" else 70}, "unit": "{unit}"}}'


def agent_case() -> AgentCase:
    """The ``agent_step`` case: :data:`AGENT_EPISODE` with ``bfcl-eval``, else a weather tool."""
    try:
        return _bfcl_agent_case()
    except (ImportError, FileNotFoundError, RuntimeError):
        return AgentCase(source="built-in weather tool",
                         user="What's the weather in Paris in celsius?",
                         call={"name": "get_weather", "args": {"city": "Paris", "unit": "c"}},
                         tools=[StructuredTool.from_function(get_weather)])


def _scripted(case: AgentCase, n: int) -> ScriptedChatModel:
    """A model for ``n`` steps: the call after the user message, then a text answer."""
    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(FINAL_ANSWER)
        return AIMessage("", tool_calls=[{**case.call, "id": "call_0", "type": "tool_call"}])

    return ScriptedChatModel(script=[reply] * (2 * n))


def agents(case: AgentCase, steps: int) -> tuple[Any, Any]:
    """The pair ``agent_step`` times: a plain ``create_agent`` and one with ``GuardMiddleware()``.

    Each has its own scripted model for ``steps`` steps (:func:`_scripted`) and ``case.tools``.
    """
    plain = create_agent(_scripted(case, steps), case.tools)
    guarded = create_agent(_scripted(case, steps), case.tools, middleware=[GuardMiddleware()])
    return plain, guarded


def bench_agent_step(steps: int, warmup: int = 20) -> dict[str, Any]:
    """A plain vs a ``GuardMiddleware`` ``create_agent`` step (ms), interleaved.

    Raises:
        AssertionError: The two agents did not execute the same tool call with the same
            result (the guard must allow the benchmark's call).
    """
    case = agent_case()
    plain, guarded = agents(case, steps + warmup)
    state: Any = {"messages": [HumanMessage(case.user)]}
    out: dict[str, Any] = {}
    tp, tg = time_pair(lambda: out.__setitem__("plain", plain.invoke(state)),
                       lambda: out.__setitem__("guarded", guarded.invoke(state)),
                       steps=steps, warmup=warmup)
    answers = {k: [m.content for m in v["messages"] if isinstance(m, ToolMessage)]
               for k, v in out.items()}
    assert answers["plain"] == answers["guarded"] and len(answers["plain"]) == 1, answers
    assert out["guarded"]["messages"][-1].content == FINAL_ANSWER
    return {**pair_summary(tp, tg), "case": case.source, "tools": len(case.tools),
            "call": case.call["name"]}


def _agent_rows(s: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [("case (tools offered)", f"{s['case']}: {s['call']} ({s['tools']})"),
            *_pair_rows("plain create_agent step", "GuardMiddleware step")(s)]


# ---------------------------------------------------------------------------- history sweep
_CITIES: Final = ("Paris", "Oslo", "Lima", "Quito")
_LOOKUP_TOOLS: Final = 10


def records_json(record_id: str) -> str:
    """The ~1 KB JSON a lookup tool returns for ``record_id`` (deterministic).

    7 records ``{record_id}.0`` ... ``{record_id}.6``: a city, a number, a date and a note.
    """
    rng = random.Random(record_id)
    return json.dumps({"query": record_id, "records": [
        {"id": f"{record_id}.{k}", "city": rng.choice(_CITIES), "value": rng.randint(1, 99999),
         "updated": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
         "note": "lorem ipsum dolor sit amet " * 2} for k in range(7)]})


def lookup_docs() -> list[dict[str, Any]]:
    """The ten read-only lookup tools of the ``history`` sweep, as JSON-schema docs."""
    return [{"name": f"tool_{i}",
             "description": f"Tool number {i} that looks up records of kind {i}.",
             "parameters": {"type": "object", "required": ["record_id"], "properties": {
                 "record_id": {"type": "string"}, "city": {"type": "string"}}}}
            for i in range(_LOOKUP_TOOLS)]


def _call(i: int, record_id: str, city: str | None, call_id: str) -> AIMessage:
    args = {"record_id": record_id} if city is None else {"record_id": record_id, "city": city}
    return AIMessage("", tool_calls=[{"name": f"tool_{i % _LOOKUP_TOOLS}", "args": args,
                                      "id": call_id}], id=f"ai-{call_id}")


def history(n: int) -> list[BaseMessage]:
    """``n - 1`` messages: a request, then lookup calls each answered by ~1 KB JSON."""
    msgs: list[BaseMessage] = [HumanMessage("Look up record R0-1 in Paris please.", id="h0")]
    i = 0
    while len(msgs) + 2 <= n - 1:
        rid = f"R{i}-1"
        msgs.append(_call(i, rid, None, f"c{i}"))
        msgs.append(ToolMessage(records_json(rid), tool_call_id=f"c{i}", id=f"t{i}"))
        i += 1
    if len(msgs) < n - 1:
        msgs.append(AIMessage("Here is what I found.", id="a-text"))
    return msgs


def bench_history_check(sizes: Sequence[int], checks: int,
                        memory_checks: int) -> list[dict[str, Any]]:
    """``Guard.check`` on a growing conversation with ~1 KB JSON tool results, per size.

    Per size: a new ``Guard`` over :func:`lookup_docs`; :func:`history` of ``size - 1``
    messages; then steps, each appending a lookup call whose ``record_id`` comes from the
    latest result (the checked message: the history then holds ``size`` messages at the
    first step), checking the whole history (no copy), and appending the call's result.
    The first check is timed apart (``cold_ms``: the whole history read, tools compiled);
    the next ``checks`` are timed (``p50_ms``, ``p99_ms``); ``memory_checks`` more are
    traced with ``tracemalloc`` (untimed): the peak of memory allocated during one check
    above what was allocated before it (``mem_peak_kb`` median, ``mem_peak_max_kb``).
    ``allowed`` is the share of checked calls the guard allowed.
    """
    rows: list[dict[str, Any]] = []
    for size in sizes:
        guard = Guard(lookup_docs())
        msgs = history(size)
        latest = next((m for m in reversed(msgs) if isinstance(m, ToolMessage)), None)
        rid = json.loads(str(latest.content))["query"] if latest is not None else "R0-1"
        messages_at_first = len(msgs) + 1
        allowed = 0
        times: list[float] = []
        peaks: list[float] = []
        cold = 0.0
        total = 1 + checks + memory_checks
        for k in range(total):
            msgs.append(_call(k, f"{rid}.3", "Paris", f"q{k}"))
            traced = k > checks
            if traced:
                tracemalloc.start()
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
            t0 = time.perf_counter()
            verdicts = guard.check(msgs)
            dt = (time.perf_counter() - t0) * 1000
            if traced:
                peaks.append((tracemalloc.get_traced_memory()[1] - base) / 1024)
                tracemalloc.stop()
            elif k == 0:
                cold = dt
            else:
                times.append(dt)
            allowed += all(v.action == "allow" for v in verdicts)
            rid = f"Q{k}"
            msgs.append(ToolMessage(records_json(rid), tool_call_id=f"q{k}", id=f"qt{k}"))
        rows.append({"size": size, "messages": messages_at_first, "cold_ms": cold,
                     "p50_ms": quantile(times, 0.5), "p99_ms": quantile(times, 0.99),
                     "checks": len(times), "mem_peak_kb": statistics.median(peaks),
                     "mem_peak_max_kb": max(peaks), "memory_checks": len(peaks),
                     "allowed": allowed / total})
    return rows


class _LookupArgs(BaseModel):
    record_id: str = Field(description="The record to look up.")
    city: str | None = Field(default=None, description="Only records in this city.")


def lookup_tools() -> list[BaseTool]:
    """:func:`lookup_docs` as LangChain tools returning :func:`records_json`."""
    def lookup(record_id: str, city: str | None = None) -> str:
        return records_json(record_id)

    return [StructuredTool.from_function(func=lookup, name=d["name"],
                                         description=d["description"], args_schema=_LookupArgs)
            for d in lookup_docs()]


_RECORD = re.compile(r"\bR(\d+)-1\b")


def _conversation_model(turns: int) -> ScriptedChatModel:
    """A model for ``turns`` turns of the long conversation.

    After a user message ``... R{t}-1 ...`` it calls ``tool_{t % 10}`` with that record and
    the city of the first record of the previous turn's result (a value grounded in tool
    output; ``Paris`` from the user on the first turn); after the result it answers.
    """
    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(FINAL_ANSWER)
        match = _RECORD.search(str(messages[-1].content))
        turn = int(match.group(1)) if match else 0
        city = "Paris"
        for m in reversed(messages):
            if isinstance(m, ToolMessage):
                city = json.loads(str(m.content))["records"][0]["city"]
                break
        return AIMessage("", tool_calls=[{"name": f"tool_{turn % _LOOKUP_TOOLS}",
                                          "args": {"record_id": f"R{turn}-1", "city": city},
                                          "id": f"call_{turn}", "type": "tool_call"}])

    return ScriptedChatModel(script=[reply] * (2 * turns))


def request(turn: int) -> str:
    """The user's request at ``turn`` of the long conversation (1-based)."""
    if turn == 1:
        return "Look up record R1-1 in Paris, please."
    return (f"Look up record R{turn}-1, please, in the city of the first record of the "
            "last result.")


def agent_windows(turns: Sequence[int], window: int) -> list[tuple[int, int, int]]:
    """``(turn, first, last)`` timed turns around each of ``turns`` (never turn 1)."""
    out = []
    for turn in turns:
        first = max(2, turn - window // 2)
        out.append((turn, first, first + window - 1))
    return out


def bench_history_agent(turns: Sequence[int], window: int) -> list[dict[str, Any]]:
    """A plain vs a ``GuardMiddleware`` ``create_agent`` step deep into a long conversation.

    Both agents (no checkpointer; the caller passes the history back each turn, message ids
    kept) hold the same conversation: each turn is a user request, a lookup call
    (:func:`_conversation_model`) on :func:`lookup_tools`, its ~1 KB JSON result and a text
    answer (4 messages).  They advance turn by turn in lockstep, plain first on even turns
    and guarded first on odd ones; the turns of :func:`agent_windows` are timed.

    Returns:
        One row per turn of ``turns``: :func:`pair_summary`'s keys over its window and
        ``turn``, ``first_turn``, ``last_turn``, ``messages`` (the history's length when
        ``turn`` starts).

    Raises:
        AssertionError: On some turn the agents did not execute the same call with the same
            result, or the guard did not let it through.
    """
    windows = agent_windows(turns, window)
    last = max(w[2] for w in windows)
    tools = lookup_tools()
    agents_ = {"plain": create_agent(_conversation_model(last), tools),
               "guarded": create_agent(_conversation_model(last), tools,
                                       middleware=[GuardMiddleware()])}
    hist: dict[str, list[BaseMessage]] = {"plain": [], "guarded": []}
    times: dict[str, dict[int, float]] = {"plain": {}, "guarded": {}}
    sizes: dict[int, int] = {}
    for turn in range(1, last + 1):
        sizes[turn] = len(hist["plain"])
        order = ("plain", "guarded") if turn % 2 == 0 else ("guarded", "plain")
        for name in order:
            state: Any = {"messages": [*hist[name], HumanMessage(request(turn))]}
            t0 = time.perf_counter()
            out = agents_[name].invoke(state)
            times[name][turn] = (time.perf_counter() - t0) * 1000
            hist[name] = out["messages"]
        results = {k: [m for m in v[sizes[turn]:] if isinstance(m, ToolMessage)]
                   for k, v in hist.items()}
        assert [m.content for m in results["plain"]] == [m.content for m in results["guarded"]]
        assert len(results["guarded"]) == 1 and results["guarded"][0].status == "success", (
            turn, results["guarded"])
        assert hist["guarded"][-1].content == FINAL_ANSWER
    rows: list[dict[str, Any]] = []
    for turn, first, end in windows:
        span = range(first, end + 1)
        rows.append({"turn": turn, "first_turn": first, "last_turn": end,
                     "messages": sizes[turn],
                     **pair_summary([times["plain"][t] for t in span],
                                    [times["guarded"][t] for t in span])})
    return rows


def bench_history(config: BenchConfig) -> list[dict[str, Any]]:
    """The ``history`` sweep: :func:`bench_history_check`'s rows.

    Each has ``size``, ``p50_ms``, ``p99_ms``, ``cold_ms`` and the memory peaks, plus
    ``tools`` and ``result_chars`` (what the conversation holds).
    """
    extra = {"tools": _LOOKUP_TOOLS, "result_chars": len(records_json("R0-1"))}
    return [{**r, **extra} for r in bench_history_check(
        config.history_sizes, config.history_checks, config.memory_checks)]


def bench_agent_by_turn(config: BenchConfig) -> list[dict[str, Any]]:
    """The ``agent_by_turn`` sweep: :func:`bench_history_agent`'s rows.

    Each also has ``size`` (the history's length when the turn starts) and ``p50_ms`` /
    ``p99_ms``: the guarded step's (the plain step's are ``plain_p50_ms`` / ``plain_p99_ms``).
    """
    return [{"size": r["messages"], "p50_ms": r["guarded_p50_ms"],
             "p99_ms": r["guarded_p99_ms"], **r}
            for r in bench_history_agent(config.agent_turns, config.agent_window)]


def _history_rows(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [(f"Guard.check p50 / p99 at {r['messages']:,} messages (ms)",
             f"{r['p50_ms']:.3f} / {r['p99_ms']:.3f}") for r in rows]


def _agent_by_turn_rows(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [(f"create_agent guarded / plain at turn {r['turn']} (p50 ratio)",
             f"{r['ratio']:.2f}") for r in rows]


def _history_tables(rows: Sequence[Mapping[str, Any]]) -> list[Table]:
    tools, chars = (rows[0]["tools"], rows[0]["result_chars"]) if rows else (0, 0)
    checks = Table(title=f"Guard.check by history length ({tools} tools, "
                         f"~{chars} char JSON tool results)")
    for col in ("messages", "cold ms", "warm p50 ms", "warm p99 ms", "mem peak KB (median / max)",
                "allowed"):
        checks.add_column(col, justify="right")
    for r in rows:
        checks.add_row(f"{r['messages']:,}", f"{r['cold_ms']:.1f}", f"{r['p50_ms']:.3f}",
                       f"{r['p99_ms']:.3f}",
                       f"{r['mem_peak_kb']:.1f} / {r['mem_peak_max_kb']:.1f}",
                       f"{100 * r['allowed']:.0f}%")
    return [checks]


def _agent_by_turn_tables(rows: Sequence[Mapping[str, Any]]) -> list[Table]:
    steps = Table(title="create_agent step deep in a conversation: plain vs + GuardMiddleware")
    for col in ("turn (timed)", "messages", "plain p50 / p99 ms", "guarded p50 / p99 ms",
                "ratio (p50)", "overhead ms"):
        steps.add_column(col, justify="right")
    for r in rows:
        steps.add_row(f"{r['turn']} ({r['first_turn']}-{r['last_turn']})", f"{r['messages']:,}",
                      f"{r['plain_p50_ms']:.2f} / {r['plain_p99_ms']:.2f}",
                      f"{r['guarded_p50_ms']:.2f} / {r['guarded_p99_ms']:.2f}",
                      f"{r['ratio']:.2f}", f"{r['overhead_ms']:.2f}")
    return [steps]


# ---------------------------------------------------------------------------- tools, KG sweeps
def bench_tools_sweep(config: BenchConfig) -> list[dict[str, Any]]:
    """The ``tools`` sweep: :func:`bench_tools.sweep_tools` (``dict`` and ``tool`` forms)."""
    return bench_tools.sweep_tools(config.tool_sizes, reps=config.tool_reps)


def bench_kg_sweep(config: BenchConfig) -> list[dict[str, Any]]:
    """The ``kg`` sweep: :func:`bench_kg.sweep_store` (per turn through a LangGraph store)."""
    return bench_kg.sweep_store(config.kg_sizes, turns=config.kg_turns)


def _no_rows(_: Any) -> list[tuple[str, str]]:
    return []


# ---------------------------------------------------------------------------- the run
MEASUREMENTS: Final[list[Measurement]] = [
    Measurement("check", "Guard.check per call", lambda c: bench_check(c.calls), _check_rows),
    Measurement("step", "graph step: ToolNode vs GuardNode + ToolNode",
                lambda c: bench_step(c.steps, c.warmup),
                _pair_rows("plain ToolNode step", "guarded step")),
    Measurement("agent_step", "agent step: create_agent vs + GuardMiddleware",
                lambda c: bench_agent_step(c.steps, c.warmup), _agent_rows),
]
"""The quick measurements of one run (``toolguard bench overhead``), in order."""

SWEEPS: Final[list[Measurement]] = [
    Measurement("history", "history length: Guard.check", bench_history, _history_rows,
                _history_tables),
    Measurement("agent_by_turn", "create_agent step by turn of one long conversation",
                bench_agent_by_turn, _agent_by_turn_rows, _agent_by_turn_tables),
    Measurement("tools", "tool count", bench_tools_sweep, _no_rows,
                lambda rows: [bench_tools.table(rows)]),
    Measurement("kg", "KG size through a store", bench_kg_sweep, _no_rows,
                lambda rows: [bench_kg.store_table(rows)]),
]
"""The issue-15 sweeps (``--sweeps``), run after :data:`MEASUREMENTS`; add one by appending."""


def step_ratios(result: Mapping[str, Any]) -> dict[str, Any]:
    """The guarded / plain p50 step ratios found in ``result``, in one place.

    ``tool_node`` (``step``), ``agent`` (``agent_step``) and ``agent_by_turn`` (``{turn:
    ratio}`` from the ``agent_by_turn`` sweep), each only when measured; ``{}`` when none is.
    """
    out: dict[str, Any] = {}
    if isinstance(result.get("step"), Mapping):
        out["tool_node"] = result["step"]["ratio"]
    if isinstance(result.get("agent_step"), Mapping):
        out["agent"] = result["agent_step"]["ratio"]
    if result.get("agent_by_turn"):
        out["agent_by_turn"] = {str(r["turn"]): r["ratio"] for r in result["agent_by_turn"]}
    return out


def print_report(result: Mapping[str, Any],
                 measurements: Sequence[Measurement] = MEASUREMENTS) -> None:
    """One table, each measurement's rows under its title; then the sweeps' own tables."""
    table = Table(title="toolguard overhead (deterministic path)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for m in measurements:
        if m.name not in result:
            continue
        rows = m.rows(result[m.name])
        if not rows:
            continue
        table.add_section()
        table.add_row(f"[bold]{m.title}[/bold]", "")
        for label, value in rows:
            table.add_row(label, value)
    print_table(table)
    for m in measurements:
        if m.name in result and m.tables is not None:
            for detail in m.tables(result[m.name]):
                print_table(detail)


def main(*, calls: int = 2000, steps: int = 300, json_path: str | None = None,
         sweeps: bool = False, config: BenchConfig | None = None,
         measurements: Sequence[Measurement] | None = None) -> dict[str, Any]:
    """Run the measurements, print a table, optionally write JSON.

    Args:
        calls: ``Guard.check`` calls timed by ``check``.
        steps: Steps timed per variant by ``step`` and ``agent_step``.
        json_path: Write the result here (``None``: nowhere).
        sweeps: Also run :data:`SWEEPS` (``history``, ``agent_by_turn``, ``tools``, ``kg``;
            a minute or two, not seconds).
        config: The sweeps' sizes (:class:`BenchConfig`; its ``calls`` and ``steps`` are
            replaced by the arguments).
        measurements: Run these instead of :data:`MEASUREMENTS` (+ :data:`SWEEPS`).

    Returns:
        ``{name: numbers}`` per measurement: ``check`` (``p50_ms``, ``p99_ms``, ``mean_ms``,
        ``n``, ``distinct_cases``), ``step`` and ``agent_step`` (:func:`pair_summary`'s keys;
        ``agent_step`` also ``case``, ``tools``, ``call``); with ``sweeps``, lists of rows
        with ``size``, ``p50_ms`` and ``p99_ms``: ``history`` (:func:`bench_history`),
        ``agent_by_turn`` (:func:`bench_agent_by_turn`), ``tools``
        (:func:`bench_tools.sweep_tools`) and ``kg`` (:func:`bench_kg.sweep_store`).  Plus
        ``step_ratio`` (:func:`step_ratios`) when a step pair was measured.

    Raises:
        ValueError: ``calls`` or ``steps`` < 1, or a sweep size < 1.
    """
    config = dataclasses.replace(config or BenchConfig(), calls=calls, steps=steps)
    if measurements is None:
        measurements = [*MEASUREMENTS, *SWEEPS] if sweeps else MEASUREMENTS
    result = {m.name: m.run(config) for m in measurements}
    print_report(result, measurements)
    if ratios := step_ratios(result):
        result["step_ratio"] = ratios
    write_json(json_path, result)
    return result


if __name__ == "__main__":
    import sys

    main(sweeps="--sweeps" in sys.argv[1:])
