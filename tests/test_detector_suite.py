"""The BFCL loaders, executor and labelled detector suite, on the real BFCL v4 data."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("bfcl_eval")

from jsonschema import Draft202012Validator
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from toolguard.specs import ToolSpec
from toolguard_evals import bfcl
from toolguard_evals import detector_suite as ds
from toolguard_evals.detector_suite.values import numbers_of

# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def suite() -> ds.Suite:
    return ds.build_suite(seed=7, limit_per_category=25, timing_episodes=25)


def _docs(case: ds.Case) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in case.tools}


def _validator(doc: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator(ToolSpec.from_bfcl(doc).parameters)


def _gold_by_record(suite: ds.Suite) -> dict[str, ds.Case]:
    return {c.id.rsplit(":", 1)[0]: c for c in suite.cases if c.perturbation == "gold"}


def _perturbed(suite: ds.Suite, name: str) -> list[tuple[ds.Case, ds.Case]]:
    gold = _gold_by_record(suite)
    pairs = [(c, gold[c.id.rsplit(":", 1)[0]]) for c in suite.cases if c.perturbation == name]
    assert pairs, f"no {name} cases in the suite"
    return pairs


def _question(case: ds.Case) -> str:
    return "\n".join(str(m.content) for m in case.messages[:-1]).casefold()


# ---------------------------------------------------------------------------- loaders


def test_category_counts_match_data_md() -> None:
    expected = {"simple_python": 400, "multiple": 200, "parallel": 200, "live_simple": 258,
                "live_multiple": 1053, "irrelevance": 240, "live_irrelevance": 884}
    assert {c: len(bfcl.load_category(c)) for c in expected} == expected
    assert all(r["ground_truth"] == [] for r in bfcl.load_category("irrelevance", limit=5))


def test_unknown_category_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown single-turn category"):
        bfcl.load_category("simple_rust")  # type: ignore[arg-type]


def test_first_acceptable_skips_empty_and_resolves_nested() -> None:
    assert bfcl.first_acceptable(["", "units"]) == "units"
    assert bfcl.first_acceptable([""]) is bfcl.MISSING
    assert bfcl.first_acceptable(["", None]) is bfcl.MISSING
    nested = [{"size": ["large"], "note": [""], "items": [[{"id": ["a1"], "n": [2, 3]}]]}]
    assert bfcl.first_acceptable(nested) == {"size": "large", "items": [{"id": "a1", "n": 2}]}


@pytest.mark.parametrize("category", ds.SUITE_CATEGORIES)
def test_gold_calls_are_concrete_calls_of_listed_tools(category: bfcl.SingleTurnCategory) -> None:
    for record in bfcl.load_category(category, limit=40):
        calls = bfcl.gold_calls(record)
        assert calls, record["id"]
        docs = {d["name"]: d for d in record["function"]}
        for name, args in calls:
            assert isinstance(name, str) and name in docs
            assert isinstance(args, dict)
            assert "" not in args.values()
            if not ds.gold_problems(record):
                assert _validator(docs[name]).is_valid(args), (record["id"], args)


def test_gold_calls_prefer_schema_valid_values() -> None:
    (record,) = [r for r in bfcl.load_category("live_simple") if r["id"] == "live_simple_141-94-0"]
    # gold lists unit: ["", "N/A"] for an enum of seconds/milliseconds: left out
    ((_, args),) = bfcl.gold_calls(record)
    assert "unit" not in args
    ((_, raw),) = bfcl.gold_calls(record, schema_aware=False)
    assert raw["unit"] == "N/A"


def test_gold_problems_finds_the_known_quirks() -> None:
    records = bfcl.load_category("live_multiple")
    (record,) = [r for r in records if r["id"] == "live_multiple_964-207-0"]
    problems = ds.gold_problems(record)
    assert any("statement" in p for p in problems)
    assert ds.gold_problems(bfcl.load_category("simple_python", limit=1)[0]) == []


# ---------------------------------------------------------------------------- executor


def test_parse_call_uses_literals_only() -> None:
    parsed = bfcl.parse_call("cd(folder='document')")
    assert parsed == bfcl.ParsedCall("cd", (), {"folder": "document"})
    assert bfcl.parse_call("sort('a.pdf')").args == ("a.pdf",)
    assert bfcl.parse_call("f(xs=[1, 2], d={'k': None})").kwargs == {"xs": [1, 2], "d": {"k": None}}
    for bad in ("cd(folder=x)", "os.system('ls')", "cd", "f(**kw)", "f(x=__import__('os'))"):
        with pytest.raises(ValueError):
            bfcl.parse_call(bad)


def test_function_docs_follow_bfcl_mapping() -> None:
    mapping = bfcl.doc_file_mapping()
    assert mapping["TwitterAPI"] == "posting_api.json"
    env = bfcl.BFCLEnvironment(["GorillaFileSystem", "MathAPI"], {"GorillaFileSystem": {}})
    docs = bfcl.function_docs(["GorillaFileSystem", "MathAPI"])
    assert len(docs) == 18 + 17
    assert {d["name"] for d in docs} <= set(env.methods)


def test_executor_replays_real_episodes_without_errors() -> None:
    episodes = bfcl.load_multi_turn("multi_turn_base", limit=8)
    for episode in episodes:
        _, results = bfcl.replay(episode)
        assert [len(r) for r in results] == [len(t) for t in episode.gold]
        for turn in results:
            for res in turn:
                assert res.ok, (episode.id, res)
                assert isinstance(res.content, str)
    # positional arguments are bound to their names: base_0 turn 2 is "sort('final_report.pdf')"
    _, results = bfcl.replay(episodes[0])
    assert results[2][0].name == "sort"
    assert results[2][0].args == {"file_name": "final_report.pdf"}
    json.loads(results[2][0].content)


def test_executor_turns_failures_into_error_results() -> None:
    (episode,) = bfcl.load_multi_turn("multi_turn_base", limit=1)
    env = bfcl.BFCLEnvironment.for_episode(episode)
    assert not env.call("no_such_tool", {}).ok
    bad = env.call("cd", {"directory": "x"})  # unknown keyword
    assert not bad.ok and bad.content.startswith("Error during execution")
    missing = env.execute("cd(folder='nonexistent')")
    assert not missing.ok and "error" in json.loads(missing.content)


def test_clone_and_state_compare_public_attributes() -> None:
    (episode,) = bfcl.load_multi_turn("multi_turn_base", limit=1)
    env = bfcl.BFCLEnvironment.for_episode(episode)
    before = env.state()
    clone = env.clone()
    assert clone.state() == before
    clone.execute("mkdir(dir_name='fresh')")
    assert clone.state() != before
    assert env.state() == before


def test_miss_func_hides_docs_until_their_turn() -> None:
    (episode,) = bfcl.load_multi_turn("multi_turn_miss_func", limit=1)
    ((turn, names),) = episode.missed_function.items()
    assert not {d["name"] for d in episode.tools_at(turn - 1)} & set(names)
    assert set(names) <= {d["name"] for d in episode.tools_at(turn)}


# ---------------------------------------------------------------------------- the suite


def test_suite_has_every_perturbation_with_its_label(suite: ds.Suite) -> None:
    counts = suite.counts()
    assert set(counts) == set(ds.PERTURBATION_LABELS)
    for case in suite.cases:
        assert case.label == ds.PERTURBATION_LABELS[case.perturbation]
        assert isinstance(case.messages[-1], AIMessage) and case.calls
        assert case.tools_key == ds.tools_key(case.tools)
        assert [c["id"] for c in case.calls] == sorted(
            (c["id"] for c in case.calls), key=lambda i: int(i.split("_")[1]))
        assert (case.target is None) == (case.label is None)


def test_perturbations_touch_only_the_target_call(suite: ds.Suite) -> None:
    for name in ds.SINGLE_TURN_PERTURBATIONS:
        for case, gold in _perturbed(suite, name):
            assert case.messages[:-1] == gold.messages[:-1]
            assert case.target is not None
            assert len(case.calls) == len(gold.calls)
            for j, (c, g) in enumerate(zip(case.calls, gold.calls, strict=True)):
                same = (c["name"], c["args"]) == (g["name"], g["args"])
                assert same == (j != case.target), (case.id, j)


def test_fabricated_names_are_not_in_the_tool_list(suite: ds.Suite) -> None:
    for case, _ in _perturbed(suite, "fabricated"):
        name = case.calls[case.target or 0]["name"]
        assert name.casefold() not in {d["name"].casefold() for d in case.tools}


def test_irrelevant_tool_is_another_listed_tool_with_valid_args(suite: ds.Suite) -> None:
    for case, gold in _perturbed(suite, "irrelevant_tool"):
        call = case.calls[case.target or 0]
        assert call["name"] in _docs(case)
        assert call["name"] not in {c["name"] for c in gold.calls}
        assert _validator(_docs(case)[call["name"]]).is_valid(call["args"]), case.id


def test_drop_required_removes_a_required_key(suite: ds.Suite) -> None:
    for case, gold in _perturbed(suite, "drop_required"):
        t = case.target or 0
        key = case.metadata["key"]
        doc = _docs(case)[gold.calls[t]["name"]]
        assert key in doc["parameters"]["required"]
        assert key in gold.calls[t]["args"] and key not in case.calls[t]["args"]
        assert set(gold.calls[t]["args"]) - set(case.calls[t]["args"]) == {key}


def test_rename_key_uses_an_unknown_key(suite: ds.Suite) -> None:
    for case, gold in _perturbed(suite, "rename_key"):
        t = case.target or 0
        old, new = case.metadata["key"], case.metadata["new_key"]
        props = _docs(case)[gold.calls[t]["name"]]["parameters"]["properties"]
        assert new not in props and old not in case.calls[t]["args"]
        assert case.calls[t]["args"][new] == gold.calls[t]["args"][old]


def test_wrong_type_breaks_the_declared_type(suite: ds.Suite) -> None:
    for case, _ in _perturbed(suite, "wrong_type"):
        call = case.calls[case.target or 0]
        errors = list(_validator(_docs(case)[call["name"]]).iter_errors(call["args"]))
        assert any(e.validator == "type" for e in errors), case.id


def test_invented_values_are_absent_from_the_conversation(suite: ds.Suite) -> None:
    for case, gold in _perturbed(suite, "invented_value"):
        t, key = case.target or 0, case.metadata["key"]
        old, new = gold.calls[t]["args"][key], case.calls[t]["args"][key]
        question = _question(case)
        assert isinstance(new, str) and new != old
        assert old.casefold() in question and new.casefold() not in question
        assert _validator(_docs(case)[case.calls[t]["name"]]).is_valid(case.calls[t]["args"])


def test_invented_numbers_are_absent_from_the_conversation(suite: ds.Suite) -> None:
    for case, gold in _perturbed(suite, "invented_number"):
        t, key = case.target or 0, case.metadata["key"]
        old, new = gold.calls[t]["args"][key], case.calls[t]["args"][key]
        numbers = numbers_of(_question(case))
        assert type(new) is type(old) and new != old
        assert float(old) in numbers and float(new) not in numbers


def test_repeat_cases_repeat_an_earlier_successful_call(suite: ds.Suite) -> None:
    cases = [c for c in suite.cases if c.perturbation == "repeat"]
    assert cases
    for case in cases:
        (call,) = case.calls
        answer = case.messages[-2]
        previous = case.messages[-3]
        assert isinstance(answer, ToolMessage) and answer.status == "success"
        assert isinstance(previous, AIMessage)
        (earlier,) = previous.tool_calls
        assert answer.tool_call_id == earlier["id"] != call["id"]
        assert (earlier["name"], earlier["args"]) == (call["name"], call["args"])
        assert "error" not in answer.content[:20].lower()
        assert case.metadata["effect"] in ("harmful", "harmless")
        assert call["name"] in _docs(case)


def test_next_call_cases_have_the_real_history(suite: ds.Suite) -> None:
    for case in (c for c in suite.cases if c.perturbation == "next_call"):
        assert isinstance(case.messages[-2], (HumanMessage, ToolMessage))
        answered = {m.tool_call_id for m in case.messages if isinstance(m, ToolMessage)}
        asked = [tc["id"] for m in case.messages[:-1] if isinstance(m, AIMessage)
                 for tc in m.tool_calls]
        assert answered == set(asked)


def test_harmful_repeats_exist_on_state_changing_calls() -> None:
    cases = ds.build_suite(seed=0, limit_per_category=0, timing_episodes=200).cases
    effects = {c.metadata["effect"] for c in cases if c.perturbation == "repeat"}
    assert effects == {"harmful", "harmless"}


def test_suite_is_reproducible_for_a_seed(suite: ds.Suite) -> None:
    again = ds.build_suite(seed=7, limit_per_category=25, timing_episodes=25)
    assert again.model_dump_json() == suite.model_dump_json()
    other = ds.build_suite(seed=8, limit_per_category=25, timing_episodes=25)
    assert other.model_dump_json() != suite.model_dump_json()


def test_case_round_trips_through_json(suite: ds.Suite) -> None:
    case = next(c for c in suite.cases if c.perturbation == "repeat")
    assert ds.Case.model_validate_json(case.model_dump_json()) == case


# ---------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class _V:
    action: str
    hallucination: str | None
    reason: str = ""


class _ConstGuard:
    def __init__(self, verdict: _V) -> None:
        self.verdict = verdict

    def check(self, messages: Sequence[BaseMessage]) -> list[_V]:
        last = messages[-1]
        assert isinstance(last, AIMessage)
        return [self.verdict for _ in last.tool_calls]


def test_scores_of_constant_guards(suite: ds.Suite) -> None:
    allow = ds.run_suite(suite.cases, lambda tools: _ConstGuard(_V("allow", None)))
    assert allow["cases"] == len(suite.cases)
    assert allow["false_block_rate"] == 0.0
    assert all(m["recall"] == 0.0 for m in allow["per_type"].values())

    fmt = ds.run_suite(suite.cases, lambda tools: _ConstGuard(_V("block", "format")))
    assert fmt["false_block_rate"] == 1.0
    assert fmt["per_type"]["format"]["recall"] == 1.0
    n_format = sum(c.label == "format" for c in suite.cases)
    assert fmt["per_type"]["format"]["precision"] == round(n_format / len(suite.cases), 4)
    assert fmt["per_type"]["format"]["support"] == n_format
    assert fmt["confusion"]["none"] == {"format": sum(c.label is None for c in suite.cases)}


def test_type_predictions_count_for_both_type_classes(suite: ds.Suite) -> None:
    report = ds.run_suite(suite.cases, lambda tools: _ConstGuard(_V("block", "type")))
    assert report["per_type"]["type"]["recall"] == 1.0
    assert report["per_type"]["type_irrelevant"]["recall"] == 1.0
    n_type = sum(c.label == "type" for c in suite.cases)
    assert report["per_type"]["type"]["precision"] == round(n_type / len(suite.cases), 4)


def test_real_guard_on_the_suite(suite: ds.Suite) -> None:
    report = ds.run_suite(suite.cases, ds.guard_factory("deterministic"), seed=suite.seed)
    assert set(report["per_type"]) == set(ds.SCORE_CLASSES)
    assert report["per_type"]["type"]["recall"] == 1.0  # unknown tools are always caught
    assert report["per_type"]["format"]["recall"] == 1.0
    assert report["false_block_rate"] is not None and report["false_block_rate"] < 0.2
    again = ds.run_suite(suite.cases, ds.guard_factory("deterministic"), seed=suite.seed)
    for key in ("per_type", "per_perturbation", "confusion", "examples", "false_block_rate"):
        assert again[key] == report[key]


def test_main_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "detectors.json"
    report = ds.main(str(out), seed=1, limit_per_category=3,
                     modes=("deterministic", "deterministic-norelevance"))
    assert set(report["by_mode"]) == {"deterministic", "deterministic-norelevance"}
    assert report["mode"] == "deterministic"
    saved = json.loads(out.read_text())
    assert saved["cases"] == report["cases"] and saved["seed"] == 1
    assert "precision" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown mode"):
        ds.main(None, modes=("psychic",))


def test_helpers() -> None:
    assert ds.number_words(25) == "twenty-five"
    assert ds.number_words(1203) == "one thousand two hundred three"
    rng = random.Random(0)
    name, _ = ds.fabricate_name("calculate_area", ["calculate_area"], rng)
    assert name != "calculate_area" and "computeulate" not in name
    key, _ = ds.rename_key("start_date", ["start_date", "end_date"], rng)
    assert key not in ("start_date", "end_date")
    assert ds.wrong_type_value(3, "integer", rng) == "three"
    assert ds.wrong_type_value(["a", "b"], "array", rng) == "a, b"
    assert ds.string_kind("city", "Paris") == "location"
    assert ds.string_kind("order_id", "ORD-123") == "id"
    assert ds.string_kind("player_name", "Lionel Messi") == "person"


def test_public_names_stay_importable_from_the_package() -> None:
    """What other suites (suite B, the dialogues) import from the package keeps working."""
    from toolguard_evals.detector_suite import (  # noqa: F401
        PERTURBATION_LABELS,
        Case,
        Perturbation,
        fabricate_name,
        guard_factory,
        number_words,
        rename_key,
        run_suite,
        score,
        tools_key,
        wrong_type_value,
    )
    from toolguard_evals.detector_suite.records import Case as RecordsCase

    assert Case is RecordsCase and set(ds.__all__) <= set(dir(ds))
    assert callable(score) and callable(run_suite) and ds.main is ds.run.main


def test_one_perturbation_module_serves_both_suites() -> None:
    """Suite B supplies targets only; the perturbations and their draws live here."""
    from toolguard_evals import suite_b as sb
    from toolguard_evals.detector_suite.perturb import PERTURBERS

    doc = {"name": "get_weather", "description": "Weather of a city.",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string"}, "days": {"type": "integer"}},
               "required": ["city"]}}
    other = {"name": "book_taxi", "description": "Book a taxi.",
             "parameters": {"type": "object", "properties": {"to": {"type": "string"}},
                            "required": ["to"]}}
    history: list[BaseMessage] = [HumanMessage("Weather in Lisbon for 3 days?")]

    def target(sampling: ds.Sampling) -> ds.Target:
        return ds.Target(id="r1", category="x", history=history, tools=[doc, other],
                         calls=[("get_weather", {"city": "Lisbon", "days": 3})], seed=0,
                         sampling=sampling)

    for sampling in (ds.BFCL_SAMPLING, ds.SUITE_B_SAMPLING):
        made = {p: f(target(sampling)) for p, f in PERTURBERS.items()}
        assert made["drop_required"] is not None
        assert made["drop_required"].calls[0][1] == {"days": 3}
        assert made["fabricated"] is not None
        assert made["fabricated"].calls[0][0] not in {"get_weather", "book_taxi"}
        assert made["invented_value"] is not None  # by shape: no kinds declared
    # per-perturbation streams: one perturbation's draws do not move another's
    t = target(ds.SUITE_B_SAMPLING)
    alone = PERTURBERS["rename_key"](t)
    PERTURBERS["fabricated"](t)
    assert PERTURBERS["rename_key"](t) == alone
    assert not any(hasattr(sb, n) for n in ("_PERTURBERS", "_fabricated", "invent_value"))
