"""toolguard_evals.runner: bounded concurrency, resumable JSONL cache, offline outputs, reports."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.errors import GraphInterrupt

from toolguard_evals.local_model import DEFAULT_AGENT_MODEL
from toolguard_evals.runner import (
    LOCAL_MODEL,
    Endpoint,
    EvalRunError,
    GenerationCache,
    cache_key,
    check_failures,
    latency_summary,
    map_cases,
    plot_variants,
    quantile,
    run_cases,
    run_cases_sync,
    side_by_side_table,
    write_json,
)

SETTINGS = {"model": "m", "temperature": 0.0, "guarded": True}


class Generator:
    """Doubles its case, records concurrency, fails on the cases it is told to."""

    def __init__(self, fail: set[int] | None = None, delay: float = 0.01) -> None:
        self.fail = fail or set()
        self.delay = delay
        self.calls: list[int] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, case: int) -> dict[str, Any]:
        self.calls.append(case)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            if case in self.fail:
                raise RuntimeError(f"server said no to {case}")
            return {"answer": case * 2}
        finally:
            self.in_flight -= 1


async def test_concurrency_is_bounded_and_outputs_keep_case_order() -> None:
    gen = Generator()
    result = await run_cases(list(range(12)), gen, case_id=str, settings=SETTINGS,
                             concurrency=3, progress=False)
    assert gen.max_in_flight == 3
    assert list(result.outputs) == [str(i) for i in range(12)]
    assert result.outputs["5"] == {"answer": 10}
    assert (result.generated, result.cached, result.failed) == (12, 0, {})
    assert result.cases_per_second() > 0


async def test_rerun_resumes_from_the_jsonl_cache(tmp_path: Path) -> None:
    path = tmp_path / "gen" / "cache.jsonl"
    first = Generator(fail={3})
    r1 = await run_cases(list(range(6)), first, case_id=str, settings=SETTINGS,
                         cache=GenerationCache(path), progress=False)
    assert r1.generated == 5
    assert r1.failed == {"3": "RuntimeError: server said no to 3"}
    assert "3" not in r1.outputs
    assert len(path.read_text().splitlines()) == 5

    second = Generator()
    r2 = await run_cases(list(range(6)), second, case_id=str, settings=SETTINGS,
                         cache=GenerationCache(path), progress=False)
    assert second.calls == [3]  # only the failed case is generated again
    assert (r2.generated, r2.cached, r2.failed) == (1, 5, {})
    assert r2.outputs == {str(i): {"answer": 2 * i} for i in range(6)}

    # other settings are other generations
    third = Generator()
    await run_cases([0, 1], third, case_id=str, settings={**SETTINGS, "guarded": False},
                    cache=GenerationCache(path), progress=False)
    assert third.calls == [0, 1]


def test_cache_outputs_for_offline_scoring_and_a_truncated_last_line(tmp_path: Path) -> None:
    path = tmp_path / "cache.jsonl"
    cache = GenerationCache(path)
    cache.put("a", SETTINGS, {"x": 1})
    cache.put("b", SETTINGS, {"x": 2, "odd": Path("/tmp")})  # non-JSON values become str
    cache.put("a", {"model": "other"}, {"x": 9})
    cache.put("a", SETTINGS, {"x": 3})  # a later line wins
    with path.open("a") as fh:
        fh.write('{"key": "trunc')  # killed mid-write
    reloaded = GenerationCache(path)
    assert reloaded.skipped_lines == 1
    assert reloaded.outputs(SETTINGS) == {"a": {"x": 3}, "b": {"x": 2, "odd": "/tmp"}}
    assert reloaded.outputs({"model": "other"}) == {"a": {"x": 9}}
    assert reloaded.get("c", SETTINGS) is None
    # key order of settings does not matter
    assert cache_key("a", {"b": 1, "a": 2}) == cache_key("a", {"a": 2, "b": 1})
    assert cache_key("a", SETTINGS) != cache_key("b", SETTINGS)


async def test_bad_arguments_and_non_mapping_outputs() -> None:
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        await run_cases([1], Generator(), case_id=str, settings={}, concurrency=0)
    with pytest.raises(ValueError, match="duplicate case ids"):
        await run_cases([1, 1], Generator(), case_id=str, settings={})

    async def not_a_mapping(case: int) -> Any:
        return [case]

    result = await run_cases([1], not_a_mapping, case_id=str, settings={}, progress=False)
    assert result.failed == {"1": "TypeError: generate returned list, not a mapping"}
    with pytest.raises(TypeError, match="output must be a mapping"):
        GenerationCache().put("a", {}, [1])  # type: ignore[arg-type]


def test_run_cases_sync_and_refuses_inside_a_loop() -> None:
    result = run_cases_sync([1, 2], Generator(), case_id=str, settings={}, progress=False)
    assert result.outputs == {"1": {"answer": 2}, "2": {"answer": 4}}

    async def inside() -> None:
        with pytest.raises(RuntimeError, match="await run_cases"):
            run_cases_sync([1], Generator(), case_id=str, settings={})

    asyncio.run(inside())


# -- synchronous cases ----------------------------------------------------------------


def test_map_cases_runs_in_this_thread_without_a_loop_and_keeps_outputs_as_returned() -> None:
    marker = object()
    seen: list[tuple[int, str]] = []

    def generate(case: int) -> dict[str, Any]:
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop()  # no event loop around a synchronous case
        seen.append((case, threading.current_thread().name))
        return {"answer": case * 2, "object": marker}

    result = map_cases([3, 1, 2], generate, case_id=str, progress=False)
    assert [c for c, _ in seen] == [3, 1, 2]
    assert {name for _, name in seen} == {threading.current_thread().name}
    assert list(result.outputs) == ["3", "1", "2"]
    assert result.outputs["1"]["object"] is marker  # no JSON round trip without a cache
    assert (result.generated, result.cached, result.failed) == (3, 0, {})
    assert set(result.case_seconds) == {"1", "2", "3"}
    assert all(t >= 0 for t in result.case_seconds.values())


def test_map_cases_records_failures_or_re_raises_them() -> None:
    def generate(case: int) -> Any:
        if case == 2:
            raise KeyError("two")
        return [case] if case == 3 else {"x": case}

    result = map_cases([1, 2, 3], generate, case_id=str, progress=True)
    assert result.failed == {"2": "KeyError: 'two'",
                             "3": "TypeError: generate returned list, not a mapping"}
    assert list(result.outputs) == ["1"] and "2" not in result.case_seconds
    with pytest.raises(KeyError, match="two"):
        map_cases([1, 2, 3], generate, case_id=str, progress=False, raise_errors=True)
    with pytest.raises(ValueError, match=r"duplicate case ids: \['1'\]"):
        map_cases([1, 1], generate, case_id=str)
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        map_cases([1], generate, case_id=str, concurrency=0)
    with pytest.raises(ValueError, match="a cache needs settings"):
        map_cases([1], generate, case_id=str, cache=GenerationCache())


def test_map_cases_threads_are_bounded_and_resume_from_the_cache(tmp_path: Path) -> None:
    lock = threading.Lock()
    state = {"in_flight": 0, "max": 0}
    calls: list[int] = []

    def generate(case: int) -> dict[str, Any]:
        with lock:
            calls.append(case)
            state["in_flight"] += 1
            state["max"] = max(state["max"], state["in_flight"])
        time.sleep(0.05)
        with lock:
            state["in_flight"] -= 1
        if case == 4:
            raise RuntimeError("server said no")
        return {"answer": case * 2}

    path = tmp_path / "cache.jsonl"
    first = map_cases(list(range(9)), generate, case_id=str, settings=SETTINGS,
                      cache=GenerationCache(path), concurrency=3, progress=False)
    assert state["max"] == 3
    assert list(first.outputs) == [str(i) for i in range(9) if i != 4]
    assert first.failed == {"4": "RuntimeError: server said no"}
    calls.clear()
    second = map_cases(list(range(9)), generate, case_id=str, settings=SETTINGS,
                       cache=GenerationCache(path), concurrency=3, progress=False)
    assert calls == [4] and (second.cached, second.generated) == (8, 0)
    with pytest.raises(RuntimeError, match="server said no"):
        map_cases([4, 5], generate, case_id=str, concurrency=2, progress=False,
                  raise_errors=True)


async def test_graph_interrupts_are_never_recorded_as_failures() -> None:
    def interrupting(case: int) -> dict[str, Any]:
        raise GraphInterrupt(())

    async def ainterrupting(case: int) -> dict[str, Any]:
        raise GraphInterrupt(())

    with pytest.raises(GraphInterrupt):
        map_cases([1], interrupting, case_id=str, progress=False)
    with pytest.raises(GraphInterrupt):
        await run_cases([1], ainterrupting, case_id=str, settings={}, progress=False)


async def test_run_cases_raise_errors_re_raises_and_times_each_case() -> None:
    with pytest.raises(RuntimeError, match="server said no to 1"):
        await run_cases([0, 1], Generator(fail={1}), case_id=str, settings={},
                        progress=False, raise_errors=True)
    result = await run_cases([0, 1], Generator(delay=0.01), case_id=str, settings={},
                             progress=False)
    assert set(result.case_seconds) == {"0", "1"}
    assert all(t >= 0.005 for t in result.case_seconds.values())


def test_endpoint_settings_and_validation() -> None:
    assert LOCAL_MODEL == DEFAULT_AGENT_MODEL == "qwen2.5-coder-1.5b"
    assert Endpoint().settings()["model"] == "local:qwen2.5-coder-1.5b"
    assert Endpoint(model="smollm2").settings()["model"] == "local:smollm2"
    assert Endpoint(base_url="http://a/v1", model="qwen").settings() == Endpoint(
        base_url="http://b/v1", model="qwen").settings()
    assert Endpoint(base_url="http://a/v1").settings() != Endpoint(
        base_url="http://b/v1").settings()
    for bad in ({"timeout": 0}, {"temperature": -1}, {"max_tokens": 0}):
        with pytest.raises(ValueError):
            Endpoint(**bad)  # type: ignore[arg-type]


def test_reports_table_plot_json(tmp_path: Path) -> None:
    from rich.console import Console

    rows = {"pass rate": {"unguarded": 12.5, "guarded": 30.0},
            "RePR": {"unguarded": None, "guarded": -3.25}}
    table = side_by_side_table("RelyToolBench", rows, columns=("unguarded", "guarded"))
    console = Console(record=True, width=120)
    console.print(table)
    text = console.export_text()
    assert "12.5" in text and "30.0" in text and "-3.2" in text
    (repr_line,) = [line for line in text.splitlines() if "RePR" in line]
    assert "-" in repr_line.split() and "-3.2" in repr_line.split()

    png = plot_variants(rows, tmp_path / "plots" / "rtb.png", title="guarded vs unguarded")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    write_json(tmp_path / "out" / "r.json", {"overall": {"pass_rate": 30.0}})
    assert json.loads((tmp_path / "out" / "r.json").read_text()) == {
        "overall": {"pass_rate": 30.0}}
    write_json(None, {"ignored": True})


def test_quantile_is_nearest_rank_and_rejects_bad_q() -> None:
    xs = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert quantile(xs, 0.0) == 1.0
    assert quantile(xs, 0.5) == 3.0
    assert quantile(xs, 1.0) == 5.0
    assert quantile(list(range(1, 101)), 0.99) == 99  # rank round(0.99 * 99) = 98
    assert quantile([], 0.5) == 0.0
    with pytest.raises(ValueError, match="q must be in"):
        quantile(xs, 1.5)


def test_latency_summary_rounds_p50_p99_mean() -> None:
    out = latency_summary([0.1234, 0.2, 10.0], digits=2)
    assert out == {"p50": 0.2, "p99": 10.0, "mean": 3.44}
    assert latency_summary([]) == {"p50": 0.0, "p99": 0.0, "mean": 0.0}


# -- failure policy -------------------------------------------------------------------


def test_check_failures_passes_a_run_within_the_allowed_share() -> None:
    check_failures({}, 10)
    check_failures({"c1": "boom"}, 10)  # 10 % is allowed


@pytest.mark.parametrize(("failed", "total", "message"), [
    ({f"c{i}": "ConnectionError: refused" for i in range(3)}, 3,
     r"(?s)all 3 cases failed.*first error \(c0\): ConnectionError: refused"),
    ({"c1": "x", "c2": "y"}, 10, r"2 of 10 cases failed \(20%, more than the allowed 10%\)"),
    ({}, 0, "no cases to run"),
])
def test_check_failures_raises_with_the_first_error(
        failed: dict[str, str], total: int, message: str) -> None:
    with pytest.raises(EvalRunError, match=message):
        check_failures(failed, total)


def test_check_failures_validates_its_bounds() -> None:
    with pytest.raises(ValueError, match=r"max_failed_share must be in \[0, 1\]"):
        check_failures({}, 1, max_failed_share=1.5)
    with pytest.raises(ValueError, match="total must be >= 0"):
        check_failures({}, -1)
    check_failures({"a": "x"}, 2, max_failed_share=0.5)  # a stated, larger share
