"""DPO stage: TRL's ``DPOTrainer`` on the preference pairs, starting from the SFT model.

The SFT model (merged) is the starting point and the reference; with LoRA a fresh adapter
is trained on it and the reference is the same model with the adapter disabled (TRL's
default for PEFT models, no second copy in memory).  Paper settings (§4.1): lr 1e-6,
batch 32, two epochs (the ``paper`` preset).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from toolguard_evals.relign.config import RelignConfig
from toolguard_evals.relign.pairs import Pair
from toolguard_evals.relign.training import (
    StageResult,
    common_args,
    lora_config,
    losses,
    save_outputs,
)


def run_dpo(cfg: RelignConfig, *, model_path: str, tokenizer_path: str,
            pairs: Sequence[Pair], out_dir: str | Path) -> StageResult:
    """Train on ``pairs``; save ``adapter/`` (over ``model_path``) and ``merged/``.

    Raises:
        ValueError: No pairs (sampling found none: raise ``samples_per_prompt`` or
            ``dpo_prompts``, or enable ``fill_gold``).
    """
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from toolguard_evals.relign.models import load_model, load_tokenizer

    if not pairs:
        raise ValueError("DPO needs at least one preference pair; sampling produced none")
    started = time.perf_counter()
    out = Path(out_dir)
    tokenizer = load_tokenizer(tokenizer_path)
    model = load_model(model_path)
    model.train()
    data = Dataset.from_list([{"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected}
                              for p in pairs])
    args = DPOConfig(**common_args(cfg, out, lr=cfg.dpo_lr, batch=cfg.dpo_batch,
                                   epochs=cfg.dpo_epochs, max_steps=cfg.dpo_max_steps),
                     beta=cfg.dpo_beta)
    trainer = DPOTrainer(model=model, args=args, train_dataset=data,
                         processing_class=tokenizer,
                         peft_config=lora_config(cfg, model) if cfg.lora else None)
    result = trainer.train()
    first, last = losses(trainer.state.log_history)
    paths = save_outputs(trainer.model, tokenizer, out, lora=cfg.lora)
    return StageResult(examples=len(pairs), steps=int(result.global_step),
                       seconds=round(time.perf_counter() - started, 1), loss_start=first,
                       loss_end=last, extra={**paths, "train_runtime_s": round(
                           float(result.metrics["train_runtime"]), 1)})
