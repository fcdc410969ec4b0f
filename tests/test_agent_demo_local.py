"""The main job end to end on a real model: ``toolguard demo`` with Qwen2.5-Coder-0.5B.

The embedded llama.cpp server runs the 0.5B model (the tests' real tool-calling model); a
few BFCL tasks go through ``create_agent`` unguarded and guarded and are judged by BFCL's
checker.  Which tasks the model solves is not asserted (a small model's choice), only that
every run is judged, nothing errors, and the report says what ran.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import needs_small_qwen, require_bfcl

MODEL = "qwen2.5-coder-0.5b"


@needs_small_qwen
def test_the_demo_runs_a_real_model_unguarded_and_guarded(tmp_path: Path) -> None:
    require_bfcl()
    from typer.testing import CliRunner

    from toolguard_evals.cli import app

    out, trace, cache = tmp_path / "demo.json", tmp_path / "demo.jsonl", tmp_path / "c.jsonl"
    args = ["demo", "--model", MODEL, "--tasks", "live_simple=1,irrelevance=1,removed_value=1",
            "--json", str(out), "--trace", str(trace), "--cache", str(cache),
            "--request-timeout", "300"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["config"]["model"] == MODEL
    assert report["config"]["modes"] == ["unguarded", "guarded"]
    for mode in ("unguarded", "guarded"):
        summary = report[mode]
        assert summary["tasks"] == 3 and summary["errors"] == 0
        assert summary["model_calls"] >= 3  # the model answered every task
        assert 0 <= summary["success"]["k"] <= 3
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    assert {(x["id"].split(":")[0], x["mode"]) for x in lines} >= {
        ("removed_value", "guarded"), ("removed_value", "unguarded")}
    # the guarded runs started from the unguarded runs' first replies (the response cache)
    assert "response cache:" in result.output and " 0 hits" not in result.output
    # a rerun is served from the cache file alone
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "0 misses" in again.output
    assert json.loads(out.read_text())["unguarded"]["success"] == report["unguarded"]["success"]
