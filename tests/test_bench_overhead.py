"""toolguard_evals.bench_overhead: every measurement runs, agrees on answers, writes JSON."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from toolguard_evals.bench_overhead import (
    BenchConfig,
    Measurement,
    agent_case,
    agents,
    main,
    pair_summary,
    time_pair,
)


def test_one_run_times_every_measurement_and_writes_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench" / "overhead.json"
    result = main(calls=20, steps=4, json_path=str(out))
    assert set(result) == {"check", "step", "agent_step"}
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
