"""The learned verifier's training data: labels from gold, and no evaluation request in it.

Needs ``bfcl-eval`` (BFCL's data) and the shared RelyToolBench / CRITICTOOL data.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

pytest.importorskip("bfcl_eval", reason="needs bfcl-eval (pip install --no-deps bfcl-eval)")

from toolguard.verifier import SLOT_PREFIX, TOOL_FIT_PREFIX
from toolguard_evals.dialogues.corpus import domains
from toolguard_evals.verifier.data import (
    DEV_PERCENT,
    EVAL_DOMAINS,
    NEITHER_BFCL,
    TRAIN_DOMAINS,
    Example,
    delete_mention,
    evaluation_requests,
    neither_examples,
    normalise,
    request_id,
    source_split,
    split_of,
    stated,
    training_examples,
    user_side,
)


@functools.cache
def _full() -> tuple[Example, ...]:
    return tuple(training_examples("full"))


def test_split_of_every_source() -> None:
    assert {d.name for d in domains()} == set(TRAIN_DOMAINS) | set(EVAL_DOMAINS)
    assert len(TRAIN_DOMAINS) == 6 and len(EVAL_DOMAINS) == 5
    assert not set(TRAIN_DOMAINS) & set(EVAL_DOMAINS)
    for dom in TRAIN_DOMAINS:
        assert source_split(f"dialogues:{dom}") == "train"
    for dom in EVAL_DOMAINS:
        assert source_split(f"dialogues:{dom}") == "eval"
    for cat in ("simple_python", "multiple", "parallel", "parallel_multiple",
                "multi_turn_base", "multi_turn_miss_param", "multi_turn_miss_func"):
        assert source_split(f"bfcl:{cat}") == "train"
    for cat in ("live_simple", "live_multiple", "live_irrelevance", "irrelevance"):
        assert source_split(f"bfcl:{cat}") == "eval"
    for suffix in ("", "_missing_all_arguments", "_with_unmatched_tools"):
        assert source_split(f"rtb:G1_instruction{suffix}") == "train"
        assert source_split(f"rtb:G2_category{suffix}") == "eval"
        assert source_split(f"rtb:G3_instruction{suffix}") == "none"
    for cat in NEITHER_BFCL:
        assert source_split(f"bfcl:{cat}") == "none"
    assert source_split("critictool:docs") == "train"
    with pytest.raises(ValueError, match="unknown source"):
        source_split("apibank:level-1")


def test_dev_split_is_by_request_and_stable() -> None:
    ids = [f"simple_python_{i}" for i in range(2000)]
    dev = [i for i in ids if split_of("bfcl:simple_python", i) == "dev"]
    assert abs(len(dev) / len(ids) * 100 - DEV_PERCENT) < 3
    assert dev == [i for i in ids if split_of("bfcl:simple_python", i) == "dev"]
    assert split_of("bfcl:live_simple", "live_simple_0") == "eval"  # never dev


def test_variants_of_one_request_share_a_split() -> None:
    assert request_id("bfcl:multi_turn_miss_param", "multi_turn_miss_param_5") == \
        request_id("bfcl:multi_turn_base", "multi_turn_base_5") == "multi_turn:5"
    assert request_id("rtb:G1_instruction_with_unmatched_tools",
                      "G1_instruction_with_unmatched_tools:86143") == "G1_instruction:86143"
    assert request_id("bfcl:simple_python", "simple_python_7") == "simple_python_7"
    # one text, one split: the same query in Original and Unmatched Tools, the same BFCL
    # multi-turn question in base / miss_param / miss_func
    by_text: dict[str, set[str]] = {}
    for e in _full():
        if e.source.startswith(("rtb:", "bfcl:multi_turn")):
            by_text.setdefault(e.request_text, set()).add(e.split)
    assert len(by_text) > 1000
    assert all(len(s) == 1 for s in by_text.values())


def test_no_evaluation_request_reaches_training() -> None:
    examples = _full()
    held = evaluation_requests()
    assert len(held) > 2500  # BFCL live + irrelevance, RTB G2, five dialogue domains
    assert {e.request_text for e in examples} & held == set()
    assert {e.split for e in examples} == {"train", "dev"}
    assert {source_split(e.source) for e in examples} == {"train"}
    assert not any(e.source.startswith(("rtb:G2", "rtb:G3")) for e in examples)
    assert {e.source.split(":")[1] for e in examples if e.source.startswith("dialogues:")} \
        == set(TRAIN_DOMAINS)
    # a conversation is in one split: examples of one request never straddle train and dev
    splits: dict[str, set[str]] = {}
    for e in examples:
        splits.setdefault(e.request_id, set()).add(e.split)
    assert all(len(s) == 1 for s in splits.values())


def test_the_calibration_set_of_unseen_tools_is_neither_trained_on_nor_evaluation_only(
) -> None:
    """``neither_examples``: BFCL's unused categories and RelyToolBench G3, both labels."""
    unseen = neither_examples()
    assert {e.split for e in unseen} == {"none"}
    assert {e.source for e in unseen} == {
        *(f"bfcl:{c}" for c in NEITHER_BFCL),
        *(f"rtb:G3_instruction{s}" for s in ("", "_missing_all_arguments",
                                            "_with_unmatched_tools"))}
    assert {e.request_text for e in unseen} & evaluation_requests() == set()
    assert {e.request_text for e in unseen} & {e.request_text for e in _full()} == set()
    for kind in ("tool_fit", "slot"):
        assert {e.label for e in unseen if e.kind == kind} == {0, 1}
    # as BFCL gives them, Java and JavaScript arguments are strings; the description names
    # the language's type (HashMap, Bigint), which JSON Schema does not know
    for source, language in (("bfcl:simple_java", "Java"),
                             ("bfcl:simple_javascript", "JavaScript")):
        tools = [e.tool for e in unseen if e.source == source]
        assert {p["type"] for t in tools for p in t.properties.values()} == {"string"}
        assert all(f" {language} " in p["description"] and
                   p["description"].endswith(", in string form)")
                   for t in tools for p in t.properties.values())
    assert any("(a Java HashMap, in string form)" in p["description"] for e in unseen
               if e.source == "bfcl:simple_java" for p in e.tool.properties.values())
    # a limit reads a few records per file
    few = neither_examples(limit=3)
    assert 0 < len(few) < len(unseen) / 10


def test_every_rule_labels_examples_of_both_kinds() -> None:
    examples = _full()
    rules = {(e.kind, e.rule, e.label) for e in examples}
    assert rules >= {
        ("tool_fit", "gold_call", 1), ("tool_fit", "distractor", 0),
        ("tool_fit", "swapped_in", 0), ("tool_fit", "unmatched_tools", 0),
        ("tool_fit", "other_environment", 0), ("tool_fit", "other_domain", 0),
        ("tool_fit", "infeasible", 0), ("tool_fit", "critictool_doc", 0),
        ("slot", "stated", 1), ("slot", "derived", 1), ("slot", "answerable", 1),
        ("slot", "value_deleted", 0), ("slot", "missing_rewrite", 0),
        ("slot", "miss_param", 0), ("slot", "ask_user", 0),
    }
    for e in examples[::97]:
        query, doc = e.pair()
        assert query.startswith(TOOL_FIT_PREFIX if e.kind == "tool_fit" else SLOT_PREFIX)
        assert doc
        if e.kind == "slot":  # miss_param: the value BFCL removed, required or not
            assert e.parameter in (e.tool.properties if e.rule == "miss_param"
                                   else e.tool.required)


def test_value_deletion_takes_the_value_out_of_the_request() -> None:
    examples = _full()
    deleted = [e for e in examples if e.rule == "value_deleted"]
    assert len(deleted) > 500
    for e in deleted[:200]:
        twin = next(s for s in examples if s.rule == "stated" and s.request_id == e.request_id
                    and s.tool.name == e.tool.name and s.parameter == e.parameter)
        assert e.label == 0 and twin.label == 1
        assert user_side(e.messages) != user_side(twin.messages)
        assert len(user_side(e.messages)) < len(user_side(twin.messages))


def test_real_bfcl_record_labels() -> None:
    examples = [e for e in _full() if e.request_id == "simple_python_0"]
    fit = {(e.tool.name, e.label, e.rule) for e in examples if e.kind == "tool_fit"}
    assert ("calculate_triangle_area", 1, "gold_call") in fit
    assert any(label == 0 and rule == "swapped_in" for _, label, rule in fit)
    slots = {(e.parameter, e.label, e.rule): e for e in examples if e.kind == "slot"}
    assert ("base", 1, "stated") in slots and ("height", 1, "stated") in slots
    gone = slots[("base", 0, "value_deleted")].messages[-1]
    assert isinstance(gone, HumanMessage) and "10" not in str(gone.content)
    assert "5 units" in str(gone.content)


def test_stated_and_delete_mention() -> None:
    text = "Book 2 rooms in Paris for 10.5 EUR on 2026-05-01, guests: Ann, Bob."
    assert stated("paris", text) is True
    assert stated("Par", text) is False  # whole tokens only
    assert stated(2, text) is True and stated(2.0, text) is True
    assert stated(10.5, text) is True and stated(10, text) is False
    assert stated(["Ann", "Bob"], text) is True and stated(["Ann", "Eve"], text) is False
    assert stated(True, text) is None and stated({"a": 1}, text) is None
    assert delete_mention("Paris", text) == ("Book 2 rooms in for 10.5 EUR on 2026-05-01, "
                                             "guests: Ann, Bob.")
    assert delete_mention(5, "5 by 5") is None  # two mentions: not a clean deletion
    assert normalise("  Hello,  World!") == "hello world"


def _digest(examples: Sequence[Example]) -> str:
    text = "\n".join(f"{e.source}|{e.rule}|{e.split}|{e.label}|{e.pair()}" for e in examples)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_training_examples_do_not_depend_on_the_hash_seed() -> None:
    """The data and its order are fixed by the seed alone: another process, another
    ``PYTHONHASHSEED``, the same examples."""
    code = ("import sys; from toolguard_evals.verifier.data import "
            "training_examples; sys.path.insert(0, 'tests'); "
            "from test_verifier_data import _digest; "
            "print(_digest(training_examples('full')))")
    seeds = {"0", "1"} - {os.environ.get("PYTHONHASHSEED")}
    for seed in sorted(seeds):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}, check=True,
                              cwd=Path(__file__).resolve().parents[1])
        assert done.stdout.strip().splitlines()[-1] == _digest(_full()), seed
