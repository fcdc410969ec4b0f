"""Shared pieces of the SFT and DPO stages: LoRA config, trainer arguments, stage results.

One implementation for both trainers: the device-dependent arguments (bf16 on a CUDA GPU
that supports it, float32 and no gradient checkpointing on CPU), the LoRA layout, merging
an adapter into a plain model folder, and reading the start/end loss from the trainer's
log.  Multi-GPU runs go through ``accelerate launch -m toolguard_evals.relign.cli ...``:
the trainers pick up the distributed environment themselves (no hand-written launcher).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolguard_evals.relign.config import RelignConfig


@dataclass(slots=True)
class StageResult:
    """One stage's numbers for the report.

    Attributes:
        examples: Training sequences (SFT), pairs (DPO), prompts (sampling), records
            (synthesis).
        steps: Optimizer steps (training stages), generations (sampling), else 0.
        seconds: Wall-clock seconds of the stage.
        loss_start / loss_end: First and last logged training loss (training stages).
        extra: Stage-specific details (counts, paths, commands).
    """

    examples: int = 0
    steps: int = 0
    seconds: float = 0.0
    loss_start: float | None = None
    loss_end: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def use_bf16() -> bool:
    """bfloat16 training only on a CUDA GPU that supports it."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def on_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def common_args(cfg: RelignConfig, out_dir: Path, *, lr: float, batch: int, epochs: float,
                max_steps: int | None) -> dict[str, Any]:
    """Keyword arguments both ``SFTConfig`` and ``DPOConfig`` take."""
    return dict(
        output_dir=str(out_dir / "trainer"),
        learning_rate=lr,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=cfg.grad_accum,
        num_train_epochs=epochs,
        max_steps=max_steps if max_steps is not None else -1,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=cfg.seed,
        bf16=use_bf16(),
        # on CPU checkpointing costs a second forward and makes the frozen lower layers
        # need gradients (enable_input_require_grads); on a GPU it saves memory
        activation_checkpointing=on_gpu(),
        warmup_steps=0,
        lr_scheduler_type="linear",
        max_length=cfg.max_length,
        dataloader_num_workers=0,
        dataloader_pin_memory=on_gpu(),
    )


def lora_config(cfg: RelignConfig, model: Any) -> Any:
    """PEFT LoRA on every linear layer of the top ``cfg.lora_top_layers`` decoder layers."""
    from peft import LoraConfig

    layers = None
    n_layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
    if cfg.lora_top_layers is not None and n_layers:
        top = min(cfg.lora_top_layers, n_layers)
        layers = list(range(n_layers - top, n_layers))
    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=linear_module_names(model), task_type="CAUSAL_LM",
                      layers_to_transform=layers, layers_pattern="layers" if layers else None)


def linear_module_names(model: Any) -> list[str]:
    """Short names of the ``nn.Linear`` layers inside the decoder layers (LoRA targets)."""
    import torch

    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
             if isinstance(module, torch.nn.Linear) and ".layers." in f".{name}"}
    return sorted(names)


def losses(log_history: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """First and last ``loss`` the trainer logged."""
    values = [float(e["loss"]) for e in log_history if "loss" in e]
    return (values[0], values[-1]) if values else (None, None)


def save_outputs(model: Any, tokenizer: Any, out_dir: Path, *, lora: bool) -> dict[str, str]:
    """Save the adapter (LoRA) and a merged full model; returns their paths.

    ``adapter/``: the PEFT adapter (``lora`` only); ``merged/``: base + adapter merged (or
    the fully fine-tuned model), with the tokenizer, loadable by any Hugging Face tool.
    """
    paths: dict[str, str] = {}
    if lora:
        model.save_pretrained(out_dir / "adapter")
        tokenizer.save_pretrained(out_dir / "adapter")
        paths["adapter"] = str(out_dir / "adapter")
        model = model.merge_and_unload()
    model.save_pretrained(out_dir / "merged")
    tokenizer.save_pretrained(out_dir / "merged")
    paths["merged"] = str(out_dir / "merged")
    return paths
