"""toolguard's middleware inside LangChain v1 ``create_agent`` with real tools.

Every blocked call is proven never executed; interrupts resume with a checkpointer (HITL-
shaped payload and decisions); the turn ends with a question without one; composition with
LangChain's own middleware (human review, tool retry, call limits); internal model calls
stay out of ``stream_mode="messages"``; verdicts are custom stream events; the middleware
and the hand-built node graph give the same verdicts (parity).
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Recorder, ai_calls, answers_by_id, assert_every_call_answered_once
from langchain.agents import create_agent
from langchain.agents.middleware import (
    HumanInTheLoopMiddleware,
    InterruptOnConfig,
    ModelCallLimitMiddleware,
    ToolCallLimitMiddleware,
    ToolRetryMiddleware,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from toolguard import (
    Guard,
    GuardMiddleware,
    KGResolveMiddleware,
    KGStore,
    LoopGuardMiddleware,
    PrecheckMiddleware,
)
from toolguard.middleware import not_answered_by_guard
from toolguard.testing import ScriptedChatModel
from toolguard_graphs import create_guarded_graph

ASK = "What's the weather in Paris? Then the time in Paris."


def agent(script: list[Any], recorder: Recorder, *middleware: Any,
          checkpointer: Any = None, **options: Any) -> tuple[Any, ScriptedChatModel]:
    model = ScriptedChatModel(script=list(script))
    stack = list(middleware) or [GuardMiddleware()]
    return create_agent(model, recorder.tools(), middleware=stack,
                        checkpointer=checkpointer, **options), model


def run(graph: Any, text: str = ASK, config: Any = None) -> dict[str, Any]:
    return graph.invoke({"messages": [HumanMessage(text)]}, config)


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


# ---------------------------------------------------------------------------- guard
@pytest.mark.parametrize("asynchronous", [False, True])
def test_refused_calls_are_answered_before_the_tool_node_and_never_run(
        recorder: Recorder, asynchronous: bool) -> None:
    import asyncio

    script = [ai_calls(("get_weather", {"city": "Paris"}, "ok"),
                       ("get_wether", {"city": "Paris"}, "typo"),
                       ("get_time", {"town": "Paris"}, "fmt")),
              ai_calls(("get_weather", {"city": "Paris"}, "again")),
              AIMessage("Paris: sunny.")]
    graph, model = agent(script, recorder)
    request = {"messages": [HumanMessage(ASK)]}
    out = asyncio.run(graph.ainvoke(request)) if asynchronous else graph.invoke(request)
    assert recorder.calls == [("get_weather", {"city": "Paris"})]  # once: the repeat was refused
    answers = answers_by_id(out["messages"])
    assert answers["typo"][0].artifact["toolguard"]["hallucination"] == "type"
    assert answers["fmt"][0].artifact["toolguard"]["hallucination"] == "format"
    assert answers["again"][0].artifact["toolguard"]["hallucination"] == "timing"
    assert "sunny, 21 C in Paris" in answers["again"][0].content  # the earlier result
    assert_every_call_answered_once(out["messages"])
    assert out["toolguard"]["checked"] == 4 and out["toolguard"]["blocked"] == 3
    assert model.position == 3


def test_a_message_replaced_after_the_model_is_checked_again_and_counted_once(
        recorder: Recorder) -> None:
    """Counters come with the model call's state update; a message another middleware put
    in place of the checked one is checked (and counted) in ``after_model`` instead."""
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import RemoveMessage

    class Replace(AgentMiddleware):  # runs its after_model before the guard's (listed later)
        def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            last = state["messages"][-1]
            if not isinstance(last, AIMessage) or not last.tool_calls or last.id == "swapped":
                return None
            swapped = AIMessage("", id="swapped", tool_calls=[
                {**tc, "name": "get_wether" if tc["id"] == "b" else tc["name"]}
                for tc in last.tool_calls])
            return {"messages": [RemoveMessage(id=str(last.id)), swapped]}

    script = [ai_calls(("get_weather", {"city": "Paris"}, "a"),
                       ("get_time", {"city": "Paris"}, "b")), AIMessage("Done.")]
    plain, _ = agent(script, recorder)
    out = run(plain)
    assert out["toolguard"]["checked"] == 2 and out["toolguard"]["allowed"] == 2
    assert out["toolguard"]["blocked"] == 0  # counted once, in the model call's update
    recorder.calls.clear()
    swapped, _ = agent(script, recorder, GuardMiddleware(), Replace())
    out = run(swapped)
    assert recorder.calls == [("get_weather", {"city": "Paris"})]  # the swapped-in typo: refused
    assert answers_by_id(out["messages"])["b"][0].artifact["toolguard"]["hallucination"] == "type"
    # the model call counted the original message; after_model counts the replacement in
    # its place: each call once
    assert out["toolguard"]["checked"] == 2 and out["toolguard"]["blocked"] == 1
    assert out["toolguard"]["allowed"] == 1 and out["toolguard"]["type"] == 1
    assert_every_call_answered_once(out["messages"])


def test_structured_output_passes_untouched(recorder: Recorder) -> None:
    """``response_format=ToolStrategy(...)``: create_agent answers its own output tool; the
    guard checks only the agent's tools and never re-checks the answered output call."""
    from langchain.agents.structured_output import ToolStrategy
    from pydantic import BaseModel

    class Forecast(BaseModel):
        city: str
        summary: str

    class Spy(GuardMiddleware):
        rechecked = 0

        def _recheck(self, messages: Any, state: Any) -> Any:
            Spy.rechecked += 1
            return super()._recheck(messages, state)

    script = [ai_calls(("get_weather", {"city": "Paris"}, "w")),
              ai_calls(("Forecast", {"city": "Paris", "summary": "sunny"}, "s"))]
    graph, _ = agent(script, recorder, Spy(), response_format=ToolStrategy(Forecast))
    out = run(graph, "Weather in Paris, as a forecast?")
    assert Spy.rechecked == 0
    assert out["structured_response"] == Forecast(city="Paris", summary="sunny")
    assert recorder.calls == [("get_weather", {"city": "Paris"})]
    assert out["toolguard"]["checked"] == 1 and out["toolguard"]["allowed"] == 1
    assert_every_call_answered_once(out["messages"])


def test_ask_user_interrupts_with_a_hitl_shaped_payload_and_resumes(recorder: Recorder) -> None:
    script = [ai_calls(("get_weather", {"city": "Reykjavik"}, "w"),
                       ("get_time", {"city": "Paris"}, "t")),
              ai_calls(("get_weather", {"city": "Oslo"}, "w2")),
              AIMessage("Oslo: sunny.")]
    graph, model = agent(script, recorder, checkpointer=InMemorySaver())
    first = run(graph, "Weather please, and the time in Paris", thread("hitl"))
    (interrupt,) = first["__interrupt__"]
    value = interrupt.value
    assert value["type"] == "toolguard.ask_user"
    assert value["action_requests"] == [{"name": "get_weather", "args": {"city": "Reykjavik"},
                                         "description": "Which city should I use for "
                                                        "get_weather?"}]
    assert value["review_configs"] == [{"action_name": "get_weather", "allowed_decisions": [
        "respond", "edit", "approve", "reject"]}]
    assert recorder.calls == []  # nothing of the interrupted step ran
    out = graph.invoke(Command(resume={"decisions": [{"type": "respond", "message": "Oslo"}]}),
                       thread("hitl"))
    assert recorder.executed() == [("get_time", {"city": "Paris"}),
                                   ("get_weather", {"city": "Oslo"})]
    assert "The user answered: Oslo" in answers_by_id(out["messages"])["w"][0].content
    assert_every_call_answered_once(out["messages"])
    assert model.position == 3


@pytest.mark.parametrize(("decision", "ran"), [
    ({"type": "approve"}, [("get_weather", {"city": "Reykjavik"})]),
    ({"type": "edit", "edited_action": {"name": "get_weather", "args": {"city": "Bergen"}}},
     [("get_weather", {"city": "Bergen"})]),
    ({"type": "reject", "message": "no weather today"}, []),
])
def test_hitl_decisions_approve_edit_reject(recorder: Recorder, decision: dict[str, Any],
                                            ran: list[Any]) -> None:
    script = [ai_calls(("get_weather", {"city": "Reykjavik"}, "w")), AIMessage("ok")]
    graph, _ = agent(script, recorder, checkpointer=InMemorySaver())
    assert run(graph, "Weather please", thread("d"))["__interrupt__"]
    out = graph.invoke(Command(resume={"decisions": [decision]}), thread("d"))
    assert recorder.calls == ran
    assert_every_call_answered_once(out["messages"])
    (answer,) = answers_by_id(out["messages"])["w"]
    if decision["type"] == "reject":
        assert answer.status == "error" and "no weather today" in answer.content
    else:
        assert answer.status == "success" and "sunny" in answer.content


def test_a_resume_value_of_the_wrong_shape_is_refused_and_can_be_answered_again(
        recorder: Recorder) -> None:
    script = [ai_calls(("get_weather", {"city": "Reykjavik"}, "w")), AIMessage("ok")]
    graph, _ = agent(script, recorder, checkpointer=InMemorySaver())
    assert run(graph, "Weather please", thread("bad"))["__interrupt__"]
    with pytest.raises(Exception, match="validation error"):
        graph.invoke(Command(resume=["not", "an", "answer"]), thread("bad"))
    out = graph.invoke(Command(resume="Oslo"), thread("bad"))  # the question is still open
    assert "The user answered: Oslo" in answers_by_id(out["messages"])["w"][0].content


def test_without_a_checkpointer_the_turn_ends_with_the_question(recorder: Recorder) -> None:
    script = [ai_calls(("get_weather", {"city": "Reykjavik"}, "w"),
                       ("get_time", {"city": "Paris"}, "t")), AIMessage("never")]
    graph, model = agent(script, recorder)
    out = run(graph, "Weather please, and the time in Paris")
    last = out["messages"][-1]
    assert last.content == "Which city should I use for get_weather?"
    assert last.response_metadata["toolguard"] == "ask_user"
    assert recorder.calls == [] and model.position == 1
    assert_every_call_answered_once(out["messages"])


def test_change_tools_ends_the_turn_with_a_message(recorder: Recorder) -> None:
    # the paper's relevance judge finds get_time unrelated to a stock order, no tool fits
    judge = ScriptedChatModel(script=[AIMessage(
        '{"reason": "a clock does not trade stocks", "label": "Irrelevant"}')])
    script = [ai_calls(("get_time", {"city": "Paris"}, "t")), AIMessage("never")]
    graph, model = agent(script, recorder, GuardMiddleware(relevance="llm", judge_model=judge,
                                                           content_llm_mode="off"))
    out = run(graph, "Buy 10 shares of ACME stock on the Paris exchange")
    assert recorder.calls == [] and model.position == 1
    last = out["messages"][-1]
    assert last.response_metadata["toolguard"] == "change_tools"
    assert last.content.startswith("None of my available tools can do this request")
    assert_every_call_answered_once(out["messages"])


def test_only_malformed_calls_go_back_to_the_model(recorder: Recorder) -> None:
    bad = AIMessage("", invalid_tool_calls=[{"name": "get_weather", "args": "{oops",
                                             "id": "bad", "error": "bad json",
                                             "type": "invalid_tool_call"}])
    graph, model = agent([bad, ai_calls(("get_weather", {"city": "Paris"}, "w")),
                          AIMessage("done")], recorder)
    out = run(graph, "Weather in Paris?")
    assert model.position == 3  # create_agent alone would have ended after the bad message
    assert recorder.calls == [("get_weather", {"city": "Paris"})]
    assert_every_call_answered_once(out["messages"])


def test_string_arguments_are_parsed_for_the_tool_node(recorder: Recorder) -> None:
    call = ai_calls(("get_weather", {}, "s"))
    call.tool_calls[0]["args"] = '{"city": "Paris"}'  # type: ignore[typeddict-item]
    graph, _ = agent([call, AIMessage("done")], recorder)
    run(graph, "Weather in Paris?")
    assert recorder.calls == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_new_user_message_instead_of_a_resume_closes_the_pending_calls(
        recorder: Recorder, asynchronous: bool) -> None:
    import asyncio

    script = [ai_calls(("get_weather", {"city": "Paris"}, "w1"),
                       ("send_email", {"to": "bob@example.com", "body": "hi"}, "b1")),
              ai_calls(("get_time", {"city": "Paris"}, "t2")), AIMessage("12:00.")]
    graph, model = agent(script, recorder, checkpointer=InMemorySaver())
    first = run(graph, "Weather in Paris, and email it to my colleague", thread("leak"))
    assert first["__interrupt__"][0].value["questions"][0]["tool_call_id"] == "b1"
    request = {"messages": [HumanMessage("Never mind. What time is it in Paris?")]}
    out = (asyncio.run(graph.ainvoke(request, thread("leak"))) if asynchronous
           else graph.invoke(request, thread("leak")))
    messages = out["messages"]
    # the model itself was shown a valid history: every call answered, the user message last
    seen = model.calls[1]
    assert_every_call_answered_once(seen)
    assert isinstance(seen[-1], HumanMessage) and "Never mind" in str(seen[-1].content)
    assert_every_call_answered_once(messages)
    # the dangling calls are answered before the new user message, never after it
    new_user = next(i for i, m in enumerate(messages)
                    if isinstance(m, HumanMessage) and "Never mind" in str(m.content))
    for cid in ("w1", "b1"):
        (answer,) = answers_by_id(messages)[cid]
        assert messages.index(answer) < new_user
    assert ("send_email", {"to": "bob@example.com", "body": "hi"}) not in recorder.calls
    assert recorder.calls == [("get_time", {"city": "Paris"})]


# ---------------------------------------------------------------------------- composition
def test_the_guard_checks_before_human_review_per_call_mode(recorder: Recorder) -> None:
    hitl = HumanInTheLoopMiddleware(interrupt_on={"send_email": True},
                                    interrupt_mode="per_call")
    script = [ai_calls(("send_emial", {"to": "ops@example.com", "body": "hi"}, "typo"),
                       ("send_email", {"to": "ops@example.com", "body": "hi"}, "ok")),
              AIMessage("sent")]
    graph, _ = agent(script, recorder, hitl, GuardMiddleware(), checkpointer=InMemorySaver())
    first = run(graph, "Email ops@example.com hi", thread("review"))
    # the reviewer is asked about the valid call only; the fabricated one was refused first
    (interrupt,) = first["__interrupt__"]
    assert interrupt.value["tool_call_id"] == "ok"
    out = graph.invoke(Command(resume={interrupt.id: {"type": "approve"}}), thread("review"))
    assert recorder.calls == [("send_email", {"to": "ops@example.com", "body": "hi"})]
    assert_every_call_answered_once(out["messages"])


def test_the_guard_before_batched_human_review_with_the_when_predicate(
        recorder: Recorder) -> None:
    hitl = HumanInTheLoopMiddleware(interrupt_on={
        "send_email": InterruptOnConfig(allowed_decisions=["approve", "reject"],
                                        when=not_answered_by_guard),
        "send_emial": InterruptOnConfig(allowed_decisions=["approve", "reject"],
                                        when=not_answered_by_guard)})
    script = [ai_calls(("send_emial", {"to": "ops@example.com", "body": "hi"}, "typo"),
                       ("send_email", {"to": "ops@example.com", "body": "hi"}, "ok")),
              AIMessage("sent")]
    graph, _ = agent(script, recorder, hitl, GuardMiddleware(), checkpointer=InMemorySaver())
    first = run(graph, "Email ops@example.com hi", thread("batched"))
    (interrupt,) = first["__interrupt__"]
    assert [a["name"] for a in interrupt.value["action_requests"]] == ["send_email"]
    out = graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), thread("batched"))
    assert recorder.calls == [("send_email", {"to": "ops@example.com", "body": "hi"})]
    assert_every_call_answered_once(out["messages"])


def test_beside_tool_retry_tool_call_limit_and_model_call_limit(recorder: Recorder) -> None:
    script = [ai_calls(("get_weather", {"city": "Paris"}, "a"), ("nope", {}, "b")),
              ai_calls(("get_time", {"city": "Paris"}, "c")),
              ai_calls(("get_time", {"city": "Paris"}, "d")),
              AIMessage("done")]
    graph, model = agent(script, recorder, ToolRetryMiddleware(max_retries=1),
                         ToolCallLimitMiddleware(run_limit=2, exit_behavior="continue"),
                         ModelCallLimitMiddleware(run_limit=4, exit_behavior="end"),
                         GuardMiddleware())
    out = run(graph)
    # a, b count towards the run limit of 2: c and d are refused by the limit
    assert recorder.calls == [("get_weather", {"city": "Paris"})]
    answers = answers_by_id(out["messages"])
    assert answers["b"][0].artifact["toolguard"]["hallucination"] == "type"
    assert answers["c"][0].status == "error" and answers["d"][0].status == "error"
    assert model.position == 4
    assert_every_call_answered_once(out["messages"])


# ---------------------------------------------------------------------------- observability
def test_judge_calls_never_reach_the_messages_stream_and_verdicts_are_custom_events(
        recorder: Recorder) -> None:
    judge = ScriptedChatModel(script=[
        AIMessage('{"reason": "the user named no city", "label": "Untruthful"}')])
    script = [ai_calls(("get_weather", {"city": "Reykjavik"}, "w")), AIMessage("never")]
    model = ScriptedChatModel(script=script)
    graph = create_agent(model, recorder.tools(),
                         middleware=[GuardMiddleware(judge_model=judge)])
    streamed: list[str] = []
    events: list[dict[str, Any]] = []
    for mode, chunk in graph.stream({"messages": [HumanMessage("What's the weather?")]},
                                    stream_mode=["messages", "custom"]):
        if mode == "messages":
            message, _meta = chunk
            streamed.append(str(message.content))
        else:
            events.append(chunk)
    assert len(judge.calls) == 1  # the judge ran ...
    assert not any("Untruthful" in text for text in streamed)  # ... out of the user's stream
    assert {"toolguard": {"event": "verdict", "tool_call_id": "w", "tool": "get_weather",
                          "action": "ask_user", "hallucination": "content",
                          "reason": events[0]["toolguard"]["reason"]}} in events


def test_toolguard_hook_spans_record_no_conversation_payload(recorder: Recorder) -> None:
    """Each middleware's ``trace_policy`` drops the state from its hook spans (LangChain 1.5);
    the messages stay on the model-call span; ``None`` traces them again."""
    from langchain_core.tracers.run_collector import RunCollectorCallbackHandler

    def hook_inputs(*, traced: bool) -> dict[str, Any]:
        stack = [LoopGuardMiddleware(), GuardMiddleware()]
        if traced:
            for middleware in stack:
                middleware.trace_policy = None
        script = [ai_calls(("get_weather", {"city": "Paris"}, "w")), AIMessage("sunny")]
        graph, _ = agent(script, recorder, *stack)
        collector = RunCollectorCallbackHandler()
        graph.invoke({"messages": [HumanMessage("What's the weather in Paris?")]},
                     {"callbacks": [collector]})
        spans: dict[str, Any] = {}
        todo = list(collector.traced_runs)
        while todo:
            run_ = todo.pop()
            todo += run_.child_runs
            if run_.name.startswith(("GuardMiddleware.", "LoopGuardMiddleware.")):
                spans[run_.name] = run_.inputs
        return spans

    quiet, traced = hook_inputs(traced=False), hook_inputs(traced=True)
    assert {"GuardMiddleware.after_model", "LoopGuardMiddleware.after_model"} <= set(quiet)
    assert all(inputs == {} for inputs in quiet.values())
    assert "Paris" in str(traced["GuardMiddleware.after_model"])


# ---------------------------------------------------------------------------- precheck + kg
def test_precheck_middleware_abstains_without_calling_the_model(recorder: Recorder) -> None:
    graph, model = agent([AIMessage("never")], recorder, PrecheckMiddleware(),
                         GuardMiddleware())
    out = run(graph, "Buy 10 shares of ACME stock for me")
    assert model.position == 0 and recorder.calls == []
    assert out["messages"][-1].response_metadata["toolguard"] == "no_suitable_tool"
    assert out["toolguard"] == {"precheck_no_suitable_tool": 1}


def test_kg_middleware_reads_the_users_graph_from_the_agents_store(recorder: Recorder) -> None:
    store = InMemoryStore()
    KGStore(store).add_many("u1", [("Bob", "mother", "Alice"), ("Alice", "lives_in", "Lyon")])
    script = [ai_calls(("get_weather", {"city": "Lyon"}, "w")), AIMessage("Lyon: sunny.")]
    graph, model = agent(script, recorder, KGResolveMiddleware(), GuardMiddleware(),
                         store=store)
    out = graph.invoke({"messages": [HumanMessage("What's the weather where my mom lives?")]},
                       {"configurable": {"user_id": "u1", "kg_speaker": "Bob"}})
    assert "[Alice, lives_in, Lyon]" in str(model.calls[0][-1].content)
    assert recorder.calls == [("get_weather", {"city": "Lyon"})]  # grounded by the KG
    assert "Lyon" in out["kg_grounding"]


# ---------------------------------------------------------------------------- parity
PARITY_CASES = [
    [ai_calls(("get_weather", {"city": "Paris"}, "a"), ("get_wether", {}, "b"))],
    [ai_calls(("get_time", {"town": "Paris"}, "c"))],
    [ai_calls(("get_weather", {"city": "Paris"}, "d")),
     ai_calls(("get_weather", {"city": "Paris"}, "e"))],
    [ai_calls(("send_email", {"to": "eve@example.com", "body": "hi"}, "f"))],
    [ai_calls(("get_weather", {"city": "Paris"}, "g"), ("get_time", {"city": "Paris"}, "h"))],
]


@pytest.mark.parametrize("steps", PARITY_CASES)
def test_middleware_and_nodes_give_the_same_verdicts(recorder: Recorder,
                                                      steps: list[AIMessage]) -> None:
    outcomes = []
    for build in ("middleware", "nodes"):
        rec = Recorder()
        model = ScriptedChatModel(script=[*steps, AIMessage("done")])
        graph = (create_agent(model, rec.tools(), middleware=[GuardMiddleware(ask_user="end")])
                 if build == "middleware" else
                 create_guarded_graph(model, rec.tools(), ask_user="end", controller=None))
        out = graph.invoke({"messages": [HumanMessage(ASK)]})
        verdicts = {m.tool_call_id: (m.artifact or {}).get("toolguard", {}).get("action")
                    for m in out["messages"] if isinstance(m, ToolMessage)}
        outcomes.append((verdicts, sorted(rec.calls, key=repr)))
    assert outcomes[0] == outcomes[1]
    # and both agree with the engine on the first step
    first = Guard(recorder.tools()).check([HumanMessage(ASK), steps[0]])
    refused = {v.tool_call_id: v.action for v in first if v.action != "allow"}
    assert {k: v for k, v in outcomes[0][0].items() if k in refused} == refused
