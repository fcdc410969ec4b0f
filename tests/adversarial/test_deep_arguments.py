"""Issue 14, defects 3 and 8: hostile argument shapes get a format verdict, never a crash.

At 0.1.0 arguments nested 5,000 deep raised ``RecursionError`` from ``Guard.check`` /
``acheck`` / ``GuardNode`` (``parse_args`` caught only ``ValueError``), a 5,000-deep dict
was refused as "4000001 characters long", and a ``ToolMessage`` whose content is ``None``
made ``Guard.check`` raise ``TypeError``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
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
    invoke,
    only_answer,
    thread,
)
from toolguard import Guard
from toolguard.conversation import MAX_ARGS_DEPTH, nested_too_deep
from toolguard.nodes import GuardNode
from toolguard.testing import ScriptedChatModel

DEEP = 5000


def _deep_dict(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth - 1):
        node["a"] = {}
        node = node["a"]
    return root


def _deep_json(depth: int) -> str:
    return '{"city": ' + "[" * depth + "]" * depth + "}"


def _message(kind: str, depth: int = DEEP) -> AIMessage:
    """A step whose only call has arguments nested ``depth`` deep, in one of three shapes."""
    if kind == "invalid":  # the provider could not parse the raw arguments
        return AIMessage("", invalid_tool_calls=[{
            "name": "get_weather", "args": _deep_json(depth), "id": "x", "error": None,
            "type": "invalid_tool_call"}])
    message = calls(("get_weather", {"city": "Paris"}, "x"))
    message.tool_calls[0]["args"] = (  # type: ignore[typeddict-item]
        _deep_json(depth) if kind == "json-string" else {"city": _deep_dict(depth)})
    return message


SHAPES = ["json-string", "dict", "invalid"]


@pytest.mark.parametrize("depth", [900, DEEP])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_engine_gives_a_format_verdict(shape: str, depth: int) -> None:
    guard = Guard(Effects().tools())
    history: list[BaseMessage] = [HumanMessage("Weather in Paris?"), _message(shape, depth)]
    for verdicts in (guard.check(history), asyncio.run(guard.acheck(history))):
        (v,) = verdicts
        assert (v.action, v.hallucination) == ("block", "format")
        assert f"nested deeper than {MAX_ARGS_DEPTH} levels" in v.reason  # not "characters"


@pytest.mark.parametrize("shape", SHAPES)
def test_the_guard_node_gives_a_format_verdict(shape: str) -> None:
    node = GuardNode(Guard(Effects().tools()), ask_user="end")
    state = {"messages": [HumanMessage("Weather in Paris?"), _message(shape)]}
    for update in (node.invoke(state), asyncio.run(node.ainvoke(state))):
        answer = update["messages"][-1]
        assert isinstance(answer, ToolMessage) and answer.tool_call_id == "x"
        assert answer.artifact["toolguard"]["hallucination"] == "format"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("surface", SURFACES)
def test_every_surface_refuses_the_call_and_goes_on(surface: Surface, shape: str,
                                                    mode: str) -> None:
    effects = Effects()
    script = [_message(shape), calls(("get_weather", {"city": "Paris"}, "ok")),
              AIMessage("Sunny.")]
    graph, model = build(surface, script, effects.tools())
    out = invoke(graph, ask("Weather in Paris?"), mode=mode)
    assert effects.log == [("get_weather", "Paris")]  # only the well-formed retry ran
    assert "nested deeper" in str(only_answer(out["messages"], "x").content)
    assert model.position == 3
    assert_valid_history(out["messages"])


CHECKPOINT_LIMIT = pytest.mark.xfail(
    strict=True, raises=TypeError,
    reason="LangGraph's checkpoint serializer (msgpack) cannot store a message whose "
           "arguments nest ~250+ deep; in a hand-built graph the user's own model node "
           "writes it to state before GuardNode runs (create_agent's middleware drops the "
           "refused call's arguments inside the model call)")


# an AIMessage whose arguments stay a string (unparseable) makes pydantic warn when the
# checkpointer dumps it; the warning is LangGraph's and harmless
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize(("surface", "shape"), [
    *((surface, shape) for surface in SURFACES for shape in ("json-string", "invalid")),
    ("agent", "dict"), ("middleware", "dict"),
    pytest.param("graph", "dict", marks=CHECKPOINT_LIMIT)])
def test_with_a_checkpointer(surface: Surface, shape: str) -> None:
    effects = Effects()
    graph, _ = build(surface, [_message(shape), AIMessage("Sorry.")], effects.tools(),
                     checkpointer=InMemorySaver())
    out = invoke(graph, ask("Weather in Paris?"), thread())
    assert effects.log == []
    assert_valid_history(out["messages"])
    answer = str(only_answer(out["messages"], "x").content)
    assert "nested deeper" in answer


@pytest.mark.parametrize("checkpointer", [None, InMemorySaver()], ids=["none", "memory"])
def test_without_toolguard_the_same_call_crashes(checkpointer: Any) -> None:
    """The plain loop hands the call to the tool (``RecursionError`` in LangChain's
    ``BaseTool.run``); with a checkpointer it cannot even be stored."""
    effects = Effects()
    model = ScriptedChatModel(script=[_message("dict"), AIMessage("Sorry.")])
    plain = create_agent(model, effects.tools(), checkpointer=checkpointer)
    with pytest.raises((RecursionError, TypeError)):
        plain.invoke(ask("Weather in Paris?"), thread())


def _history_with_none_content() -> list[BaseMessage]:
    earlier = ToolMessage("placeholder", tool_call_id="a", name="get_weather")
    earlier.content = None  # type: ignore[assignment]  # hand-built histories carry it
    return [HumanMessage("Weather and time in Paris?"),
            calls(("get_weather", {"city": "Paris"}, "a")), earlier,
            calls(("get_time", {"city": "Paris"}, "b"))]


def test_a_tool_message_with_none_content_is_read_as_empty() -> None:
    guard = Guard(Effects().tools())
    history = _history_with_none_content()
    for verdicts in (guard.check(history), asyncio.run(guard.acheck(history))):
        assert [v.action for v in verdicts] == ["allow"]
    node = GuardNode(guard, ask_user="end")
    for update in (node.invoke({"messages": history}),
                   asyncio.run(node.ainvoke({"messages": history}))):
        assert "messages" not in update  # allowed: no answer written, counters only
        assert update["toolguard"]["allowed"] == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
def test_a_none_content_history_runs_on_every_surface(surface: Surface, mode: str) -> None:
    effects = Effects()
    graph, _ = build(surface, [calls(("get_weather", {"city": "Oslo"}, "c")),
                               AIMessage("Done.")], effects.tools())
    history = _history_with_none_content()
    history.append(ToolMessage("12:00 in Paris", tool_call_id="b", name="get_time"))
    history.append(HumanMessage("And the weather in Oslo?"))
    out = invoke(graph, {"messages": history}, mode=mode)
    assert effects.log == [("get_weather", "Oslo")]
    assert only_answer(out["messages"], "c").content == "sunny, 21 C in Oslo"


def test_too_deep_arguments_are_dropped_before_the_step_is_stored() -> None:
    """``with_unique_ids`` (the model call's copy of the message) moves a too-deep call to
    ``invalid_tool_calls`` without its arguments; other calls keep theirs."""
    from toolguard.steps import with_unique_ids

    message = calls(("get_weather", {"city": "Paris"}, "ok"),
                    ("get_weather", {"city": "Oslo"}, "x"))
    message.tool_calls[1]["args"] = {"city": _deep_dict(DEEP)}
    fixed = with_unique_ids(message)
    assert fixed is not None
    assert [c["id"] for c in fixed.tool_calls] == ["ok"]
    assert fixed.tool_calls[0]["args"] == {"city": "Paris"}
    (dropped,) = fixed.invalid_tool_calls
    assert dropped["id"] == "x" and dropped["args"] == ""
    assert f"nested deeper than {MAX_ARGS_DEPTH} levels" in str(dropped["error"])
    # a wide, shallow argument is no reason to drop anything
    wide = calls(("get_weather", {"city": list(range(200_000))}, "w"))
    assert with_unique_ids(wide) is None
    assert not nested_too_deep("[[[[") and not nested_too_deep({"a": [[1]]}, limit=3)
    assert nested_too_deep({"a": [[1]]}, limit=2)
