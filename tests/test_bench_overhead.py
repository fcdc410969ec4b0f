"""toolguard_evals.bench_overhead: every measurement runs, agrees on answers, writes JSON."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from toolguard_evals.bench_overhead import (
    MEASUREMENTS,
    SWEEPS,
    BenchConfig,
    Measurement,
    agent_case,
    agent_windows,
    agents,
    history,
    main,
    pair_summary,
    records_json,
    time_pair,
)


def test_one_run_times_every_measurement_and_writes_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench" / "overhead.json"
    result = main(calls=20, steps=4, json_path=str(out))
    assert set(result) == {"check", "step", "agent_step", "step_ratio"}
    assert result["step_ratio"] == {"tool_node": result["step"]["ratio"],
                                    "agent": result["agent_step"]["ratio"]}
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["check"]["n"] == 20
    for pair in ("step", "agent_step"):
        s = result[pair]
        assert s["steps"] == 4 and s["ratio"] > 0
        assert s["plain_p99_ms"] >= s["plain_p50_ms"] > 0
        assert s["guarded_p99_ms"] >= s["guarded_p50_ms"] > 0
    text = capsys.readouterr().out
    assert "GuardMiddleware step p50 / p99 (ms)" in text and "ratio guarded / plain" in text


def test_the_agent_case_is_a_real_grounded_read_only_call() -> None:
    case = agent_case()
    names = [t.name for t in case.tools]
    assert case.call["name"] in names
    if case.source.startswith("BFCL"):
        assert len(names) == 22 and case.call == {"name": "get_zipcode_based_on_city",
                                                  "args": {"city": "San Francisco"}}
        assert "San Francisco" in case.user


def test_the_timed_guarded_agent_guards_and_the_plain_one_does_not() -> None:
    """The pair the benchmark times, on a call whose value is not in the conversation:
    the plain agent executes it, the GuardMiddleware agent answers it without executing."""
    case = agent_case()
    ((key, value),) = [(k, v) for k, v in case.call["args"].items() if isinstance(v, str)][:1]
    assert value in case.user and "Atlantis" not in case.user
    invented = dataclasses.replace(
        case, call={**case.call, "args": {**case.call["args"], key: "Atlantis"}})
    plain, guarded = agents(invented, 1)
    assert "GuardMiddleware.after_model" in guarded.get_graph().nodes
    assert not any(n.startswith("GuardMiddleware") for n in plain.get_graph().nodes)

    def tool_answers(agent: Any) -> list[ToolMessage]:
        out = agent.invoke({"messages": [HumanMessage(invented.user)]})
        return [m for m in out["messages"] if isinstance(m, ToolMessage)]

    (executed,) = tool_answers(plain)
    (refused,) = tool_answers(guarded)
    assert executed.status == "success" and executed.name == case.call["name"]
    assert refused.status == "error" and "Not executed" in str(refused.content)
    assert refused.content != executed.content


def test_pairs_alternate_and_measurements_are_pluggable() -> None:
    calls: list[str] = []
    tp, tg = time_pair(lambda: calls.append("p"), lambda: calls.append("g"), steps=4, warmup=1)
    assert calls == ["p", "g", "p", "g", "g", "p", "p", "g", "g", "p"]
    assert len(tp) == len(tg) == 4
    summary = pair_summary([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    assert (summary["ratio"], summary["overhead_ms"], summary["steps"]) == (2.0, 2.0, 3)

    sweep = Measurement("sweep", "a sweep", lambda c: {"steps": c.steps},
                        lambda n: [("steps", str(n["steps"]))])
    assert main(steps=7, measurements=[sweep]) == {"sweep": {"steps": 7}}
    with pytest.raises(ValueError, match="must be >= 1"):
        BenchConfig(steps=0)


def test_the_sweeps_at_tiny_sizes_write_one_consistent_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--sweeps``: history, tools and kg next to the quick keys, in one JSON (shapes and
    consistency only; no timing assertion)."""
    out = tmp_path / "overhead.json"
    config = BenchConfig(history_sizes=(6, 21), history_checks=3, memory_checks=2,
                         agent_turns=(2, 6), agent_window=3, tool_sizes=(5, 12), tool_reps=2,
                         kg_sizes=(60, 300), kg_turns=3)
    result = main(calls=5, steps=2, json_path=str(out), sweeps=True, config=config)
    assert list(result) == [m.name for m in [*MEASUREMENTS, *SWEEPS]] + ["step_ratio"]
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))

    h = result["history"]
    assert [r["size"] for r in h] == [6, 21]
    for r in h:
        assert r["tools"] == 10 and 900 <= r["result_chars"] == len(records_json("R0-1")) <= 1200
        assert r["messages"] == r["size"] and r["checks"] == 3 and r["memory_checks"] == 2
        assert r["p99_ms"] >= r["p50_ms"] > 0 and r["cold_ms"] > 0
        assert r["mem_peak_max_kb"] >= r["mem_peak_kb"] > 0
        assert r["allowed"] == 1.0  # the benchmark's calls are grounded: the allow path
    turns = result["agent_by_turn"]
    assert [(r["turn"], r["first_turn"], r["last_turn"]) for r in turns] == [
        (2, 2, 4), (6, 5, 7)] == agent_windows((2, 6), 3)
    for r in turns:
        assert r["steps"] == 3 and r["size"] == r["messages"] == 4 * (r["turn"] - 1)
        assert r["ratio"] == pytest.approx(r["guarded_p50_ms"] / r["plain_p50_ms"])
        assert r["guarded_p99_ms"] >= r["guarded_p50_ms"] > 0
        assert r["plain_p99_ms"] >= r["plain_p50_ms"] > 0
    assert result["step_ratio"]["agent_by_turn"] == {"2": turns[0]["ratio"],
                                                     "6": turns[1]["ratio"]}
    for key in ("history", "agent_by_turn", "tools", "kg"):
        assert all({"size", "p50_ms", "p99_ms"} <= set(r) for r in result[key]), key

    tools = result["tools"]
    assert {(r["form"], r["size"]) for r in tools} == {
        (f, s) for f in ("dict", "tool") for s in (5, 12)}
    assert len(tools) == 2 * 2 * 4 and all(r["p99_ms"] >= r["p50_ms"] >= 0 for r in tools)

    kg = result["kg"]
    assert [r["size"] for r in kg] == [60, 300]
    assert all(r["turns"] == 3 and r["p99_ms"] >= r["p50_ms"] > 0 for r in kg)

    text = capsys.readouterr().out
    assert "Guard.check by history length" in text and "tool-count sweep" in text
    assert "create_agent step deep in a conversation" in text
    assert "KG per turn through a LangGraph store" in text


def test_history_has_the_requested_length_and_sweep_sizes_are_checked() -> None:
    for n in (2, 3, 10, 11, 100):
        msgs = history(n)
        assert len(msgs) == n - 1 and isinstance(msgs[0], HumanMessage)
        assert len({m.id for m in msgs}) == len(msgs)
    results = [m for m in history(10) if isinstance(m, ToolMessage)]
    assert len(results) == 4 and all(json.loads(str(m.content))["records"] for m in results)
    for bad in ({"history_sizes": (1,)}, {"agent_turns": (0,)}, {"kg_turns": 0},
                {"tool_sizes": (0,)}, {"memory_checks": 0}):
        with pytest.raises(ValueError, match="must be >= 1"):
            BenchConfig(**bad)
