"""Guard: one verdict per call in order, sync/async pairs, detector failures, bad inputs."""

from __future__ import annotations

import doctest
from typing import Any, ClassVar

import pytest
from conftest import BfclEpisode, ai_calls
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.errors import GraphInterrupt

import toolguard.guard
from toolguard import Detector, Guard, Verdict
from toolguard.context import CheckContext, ProposedCall

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}


class Exploding(Detector):
    """A detector with a bug."""

    kind: ClassVar = "content"

    def check(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        raise RuntimeError("detector bug")


class Interrupting(Detector):
    """A detector that raises a graph control signal."""

    kind: ClassVar = "content"

    def check(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        raise GraphInterrupt(())


def _mixed_message() -> list[Any]:
    return [
        HumanMessage("What's the weather in Paris and in Oslo?"),
        ai_calls(
            ("get_weather", {"city": "Paris"}, "a"),
            ("get_wether", {"city": "Paris"}, "b"),  # type
            ("get_weather", {"town": "Oslo"}, "c"),  # format
            ("get_weather", {"city": "Reykjavik"}, "d"),  # content
            ("get_weather", {"city": "Oslo"}, "e"),
        ),
    ]


def test_docstring_example_runs() -> None:
    result = doctest.testmod(toolguard.guard, raise_on_error=False)
    assert result.attempted >= 3
    assert result.failed == 0


def test_one_verdict_per_call_in_order() -> None:
    verdicts = Guard([WEATHER]).check(_mixed_message())
    assert [v.tool_call_id for v in verdicts] == ["a", "b", "c", "d", "e"]
    assert [(v.action, v.hallucination) for v in verdicts] == [
        ("allow", None), ("block", "type"), ("block", "format"), ("ask_user", "content"),
        ("allow", None)]
    assert [v.tool_name for v in verdicts] == ["get_weather", "get_wether", "get_weather",
                                               "get_weather", "get_weather"]


async def test_acheck_equals_check_on_mixed_calls() -> None:
    guard = Guard([WEATHER])
    assert await guard.acheck(_mixed_message()) == guard.check(_mixed_message())


@pytest.mark.parametrize(
    ("category", "record_id"),
    [("simple_python", "simple_python_0"), ("multiple", "multiple_2"),
     ("live_simple", "live_simple_4-3-0"), ("live_multiple", "live_multiple_0-0-0")],
)
async def test_acheck_equals_check_on_bfcl_records(
    bfcl: Any, category: str, record_id: str
) -> None:
    record = bfcl(category, record_id)
    name, args = record.gold[0]
    calls = [(name, args), ("made_up_tool", args), (name, {}), (name, {**args, "zz": 1})]
    guard = Guard(record.functions)
    sync = guard.check(record.messages(calls))
    assert len(sync) == 4
    assert await guard.acheck(record.messages(calls)) == sync


async def test_acheck_equals_check_on_a_multi_turn_episode(episode: BfclEpisode) -> None:
    guard = Guard(episode.specs())
    for before, call, _ in episode.replay(2):
        assert await guard.acheck([*before, call]) == guard.check([*before, call])
    repeat = ai_calls(("grep", {"file_name": "final_report.pdf", "pattern": "budget analysis"},
                       "x"))
    msgs = [*episode.transcript, repeat]
    (sync,) = guard.check(msgs)
    assert sync.hallucination == "timing"
    assert await guard.acheck(msgs) == [sync]


def test_invalid_tool_calls_get_a_format_verdict_after_valid_ones() -> None:
    msg = AIMessage(
        "",
        tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "ok"}],
        invalid_tool_calls=[{"name": "get_weather", "args": '{"city": "Par', "id": "bad",
                             "error": "Unterminated string", "type": "invalid_tool_call"}],
    )
    verdicts = Guard([WEATHER]).check([HumanMessage("weather in Paris"), msg])
    assert [v.tool_call_id for v in verdicts] == ["ok", "bad"]
    ok, bad = verdicts
    assert ok.allowed
    assert (bad.action, bad.hallucination) == ("block", "format")
    assert bad.evidence[0].code == "invalid_json"
    assert bad.evidence[0].value == '{"city": "Par'


def test_invalid_tool_call_with_parseable_args_keeps_the_provider_error() -> None:
    msg = AIMessage("", invalid_tool_calls=[{"name": "get_weather", "args": '{"city": "Paris"}',
                                             "id": "x", "error": "provider said no",
                                             "type": "invalid_tool_call"}])
    (verdict,) = Guard([WEATHER]).check([HumanMessage("weather in Paris"), msg])
    assert verdict.hallucination == "format"
    assert "provider said no" in verdict.reason


def test_ai_message_without_calls_gives_no_verdicts() -> None:
    assert Guard([WEATHER]).check([HumanMessage("hi"), AIMessage("Hello!")]) == []


async def test_ai_message_without_calls_gives_no_verdicts_async() -> None:
    assert await Guard([WEATHER]).acheck([HumanMessage("hi"), AIMessage("Hello!")]) == []


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [HumanMessage("weather?")],
        [ai_calls(("get_weather", {"city": "Paris"}, "1")), ToolMessage("ok", tool_call_id="1")],
        [SystemMessage("you are helpful")],
    ],
    ids=["empty", "human", "tool", "system"],
)
def test_messages_not_ending_in_an_ai_message_raise(messages: list[Any]) -> None:
    with pytest.raises(ValueError, match=r"AIMessage|empty"):
        Guard([WEATHER]).check(messages)


async def test_messages_not_ending_in_an_ai_message_raise_async() -> None:
    with pytest.raises(ValueError, match="AIMessage"):
        await Guard([WEATHER]).acheck([HumanMessage("weather?")])


def test_unknown_detector_name_raises() -> None:
    with pytest.raises(ValueError, match="unknown detector 'halting'"):
        Guard([WEATHER], detectors=["type", "halting"])  # type: ignore[list-item]


def test_relevance_options_are_validated() -> None:
    with pytest.raises(ValueError, match="needs judge_model"):
        Guard([WEATHER], relevance="llm")
    with pytest.raises(ValueError, match="unknown relevance option"):
        Guard([WEATHER], relevance="psychic")  # type: ignore[arg-type]


def test_detector_order_decides_the_verdict() -> None:
    # the call is both fabricated-looking in content and malformed: first detector wins
    msgs = [HumanMessage("weather?"), ai_calls(("get_weather", {"city": 7}, "1"))]
    assert Guard([WEATHER], detectors=["format", "content"]).check(msgs)[0].hallucination == \
        "format"
    assert Guard([WEATHER], detectors=["content", "format"]).check(msgs)[0].hallucination == \
        "content"
    assert Guard([WEATHER], detectors=[]).check(msgs)[0].allowed


def _weather_msgs() -> list[Any]:
    return [HumanMessage("weather in Paris"), ai_calls(("get_weather", {"city": "Paris"}, "1"))]


def test_failing_detector_fails_open_with_evidence(caplog: pytest.LogCaptureFixture) -> None:
    (verdict,) = Guard([WEATHER], detectors=["type", Exploding(), "format"]).check(
        _weather_msgs())
    assert verdict.allowed
    (ev,) = verdict.evidence
    assert ev.code == "detector_error"
    assert ev.detector == "content"
    assert "detector bug" in ev.detail
    assert any("detector failed" in r.getMessage() for r in caplog.records)


def test_failing_detector_does_not_hide_a_later_objection() -> None:
    msgs = [HumanMessage("weather?"), ai_calls(("get_weather", {"town": "Paris"}, "1"))]
    (verdict,) = Guard([WEATHER], detectors=[Exploding(), "format"]).check(msgs)
    assert verdict.hallucination == "format"


def test_failing_detector_blocks_when_fail_open_is_off() -> None:
    (verdict,) = Guard([WEATHER], detectors=[Exploding()], fail_open=False).check(_weather_msgs())
    assert verdict.action == "block"
    assert verdict.hallucination is None
    assert verdict.evidence[0].code == "detector_error"
    assert "could not check this call" in verdict.reason


async def test_failing_detector_async_twin() -> None:
    open_guard = Guard([WEATHER], detectors=[Exploding()])
    closed_guard = Guard([WEATHER], detectors=[Exploding()], fail_open=False)
    assert await open_guard.acheck(_weather_msgs()) == open_guard.check(_weather_msgs())
    assert await closed_guard.acheck(_weather_msgs()) == closed_guard.check(_weather_msgs())
    assert (await closed_guard.acheck(_weather_msgs()))[0].action == "block"


def test_graph_control_signals_from_a_detector_propagate() -> None:
    with pytest.raises(GraphInterrupt):
        Guard([WEATHER], detectors=[Interrupting()]).check(_weather_msgs())


async def test_graph_control_signals_from_a_detector_propagate_async() -> None:
    with pytest.raises(GraphInterrupt):
        await Guard([WEATHER], detectors=[Interrupting()]).acheck(_weather_msgs())


def test_context_exposes_what_detectors_see(episode: BfclEpisode) -> None:
    list(episode.replay(1))
    msgs = [*episode.transcript, ai_calls(("ls", {}, "x"))]
    ctx = Guard(episode.specs()).context(msgs, extra_grounding=["fact"])
    assert ctx.request == episode.turns[0]
    assert [c.name for c in ctx.prior_calls] == ["cd", "mkdir", "mv"]
    assert all(c.ok for c in ctx.prior_calls)
    assert ctx.grounding_texts[-1] == "fact"
    assert [c.name for c in ctx.calls] == ["ls"]


def test_tools_property_keeps_order() -> None:
    other = {**WEATHER, "name": "get_time"}
    assert [t.name for t in Guard([other, WEATHER]).tools] == ["get_time", "get_weather"]
