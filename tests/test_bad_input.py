"""Bad input through Guard.check and through the compiled guarded graph."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Recorder, ai_calls, answers_by_id, assert_every_call_answered_once
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from toolguard import Guard
from toolguard.context import MAX_ARGS_CHARS
from toolguard.testing import ScriptedChatModel
from toolguard_graphs import create_guarded_agent

BIG = "x" * 1_000_000
FEEDBACK_LIMIT = 20_000  # what a guard should send back to a model, at most, per call


def _run(recorder: Recorder, script: list[Any], tools: list[Any] | None = None,
         request: str = "What's the weather in Paris?", **options: Any) -> dict[str, Any]:
    graph = create_guarded_agent(ScriptedChatModel(script=script), tools or recorder.tools(),
                                 **options)
    return graph.invoke({"messages": [HumanMessage(request)]})


def _raw_openai_message(*calls: tuple[str, str, str]) -> AIMessage:
    """An AIMessage as langchain-openai builds it from raw ``tool_calls`` (arguments strings)."""
    return AIMessage(content="", additional_kwargs={"tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}
        for name, arguments, cid in calls]})


# ---------------------------------------------------------------------------- malformed JSON
def test_malformed_arguments_string_is_a_format_verdict() -> None:
    msg = _raw_openai_message(("get_weather", '{"city": "Par', "bad"))
    assert msg.tool_calls == [] and len(msg.invalid_tool_calls) == 1
    (verdict,) = Guard(Recorder().tools()).check([HumanMessage("weather in Paris"), msg])
    assert (verdict.action, verdict.hallucination) == ("block", "format")
    assert verdict.tool_call_id == "bad"
    assert "not valid JSON" in verdict.reason
    assert verdict.evidence[0].code == "invalid_json"


def test_malformed_arguments_next_to_a_valid_call_in_the_graph(recorder: Recorder) -> None:
    msg = _raw_openai_message(("get_weather", '{"city": "Paris"}', "ok"),
                              ("get_time", "{bad json", "bad"))
    assert [tc["id"] for tc in msg.tool_calls] == ["ok"]
    out = _run(recorder, [msg, AIMessage("done")],
               request="What's the weather and the local time in Paris?")
    assert recorder.calls == [("get_weather", {"city": "Paris"})]
    (answer,) = answers_by_id(out["messages"])["bad"]
    assert answer.status == "error"
    assert "not valid JSON" in answer.content
    assert_every_call_answered_once(out["messages"])
    assert out["messages"][-1].content == "done"
    assert out["toolguard"]["format"] == 1


def test_only_malformed_arguments_in_the_graph_get_an_answer(recorder: Recorder) -> None:
    out = _run(recorder, [_raw_openai_message(("get_weather", "{bad json", "bad")),
                          ai_calls(("get_weather", {"city": "Paris"}, "ok")),
                          AIMessage("done")])
    assert_every_call_answered_once(out["messages"])
    assert out["toolguard"]["format"] == 1


def test_arguments_that_are_not_an_object_are_a_format_verdict() -> None:
    msg = AIMessage("", invalid_tool_calls=[{"name": "get_weather", "args": '["Paris"]',
                                             "id": "arr", "error": None,
                                             "type": "invalid_tool_call"}])
    (verdict,) = Guard(Recorder().tools()).check([HumanMessage("weather in Paris"), msg])
    assert verdict.hallucination == "format"
    assert "must be a JSON object" in verdict.reason


# ---------------------------------------------------------------------------- unknown tool
@pytest.mark.parametrize("name", ["get_forecast", "", "get weather; rm -rf /", "天气"])
def test_unknown_tool(recorder: Recorder, name: str) -> None:
    msgs = [HumanMessage("weather in Paris"), ai_calls((name, {"city": "Paris"}, "u"))]
    (verdict,) = Guard(recorder.tools()).check(msgs)
    assert (verdict.action, verdict.hallucination) == ("block", "type")
    out = _run(recorder, [ai_calls((name, {"city": "Paris"}, "u")), AIMessage("done")])
    assert recorder.calls == []
    (answer,) = answers_by_id(out["messages"])["u"]
    assert answer.status == "error" and "not a valid tool" in answer.content
    assert out["messages"][-1].content == "done"


# ---------------------------------------------------------------------------- 1 MB
def test_one_megabyte_string_argument(recorder: Recorder) -> None:
    msgs = [HumanMessage("Email ops@example.com the log"),
            ai_calls(("send_email", {"to": "ops@example.com", "body": BIG}, "big"))]
    (verdict,) = Guard(recorder.tools()).check(msgs)
    assert verdict.allowed  # a long free-text body is not a hallucination
    out = _run(recorder, [msgs[-1], AIMessage("sent")], request=msgs[0].content)
    assert recorder.calls == [("send_email", {"to": "ops@example.com", "body": BIG})]
    assert answers_by_id(out["messages"])["big"][0].content == "sent to ops@example.com"


def test_one_megabyte_value_in_a_wrong_type_is_clipped(recorder: Recorder) -> None:
    msgs = [HumanMessage("weather in Paris"), ai_calls(("get_weather", {"city": [BIG]}, "big"))]
    (verdict,) = Guard(recorder.tools()).check(msgs)
    assert verdict.hallucination == "format"
    assert len(verdict.feedback()) < FEEDBACK_LIMIT
    assert all(len(str(e.value)) <= 260 for e in verdict.evidence)


def test_over_long_raw_arguments_are_refused_and_clipped(recorder: Recorder) -> None:
    raw = '{"city": "' + "x" * (MAX_ARGS_CHARS + 10) + '"}'
    invalid = AIMessage("", invalid_tool_calls=[{"name": "get_weather", "args": raw, "id": "huge",
                                                 "error": None, "type": "invalid_tool_call"}])
    for msg in (invalid, _string_args_message(raw, "huge")):
        (verdict,) = Guard(recorder.tools()).check([HumanMessage("weather in Paris"), msg])
        assert verdict.hallucination == "format"
        assert "characters long" in verdict.reason
        assert len(verdict.feedback()) < FEEDBACK_LIMIT
        assert len(str(verdict.evidence[0].value)) <= 260
    out = _run(recorder, [_string_args_message(raw, "huge"), AIMessage("done")])
    assert recorder.calls == []
    (answer,) = answers_by_id(out["messages"])["huge"]
    assert answer.status == "error" and len(answer.content) < FEEDBACK_LIMIT
    assert_every_call_answered_once(out["messages"])


def test_over_long_arguments_parsed_by_the_provider_are_refused(recorder: Recorder) -> None:
    raw = '{"city": "' + "x" * (MAX_ARGS_CHARS + 10) + '"}'
    msg = _raw_openai_message(("get_weather", raw, "huge"))
    assert msg.tool_calls  # langchain parsed the long JSON
    (verdict,) = Guard(recorder.tools()).check([HumanMessage("weather in Paris"), msg])
    assert verdict.hallucination == "format"


@pytest.mark.parametrize("call", [(BIG, {"city": "Paris"}, "n"), ("get_weather", {BIG: "x"}, "k")],
                         ids=["name", "key"])
def test_one_megabyte_tool_name_or_key_gives_bounded_feedback(
    recorder: Recorder, call: tuple[str, dict[str, Any], str]
) -> None:
    (verdict,) = Guard(recorder.tools()).check([HumanMessage("weather in Paris"), ai_calls(call)])
    assert not verdict.allowed
    assert len(verdict.feedback()) < FEEDBACK_LIMIT


# ---------------------------------------------------------------------------- odd tool outputs
def test_tool_output_that_is_not_json_serialisable(recorder: Recorder) -> None:
    class Reading:
        def __repr__(self) -> str:
            return "Reading(21 C)"

    @tool
    def get_weather(city: str) -> Any:
        """Get the current weather for a city."""
        recorder.calls.append(("get_weather", {"city": city}))
        return {"reading": Reading(), "tags": {"sunny"}}

    out = _run(recorder, [ai_calls(("get_weather", {"city": "Paris"}, "w")), AIMessage("done")],
               tools=[get_weather])
    (answer,) = answers_by_id(out["messages"])["w"]
    assert isinstance(answer.content, str)
    assert "Reading(21 C)" in answer.content
    assert out["messages"][-1].content == "done"
    # the odd result is valid history for the guard's next check
    Guard([get_weather]).check([*out["messages"][:-1],
                                ai_calls(("get_weather", {"city": "Paris"}, "again"))])


def test_tool_returning_a_set(recorder: Recorder) -> None:
    @tool
    def get_weather(city: str) -> Any:
        """Get the current weather for a city."""
        return {"sunny", city}

    out = _run(recorder, [ai_calls(("get_weather", {"city": "Paris"}, "w")), AIMessage("done")],
               tools=[get_weather])
    (answer,) = answers_by_id(out["messages"])["w"]
    assert isinstance(answer.content, str) and "Paris" in answer.content


def test_tool_that_raises_gives_an_error_message_and_a_retry_is_allowed(
    recorder: Recorder,
) -> None:
    attempts: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        attempts.append(city)
        if len(attempts) == 1:
            raise RuntimeError("weather service unavailable")
        return f"sunny in {city}"

    get_weather.metadata = {"effects": "read"}
    out = _run(recorder, [ai_calls(("get_weather", {"city": "Paris"}, "w1")),
                          ai_calls(("get_weather", {"city": "Paris"}, "w2")),
                          AIMessage("done")], tools=[get_weather], controller=None)
    answers = answers_by_id(out["messages"])
    assert answers["w1"][0].status == "error"
    assert "weather service unavailable" in answers["w1"][0].content
    assert answers["w2"][0].content == "sunny in Paris"  # identical retry after an error ran
    assert attempts == ["Paris", "Paris"]
    assert out["toolguard"]["allowed"] == 2


# ---------------------------------------------------------------------------- string args
def _string_args_message(args: str, call_id: str = "s") -> AIMessage:
    """A ToolCall whose args is a JSON string (hand-built messages; AIMessage itself rejects
    it at construction, so the string is put in afterwards)."""
    msg = ai_calls(("get_weather", {}, call_id))
    msg.tool_calls[0]["args"] = args  # type: ignore[typeddict-item]
    return msg


def test_tool_call_with_json_string_args_is_checked_as_parsed(recorder: Recorder) -> None:
    guard = Guard(recorder.tools())
    ok = guard.check([HumanMessage("weather in Paris"), _string_args_message('{"city": "Paris"}')])
    assert [v.action for v in ok] == ["allow"]
    wrong = guard.check([HumanMessage("weather in Paris"), _string_args_message('{"town": "P"}')])
    assert wrong[0].hallucination == "format"
    bad = guard.check([HumanMessage("weather in Paris"), _string_args_message("{bad")])
    assert bad[0].hallucination == "format" and bad[0].evidence[0].code == "invalid_json"
    empty = guard.check([HumanMessage("weather in Paris"), _string_args_message("")])
    assert empty[0].hallucination == "format"  # {} misses the required city


def test_tool_call_with_malformed_string_args_in_the_graph(recorder: Recorder) -> None:
    out = _run(recorder, [_string_args_message("{bad"), AIMessage("done")])
    assert recorder.calls == []
    (answer,) = answers_by_id(out["messages"])["s"]
    assert answer.status == "error" and "not valid JSON" in answer.content
    assert out["messages"][-1].content == "done"


def test_tool_call_with_valid_string_args_in_the_graph(recorder: Recorder) -> None:
    out = _run(recorder, [_string_args_message('{"city": "Paris"}'), AIMessage("done")])
    assert recorder.calls == [("get_weather", {"city": "Paris"})]
    assert out["messages"][-1].content == "done"


def test_duplicate_call_ids_do_not_drop_the_allowed_call(recorder: Recorder) -> None:
    msg = ai_calls(("get_weather", {"city": "Paris"}, "x"), ("get_wether", {"city": "Paris"}, "x"))
    _run(recorder, [msg, AIMessage("done")])
    assert recorder.calls == [("get_weather", {"city": "Paris"})]


# ---------------------------------------------------------------------------- odd messages
def test_content_blocks_are_read_as_text(recorder: Recorder) -> None:
    human = HumanMessage(content=[{"type": "text", "text": "weather in Reykjavik?"},
                                  {"type": "image_url", "image_url": {"url": "data:,"}}])
    msgs = [human, ai_calls(("get_weather", {"city": "Reykjavik"}, "1"))]
    assert Guard(recorder.tools()).check(msgs)[0].allowed


def test_many_calls_in_one_message(recorder: Recorder) -> None:
    cities = [f"City{i}" for i in range(200)]
    msgs = [HumanMessage("weather in " + ", ".join(cities)),
            ai_calls(*(("get_weather", {"city": c}, f"c{i}") for i, c in enumerate(cities)))]
    verdicts = Guard(recorder.tools()).check(msgs)
    assert [v.tool_call_id for v in verdicts] == [f"c{i}" for i in range(200)]
    assert all(v.allowed for v in verdicts)


def test_tool_message_answering_an_unknown_id_does_not_confuse_the_guard(
    recorder: Recorder,
) -> None:
    msgs = [HumanMessage("weather in Paris"), ToolMessage("stray", tool_call_id="nobody"),
            ai_calls(("get_weather", {"city": "Paris"}, "1"))]
    assert Guard(recorder.tools()).check(msgs)[0].allowed
