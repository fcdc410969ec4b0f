"""The pre-check inside a real compiled guarded graph, on real RelyToolBench and BFCL cases.

Tools are real LangChain tools built from the cases' docs that record every execution; the
agent model is scripted to call a tool at once, so a tool only stays unused if the pre-check
stopped the turn before the model acted.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import RTB_DIR, Recorder, ai_calls, assert_every_call_answered_once, require_bfcl
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from toolguard.nodes import PrecheckAskNode, PrecheckNode, PrecheckState
from toolguard.precheck import MARK_KEY, Precheck
from toolguard.testing import ScriptedChatModel
from toolguard_evals.abstain import Case, load_multi_turn_cases, load_relytoolbench
from toolguard_graphs import create_guarded_agent, create_guarded_graph

SURFACES = {"middleware": create_guarded_agent, "nodes": create_guarded_graph}


@pytest.fixture(params=list(SURFACES))
def surface(request: pytest.FixtureRequest) -> Any:
    """``create_guarded_agent`` (PrecheckMiddleware) or ``create_guarded_graph`` (nodes)."""
    return SURFACES[request.param]

ORIGINAL = "G1_instruction:588"
MISSING = "G1_instruction_missing_all_arguments:2399"
UNMATCHED = "G1_instruction_with_unmatched_tools:588"


class ToolRecorder:
    """Real tools over a case's docs; every execution is recorded."""

    def __init__(self, case: Case) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.tools: list[BaseTool] = [self._tool(s.name, s.description, s.parameters)
                                      for s in case.tools]

    def _tool(self, name: str, description: str, schema: dict[str, Any]) -> BaseTool:
        def run(**kwargs: Any) -> str:
            self.calls.append((name, kwargs))
            return f'{{"result": "ok from {name}"}}'

        return StructuredTool.from_function(func=run, name=name,
                                            description=description or name,
                                            args_schema=schema)


def _cases() -> dict[str, Case]:
    if not (RTB_DIR / "G1_instruction.json").is_file():
        pytest.skip(f"RelyToolBench data missing at {RTB_DIR}")
    return {c.id: c for c in load_relytoolbench(limit=6)}


def _first_call(case: Case, call_id: str = "c1") -> AIMessage:
    """The call a model would make at once: the case's first tool, values guessed."""
    spec = case.tools[0]
    return ai_calls((spec.name, {p: "guess" for p in spec.required}, call_id))


MESSI = ai_calls(("transfermarkt_search_for_theclique", {"name": "Lionel Messi"}, "m1"))
# the guard's lexical type judge would block this helper step (search before details:
# "search" shares no word with the request), which is not what these tests are about
NO_TYPE = {"detectors": ["format", "timing", "content"]}
GAME = ai_calls(("get_a_specific_game_for_free_nba", {"is_id": "12345"}, "g1"))


def test_no_suitable_tool_never_reaches_a_tool(surface: Any) -> None:
    case = _cases()[UNMATCHED]
    rec = ToolRecorder(case)
    model = ScriptedChatModel(script=[_first_call(case), AIMessage("done")])
    graph = surface(model, rec.tools, precheck="deterministic")
    out = graph.invoke({"messages": case.messages})
    assert rec.calls == []
    assert model.position == 0  # the model never acted
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert last.response_metadata[MARK_KEY] == "no_suitable_tool"
    assert "None of my available tools" in last.content
    assert out["toolguard"] == {"precheck_no_suitable_tool": 1}


def test_ask_user_interrupts_and_the_answer_reaches_the_model(surface: Any) -> None:
    case = _cases()[MISSING]
    rec = ToolRecorder(case)
    model = ScriptedChatModel(script=[GAME, AIMessage("done")])
    graph = surface(model, rec.tools, precheck="deterministic", checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "ask"}}
    first = graph.invoke({"messages": case.messages}, config)
    (intr,) = first["__interrupt__"]
    question = intr.value["questions"][0]
    assert intr.value["type"] == "toolguard.ask_user"
    assert question["tool_call_id"] is None and question["missing"]
    assert question["tool_name"] in {t.name for t in case.tools}
    assert rec.calls == [] and model.position == 0
    assert graph.get_state(config).next == (
        ("PrecheckMiddleware.after_model",) if surface is create_guarded_agent
        else ("precheck_ask",))
    assert graph.get_state(config).values["toolguard_precheck"]["decision"] == "ask_user"

    out = graph.invoke(Command(resume="The game ID is 12345."), config)
    assert model.position == 2  # the model acted after the answer
    assert rec.calls == [("get_a_specific_game_for_free_nba", {"is_id": "12345"})]
    asked, answered = out["messages"][1], out["messages"][2]
    assert asked.response_metadata[MARK_KEY] == "ask_user"
    assert isinstance(answered, HumanMessage)
    assert model.calls[0][-1].content == "The game ID is 12345."
    assert graph.get_state(config).values["toolguard_precheck"] is None
    assert out["toolguard"]["precheck_ask_user"] == 1
    assert_every_call_answered_once(out["messages"])


def test_ask_user_without_checkpointer_ends_the_turn_with_the_question(surface: Any) -> None:
    case = _cases()[MISSING]
    rec = ToolRecorder(case)
    model = ScriptedChatModel(script=[GAME, AIMessage("done")])
    graph = surface(model, rec.tools, precheck="deterministic")
    out = graph.invoke({"messages": case.messages})
    assert rec.calls == [] and model.position == 0
    last = out["messages"][-1]
    assert last.response_metadata[MARK_KEY] == "ask_user"
    assert last.content.startswith("Before I go on, I need some information")
    # the user answers in the next turn: the request and its answer are read together
    out = graph.invoke({"messages": [*out["messages"], HumanMessage("Game 12345.")]})
    assert model.position == 2
    assert rec.calls == [("get_a_specific_game_for_free_nba", {"is_id": "12345"})]


def test_proceed_reaches_the_tool() -> None:
    case = _cases()[ORIGINAL]
    rec = ToolRecorder(case)
    model = ScriptedChatModel(script=[MESSI, AIMessage("done")])
    out = create_guarded_agent(model, rec.tools, precheck="deterministic", **NO_TYPE).invoke(
        {"messages": case.messages})
    assert model.position == 2
    assert rec.calls == [("transfermarkt_search_for_theclique", {"name": "Lionel Messi"})]
    assert out["toolguard"]["precheck_proceed"] == 1
    assert out["messages"][-1].content == "done"


async def test_async_graph_same_decisions() -> None:
    cases = _cases()
    for case_id, ran in ((UNMATCHED, 0), (ORIGINAL, 1)):
        case = cases[case_id]
        rec = ToolRecorder(case)
        model = ScriptedChatModel(script=[MESSI, AIMessage("done")])
        graph = create_guarded_agent(model, rec.tools, precheck=Precheck(case.tools),
                                     **NO_TYPE)
        await graph.ainvoke({"messages": case.messages})
        assert len(rec.calls) == ran


def test_llm_precheck_in_the_graph_with_retry_and_fallback() -> None:
    case = _cases()[ORIGINAL]
    rec = ToolRecorder(case)
    judge = ScriptedChatModel(script=[
        AIMessage("I think it is fine."),  # malformed: no JSON
        AIMessage('{"decision": "no_suitable_tool", "missing": []}'),
    ])
    model = ScriptedChatModel(script=[_first_call(case), AIMessage("done")])
    graph = create_guarded_agent(model, rec.tools, precheck="zero_shot", precheck_model=judge)
    out = graph.invoke({"messages": case.messages})
    assert len(judge.calls) == 2  # one retry
    assert "no JSON object" in judge.calls[1][-1].content
    assert rec.calls == [] and model.position == 0
    assert out["messages"][-1].response_metadata["toolguard_precheck"]["attempts"] == 2


def test_precheck_decides_once_per_request_not_after_tool_results(surface: Any) -> None:
    case = _cases()[ORIGINAL]
    rec = ToolRecorder(case)
    model = ScriptedChatModel(script=[MESSI, AIMessage("done")])
    graph = surface(model, rec.tools, precheck="deterministic", **NO_TYPE)
    out = graph.invoke({"messages": case.messages})
    assert len(rec.calls) == 1 and model.position == 2  # two model calls ...
    assert out["toolguard"]["precheck_proceed"] == 1  # ... one decision


def test_graph_shape_with_precheck_and_bad_options() -> None:
    case = _cases()[ORIGINAL]
    rec = ToolRecorder(case)
    graph = create_guarded_graph(ScriptedChatModel(script=[]), rec.tools,
                                 precheck="deterministic").get_graph()
    edges = {(e.source, e.target) for e in graph.edges}
    assert {("repair", "precheck"), ("precheck", "model"), ("precheck", "precheck_ask"),
            ("precheck", "__end__"), ("precheck_ask", "model")} <= edges
    assert ("repair", "model") not in edges
    agent = create_guarded_agent(ScriptedChatModel(script=[]), rec.tools,
                                 precheck="deterministic").get_graph()
    assert "PrecheckMiddleware.after_model" in agent.nodes
    with pytest.raises(ValueError, match="unknown pre-check mode"):
        create_guarded_agent(ScriptedChatModel(script=[]), rec.tools, precheck="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ask_user must be"):
        PrecheckNode(Precheck(case.tools), ask_user="never")  # type: ignore[arg-type]


def test_nodes_in_a_hand_built_graph_on_a_bfcl_miss_func_turn() -> None:
    """The documented wiring, on the BFCL turn whose tool is held out (gold: no call)."""
    require_bfcl()
    # a held-out-tool turn the engine abstains on (the wiring is what is tested here)
    case = next(c for c in load_multi_turn_cases("multi_turn_miss_func", limit=10)
                if c.subset == "miss_func"
                and Precheck(c.tools).decide(c.messages).decision == "no_suitable_tool")
    acted: list[str] = []

    def model(state: Any) -> dict[str, Any]:
        acted.append("model")
        return {"messages": [AIMessage("acting")]}

    pre = PrecheckNode(Precheck(case.tools), counters_key=None)
    builder = StateGraph(PrecheckState)
    builder.add_node("precheck", pre)
    builder.add_node("precheck_ask", PrecheckAskNode())
    builder.add_node("model", model)
    builder.add_edge(START, "precheck")
    builder.add_conditional_edges("precheck", pre.route, ["model", "precheck_ask", END])
    builder.add_edge("precheck_ask", "model")
    builder.add_edge("model", END)
    out = builder.compile().invoke({"messages": case.messages})
    assert acted == []
    assert out["messages"][-1].response_metadata[MARK_KEY] == "no_suitable_tool"
    assert case.expected == "no_suitable_tool"  # BFCL's gold: no call at this turn


def test_example_script_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import runpy
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "precheck_agent.py"
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "no tool fits   answer: None of my available tools" in out
    assert ("value missing  asks: Before I go on, I need some information to use "
            "get_weather: city") in out
    assert "tool executions: ['Paris', 'Paris']" in out  # the abstained request ran nothing


def test_answer_to_a_guard_question_is_read_with_its_request(
        recorder: Recorder, surface: Any) -> None:
    """Guard asks (content), the user answers next turn: the pre-check reads both."""
    model = ScriptedChatModel(script=[
        ai_calls(("get_weather", {"city": "Reykjavik"}, "w")),  # a city nobody named
        ai_calls(("get_weather", {"city": "Oslo"}, "w2")),
        AIMessage("Oslo: sunny."),
    ])
    graph = surface(model, recorder.tools(), precheck="deterministic")
    out = graph.invoke({"messages": [HumanMessage("What's the weather like right now?")]})
    assert out["messages"][-1].content == "Which city should I use for get_weather?"
    assert recorder.calls == []
    out = graph.invoke({"messages": [*out["messages"], HumanMessage("Oslo")]})
    assert out["toolguard"]["precheck_proceed"] == 1  # "Oslo" alone would fit no tool
    assert recorder.calls == [("get_weather", {"city": "Oslo"})]
    assert out["messages"][-1].content == "Oslo: sunny."
