"""LLM judges: label parsing, the paper's prompts, relevance and content judges (sync/async)."""

from __future__ import annotations

import string
from typing import Any

import pytest
from conftest import ai_calls
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.errors import GraphInterrupt

from toolguard import Guard, ToolSpec
from toolguard.detectors import ContentDetector
from toolguard.judge import LLMJudge, parse_label
from toolguard.relevance import LLMRelevanceJudge
from toolguard.testing import ScriptedChatModel
from toolguard_evals.prompts import load_prompt

RELEVANCE = ("Irrelevant", "Relevant", "Unsure")
CONTENT = ("Untruthful", "Truthful", "Unsure")

WEATHER = ToolSpec.from_openai({
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}})
FLIGHTS = ToolSpec.from_openai({
    "name": "search_flights", "description": "Search flights between two airports.",
    "parameters": {"type": "object", "properties": {"origin": {"type": "string"},
                                                    "destination": {"type": "string"}}}})


def _answer(label: str, reason: str = "because") -> AIMessage:
    return AIMessage(f'{{"reason": "{reason}", "label": "{label}"}}')


def _raises(exc: BaseException) -> Any:
    def step(messages: list[BaseMessage]) -> AIMessage:
        raise exc
    return step


# ---------------------------------------------------------------------------- parse_label
@pytest.mark.parametrize(
    ("text", "labels", "label", "reason"),
    [
        ('{"reason": "the city is stated", "label": "Truthful"}', CONTENT, "Truthful",
         "the city is stated"),
        ('{"reason": "made up id", "label": "Untruthful"}', CONTENT, "Untruthful", "made up id"),
        ('```json\n{"reason": "r", "label": "irrelevant"}\n```', RELEVANCE, "Irrelevant", "r"),
        ('{"answer": "Relevant"}', RELEVANCE, "Relevant", ""),
        ('{"reason": "not Irrelevant at all", "label": "Relevant"}', RELEVANCE, "Relevant",
         "not Irrelevant at all"),
    ],
)
def test_parse_label_reads_json(text: str, labels: tuple[str, ...], label: str,
                                reason: str) -> None:
    result = parse_label(text, labels)
    assert (result.label, result.reason) == (label, reason)
    assert result.raw == text


def test_parse_label_reads_the_last_line_naming_a_label() -> None:
    text = "Let me think.\nThe tool looks Relevant at first.\nFinal answer: Irrelevant"
    result = parse_label(text, RELEVANCE)
    assert result.label == "Irrelevant"
    assert "Let me think." in result.reason


def test_parse_label_prefers_the_more_specific_label() -> None:
    assert parse_label("calling_truthfulness: Untruthful", CONTENT).label == "Untruthful"
    assert parse_label("calling_truthfulness: truthful", CONTENT).label == "Truthful"


def test_parse_label_falls_back_to_last_line_when_json_is_broken() -> None:
    result = parse_label('{"reason": "x", "label": "Relevant"', RELEVANCE)
    assert result.label == "Relevant"


@pytest.mark.parametrize("garbage", ["", "I cannot decide.", "{}", '{"label": 3}', "🙂" * 3000])
def test_parse_label_garbage_is_unsure(garbage: str) -> None:
    result = parse_label(garbage, CONTENT)
    assert result.label == "Unsure"
    assert len(result.raw) <= 2000


# ---------------------------------------------------------------------------- prompts
@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("check_tool_relevance", ["query", "tool_name", "tool_description"]),
        ("check_content_hallucination", ["query", "tool_description", "tool_name", "arguments"]),
        ("check_answer_relevance", ["query", "answer"]),
    ],
)
def test_prompts_load_and_format_with_their_documented_fields(name: str,
                                                              fields: list[str]) -> None:
    template = load_prompt(name)
    assert not template.lstrip().startswith("<!--")  # the source comment is stripped
    found = {f for _, f, _, _ in string.Formatter().parse(template) if f}
    assert found == set(fields)
    values = {f: f"<{f.upper()}>" for f in fields}
    text = template.format(**values)
    for value in values.values():
        assert value in text
    assert '{"reason": "<your reasoning>", "label": "<exactly one of:' in text


def test_unknown_prompt_lists_the_known_ones() -> None:
    with pytest.raises(FileNotFoundError, match="check_tool_relevance"):
        load_prompt("no_such_prompt")


def test_llm_judge_builds_one_user_message() -> None:
    judge = LLMJudge(ScriptedChatModel(), prompt="check_tool_relevance", labels=RELEVANCE)
    (msg,) = judge.build_messages(query="Q?", tool_name="t", tool_description="d")
    assert isinstance(msg, HumanMessage)
    assert "Query:\nQ?" in msg.content
    with pytest.raises(ValueError, match="labels"):
        LLMJudge(ScriptedChatModel(), prompt="check_tool_relevance", labels=())


# ---------------------------------------------------------------------------- relevance
def test_llm_relevance_judge_sends_the_paper_prompt_and_reads_the_label() -> None:
    model = ScriptedChatModel(script=[_answer("Irrelevant", "flights are not weather")])
    result = LLMRelevanceJudge(model).judge("Weather in Paris?", FLIGHTS, [WEATHER, FLIGHTS])
    assert result.label == "Irrelevant"
    assert result.reason == "flights are not weather"
    (prompt,) = model.calls[0]
    assert "Weather in Paris?" in prompt.content
    assert "search_flights" in prompt.content
    assert "Search flights between two airports." in prompt.content


async def test_llm_relevance_judge_async_twin() -> None:
    script = [_answer("Relevant"), _answer("Irrelevant"), AIMessage("no idea")]
    sync_model, async_model = ScriptedChatModel(script=script), ScriptedChatModel(script=script)
    sync_judge, async_judge = LLMRelevanceJudge(sync_model), LLMRelevanceJudge(async_model)
    for _ in script:
        assert await async_judge.ajudge("Weather?", WEATHER, [WEATHER]) == sync_judge.judge(
            "Weather?", WEATHER, [WEATHER])
    assert [m[0].content for m in sync_model.calls] == [m[0].content for m in async_model.calls]


@pytest.mark.parametrize("exc", [RuntimeError("rate limited"), TimeoutError("slow")])
async def test_llm_relevance_judge_model_error_is_unsure(exc: Exception) -> None:
    judge = LLMRelevanceJudge(ScriptedChatModel(script=[_raises(exc), _raises(exc)]))
    result = judge.judge("Weather?", WEATHER, [WEATHER])
    assert result.label == "Unsure"
    assert "judge model failed" in result.reason and str(exc) in result.reason
    assert await judge.ajudge("Weather?", WEATHER, [WEATHER]) == result


def test_exhausted_scripted_model_is_unsure_too() -> None:
    result = LLMRelevanceJudge(ScriptedChatModel()).judge("Weather?", WEATHER, [WEATHER])
    assert result.label == "Unsure" and "exhausted" in result.reason


def _flights_call() -> list[Any]:
    return [HumanMessage("What's the weather in Paris?"),
            ai_calls(("search_flights", {"origin": "Paris", "destination": "Paris"}, "1"))]


async def test_guard_with_llm_relevance_sync_and_async() -> None:
    def guard(answer: AIMessage) -> Guard:
        return Guard([WEATHER, FLIGHTS], relevance="llm", detectors=["type"],
                     judge_model=ScriptedChatModel(script=[answer]))

    (irrelevant,) = guard(_answer("Irrelevant", "wrong tool")).check(_flights_call())
    assert (irrelevant.action, irrelevant.hallucination) == ("change_tools", "type")
    assert "wrong tool" in irrelevant.reason
    assert [await guard(_answer("Irrelevant", "wrong tool")).acheck(_flights_call())] == [
        [irrelevant]]
    for label in ("Relevant", "Unsure"):
        assert guard(_answer(label)).check(_flights_call())[0].allowed
        assert (await guard(_answer(label)).acheck(_flights_call()))[0].allowed
    crashing = Guard([WEATHER, FLIGHTS], relevance="llm", detectors=["type"],
                     judge_model=ScriptedChatModel(script=[_raises(RuntimeError("down"))]))
    assert crashing.check(_flights_call())[0].allowed


def test_llm_relevance_prompt_carries_the_parameters() -> None:
    model = ScriptedChatModel(script=[_answer("Relevant")])
    LLMRelevanceJudge(model).judge("Flights from Paris to Rome", FLIGHTS, [FLIGHTS])
    assert "destination" in model.calls[0][0].content


def test_graph_control_signals_from_the_judge_model_propagate() -> None:
    model = ScriptedChatModel(script=[_raises(GraphInterrupt(()))])
    with pytest.raises(GraphInterrupt):
        LLMRelevanceJudge(model).judge("Weather?", WEATHER, [WEATHER])


# ---------------------------------------------------------------------------- content
def _reykjavik() -> list[Any]:
    return [HumanMessage("What's the weather like?"),
            ai_calls(("get_weather", {"city": "Reykjavik"}, "1"))]


def _paris() -> list[Any]:
    return [HumanMessage("What's the weather in Paris?"),
            ai_calls(("get_weather", {"city": "Paris"}, "1"))]


def _content_guard(*answers: Any, mode: Any = None) -> tuple[Guard, ScriptedChatModel]:
    model = ScriptedChatModel(script=list(answers))
    return Guard([WEATHER], detectors=["content"], judge_model=model,
                 content_llm_mode=mode), model


def test_content_judge_confirms_a_flagged_value() -> None:
    guard, model = _content_guard(_answer("Untruthful", "Reykjavik was never mentioned"))
    (verdict,) = guard.check(_reykjavik())
    assert (verdict.action, verdict.hallucination) == ("ask_user", "content")
    assert "Reykjavik was never mentioned" in verdict.reason
    assert [e.parameter for e in verdict.evidence] == ["city"]
    (prompt,) = model.calls[0]
    assert "Arguments: {\"city\": \"Reykjavik\"}" in prompt.content
    assert "What's the weather like?" in prompt.content


def test_content_judge_can_clear_a_flagged_value() -> None:
    guard, _ = _content_guard(_answer("Truthful", "the user lives there"))
    assert guard.check(_reykjavik())[0].allowed


def test_content_judge_unsure_keeps_the_rule_verdict_in_confirm_mode() -> None:
    guard, _ = _content_guard(AIMessage("hmm, hard to say"))
    assert guard.check(_reykjavik())[0].action == "ask_user"


def test_content_judge_is_not_asked_about_grounded_values_in_confirm_mode() -> None:
    guard, model = _content_guard(_answer("Untruthful"))
    assert guard.check(_paris())[0].allowed
    assert model.calls == []


def test_content_judge_always_mode_judges_every_call() -> None:
    guard, model = _content_guard(_answer("Untruthful", "Paris is a guess"), mode="always")
    (verdict,) = guard.check(_paris())
    assert verdict.action == "ask_user"
    assert verdict.evidence[0].parameter is None
    assert "Paris is a guess" in verdict.evidence[0].detail
    assert verdict.question == "Could you give me the details get_weather needs?"
    assert len(model.calls) == 1
    unsure, _ = _content_guard(AIMessage("?"), mode="always")
    assert unsure.check(_reykjavik())[0].allowed  # always mode: Unsure lets the call through


@pytest.mark.parametrize("mode", ["confirm", "always"])
async def test_content_judge_async_twin(mode: str) -> None:
    for answer in (_answer("Untruthful", "x"), _answer("Truthful"), AIMessage("??")):
        for msgs in (_reykjavik(), _paris()):
            sync_guard, _ = _content_guard(answer, mode=mode)
            async_guard, _ = _content_guard(answer, mode=mode)
            assert await async_guard.acheck(msgs) == sync_guard.check(msgs)


async def test_content_judge_model_raising_does_not_crash() -> None:
    detector = ContentDetector(judge_model=ScriptedChatModel(script=[
        _raises(RuntimeError("boom")), _raises(RuntimeError("boom"))]))
    guard = Guard([WEATHER], detectors=[detector])
    (verdict,) = guard.check(_reykjavik())
    assert verdict.action == "ask_user"  # Unsure in confirm mode keeps the rule's verdict
    assert all(e.code != "detector_error" for e in verdict.evidence)
    assert await guard.acheck(_reykjavik()) == [verdict]


# ---------------------------------------------------------------------------- scripted model
def test_scripted_chat_model_replays_records_and_runs_out() -> None:
    model = ScriptedChatModel(script=[AIMessage("one"),
                                      lambda msgs: AIMessage(f"saw {len(msgs)} messages")])
    assert model.bind_tools([WEATHER]) is model
    assert model.invoke("hi").content == "one"
    assert model.invoke([HumanMessage("a"), HumanMessage("b")]).content == "saw 2 messages"
    assert [len(c) for c in model.calls] == [1, 2]
    with pytest.raises(IndexError, match="exhausted after 2 calls"):
        model.invoke("again")
