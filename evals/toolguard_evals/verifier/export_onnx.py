"""``toolguard verifier export-onnx DIR``: a trained verifier's encoders as ONNX models.

Writes ``DIR/onnx/`` (layout: :mod:`toolguard.onnx_backend`) so that
``LearnedVerifier(DIR, backend="onnx")`` runs the two encoders on onnxruntime.  Each model
is exported from torch (the TorchScript exporter, opset :data:`OPSET`, batch and sequence
axes dynamic), then run on onnxruntime over :data:`PARITY_TEXTS` and compared with the torch
model's own scores (the fit model's normalised embeddings; the slot cross-encoder's
``predict`` scores, or the slot scorer's token vectors): a difference above
:data:`~toolguard.onnx_backend.PARITY_TOLERANCE` raises and nothing is written.  The
measured differences go to ``export.json``.

Needs torch, onnx and onnxruntime (the library's ``onnx`` extra and the ``learned`` one).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from toolguard.errors import ConfigurationError
from toolguard.onnx_backend import (
    EXPORT_CONFIG,
    FIT_FILE,
    FORMAT,
    ONNX_FOLDER,
    PARITY_TOLERANCE,
    SLOT_FILE,
    OnnxBiEncoder,
    OnnxCrossEncoder,
)
from toolguard.verifier import FIT_FOLDER, MAX_TOKENS, SLOT_FOLDER

__all__ = ["OPSET", "PARITY_TEXTS", "export_onnx"]

OPSET: Final = 17
PARITY_TEXTS: Final = (
    "tool fit: Move 50 EUR to ACC-2",
    "transfer: Transfer money to an account. | parameters: to_account (string), amount",
    "slot: User: Reset my password\nUser: my username is JaneSmith",
    "username (string): The account's user name. | tool: reset_password",
    "x",
    "What's the weather in Lyon tomorrow, and should I take an umbrella? " * 6,
)
"""Texts (and, paired in order, cross-encoder pairs) the export is checked on: short,
one word, and longer than the fit model's token limit."""


def export_onnx(folder: str | Path, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Export ``folder``'s fit and slot encoders to ``folder/onnx/``; return ``export.json``.

    Args:
        folder: A ``toolguard verifier train`` output (``fit/`` and ``slot/``).
        log: Progress lines.

    Raises:
        toolguard.errors.ConfigurationError: ``folder`` is not a trained folder, or an
            exported model's scores differ from torch's by more than
            :data:`~toolguard.onnx_backend.PARITY_TOLERANCE` (nothing is written then).
        ImportError: torch, onnx, onnxruntime or sentence-transformers is missing.
    """
    import numpy as np

    root = Path(folder)
    fit_dir, slot_dir = root / FIT_FOLDER, root / SLOT_FOLDER
    if not (fit_dir / "config.json").is_file() or not slot_dir.is_dir():
        raise ConfigurationError(f"{root} is not a trained verifier folder (fit/ and slot/); "
                                 "train one with `toolguard verifier train`")
    from toolguard.slot_scorer import SlotScorer, is_slot_scorer_folder

    texts = list(PARITY_TEXTS)
    pairs = list(zip(texts[0::2], texts[1::2], strict=True))
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        # tmp/ looks like a trained folder to the library's loaders: fit/ and slot/ link to
        # the real ones, onnx/ is the export being staged
        probe = Path(tmp)
        staged = probe / ONNX_FOLDER
        staged.mkdir()
        for name in (FIT_FOLDER, SLOT_FOLDER):
            (probe / name).symlink_to((root / name).resolve(), target_is_directory=True)
        from sentence_transformers import CrossEncoder, SentenceTransformer

        fit = SentenceTransformer(str(fit_dir), device="cpu").eval()
        _export(fit[0].auto_model, fit.tokenizer, staged / FIT_FILE, pair=False)
        fit_reference = fit.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
        if is_slot_scorer_folder(slot_dir):
            slot_kind = "slot_scorer"
            scorer = SlotScorer(slot_dir)
            tokenizer, encoder, _ = scorer.load()
            _export(encoder, tokenizer, staged / SLOT_FILE, pair=False)
            slot_reference = scorer.score(pairs)
        else:
            slot_kind = "cross_encoder"
            cross = CrossEncoder(str(slot_dir), max_length=MAX_TOKENS, device="cpu")
            cross.model.eval()
            _export(cross.model, cross.tokenizer, staged / SLOT_FILE, pair=True)
            slot_reference = cross.predict(pairs, convert_to_numpy=True, show_progress_bar=False)
        config: dict[str, Any] = {"format": FORMAT, "version": 1, "opset": OPSET,
                                  "fit_max_length": int(fit.max_seq_length),
                                  "slot": slot_kind}
        (staged / EXPORT_CONFIG).write_text(json.dumps(config), encoding="utf-8")
        fit_out = OnnxBiEncoder(probe).encode(texts)
        slot_out = (SlotScorer(slot_dir, onnx_encoder=staged / SLOT_FILE).score(pairs)
                    if slot_kind == "slot_scorer"
                    else OnnxCrossEncoder(probe, MAX_TOKENS).predict(pairs))
        parity = {"fit": float(np.abs(fit_out - fit_reference).max()),
                  "slot": float(np.abs(np.asarray(slot_out) - np.asarray(slot_reference)).max())}
        log(f"largest difference from torch: fit {parity['fit']:.2e}, slot {parity['slot']:.2e}")
        bad = {k: v for k, v in parity.items() if not v <= PARITY_TOLERANCE}
        if bad:
            raise ConfigurationError(f"the ONNX export of {root} differs from torch by {bad} "
                                     f"(> {PARITY_TOLERANCE}); nothing was written")
        config["parity"] = parity
        (staged / EXPORT_CONFIG).write_text(json.dumps(config, indent=1), encoding="utf-8")
        target = root / ONNX_FOLDER
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(staged), str(target))
    log(f"wrote {target}")
    return config


def _export(model: Any, tokenizer: Any, path: Path, *, pair: bool) -> None:
    """``model`` (a transformers module) -> ``path``: its first output, axes dynamic."""
    import torch

    sample = (tokenizer(["a short query"], ["a document"], return_tensors="pt") if pair
              else tokenizer(["a short text"], return_tensors="pt"))
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]

    class _FirstOutput(torch.nn.Module):  # type: ignore[misc]  # torch is untyped here
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return self.model(**dict(zip(names, inputs, strict=True)))[0]

    axes = {n: {0: "batch", 1: "tokens"} for n in names}
    axes["output"] = {0: "batch"} if pair else {0: "batch", 1: "tokens"}
    with torch.no_grad(), warnings.catch_warnings():
        # the tracer's notes on shapes taken as constants; the parity check is the guard
        warnings.simplefilter("ignore")
        torch.onnx.export(_FirstOutput().eval(), tuple(sample[n] for n in names), str(path),
                          input_names=names, output_names=["output"], dynamic_axes=axes,
                          opset_version=OPSET, dynamo=False)
