"""The guard's refusal budget: a model that answers every refusal with another refused call.

``GuardMiddleware(max_refused_steps=N)`` and ``GuardNode(max_refused_steps=N)`` end the turn
at the (N+1)-th model step in a row whose calls were all blocked, with a message to the user
(mark ``loop``); every call stays answered exactly once.  Real ``create_agent`` / LangGraph
graphs, real tools, scripted models.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from toolguard import Guard, GuardMiddleware
from toolguard.conversation import MARK_KEY
from toolguard.errors import ConfigurationError
from toolguard.nodes import GuardNode
from toolguard.steps import DEFAULT_MAX_REFUSED_STEPS, refused_steps
from toolguard.testing import ScriptedChatModel

RAN: list[str] = []


@tool
def get_user(user_id: int) -> str:
    """Get a user's details by id."""
    RAN.append(f"get_user({user_id})")
    return f"user {user_id}: Ada"


def refused_forever(kind: str) -> list[Any]:
    """A script that answers every refusal with another refused call (never ending)."""
    ids = itertools.count()

    def step(_: Any) -> AIMessage:
        i = next(ids)
        call = ({"name": "book_flight", "args": {"to": "Rome"}} if kind == "fabricated"
                else {"name": "get_user", "args": {"bogus": i}})
        return AIMessage("", tool_calls=[{**call, "id": f"c{i}", "type": "tool_call"}])

    return [step] * 40


def run_middleware(script: list[Any], **options: Any) -> tuple[list[Any], ScriptedChatModel]:
    model = ScriptedChatModel(script=script)
    agent = create_agent(model, [get_user], middleware=[GuardMiddleware(**options)])
    out = agent.invoke({"messages": [HumanMessage("Show me user 42")]},
                       {"recursion_limit": 200})
    return out["messages"], model


def assert_answered_once(messages: list[Any]) -> None:
    calls = [c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    answers = [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
    assert sorted(calls) == sorted(answers)


@pytest.mark.parametrize("kind", ["fabricated", "format"])
def test_the_guard_alone_ends_a_turn_of_refused_calls(kind: str) -> None:
    RAN.clear()
    messages, model = run_middleware(refused_forever(kind))
    # refused steps 1..4 go back to the model; the 5th ends the turn
    assert model.position == DEFAULT_MAX_REFUSED_STEPS + 1 == 5
    last = messages[-1]
    assert isinstance(last, AIMessage) and last.response_metadata[MARK_KEY] == "loop"
    assert "refused 5 times in a row" in str(last.content)
    assert ("not a valid tool" if kind == "fabricated" else "unknown parameter") in str(
        last.content)
    assert RAN == []
    assert_answered_once(messages)


def test_the_budget_is_configurable_and_can_be_switched_off() -> None:
    _, model = run_middleware(refused_forever("fabricated"), max_refused_steps=1)
    assert model.position == 2
    model = ScriptedChatModel(script=refused_forever("fabricated")[:12])
    agent = create_agent(model, [get_user], middleware=[GuardMiddleware(max_refused_steps=None)])
    with pytest.raises(IndexError, match="script exhausted after 12 calls"):
        agent.invoke({"messages": [HumanMessage("Show me user 42")]}, {"recursion_limit": 200})
    assert model.position == 12  # nothing but the script's end stopped it


def test_a_call_that_runs_restarts_the_count() -> None:
    RAN.clear()
    ids = itertools.count()

    def bad(_: Any) -> AIMessage:
        return AIMessage("", tool_calls=[{"name": "nope", "args": {}, "id": f"b{next(ids)}",
                                          "type": "tool_call"}])

    good = AIMessage("", tool_calls=[{"name": "get_user", "args": {"user_id": 42},
                                      "id": "g", "type": "tool_call"}])
    script = [bad, bad, bad, good, bad, bad, bad, bad, bad, bad]
    messages, model = run_middleware(script)
    assert RAN == ["get_user(42)"]
    # 3 refused, one ran, then 4 refused and the 5th in a row ended the turn
    assert model.position == 9
    assert messages[-1].response_metadata[MARK_KEY] == "loop"
    assert_answered_once(messages)


def test_refused_steps_counts_back_to_the_user() -> None:
    messages, _ = run_middleware(refused_forever("fabricated"), max_refused_steps=2)
    assert refused_steps(messages[:-1]) == 3  # the three refused steps, the last one ended
    assert refused_steps([*messages, HumanMessage("Try again")]) == 0


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_a_bad_budget_is_a_clear_error(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_refused_steps must be None or an int"):
        GuardMiddleware(max_refused_steps=bad)
    with pytest.raises(ConfigurationError, match="max_refused_steps"):
        GuardNode(Guard([get_user]), max_refused_steps=bad)


def node_graph(model: ScriptedChatModel, **options: Any) -> Any:
    node = GuardNode(Guard([get_user]), **options)
    bound = model.bind_tools([get_user])
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda s: {"messages": [bound.invoke(s["messages"])]})
    builder.add_node("guard", node)
    builder.add_node("tools", ToolNode([get_user]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda s: "guard" if s["messages"][-1].tool_calls
                                  else END)
    builder.add_conditional_edges("guard", node.route)
    builder.add_edge("tools", "model")
    return builder.compile()


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_the_node_has_the_same_budget(asynchronous: bool) -> None:
    model = ScriptedChatModel(script=refused_forever("fabricated"))
    graph = node_graph(model)
    state = {"messages": [HumanMessage("Show me user 42")]}
    config = {"recursion_limit": 200}
    out = await graph.ainvoke(state, config) if asynchronous else graph.invoke(state, config)
    assert model.position == 5
    assert out["messages"][-1].response_metadata[MARK_KEY] == "loop"
    assert_answered_once(out["messages"])
