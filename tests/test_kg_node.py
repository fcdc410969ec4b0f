"""KGResolveNode inside real compiled StateGraphs (ScriptedChatModel as the model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from toolguard import Guard
from toolguard.kg import KnowledgeGraph
from toolguard.kg.request import EXTRA_INFO
from toolguard.kg.store import KGStore
from toolguard.nodes import GuardNode, KGResolveNode, needs_guard
from toolguard.testing import ScriptedChatModel

U1 = [("Bob", "mother", "Alice"), ("Alice", "favourite_restaurant", "Chez Paul"),
      ("Bob", "father", "Jack"), ("Alice", "husband", "Jack")]
U2 = [("Bob", "mother", "Zoe"), ("Zoe", "favourite_restaurant", "Chez Zoe")]


@tool
def book_table(restaurant: str, people: int) -> str:
    """Book a table at a restaurant for a number of people."""
    return f"booked {restaurant} for {people}"


class State(MessagesState):
    kg_grounding: list[str]


def _call(restaurant: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "book_table", "id": "c1",
                                      "args": {"restaurant": restaurant, "people": 2}}])


def _graph(model: ScriptedChatModel, kg_node: KGResolveNode | None, *,
           store: InMemoryStore | None = None, checkpointer: Any = None) -> Any:
    guard_node = GuardNode(Guard([book_table]))

    def call_model(state: State) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("model", call_model)
    builder.add_node("guard", guard_node)
    builder.add_node("tools", ToolNode([book_table]))
    if kg_node is not None:
        builder.add_node("kg", kg_node)
        builder.add_edge(START, "kg")
        builder.add_conditional_edges("kg", kg_node.route, ["model", END])
    else:
        builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda s: "guard" if needs_guard(s) else END,
                                  ["guard", END])
    builder.add_conditional_edges("guard", guard_node.route, ["tools", "model", END])
    builder.add_edge("tools", "model")
    return builder.compile(store=store, checkpointer=checkpointer)


def _store() -> InMemoryStore:
    base = InMemoryStore()
    kgs = KGStore(base)
    kgs.add_many("u1", U1)
    kgs.add_many("u2", U2)
    return base


REQUEST = "Book a table for two at my mom's favourite restaurant."


def test_resolved_values_reach_the_model_and_count_as_grounded() -> None:
    model = ScriptedChatModel(script=[_call("Chez Paul"), AIMessage("Booked.")])
    graph = _graph(model, KGResolveNode(), store=_store())
    out = graph.invoke({"messages": [HumanMessage(REQUEST)]},
                       {"configurable": {"user_id": "u1", "kg_speaker": "Bob"}})
    first = model.calls[0][-1]
    assert isinstance(first, HumanMessage)
    assert first.content == (f"{REQUEST}  {EXTRA_INFO} ([Bob, mother, Alice], "
                             "[Alice, favourite_restaurant, Chez Paul]).")
    assert first.additional_kwargs["toolguard_kg"]["triples"][-1] == [
        "Alice", "favourite_restaurant", "Chez Paul"]
    assert "Chez Paul" in out["kg_grounding"]
    tool_msgs = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.content for m in tool_msgs] == ["booked Chez Paul for 2"]
    assert out["messages"][-1].content == "Booked."
    assert len(out["messages"]) == 4  # the request was replaced, not duplicated


def test_without_resolution_the_guard_asks_for_the_value() -> None:
    # the same call without the KG node: the value is grounded nowhere
    model = ScriptedChatModel(script=[_call("Chez Paul")])
    out = _graph(model, None).invoke({"messages": [HumanMessage(REQUEST)]})
    assert not any(isinstance(m, ToolMessage) and m.status != "error" for m in out["messages"])
    assert out["messages"][-1].response_metadata.get("toolguard") == "ask_user"


def test_per_user_isolation_in_the_graph() -> None:
    model = ScriptedChatModel(script=[AIMessage("ok")] * 3)
    graph = _graph(model, KGResolveNode(), store=_store())
    for user, value in (("u1", "Chez Paul"), ("u2", "Chez Zoe")):
        out = graph.invoke({"messages": [HumanMessage(REQUEST)]},
                           {"configurable": {"user_id": user, "kg_speaker": "Bob"}})
        assert out["kg_grounding"][-1].endswith(value)
        other = "Chez Zoe" if user == "u1" else "Chez Paul"
        assert other not in str(model.calls[-1])
    # a user with no KG: the speaker is unknown -> ask, the model is not called
    out = graph.invoke({"messages": [HumanMessage(REQUEST)]},
                       {"configurable": {"user_id": "u3", "kg_speaker": "Bob"}})
    assert len(model.calls) == 2
    assert out["messages"][-1].response_metadata["toolguard"] == "ask_user"
    assert "unknown speaker" in out["messages"][-1].content


def test_missing_link_ends_the_turn_with_a_question() -> None:
    model = ScriptedChatModel(script=[])
    graph = _graph(model, KGResolveNode(kg=KnowledgeGraph(U1)))
    out = graph.invoke({"messages": [HumanMessage(
        "<speak>Speaker: Bob</speak> Book at my grandfather's favourite restaurant.")]})
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and last.response_metadata["toolguard"] == "ask_user"
    assert "grandfather" in last.content and "Bob" in last.content
    assert model.calls == []


def test_missing_link_interrupts_with_a_checkpointer_and_resumes() -> None:
    model = ScriptedChatModel(script=[AIMessage("Which restaurant, then?")])
    graph = _graph(model, KGResolveNode(), store=_store(), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1", "user_id": "u1", "kg_speaker": "Bob"}}
    out = graph.invoke({"messages": [HumanMessage(
        "Book a table at my sister's favourite restaurant.")]}, config)
    (intr,) = out["__interrupt__"]
    assert intr.value["type"] == "toolguard.ask_user"
    assert "sister" in intr.value["questions"][0]["missing"][0]
    out = graph.invoke(Command(resume="I have no sister; use my mom's."), config)
    sent = model.calls[0][-1]
    assert "I have no sister; use my mom's." in str(sent.content)
    assert out["messages"][-1].content == "Which restaurant, then?"


def test_relation_added_at_run_time_through_the_store() -> None:
    base = _store()
    model = ScriptedChatModel(script=[AIMessage("ok")] * 2)
    graph = _graph(model, KGResolveNode(), store=base)
    config = {"configurable": {"user_id": "u1", "kg_speaker": "Bob"}}
    request = "Play my mom's favourite podcast."
    out = graph.invoke({"messages": [HumanMessage(request)]}, config)
    assert out["messages"][-1].response_metadata.get("toolguard") == "ask_user"
    KGStore(base).add("u1", "Alice", "prefer_podcast", "podcast_0042")
    out = graph.invoke({"messages": [HumanMessage(request)]}, config)
    assert "podcast_0042" in out["kg_grounding"]


def test_relation_added_at_run_time_to_a_shared_kg() -> None:
    """The node keeps one resolver for kg=; a triple added later is still seen."""
    kg = KnowledgeGraph(U1)
    model = ScriptedChatModel(script=[AIMessage("ok")] * 2)
    graph = _graph(model, KGResolveNode(kg=kg))
    config = {"configurable": {"kg_speaker": "Bob"}}
    request = "Play my mom's favourite podcast."
    out = graph.invoke({"messages": [HumanMessage(request)]}, config)
    assert out["messages"][-1].response_metadata.get("toolguard") == "ask_user"
    kg.add("Alice", "prefer_podcast", "podcast_0042")
    out = graph.invoke({"messages": [HumanMessage(request)]}, config)
    assert "podcast_0042" in out["kg_grounding"]
    kg.remove("Alice", "prefer_podcast", "podcast_0042")
    out = graph.invoke({"messages": [HumanMessage(request)]}, config)
    assert out["messages"][-1].response_metadata.get("toolguard") == "ask_user"


async def test_async_graph_and_user_id_from_state() -> None:
    model = ScriptedChatModel(script=[AIMessage("ok")])

    class UserState(State):
        user_id: str

    node = KGResolveNode(store=KGStore(_store()), speaker_key="speaker")
    builder = StateGraph(UserState)
    builder.add_node("kg", node)
    builder.add_node("model", lambda s: {"messages": [model.invoke(s["messages"])]})
    builder.add_edge(START, "kg")
    builder.add_conditional_edges("kg", node.route, ["model", END])
    builder.add_edge("model", END)
    out = await builder.compile().ainvoke(
        {"messages": [HumanMessage("<speak>Speaker: Bob</speak> " + REQUEST)],
         "user_id": "u2"})
    assert "Chez Zoe" in out["kg_grounding"]
    assert "[Zoe, favourite_restaurant, Chez Zoe]" in str(model.calls[0][-1].content)


def test_nothing_personal_passes_through_and_validation() -> None:
    model = ScriptedChatModel(script=[AIMessage("It is sunny.")])
    graph = _graph(model, KGResolveNode(kg=KnowledgeGraph(U1)))
    out = graph.invoke({"messages": [HumanMessage("What's the weather in Paris?")]})
    assert model.calls[0][-1].content == "What's the weather in Paris?"
    assert "kg_grounding" not in out
    with pytest.raises(ValueError, match="not both"):
        KGResolveNode(kg=KnowledgeGraph(), store=KGStore(InMemoryStore()))
    with pytest.raises(ValueError, match="ask_user"):
        KGResolveNode(ask_user="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_score"):
        KGResolveNode(min_score=-1)


def test_example_script_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import runpy

    path = Path(__file__).resolve().parent.parent / "examples" / "kg_agent.py"
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "[Alice, favourite_restaurant, Chez Paul]" in out
    assert "answer  : Booked Chez Paul for two." in out
    assert "Bob has no 'dad'" in out
