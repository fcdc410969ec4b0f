"""Benchmark: toolguard's overhead per tool call (deterministic path), from one run.

Each number comes from a named :class:`Measurement` in :data:`MEASUREMENTS`:

- ``check``: p50 / p99 of ``Guard.check`` per call in milliseconds, over real BFCL gold
  calls when ``bfcl-eval`` is installed (else a built-in conversation).
- ``step``: one graph step executing a no-op tool through a plain ``ToolNode`` and through
  ``GuardNode`` + ``ToolNode`` (a hand-built ``StateGraph``): p50 / p99 per step and the
  ratio guarded / plain of the p50s.
- ``agent_step``: the middleware path.  One ``create_agent`` step (model -> tool -> model:
  a tool call, its execution, the final answer) with ``GuardMiddleware()`` against the
  same step of a plain ``create_agent``: the same scripted model and the same real tools
  (BFCL's ``VehicleControlAPI`` methods executing on a live environment, episode
  :data:`AGENT_EPISODE`; a built-in weather tool without ``bfcl-eval``).  p50 / p99 per step,
  the ratio of the p50s and their difference (the middleware's cost per tool call, ms).

The two variants of a pair are timed alternately (plain first on even steps, guarded first
on odd ones) after untimed warm-up steps, so drift and order effects cancel.  A new
measurement (a sweep over history length, tool count or KG size) is one function
``(BenchConfig) -> numbers`` plus one ``numbers -> table rows``, appended to
:data:`MEASUREMENTS`; :func:`time_pair` and :func:`pair_summary` time and summarise pairs.

Run: ``toolguard bench overhead [--json PATH]`` (or ``python -m toolguard_evals.bench_overhead``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from rich.table import Table

from toolguard import Guard, GuardMiddleware
from toolguard.nodes import GuardNode
from toolguard.testing import ScriptedChatModel
from toolguard_evals.runner import print_table, quantile, write_json

AGENT_EPISODE: Final = "multi_turn_base_56"
"""The BFCL episode of ``agent_step``: its first user turn and first gold call
(``get_zipcode_based_on_city(city='San Francisco')``, read-only, grounded), with the 22
``VehicleControlAPI`` tools of that turn."""


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Sizes of one benchmark run.

    Attributes:
        calls: ``Guard.check`` calls timed, >= 1.
        steps: Timed steps per variant of each pair, >= 1.
        warmup: Untimed steps per variant before timing, >= 0.
    """

    calls: int = 2000
    steps: int = 300
    warmup: int = 20

    def __post_init__(self) -> None:
        if self.calls < 1 or self.steps < 1 or self.warmup < 0:
            raise ValueError("calls and steps must be >= 1, warmup >= 0")


@dataclass(frozen=True, slots=True)
class Measurement:
    """One named measurement of the benchmark.

    Attributes:
        name: Key of its numbers in the report (and the JSON).
        title: What it measures, for the table.
        run: ``(config) -> numbers`` (JSON-able).
        rows: ``numbers -> [(label, value text), ...]`` for the table.
    """

    name: str
    title: str
    run: Callable[[BenchConfig], dict[str, Any]]
    rows: Callable[[Mapping[str, Any]], list[tuple[str, str]]]


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
            return AIMessage("Done.")
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
    assert out["guarded"]["messages"][-1].content == "Done."
    return {**pair_summary(tp, tg), "case": case.source, "tools": len(case.tools),
            "call": case.call["name"]}


def _agent_rows(s: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [("case (tools offered)", f"{s['case']}: {s['call']} ({s['tools']})"),
            *_pair_rows("plain create_agent step", "GuardMiddleware step")(s)]


# ---------------------------------------------------------------------------- the run
MEASUREMENTS: Final[list[Measurement]] = [
    Measurement("check", "Guard.check per call", lambda c: bench_check(c.calls), _check_rows),
    Measurement("step", "graph step: ToolNode vs GuardNode + ToolNode",
                lambda c: bench_step(c.steps, c.warmup),
                _pair_rows("plain ToolNode step", "guarded step")),
    Measurement("agent_step", "agent step: create_agent vs + GuardMiddleware",
                lambda c: bench_agent_step(c.steps, c.warmup), _agent_rows),
]
"""The measurements of one run, in order; add a sweep by appending one."""


def print_report(result: Mapping[str, Any],
                 measurements: Sequence[Measurement] = MEASUREMENTS) -> None:
    """One table: each measurement's rows under its title."""
    table = Table(title="toolguard overhead (deterministic path)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for m in measurements:
        if m.name not in result:
            continue
        table.add_section()
        table.add_row(f"[bold]{m.title}[/bold]", "")
        for label, value in m.rows(result[m.name]):
            table.add_row(label, value)
    print_table(table)


def main(*, calls: int = 2000, steps: int = 300, json_path: str | None = None,
         measurements: Sequence[Measurement] = MEASUREMENTS) -> dict[str, Any]:
    """Run every measurement, print a table, optionally write JSON.

    Returns:
        ``{name: numbers}`` per measurement: ``check`` (``p50_ms``, ``p99_ms``, ``mean_ms``,
        ``n``, ``distinct_cases``), ``step`` and ``agent_step`` (:func:`pair_summary`'s keys;
        ``agent_step`` also ``case``, ``tools``, ``call``).

    Raises:
        ValueError: ``calls`` or ``steps`` < 1.
    """
    config = BenchConfig(calls=calls, steps=steps)
    result = {m.name: m.run(config) for m in measurements}
    print_report(result, measurements)
    write_json(json_path, result)
    return result


if __name__ == "__main__":
    main()
