"""Fault injection on BFCL multi-turn gold replays (toolguard_evals.faults), on the real BFCL v4
data."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("bfcl_eval")

from toolguard.retry import classify_exception
from toolguard_evals import bfcl, faults

LIMIT = 6


@pytest.fixture(scope="module")
def episodes() -> list[bfcl.MultiTurnEpisode]:
    return bfcl.load_multi_turn("multi_turn_base", limit=LIMIT)


@pytest.fixture(scope="module")
def prepared(episodes: list[bfcl.MultiTurnEpisode]) -> list[faults.PreparedEpisode]:
    return [faults.prepare_episode(e, seed=0) for e in episodes]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("faults") / "faults.json"
    out = faults.main(str(path), seed=0, limit=LIMIT)
    assert json.loads(path.read_text(encoding="utf-8")) == out
    return out


def _outcomes(
    prepared: list[faults.PreparedEpisode], kind: faults.FaultKind | None, policy: str
) -> list[faults.EpisodeOutcome]:
    return [faults.replay_with_fault(p, kind, policy) for p in prepared]  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- report shape


def test_report_keys(report: dict[str, Any]) -> None:
    assert set(report["per_fault"]) == set(faults.FAULT_KINDS)
    assert {"episodes", "gold_calls", "seed", "wall_s", "baseline"} <= set(report)
    assert report["episodes"] == LIMIT and report["seed"] == 0
    for cell in report["per_fault"].values():
        assert set(cell) == {"toolguard", "langchain_tool_retry"}
        for summary in cell.values():
            assert {"state_match", "calls", "max_calls", "duplicated_effects"} <= set(summary)
            assert 0.0 <= summary["state_match"] <= 1.0
            assert summary["within_bound"]


def test_reproducible_for_a_seed(episodes: list[bfcl.MultiTurnEpisode]) -> None:
    first = faults.run_faults(episodes, seed=3)
    second = faults.run_faults(episodes, seed=3)
    first.pop("wall_s")
    second.pop("wall_s")
    assert first == second


def test_baseline_reproduces_the_gold_replay(report: dict[str, Any]) -> None:
    for summary in report["baseline"].values():
        assert summary["state_match"] == 1.0
        assert summary["calls"] == summary["gold_calls"] == report["gold_calls"]


# ---------------------------------------------------------------------------- injection


def test_injection_is_on_a_state_changing_call(prepared: list[faults.PreparedEpisode]) -> None:
    for p in prepared:
        if any(c.state_changing for c in p.calls):
            assert p.injected_call.state_changing
            assert not p.injected_call.read_only
        assert p.failures in (1, 2)


def test_cd_is_not_read_only() -> None:
    # cd moves the private working directory: the public state stays, a repeat fails
    episode = next(e for e in bfcl.load_multi_turn(limit=20) if e.id == "multi_turn_base_13")
    cd = faults.prepare_episode(episode, seed=0).calls[0]
    assert cd.name == "cd" and not cd.state_changing and not cd.read_only


def test_faults_are_classified_as_intended() -> None:
    c429 = classify_exception(faults.make_fault("transient_429"))
    assert (c429.outcome, c429.category, c429.retry_after) == ("transient", "rate_limit", 2.0)
    assert classify_exception(faults.make_fault("transient_5xx")).outcome == "transient"
    assert classify_exception(faults.make_fault("permanent_403")).outcome == "permanent"
    timeout = classify_exception(faults.make_fault("ambiguous_timeout"))
    assert timeout.outcome == "transient" and timeout.ambiguous
    with pytest.raises(ValueError, match="unknown fault kind"):
        faults.make_fault("flaky")  # type: ignore[arg-type]


def test_unknown_policy_and_kind_are_rejected(prepared: list[faults.PreparedEpisode]) -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        faults.replay_with_fault(prepared[0], None, "blind")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown fault kinds"):
        faults.run_faults([], kinds=("flaky",))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- policies


@pytest.mark.parametrize("kind", ["transient_429", "transient_5xx"])
def test_transient_http_faults_reach_gold_under_toolguard(
    prepared: list[faults.PreparedEpisode], kind: faults.FaultKind
) -> None:
    for p, o in zip(prepared, _outcomes(prepared, kind, "toolguard"), strict=True):
        assert o.state_match, o.id
        assert o.calls == o.gold_calls + p.failures  # one retry per failed attempt
        assert not o.injected_failed and o.injected_executions == 1


def test_transient_timeout_is_not_retried_on_a_non_idempotent_call(
    prepared: list[faults.PreparedEpisode],
) -> None:
    # the client cannot tell a lost request from a lost answer: toolguard skips, LangChain retries
    for p, o in zip(prepared, _outcomes(prepared, "transient_timeout", "toolguard"), strict=True):
        assert not p.injected_call.read_only
        assert o.injected_failed and o.injected_executions == 0
        assert o.calls == o.answered
    assert all(o.state_match for o in _outcomes(prepared, "transient_timeout",
                                                "langchain_tool_retry"))


def test_permanent_403_is_never_retried_by_toolguard(
    prepared: list[faults.PreparedEpisode],
) -> None:
    for o in _outcomes(prepared, "permanent_403", "toolguard"):
        assert o.injected_failed and o.injected_executions == 0
        # gold calls - the skipped one + its single attempt (fewer if the run finished)
        assert o.calls == o.answered
        assert o.calls == o.gold_calls or o.finished
    for o in _outcomes(prepared, "permanent_403", "langchain_tool_retry"):
        assert o.calls == o.gold_calls + faults.RETRY_BUDGET["langchain_tool_retry"]


def test_ambiguous_timeout_duplicates_effects_only_under_blind_retry(
    prepared: list[faults.PreparedEpisode], report: dict[str, Any]
) -> None:
    guarded = _outcomes(prepared, "ambiguous_timeout", "toolguard")
    assert all(o.state_match and not o.duplicated_effect for o in guarded)
    assert all(o.injected_executions == 1 for o in guarded)
    blind = _outcomes(prepared, "ambiguous_timeout", "langchain_tool_retry")
    assert all(o.injected_executions == p.failures + 1
               for p, o in zip(prepared, blind, strict=True))
    duplicated = {o.id for o in blind if o.duplicated_effect}
    assert duplicated, "expected at least one duplicated effect in the first episodes"
    assert duplicated <= {o.id for o in blind if not o.state_match}
    cell = report["per_fault"]["ambiguous_timeout"]
    assert cell["toolguard"]["duplicated_effects"] == 0
    assert cell["langchain_tool_retry"]["duplicated_effects"] == len(duplicated)


def test_langchain_sleep_is_recorded_not_slept(prepared: list[faults.PreparedEpisode]) -> None:
    import time

    from langchain.agents.middleware import tool_retry

    started = time.perf_counter()
    outcome = faults.replay_with_fault(prepared[0], "permanent_403", "langchain_tool_retry")
    assert time.perf_counter() - started < 1.0
    assert outcome.backoff_s > 0
    assert vars(tool_retry)["time"] is time  # restored
