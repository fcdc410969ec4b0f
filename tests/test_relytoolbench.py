"""RelyToolBench harness: loader, ReAct parser, metric fidelity, evaluator, cache, rescoring.

Real data (``../shared/data/relytoolbench``), real :class:`toolguard.Guard`; the model,
simulator and judges are :class:`~toolguard.testing.ScriptedChatModel` s here (plumbing).
The real-model run is in ``test_relytoolbench_local.py``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage

from tests.conftest import SHARED_DATA
from toolguard.context import message_text
from toolguard.guard import Guard
from toolguard.testing import ScriptedChatModel
from toolguard_evals.relytoolbench.agent import (
    Episode,
    Step,
    parse_finish,
    parse_react,
    run_episode,
    system_prompt,
)
from toolguard_evals.relytoolbench.data import RtbCase, load_relytoolbench
from toolguard_evals.relytoolbench.evaluator import Judges, check_type, score_episode
from toolguard_evals.relytoolbench.guarded import run_guarded_episode
from toolguard_evals.relytoolbench.metrics import (
    EpisodeScore,
    aggregate,
    pass_score,
    summarize,
    utility,
)
from toolguard_evals.relytoolbench.run import episode_settings, generate, score
from toolguard_evals.relytoolbench.simulator import ApiSimulator, normalize_response
from toolguard_evals.runner import Endpoint, GenerationCache

DATA = SHARED_DATA / "relytoolbench"
ORIGINAL = "G1_instruction:86143"
MISSING = "G1_instruction_missing_all_arguments:85152"
UNMATCHED = "G1_instruction_with_unmatched_tools:1572"


@pytest.fixture(scope="module")
def cases() -> dict[str, RtbCase]:
    if not DATA.is_dir():
        pytest.skip(f"RelyToolBench data not found at {DATA}")
    return {c.id: c for c in load_relytoolbench(DATA, ids=[ORIGINAL, MISSING, UNMATCHED])}


# ---------------------------------------------------------------------------- loader
def test_loader_counts_match_the_paper() -> None:
    if not DATA.is_dir():
        pytest.skip(f"RelyToolBench data not found at {DATA}")
    all_cases = load_relytoolbench(DATA)
    by_subset: dict[str, int] = {}
    for c in all_cases:
        by_subset[c.subset] = by_subset.get(c.subset, 0) + 1
    assert by_subset == {"Original": 348, "Missing Parameter": 262, "Unmatched Tools": 348}
    assert len({c.id for c in all_cases}) == 958
    assert all(c.orig_query for c in all_cases if c.subset == "Missing Parameter")
    # Original and Unmatched Tools share query ids and queries, not tools
    orig = {c.id.split(":")[1]: c for c in all_cases if c.file == "G1_instruction"}
    unm = {c.id.split(":")[1]: c for c in all_cases
           if c.file == "G1_instruction_with_unmatched_tools"}
    assert orig.keys() == unm.keys()
    qid = next(iter(orig))
    assert orig[qid].query == unm[qid].query
    assert {s.name for s in orig[qid].specs} != {s.name for s in unm[qid].specs}


def test_loader_limit_is_per_file_and_validated() -> None:
    if not DATA.is_dir():
        pytest.skip(f"RelyToolBench data not found at {DATA}")
    few = load_relytoolbench(DATA, limit=2)
    assert len(few) == 18 and len({c.file for c in few}) == 9
    assert [c.id for c in load_relytoolbench(DATA, limit=1, groups=("G2_category",),
                                             subsets=("Original",))] == ["G2_category:43"]
    with pytest.raises(ValueError, match="limit"):
        load_relytoolbench(DATA, limit=0)
    with pytest.raises(ValueError, match="unknown subset"):
        load_relytoolbench(DATA, subsets=("Nope",))  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match=r"no-such-folder.*TOOLGUARD_DATA_DIR"):
        load_relytoolbench(DATA.parent / "no-such-folder")


def test_specs_use_toolbench_names(cases: dict[str, RtbCase]) -> None:
    case = cases[ORIGINAL]
    assert all("_for_" in s.name for s in case.specs)
    prompt = system_prompt(case, "react")
    assert "Thought:\nAction:\nAction Input:" in prompt
    assert "give_up_and_talk_to_user" in prompt and case.specs[0].name in prompt
    native = system_prompt(case, "native")
    assert "Action Input" not in native and case.specs[0].name not in native


# ---------------------------------------------------------------------------- parser
@pytest.mark.parametrize(("text", "action", "action_input"), [
    ("Thought: look it up\nAction: get_x_for_y\nAction Input: {\"a\": 1}",
     "get_x_for_y", '{"a": 1}'),
    ("I will search.\nAction: get_x_for_y\nAction Input: {}", "get_x_for_y", "{}"),
    ("**Thought:** hm\n**Action:** `get_x_for_y`\n**Action Input:** {\"a\": \"b\"}",
     "get_x_for_y", '{"a": "b"}'),
    ("thought: x\naction: Finish()\naction input: ```json\n{\"return_type\": \"give_answer\","
     " \"final_answer\": \"42\"}\n```", "Finish",
     '{"return_type": "give_answer", "final_answer": "42"}'),
    ("Thought: a\nAction: t\nAction Input: {\"q\": \"}{\"} and then I will wait",
     "t", '{"q": "}{"}'),
    ("Thought: a\nAction: t\nAction Input: not json\nObservation: fake", "t", "not json"),
    ("Thought: a\nAction: t", "t", ""),
    ("Thought：全角\nAction：t\nAction Input：{}", "t", "{}"),
])
def test_parse_react_reads_malformed_turns(text: str, action: str, action_input: str) -> None:
    parsed = parse_react(text)
    assert parsed is not None
    assert (parsed.action, parsed.action_input) == (action, action_input)


@pytest.mark.parametrize("text", ["", "I think the answer is 42.", "Action:\nAction Input: {}",
                                  "Thought: only thinking"])
def test_parse_react_without_an_action_gives_none(text: str) -> None:
    assert parse_react(text) is None


def test_parse_finish_variants() -> None:
    assert parse_finish('{"return_type": "give_answer", "final_answer": "ok"}') == (
        "give_answer", "ok")
    assert parse_finish('{"return_type": "give_up_and_talkto_user"}') == (
        "give_up_and_talk_to_user", None)
    # broken JSON: the original's substring fallback
    assert parse_finish('{"return_type": "give_answer", "final_answer": "a "quoted" b"}') == (
        "give_answer", 'a "quoted" b')
    assert parse_finish('{"return_type": "dance"}') == (None, None)
    assert parse_finish("") == (None, None)


# ---------------------------------------------------------------------------- metrics
def _score(case_id: str, subset: str, end: str, reasons: list[str], status: str | None,
           hallucinated: bool) -> EpisodeScore:
    p = pass_score(subset, end, status)  # type: ignore[arg-type]
    return EpisodeScore(case_id=case_id, subset=subset, group="G1_instruction", end=end,
                        reasons=reasons, answer_status=status,
                        task_hallucinated=hallucinated, pass_score=p,
                        utility=utility(subset, p, hallucinated, len(reasons)))  # type: ignore[arg-type]


def test_pass_score_and_utility_rules() -> None:
    assert pass_score("Original", "give_answer", "Solved") == 1.0
    assert pass_score("Original", "give_answer", "Unsure") == 0.5
    assert pass_score("Original", "give_answer", "Unsolved") == 0.0
    assert pass_score("Original", "max_steps", None) == 0.0
    assert pass_score("Original", "give_up_and_talk_to_user", None) == 0.0
    assert pass_score("Missing Parameter", "guard_ask_user", None) == 1.0
    assert pass_score("Unmatched Tools", "give_up_and_change_tools", None) == 1.0
    assert pass_score("Unmatched Tools", "give_answer", "Solved") == 0.0
    # 20 for success minus min(extra calls, 10); extra = calls - necessary (1 / 0)
    assert utility("Original", 1.0, False, 1) == 20.0
    assert utility("Original", 1.0, False, 4) == 17.0
    assert utility("Original", 0.0, False, 30) == -10.0  # cost capped at 10
    assert utility("Original", 0.5, False, 0) == 10.0
    assert utility("Original", 1.0, True, 2) == -11.0  # hallucination: -10, not 20
    assert utility("Missing Parameter", 1.0, False, 0) == 20.0
    assert utility("Unmatched Tools", 1.0, False, 3) == 17.0  # necessary 0
    assert utility("Unmatched Tools", 0.0, False, 11) == -10.0


def test_aggregate_matches_hand_computed_values() -> None:
    n, v = "no_hallucination", "parameter_value_hallucination"
    items = [
        _score("G1_instruction:1", "Original", "give_answer", [n, n], "Solved", False),
        _score("G1_instruction:2", "Original", "give_answer", [n, v], "Unsure", False),
        _score("G1_instruction:3", "Original", "max_steps", [n] * 12, None, False),
        _score("G1_instruction:4", "Original", "give_answer", [], "Solved", True),
    ]
    # p = 1, .5, 0, 1; h = 0, 0, 0, 1; u = 19, 9, -10, -10; calls 2, 2, 12, 0
    m = aggregate(items)
    assert m["n"] == 4
    assert m["pass_rate"] == pytest.approx(62.5)
    assert m["task_hallucination_rate"] == pytest.approx(25.0)
    assert m["repr"] == pytest.approx(37.5)
    # per-episode hallucinated share 0, 1/2, 0, 0 (no calls counts 0) -> 12.5 %
    assert m["tool_hallucination_rate"] == pytest.approx(12.5)
    assert m["by_type"] == {"type": 0.0, "timing": 0.0, "format": 0.0,
                            "content": pytest.approx(12.5)}
    assert m["utility"] == pytest.approx(2.0)
    assert m["avg_tool_calls"] == pytest.approx(4.0)
    assert m["answer_rate"] == pytest.approx(75.0)
    assert m["indecisive_rate"] == 0.0


def test_summarize_is_a_macro_average_over_files() -> None:
    n = "no_hallucination"
    items = [
        _score("G1_instruction_missing_all_arguments:1", "Missing Parameter",
               "guard_ask_user", [], None, False),
        _score("G1_instruction_missing_all_arguments:2", "Missing Parameter",
               "give_answer", ["parameter_value_hallucination"], "Solved", True),
        _score("G2_category_missing_all_arguments:3", "Missing Parameter",
               "give_up_and_talk_to_user", [n], None, False),
        _score("G1_instruction_with_unmatched_tools:4", "Unmatched Tools",
               "give_up_and_change_tools",
               ["tool_relevance_hallucination", n, "tool_duplicated_hallucination"], None, False),
    ]
    s = summarize(items)
    assert set(s["files"]) == {"G1_instruction_missing_all_arguments",
                               "G2_category_missing_all_arguments",
                               "G1_instruction_with_unmatched_tools"}
    g1 = s["files"]["G1_instruction_missing_all_arguments"]
    assert g1["pass_rate"] == 50.0 and g1["task_hallucination_rate"] == 50.0
    assert g1["utility"] == pytest.approx((20 + (-10 - 1)) / 2)
    mp = s["subsets"]["Missing Parameter"]
    assert mp["n"] == 3
    assert mp["pass_rate"] == pytest.approx((50.0 + 100.0) / 2)  # not 2/3 pooled
    assert mp["repr"] == pytest.approx(mp["pass_rate"] - mp["task_hallucination_rate"])
    ut = s["subsets"]["Unmatched Tools"]
    assert ut["tool_hallucination_rate"] == pytest.approx(200 / 3)
    assert ut["by_type"]["type"] == pytest.approx(100 / 3)
    assert ut["by_type"]["timing"] == pytest.approx(100 / 3)
    assert ut["utility"] == 17.0
    assert s["overall"]["n"] == 4
    assert s["overall"]["pass_rate"] == pytest.approx((50 + 100 + 100) / 3)
    assert "Original" not in s["subsets"]


# ---------------------------------------------------------------------------- evaluator
def _judge_model(labels: dict[str, str]) -> ScriptedChatModel:
    """A judge answering by prompt: the first key found in the prompt picks the label."""
    def answer(messages: list[BaseMessage]) -> AIMessage:
        text = message_text(messages[-1])
        for marker, label in labels.items():
            if marker in text:
                return AIMessage(json.dumps({"reason": "scripted", "label": label}))
        return AIMessage('{"label": "Unsure"}')
    return ScriptedChatModel(script=[answer] * 100)


def _episode(case: RtbCase, steps: list[Step], end: str, answer: str = "") -> Episode:
    return Episode(case_id=case.id, subset=case.subset, group=case.group, query=case.query,
                   format="react", guarded=False, steps=steps, end=end,
                   final_answer=answer)


def _call(name: str, args_text: str, observation: str = '{"error": "", "response": "ok"}',
          executed: bool = True) -> Step:
    try:
        args = json.loads(args_text) if args_text else {}
    except ValueError:
        args = None
    return Step(turn=0, kind="call", action=name, action_input=args_text,
                args=args if isinstance(args, dict) else None, executed=executed,
                observation=observation)


def test_evaluator_reasons_follow_the_papers_order(cases: dict[str, RtbCase]) -> None:
    case = cases[MISSING]
    spec = case.specs[0]
    req = spec.required[0] if spec.required else None
    assert req is not None, "the chosen case's first API has a required parameter"
    good = json.dumps({req: "4006381333931"})
    steps = [
        _call("made_up_for_nothing", "{}"),
        _call(spec.name, good),
        _call(spec.name, good),  # same name, args and response: timing
        _call(spec.name, "{not json"),
        _call(spec.name, "{}"),
        _call(spec.name, json.dumps({req: "x", "zzz": 1})),
        _call(spec.name, json.dumps({req: 5})),
        _call(spec.name, json.dumps({req: "SECRET-ID-991"}), observation='{"error": "", '
              '"response": "other"}'),
        _call(spec.name, "{}", executed=False),  # blocked: not scored
    ]
    model = _judge_model({"SECRET-ID-991": "Untruthful", "Specific Tool Calling": "Truthful",
                          "answer_status": "Solved"})
    judges = Judges(model, settings={"model": "scripted"})
    result = asyncio.run(score_episode(case, _episode(case, steps, "give_answer", "A pen."),
                                       judges))
    assert result.reasons == [
        "tool_name_hallucination", "no_hallucination", "tool_duplicated_hallucination",
        "parameter_json_format_hallucination", "parameter_required_missing",
        "parameter_name_hallucination", "parameter_value_type_error",
        "parameter_value_hallucination"]
    assert result.blocked == 1 and result.calls == 8
    # an answer is not the success on an unsolvable subset (pass 0)
    assert result.answer_status == "Solved" and result.pass_score == 0.0
    # Solved with some hallucinated calls: answer relevance to the flagged call decides;
    # the scripted judge answers Unsure there -> not a task hallucination
    assert result.task_hallucinated is False
    assert result.utility == 0.0 - 8  # 8 calls, none necessary
    assert judges.asked == 4  # 2 truthfulness + answer status + answer relevance


def test_answer_without_clean_calls_is_a_task_hallucination(cases: dict[str, RtbCase]) -> None:
    case = cases[MISSING]
    judges = Judges(_judge_model({"answer_status": "Solved"}), settings={"model": "scripted"})
    result = asyncio.run(score_episode(case, _episode(case, [], "give_answer", "Here!"), judges))
    assert result.task_hallucinated is True  # rtl.py: no clean call at all
    assert result.pass_score == 0.0 and result.utility == -10.0


def test_check_type_is_pythons_isinstance() -> None:
    assert check_type("a", "string") and check_type(3, "integer") and check_type(True, "boolean")
    assert not check_type("3", "integer") and not check_type(3, "string")
    assert not check_type(3, "ENUMERATION")


def test_simulator_normalizes_like_stabletoolbench() -> None:
    assert json.loads(normalize_response('{"error": "", "response": {"a": 1}}')) == {
        "error": "", "response": {"a": 1}}
    assert json.loads(normalize_response('```json\n{"x": 2}\n```')) == {
        "error": "", "response": {"x": 2}}
    assert json.loads(normalize_response("no json here"))["error"] == (
        "Failed to generate fake response")


# ---------------------------------------------------------------------------- agent loop
def _react(action: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage(f"Thought: go\nAction: {action}\nAction Input: {json.dumps(args)}")


def _sim_model() -> ScriptedChatModel:
    return ScriptedChatModel(script=[AIMessage('{"error": "", "response": "simulated"}')] * 50)


def test_guard_turns_an_invented_id_into_talk_to_user(cases: dict[str, RtbCase]) -> None:
    case = cases[MISSING]
    spec = next(s for s in case.specs if s.required)
    args = {r: "zq-48213-invented" for r in spec.required}
    finish = _react("Finish", {"return_type": "give_answer", "final_answer": "done"})
    sim = ApiSimulator(_sim_model(), settings={"model": "scripted"})
    plain = asyncio.run(run_episode(case, ScriptedChatModel(script=[_react(spec.name, args),
                                                                    finish]),
                                    sim, fmt="react", max_steps=3))
    assert plain.end == "give_answer" and len(plain.executed_calls) == 1
    assert json.loads(plain.executed_calls[0].observation)["response"] == "simulated"
    # the shipped path: create_agent + GuardMiddleware; and the engine-level cross-check
    agent = asyncio.run(run_guarded_episode(
        case, ScriptedChatModel(script=[_react(spec.name, args), finish]), sim, fmt="react",
        max_steps=3))
    engine = asyncio.run(run_episode(case, ScriptedChatModel(script=[_react(spec.name, args),
                                                                     finish]),
                                     sim, fmt="react", guard=Guard(case.specs), max_steps=3))
    for guarded in (agent, engine):
        assert guarded.end == "guard_ask_user" and guarded.indecisive == "TalkToUser"
        assert guarded.executed_calls == [] and guarded.steps[0].verdict is not None
        assert guarded.steps[0].verdict["hallucination"] == "content"
        assert guarded.guarded and guarded.model_calls == 1
    assert agent.steps[0].action_input == engine.steps[0].action_input


def test_guarded_agent_runs_allowed_calls_and_finishes(cases: dict[str, RtbCase]) -> None:
    """Through create_agent: an allowed call reaches the simulator, Finish ends the run."""
    case = cases[ORIGINAL]
    spec = case.specs[0]
    finish = _react("Finish", {"return_type": "give_answer", "final_answer": "done"})
    seen: list[list[BaseMessage]] = []

    def model(messages: list[BaseMessage]) -> AIMessage:
        seen.append(list(messages))
        return _react(spec.name, {}) if len(seen) == 1 else finish

    sim = ApiSimulator(_sim_model(), settings={"model": "scripted"})
    ep = asyncio.run(run_guarded_episode(case, ScriptedChatModel(script=[model] * 3), sim,
                                         fmt="react", max_steps=3))
    plain = asyncio.run(run_episode(case, ScriptedChatModel(script=[_react(spec.name, {}),
                                                                    finish]),
                                    sim, fmt="react", max_steps=3))
    assert ep.end == plain.end == "give_answer" and ep.final_answer == "done"
    assert [s.kind for s in ep.steps] == [s.kind for s in plain.steps] == ["call", "finish"]
    assert ep.steps[0].executed and ep.steps[0].verdict == {
        "action": "allow", "hallucination": None, "reason": ""}
    assert ep.steps[0].observation == plain.steps[0].observation
    # the model saw the paper's format: system prompt, "Begin!", then an Observation
    assert message_text(seen[1][1]).endswith("Begin!\n")
    assert message_text(seen[1][-1]).startswith("Observation: ")
    assert seen[1][0].content == system_prompt(case, "react")


def test_native_loop_and_step_budget(cases: dict[str, RtbCase]) -> None:
    case = cases[ORIGINAL]
    spec = case.specs[0]
    call = AIMessage("", tool_calls=[{"name": spec.name, "args": {}, "id": "a"},
                                     {"name": "Finish", "args": {"return_type": "oops"},
                                      "id": "b"}])
    text = AIMessage("I am not sure.")
    sim = ApiSimulator(_sim_model(), settings={"model": "scripted"})
    ep = asyncio.run(run_episode(case, ScriptedChatModel(script=[call, text]), sim,
                                 fmt="native", max_steps=2))
    assert ep.end == "max_steps" and ep.model_calls == 2
    assert [s.kind for s in ep.steps] == ["call", "finish", "no_action"]
    assert "not a valid choice" in ep.steps[1].observation
    agent = asyncio.run(run_guarded_episode(case, ScriptedChatModel(script=[call, text]), sim,
                                            fmt="native", max_steps=2))
    assert agent.end == "max_steps" and agent.model_calls == 2
    assert [s.kind for s in agent.steps] == ["call", "finish", "no_action"]
    assert "not a valid choice" in agent.steps[1].observation


# ---------------------------------------------------------------------------- cache
def test_cache_resume_and_offline_rescoring(cases: dict[str, RtbCase], tmp_path: Path) -> None:
    chosen = list(cases.values())
    path = tmp_path / "cache.jsonl"
    endpoint = Endpoint(base_url="http://scripted.invalid/v1", model="scripted")

    def agent(messages: list[BaseMessage]) -> AIMessage:
        case = next(c for c in chosen if c.query in message_text(messages[1]))
        if len(messages) <= 2:
            spec = case.specs[0]
            return _react(spec.name, {r: "Messi" for r in spec.required})
        return _react("Finish", {"return_type": "give_answer", "final_answer": "Messi, 42"})

    async def gen_and_score(cache: GenerationCache, judge: ScriptedChatModel | None
                            ) -> tuple[int, int, list[EpisodeScore]]:
        settings = episode_settings(endpoint, fmt="react", guarded=False, max_steps=3)
        sim = ApiSimulator(_sim_model(), cache=cache, settings=endpoint.settings())
        result = await generate(chosen, ScriptedChatModel(script=[agent] * 20), sim,
                                settings=settings, guarded=False, fmt="react", max_steps=3,
                                cache=cache, concurrency=2, progress=False)
        judges = Judges(judge, cache=cache, settings=endpoint.settings())
        scores = await score(chosen, result.outputs, judges)
        return result.generated, result.cached, scores

    judge = _judge_model({"answer_status": "Solved", "Specific Tool Calling": "Truthful",
                          "Tool Name": "Irrelevant"})
    gen1, cached1, online = asyncio.run(gen_and_score(GenerationCache(path), judge))
    assert (gen1, cached1) == (3, 0)
    assert judge.position > 0
    # a second run (fresh process view of the same file) generates nothing and, with no
    # judge model at all, rescores identically from the cached judgments
    gen2, cached2, offline = asyncio.run(gen_and_score(GenerationCache(path), None))
    assert (gen2, cached2) == (0, 3)
    assert offline == online
    assert all(s.judge_misses == 0 for s in offline)
    assert summarize(offline) == summarize(online)
    by_id = {s.case_id: s for s in online}
    assert by_id[ORIGINAL].pass_score == 1.0
    assert by_id[UNMATCHED].reasons == ["tool_relevance_hallucination"]


def test_cli_score_only_rescores_a_cache_offline(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from toolguard_evals.cli import app

    if not DATA.is_dir():
        pytest.skip(f"RelyToolBench data not found at {DATA}")
    chosen = load_relytoolbench(DATA, limit=1, groups=("G1_instruction",))
    cache = GenerationCache(tmp_path / "c.jsonl")
    endpoint = Endpoint(base_url=None, max_tokens=256, timeout=120.0)  # the CLI's defaults
    finish = _react("Finish", {"return_type": "give_up_and_talk_to_user"})

    async def fill() -> None:
        for guarded in (False, True):
            settings = episode_settings(endpoint, fmt="react", guarded=guarded, max_steps=6)
            sim = ApiSimulator(_sim_model(), cache=cache, settings=endpoint.settings())
            await generate(chosen, ScriptedChatModel(script=[finish] * 3), sim,
                           settings=settings, guarded=guarded, fmt="react", max_steps=6,
                           cache=cache, concurrency=1, progress=False)

    asyncio.run(fill())
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    result = CliRunner().invoke(app, [
        "eval", "relytoolbench", "--score-only", "--cache", str(tmp_path / "c.jsonl"),
        "--limit", "1", "--group", "G1_instruction", "--json", str(out_json),
        "--plot", str(out_png)])
    assert result.exit_code == 0, result.output
    assert "overall · pass rate %" in result.output
    report = json.loads(out_json.read_text())
    for variant in report["variants"].values():
        assert variant["generation"]["cached"] == 3 and variant["generation"]["missing"] == []
        # TalkToUser everywhere: only the two unsolvable subsets pass
        assert variant["metrics"]["subsets"]["Original"]["pass_rate"] == 0.0
        assert variant["metrics"]["subsets"]["Missing Parameter"]["pass_rate"] == 100.0
        assert variant["metrics"]["overall"]["utility"] == pytest.approx((0 + 20 + 20) / 3)
    assert out_png.stat().st_size > 0


def test_throughput_slice_is_the_shortest_prompt_per_subset() -> None:
    from toolguard_evals.bench_throughput import bench_throughput, small_slice

    if not DATA.is_dir():
        pytest.skip(f"RelyToolBench data not found at {DATA}")
    chosen = small_slice(1, groups=("G1_instruction",), data_dir=DATA)
    assert [c.subset for c in chosen] == ["Original", "Missing Parameter", "Unmatched Tools"]
    everything = load_relytoolbench(DATA, groups=("G1_instruction",))
    for c in chosen:
        shortest = min(len(system_prompt(o, "react")) for o in everything
                       if o.subset == c.subset)
        assert len(system_prompt(c, "react")) == shortest
    with pytest.raises(ValueError, match="levels"):
        bench_throughput(endpoint=Endpoint(base_url="http://unused.invalid/v1", model="m"),
                         levels=(1, 0))


def test_simulator_turns_a_refused_request_into_a_cached_failure(
        cases: dict[str, RtbCase]) -> None:
    import httpx
    import openai

    case = cases[MISSING]
    spec = case.specs[0]

    def refuse(messages: list[BaseMessage]) -> AIMessage:
        request = httpx.Request("POST", "http://sim.invalid/v1/chat/completions")
        response: Any = httpx.Response(400, request=request)  # openai may vendor httpx
        raise openai.BadRequestError("context length exceeded", response=response, body=None)

    model = ScriptedChatModel(script=[refuse])
    sim = ApiSimulator(model, settings={"model": "scripted"})
    args = json.dumps({r: "1" for r in spec.required})
    first = asyncio.run(sim.respond(case, spec.name, args))
    assert json.loads(first)["error"] == "Failed to generate fake response"
    assert asyncio.run(sim.respond(case, spec.name, args)) == first  # cached, not re-asked
    assert model.position == 1 and sim.generated == 1 and sim.cached == 1
    # the JSON request travels in extra_body (langchain-openai's parse path is avoided)
    ok = ScriptedChatModel(script=[AIMessage('{"error": "", "response": "fine"}')])
    sim2 = ApiSimulator(ok, settings={"model": "scripted"})
    assert json.loads(asyncio.run(sim2.respond(case, spec.name, args)))["response"] == "fine"
