"""Prebuilt graphs: create_guarded_agent (create_agent + middleware), create_guarded_graph (the
hand-built StateGraph of toolguard's nodes) and create_plain_agent.

Behaviour tests run on both guarded surfaces (``surface`` fixture): they run the same engine
and step planner, so a user gets the same answers whichever they pick.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import (
    BfclEpisode,
    Recorder,
    ai_calls,
    answers_by_id,
    assert_every_call_answered_once,
)
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from toolguard import Guard, ToolSpec
from toolguard.testing import ScriptedChatModel
from toolguard_graphs import create_guarded_agent, create_guarded_graph, create_plain_agent

SURFACES = {"middleware": create_guarded_agent, "nodes": create_guarded_graph}


@pytest.fixture(params=list(SURFACES))
def surface(request: pytest.FixtureRequest) -> Any:
    """``create_guarded_agent`` (middleware) or ``create_guarded_graph`` (nodes)."""
    return SURFACES[request.param]

REQUEST = "What's the weather and the local time in Paris? Then email ops@example.com the report."


def _main_script() -> list[AIMessage]:
    """Step 1: 2 allowed + 3 hallucinated calls; step 2: an identical repeat; then an answer."""
    return [
        ai_calls(
            ("get_weather", {"city": "Paris"}, "w1"),
            ("get_time", {"city": "Paris"}, "t1"),
            ("get_wether", {"city": "Paris"}, "typo"),  # type
            ("send_email", {"to": "ops@example.com"}, "fmt"),  # format: body missing
            ("get_time", {"city": "Reykjavik"}, "cont"),  # content (ask_user)
        ),
        ai_calls(("get_weather", {"city": "Paris"}, "w2")),  # timing
        AIMessage("Paris: sunny, 21 C, 12:00."),
    ]


EXPECTED_COUNTERS = {"checked": 6, "allowed": 2, "blocked": 3, "asked_user": 1,
                     "change_tools": 0, "type": 1, "timing": 1, "format": 1, "content": 1,
                     "provenance": 0, "intent": 0}


def _check_main_run(out: dict[str, Any], recorder: Recorder) -> None:
    # only the two allowed calls ran, once each
    assert recorder.executed() == [("get_time", {"city": "Paris"}),
                                   ("get_weather", {"city": "Paris"})]
    answers = answers_by_id(out["messages"])
    for blocked in ("typo", "fmt", "w2"):
        (msg,) = answers[blocked]
        assert msg.status == "error"
        assert msg.artifact["toolguard"]["action"] == "block"
    assert answers["w2"][0].artifact["toolguard"]["hallucination"] == "timing"
    assert "sunny, 21 C in Paris" in answers["w2"][0].content  # the replayed earlier result
    assert answers["w1"][0].status == "success"
    assert answers["t1"][0].content == "12:00 in Paris"
    assert_every_call_answered_once(out["messages"])
    assert out["toolguard"] == EXPECTED_COUNTERS
    assert out["messages"][-1].content == "Paris: sunny, 21 C, 12:00."


def test_guarded_agent_blocks_hallucinated_calls(recorder: Recorder) -> None:
    # without a checkpointer the ask_user call would end the turn; "interrupt" is not
    # possible either, so the content detector is left out here and tested below
    model = ScriptedChatModel(script=_main_script())
    graph = create_guarded_agent(model, recorder.tools(), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "main"}}
    first = graph.invoke({"messages": [HumanMessage(REQUEST)]}, config)
    (interrupt,) = first["__interrupt__"]
    assert interrupt.value["questions"][0]["tool_call_id"] == "cont"
    assert recorder.calls == []  # nothing of the interrupted step ran yet
    out = graph.invoke(Command(resume="Paris"), config)
    _check_main_run(out, recorder)
    assert model.position == 3  # the model saw every step


async def test_guarded_agent_blocks_hallucinated_calls_async(recorder: Recorder) -> None:
    model = ScriptedChatModel(script=_main_script())
    graph = create_guarded_agent(model, recorder.tools(), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "main"}}
    first = await graph.ainvoke({"messages": [HumanMessage(REQUEST)]}, config)
    assert first["__interrupt__"][0].value["questions"][0]["tool_call_id"] == "cont"
    assert recorder.calls == []
    out = await graph.ainvoke(Command(resume="Paris"), config)
    _check_main_run(out, recorder)


def test_allowed_parallel_calls_all_execute(recorder: Recorder) -> None:
    model = ScriptedChatModel(script=[
        ai_calls(("get_weather", {"city": "Paris"}, "a"), ("get_weather", {"city": "Oslo"}, "b"),
                 ("get_time", {"city": "Oslo"}, "c")),
        AIMessage("done"),
    ])
    out = create_guarded_agent(model, recorder.tools()).invoke(
        {"messages": [HumanMessage("Weather in Paris and Oslo, and the time in Oslo")]})
    assert recorder.executed() == [("get_time", {"city": "Oslo"}),
                                   ("get_weather", {"city": "Oslo"}),
                                   ("get_weather", {"city": "Paris"})]
    answers = answers_by_id(out["messages"])
    assert {k: v[0].status for k, v in answers.items()} == {"a": "success", "b": "success",
                                                            "c": "success"}
    assert out["toolguard"]["checked"] == 3 and out["toolguard"]["allowed"] == 3
    assert_every_call_answered_once(out["messages"])


def assert_ask_payload(value: dict[str, Any], questions: list[dict[str, Any]]) -> None:
    """The HITL-shaped toolguard.ask_user payload (toolguard.protocol) for these questions."""
    assert value["type"] == "toolguard.ask_user"
    assert [{k: q[k] for k in ("tool_call_id", "tool_name", "question", "missing")}
            for q in value["questions"]] == questions
    assert [a["name"] for a in value["action_requests"]] == [q["tool_name"] for q in questions]
    assert [a["description"] for a in value["action_requests"]] == [
        q["question"] for q in questions]
    assert [c["allowed_decisions"] for c in value["review_configs"]] == [
        ["respond", "edit", "approve", "reject"]] * len(questions)


def test_ask_user_interrupt_payload_resume_and_counters_survive(
        recorder: Recorder, surface: Any) -> None:
    model = ScriptedChatModel(script=[
        ai_calls(("get_time", {"city": "Paris"}, "t")),
        ai_calls(("get_weather", {"city": "Reykjavik"}, "w"),
                 ("get_time", {"city": "Paris"}, "again")),
        ai_calls(("get_weather", {"city": "Lyon"}, "w2")),
        AIMessage("Lyon: sunny."),
    ])
    graph = surface(model, recorder.tools(), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "ask"}}
    first = graph.invoke({"messages": [HumanMessage("Time in Paris, then the weather please")]},
                         config)
    (interrupt,) = first["__interrupt__"]
    assert_ask_payload(interrupt.value, [{
        "tool_call_id": "w", "tool_name": "get_weather",
        "question": "Which city should I use for get_weather?", "missing": ["city"]}])
    assert interrupt.value["action_requests"][0]["args"] == {"city": "Reykjavik"}
    snapshot = graph.get_state(config)
    # the verdicts wait in graph state (checkpointed), not in process memory
    if surface is create_guarded_agent:
        assert snapshot.next == ("GuardMiddleware.after_model",)
        assert snapshot.values["toolguard_verdicts"]["verdicts"][0]["tool_call_id"] == "w"
    else:
        assert snapshot.next == ("ask_user",)
        assert snapshot.values["toolguard_pending"]["verdicts"][0]["tool_call_id"] == "w"
    assert recorder.calls == [("get_time", {"city": "Paris"})]

    out = graph.invoke(Command(resume="Lyon"), config)
    answer = answers_by_id(out["messages"])["w"][0]
    assert "The user answered: Lyon" in answer.content
    assert answer.artifact["toolguard"]["answer"] == "respond"  # toolguard's, not the tool's
    assert recorder.calls == [("get_time", {"city": "Paris"}), ("get_weather", {"city": "Lyon"})]
    assert out["messages"][-1].content == "Lyon: sunny."
    assert_every_call_answered_once(out["messages"])
    final = graph.get_state(config).values["toolguard"]
    # 1 + 2 + 1 calls, each counted once although a node ran twice for the interrupt
    assert final["checked"] == 4
    assert final["asked_user"] == 1 and final["content"] == 1
    assert final["blocked"] == 1 and final["timing"] == 1
    assert final == out["toolguard"]


def test_resume_with_answers_per_call(recorder: Recorder) -> None:
    model = ScriptedChatModel(script=[
        ai_calls(("get_weather", {"city": "Reykjavik"}, "w"), ("get_time", {"city": "Oslo"}, "t")),
        AIMessage("ok"),
    ])
    graph = create_guarded_agent(model, recorder.tools(), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "multi"}}
    first = graph.invoke({"messages": [HumanMessage("weather and time please")]}, config)
    questions = first["__interrupt__"][0].value["questions"]
    assert [q["tool_call_id"] for q in questions] == ["w", "t"]
    out = graph.invoke(Command(resume={"w": "Bergen", "t": "Tromso"}), config)
    answers = answers_by_id(out["messages"])
    assert "The user answered: Bergen" in answers["w"][0].content
    assert "The user answered: Tromso" in answers["t"][0].content
    assert recorder.calls == []


def test_ask_user_without_checkpointer_ends_the_turn_with_the_question(
    recorder: Recorder,
) -> None:
    model = ScriptedChatModel(script=[
        ai_calls(("get_time", {"city": "Paris"}, "ok"), ("get_weather", {"city": "Reykjavik"}, "w"),
                 ("nope", {}, "bad")),
        AIMessage("never reached"),
    ])
    out = create_guarded_agent(model, recorder.tools()).invoke(
        {"messages": [HumanMessage("Time in Paris and the weather")]})
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert last.content == "Which city should I use for get_weather?"
    answers = answers_by_id(out["messages"])
    assert answers["ok"][0].content.startswith("Not executed")
    assert answers["ok"][0].status == "error"
    assert "not a valid tool" in answers["bad"][0].content
    assert answers["w"][0].artifact["toolguard"]["action"] == "ask_user"
    assert recorder.calls == []  # the allowed call of that message waits for the answer
    assert model.position == 1
    assert_every_call_answered_once(out["messages"])
    assert out["toolguard"]["asked_user"] == 1 and out["toolguard"]["allowed"] == 1

    # the user answers in the next turn and the conversation goes on
    model.script.append(ai_calls(("get_weather", {"city": "Oslo"}, "w2")))
    model.script.append(AIMessage("Oslo: sunny."))
    model.script.pop(1)
    out = create_guarded_agent(model, recorder.tools()).invoke(
        {"messages": [*out["messages"], HumanMessage("Oslo")]})
    assert recorder.calls == [("get_weather", {"city": "Oslo"})]
    assert_every_call_answered_once(out["messages"])


def test_ask_user_interrupt_mode_needs_a_checkpointer_end_mode_never_interrupts(
    recorder: Recorder,
) -> None:
    script = [ai_calls(("get_weather", {"city": "Reykjavik"}, "w")), AIMessage("x")]
    graph = create_guarded_agent(ScriptedChatModel(script=list(script)), recorder.tools(),
                                 checkpointer=InMemorySaver(), ask_user="end")
    out = graph.invoke({"messages": [HumanMessage("weather?")]},
                       {"configurable": {"thread_id": "end"}})
    assert "__interrupt__" not in out
    assert out["messages"][-1].content == "Which city should I use for get_weather?"


async def test_astream_yields_node_updates(recorder: Recorder, surface: Any) -> None:
    model = ScriptedChatModel(script=[
        ai_calls(("get_weather", {"city": "Paris"}, "a"), ("nope", {}, "b")),
        AIMessage("done"),
    ])
    graph = surface(model, recorder.tools())
    order: list[str] = []
    async for chunk in graph.astream({"messages": [HumanMessage("Weather in Paris")]},
                                     stream_mode="updates"):
        order += [node for node, update in chunk.items() if update]
    guard = "GuardMiddleware.after_model" if surface is create_guarded_agent else "guard"
    main = [n for n in order if n in ("model", guard, "tools")]
    assert main == ["model", guard, "tools", "model"]
    assert recorder.calls == [("get_weather", {"city": "Paris"})]


def test_stream_values_end_with_the_final_state(recorder: Recorder) -> None:
    model = ScriptedChatModel(script=[ai_calls(("get_weather", {"city": "Paris"}, "a")),
                                      AIMessage("done")])
    states = list(create_guarded_agent(model, recorder.tools()).stream(
        {"messages": [HumanMessage("Weather in Paris")]}, stream_mode="values"))
    assert states[-1]["messages"][-1].content == "done"
    assert states[-1]["toolguard"]["allowed"] == 1


def test_graph_shape() -> None:
    model = ScriptedChatModel(script=[])
    guarded = create_guarded_agent(model, Recorder().tools()).get_graph()
    nodes = set(guarded.nodes)
    assert {"model", "tools", "GuardMiddleware.after_model",
            "RetryControllerMiddleware.before_model"} <= nodes
    edges = {(e.source, e.target) for e in guarded.edges}
    # the guard's after_model runs first; the loop guard's (listed before it) then routes
    assert ("GuardMiddleware.after_model", "LoopGuardMiddleware.after_model") in edges
    assert ("LoopGuardMiddleware.after_model", "tools") in edges  # allowed calls run
    assert any(src == "GuardMiddleware.after_model" and dst.endswith(("__end__", "after_agent"))
               for src, dst in edges)  # a question ends the turn
    hand_built = create_guarded_graph(model, Recorder().tools()).get_graph()
    assert set(hand_built.nodes) == {"__start__", "repair", "model", "guard", "ask_user",
                                     "tools", "retry_gate", "__end__"}
    assert {(e.source, e.target, e.conditional) for e in hand_built.edges} == {
        ("__start__", "repair", False),
        ("repair", "model", False),
        ("model", "guard", True),
        ("model", "__end__", True),
        ("guard", "ask_user", True),
        ("guard", "tools", True),
        ("guard", "model", True),
        ("guard", "__end__", True),
        ("ask_user", "tools", True),
        ("ask_user", "model", True),
        ("ask_user", "__end__", True),
        ("tools", "retry_gate", False),
        ("retry_gate", "model", True),
        ("retry_gate", "__end__", True),
    }
    plain = create_plain_agent(model, Recorder().tools()).get_graph()
    assert {"model", "tools"} <= set(plain.nodes)
    assert not any(n.startswith(("Guard", "Precheck")) for n in plain.nodes)


def test_plain_agent_executes_the_hallucinated_call(recorder: Recorder) -> None:
    script = [ai_calls(("get_weather", {"city": "Reykjavik"}, "w"),
                       ("get_weather", {"city": "Paris"}, "p")),
              ai_calls(("get_weather", {"city": "Paris"}, "p2")),
              AIMessage("done")]
    request = {"messages": [HumanMessage("Weather in Paris?")]}
    create_plain_agent(ScriptedChatModel(script=list(script)), recorder.tools()).invoke(request)
    # the two calls of the first step run in parallel threads: any order
    assert sorted(recorder.calls[:2], key=str) == [("get_weather", {"city": "Paris"}),
                                                  ("get_weather", {"city": "Reykjavik"})]
    assert recorder.calls[2:] == [("get_weather", {"city": "Paris"})]
    recorder.calls.clear()
    graph = create_guarded_agent(ScriptedChatModel(script=list(script)), recorder.tools(),
                                 ask_user="end")
    out = graph.invoke(request)
    assert recorder.calls == []  # the question ends the turn before anything runs
    assert out["messages"][-1].content == "Which city should I use for get_weather?"


def test_system_prompt_and_guard_options(recorder: Recorder) -> None:
    model = ScriptedChatModel(script=[ai_calls(("get_weather", {"city": "Reykjavik"}, "w")),
                                      AIMessage("done")])
    graph = create_guarded_agent(model, recorder.tools(), system_prompt="Be brief.",
                                 detectors=["type", "format"])
    out = graph.invoke({"messages": [HumanMessage("Weather?")]})
    assert isinstance(model.calls[0][0], SystemMessage)
    assert model.calls[0][0].content == "Be brief."
    assert recorder.calls == [("get_weather", {"city": "Reykjavik"})]  # no content detector
    assert out["toolguard"]["allowed"] == 1
    with pytest.raises(ValueError, match="either guard= or Guard options"):
        create_guarded_agent(model, recorder.tools(), guard=Guard(recorder.tools()),
                             detectors=["type"])


def test_guarded_agent_on_a_real_bfcl_environment(episode: BfclEpisode) -> None:
    """BFCL's file system as LangChain tools: the gold turn runs, a duplicated mkdir does not."""
    tools = [
        StructuredTool.from_function(
            func=lambda _name=name, **kwargs: episode.env.execute(_name, kwargs),
            name=name,
            description=doc["description"],
            args_schema=ToolSpec.from_bfcl(doc).parameters,
        )
        for name, doc in episode.docs.items()
        if name in {"cd", "mkdir", "mv", "ls"}
    ]
    gold = episode.gold[0]  # cd(document), mkdir(temp), mv(final_report.pdf -> temp)
    script = [ai_calls((n, a, f"g{i}")) for i, (n, a) in enumerate(gold)]
    script.insert(2, ai_calls(("mkdir", {"dir_name": "temp"}, "dup")))  # duplicated write
    script.append(AIMessage("Moved."))
    out = create_guarded_agent(ScriptedChatModel(script=script), tools).invoke(
        {"messages": [HumanMessage(episode.turns[0])]})
    assert episode.env.log == [(n, a) for n, a in gold]  # the duplicate never reached the env
    answers = answers_by_id(out["messages"])
    assert answers["dup"][0].artifact["toolguard"]["hallucination"] == "timing"
    assert "temp/final_report.pdf" in answers["g2"][0].content
    fs = episode.env.instances["GorillaFileSystem"]
    assert "temp" in fs._current_dir.contents
    assert_every_call_answered_once(out["messages"])


def test_blocked_call_without_an_id_never_executes(recorder: Recorder) -> None:
    model = ScriptedChatModel(script=[
        ai_calls(("get_weather", {"city": "Paris"}, "a")),
        AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"},
                                   "id": None}]),
        AIMessage("done"),
    ])
    try:
        create_guarded_agent(model, recorder.tools()).invoke(
            {"messages": [HumanMessage("Weather in Paris?")]})
    finally:
        assert recorder.calls == [("get_weather", {"city": "Paris"})]


def test_interrupted_verdict_is_not_re_judged_on_resume(recorder: Recorder) -> None:
    judge = ScriptedChatModel(script=[AIMessage('{"reason": "guess", "label": "Untruthful"}'),
                                      AIMessage('{"reason": "fine", "label": "Truthful"}')])
    model = ScriptedChatModel(script=[ai_calls(("get_weather", {"city": "Reykjavik"}, "w")),
                                      AIMessage("done")])
    graph = create_guarded_agent(model, recorder.tools(), checkpointer=InMemorySaver(),
                                 judge_model=judge)
    config = {"configurable": {"thread_id": "judge"}}
    assert graph.invoke({"messages": [HumanMessage("What's the weather?")]},
                        config)["__interrupt__"]
    out = graph.invoke(Command(resume="Oslo"), config)
    assert recorder.calls == []  # the guessed city must not run after the user answered
    assert out["toolguard"]["asked_user"] == 1
    assert len(judge.calls) == 1


def test_interrupted_verdict_survives_a_restart_before_resume(recorder: Recorder) -> None:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "restart"}}

    def worker(judge_answer: str) -> Any:
        judge = ScriptedChatModel(script=[AIMessage(
            f'{{"reason": "r", "label": "{judge_answer}"}}')])
        model = ScriptedChatModel(script=[ai_calls(("get_weather", {"city": "Reykjavik"}, "w")),
                                          AIMessage("done")])
        return create_guarded_agent(model, recorder.tools(), checkpointer=saver,
                                    judge_model=judge), model

    before, _ = worker("Untruthful")
    assert before.invoke({"messages": [HumanMessage("What's the weather?")]},
                         config)["__interrupt__"]
    after, model = worker("Truthful")  # a fresh process: same checkpoints, new objects
    model.position = 1  # its model continues after the step already in the checkpoint
    out = after.invoke(Command(resume="Oslo"), config)
    assert recorder.calls == []
    assert "The user answered: Oslo" in answers_by_id(out["messages"])["w"][0].content


def test_guard_tool_messages_are_valid_history_for_the_next_model_call(
    recorder: Recorder,
) -> None:
    model = ScriptedChatModel(script=[ai_calls(("nope", {}, "x")), AIMessage("sorry")])
    create_guarded_agent(model, recorder.tools()).invoke({"messages": [HumanMessage("hi")]})
    second_prompt = model.calls[1]
    assert isinstance(second_prompt[-1], ToolMessage)
    assert second_prompt[-1].tool_call_id == "x"
    assert second_prompt[-1].name == "nope"
