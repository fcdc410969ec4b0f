"""Benchmark: the guard's overhead per tool call (deterministic path).

Prints, from one run:

- p50 / p99 of ``Guard.check`` per call in milliseconds, over real BFCL gold calls when
  ``bfcl-eval`` is installed (else a built-in conversation);
- p50 of one graph step executing a no-op tool through a plain ``ToolNode`` and through
  ``GuardNode`` + ``ToolNode``, and their ratio (guarded / plain).

Run: ``toolguard bench overhead`` (or ``python -m toolguard_evals.bench_overhead``).
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from rich.console import Console
from rich.table import Table

from toolguard import Guard
from toolguard.nodes import GuardNode
from toolguard_evals.runner import quantile


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


def bench_step(steps: int) -> dict[str, float]:
    """p50 of one plain vs one guarded tool step (ms), interleaved, and their ratio."""
    plain, guarded = _graphs()
    state = {"messages": [HumanMessage("call noop with x=3"),
                          AIMessage("", tool_calls=[{"name": "noop", "args": {"x": 3},
                                                     "id": "n1"}])]}
    for _ in range(20):
        plain.invoke(state)
        guarded.invoke(state)
    tp: list[float] = []
    tg: list[float] = []
    for _ in range(steps):
        t0 = time.perf_counter()
        out_p = plain.invoke(state)
        t1 = time.perf_counter()
        out_g = guarded.invoke(state)
        t2 = time.perf_counter()
        tp.append((t1 - t0) * 1000)
        tg.append((t2 - t1) * 1000)
    assert out_p["messages"][-1].content == out_g["messages"][-1].content == "ok"
    p50p, p50g = quantile(tp, 0.5), quantile(tg, 0.5)
    return {"plain_p50_ms": p50p, "guarded_p50_ms": p50g, "ratio": p50g / p50p, "steps": steps}


def main(*, calls: int = 2000, steps: int = 300, json_path: str | None = None) -> dict[str, Any]:
    """Run both benchmarks, print a table, optionally write JSON."""
    result = {"check": bench_check(calls), "step": bench_step(steps)}
    table = Table(title="toolguard overhead (deterministic path)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    c, s = result["check"], result["step"]
    table.add_row("Guard.check per call p50 (ms)", f"{c['p50_ms']:.3f}")
    table.add_row("Guard.check per call p99 (ms)", f"{c['p99_ms']:.3f}")
    table.add_row("calls timed / distinct BFCL cases", f"{c['n']} / {c['distinct_cases']}")
    table.add_row("plain ToolNode step p50 (ms)", f"{s['plain_p50_ms']:.3f}")
    table.add_row("guarded step p50 (ms)", f"{s['guarded_p50_ms']:.3f}")
    table.add_row("ratio guarded / plain", f"{s['ratio']:.2f}")
    Console().print(table)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main()
