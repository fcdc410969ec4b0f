"""Suite B: labelled hallucinated calls from the dialogues, RelyToolBench and CRITICTOOL."""

from __future__ import annotations

import json
import os
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from toolguard.specs import ToolSpec
from toolguard_evals import detector_suite as ds
from toolguard_evals import suite_b as sb
from toolguard_evals.detector_suite.values import date_said
from toolguard_evals.dialogues import build_corpus, domain
from toolguard_evals.dialogues.framework import numbers_in

SHARED_DATA = Path(os.environ.get("TOOLGUARD_DATA_DIR",
                           Path(__file__).resolve().parents[2] / "shared" / "data"))
if not (SHARED_DATA / "relytoolbench").is_dir() or not (SHARED_DATA / "critictool").is_dir():
    pytest.skip(f"RelyToolBench/CRITICTOOL data not found in {SHARED_DATA}",
                allow_module_level=True)


@pytest.fixture(scope="module")
def suite() -> sb.SuiteB:
    return sb.build(seed=0, data_dir=SHARED_DATA)


def _texts(case: ds.Case) -> str:
    """Everything an invented value must be absent from: messages, earlier calls, tool docs."""
    out = [json.dumps(case.tools, ensure_ascii=False)]
    for m in case.messages[:-1]:
        out.append(str(m.content))
        if isinstance(m, AIMessage):
            out += [json.dumps(tc["args"], ensure_ascii=False) for tc in m.tool_calls]
    return "\n".join(out).casefold()


def _validator(case: ds.Case, name: str) -> Draft202012Validator:
    doc = next(d for d in case.tools if d["name"] == name)
    return Draft202012Validator(ToolSpec.from_bfcl(doc).parameters)


def _call(case: ds.Case) -> tuple[str, dict[str, Any]]:
    tc = case.calls[0]
    return tc["name"], dict(tc["args"])


def _gold(suite: sb.SuiteB, case: ds.Case) -> tuple[str, dict[str, Any]]:
    """The gold call the perturbed case was made from."""
    record = case.id.rsplit(":", 1)[0]
    if case.category.startswith("dialogues:"):
        did, step = record.split("@")
        d = _corpus().dialogues[_dialogue_index(did)]
        s = d.steps()[int(step)][2]
        return s.name, dict(s.args)
    gold = next(c for c in suite.cases if c.id == f"{record}:gold")
    return _call(gold)


_CORPUS: list[Any] = []


def _corpus() -> Any:
    if not _CORPUS:
        _CORPUS.append(build_corpus(seed=0))
    return _CORPUS[0]


def _dialogue_index(did: str) -> int:
    return next(i for i, d in enumerate(_corpus().dialogues) if d.id == did)


# ---------------------------------------------------------------------------- shape
def test_same_seed_same_cases_and_records_do_not_depend_on_the_limit() -> None:
    a = sb.build(seed=1, limit=3, data_dir=SHARED_DATA)
    b = sb.build(seed=1, limit=3, data_dir=SHARED_DATA)
    assert [c.model_dump_json() for c in a.cases] == [c.model_dump_json() for c in b.cases]
    bigger = {c.id: c for c in sb.build(seed=1, limit=5, sources=("dialogues",)).cases}
    for c in a.cases:
        if c.category.startswith("dialogues:"):
            assert bigger[c.id].model_dump_json() == c.model_dump_json()
    other = sb.build(seed=2, limit=3, sources=("dialogues",))
    assert [c.id for c in other.cases] != [c.id for c in a.cases if
                                            c.category.startswith("dialogues")]


def test_labels_targets_and_categories(suite: sb.SuiteB) -> None:
    ids = [c.id for c in suite.cases]
    assert len(ids) == len(set(ids))
    cats = Counter(c.category.split(":")[0] for c in suite.cases)
    assert set(cats) == {"dialogues", "toolbench", "critictool"}
    doms = {c.category.split(":")[1] for c in suite.cases if c.category.startswith("dialogues")}
    assert len(doms) >= 8
    for c in suite.cases:
        assert c.label == ds.PERTURBATION_LABELS[c.perturbation]
        assert (c.target is None) == (c.label is None)
        assert c.tools_key == ds.tools_key(c.tools)
        assert len(c.calls) == 1 and isinstance(c.messages[-1], AIMessage)


def test_a_few_thousand_cases_with_at_least_200_per_class(suite: sb.SuiteB) -> None:
    assert 3000 <= len(suite.cases) <= 12000
    per_class = Counter(c.score_class or "clean" for c in suite.cases)
    for cls in (*ds.SCORE_CLASSES, "clean"):
        assert per_class[cls] >= 200, (cls, per_class)
    per = Counter(c.perturbation for c in suite.cases)
    assert set(per) == set(ds.PERTURBATION_LABELS)
    assert per["gold"] >= 200 and per["next_call"] >= 200


def test_every_history_answers_its_calls_with_unique_ids(suite: sb.SuiteB) -> None:
    for c in suite.cases:
        asked = [tc["id"] for m in c.messages[:-1] if isinstance(m, AIMessage)
                 for tc in m.tool_calls]
        answered = [m.tool_call_id for m in c.messages if isinstance(m, ToolMessage)]
        assert asked == answered, c.id
        target_id = c.calls[0]["id"]
        assert target_id not in asked, c.id


# ---------------------------------------------------------------------------- clean cases
def test_gold_and_next_calls_validate_and_come_from_the_source(suite: sb.SuiteB) -> None:
    corpus = _corpus()
    by_id = {d.id: d for d in corpus.dialogues}
    for c in suite.cases:
        if c.label is not None:
            continue
        name, args = _call(c)
        assert list(_validator(c, name).iter_errors(args)) == [], c.id
        if c.category.startswith("dialogues:"):
            did, k = c.id.rsplit(":", 1)[0].split("@")
            step = by_id[did].steps()[int(k)][2]
            assert (name, args) == (step.name, step.args)
            assert c.calls[0]["id"] == step.call_id
            # the history is the real conversation up to that call
            results = [m.content for m in c.messages if isinstance(m, ToolMessage)]
            earlier = [s.result for _, _, s in by_id[did].steps()[: int(k)]]
            assert results == earlier
            assert (c.perturbation == "gold") == (int(k) == 0)


def test_toolbench_gold_values_are_quoted_in_the_query(suite: sb.SuiteB) -> None:
    golds = [c for c in suite.cases if c.category == "toolbench" and c.perturbation == "gold"]
    assert len(golds) >= 150
    for c in golds:
        query = str(c.messages[0].content).casefold()
        for v in c.calls[0]["args"].values():
            assert str(v).casefold() in query, (c.id, v)
    skipped = suite.skipped["toolbench"]
    assert 0 < len(skipped) < 348 and len(golds) + len(skipped) == 348
    assert all(reason for reason in skipped.values())


def test_critictool_cases_cover_every_api_and_mix_toolkits_of_other_purposes(
        suite: sb.SuiteB) -> None:
    docs = sb.critictool_docs(SHARED_DATA / "critictool" / "api_descrip.json")
    apis = {d["name"] for kit in docs.values() for d in kit}
    golds = [c for c in suite.cases if c.category == "critictool" and c.perturbation == "gold"]
    assert {c.calls[0]["name"] for c in golds} == apis
    for c in golds:
        kits = {t["name"].split(".")[0] for t in c.tools}
        assert len(kits) == 3
        purposes = [sb._CT_PURPOSE.get(k) for k in kits if sb._CT_PURPOSE.get(k)]
        assert len(purposes) == len(set(purposes)), c.id
        query = str(c.messages[0].content).casefold()
        for v in c.calls[0]["args"].values():
            if not isinstance(v, bool):
                assert str(v).casefold() in query, (c.id, v)


# ---------------------------------------------------------------------------- perturbations
def test_type_and_format_perturbations_break_what_they_say(suite: sb.SuiteB) -> None:
    for c in suite.cases:
        name, args = _call(c)
        names = {t["name"] for t in c.tools}
        if c.perturbation == "fabricated":
            assert name not in names
            assert name.casefold() not in {n.casefold() for n in names}
        elif c.perturbation == "irrelevant_tool":
            gold_name, _ = _gold(suite, c)
            assert name in names and name != gold_name
            assert list(_validator(c, name).iter_errors(args)) == []
            earlier = {(tc["name"], json.dumps(tc["args"], sort_keys=True))
                       for m in c.messages[:-1] if isinstance(m, AIMessage)
                       for tc in m.tool_calls}
            assert (name, json.dumps(args, sort_keys=True)) not in earlier
            if c.category.startswith("dialogues:"):
                dom = domain(c.category.split(":")[1])
                assert dom.tool(name).group != dom.tool(gold_name).group, c.id
        elif c.perturbation == "drop_required":
            required = next(t for t in c.tools if t["name"] == name)["parameters"]["required"]
            assert c.metadata["key"] in required and c.metadata["key"] not in args
        elif c.perturbation == "rename_key":
            props = next(t for t in c.tools if t["name"] == name)["parameters"]["properties"]
            assert c.metadata["new_key"] in args and c.metadata["new_key"] not in props
        elif c.perturbation == "wrong_type":
            errors = _validator(c, name).iter_errors(args)
            assert any(e.validator == "type" for e in errors), c.id


_STRUCTURAL = {"http", "https", "www", "com", "org", "net", "example", "pdf", "docx", "xlsx",
               "pptx", "jpg", "png", "zip", "txt", "csv", "json", "html", "the", "and"}


def test_invented_values_appear_nowhere_in_the_conversation(suite: sb.SuiteB) -> None:
    cases = [c for c in suite.cases if c.perturbation == "invented_value"]
    kinds = Counter(c.metadata["kind"] for c in cases)
    for kind in ("username", "password", "secret", "identifier", "code", "email", "url",
                 "address", "formula", "keyword", "person", "location", "date", "title",
                 "free_text", "time"):
        assert kinds[kind] >= 10, (kind, kinds)
    for c in cases:
        text = _texts(c)
        compact = "".join(ch for ch in text if ch.isalnum())
        fact = str(c.metadata["invented"])
        low = fact.casefold()
        assert low and low not in text, c.id
        assert "".join(ch for ch in low if ch.isalnum()) not in compact, c.id
        keep = {k.casefold() for k in c.metadata.get("keep", [])}
        for tok in re.findall(r"[a-z0-9]+", low):
            if len(tok) >= 3 and tok not in _STRUCTURAL and tok not in keep:
                assert tok not in text, (c.id, tok)
        assert fact in json.dumps(c.calls[0]["args"], ensure_ascii=False)
        name, args = _call(c)
        _, gold_args = _gold(suite, c)
        key = str(c.metadata["key"]).split("[")[0]
        assert args[key] != gold_args[key]
        assert {k: v for k, v in args.items() if k != key} == \
            {k: v for k, v in gold_args.items() if k != key}
        assert list(_validator(c, name).iter_errors(args)) == [], c.id


def test_invented_numbers_are_never_stated(suite: sb.SuiteB) -> None:
    cases = [c for c in suite.cases if c.perturbation == "invented_number"]
    assert len(cases) >= 100
    for c in cases:
        new = c.metadata["new"]
        assert isinstance(new, int | float) and new != c.metadata["old"]
        assert float(new) not in numbers_in(_texts(c)), c.id


def test_repeats_follow_a_success_with_only_reads_in_between(suite: sb.SuiteB) -> None:
    cases = [c for c in suite.cases if c.perturbation == "repeat"]
    assert len(cases) >= 200
    effects = {dom: eff for dom, eff in _corpus().effects.items()}
    assert {c.metadata["effect"] for c in cases} == {"harmful", "harmless"}
    for c in cases:
        name, args = _call(c)
        msgs: list[BaseMessage] = c.messages[:-1]
        pos = max(i for i, m in enumerate(msgs) if isinstance(m, AIMessage) and any(
            tc["name"] == name and tc["args"] == args for tc in m.tool_calls))
        answer = msgs[pos + 1]
        assert isinstance(answer, ToolMessage) and answer.status == "success"
        assert "error" not in json.loads(str(answer.content))
        between = [tc["name"] for m in msgs[pos + 2:] if isinstance(m, AIMessage)
                   for tc in m.tool_calls]
        dom = c.category.split(":")[1]
        assert all(effects[dom][n] == "read" for n in between), c.id
        assert not any(isinstance(m, HumanMessage) for m in msgs[pos + 2:]), c.id
        if effects[dom][name] == "read":
            assert c.metadata["effect"] == "harmless", c.id


# ---------------------------------------------------------------------------- helpers
def test_absent_rejects_partial_tokens_and_accepts_new_values() -> None:
    g = ds.Grounding.of(["My username is JaneSmith and my order is ORD-48213."])
    assert not ds.absent("jane", g)  # part of another value
    assert not ds.absent("JaneSmith", g)
    assert not ds.absent("ORD-48213", g)
    assert not ds.absent("Jane Smith", g)
    assert ds.absent("quillmoth", g)
    assert ds.absent("ORD-77105", g, keep=("ORD",))
    assert not ds.absent("ORD-77105", g)  # "ord" would be a shared token


def test_invented_dates_and_times_are_not_said_in_words() -> None:
    g = ds.Grounding.of(["Today is Monday, 2026-03-02.", "Book it for March 9 at 2 pm."],
                        today=__import__("datetime").date(2026, 3, 2))
    rng = random.Random(0)
    for _ in range(30):
        made = ds.invent_value("date", "date", "2026-03-09", g, rng)
        assert made is not None and made.value != "2026-03-09"
        day = __import__("datetime").date.fromisoformat(made.value)
        assert not date_said(day, g)
        t = ds.invent_value("time", "start_time", "14:00", g, rng)
        assert t is not None and t.value not in ("14:00", "02:00")


def test_toolbench_derivation_needs_confident_values() -> None:
    spec = ToolSpec.from_toolbench({
        "tool_name": "Kick", "api_name": "Channel", "api_description": "",
        "required_parameters": [{"name": "channel_name", "type": "STRING",
                                 "default": "gmhikaru"}], "optional_parameters": []})
    api = {"required_parameters": [{"name": "channel_name", "type": "STRING",
                                    "default": "gmhikaru"}]}
    ok = sb.derive_toolbench_call("Show the channel 'gmhikaru' please", api, spec)
    assert ok == ({"channel_name": "gmhikaru"}, {"channel_name": "example value in the query"})
    assert isinstance(sb.derive_toolbench_call("Show me a channel", api, spec), str)
    quoted = sb.derive_toolbench_call("Show the channel 'xqcow'", api, spec)
    assert quoted == ({"channel_name": "xqcow"}, {"channel_name": "the query's quoted value"})


def test_the_bfcl_scorer_runs_on_suite_b() -> None:
    small = sb.build(seed=0, limit=2, data_dir=SHARED_DATA)
    report = ds.run_suite(small.cases, ds.guard_factory("deterministic"))
    assert report["cases"] == len(small.cases)
    assert set(report["per_type"]) == set(ds.SCORE_CLASSES)
    assert report["per_type"]["type"]["recall"] == 1.0  # unknown names are always caught
    assert {"dialogues", "toolbench", "critictool"} <= {
        cat.split(":")[0] for cat in report["per_category"]}
