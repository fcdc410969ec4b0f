"""SFT stage: TRL's ``SFTTrainer`` on the synthesized records, LoRA or full fine-tuning.

Each record becomes one prompt/completion pair per assistant turn (the prompt rendered with
the chat template up to the generation prompt, the completion = that turn up to and
including the end-of-turn token), so the loss covers only the targets
(``completion_only_loss``).  The text is rendered here rather than by TRL because tool
schemas differ from record to record, and an Arrow column of them would be unified into
one schema with ``null`` keys the model would then see.

Paper settings (§4.1): lr 1e-5, batch 32, two epochs, full fine-tuning (the ``paper``
preset); the ``cpu`` / ``ci`` presets use LoRA on the top layers with a higher rate.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolguard_evals.relign.chat_format import prompt_and_completion
from toolguard_evals.relign.config import RelignConfig
from toolguard_evals.relign.synth import SynthRecord
from toolguard_evals.relign.training import (
    StageResult,
    common_args,
    lora_config,
    losses,
    save_outputs,
)


def sft_examples(records: Sequence[SynthRecord], tokenizer: Any) -> list[dict[str, str]]:
    """``{"prompt", "completion"}`` text pairs: one per assistant turn of each record."""
    out: list[dict[str, str]] = []
    for record in records:
        for i, message in enumerate(record.messages):
            if message["role"] == "assistant":
                prompt, completion = prompt_and_completion(tokenizer, record.messages[:i + 1],
                                                           record.tools)
                out.append({"prompt": prompt, "completion": completion})
    return out


def run_sft(cfg: RelignConfig, *, model_path: str, tokenizer_path: str,
            records: Sequence[SynthRecord], out_dir: str | Path) -> StageResult:
    """Fine-tune ``model_path`` on ``records``; save ``adapter/`` and ``merged/`` in ``out_dir``.

    Args:
        cfg: The run's settings (``lora``, ``sft_*``, ``max_length``, ``seed``).
        model_path: The base weights (folder or hub id).
        tokenizer_path: The tokenizer with the chat template used for synthesis.
        records: ``sft`` split records.
        out_dir: Stage folder.

    Returns:
        The :class:`~toolguard_evals.relign.training.StageResult` (``extra``: paths).

    Raises:
        ValueError: No records.
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from toolguard_evals.relign.models import load_model, load_tokenizer

    if not records:
        raise ValueError("SFT needs at least one record")
    started = time.perf_counter()
    out = Path(out_dir)
    tokenizer = load_tokenizer(tokenizer_path)
    examples = sft_examples(records, tokenizer)
    model = load_model(model_path)
    model.train()
    args = SFTConfig(**common_args(cfg, out, lr=cfg.sft_lr, batch=cfg.sft_batch,
                                   epochs=cfg.sft_epochs, max_steps=cfg.sft_max_steps),
                     completion_only_loss=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(examples),
                         processing_class=tokenizer,
                         peft_config=lora_config(cfg, model) if cfg.lora else None)
    result = trainer.train()
    first, last = losses(trainer.state.log_history)
    paths = save_outputs(trainer.model, tokenizer, out, lora=cfg.lora)
    return StageResult(examples=len(examples), steps=int(result.global_step),
                       seconds=round(time.perf_counter() - started, 1), loss_start=first,
                       loss_end=last, extra={"records": len(records), **paths,
                                             "train_runtime_s": round(
                                                 float(result.metrics["train_runtime"]), 1)})
