"""The KG turn as one sans-IO plan (toolguard.kg.plan / toolguard.kg.turn) and its two shells.

The plan is driven by hand here (no store is read: the replies are the test's), then the
middleware (``create_agent``) and the node (a hand-built ``StateGraph``) run the same cases,
sync and async, and must write the same state keys, marks and stream events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from toolguard import KGResolveMiddleware
from toolguard.errors import ConfigurationError, KGError
from toolguard.kg import KGStore, KnowledgeGraph
from toolguard.kg.plan import AskUser, Notify, ReadGraph, ReadVersion, drive
from toolguard.kg.request import EXTRA_INFO, KG_KEY
from toolguard.kg.turn import GROUNDING_KEY, KGTurnResolver, TurnUpdate
from toolguard.nodes import KGResolveNode
from toolguard.protocol import Answer
from toolguard.testing import ScriptedChatModel

U1 = [("Bob", "mother", "Alice"), ("Alice", "favourite_restaurant", "Chez Paul")]
U2 = [("Bob", "mother", "Zoe"), ("Zoe", "favourite_restaurant", "Chez Zoe")]
REQUEST = "Book a table at my mom's favourite restaurant."
MISSING = "Book a table at my sister's favourite restaurant."
SUB_KG = "([Bob, mother, Alice], [Alice, favourite_restaurant, Chez Paul])"


def _plan(resolver: KGTurnResolver, text: str, *, ask: Any = "end", user: str = "u1",
          events: list[Mapping[str, Any]] | None = None) -> Any:
    return resolver.plan([HumanMessage(text, id="m1")], state={},
                         configurable={"user_id": user, "kg_speaker": "Bob"}, runtime=None,
                         ask=ask, notify=None if events is None else events.append)


# ---------------------------------------------------------------------------- the plan
def test_the_plan_asks_for_each_read_and_uses_the_replies_it_gets() -> None:
    store = KGStore(InMemoryStore())  # empty: every fact below comes from a reply
    resolver = KGTurnResolver(store=store, max_age_s=None)
    plan = _plan(resolver, REQUEST)
    step = next(plan)
    assert step == ReadGraph(store, "u1")  # nothing cached yet: the whole graph
    with pytest.raises(StopIteration) as done:
        plan.send((KnowledgeGraph(U1), "v1"))
    update = done.value.value
    assert isinstance(update, TurnUpdate) and not update.ends_turn
    assert update.message.id == "m1"
    assert update.message.content == f"{REQUEST}  {EXTRA_INFO} {SUB_KG}."
    assert update.message.additional_kwargs[KG_KEY]["triples"][-1] == [
        "Alice", "favourite_restaurant", "Chez Paul"]
    assert "Chez Paul" in (update.grounding or [])
    # the next turn: one version read; the same version keeps the cached graph
    plan = _plan(resolver, REQUEST)
    assert next(plan) == ReadVersion(store, "u1")
    with pytest.raises(StopIteration) as done:
        plan.send("v1")
    assert "Chez Paul" in done.value.value.grounding
    # a new version: the graph is read again, and the new facts are used
    plan = _plan(resolver, REQUEST)
    assert next(plan) == ReadVersion(store, "u1")
    assert plan.send("v2") == ReadGraph(store, "u1")
    with pytest.raises(StopIteration) as done:
        plan.send((KnowledgeGraph(U2), "v2"))
    assert "Chez Zoe" in done.value.value.grounding
    assert store.load("u1").triples() == []  # the plan itself never read the store


def test_a_missing_link_notifies_then_asks_and_appends_the_answer() -> None:
    resolver = KGTurnResolver(kg=KnowledgeGraph(U1))  # fixed KG: no store step
    events: list[Mapping[str, Any]] = []
    plan = _plan(resolver, MISSING, ask="interrupt", events=events)
    notify = next(plan)
    assert isinstance(notify, Notify) and notify.event["event"] == "kg_missing"
    assert "Bob has no 'sister'" in notify.event["missing"][0]
    ask = plan.send(None)
    assert isinstance(ask, AskUser)
    (question,) = ask.questions
    assert question["source"] == "kg" and question["missing"] == notify.event["missing"]
    with pytest.raises(StopIteration) as done:
        plan.send([Answer("respond", "I meant Chez Paul")])
    update = done.value.value
    assert update.message.additional_kwargs[KG_KEY]["answer"] == "I meant Chez Paul"
    assert "The user answered: I meant Chez Paul" in update.message.content
    assert update.grounding[-1] == "I meant Chez Paul"
    # ask="end": the question ends the turn; driven for real, the event reaches notify
    update = drive(_plan(resolver, MISSING, ask="end", events=events))
    assert update is not None and update.ends_turn and update.grounding is None
    assert isinstance(update.message, AIMessage)
    assert update.message.response_metadata["toolguard"] == "ask_user"
    assert set(update.message.response_metadata[KG_KEY]) == {"programs", "triples", "missing"}
    assert [e["event"] for e in events] == ["kg_missing"]


def test_nothing_to_do_and_configuration_errors() -> None:
    resolver = KGTurnResolver(kg=KnowledgeGraph(U1))
    assert drive(_plan(resolver, "What's the weather in Paris?")) is None
    resolved = drive(_plan(resolver, REQUEST))
    assert resolved is not None
    again = resolver.plan([resolved.message], state={}, configurable={}, runtime=None,
                          ask="end")
    assert drive(again) is None  # a resolved request is never resolved twice
    with pytest.raises(KGError, match="store"):  # a user, but no KG anywhere
        drive(_plan(KGTurnResolver(), REQUEST))
    with pytest.raises(ConfigurationError, match="not both"):
        KGTurnResolver(kg=KnowledgeGraph(), store=KGStore(InMemoryStore()))
    with pytest.raises(ConfigurationError, match="top_k must be >= 1, got 0"):
        KGTurnResolver(top_k=0)


# ---------------------------------------------------------------------------- both shells
def _store() -> InMemoryStore:
    base = InMemoryStore()
    KGStore(base).add_many("u1", U1)
    KGStore(base).add_many("u2", U2)
    return base


def _middleware_graph(model: ScriptedChatModel, store: InMemoryStore, *,
                      context: bool = False, **kw: Any) -> Any:
    return create_agent(model, [], middleware=[KGResolveMiddleware()], store=store,
                        context_schema=dict if context else None, **kw)


class _State(MessagesState):
    kg_grounding: list[str]


def _node_graph(model: ScriptedChatModel, store: InMemoryStore, *, context: bool = False,
                **kw: Any) -> Any:
    node = KGResolveNode()

    def call_model(state: _State) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(_State, context_schema=dict if context else None)
    builder.add_node("kg", node)
    builder.add_node("model", call_model)
    builder.add_edge(START, "kg")
    builder.add_conditional_edges("kg", node.route, ["model", END])
    builder.add_edge("model", END)
    return builder.compile(store=store, **kw)


SURFACES = {"middleware": _middleware_graph, "node": _node_graph}


def _run(graph: Any, inputs: Any, config: Any, *, use_async: bool,
         **kw: Any) -> tuple[dict[str, Any], list[Any]]:
    """The final state and the toolguard custom events of one run."""
    async def go() -> list[Any]:
        return [c async for c in graph.astream(inputs, config, stream_mode=["values",
                                                                              "custom"], **kw)]

    chunks = asyncio.run(go()) if use_async else list(
        graph.stream(inputs, config, stream_mode=["values", "custom"], **kw))
    values = [c for mode, c in chunks if mode == "values"]
    events = [c["toolguard"] for mode, c in chunks if mode == "custom" and "toolguard" in c]
    return values[-1], events


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_middleware_and_node_write_the_same_keys_marks_and_events(use_async: bool) -> None:
    config = {"configurable": {"user_id": "u1", "kg_speaker": "Bob"}}
    seen: dict[str, Any] = {}
    for surface, build in SURFACES.items():
        model = ScriptedChatModel(script=[AIMessage("Booked.")])
        graph = build(model, _store())
        ok, ok_events = _run(graph, {"messages": [HumanMessage(REQUEST, id="r1")]}, config,
                             use_async=use_async)
        model = ScriptedChatModel(script=[])
        graph = build(model, _store())
        asked, ask_events = _run(graph, {"messages": [HumanMessage(MISSING, id="r2")]},
                                 config, use_async=use_async)
        assert model.calls == []  # the question ended the turn before the model
        request = ok["messages"][0]
        question = asked["messages"][-1]
        seen[surface] = (request.content, request.additional_kwargs, ok[GROUNDING_KEY],
                         ok_events, question.content, question.response_metadata,
                         ask_events, GROUNDING_KEY in asked)
    assert seen["middleware"] == seen["node"]
    content, kwargs, grounding, ok_events, _, metadata, ask_events, grounded = seen["node"]
    assert content == f"{REQUEST}  {EXTRA_INFO} {SUB_KG}." and "Chez Paul" in grounding
    assert kwargs[KG_KEY]["programs"] == [
        'KG.search(start="Bob", path=["mother","favourite_restaurant"])']
    assert ok_events == [] and not grounded
    assert metadata["toolguard"] == "ask_user"
    assert set(metadata[KG_KEY]) == {"programs", "triples", "missing"}
    assert ask_events == [{"event": "kg_missing", "missing": metadata[KG_KEY]["missing"]}]


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_both_shells_interrupt_and_resume_with_the_users_answer(surface: str) -> None:
    model = ScriptedChatModel(script=[AIMessage("Booked.")])
    graph = SURFACES[surface](model, _store(), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": surface, "user_id": "u1", "kg_speaker": "Bob"}}
    out = graph.invoke({"messages": [HumanMessage(MISSING)]}, config)
    (intr,) = out["__interrupt__"]
    assert intr.value["questions"][0]["source"] == "kg"
    out = graph.invoke(Command(resume="Chez Paul, please"), config)
    sent = model.calls[0][-1]
    assert "The user answered: Chez Paul, please" in sent.content
    assert sent.additional_kwargs[KG_KEY]["answer"] == "Chez Paul, please"
    assert out[GROUNDING_KEY][-1] == "Chez Paul, please"


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_both_shells_read_the_user_from_the_run_context(surface: str) -> None:
    model = ScriptedChatModel(script=[AIMessage("ok")])
    graph = SURFACES[surface](model, _store(), context=True)
    out = graph.invoke({"messages": [HumanMessage(REQUEST)]},
                       {"configurable": {"user_id": "u1"}},
                       context={"user_id": "u2", "kg_speaker": "Bob"})
    assert "Chez Zoe" in out[GROUNDING_KEY]  # the context wins over configurable
    assert "Chez Paul" not in str(model.calls[0][-1].content)
