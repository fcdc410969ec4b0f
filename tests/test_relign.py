"""Relign kit without training libraries: synthesis, overlap guards, pairs, parsing, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from toolguard_evals.relign.chat_format import (
    CHANGE_TOOLS_ANSWER,
    finish_message,
    parse_completion,
    prompt_messages,
    tools_with_finish,
)
from toolguard_evals.relign.config import PRESETS, SIZES, RelignConfig, preset
from toolguard_evals.relign.pairs import Sorted, build_pairs, classify, give_up_message
from toolguard_evals.relign.run import (
    STAGE_INPUTS,
    STAGE_SETTINGS,
    STAGES,
    Runner,
    StageMismatchError,
)
from toolguard_evals.relign.synth import (
    SourceSample,
    SynthRecord,
    bfcl_samples,
    build_record,
    check_no_overlap,
    eval_queries,
    normalize,
    read_toolbench,
    remove_values,
    synthesize,
    unstated_optional,
)
from toolguard_evals.relign.training import StageResult

RTB = Path(__file__).resolve().parents[2] / "shared" / "data" / "relytoolbench"
needs_rtb = pytest.mark.skipif(not RTB.is_dir(), reason="../shared/data/relytoolbench missing")


@pytest.fixture(scope="module")
def samples() -> list[SourceSample]:
    pytest.importorskip("bfcl_eval")
    return bfcl_samples()


def _target(record: SynthRecord) -> dict:
    return record.messages[2]["tool_calls"][0]["function"]


# ---------------------------------------------------------------------------- synthesis
def test_synthesis_splits_4_3_3_with_the_right_targets(samples: list[SourceSample]) -> None:
    records, report = synthesize(samples, sft_examples=40, dpo_prompts=10, seed=3,
                                 answer_share=0.5)
    assert report.counts == {"sft": {"original": 16, "change_tools": 12, "talk_to_user": 12},
                             "dpo": {"original": 4, "change_tools": 3, "talk_to_user": 3}}
    assert Counter(r.split for r in records) == {"sft": 40, "dpo": 10}
    assert len({r.id.split("#")[0] for r in records}) == 50  # each source sample used once
    by_id = {s.id: s for s in samples}
    for r in records:
        src = by_id[r.id.split("#")[0]]
        target = _target(r)
        names = [t["function"]["name"] for t in r.tools]
        assert names[-1] == "Finish" and r.messages[0]["role"] == "system"
        assert r.messages[1]["content"].endswith("Begin!\n")
        if r.kind == "original":
            assert target == {"name": src.call[0], "arguments": src.call[1]}
            assert r.gold == {"name": src.call[0], "arguments": src.call[1]}
            assert r.query == src.query
            if len(r.messages) > 3:  # continuation: tool answer, then Finish(give_answer)
                assert r.messages[3]["role"] == "tool"
                assert _last_call(r)["arguments"]["return_type"] == "give_answer"
        elif r.kind == "change_tools":
            assert target["name"] == "Finish"
            assert target["arguments"] == {"return_type": "give_up_and_change_tools",
                                           "final_answer": CHANGE_TOOLS_ANSWER}
            assert src.call[0] not in names  # the gold tool is gone
            assert not {f["name"] for f in src.functions} & set(names)
        else:
            assert target["arguments"]["return_type"] == "give_up_and_talk_to_user"
            assert r.missing
            for name in r.missing:  # the question names what is missing ...
                assert f"'{name}'" in target["arguments"]["final_answer"]
                value = str(src.call[1][name])  # ... and its value left the request
                assert normalize(value) not in normalize(r.query).split() or \
                    len(normalize(value).split()) > 1
            assert r.query != src.query
    assert sum(len(r.messages) > 3 for r in records if r.split == "sft") > 0
    assert all(len(r.messages) == 3 for r in records if r.split == "dpo")


def test_dpo_twins_pair_each_removed_value_prompt_with_its_unchanged_source(
        samples: list[SourceSample]) -> None:
    plain, plain_report = synthesize(samples, sft_examples=40, dpo_prompts=20, seed=3)
    twins, report = synthesize(samples, sft_examples=40, dpo_prompts=20, seed=3,
                               dpo_twins=True)
    assert report.counts == plain_report.counts  # the same 4 : 3 : 3 quotas
    assert [r for r in twins if r.split == "sft"] == [r for r in plain if r.split == "sft"]
    dpo = [r for r in twins if r.split == "dpo"]
    asks = [r for r in dpo if r.kind == "talk_to_user"]
    originals = {r.id.split("#")[0]: r for r in dpo if r.kind == "original"}
    assert len(asks) == 6 and len(originals) == 8
    for ask in asks:  # each ask has its twin: the same request with its values
        twin = originals[ask.id.split("#")[0]]
        assert twin.tools == ask.tools and twin.query != ask.query
        assert twin.gold is not None and set(ask.missing) <= set(twin.gold["arguments"])
    plain_dpo = [r for r in plain if r.split == "dpo"]
    shared = {r.id.split("#")[0] for r in plain_dpo if r.kind == "talk_to_user"}
    assert not shared & {r.id.split("#")[0] for r in plain_dpo if r.kind == "original"}


def _last_call(record: SynthRecord) -> dict:
    return record.messages[-1]["tool_calls"][0]["function"]


def test_synthesis_is_reproducible_and_respects_ratios(samples: list[SourceSample]) -> None:
    a, _ = synthesize(samples, sft_examples=10, dpo_prompts=0, seed=1)
    b, _ = synthesize(samples, sft_examples=10, dpo_prompts=0, seed=1)
    assert [r.to_json() for r in a] == [r.to_json() for r in b]
    assert Counter(r.kind for r in a) == {"original": 4, "change_tools": 3, "talk_to_user": 3}
    _, rep = synthesize(samples, sft_examples=10, dpo_prompts=0, seed=1, ratios=(1, 0, 0))
    assert rep.counts["sft"] == {"original": 10, "change_tools": 0, "talk_to_user": 0}
    with pytest.raises(ValueError, match="sum to 1"):
        synthesize(samples, sft_examples=10, dpo_prompts=0, ratios=(0.5, 0.5, 0.5))


def test_length_filter_drops_long_records(samples: list[SourceSample]) -> None:
    def length(messages: object, tools: list) -> int:
        return len(json.dumps(tools))

    records, report = synthesize(samples, sft_examples=10, dpo_prompts=0, length=length,
                                 max_length=2000)
    assert report.dropped_length > 0
    assert all(len(json.dumps(r.tools)) <= 2000 for r in records)


def test_remove_values_deletes_like_missing_parameter() -> None:
    query, removed = remove_values(
        "I'm a fan of the streamer 'gmhikaru' on Kick.com and want clips.",
        {"username": "gmhikaru", "limit": 10})
    assert query == "I'm a fan of the streamer on Kick.com and want clips."
    assert removed == ["username"]
    query, removed = remove_values("Area of a triangle with base 10 and height 5?",
                                   {"base": 10, "height": 5})
    assert query == "Area of a triangle with base and height?"
    assert removed == ["base", "height"]
    assert remove_values("base 100", {"base": 10}) == ("base 100", [])  # whole words only


def test_build_record_talk_to_user_needs_a_value_in_the_request() -> None:
    sample = SourceSample(id="x:1", source="x", query="Weather please",
                          functions=({"name": "weather", "description": "",
                                      "parameters": {"type": "object",
                                                     "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}},),
                          call=("weather", {"city": "Paris"}))
    assert build_record(sample, "talk_to_user", split="sft") is None
    with pytest.raises(ValueError, match="replacement"):
        build_record(sample, "change_tools", split="sft")


def test_a_gold_call_sends_only_the_optional_values_the_request_states(
        samples: list[SourceSample]) -> None:
    record = {"function": [{"name": "museum.hours", "parameters": {
                  "type": "dict", "required": ["museum"],
                  "properties": {"museum": {"type": "string"}, "day": {"type": "string"},
                                 "lang": {"type": "string"}, "year": {"type": "integer"},
                                 "full": {"type": "boolean"}}}}],
              "ground_truth": [{"museum.hours": {"museum": ["Louvre"], "day": ["", "Monday"],
                                                 "lang": ["English", ""], "year": ["", 2023],
                                                 "full": [False, ""]}}]}
    assert unstated_optional(record, "Open hours of the Louvre?") == ["day", "lang", "year",
                                                                      "full"]
    assert unstated_optional(record, "Louvre hours on monday, in English, for 2023?") == [
        "full"]
    assert unstated_optional(record, "Louvre hours in 20234") == ["day", "lang", "year", "full"]
    # the real sources: no target fills in a value BFCL lets be left out and nobody gave
    from toolguard_evals.bfcl import load_category
    by_id = {f"{c}:{r['id']}": r for c in ("simple_python", "multiple") for r in load_category(c)}
    kept = dropped = 0
    for sample in samples:
        ((_, params),) = by_id[sample.id]["ground_truth"][0].items()
        left_out = unstated_optional(by_id[sample.id], sample.query)
        assert not set(left_out) & set(sample.call[1]), sample.id
        dropped += bool(left_out)
        kept += any("" in params.get(k, []) for k in sample.call[1])
    assert dropped > 100 and kept > 10  # both cases occur (180 and 65 of 600 when written)


# ---------------------------------------------------------------------------- no overlap
def test_training_sources_exclude_evaluated_sets() -> None:
    with pytest.raises(ValueError, match="simple_python"):
        RelignConfig(bfcl_sources=("irrelevance",))  # type: ignore[arg-type]
    pytest.importorskip("bfcl_eval")
    with pytest.raises(ValueError, match="may not be trained on"):
        bfcl_samples(["live_irrelevance"])


@needs_rtb
def test_no_overlap_between_training_records_and_evaluated_sets(
        samples: list[SourceSample]) -> None:
    evaluated = eval_queries(RTB)
    from toolguard_evals.bfcl import load_category
    from toolguard_evals.relytoolbench.data import load_relytoolbench

    cases = load_relytoolbench(RTB)
    assert len(cases) == 958
    assert all(normalize(c.query) in evaluated for c in cases)
    irr = load_category("irrelevance")
    assert normalize(irr[0]["question"][0][0]["content"]) in evaluated
    records, _ = synthesize(samples, sft_examples=300, dpo_prompts=30,
                                 evaluated=evaluated)
    assert not any(normalize(r.query) in evaluated for r in records)
    assert {r.source for r in records} <= {"simple_python", "multiple"}
    # a record whose request is an evaluated query is refused
    case = cases[0]
    leaked = SynthRecord(id="leak", kind="original", source="toolbench", query=case.query,
                         messages=prompt_messages(case.query, []), tools=tools_with_finish([]))
    with pytest.raises(ValueError, match="overlap an evaluated set"):
        check_no_overlap([*records[:3], leaked], evaluated)
    # and dropped before the split when it comes from a source
    src = SourceSample(id="tb:1", source="tb", query=case.query,
                       functions=samples[0].functions, call=samples[0].call)
    _, rep = synthesize([src, *samples[:50]], sft_examples=10, dpo_prompts=0,
                        evaluated=evaluated)
    assert rep.dropped_overlap >= 1


def test_read_toolbench_both_forms(tmp_path: Path) -> None:
    fn = {"name": "get_price_for_shop", "description": "price of an item",
          "parameters": {"type": "object", "properties": {"item": {"type": "string"}},
                         "required": ["item"], "optional": []}}
    conv = {"id": "q1", "conversations": [
        {"from": "system", "value": "You are AutoGPT ...\nSpecifically, you have access to "
                                    "the following APIs: " + json.dumps([fn])},
        {"from": "user", "value": "\nHow much is the lamp?\nBegin!\n"},
        {"from": "assistant", "value": "\nThought: look it up\nAction: get_price_for_shop\n"
                                       "Action Input: {\"item\": \"lamp\"}"},
        {"from": "function", "value": "{\"price\": 3}"}]}
    plain = {"query": "Price of the chair?", "functions": [fn],
             "call": {"name": "get_price_for_shop", "arguments": {"item": "chair"}}}
    path = tmp_path / "toolbench.jsonl"
    path.write_text(json.dumps(conv) + "\n" + json.dumps(plain) + "\n", encoding="utf-8")
    out = read_toolbench(path)
    assert [s.query for s in out] == ["How much is the lamp?", "Price of the chair?"]
    assert out[0].call == ("get_price_for_shop", {"item": "lamp"})
    assert out[0].functions[0]["name"] == "get_price_for_shop"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"hello": 1}]), encoding="utf-8")
    with pytest.raises(ValueError, match="neither"):
        read_toolbench(bad)


# ---------------------------------------------------------------------------- pairs
WEATHER = {"name": "get_weather", "description": "Current weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


def _record(kind: str, query: str = "What is the weather in Paris?") -> SynthRecord:
    messages = prompt_messages(query, [WEATHER])
    gold = {"name": "get_weather", "arguments": {"city": "Paris"}} if kind == "original" \
        else None
    return SynthRecord(id=f"r#{kind}", kind=kind, source="test", query=query,  # type: ignore[arg-type]
                       messages=messages, tools=tools_with_finish([WEATHER]), gold=gold,
                       missing=["city"] if kind == "talk_to_user" else [])


def _call(name: str, args: dict | str) -> str:
    text = args if isinstance(args, str) else json.dumps(args)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {text}}}\n</tool_call><|im_end|>'


def _finish(rtype: str) -> str:
    return _call("Finish", {"return_type": rtype, "final_answer": "x"})


def test_classify_each_label() -> None:
    orig, change, talk = _record("original"), _record("change_tools"), \
        _record("talk_to_user", "What is the weather?")
    assert classify(orig, _call("get_weather", {"city": "Paris"})).label == "correct"
    assert classify(orig, _finish("give_up_and_talk_to_user")).label == "indecisive"
    assert classify(orig, _call("get_weather", {"city": "Berlin"})).reason == "guard: content"
    assert classify(orig, _call("get_weather", {})).reason == "guard: format"
    assert classify(orig, _call("book_flight", {"to": "Paris"})).reason == "guard: type"
    assert classify(orig, _call("get_weather", '{"city": ')).label == "hallucinated"
    assert classify(orig, _finish("give_answer")).reason == "answer without a call"
    assert classify(orig, "It is sunny in Paris.").reason == "format: no parsable call"
    assert classify(orig, _finish("give_up_and_restart")).label == "other"
    assert classify(change, _finish("give_up_and_change_tools")).label == "correct"
    assert classify(change, _finish("give_up_and_talk_to_user")).label == "indecisive"
    assert classify(change, _call("get_weather", {"city": "Paris"})).reason.startswith("type")
    assert classify(talk, _finish("give_up_and_talk_to_user")).label == "correct"
    assert classify(talk, _finish("give_up_and_change_tools")).label == "indecisive"
    bad = classify(talk, _call("get_weather", {"city": "Paris"}))
    assert bad.label == "hallucinated"


def test_a_call_cut_at_the_token_budget_is_not_a_hallucination() -> None:
    orig = _record("original")
    cut = '```json\n{"name": "get_weather", "arguments": {"city": "Pa'
    assert classify(orig, cut, eos="<|im_end|>").label == "other"
    assert classify(orig, "<tool_call>\n{" + '"name": "get_w', eos="<|im_end|>").label == "other"
    # finished but malformed, or prose cut early: still the model's format hallucination
    assert classify(orig, cut + "<|im_end|>", eos="<|im_end|>").label == "hallucinated"
    assert classify(orig, "It is sunny in", eos="<|im_end|>").label == "hallucinated"
    assert classify(orig, cut).label == "hallucinated"  # no eos known: as before


def test_build_pairs_one_per_type() -> None:
    rec = _record("original")
    good = Sorted("c", "correct", "")
    ind = Sorted("i", "indecisive", "")
    hal = Sorted("h", "hallucinated", "")
    hal2 = Sorted("h2", "hallucinated", "")
    pairs = build_pairs(rec, "P", [hal, good, ind, hal2, Sorted("o", "other", "")])
    assert [(p.type, p.chosen, p.rejected) for p in pairs] == [
        ("correct>indecisive", "c", "i"), ("indecisive>hallucinated", "i", "h"),
        ("correct>hallucinated", "c", "h")]
    assert all(p.prompt == "P" and p.chosen_source == "sampled" for p in pairs)
    assert build_pairs(rec, "P", [hal, hal2]) == []
    only_bad = build_pairs(rec, "P", [ind, hal], gold_completion="G")
    assert [(p.type, p.chosen, p.chosen_source) for p in only_bad] == [
        ("correct>indecisive", "G", "gold"), ("indecisive>hallucinated", "i", "sampled"),
        ("correct>hallucinated", "G", "gold")]
    assert build_pairs(rec, "P", [good, ind], gold_completion="G")[0].chosen == "c"


def test_a_synthesized_give_up_is_only_ever_rejected_on_a_servable_prompt() -> None:
    rec = _record("original")
    good = Sorted("c", "correct", "")
    hal = Sorted("h", "hallucinated", "")
    pairs = build_pairs(rec, "P", [hal, good], give_up_completion="U")
    assert [(p.type, p.chosen, p.rejected, p.rejected_source) for p in pairs] == [
        ("correct>indecisive", "c", "U", "synthesized"),
        ("correct>hallucinated", "c", "h", "sampled")]
    # never the chosen side: no indecisive > hallucinated pair is made from it
    assert all(p.chosen != "U" for p in pairs)
    # a sampled give-up is preferred over the stand-in; no correct response, no pair
    ind = Sorted("i", "indecisive", "")
    assert [p.rejected for p in build_pairs(rec, "P", [good, ind], give_up_completion="U")
            if p.type == "correct>indecisive"] == ["i"]
    assert build_pairs(rec, "P", [hal], give_up_completion="U") == []
    # with the gold standing in for the correct side, both sides are synthesized
    both = build_pairs(rec, "P", [hal], gold_completion="G", give_up_completion="U")
    assert (both[0].chosen, both[0].chosen_source, both[0].rejected_source) == (
        "G", "gold", "synthesized")
    # on a changed prompt giving up is right: the stand-in is never used there
    for kind in ("change_tools", "talk_to_user"):
        assert build_pairs(_record(kind), "P", [Sorted("c", "correct", ""), hal],
                           give_up_completion="U")[0].rejected == "h"


def test_the_synthesized_give_ups_alternate_and_are_sorted_as_giving_up() -> None:
    rec = _record("original")
    kinds = [give_up_message(rec, i)["tool_calls"][0]["function"]["arguments"]["return_type"]
             for i in range(4)]
    assert kinds == ["give_up_and_change_tools", "give_up_and_talk_to_user"] * 2
    question = give_up_message(rec, 1)["tool_calls"][0]["function"]["arguments"]
    assert "'city'" in question["final_answer"]  # it asks for what the request gave
    for i in range(2):
        text = _call("Finish", give_up_message(rec, i)["tool_calls"][0]["function"]["arguments"])
        assert classify(rec, text).label == "indecisive"


# ---------------------------------------------------------------------------- parsing
def test_parse_completion_forms() -> None:
    two = parse_completion('ok\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>'
                           '\n<tool_call>\n{"name": "b", "arguments": "{\\"y\\": 2}"}'
                           '\n</tool_call><|im_end|>junk')
    assert two.content == "ok"
    assert [(c.name, c.arguments) for c in two.calls] == [("a", {"x": 1}), ("b", {"y": 2})]
    llama = parse_completion('{"name": "a", "parameters": {"x": 1}}')
    assert [(c.name, c.arguments) for c in llama.calls] == [("a", {"x": 1})]
    broken = parse_completion('<tool_call>\n{"name": "a", "arguments": {"x": ')
    assert [(c.name, c.arguments) for c in broken.calls] == [("a", None)]
    fin = parse_completion(_finish("give_up_and_change_tools"))
    assert fin.return_type() == "give_up_and_change_tools" and not fin.tool_calls
    assert parse_completion("just text").calls == ()
    # Qwen2.5-Coder writes a call as one fenced JSON object
    qwen = parse_completion('```json\n{\n  "name": "a",\n  "arguments": {"x": 1}\n}\n```')
    assert [(c.name, c.arguments) for c in qwen.calls] == [("a", {"x": 1})]
    prose = parse_completion("```python\nprint(1)\n```")
    assert prose.calls == () and prose.content.startswith("```python")
    assert parse_completion("Try this:\n```json\n{\"name\": \"a\"}\n```").calls == ()
    # a fenced or bare call object that does not parse is an invalid call, as a broken
    # <tool_call> block is: a missing brace, or a cut at the token budget (no closing fence)
    brace = parse_completion('```json\n{"name": "a", "arguments": {"x": [1]}\n```<|im_end|>')
    assert [(c.name, c.arguments) for c in brace.calls] == [("a", None)]
    cut = parse_completion('```json\n{"name": "Finish", "arguments": {"return_type": "give_up')
    assert [(c.name, c.arguments) for c in cut.calls] == [("Finish", None)]
    assert cut.return_type() is None
    assert [c.name for c in parse_completion('{"name": "c", "argu').calls] == ["c"]
    whole = parse_completion('```json\n{"name": "a", "arguments": {"x": 1}}')
    assert [(c.name, c.arguments) for c in whole.calls] == [("a", {"x": 1})]
    assert parse_completion("```python\nprint(1)").calls == ()
    commented = parse_completion('```json\n{"name": "a", "arguments": {}}\n```\nThis calls a.')
    assert [(c.name, c.arguments) for c in commented.calls] == [("a", {})]
    assert parse_completion('{"text": "not a call"').calls == ()
    # several call objects in a row (the last one cut off by the token budget)
    rows = parse_completion('{"name": "a", "arguments": {"x": 1}}\n{"name": "b", "arguments": {}}'
                            '\n{"name": "c", "argu')
    assert [(c.name, c.arguments) for c in rows.calls] == [("a", {"x": 1}), ("b", {})]
    msg = finish_message("talk_to_user", "q")
    assert msg["tool_calls"][0]["function"]["arguments"]["return_type"] == \
        "give_up_and_talk_to_user"


# ---------------------------------------------------------------------------- config / CLI
def test_presets_validate() -> None:
    for size in SIZES:
        cfg = preset(size)
        assert cfg.size == size
    assert preset("paper").lora is False and preset("paper").sft_lr == 1e-5
    assert preset("paper").dpo_lr == 1e-6 and preset("paper").sft_batch_effective == 32
    assert preset("ci").sft_examples < preset("cpu").sft_examples
    with pytest.raises(ValueError):
        preset("huge")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RelignConfig(ratios=(0.4, 0.3, 0.2))
    with pytest.raises(ValueError):
        RelignConfig(sft_examples=0)
    assert set(PRESETS) == set(SIZES)


def test_cli_registers_relign_without_heavy_imports() -> None:
    code = ("import sys; from typer.testing import CliRunner; "
            "from toolguard_evals.cli import app; "
            "r = CliRunner().invoke(app, ['relign', '--help']); "
            "assert r.exit_code == 0, r.output; assert 'sample' in r.output; "
            "heavy = [m for m in ('torch', 'transformers', 'trl', 'peft') if m in sys.modules]; "
            "assert not heavy, heavy; import toolguard; "
            "assert not [m for m in sys.modules if m.startswith('toolguard_evals.relign.sft')]")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ---------------------------------------------------------------------------- stage bookkeeping
class _Stub(Runner):
    """Runner whose stages write small files and record that they ran (plumbing only)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.ran: list[str] = []

    def _step(self, stage: str, **extra: object) -> StageResult:
        self.ran.append(stage)
        return StageResult(extra=dict(extra))

    def _base(self) -> StageResult:
        return self._step("base", model_path="m", tokenizer_path="t")

    def _synth(self) -> StageResult:
        self.require("base")
        folder = self.out / "synth"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "sft.jsonl").write_text(f"{self.cfg.sft_examples} {self.cfg.seed}\n")
        (folder / "dpo.jsonl").write_text(f"{self.cfg.dpo_prompts} {self.cfg.seed}\n")
        return self._step("synth")

    def _sft(self) -> StageResult:
        self.require("synth")
        return self._step("sft", merged="sft-merged")

    def _sample(self) -> StageResult:
        self.require("sft")
        return self._step("sample")

    def _dpo(self) -> StageResult:
        self.require("sample")
        return self._step("dpo", merged="dpo-merged")

    def _export(self) -> StageResult:
        self.require("dpo")
        return self._step("export")


@pytest.fixture()
def evaluated(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The models the real eval stage evaluates (``evaluate_model`` replaced)."""
    import toolguard_evals.relign.evaluate as evaluate

    calls: list[str] = []

    def fake(name: str, *args: object, **kwargs: object) -> dict[str, object]:
        calls.append(name)
        return {"unguarded": {"Original": {"n": 1}}, "guarded": {"Original": {"n": 1}},
                "generated_turns": 1}

    monkeypatch.setattr(evaluate, "evaluate_model", fake)
    return calls


def _cfg(**overrides: object) -> RelignConfig:
    return preset("ci", eval_backend="transformers", **overrides)


def test_every_setting_belongs_to_the_stages_that_read_it() -> None:
    named = {field for fields in STAGE_SETTINGS.values() for field in fields}
    assert named == set(RelignConfig.model_fields) - {"size"}
    assert set(STAGE_SETTINGS) == set(STAGES) == set(STAGE_INPUTS)


def test_a_new_dpo_setting_reruns_dpo_and_what_follows_only(
        tmp_path: Path, evaluated: list[str]) -> None:
    first = _Stub(_cfg(), base="b", out=tmp_path, progress=False)
    first.run()
    assert first.ran == ["base", "synth", "sft", "sample", "dpo", "export"]
    assert evaluated == ["base", "sft", "dpo"]
    again = _Stub(_cfg(), base="b", out=tmp_path, progress=False)
    again.run()
    assert again.ran == [] and evaluated == ["base", "sft", "dpo"]  # all kept
    changed = _cfg(dpo_lr=3e-4)
    with pytest.raises(StageMismatchError, match="dpo"):
        _Stub(changed, base="b", out=tmp_path, progress=False).run()
    forced = _Stub(changed, base="b", out=tmp_path, force=True, progress=False)
    forced.run()
    assert forced.ran == ["dpo", "export"]
    assert evaluated[3:] == ["dpo"]  # base and SFT results are kept


def test_the_accuracy_slice_has_its_own_count_and_a_new_one_reevaluates_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import toolguard_evals.relign.evaluate as evaluate

    asked: list[tuple[str, object, object]] = []

    def fake(name: str, *args: object, **kwargs: object) -> dict[str, object]:
        asked.append((name, kwargs["bfcl"], kwargs["accuracy"]))
        return {"unguarded": {"Original": {"n": 1}}, "guarded": {"Original": {"n": 1}},
                "generated_turns": 1}

    monkeypatch.setattr(evaluate, "evaluate_model", fake)
    _Stub(_cfg(), base="b", out=tmp_path, progress=False).run()
    assert asked == [(m, 1, None) for m in ("base", "sft", "dpo")]
    forced = _Stub(_cfg(eval_accuracy=60), base="b", out=tmp_path, force=True, progress=False)
    forced.run()
    assert forced.ran == []  # no model is retrained, every model is scored again
    assert asked[3:] == [(m, 1, 60) for m in ("base", "sft", "dpo")]
    assert preset("cpu").eval_accuracy == 60 and preset("cpu").eval_bfcl == 12


def test_eval_bfcl_draws_the_call_categories_at_their_own_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import toolguard_evals.bfcl as bfcl
    import toolguard_evals.bfcl_checker as checker
    import toolguard_evals.relign.evaluate as evaluate

    limits: dict[str, int | None] = {}

    def load(category: str, *, limit: int | None = None) -> list[dict[str, object]]:
        limits[category] = limit
        return [{"id": f"{category}_{i}"} for i in range(limit or 0)]

    monkeypatch.setattr(bfcl, "load_category", load)
    monkeypatch.setattr(checker, "check_task", lambda record, calls: {"valid": bool(calls)})
    monkeypatch.setattr(evaluate, "_bfcl_turn", lambda chat, record: {
        "calls": [("f", {})], "allowed": [], "change": False, "talk": False})
    out = evaluate.eval_bfcl(None, per_category=2, per_accuracy_category=5)  # type: ignore[arg-type]
    assert limits == {"irrelevance": 2, "live_irrelevance": 2, "live_simple": 5}
    assert [out["unguarded"][f"BFCL {c}"]["n"] for c in limits] == [2, 2, 5]
    assert out["unguarded"]["BFCL live_simple"]["accuracy"] == 100.0
    assert out["guarded"]["BFCL live_simple"]["accuracy"] == 0.0
    assert out["unguarded"]["BFCL irrelevance"]["tool_hallucination_rate"] == 100.0
    evaluate.eval_bfcl(None, per_category=3)  # type: ignore[arg-type]
    assert limits == {"irrelevance": 3, "live_irrelevance": 3, "live_simple": 3}


def test_more_dpo_prompts_keep_the_sft_model_while_its_data_is_unchanged(
        tmp_path: Path, evaluated: list[str]) -> None:
    _Stub(_cfg(), base="b", out=tmp_path, progress=False).run()
    sft = json.loads((tmp_path / "sft" / "stage.json").read_text())
    forced = _Stub(_cfg(dpo_prompts=5), base="b", out=tmp_path, force=True, progress=False)
    forced.run()
    assert forced.ran == ["synth", "sample", "dpo", "export"]
    assert json.loads((tmp_path / "sft" / "stage.json").read_text()) == sft
    # new SFT data (another seed) retrains and resamples; the base result is kept
    reseeded = _Stub(_cfg(dpo_prompts=5, seed=1), base="b", out=tmp_path, force=True,
                     progress=False)
    reseeded.run()
    assert reseeded.ran == ["synth", "sft", "sample", "dpo", "export"]
    assert evaluated == ["base", "sft", "dpo", "dpo", "sft", "dpo"]


def test_force_replaces_one_stage_without_losing_its_inputs(tmp_path: Path,
                                                             evaluated: list[str]) -> None:
    _Stub(_cfg(), base="b", out=tmp_path, progress=False).run()
    forced = _Stub(_cfg(sft_lr=1e-3), base="b", out=tmp_path, force=True, progress=False)
    forced.run(("sft",))  # needs base and synth, which are unchanged and kept
    assert forced.ran == ["sft"]
    stale = _Stub(_cfg(sft_lr=1e-3), base="b", out=tmp_path, progress=False)
    with pytest.raises(StageMismatchError, match="sample"):
        stale.run()  # sample was made from the SFT model that has just been replaced
    with pytest.raises(StageMismatchError, match="sft"):  # a stale input is not replaced
        _Stub(_cfg(), base="b", out=tmp_path, force=True, progress=False).run(("sample",))
    with pytest.raises(FileNotFoundError, match="relign sft"):
        _Stub(_cfg(), base="b", out=tmp_path / "empty", progress=False).run(("sample",))


def test_set_overrides_a_preset_and_the_report_command_carries_it(tmp_path: Path) -> None:
    import shlex

    import typer

    from toolguard_evals.relign.cli import parse_sets
    from toolguard_evals.relign.run import stage_command

    sets = ["dpo_lr=2e-4", "dpo_max_steps=16", 'eval_groups=["G2_category", "G1_instruction"]']
    cfg = preset("cpu", **parse_sets(sets))
    assert cfg.dpo_lr == 2e-4 and cfg.dpo_max_steps == 16
    assert cfg.eval_groups == ("G2_category", "G1_instruction")
    command = stage_command("run", base="b", out=tmp_path, size="cpu", cfg=cfg)
    words = shlex.split(command)
    again = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
    assert preset("cpu", **parse_sets(again)) == cfg  # the command rebuilds the same settings
    assert "--set" not in stage_command("run", base="b", out=tmp_path, size="cpu",
                                        cfg=preset("cpu"))
    for bad in (["dpo_lr"], ["size=ci"], ["learning_rate=1e-4"]):
        with pytest.raises(typer.BadParameter):
            parse_sets(bad)


def test_cli_refuses_a_bad_setting_before_any_stage(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from typer.testing import CliRunner

    from toolguard_evals.cli import app

    result = CliRunner().invoke(app, ["relign", "run", "--out", str(tmp_path / "r"),
                                      "--set", "dpo_lr=-1"])
    assert result.exit_code == 2, result.output
    assert "dpo_lr" in result.output and not (tmp_path / "r").exists()
    unknown = CliRunner().invoke(app, ["relign", "sft", "--out", str(tmp_path / "r"),
                                       "--set", "nope=1"])
    assert unknown.exit_code != 0 and "nope" in unknown.output
