"""GuardNode dropped into a user's own StateGraph, its routing, counters and options."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from conftest import Recorder, ai_calls, answers_by_id, assert_every_call_answered_once
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Send
from typing_extensions import TypedDict

from toolguard import Guard
from toolguard.nodes import GuardNode, GuardState, needs_guard
from toolguard.state import count_verdicts, merge_counters
from toolguard.testing import ScriptedChatModel


def _user_graph(
    recorder: Recorder, script: list[Any], *, checkpointer: Any = None, **node_options: Any
) -> Any:
    """The wiring of node.py's docstring, in a plain MessagesState graph."""
    tools = recorder.tools()
    model = ScriptedChatModel(script=script).bind_tools(tools)
    guard = GuardNode(Guard(tools), **node_options)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("guard", guard)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "guard", END: END})
    builder.add_conditional_edges("guard", guard.route, ["tools", "model", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


def test_guard_node_in_a_users_messages_state_graph(recorder: Recorder) -> None:
    graph = _user_graph(recorder, [
        ai_calls(("get_weather", {"city": "Paris"}, "a"), ("get_forecast", {"city": "Paris"}, "b"),
                 ("get_time", {"city": "Paris"}, "c")),
        AIMessage("Sunny, and it is noon."),
    ])
    out = graph.invoke({"messages": [HumanMessage("Weather and time in Paris?")]})
    # allowed calls run as parallel Sends: their execution order is not fixed
    assert sorted(recorder.calls) == [("get_time", {"city": "Paris"}),
                                      ("get_weather", {"city": "Paris"})]
    answers = answers_by_id(out["messages"])
    assert answers["a"][0].content == "sunny, 21 C in Paris"
    assert answers["a"][0].status == "success"
    assert answers["b"][0].status == "error"
    assert "not a valid tool" in answers["b"][0].content
    assert answers["b"][0].artifact["toolguard"]["hallucination"] == "type"
    assert_every_call_answered_once(out["messages"])
    assert out["messages"][-1].content == "Sunny, and it is noon."
    assert "toolguard" not in out  # no counters channel in MessagesState


def test_blocked_only_step_goes_back_to_the_model(recorder: Recorder) -> None:
    model_script = [ai_calls(("get_wether", {"city": "Paris"}, "a")),
                    ai_calls(("get_weather", {"city": "Paris"}, "b")), AIMessage("done")]
    graph = _user_graph(recorder, model_script)
    out = graph.invoke({"messages": [HumanMessage("Weather in Paris?")]})
    assert recorder.names() == ["get_weather"]
    kinds = [type(m).__name__ for m in out["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage", "ToolMessage",
                     "AIMessage"]
    assert_every_call_answered_once(out["messages"])


def test_ask_user_interrupts_in_a_users_graph(recorder: Recorder) -> None:
    graph = _user_graph(recorder, [ai_calls(("get_weather", {"city": "Reykjavik"}, "a")),
                                   ai_calls(("get_weather", {"city": "Oslo"}, "b")),
                                   AIMessage("Oslo is sunny.")], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    first = graph.invoke({"messages": [HumanMessage("What's the weather?")]}, config)
    (interrupt,) = first["__interrupt__"]
    assert interrupt.value["questions"][0]["tool_call_id"] == "a"
    assert recorder.calls == []
    out = graph.invoke(Command(resume="Oslo"), config)
    assert recorder.calls == [("get_weather", {"city": "Oslo"})]
    assert "The user answered: Oslo" in answers_by_id(out["messages"])["a"][0].content
    assert_every_call_answered_once(out["messages"])


def test_custom_messages_key_and_counters_key(recorder: Recorder) -> None:
    class State(TypedDict):
        history: Annotated[list[AnyMessage], add_messages]
        stats: Annotated[dict[str, int], merge_counters]

    tools = recorder.tools()
    node = GuardNode(Guard(tools), messages_key="history", counters_key="stats",
                     tools_node="run_tools", model_node="llm")
    model = ScriptedChatModel(script=[
        ai_calls(("get_weather", {"city": "Paris"}, "a"), ("nope", {}, "b")),
        AIMessage("ok"),
    ])

    def llm(state: State) -> dict[str, Any]:
        return {"history": [model.invoke(state["history"])]}

    builder = StateGraph(State)
    builder.add_node("llm", llm)
    builder.add_node("guard", node)
    builder.add_node("run_tools", ToolNode(tools, messages_key="history"))
    builder.add_edge(START, "llm")
    builder.add_conditional_edges(
        "llm", lambda s: tools_condition(s, messages_key="history"),
        {"tools": "guard", END: END})
    builder.add_conditional_edges("guard", node.route, ["run_tools", "llm", END])
    builder.add_edge("run_tools", "llm")
    out = builder.compile().invoke({"history": [HumanMessage("weather in Paris")]})
    assert recorder.names() == ["get_weather"]
    assert out["stats"]["checked"] == 2
    assert out["stats"]["allowed"] == 1 and out["stats"]["blocked"] == 1
    assert out["stats"]["type"] == 1
    assert_every_call_answered_once(out["history"])


def test_needs_guard_wiring_answers_calls_with_only_malformed_arguments(
    recorder: Recorder,
) -> None:
    tools = recorder.tools()
    guard = GuardNode(Guard(tools))
    model = ScriptedChatModel(script=[
        AIMessage("", invalid_tool_calls=[{"name": "get_weather", "args": "{bad", "id": "bad",
                                           "error": None, "type": "invalid_tool_call"}]),
        AIMessage("done")])
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda s: {"messages": [model.invoke(s["messages"])]})
    builder.add_node("guard", guard)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda s: "guard" if needs_guard(s) else END,
                                  ["guard", END])
    builder.add_conditional_edges("guard", guard.route, ["tools", "model", END])
    builder.add_edge("tools", "model")
    out = builder.compile().invoke({"messages": [HumanMessage("weather in Paris")]})
    (answer,) = answers_by_id(out["messages"])["bad"]
    assert answer.status == "error" and "not valid JSON" in answer.content
    assert out["messages"][-1].content == "done"
    assert not needs_guard({"messages": [AIMessage("hello")]})


def test_documented_wiring_uses_needs_guard() -> None:
    import toolguard.nodes.guard

    doc = toolguard.nodes.guard.__doc__ or ""
    assert "needs_guard" in doc and "tools_condition" not in doc


# ---------------------------------------------------------------------------- unit level
def _node(recorder: Recorder, **options: Any) -> GuardNode:
    return GuardNode(Guard(recorder.tools()), counters_key="toolguard", **options)


def test_route_sends_only_unanswered_allowed_calls(recorder: Recorder) -> None:
    node = _node(recorder)
    state = {"messages": [HumanMessage("weather in Paris"),
                          ai_calls(("get_weather", {"city": "Paris"}, "a"),
                                   ("nope", {}, "b"))]}
    update = node.invoke(state)
    assert [m.tool_call_id for m in update["messages"]] == ["b"]
    state["messages"] += update["messages"]
    sends = node.route(state)
    assert isinstance(sends, list) and len(sends) == 1
    (send,) = sends
    assert isinstance(send, Send) and send.node == "tools"
    assert [c["id"] for c in send.arg] == ["a"]  # one call, no state snapshot


def test_route_goes_back_to_the_model_when_everything_is_answered(recorder: Recorder) -> None:
    node = _node(recorder)
    state = {"messages": [HumanMessage("x"), ai_calls(("nope", {}, "b")),
                          ToolMessage("err", tool_call_id="b", status="error")]}
    assert node.route(state) == "model"
    assert node.invoke(state) == {}  # nothing pending: the node changes nothing


def test_route_ends_after_a_question(recorder: Recorder) -> None:
    node = _node(recorder, ask_user="end")
    state = {"messages": [HumanMessage("weather please"),
                          ai_calls(("get_weather", {"city": "Reykjavik"}, "a"))]}
    update = node.invoke(state)
    assert update["messages"][-1].response_metadata == {"toolguard": "ask_user"}
    state["messages"] += update["messages"]
    assert node.route(state) == END


async def test_node_ainvoke_equals_invoke(recorder: Recorder) -> None:
    node = _node(recorder, ask_user="end")
    state = {"messages": [HumanMessage("weather in Paris"),
                          ai_calls(("get_weather", {"city": "Paris"}, "a"),
                                   ("get_weather", {"town": "Paris"}, "b"),
                                   ("get_weather", {"city": "Reykjavik"}, "c"))]}
    sync = node.invoke(state)
    assert await node.ainvoke(state) == sync
    assert sync["toolguard"]["checked"] == 3


def test_node_options_are_validated(recorder: Recorder) -> None:
    with pytest.raises(ValueError, match="ask_user must be"):
        GuardNode(Guard(recorder.tools()), ask_user="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no messages under 'messages'"):
        _node(recorder).invoke({"messages": []})


def test_count_verdicts_and_merge_counters(recorder: Recorder) -> None:
    guard = Guard(recorder.tools())
    verdicts = guard.check([HumanMessage("weather in Paris"),
                            ai_calls(("get_weather", {"city": "Paris"}, "a"),
                                     ("nope", {}, "b"),
                                     ("get_weather", {"city": "Reykjavik"}, "c"))])
    counts = count_verdicts(verdicts)
    assert counts == {"checked": 3, "allowed": 1, "blocked": 1, "asked_user": 1,
                      "change_tools": 0, "type": 1, "timing": 0, "format": 0, "content": 1,
                      "provenance": 0, "intent": 0}
    assert merge_counters(counts, counts)["checked"] == 6
    assert merge_counters(None, counts) == counts
    assert merge_counters(counts, None) == counts
    assert merge_counters({"x": 1}, {"y": 2}) == {"x": 1, "y": 2}


def test_guard_state_has_a_counters_channel() -> None:
    assert "toolguard" in GuardState.__annotations__
    assert "messages" in GuardState.__annotations__


class _GroundedState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    kg_grounding: list[str]


@pytest.mark.parametrize("use_async", [False, True])
async def test_grounding_key_values_count_as_grounded(recorder: Recorder, use_async: bool) -> None:
    """Values resolved elsewhere (e.g. a KG node) ground a call the conversation does not."""
    tools = recorder.tools()
    call = ai_calls(("send_email", {"to": "alice.smith@example.com", "body": "Happy birthday"},
                     "e1"))

    def graph(grounding_key: str | None) -> Any:
        model = ScriptedChatModel(script=[call, AIMessage("Sent.")]).bind_tools(tools)
        guard = GuardNode(Guard(tools), grounding_key=grounding_key, ask_user="end")

        def call_model(state: _GroundedState) -> dict[str, Any]:
            return {"messages": [model.invoke(state["messages"])]}

        builder = StateGraph(_GroundedState)
        builder.add_node("model", call_model)
        builder.add_node("guard", guard)
        builder.add_node("tools", ToolNode(tools))
        builder.add_edge(START, "model")
        builder.add_conditional_edges("model", tools_condition, {"tools": "guard", END: END})
        builder.add_conditional_edges("guard", guard.route, ["tools", "model", END])
        builder.add_edge("tools", "model")
        return builder.compile()

    state = {"messages": [HumanMessage("Email my mom: Happy birthday")],
             "kg_grounding": ["mother's email: alice.smith@example.com"]}
    for key, executed in ((None, []), ("kg_grounding", [
            ("send_email", {"to": "alice.smith@example.com", "body": "Happy birthday"})])):
        recorder.calls.clear()
        g = graph(key)
        out = await g.ainvoke(state) if use_async else g.invoke(state)
        assert recorder.calls == executed
        assert_every_call_answered_once(out["messages"])
