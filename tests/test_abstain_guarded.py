"""toolguard_evals.abstain: the guarded agent modes, the response cache and the case parts.

Scripted chat models on real RelyToolBench cases; a few seconds.  The check that the
implicit and the guarded modes send a real ``ChatOpenAI`` the same first request (so the
guarded mode's first call is the implicit mode's cached answer) records the requests at a
closed port: nothing is served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import RTB_DIR
from langchain_core.caches import BaseCache
from langchain_core.cross_encoders import BaseCrossEncoder
from langchain_core.messages import AIMessage

from toolguard.precheck import Precheck
from toolguard.testing import ScriptedChatModel
from toolguard_evals.abstain import (
    HELD_BACK,
    Case,
    guarded_decide,
    hallucinated_calls,
    implicit_decide,
    load_cases,
    load_relytoolbench,
    run,
)
from toolguard_evals.runner import JsonlLLMCache, stable_llm_string

FEASIBLE = "G1_instruction:588"  # Messi's career; transfermarkt_search fits
MISSING = "G1_instruction_missing_all_arguments:2399"  # "the game": its id is not given
UNMATCHED = "G1_instruction_with_unmatched_tools:588"  # Messi's career, location tools


@pytest.fixture(scope="module")
def rtb() -> dict[str, Case]:
    if not (RTB_DIR / "G1_instruction.json").is_file():
        pytest.skip(f"RelyToolBench data missing at {RTB_DIR}")
    return {c.id: c for c in load_relytoolbench(limit=6)}


def call(tool: str, i: int = 0, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": tool, "args": args, "id": f"c{i}"}])


# ---------------------------------------------------------------------------- guarded
def test_guarded_a_grounded_call_runs_and_is_proceed(rtb: dict[str, Case]) -> None:
    out = guarded_decide(ScriptedChatModel(script=[
        call("transfermarkt_search_for_theclique", name="Messi")]), rtb[FEASIBLE])
    assert (out.label, out.source, out.model_calls) == ("proceed", "executed", 1)
    assert out.executed == [{"name": "transfermarkt_search_for_theclique",
                             "args": {"name": "Messi"}}]


def test_guarded_an_invented_value_becomes_the_guards_question(rtb: dict[str, Case]) -> None:
    case = rtb[MISSING]  # the model invents the game id nobody gave
    model = ScriptedChatModel(script=[call("get_a_specific_game_for_free_nba", is_id="12345")])
    out = guarded_decide(model, case)
    assert (out.label, out.source, out.mark) == ("ask_user", "toolguard", "ask_user")
    assert out.executed == []  # the call never reached the tool
    # unguarded, the same answer is a call that would run: proceed
    implicit = implicit_decide(ScriptedChatModel(script=[
        call("get_a_specific_game_for_free_nba", is_id="12345")]), case)
    assert implicit == ("proceed", None)


def test_guarded_refused_calls_stop_within_the_step_budget(rtb: dict[str, Case]) -> None:
    unknown = [call("get_weather", i, city=f"Paris {i}") for i in range(6)]
    model = ScriptedChatModel(script=unknown)
    out = guarded_decide(model, rtb[FEASIBLE], max_steps=3)
    assert (out.label, out.source, out.mark) == ("no_suitable_tool", "toolguard", "loop")
    assert out.model_calls == 3 and out.refused == 3 and model.position == 3
    # a refused call, then the model's own text answer: read as implicit_label does
    out = guarded_decide(ScriptedChatModel(script=[
        unknown[0], AIMessage("Which game do you mean?")]), rtb[FEASIBLE])
    assert (out.label, out.source, out.model_calls) == ("ask_user", "text", 2)


def test_guarded_precheck_abstains_before_the_model(rtb: dict[str, Case]) -> None:
    model = ScriptedChatModel(script=[])  # never called: the pre-check ends the turn
    out = guarded_decide(model, rtb[UNMATCHED], precheck="deterministic")
    assert (out.label, out.source, out.mark, out.model_calls) == (
        "no_suitable_tool", "toolguard", "no_suitable_tool", 0)
    assert model.position == 0
    failed = guarded_decide(model, rtb[UNMATCHED])  # without it the model is asked
    assert failed.source == "error" and failed.label == "proceed"
    assert failed.error is not None and "IndexError" in failed.error


class ConstantScores(BaseCrossEncoder):
    """A learned pre-check's verifier that scores every pair ``value`` (a stand-in)."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.pairs = 0

    def score(self, text_pairs: list[tuple[str, str]]) -> list[float]:
        self.pairs += len(text_pairs)
        return [self.value] * len(text_pairs)


def test_guarded_precheck_takes_a_learned_precheck(rtb: dict[str, Case]) -> None:
    case = rtb[FEASIBLE]
    # no tool fits (every fit score 0): the pre-check ends the turn, the model is not asked
    low = ConstantScores(0.0)
    model = ScriptedChatModel(script=[])
    out = guarded_decide(model, case, precheck=Precheck(case.tools, mode="learned",
                                                        verifier=low))
    assert (out.label, out.source, out.mark, out.model_calls) == (
        "no_suitable_tool", "toolguard", "no_suitable_tool", 0)
    assert low.pairs > 0 and model.position == 0
    # every tool fits and every value is given: the model acts and its call runs
    high = ConstantScores(1.0)
    out = guarded_decide(ScriptedChatModel(script=[
        call("transfermarkt_search_for_theclique", name="Messi")]), case,
        precheck=Precheck(case.tools, mode="learned", verifier=high))
    assert (out.label, out.source, out.model_calls) == ("proceed", "executed", 1)
    assert high.pairs > 0


def test_a_verifier_is_refused_by_modes_that_do_not_read_it(rtb: dict[str, Case]) -> None:
    with pytest.raises(ValueError, match="learned and guarded_precheck"):
        run([rtb[FEASIBLE]], mode="guarded", model=ScriptedChatModel(script=[]),
            verifier=Path("unused"))


def _finish(rtype: str, text: str) -> AIMessage:
    return call("Finish", return_type=rtype, final_answer=text)


@pytest.mark.parametrize(("rtype", "label"), [("give_up_and_talk_to_user", "ask_user"),
                                              ("give_up_and_change_tools", "no_suitable_tool")])
def test_a_relign_models_finish_reads_as_its_indecisive_action(
        rtb: dict[str, Case], rtype: str, label: str) -> None:
    # no "?" in the text: without the Finish tool, the text reading would say otherwise
    text = "I cannot go on with these tools and this request."
    implicit, error = implicit_decide(ScriptedChatModel(script=[_finish(rtype, text)]),
                                      rtb[MISSING], finish_tool=True)
    assert (implicit, error) == (label, None)
    out = guarded_decide(ScriptedChatModel(script=[_finish(rtype, text)]), rtb[MISSING],
                         finish_tool=True)
    assert (out.label, out.source, out.executed) == (label, "toolguard", [])
    # unbound, the same answer is a call to a tool the case lacks: proceed
    assert implicit_decide(ScriptedChatModel(script=[_finish(rtype, text)]),
                           rtb[MISSING])[0] == "proceed"


def test_finish_tool_is_refused_where_the_model_is_not_the_agent(rtb: dict[str, Case]) -> None:
    with pytest.raises(ValueError, match="finish_tool"):
        run([rtb[FEASIBLE]], mode="zero_shot", model=ScriptedChatModel(), finish_tool=True)


def test_run_guarded_reports_outcomes_and_hallucinated_calls(rtb: dict[str, Case]) -> None:
    cases = [rtb[FEASIBLE], rtb[MISSING], rtb[UNMATCHED]]
    script = [call("transfermarkt_search_for_theclique", name="Messi"),
              call("get_a_specific_game_for_free_nba", 1, is_id="12345"),
              call(rtb[UNMATCHED].tools[0].name, 2, id_conc="Messi")]
    # the last call's parameter is no parameter of that tool: refused, the model gives up
    guarded = run(cases, mode="guarded", model=ScriptedChatModel(script=[
        *script, AIMessage("None of these tools can look up football careers.")]))
    implicit = run(cases, mode="implicit", model=ScriptedChatModel(script=list(script)))
    assert [r["predicted"] for r in implicit["cases"]] == ["proceed"] * 3
    assert implicit["hallucinated_calls"]["proceeded"] == 2
    assert implicit["hallucinated_calls"]["rate"] == 100.0
    rows = {r["id"]: r for r in guarded["cases"]}
    assert rows[FEASIBLE]["predicted"] == "proceed" and rows[FEASIBLE]["source"] == "executed"
    assert rows[MISSING]["predicted"] == "ask_user"
    assert (rows[UNMATCHED]["predicted"], rows[UNMATCHED]["source"]) == (
        "no_suitable_tool", "text")
    assert rows[UNMATCHED]["refused"] == 1 and rows[UNMATCHED]["model_calls"] == 2
    assert guarded["agent"]["sources"]["executed"] >= 1
    assert guarded["agent"]["executed_calls"] == sum(len(r["executed"]) for r in rows.values())
    assert guarded["hallucinated_calls"]["n"] == 2
    assert guarded["hallucinated_calls"]["proceeded"] == 0
    assert guarded["hallucinated_calls"]["by_label"]["ask_user"] == {
        "n": 1, "proceeded": 0, "rate": 0.0}
    assert guarded["three_way"]["per_label"]["ask_user"]["recall"] == 100.0
    assert guarded["endpoint_errors"] == {}


def test_hallucinated_calls_counts_proceed_on_abstain_cases_only(
    rtb: dict[str, Case],
) -> None:
    cases = [rtb[FEASIBLE], rtb[MISSING], rtb[UNMATCHED]]
    out = hallucinated_calls(cases, ["proceed", "proceed", "no_suitable_tool"])
    assert (out["n"], out["proceeded"], out["rate"]) == (2, 1, 50.0)
    assert out["by_label"]["no_suitable_tool"]["proceeded"] == 0
    assert hallucinated_calls(cases[:1], ["proceed"])["rate"] is None


# ---------------------------------------------------------------------------- cache
def test_a_rerun_answers_from_the_response_cache(rtb: dict[str, Case], tmp_path: Path) -> None:
    path = tmp_path / "abstain.cache.jsonl"
    cases = [rtb[FEASIBLE], rtb[MISSING]]
    first = ScriptedChatModel(script=[call("transfermarkt_search_for_theclique", name="Messi"),
                                      AIMessage("Which game do you mean?")],
                              cache=JsonlLLMCache(path))
    report = run(cases, mode="implicit", model=first)
    assert report["llm_cache"]["misses"] == 2 and report["llm_cache"]["hits"] == 0
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2
    again = ScriptedChatModel(script=[], cache=JsonlLLMCache(path))  # would raise if asked
    rerun = run(cases, mode="implicit", model=again)
    assert rerun["endpoint_errors"] == {}
    assert [r["predicted"] for r in rerun["cases"]] == ["proceed", "ask_user"]
    assert [r["cache_hits"] for r in rerun["cases"]] == [1, 1]
    assert rerun["latency_ms_p50_uncached"] is None  # every case came from the cache
    # the guarded mode's first request is the implicit mode's: answered from the file
    guarded = run(cases, mode="guarded", model=ScriptedChatModel(script=[],
                                                                 cache=JsonlLLMCache(path)))
    assert guarded["endpoint_errors"] == {}
    assert [r["predicted"] for r in guarded["cases"]] == ["proceed", "ask_user"]


def test_implicit_and_guarded_send_the_same_first_request(rtb: dict[str, Case]) -> None:
    from langchain_openai import ChatOpenAI

    seen: list[tuple[str, str]] = []

    class Recording(BaseCache):
        def lookup(self, prompt: str, llm_string: str) -> None:
            seen.append((prompt, stable_llm_string(llm_string)))

        def update(self, prompt: str, llm_string: str, return_val: Any) -> None:
            pass

        def clear(self, **kwargs: Any) -> None:
            pass

    model = ChatOpenAI(base_url="http://127.0.0.1:9/v1", api_key="none", model="m",
                       max_retries=0, timeout=2, cache=Recording(), max_tokens=64)
    case = rtb[MISSING]
    assert implicit_decide(model, case)[1] is not None  # nothing listens there
    assert guarded_decide(model, case).error is not None
    assert len(seen) == 2 and seen[0] == seen[1]
    tools = json.loads(seen[0][1].partition("---")[0])["kwargs"]
    assert tools["model_name"] == "m"


def test_look_up_first_lets_the_model_find_an_address_before_the_guard_asks() -> None:
    case = next(c for c in load_cases("dialogues", limit=1, parts=["calendar"])
                if c.id == "calendar-000:turn0:request")
    invented = call("create_event", title="Website relaunch", date="2026-07-20",
                    start_time="16:30", duration_minutes=45, attendees=["fabian@example.com"])
    lookup = call("find_contact", 1, name="Fabian")
    asked = guarded_decide(ScriptedChatModel(script=[invented, lookup]), case)
    assert (asked.label, asked.mark, asked.executed) == ("ask_user", "ask_user", [])
    looked = guarded_decide(ScriptedChatModel(script=[invented, lookup]), case,
                            look_up_first=True)
    assert looked.label == "proceed" and looked.refused == 1
    assert looked.executed == [{"name": "find_contact", "args": {"name": "Fabian"}}]
    with pytest.raises(ValueError, match="look_up_first is for the guarded modes"):
        run([case], mode="implicit", model=ScriptedChatModel(script=[]), look_up_first=True)


# ---------------------------------------------------------------------------- parts
def test_load_cases_parts_pick_groups_and_held_back_domains() -> None:
    if not (RTB_DIR / "G2_category.json").is_file():
        pytest.skip(f"RelyToolBench data missing at {RTB_DIR}")
    g2 = load_cases("relytoolbench", limit=2, parts=["G2_category"])
    assert len(g2) == 6 and all(c.id.startswith("G2_category") for c in g2)
    assert {c.expected for c in g2} == {"proceed", "ask_user", "no_suitable_tool"}
    held = load_cases("dialogues", limit=1, parts=[HELD_BACK])
    domains = {c.id.split(":")[0].rsplit("-", 1)[0] for c in held}
    assert domains == {"mail", "shop", "helpdesk", "stocks", "repo"}
    assert load_cases("dialogues", limit=1, parts=["mail"])
    with pytest.raises(ValueError, match="unknown RelyToolBench group"):
        load_cases("relytoolbench", limit=1, parts=["G9"])
    with pytest.raises(ValueError, match="unknown dialogue domain"):
        load_cases("dialogues", limit=1, parts=["bakery"])
    with pytest.raises(ValueError, match="unknown BFCL abstain"):
        load_cases("bfcl", limit=1, parts=["simple_java"])


def test_cli_eval_abstain_takes_parts(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from toolguard_evals.cli import app

    out = tmp_path / "abstain.json"
    result = CliRunner().invoke(app, ["eval", "abstain", "--dataset", "dialogues", "--part",
                                      HELD_BACK, "--limit", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["parts"] == [HELD_BACK] and report["three_way"]["n"] == len(report["cases"])
    assert {r["id"].split("-")[0] for r in report["cases"]} <= {
        "mail", "shop", "helpdesk", "stocks", "repo"}
    bad = CliRunner().invoke(app, ["eval", "abstain", "--mode", "guarded_later"])
    assert bad.exit_code != 0 and "mode must be one of" in bad.output
    finish = CliRunner().invoke(app, ["eval", "abstain", "--finish-tool"])
    assert finish.exit_code != 0 and "--finish-tool is for --mode" in finish.output
    assert report["finish_tool"] is False and report["look_up_first"] is False
    look = CliRunner().invoke(app, ["eval", "abstain", "--look-up-first"])
    assert look.exit_code != 0 and "--look-up-first is for --mode guarded" in look.output
    # the learned verifier's options: read by learned and guarded_precheck only, and
    # guarded_precheck takes thresholds only with the verifier they belong to
    guarded = CliRunner().invoke(app, ["eval", "abstain", "--mode", "guarded",
                                       "--verifier", str(tmp_path)])
    assert guarded.exit_code != 0 and "learned or guarded_precheck" in guarded.output
    lone = CliRunner().invoke(app, ["eval", "abstain", "--mode", "guarded_precheck",
                                    "--fit-threshold", "0.3"])
    assert lone.exit_code != 0 and "with --verifier" in lone.output
