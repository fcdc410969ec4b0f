"""The dialogue corpus: determinism, executable gold calls, grounding, labels, messages, cases."""

from __future__ import annotations

import builtins
import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, get_args

import pytest
from jsonschema import Draft202012Validator
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from toolguard.precheck import PrecheckLabel
from toolguard_evals import abstain
from toolguard_evals.dialogues import (
    SOURCES,
    Corpus,
    build_corpus,
    domain,
    domains,
    load_dialogue_cases,
    to_messages,
)
from toolguard_evals.dialogues.cases import SUBSETS
from toolguard_evals.dialogues.corpus import DEFAULT_PER_DOMAIN, build_dialogue
from toolguard_evals.dialogues.framework import numbers_in
from toolguard_evals.dialogues.records import TURN_KINDS, Label

SHARED_DATA = Path(os.environ.get("TOOLGUARD_DATA_DIR",
                           Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return build_corpus(seed=0)


# ---------------------------------------------------------------------------- determinism
def test_same_seed_gives_the_same_corpus_and_another_seed_another() -> None:
    a, b = build_corpus(seed=3, per_domain=4), build_corpus(seed=3, per_domain=4)
    assert a.to_json() == b.to_json()
    c = build_corpus(seed=4, per_domain=4)
    assert [d.turns[0].user for d in a.dialogues] != [d.turns[0].user for d in c.dialogues]


def test_a_dialogue_does_not_depend_on_the_corpus_size() -> None:
    dom = domain("banking")
    small = build_corpus(seed=0, per_domain=2, names=["banking"])
    assert small.dialogues[1] == build_dialogue(dom, 1, seed=0)
    assert build_corpus(seed=0, per_domain=5, names=["banking"]).dialogues[1] == \
        small.dialogues[1]


def test_json_round_trip(corpus: Corpus, tmp_path: Path) -> None:
    assert Corpus.from_json(corpus.to_json()) == corpus
    path = tmp_path / "corpus.json"
    corpus.to_json(path)
    again = Corpus.from_json(path)
    assert again == corpus
    assert again.dialogues[5].turns[0].steps == corpus.dialogues[5].turns[0].steps


# ---------------------------------------------------------------------------- domains and tools
def test_domains_have_5_to_12_tools_with_valid_schemas_and_effects(corpus: Corpus) -> None:
    doms = domains()
    assert len(doms) >= 8
    assert len({d.name for d in doms}) == len(doms)
    for d in doms:
        assert 5 <= len(d.tools) <= 12, d.name
        assert len({t.name for t in d.tools}) == len(d.tools)
        for t in d.tools:
            doc = t.openai()["function"]
            assert doc["description"] and t.effect in ("read", "write")
            Draft202012Validator.check_schema(doc["parameters"])
            assert set(doc["parameters"]["required"]) <= set(doc["parameters"]["properties"])
        assert {t.effect for t in d.tools} == {"read", "write"}, d.name
        assert corpus.tools[d.name] == d.docs()
        assert corpus.effects[d.name] == d.effects()
        assert len(d.infeasible) >= 3


def test_the_corpus_has_a_few_hundred_multi_turn_dialogues(corpus: Corpus) -> None:
    assert len(corpus.dialogues) == DEFAULT_PER_DOMAIN * len(domains()) >= 300
    turns = [len(d.turns) for d in corpus.dialogues]
    assert sum(t >= 2 for t in turns) / len(turns) > 0.85
    assert Counter(d.domain for d in corpus.dialogues) == {
        d.name: DEFAULT_PER_DOMAIN for d in domains()}


# ---------------------------------------------------------------------------- gold calls
def test_every_gold_call_validates_and_replays_to_the_recorded_result(corpus: Corpus) -> None:
    n = 0
    for d in corpus.dialogues:
        dom = domain(d.domain)
        backend = dom.backend(d.backend_seed)
        validators = {doc["name"]: Draft202012Validator(doc["parameters"])
                      for doc in corpus.tools[d.domain]}
        for _, _, step in d.steps():
            assert list(validators[step.name].iter_errors(step.args)) == [], (d.id, step)
            ok, result = backend.execute(step.name, step.args)
            assert ok, (d.id, step.name, result)
            assert result == step.result, (d.id, step.call_id)
            assert "error" not in json.loads(result)
            n += 1
    assert n > 1000


def test_call_ids_are_numbered_over_the_dialogue(corpus: Corpus) -> None:
    for d in corpus.dialogues:
        assert [s.call_id for _, _, s in d.steps()] == [f"call_{i}" for i in
                                                         range(len(d.steps()))]


def _leaves(value: Any) -> list[Any]:
    return [x for v in (value if isinstance(value, list) else [value])
            for x in ([v] if not isinstance(v, list) else v)]


def test_gold_values_are_stated_in_the_conversation_or_declared_derived(corpus: Corpus) -> None:
    derived = 0
    for d in corpus.dialogues:
        docs = {doc["name"]: doc["parameters"]["properties"] for doc in corpus.tools[d.domain]}
        seen = [d.system]
        for turn in d.turns:
            seen.append(turn.user)
            for step in turn.steps:
                text = "\n".join(seen).casefold()
                nums = numbers_in("\n".join(seen))
                for key, value in step.args.items():
                    schema = docs[step.name][key]
                    if key in step.derived:
                        derived += 1
                        continue
                    if "enum" in schema or isinstance(value, bool) or \
                            value == schema.get("default"):
                        continue
                    for v in _leaves(value):
                        if isinstance(v, str):
                            assert v.casefold() in text, (d.id, step.name, key, v)
                        else:
                            assert float(v) in nums, (d.id, step.name, key, v)
                seen.append(step.result)
    assert derived > 100  # relative dates, "two guests", composed bodies, ...


def test_no_gold_call_repeats_an_identical_call_with_nothing_changed(corpus: Corpus) -> None:
    for d in corpus.dialogues:
        effects = corpus.effects[d.domain]
        steps = [s for _, _, s in d.steps()]
        for j, s in enumerate(steps):
            for earlier in reversed(steps[:j]):
                if effects[earlier.name] == "write":
                    break
                assert (earlier.name, earlier.args) != (s.name, s.args), (d.id, s.call_id)


def test_values_flow_from_tool_results_into_later_calls(corpus: Corpus) -> None:
    """Benign multi-step flows: an id returned by one call is an argument of a later one."""
    flows = 0
    for d in corpus.dialogues:
        steps = [s for _, _, s in d.steps()]
        for j, s in enumerate(steps):
            results = " ".join(x.result for x in steps[:j])
            users = " ".join(t.user for t in d.turns).casefold()
            if any(isinstance(v, str) and len(v) >= 5 and v in results
                   and v.casefold() not in users for v in _leaves(list(s.args.values()))):
                flows += 1
    assert flows > 400


# ---------------------------------------------------------------------------- labels
def test_label_literal_is_the_precheck_label() -> None:
    assert get_args(Label) == get_args(PrecheckLabel)


def test_turn_labels_are_consistent(corpus: Corpus) -> None:
    kinds: Counter[tuple[str, str]] = Counter()
    for d in corpus.dialogues:
        for t in d.turns:
            kinds[(t.kind, t.label)] += 1
            assert t.assistant, (d.id, t.user)
            if t.label == "proceed":
                assert t.steps and not t.missing
            else:
                assert not t.steps
            if t.label == "ask_user":
                assert t.missing and t.kind != "infeasible"
            if t.label == "no_suitable_tool":
                assert t.kind == "infeasible"
    # every kind of user move occurs, answers both complete and still incomplete
    assert {k for k, _ in kinds} == set(TURN_KINDS)
    for pair in [("answer", "proceed"), ("answer", "ask_user"), ("credentials", "proceed"),
                 ("credentials", "ask_user"), ("confirm", "proceed"), ("select", "proceed"),
                 ("correction", "proceed"), ("anaphora", "proceed"),
                 ("vague_request", "ask_user"), ("request", "ask_user")]:
        assert kinds[pair] >= 5, pair


def test_infeasible_requests_are_answered_without_tools_and_ask_user_turns_are_answered(
        corpus: Corpus) -> None:
    for d in corpus.dialogues:
        for i, t in enumerate(d.turns):
            if t.label == "ask_user":
                # the missing value is given later in the dialogue
                later = d.turns[i + 1]
                assert later.kind in ("answer", "credentials"), (d.id, i)


# ---------------------------------------------------------------------------- messages
def test_to_messages_answers_every_call_and_stops_at_the_decision_point(corpus: Corpus) -> None:
    d = next(x for x in corpus.dialogues if len(x.turns) >= 3
             and any(si > 0 for _, si, _ in x.steps()))
    full = to_messages(d)
    assert isinstance(full[0], SystemMessage)
    calls = [tc["id"] for m in full if isinstance(m, AIMessage) for tc in m.tool_calls]
    answers = [m.tool_call_id for m in full if isinstance(m, ToolMessage)]
    assert calls == answers == [s.call_id for _, _, s in d.steps()]
    for t in range(len(d.turns)):
        prefix = to_messages(d, turn=t)
        assert isinstance(prefix[-1], HumanMessage) and prefix[-1].content == d.turns[t].user
    ti, si, step = next((ti, si, s) for ti, si, s in d.steps() if si > 0)
    mid = to_messages(d, turn=ti, step=si)
    assert isinstance(mid[-1], ToolMessage)
    assert mid[-1].tool_call_id == d.turns[ti].steps[si - 1].call_id
    assert step.call_id not in [m.tool_call_id for m in mid if isinstance(m, ToolMessage)]
    with pytest.raises(IndexError):
        to_messages(d, turn=len(d.turns))


def test_abstain_marks_are_optional(corpus: Corpus) -> None:
    d = next(x for x in corpus.dialogues if any(t.label == "ask_user" for t in x.turns))
    marked = [m for m in to_messages(d, mark_abstains=True)
              if isinstance(m, AIMessage) and m.response_metadata.get("toolguard")]
    assert marked and all(m.response_metadata["toolguard"] in ("ask_user", "no_suitable_tool")
                          for m in marked)
    assert not [m for m in to_messages(d) if isinstance(m, AIMessage)
                and m.response_metadata.get("toolguard")]


# ---------------------------------------------------------------------------- pre-check cases
def test_dialogue_cases_one_per_turn_with_the_expected_label_per_subset() -> None:
    cases = load_dialogue_cases(seed=0, limit=4)
    corpus = build_corpus(seed=0, per_domain=4)
    assert len(cases) == sum(len(d.turns) for d in corpus.dialogues)
    expected: dict[str, set[str]] = {
        "dialogues_feasible_first_turn": {"proceed"}, "dialogues_feasible_followup": {"proceed"},
        "dialogues_ask_user": {"ask_user"}, "dialogues_no_suitable_tool": {"no_suitable_tool"}}
    by_subset: dict[str, set[str]] = {}
    for c in cases:
        by_subset.setdefault(c.subset, set()).add(c.expected)
        turn = int(re.search(r":turn(\d+):", c.id).group(1))  # type: ignore[union-attr]
        assert (c.subset == "dialogues_feasible_first_turn") == (
            turn == 0 and c.expected == "proceed")
        assert isinstance(c.messages[-1], HumanMessage)
        assert {t.name for t in c.tools} == {doc["name"] for doc in
                                             corpus.tools[c.id.split("-")[0]]}
    assert by_subset == expected
    assert set(by_subset) == set(SUBSETS)


def test_abstain_load_cases_and_score_take_the_dialogues_dataset() -> None:
    cases = abstain.load_cases("dialogues", limit=2)
    assert {c.subset for c in cases} <= set(SUBSETS)
    report = abstain.score(cases, [c.expected for c in cases])
    assert report["overall"]["accuracy"] == 100.0
    assert report["per_subset"]["dialogues_ask_user"]["f1"] == 100.0
    everything_proceeds = abstain.score(cases, ["proceed"] * len(cases))
    assert everything_proceeds["per_subset"]["dialogues_feasible_followup"]["accuracy"] == 100.0
    assert everything_proceeds["per_subset"]["dialogues_ask_user"]["f1"] == 0.0


def test_cli_eval_abstain_accepts_dialogues(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from toolguard_evals.cli import app

    out = tmp_path / "abstain.json"
    result = CliRunner().invoke(app, ["eval", "abstain", "--dataset", "dialogues", "--limit",
                                      "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["dataset"] == "dialogues"
    assert set(report["per_subset"]) >= {"dialogues_feasible_first_turn", "dialogues_ask_user"}
    bad = CliRunner().invoke(app, ["eval", "abstain", "--dataset", "nope"])
    assert bad.exit_code != 0


# ---------------------------------------------------------------------------- provenance
def test_sources_name_only_this_package_and_the_build_reads_no_files(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing comes from the data sets kept aside (API-Bank, FamilyTool's extended set):

    the corpus is generated from this package's templates and pools alone (building it
    opens no file), and its sources list says so.
    """
    assert SOURCES == ("toolguard_evals.dialogues (templates written for toolguard)",)

    def no_files(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the corpus build opened a file: {args[:1]}")

    monkeypatch.setattr(builtins, "open", no_files)
    monkeypatch.setattr(Path, "read_text", no_files)
    monkeypatch.setattr(Path, "open", no_files)
    c = build_corpus(seed=0, per_domain=2)
    assert c.sources == list(SOURCES)


def test_no_tool_name_or_query_text_is_shared_with_familytool(corpus: Corpus) -> None:
    path = SHARED_DATA / "familytool" / "familytool-b.jsonl"
    if not path.is_file():
        pytest.skip(f"FamilyTool base set not found at {path}")
    names, shingles = set(), set()
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        for m in record:
            if m["role"] == "candidate_tools":
                names |= {t["name"].casefold() for t in m["content"]}
            if m["role"] == "user":
                words = re.findall(r"[a-z']+", m["content"].casefold())
                shingles |= {" ".join(words[i:i + 6]) for i in range(len(words) - 5)}
    ours = {t["name"].casefold() for docs in corpus.tools.values() for t in docs}
    assert names and not ours & names
    for d in corpus.dialogues:
        for t in d.turns:
            words = re.findall(r"[a-z']+", t.user.casefold())
            assert not {" ".join(words[i:i + 6]) for i in range(len(words) - 5)} & shingles
