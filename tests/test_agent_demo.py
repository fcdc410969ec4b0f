"""The main job: BFCL tasks run by a create_agent agent, judged by BFCL's gold.

BFCL's own checker (``bfcl_eval``'s ``ast_checker``) decides task success and gold matches;
the labels of calls that match no gold come from the gold and the tool schemas.  Scripted
models drive the plumbing; the real-model run is in ``test_agent_demo_local.py``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import require_bfcl
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration

from toolguard.testing import ScriptedChatModel
from toolguard_evals import bfcl
from toolguard_evals.bfcl_checker import call_label, check_task, match_gold, tool_name
from toolguard_evals.demo.agent import AGENT_MODES, TOOL_RESULT, run_task
from toolguard_evals.demo.agent_demo import check_agent_demo, print_agent_report, run_agent_demo
from toolguard_evals.demo.agent_score import pairwise, score_task_run, summarize, wilson
from toolguard_evals.demo.tasks import (
    DEFAULT_TASK_MIX,
    REMOVED_VALUE,
    remove_required_value,
    select_tasks,
    tasks_by_id,
)
from toolguard_evals.runner import EvalRunError, JsonlLLMCache, stable_llm_string

# live_simple_0-0-0: "Can you retrieve the details for the user with the ID 7890, who has
# black as their special request?"; gold get_user_info(user_id=7890, special="black")
TASK = "live_simple_0-0-0"
GOLD = {"user_id": 7890, "special": "black"}


@pytest.fixture(autouse=True)
def _bfcl() -> None:
    require_bfcl()


def calls(*items: tuple[str, Any], prefix: str = "c") -> AIMessage:
    ids = itertools.count()
    return AIMessage("", tool_calls=[{"name": n, "args": a, "id": f"{prefix}{next(ids)}",
                                      "type": "tool_call"} for n, a in items])


def model_of(*steps: Any) -> ScriptedChatModel:
    """A scripted model whose steps are fresh per call (unique call ids per step)."""
    counter = itertools.count()

    def fresh(message: AIMessage) -> Any:
        def make(_: Any) -> AIMessage:
            n = next(counter)
            return message.model_copy(update={"tool_calls": [
                {**c, "id": f"{c['id']}_{n}"} for c in message.tool_calls]})
        return make

    return ScriptedChatModel(script=[fresh(s) if isinstance(s, AIMessage) and s.tool_calls
                                     else s for s in steps])


# ---------------------------------------------------------------------------- BFCL checker
def test_bfcl_checker_accepts_every_gold_answer_and_rejects_extras() -> None:
    for category in ("live_simple", "live_multiple", "live_parallel", "simple_python"):
        for record in bfcl.load_category(category, limit=25):  # type: ignore[arg-type]
            gold = [(tool_name(n), a) for n, a in bfcl.gold_calls(record)]
            assert check_task(record, gold)["valid"], record["id"]
            assert not check_task(record, [*gold, gold[0]])["valid"]  # one call too many
            assert not check_task(record, [])["valid"]
    (irrelevant,) = bfcl.load_category("irrelevance", limit=1)
    assert check_task(irrelevant, [])["valid"]
    verdict = check_task(irrelevant, [("anything", {})])
    assert not verdict["valid"] and verdict["error_type"] == "relevance:called"


def test_dotted_names_are_sent_with_underscores_and_matched_back() -> None:
    record = next(r for r in bfcl.load_category("simple_python")
                  if "." in r["function"][0]["name"])
    name, args = bfcl.gold_calls(record)[0]
    assert "." in name
    assert check_task(record, [(tool_name(name), args)])["valid"]
    assert match_gold(record, tool_name(name), args) == 0
    assert match_gold(record, name, args) is None  # the dotted name is not what BFCL sends


def test_call_labels_come_from_the_gold_and_the_schema() -> None:
    (task,) = tasks_by_id([TASK])
    record = task.record
    assert match_gold(record, "get_user_info", GOLD) == 0
    assert match_gold(record, "get_user_info", GOLD, exclude=frozenset({0})) is None
    assert call_label(record, "get_weather", {"city": "Paris"}) == "type"  # not offered
    assert call_label(record, "get_user_info", {"user_id": "7890"}) == "format"  # a string
    assert call_label(record, "get_user_info", {"special": "black"}) == "format"  # required
    assert call_label(record, "get_user_info", {**GOLD, "extra": 1}) == "format"  # unknown
    assert call_label(record, "get_user_info", {"user_id": 1234}) == "content"
    (irrelevant,) = bfcl.load_category("irrelevance", limit=1)
    tool = tool_name(irrelevant["function"][0]["name"])
    assert call_label(irrelevant, tool, {}) == "type"  # no tool fits: any call is the wrong tool


# ---------------------------------------------------------------------------- tasks
def test_task_selection_is_seeded_and_uses_evaluation_categories() -> None:
    tasks = select_tasks()
    assert [t.id for t in tasks] == [t.id for t in select_tasks()]
    assert [t.id for t in tasks] != [t.id for t in select_tasks(seed=1)]
    counts = {c: sum(1 for t in tasks if t.category == c) for c in DEFAULT_TASK_MIX}
    assert counts == dict(DEFAULT_TASK_MIX)
    assert {t.kind for t in tasks} == {"call", "no_tool", "ask"}
    # no ask task is made from a record the sample already uses as it is
    plain = {t.id for t in tasks if t.source is None}
    assert not {str(t.source["id"]) for t in tasks if t.source is not None} & plain
    with pytest.raises(ValueError, match="categories must be among"):
        select_tasks({"multi_turn_base": 1})


def test_a_removed_value_is_gone_from_the_request_once() -> None:
    record = next(r for r in bfcl.load_category("live_simple") if r["id"] == TASK)
    task = remove_required_value(record)
    assert task is not None and task.kind == "ask" and task.category == REMOVED_VALUE
    assert task.removed == ("user_id", "7890")
    text = task.messages()[-1].content
    assert "7890" not in text and "black" in text
    assert task.record["ground_truth"] == [] and task.source is record
    assert tasks_by_id([task.id])[0].messages()[-1].content == text
    with pytest.raises(ValueError, match="not a BFCL single-turn id"):
        tasks_by_id(["multi_turn_base_1"])


# ---------------------------------------------------------------------------- scoring
def run(task_id: str, mode: str, *steps: Any) -> dict[str, Any]:
    (task,) = tasks_by_id([task_id])
    result = run_task(task, AGENT_MODES[mode], model_of(*steps), mode=mode)
    metrics, call_lines = score_task_run(result)
    metrics["call_lines"] = call_lines
    metrics["run"] = result
    return metrics


def test_a_gold_call_succeeds_in_every_mode_that_lets_the_model_answer() -> None:
    # the pre-check decides before the model is called (its abstains are measured by the
    # demo itself) and the LLM modes ask the agent's model to judge; every other mode must
    # let a gold call run untouched
    for mode in (m for m in AGENT_MODES
                 if m not in ("precheck", "guard_llm", "guarded_precheck", "guarded_sv")):
        m = run(TASK, mode, calls(("get_user_info", GOLD)))
        assert m["success"] == 1, (mode, m["bfcl_error"])
        assert (m["gold_proposed"], m["gold_stopped"], m["executed"]) == (1, 0, 1), mode
        assert m["ended_by"] == "tool" and m["model_calls"] == 1
        assert m["run"].executions[0].content == TOOL_RESULT


def test_a_made_up_value_runs_unguarded_and_is_asked_about_guarded() -> None:
    ask = f"{REMOVED_VALUE}:{TASK}"  # the user id is not in the request
    invented = calls(("get_user_info", {"user_id": 1234, "special": "black"}))
    plain = run(ask, "unguarded", invented)
    assert plain["success"] == 0 and plain["hallucinated_executed"]["content"] == 1
    guarded = run(ask, "guarded", invented)
    assert guarded["success"] == 1 and guarded["executed"] == 0
    assert guarded["asked"] == 1 and guarded["ended_by"] == "toolguard"
    assert guarded["hallucinated_stopped"]["content"] == 1
    assert guarded["after_refusal"] == 0
    (line,) = guarded["call_lines"]
    assert line["stopped"] and line["label"] == "content"
    assert line["verdict"]["action"] == "ask_user"


def test_a_repeat_in_one_reply_is_timing_and_a_wrong_tool_is_type() -> None:
    m = run(TASK, "unguarded", calls(("get_user_info", GOLD), ("get_user_info", GOLD)))
    assert m["success"] == 0 and m["bfcl_error"]
    assert m["hallucinated_executed"] == {"type": 0, "timing": 1, "format": 0, "content": 0}
    (irrelevant,) = bfcl.load_category("irrelevance", limit=1)
    tool = tool_name(irrelevant["function"][0]["name"])
    args = bfcl.gold_calls({**irrelevant, "ground_truth": []}) or {}
    m = run(irrelevant["id"], "unguarded", calls((tool, dict(args))), AIMessage("done"))
    assert m["success"] == 0 and m["hallucinated_executed"]["type"] == 1


def test_a_stopped_gold_call_is_a_false_block() -> None:
    # the gold call in a form the guard refuses (ids as strings break the schema): BFCL's
    # checker does not accept it either, so it is not gold; a true false block needs a
    # gold call the guard stops, counted when it happens
    m = run(TASK, "guarded", calls(("get_user_info", {"user_id": "7890", "special": "black"})),
            calls(("get_user_info", GOLD)))
    assert m["gold_proposed"] == 1 and m["gold_stopped"] == 0 and m["success"] == 1
    assert m["hallucinated_stopped"]["format"] == 1 and m["after_refusal"] == 1


def test_a_model_that_keeps_proposing_refused_calls_is_stopped() -> None:
    fabricated = calls(("book_flight", {"to": "Rome"}))
    for mode, most in (("guard", 4), ("guarded", 4)):
        m = run(TASK, mode, *[fabricated] * 20)
        assert m["ended_by"] == "toolguard", mode
        assert m["after_refusal"] is not None and m["after_refusal"] <= most, mode
        assert m["executed"] == 0
    m = run(TASK, "unguarded", *[fabricated] * 20)
    assert m["ended_by"] == "limit" and m["model_calls"] == 6  # max_steps


def test_summary_rates_have_wilson_intervals_and_pairs_are_matched() -> None:
    lo, hi = wilson(8, 10)
    assert 0.49 < lo < 0.5 and 0.94 < hi < 0.95
    assert wilson(0, 0) == (0.0, 1.0)
    rows = [{"id": "a", "success": 1}, {"id": "b", "success": 0}, {"id": "c", "success": 1}]
    other = [{"id": "a", "success": 0}, {"id": "b", "success": 1}, {"id": "c", "success": 1}]
    assert pairwise(rows, other) | {"won_ids": None, "lost_ids": None} == {
        "tasks": 3, "won": 1, "lost": 1, "both": 1, "neither": 0,
        "won_ids": None, "lost_ids": None}


def test_the_demo_runs_every_mode_and_reports_by_gold(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tasks_by_id([TASK, f"{REMOVED_VALUE}:{TASK}"])

    def answer(messages: list[Any]) -> AIMessage:
        text = next(m.content for m in messages if isinstance(m, HumanMessage))
        value = 7890 if "7890" in text else 1234
        return calls(("get_user_info", {"user_id": value, "special": "black"}),
                     prefix=f"x{len(messages)}_")

    model = ScriptedChatModel(script=[answer] * 40)
    trace = tmp_path / "trace.jsonl"
    result = run_agent_demo(model, tasks=tasks, modes=["unguarded", "guarded", "guard"],
                            trace_path=trace, progress=False)
    assert result["unguarded"]["success"]["k"] == 1
    assert result["guarded"]["success"]["k"] == result["guard"]["success"]["k"] == 2
    assert result["guarded"]["hallucinated_executed"]["total"] == 0
    assert result["unguarded"]["hallucinated_executed"]["content"] == 1
    assert result["guarded"]["gold_stopped"] == {"k": 0, "n": 1, "rate": 0.0,
                                                 "ci95": [0.0, 0.7935]}
    assert result["paired"]["guarded"]["won_ids"] == [f"{REMOVED_VALUE}:{TASK}"]
    assert result["config"]["baseline"] == "unguarded"
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    assert len(lines) == 6 and all("calls" in x for x in lines)
    json.dumps(result)  # the report is JSON as it is
    print_agent_report(result)
    out = capsys.readouterr().out
    assert "task success (BFCL checker)" in out and "guarded vs unguarded" in out
    check_agent_demo(result)
    broken = {**result, "runs": [{**r, "error": "boom"} for r in result["runs"]]}
    with pytest.raises(EvalRunError, match="demo runs"):
        check_agent_demo(broken)
    with pytest.raises(ValueError, match="modes must be among"):
        run_agent_demo(model, tasks=tasks, modes=["nope"])


def test_modes_share_identical_first_requests_through_the_response_cache(
        tmp_path: Path) -> None:
    from langchain_core.language_models import GenericFakeChatModel

    path = tmp_path / "cache.jsonl"
    replies = iter([AIMessage("first"), AIMessage("second")])
    model = GenericFakeChatModel(messages=replies, cache=JsonlLLMCache(path))
    assert model.invoke("hello").content == "first"
    assert model.invoke("hello").content == "first"  # from the cache, not the model
    assert model.invoke("other").content == "second"
    reloaded = GenericFakeChatModel(messages=iter([]), cache=JsonlLLMCache(path))
    assert reloaded.invoke("hello").content == "first"  # a rerun resumes from the file
    assert reloaded.cache.hits == 1  # type: ignore[union-attr]


def test_the_response_cache_outlives_the_server_port(tmp_path: Path) -> None:
    from langchain_openai import ChatOpenAI

    def settings(port: int, temperature: float = 0.0) -> str:
        model = ChatOpenAI(model="qwen", base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                           temperature=temperature, timeout=port)
        return model._get_llm_string(tools=[{"type": "function", "function": {"name": "f"}}])

    first, second = settings(40809), settings(51234)
    assert "40809" in first and first != second  # LangChain's own key names the endpoint
    assert stable_llm_string(first) == stable_llm_string(second)
    assert "qwen" in stable_llm_string(first) and "'name': 'f'" in stable_llm_string(first)
    assert stable_llm_string(settings(1, 0.7)) != stable_llm_string(first)  # sampling counts
    assert stable_llm_string("not json---x") == "not json---x"
    cache = JsonlLLMCache(tmp_path / "c.jsonl")
    cache.update("prompt", first, [ChatGeneration(message=AIMessage("hi"))])
    again = JsonlLLMCache(tmp_path / "c.jsonl").lookup("prompt", second)
    assert again is not None and again[0].text == "hi"


def test_summarize_counts_asks_by_kind() -> None:
    base = {"success": 1, "proposed": 1, "executed": 0, "gold_proposed": 0, "gold_stopped": 0,
            "hallucinated_executed": dict.fromkeys(("type", "timing", "format", "content"), 0),
            "hallucinated_stopped": dict.fromkeys(("type", "timing", "format", "content"), 0),
            "asked": 1, "ended_by": "toolguard", "model_calls": 1, "after_refusal": 0,
            "tokens": 10, "wall_s": 1.0, "error": None}
    rows = [{**base, "id": "a", "kind": "ask", "category": REMOVED_VALUE},
            {**base, "id": "b", "kind": "call", "category": "live_simple"},
            {**base, "id": "c", "kind": "no_tool", "category": "irrelevance", "asked": 0}]
    s = summarize(rows)
    assert s["asks"] == {"warranted": 1, "no_tool": 0, "unwarranted": 1}
    assert s["after_refusal"]["within_4"]["k"] == 3 and s["ended_by"] == {"toolguard": 3}


def test_the_stack_after_the_pre_check_never_runs_a_made_up_value() -> None:
    ask = f"{REMOVED_VALUE}:{TASK}"  # the user id is not in the request
    invented = calls(("get_user_info", {"user_id": 1234, "special": "black"}))
    m = run(ask, "guarded_precheck", invented)
    # the pre-check asks before the model is called, or the guard asks about the value
    assert m["success"] == 1 and m["executed"] == 0 and m["ended_by"] == "toolguard"
    assert m["model_calls"] <= 1 and m["hallucinated_executed"]["content"] == 0


def test_the_response_cache_key_ignores_a_replies_bookkeeping(tmp_path: Path) -> None:
    """A reply served from the cache carries ``total_cost: 0`` into the next request; the
    key must not change for it, and a first request keeps its raw-text key."""
    import hashlib

    from langchain_core.load import dumps

    first = dumps([HumanMessage("hi")])
    assert JsonlLLMCache._key(first) == hashlib.sha256(first.encode()).hexdigest()
    usage = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}
    live = dumps([HumanMessage("hi"), AIMessage("hello", usage_metadata=usage,
                                                response_metadata={"model_name": "m"})])
    replayed = dumps([HumanMessage("hi"), AIMessage(
        "hello", usage_metadata={**usage, "total_cost": 0})])
    other = dumps([HumanMessage("hi"), AIMessage("bye", usage_metadata=usage)])
    assert JsonlLLMCache._key(live) == JsonlLLMCache._key(replayed)
    assert JsonlLLMCache._key(live) != JsonlLLMCache._key(other)
    cache = JsonlLLMCache(tmp_path / "c.jsonl")
    cache.update(live, "llm", [ChatGeneration(message=AIMessage("next"))])
    hit = JsonlLLMCache(tmp_path / "c.jsonl").lookup(replayed, "llm")
    assert hit is not None and hit[0].text == "next"
