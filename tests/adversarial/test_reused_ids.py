"""Issue 14, defect 5: a reused tool-call id never gets another call's result.

Some providers number calls anew every step (``call_0``).  At 0.1.0 ``build_context``
matched answers by id over the whole history: a Paris call whose only earlier attempt had
failed was blocked as a timing repeat and handed London's result.  The retry controller's
run tally matched answers by id over the turn the same way, so a reused id counted the
previous step's answer for a call still running (a cap refused it one call early).
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from adversarial.support import (
    MODES,
    SURFACES,
    Effects,
    Surface,
    ask,
    assert_valid_history,
    build,
    calls,
    controller,
    invoke,
    thread,
)
from toolguard.retry import RETRY_KEY, RetryRecord


def _weather(log: list[str], failures: dict[str, int]) -> StructuredTool:
    def get_weather(city: str) -> str:
        log.append(city)
        if failures.get(city, 0) > 0:
            failures[city] -= 1
            raise ConnectionRefusedError(111, "Connection refused")
        return f"{city}: {'rainy' if city == 'London' else 'sunny'}"

    tool = StructuredTool.from_function(func=get_weather,
                                        description="Get the current weather for a city.")
    tool.metadata = {"effects": "read"}
    return tool


def _answers_after(messages: list, position: int) -> ToolMessage:
    return next(m for m in messages[position + 1:] if isinstance(m, ToolMessage))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
def test_a_reused_id_across_turns_gets_its_own_result(surface: Surface, mode: str) -> None:
    log: list[str] = []
    script = [calls(("get_weather", {"city": "London"}, "call_0")), AIMessage("Rainy."),
              calls(("get_weather", {"city": "Paris"}, "call_0")),
              calls(("get_weather", {"city": "Paris"}, "call_0")), AIMessage("Sunny.")]
    graph, model = build(surface, script, [_weather(log, {"Paris": 1})],
                         ctl=controller(max_retries=0), checkpointer=InMemorySaver())
    invoke(graph, ask("Weather in London?"), thread(), mode)
    out = invoke(graph, ask("And the weather in Paris?"), thread(), mode)
    assert log == ["London", "Paris", "Paris"]  # the retry ran: not blocked as a repeat
    messages = out["messages"]
    steps = [i for i, m in enumerate(messages) if isinstance(m, AIMessage) and m.tool_calls]
    first, second = (_answers_after(messages, i) for i in steps[1:])
    assert first.status == "error" and "Connection refused" in str(first.content)
    assert second.content == "Paris: sunny"  # its own result, never London's
    assert model.position == 5
    assert_valid_history(messages)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
def test_caps_count_each_step_once_when_ids_repeat(surface: Surface, mode: str) -> None:
    effects = Effects()
    script = [calls(("get_weather", {"city": c}, "call_0")) for c in ("Oslo", "Rome", "Kyiv")]
    script.append(AIMessage("never reached"))
    graph, model = build(surface, script, effects.tools(),
                         ctl=controller(max_tool_calls=2))
    out = invoke(graph, ask("Weather in Oslo, Rome and Kyiv, one by one"), mode=mode)
    assert effects.ran("get_weather") == ["Oslo", "Rome"]  # the cap is 2, not 1
    assert out["toolguard_controller"]["refused"] == 1
    assert out["messages"][-1].response_metadata.get("toolguard") == "finish"
    assert model.position == 3
    assert_valid_history(out["messages"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
def test_failures_in_a_row_count_each_step_once_when_ids_repeat(
        surface: Surface, mode: str) -> None:
    log: list[str] = []
    script = [calls(("get_weather", {"city": "Oslo"}, "call_0")),
              calls(("get_weather", {"city": "Rome"}, "call_0")), AIMessage("Done.")]
    graph, model = build(surface, script, [_weather(log, {"Oslo": 1})],
                         ctl=controller(max_retries=0, max_consecutive_failures=2))
    out = invoke(graph, ask("Weather in Oslo, then in Rome"), mode=mode)
    assert log == ["Oslo", "Rome"]  # one failure in a row, not two: Rome runs
    assert out["toolguard_controller"]["consecutive_failures"] == 0
    assert model.position == 3
    assert_valid_history(out["messages"])


def test_tally_matches_answers_by_position() -> None:
    def answer(outcome: str, content: str) -> ToolMessage:
        record = RetryRecord(outcome=outcome)  # type: ignore[arg-type]
        return ToolMessage(content, tool_call_id="call_0", response_metadata={
            RETRY_KEY: record.model_dump()}, status="success" if outcome == "success"
            else "error")

    ctl = controller(max_consecutive_failures=3)
    messages = [HumanMessage("go"), calls(("a", {}, "call_0")), answer("permanent", "x"),
                calls(("a", {}, "call_0")), answer("success", "ok"),
                calls(("a", {}, "call_0"))]  # running now: no answer yet
    tally = ctl.tally(messages)
    assert tally.run_tool_calls == 2 and tally.consecutive_failures == 0
    assert tally.step == {}  # the latest step has no answer yet
