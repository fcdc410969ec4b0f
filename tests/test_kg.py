"""KG store, FamilyTool-faithful extraction and metrics, deterministic resolver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolguard.kg import (
    BAD_EXTRACT,
    DeterministicPathGenerator,
    KnowledgeGraph,
    kg_search,
    programs_for_links,
    search_program,
)
from toolguard.prompts import load_prompt

REPO = Path(__file__).resolve().parents[1]
FT_DIR = Path(os.environ.get("TOOLGUARD_DATA_DIR", REPO.parent / "shared" / "data")) / "familytool"
needs_ft = pytest.mark.skipif(not (FT_DIR / "familytool-b.jsonl").is_file(),
                              reason=f"FamilyTool data not found under {FT_DIR}")

FAMILY = [
    ("Bob", "mother", "Alice"),
    ("Bob", "father", "Jack"),
    ("Alice", "son", "Bob"),
    ("Alice", "husband", "Jack"),
    ("Jack", "wife", "Alice"),
    ("Jack", "mother", "Eve"),
    ("Alice", "prefer_dinnertime", "dinnertime_0002"),
    ("Alice", "prefer_travel_city", "travel_city_0002"),
    ("Eve", "prefer_travel_city", "travel_city_0009"),
    ("Jack", "prefer_city", "city_0001"),
]


@pytest.fixture
def kg() -> KnowledgeGraph:
    return KnowledgeGraph(FAMILY)


def test_store_add_remove_order(kg: KnowledgeGraph) -> None:
    assert kg.triples() == FAMILY
    assert not kg.add("Bob", "mother", "Alice")
    assert kg.add("Bob", "mother", "Zoe")
    assert kg.tails("Bob", "mother") == ["Alice", "Zoe"]  # first tail wins
    assert kg.search("Bob", ["mother"]) == [("Bob", "mother", "Alice")]
    assert kg.remove("Bob", "mother", "Zoe")
    assert not kg.remove("Bob", "mother", "Zoe")
    assert "Zoe" not in kg.entities
    assert kg.relations[:3] == ["mother", "father", "son"]


def test_from_file_uses_literal_eval(tmp_path: Path) -> None:
    f = tmp_path / "kg.txt"
    f.write_text("['Bob', 'mother', 'Alice']\n\n['Alice', 'prefer_city', 'city_0002']\n")
    assert len(KnowledgeGraph.from_file(f)) == 2
    f.write_text("__import__('os').getcwd()\n")
    with pytest.raises(ValueError):
        KnowledgeGraph.from_file(f)


def test_extract_bad_semantics(kg: KnowledgeGraph) -> None:
    paths, bad = kg.extract("Nobody", ["mother"])
    assert (paths, bad) == ([], True)
    assert kg_search(search_program("Nobody", ["mother"]), kg) == ""  # nothing extracted
    # missing first relation: every triple of the start opens a path
    paths, bad = kg.extract("Jack", ["sister"])
    assert bad and len(paths) == 3
    # missing later relation: the path is extended by all triples of the entity
    out = kg_search('KG.search(start="Bob", path=["<relationship>mother","pet"])', kg)
    assert out.endswith(BAD_EXTRACT) and "prefer_travel_city" in out
    assert kg_search("no call here", kg) == ""
    assert kg_search("KG.search(start=Bob)", kg) == BAD_EXTRACT


def test_gs_and_rr_repair_relations(kg: KnowledgeGraph) -> None:
    prog = search_program("Bob", ["mothr", "prefer_travel_cty"])
    assert BAD_EXTRACT in kg_search(prog, kg)
    gs = kg_search(prog, kg, mode="gs")
    assert "travel_city_0002" in gs and BAD_EXTRACT not in gs
    rr = kg_search(prog, kg, mode="rr", k=2)
    assert "travel_city_0002" in rr


def test_programs_for_branching_links() -> None:
    links = [["Bob", "father", "Jack"], ["Jack", "a", "x"], ["Jack", "b", "y"]]
    assert programs_for_links(links) == [
        search_program("Bob", ["father", "a"]), search_program("Bob", ["father", "b"])]


def test_resolver_multi_hop_chain(kg: KnowledgeGraph) -> None:
    res = DeterministicPathGenerator(kg).resolve(
        "<speak>Speaker: Bob</speak> Book a trip to my father's mother's favourite travel city.")
    assert res.triples == [("Bob", "father", "Jack"), ("Jack", "mother", "Eve"),
                           ("Eve", "prefer_travel_city", "travel_city_0009")]
    assert res.programs == [search_program("Bob", ["father", "mother", "prefer_travel_city"])]


@pytest.mark.parametrize("phrase", ["mom's", "mother's", "mum's"])
def test_resolver_synonyms(kg: KnowledgeGraph, phrase: str) -> None:
    res = DeterministicPathGenerator(kg).resolve(
        f"<speak>Speaker: Bob</speak> Cancel alarms during my {phrase} preferred dining time.")
    assert res.entities[-1] == "dinnertime_0002"


def test_resolver_child_means_son(kg: KnowledgeGraph) -> None:
    res = DeterministicPathGenerator(kg).resolve(
        "<speak>Speaker: Alice</speak> Delete my child's contact.")
    assert res.triples == [("Alice", "son", "Bob")]


def test_resolver_relation_added_at_run_time(kg: KnowledgeGraph) -> None:
    gen = DeterministicPathGenerator(kg)
    q = "<speak>Speaker: Bob</speak> Play my mom's favourite podcast."
    assert gen.resolve(q).triples == [("Bob", "mother", "Alice")]
    kg.add("Alice", "prefer_podcast", "podcast_0001")
    assert gen.resolve(q).entities[-1] == "podcast_0001"


def test_resolver_missing_link_and_unknown_speaker(kg: KnowledgeGraph) -> None:
    gen = DeterministicPathGenerator(kg)
    res = gen.resolve("<speak>Speaker: Jack</speak> Call my father's dentist.")
    assert res.missing and "father" in res.missing[0]
    unknown = gen.resolve("<speak>Speaker: Mallory</speak> My mom's city.")
    assert unknown.programs == [] and "Mallory" in unknown.missing[0]
    assert gen.resolve("my mom's city").missing == [
        "unknown speaker: the speaker is not in the knowledge graph"]
    assert gen.resolve("What's the weather like?").missing == []  # nothing personal
    assert gen.resolve("Play a song.", speaker="Bob").programs == []


def test_resolver_cycles_terminate(kg: KnowledgeGraph) -> None:
    gen = DeterministicPathGenerator(kg)
    res = gen.resolve(
        "<speak>Speaker: Bob</speak> My mother's son's mother's husband's favourite city.")
    assert res.triples[0] == ("Bob", "mother", "Alice")
    assert len(res.triples) <= 4


def test_prompt_loads() -> None:
    text = load_prompt("kg_search").format(relations="- <relationship>mother")
    assert "KG.search" in text and "<relationship>mother" in text


@needs_ft
def test_fidelity_golden_paths_score_100() -> None:
    from toolguard_evals.familytool import run

    metrics, records, _ = run(FT_DIR, "b", generator="golden")
    assert len(records) == 483
    assert metrics == {"em": 100.0, "f1": 100.0, "no_hallucination": 100.0,
                       "coverage": 100.0, "format_error": 0.0}


@needs_ft
def test_deterministic_resolver_on_base_set(tmp_path: Path) -> None:
    import json

    from toolguard_evals.familytool import main

    report = main(FT_DIR, "b", json_path=tmp_path / "r.json")
    m = report["kg_extraction"]
    assert json.loads((tmp_path / "r.json").read_text())["kg_extraction"] == m
    # reached by this resolver (issue 4 targets: coverage >= 95, EM >= 85, no-hall >= 95)
    assert m["no_hallucination"] >= 95
    assert m["em"] >= 65  # measured 66.5 (issue 4 target 85: not reached, see report)
    assert m["coverage"] >= 69  # measured 70.8 (target 95)
    assert m["format_error"] <= 2.5
