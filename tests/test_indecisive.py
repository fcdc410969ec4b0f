"""IndecisiveActionsMiddleware inside LangChain v1 ``create_agent`` (plumbing: a scripted model
plays a Relign-tuned one that ends with RelyToolBench's ``Finish``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import Field

from toolguard import GuardMiddleware, IndecisiveActionsMiddleware
from toolguard.conversation import MARK_KEY
from toolguard.middleware.indecisive import finish_tool
from toolguard.testing import ScriptedChatModel
from toolguard_evals.relytoolbench.agent import finish_function


class Recording(ScriptedChatModel):
    """Also records the tool names each model call was offered."""

    offered: list[list[str]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Recording:
        names = []
        for t in tools:
            fn = t.get("function", t) if isinstance(t, dict) else None
            names.append(fn["name"] if fn is not None else t.name)
        self.offered.append(names)
        return self


RUNS: list[dict[str, Any]] = []


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    RUNS.append({"city": city})
    return f"Sunny in {city}"


def _finish(rtype: str, answer: str | None = "x", *extra: dict[str, Any]) -> AIMessage:
    args: dict[str, Any] = {"return_type": rtype}
    if answer is not None:
        args["final_answer"] = answer
    return AIMessage("", tool_calls=[*extra, {"name": "Finish", "args": args, "id": "f1"}])


def _agent(script: list[AIMessage], *, guard: bool = True, tools: list[Any] | None = None):
    model = Recording(script=script)
    stack: list[Any] = [GuardMiddleware()] if guard else []
    stack.append(IndecisiveActionsMiddleware())  # innermost: rewrites before the guard reads
    return model, create_agent(model, tools or [get_weather], middleware=stack)


@pytest.mark.parametrize(("rtype", "mark", "counter"), [
    ("give_up_and_talk_to_user", "ask_user", "indecisive_talk_to_user"),
    ("give_up_and_change_tools", "no_suitable_tool", "indecisive_change_tools"),
])
def test_an_indecisive_finish_ends_the_turn_with_toolguards_outcome(
        rtype: str, mark: str, counter: str) -> None:
    RUNS.clear()
    model, agent = _agent([_finish(rtype, "Which city do you mean?")])
    out = agent.invoke({"messages": [HumanMessage("What's the weather?")]})
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert last.text == "Which city do you mean?"
    assert last.response_metadata[MARK_KEY] == mark
    assert last.response_metadata["finish"] == rtype
    assert out["toolguard"][counter] == 1
    assert not any(isinstance(m, ToolMessage) for m in out["messages"]) and RUNS == []
    assert model.offered[0] == ["get_weather", "Finish"]


def test_a_finish_without_an_answer_still_says_something() -> None:
    _, agent = _agent([_finish("give_up_and_change_tools", None)])
    last = agent.invoke({"messages": [HumanMessage("Book me a flight")]})["messages"][-1]
    assert last.text and last.response_metadata[MARK_KEY] == "no_suitable_tool"


def test_finish_beside_a_call_is_dropped_and_give_answer_is_a_plain_answer() -> None:
    RUNS.clear()
    weather = {"name": "get_weather", "args": {"city": "Paris"}, "id": "w1"}
    _, agent = _agent([_finish("give_answer", "too early", weather),
                       _finish("give_answer", "It is sunny in Paris.")])
    out = agent.invoke({"messages": [HumanMessage("What's the weather in Paris?")]})
    msgs = out["messages"]
    assert RUNS == [{"city": "Paris"}]
    first = msgs[1]
    assert [c["name"] for c in first.tool_calls] == ["get_weather"]
    assert [m.tool_call_id for m in msgs if isinstance(m, ToolMessage)] == ["w1"]
    last = msgs[-1]
    assert last.text == "It is sunny in Paris." and not last.tool_calls
    assert MARK_KEY not in last.response_metadata
    assert "indecisive_talk_to_user" not in out.get("toolguard", {})


def test_an_unreadable_finish_is_dropped_and_the_text_stands() -> None:
    bad = AIMessage("I could not do it.", invalid_tool_calls=[
        {"name": "Finish", "args": '{"return_type": ', "id": "f1", "error": "bad json",
         "type": "invalid_tool_call"}])
    _, agent = _agent([bad])
    last = agent.invoke({"messages": [HumanMessage("What's the weather?")]})["messages"][-1]
    assert last.text == "I could not do it." and not last.invalid_tool_calls
    assert MARK_KEY not in last.response_metadata


def test_an_agent_tool_named_finish_is_left_alone() -> None:
    calls: list[str] = []

    @tool("Finish")
    def own_finish(note: str) -> str:
        """The agent's own Finish tool."""
        calls.append(note)
        return "done"

    model, agent = _agent([AIMessage("", tool_calls=[
        {"name": "Finish", "args": {"note": "n"}, "id": "o1"}]), AIMessage("ok")],
        guard=False, tools=[own_finish])
    out = agent.invoke({"messages": [HumanMessage("finish up")]})
    assert calls == ["n"] and out["messages"][-1].text == "ok"
    assert model.offered[0] == ["Finish"]


def test_async_matches_sync() -> None:
    _, agent = _agent([_finish("give_up_and_talk_to_user", "Which city?")])
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("What's the weather?")]}))
    assert out["messages"][-1].response_metadata[MARK_KEY] == "ask_user"


def test_the_served_finish_is_the_one_relign_trains_and_relytoolbench_evaluates() -> None:
    assert finish_function() == finish_tool()
    assert finish_tool()["parameters"]["properties"]["return_type"]["enum"] == [
        "give_answer", "give_up_and_restart", "give_up_and_change_tools",
        "give_up_and_talk_to_user"]
