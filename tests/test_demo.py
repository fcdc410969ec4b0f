"""The agent demo harness (evals/demo/) on real BFCL v4 multi-turn episodes.

Scripted models replay BFCL's gold calls (turn by turn, one call per step, then a text
answer) in BFCL's own environments; perturbed scripts add a fabricated tool, an identical
repeat of a write, a renamed argument and an invented value.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_every_call_answered_once, require_bfcl
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool

from toolguard.testing import ScriptedChatModel
from toolguard_graphs import create_plain_agent

demo = pytest.importorskip("toolguard_evals.demo")
bfcl = pytest.importorskip("toolguard_evals.bfcl")

BASE = "multi_turn_base_122"  # TradingBot: place_order, get_order_details, cancel, logout
MISS_FUNC = "multi_turn_miss_func_142"  # add_to_watchlist held out until turn 1
SUMMARY_KEYS = {"calls_proposed", "hallucinated_executed", "blocked", "asked_user", "retries",
                "skips", "finishes", "state_match", "episodes"}
TRACE_KEYS = {"episode", "category", "turn", "mode", "tool_call", "action", "hallucination",
              "reason", "answered_by", "executed", "oracle", "result"}


@pytest.fixture(scope="module")
def base() -> Any:
    require_bfcl()
    (episode,) = demo.episodes_by_id([BASE])
    return episode


@pytest.fixture(scope="module")
def miss_func() -> Any:
    require_bfcl()
    (episode,) = demo.episodes_by_id([MISS_FUNC])
    return episode


def call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id,
                                      "type": "tool_call"}])


def scripted(script: Callable[[Any], list[AIMessage]]) -> Callable[[Any], BaseChatModel]:
    """A model factory: a fresh scripted model per episode and mode."""
    return lambda episode: ScriptedChatModel(script=script(episode))


def hallucinating_script(episode: Any) -> list[AIMessage]:
    """Gold calls, plus in turn 0 a repeated write (timing), a made-up tool (type) and a
    renamed argument (format), and in the last turn a gold tool with an invented order id
    (content: arguments of no gold call)."""
    gold = demo.gold_script(episode)
    order = gold[0]  # place_order(order_type='Buy', symbol='AAPL', price=150, amount=100)
    args = dict(order.tool_calls[0]["args"])
    renamed = {k: v for k, v in args.items() if k != "amount"} | {"qty": args["amount"]}
    turn0 = [order,
             call("place_order", args, "repeat"),
             call("get_live_quote", {"symbol": "AAPL"}, "fabricated"),
             call("place_order", renamed, "renamed"),
             gold[1]]
    last = [gold[-2], call("get_order_details", {"order_id": 99999}, "invented"), gold[-1]]
    return [*turn0, *gold[2:-2], *last]


# ---------------------------------------------------------------------------- selection
def test_select_episodes_is_a_deterministic_small_mix() -> None:
    require_bfcl()
    picked = demo.select_episodes(4, seed=0)
    assert [e.id for e in picked] == [e.id for e in demo.select_episodes(4, seed=0)]
    assert [e.category for e in picked] == ["multi_turn_base", "multi_turn_base",
                                            "multi_turn_miss_param", "multi_turn_miss_func"]
    assert all(len(e.involved_classes) == 1 and demo.doc_chars(e) <= 14_000 for e in picked)
    scenarios = [e.id.rsplit("_", 1)[1] for e in picked]
    assert len(set(scenarios)) == 4
    assert [e.id for e in demo.select_episodes(4, seed=1)] != [e.id for e in picked]
    with pytest.raises(ValueError, match="n must be"):
        demo.select_episodes(0)


def test_write_methods_cover_every_state_change_of_the_gold_replays() -> None:
    require_bfcl()
    for episode in bfcl.load_multi_turn("multi_turn_base"):
        env = bfcl.BFCLEnvironment.for_episode(episode)
        for source in (c for turn in episode.gold for c in turn):
            before = env.state()
            result = env.execute(source)
            if env.state() != before:
                owner = env.methods[result.name]
                assert demo.method_effects(owner, result.name) == "write", source
    assert demo.method_effects("MathAPI", "add") == "read"
    assert demo.method_effects("WebSearchAPI", "fetch_url_content") == "unknown"


# ---------------------------------------------------------------------------- tools
def test_tools_execute_on_the_live_environment_and_record(base: Any) -> None:
    env = bfcl.BFCLEnvironment.for_episode(base)
    tools = demo.EpisodeTools(base, env)
    by_name = {t.name: t for t in tools.tools_at(0)}
    assert by_name["place_order"].metadata == {"effects": "write", "repeatable": False}
    assert by_name["get_stock_info"].metadata == {"effects": "read", "repeatable": False}
    assert by_name["place_order"].args_schema["required"] == [
        "order_type", "symbol", "price", "amount"]
    msg = by_name["get_stock_info"].invoke(
        {"name": "get_stock_info", "args": {"symbol": "AAPL"}, "id": "c1", "type": "tool_call"})
    assert isinstance(msg, ToolMessage)
    assert json.loads(msg.content)["price"] == 227.16
    (ex,) = tools.executions
    assert (ex.call_id, ex.name, ex.args, ex.ok, ex.executed, ex.changed) == (
        "c1", "get_stock_info", {"symbol": "AAPL"}, True, True, False)
    by_name["fund_account"].invoke({"amount": 10.0})
    assert tools.executions[-1].changed and tools.executions[-1].call_id is None


def test_faults_fail_the_first_write_tool_without_touching_state(base: Any) -> None:
    env = bfcl.BFCLEnvironment.for_episode(base)
    tools = demo.EpisodeTools(base, env, fault=demo.FaultPlan(kind="transient_429", failures=2))
    by_name = {t.name: t for t in tools.tools_at(0)}
    by_name["get_stock_info"].invoke({"symbol": "AAPL"})  # read-only: never faulted
    before = env.state()
    for _ in range(2):
        with pytest.raises(demo.InjectedHTTPError) as info:
            by_name["fund_account"].invoke({"amount": 10.0})
        assert info.value.status_code == 429 and "Retry-After" in info.value.headers
        assert env.state() == before
    by_name["fund_account"].invoke({"amount": 10.0})  # third time: runs
    assert env.state() != before
    assert [e.fault for e in tools.executions] == [None, "transient_429", "transient_429", None]

    env2 = bfcl.BFCLEnvironment.for_episode(base)
    forbidden = demo.EpisodeTools(base, env2, fault=demo.FaultPlan("permanent_403", None),
                                  fault_style="return")
    tool = forbidden.tools["fund_account"]
    for _ in range(3):
        assert "403" in json.loads(tool.invoke({"amount": 1.0}))["error"]
    timeout = demo.FaultPlan("transient_timeout", 1).error()
    assert isinstance(timeout, TimeoutError) and isinstance(timeout, demo.InjectedFault)
    assert demo.plan_fault("x", 3) == demo.plan_fault("x", 3)
    assert {demo.plan_fault(f"e{i}").kind for i in range(30)} == set(demo.DEMO_FAULT_KINDS)
    assert all(p.failures is None for p in (demo.plan_fault(f"e{i}") for i in range(30))
               if p.kind == "permanent_403")


# ---------------------------------------------------------------------------- episodes
def test_gold_script_reaches_the_gold_state_in_both_modes(base: Any, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    result = demo.run_demo(scripted(demo.gold_script), episodes=[base], trace_path=trace,
                           progress=False, raise_errors=True)
    assert set(result) == {"unguarded", "guarded", "config"}
    for mode in ("unguarded", "guarded"):
        s = result[mode]
        assert set(s) >= SUMMARY_KEYS
        assert set(s["hallucinated_executed"]) == {"type", "timing", "format", "content"}
        assert s["state_match"] == 1 and s["episodes"] == 1 and s["errors"] == 0, s
        assert s["calls_proposed"] == 4 == s["executed"]
        assert sum(s["hallucinated_executed"].values()) == 0
        assert s["blocked"] == s["asked_user"] == s["retries"] == 0
    assert result["config"]["episodes"] == [BASE]
    json.dumps(result)  # the report is JSON
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    assert len(lines) == 8 and all(set(x) == TRACE_KEYS for x in lines)
    assert {(x["mode"], x["action"], x["executed"]) for x in lines} == {
        ("unguarded", "allow", True), ("guarded", "allow", True)}


def test_hallucinated_calls_reach_tools_only_unguarded(base: Any, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    result = demo.run_demo(scripted(hallucinating_script), episodes=[BASE], trace_path=trace,
                           progress=False, raise_errors=True)
    plain, guarded = result["unguarded"], result["guarded"]
    assert plain["hallucinated_executed"] == {"type": 1, "timing": 1, "format": 1, "content": 1}
    assert plain["state_match"] == 0  # the order was placed twice
    assert guarded["hallucinated_executed"] == {"type": 0, "timing": 0, "format": 0, "content": 0}
    assert guarded["blocked"] == 3 and guarded["asked_user"] == 1
    assert guarded["state_match"] == 1
    assert plain["calls_proposed"] == guarded["calls_proposed"] == 8
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    assert all(set(x) == TRACE_KEYS for x in lines)
    verdicts = {x["tool_call"]["id"]: x for x in lines if x["mode"] == "guarded"}
    assert {k: (v["action"], v["hallucination"]) for k, v in verdicts.items()
            if v["action"] != "allow"} == {
        "repeat": ("block", "timing"), "fabricated": ("block", "type"),
        "renamed": ("block", "format"), "invented": ("ask_user", "content")}
    assert all(v["answered_by"] == "guard" and not v["executed"] and v["reason"]
               for v in verdicts.values() if v["action"] != "allow")
    oracle = {x["tool_call"]["id"]: x["oracle"] for x in lines if x["mode"] == "unguarded"}
    assert {k: v for k, v in oracle.items() if v} == {
        "repeat": "timing", "fabricated": "type", "renamed": "format", "invented": "content"}


def test_miss_func_holds_tools_back_until_their_turn(miss_func: Any) -> None:
    built: list[list[str]] = []

    def factory(model: BaseChatModel, tools: Sequence[BaseTool]) -> Any:
        built.append([t.name for t in tools])
        return create_plain_agent(model, tools)

    run = demo.run_episode(miss_func, factory, ScriptedChatModel(
        script=demo.gold_script(miss_func)), raise_errors=True)
    assert len(built) == 2
    assert "add_to_watchlist" not in built[0] and "add_to_watchlist" in built[1]
    humans = [m.content for m in run.messages if isinstance(m, HumanMessage)]
    assert humans[1] == demo.MISS_FUNC_PROMPT and len(humans) == 6
    assert run.state == demo.gold_state(miss_func)
    metrics, _ = demo.score_run(run)
    assert metrics["state_match"] == 1 and sum(metrics["hallucinated_executed"].values()) == 0


def test_step_limit_ends_the_turn_not_the_episode(base: Any) -> None:
    gold = demo.gold_script(base)
    loop = [call("get_account_info", {}, f"loop{i}") for i in range(2)]
    run = demo.run_episode(base, create_plain_agent, ScriptedChatModel(
        script=[gold[0], *loop, *gold[2:]]), max_steps=3, raise_errors=True)
    assert run.step_limited_turns == 1
    assert_every_call_answered_once(run.messages)
    metrics, _ = demo.score_run(run)
    assert metrics["state_match"] == 1 and metrics["model_calls"] == 9


def test_faulted_demo_counts_injections_in_both_modes(base: Any) -> None:
    plan = demo.plan_fault(BASE, 0)
    result = demo.run_demo(scripted(demo.gold_script), episodes=[base], faults=True,
                           fault_style="return", progress=False, raise_errors=True,
                           modes={"unguarded": create_plain_agent})
    (episode,) = result["unguarded"]["per_episode"]
    assert episode["fault"] == {"kind": plan.kind, "failures": plan.failures}
    assert result["unguarded"]["faults_injected"] == 1
    assert result["unguarded"]["state_match"] == 0  # the plain loop does not retry
    assert result["config"]["faults"] is True


def test_a_failing_model_ends_the_episode_not_the_demo(base: Any) -> None:
    usage = {"input_tokens": 90, "output_tokens": 10, "total_tokens": 100}
    first = demo.gold_script(base)[0].model_copy(update={"usage_metadata": usage})
    result = demo.run_demo(lambda episode: ScriptedChatModel(script=[first]), episodes=[base],
                           progress=False, modes={"unguarded": create_plain_agent})
    summary = result["unguarded"]
    assert summary["errors"] == 1 and "script exhausted" in summary["per_episode"][0]["error"]
    assert summary["executed"] == 1 and summary["tokens"] == 100
    assert summary["state_match"] == 0
    with pytest.raises(IndexError):
        demo.run_demo(lambda episode: ScriptedChatModel(script=[first]), episodes=[base],
                      progress=False, raise_errors=True)


def hallucinating_or_gold(episode: Any) -> list[AIMessage]:
    return hallucinating_script(episode) if episode.id == BASE else demo.gold_script(episode)


def test_threaded_runs_give_the_same_result_as_one_at_a_time(base: Any) -> None:
    def strip(result: dict[str, Any]) -> dict[str, Any]:
        out = json.loads(json.dumps(result, default=str))
        out["config"].pop("concurrency")
        for mode in ("unguarded", "guarded"):
            out[mode].pop("wall_s")
            for ep in out[mode]["per_episode"]:
                ep.pop("wall_s")
        return out

    kwargs: dict[str, Any] = {"episodes": [base, MISS_FUNC], "progress": False,
                              "raise_errors": True}
    serial = demo.run_demo(scripted(hallucinating_or_gold), **kwargs)
    threaded = demo.run_demo(scripted(hallucinating_or_gold), concurrency=4, **kwargs)
    assert strip(serial) == strip(threaded)
    assert serial["unguarded"]["episodes"] == 2 and threaded["config"]["concurrency"] == 4


def test_a_harness_failure_is_an_errored_episode_and_fails_the_check(base: Any) -> None:
    from toolguard_evals.runner import EvalRunError

    def broken(model: BaseChatModel, tools: Sequence[BaseTool]) -> Any:
        raise RuntimeError("no graph today")

    result = demo.run_demo(scripted(demo.gold_script), episodes=[base], progress=False,
                           modes={"unguarded": create_plain_agent, "broken": broken})
    assert result["unguarded"]["errors"] == 0 and result["unguarded"]["state_match"] == 1
    (episode,) = result["broken"]["per_episode"]
    assert episode["error"] == "RuntimeError: no graph today" and episode["episodes"] == 1
    assert result["broken"]["errors"] == 1 and result["broken"]["calls_proposed"] == 0
    demo.print_report(result)  # an errored episode prints like any other
    with pytest.raises(EvalRunError, match="all 1 broken episodes failed"):
        demo.check_demo(result)


def test_module_entry_point_with_the_gold_script(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    require_bfcl()
    out = tmp_path / "demo.json"
    result = demo.main(["--gold", "--ids", BASE, "--no-progress", "--json", str(out)])
    assert json.loads(out.read_text())["guarded"]["state_match"] == 1
    assert result["config"]["episodes"] == [BASE]
    assert "toolguard demo on BFCL v4 multi-turn" in capsys.readouterr().out


def test_demo_exits_non_zero_with_the_reason_when_the_endpoint_is_dead() -> None:
    require_bfcl()
    from typer.testing import CliRunner

    from toolguard_evals.cli import app
    from toolguard_evals.local_model import free_port

    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    result = CliRunner().invoke(app, ["demo", "--tasks", "live_simple=1", "--base-url", dead,
                                      "--model", "m", "--request-timeout", "2"])
    assert result.exit_code == 1, result.output
    assert "toolguard demo: failed: all 2 demo runs failed" in result.stderr
    assert "Connection error" in result.stderr  # the first error, as the endpoint said it
    multi = CliRunner().invoke(app, ["demo", "--suite", "multi-turn", "--episodes", "1",
                                     "--base-url", dead, "--model", "m",
                                     "--request-timeout", "2"])
    assert multi.exit_code == 1, multi.output
    assert "toolguard demo: failed: all 1 unguarded episodes failed" in multi.stderr
