"""Tests for toolguard.precheck and evals.abstain on real RelyToolBench and BFCL cases."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from conftest import require_bfcl
from langchain_core.messages import AIMessage, HumanMessage

from evals.abstain import DEFAULT_RTB_DIR, Case, load_bfcl, load_relytoolbench, main, score
from toolguard.precheck import Precheck, PrecheckDecision, latest_request, stated_values
from toolguard.specs import ToolSpec


def _rtb() -> list[Case]:
    if not (DEFAULT_RTB_DIR / "G1_instruction.json").is_file():
        pytest.skip(f"RelyToolBench data missing at {DEFAULT_RTB_DIR}")
    return load_relytoolbench(limit=6)


def _case(cases: list[Case], case_id: str) -> Case:
    return next(c for c in cases if c.id == case_id)


@pytest.mark.parametrize(
    ("case_id", "expected"),
    [
        ("G1_instruction:588", "proceed"),
        ("G1_instruction_missing_all_arguments:2399", "ask_user"),
        ("G1_instruction_with_unmatched_tools:588", "no_suitable_tool"),
    ],
)
def test_relytoolbench_decisions(case_id: str, expected: str) -> None:
    case = _case(_rtb(), case_id)
    decision = Precheck(case.tools).decide(case.messages)
    assert isinstance(decision, PrecheckDecision)
    assert decision.decision == expected == case.expected
    assert decision.reason
    if expected == "ask_user":
        assert decision.missing, "ask_user names the missing parameters"


def test_async_matches_sync() -> None:
    case = _case(_rtb(), "G1_instruction_with_unmatched_tools:588")
    pre = Precheck(case.tools)
    assert asyncio.run(pre.adecide(case.messages)) == pre.decide(case.messages)


@pytest.mark.parametrize(
    ("case_id", "expected"),
    [
        ("irrelevance_0", "no_suitable_tool"),
        ("live_irrelevance_0-0-0", "no_suitable_tool"),
        ("simple_python_0", "proceed"),
        ("multiple_0", "proceed"),
        ("live_multiple_0-0-0", "proceed"),
    ],
)
def test_bfcl_decisions(case_id: str, expected: str) -> None:
    require_bfcl()
    case = _case(load_bfcl(limit=1), case_id)
    assert Precheck(case.tools).decide(case.messages).decision == expected


def test_no_tools_and_bad_config() -> None:
    assert Precheck([]).decide(["hi"]).decision == "no_suitable_tool"
    with pytest.raises(ValueError, match="max_desc_overlap"):
        Precheck([], max_desc_overlap=-1)
    with pytest.raises(ValueError, match="unknown pre-check mode"):
        Precheck([], mode="cot")  # type: ignore[arg-type]


def test_latest_request_and_values() -> None:
    msgs = [HumanMessage("first"), AIMessage("ok"), HumanMessage("track ID 'CA107308006SI'")]
    assert latest_request(msgs) == "track ID 'CA107308006SI'"
    assert latest_request([{"role": "user", "content": "x"}]) == "x"
    tool = ToolSpec(name="track_package", description="Track a package")
    assert stated_values("track package 'CA107308006SI'", [tool])
    assert not stated_values("Track the package with the tracking number.", [tool])


def test_score_keys_and_pairing() -> None:
    t = [ToolSpec(name="a")]
    cases = [
        Case("1", "Original", t, [], "proceed"),
        Case("2", "Unmatched Tools", t, [], "no_suitable_tool"),
        Case("3", "Missing Parameter", t, [], "ask_user"),
    ]
    report = score(cases, ["ask_user", "no_suitable_tool", "proceed"])
    assert set(report) == {"mode", "overall", "per_subset"}
    assert set(report["overall"]) == {"accuracy", "f1"}
    assert report["per_subset"]["Original"] == {"accuracy": 0.0, "f1": None, "n": 1}
    # Unmatched Tools is scored with Original: TP 1, FP 1 -> F1 66.67
    assert report["per_subset"]["Unmatched Tools"] == {"accuracy": 50.0, "f1": 66.67, "n": 1}
    assert report["per_subset"]["3-way"]["accuracy"] == pytest.approx(33.33)


def test_eval_small_run(tmp_path: Path) -> None:
    _rtb()
    out = tmp_path / "abstain.json"
    report = main("relytoolbench", limit=3, json_path=out)
    saved = json.loads(out.read_text())
    assert saved["mode"] == report["mode"] == "deterministic"
    assert set(saved["per_subset"]) == {"Original", "Missing Parameter", "Unmatched Tools",
                                        "3-way"}
    for row in saved["per_subset"].values():
        assert set(row) == {"accuracy", "f1", "n"}
        assert 0 <= row["accuracy"] <= 100
    assert saved["per_subset"]["Original"]["n"] == 9
