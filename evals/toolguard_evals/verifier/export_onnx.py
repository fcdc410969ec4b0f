"""``toolguard verifier export-onnx DIR [--int8]``: a trained verifier as ONNX models.

Writes ``DIR/onnx/`` (layout: :mod:`toolguard.onnx_backend`) so that
``LearnedVerifier(DIR, backend="onnx")`` runs without torch.  Each model (the fit encoder,
the slot encoder or cross-encoder, a slot scorer's head) is exported from torch (the
TorchScript exporter, opset :data:`OPSET`, batch and sequence axes dynamic), then the
export is run through the library's own onnxruntime loaders on :data:`PARITY_TEXTS` and
compared with torch (the fit model's normalised embeddings, the slot model's scores): a
difference above :data:`~toolguard.onnx_backend.PARITY_TOLERANCE` raises and nothing is
written.  The measured differences go to ``export.json``.

``--int8`` (:func:`calibrate_int8`) also writes the two encoders with int8 weights
(onnxruntime's dynamic quantisation, one scale per output channel) for
``backend="onnx-int8"``.  Scores move, so each of the folder's thresholds is moved to
flag as many of its dev pairs under int8 as it does under float32; the dev split is
rebuilt from the folder's data card (size and seed; never an evaluation-only source).

Needs torch, onnx and onnxruntime (the library's ``onnx-export`` extra);
``--int8`` also the datasets the folder was trained on.
"""

from __future__ import annotations

import contextlib
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
    HEAD_FILE,
    INT8_SUFFIX,
    ONNX_FOLDER,
    PARITY_TOLERANCE,
    SLOT_FILE,
    VERSION,
    OnnxBiEncoder,
    OnnxCrossEncoder,
)
from toolguard.verifier import (
    CALIBRATION_FILE,
    FIT_FOLDER,
    MAX_TOKENS,
    SLOT_FOLDER,
    release_models,
)

__all__ = ["OPSET", "PARITY_TEXTS", "calibrate_int8", "export_onnx", "same_share"]

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


def export_onnx(folder: str | Path, *, int8: bool = False, data_dir: str | Path | None = None,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Export ``folder``'s models to ``folder/onnx/``; return ``export.json``.

    Args:
        folder: A ``toolguard verifier train`` output (``fit/`` and ``slot/``).
        int8: Also write int8 encoders and their operating points (:func:`calibrate_int8`).
        data_dir: The data root the dev split is rebuilt from (``int8``; default
            ``$TOOLGUARD_DATA_DIR``, see :mod:`toolguard_evals.datadir`).
        log: Progress lines.

    Raises:
        toolguard.errors.ConfigurationError: ``folder`` is not a trained folder, or an
            exported model's scores differ from torch's by more than
            :data:`~toolguard.onnx_backend.PARITY_TOLERANCE` (nothing is written then), or
            ``int8`` and the folder has no data card.
        FileNotFoundError: ``int8`` and a dataset of the dev split is missing.
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
    with tempfile.TemporaryDirectory(dir=root) as tmp, contextlib.ExitStack() as cleanup:
        # tmp/ looks like a trained folder to the library's loaders: fit/, slot/ and the
        # calibration link to the real ones, onnx/ is the export being staged
        probe = Path(tmp)
        cleanup.callback(release_models, probe)  # the models loaded from it go before it
        staged = probe / ONNX_FOLDER
        staged.mkdir()
        for name in (FIT_FOLDER, SLOT_FOLDER):
            (probe / name).symlink_to((root / name).resolve(), target_is_directory=True)
        if (root / CALIBRATION_FILE).is_file():
            (probe / CALIBRATION_FILE).symlink_to((root / CALIBRATION_FILE).resolve())
        from sentence_transformers import CrossEncoder, SentenceTransformer

        fit = SentenceTransformer(str(fit_dir), device="cpu").eval()
        _export(fit[0].auto_model, fit.tokenizer, staged / FIT_FILE, pair=False)
        fit_reference = fit.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
        if is_slot_scorer_folder(slot_dir):
            slot_kind = "slot_scorer"
            scorer = SlotScorer(slot_dir)
            tokenizer, encoder, head = scorer.load()
            _export(encoder, tokenizer, staged / SLOT_FILE, pair=False)
            _export_head(head, int(scorer.config["dim"]), staged / HEAD_FILE)
            slot_reference = scorer.score(pairs)
        else:
            slot_kind = "cross_encoder"
            cross = CrossEncoder(str(slot_dir), max_length=MAX_TOKENS, device="cpu")
            cross.model.eval()
            _export(cross.model, cross.tokenizer, staged / SLOT_FILE, pair=True)
            slot_reference = cross.predict(pairs, convert_to_numpy=True, show_progress_bar=False)
        config: dict[str, Any] = {"format": FORMAT, "version": VERSION, "opset": OPSET,
                                  "fit_max_length": int(fit.max_seq_length),
                                  "slot": slot_kind}
        (staged / EXPORT_CONFIG).write_text(json.dumps(config), encoding="utf-8")
        fit_out = OnnxBiEncoder(probe).encode(texts)
        slot_out = (SlotScorer(slot_dir, onnx_encoder=staged / SLOT_FILE,
                               onnx_head=staged / HEAD_FILE).score(pairs)
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
        if int8:
            for name in (FIT_FILE, SLOT_FILE):
                _quantize(staged / name, staged / (name.removesuffix(".onnx") + INT8_SUFFIX))
            config["int8"] = {"thresholds": {}}  # staged, so that the loaders accept it
            (staged / EXPORT_CONFIG).write_text(json.dumps(config), encoding="utf-8")
            config["int8"] = calibrate_int8(root, probe, data_dir=data_dir, log=log)
        (staged / EXPORT_CONFIG).write_text(json.dumps(config, indent=1), encoding="utf-8")
        target = root / ONNX_FOLDER
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(staged), str(target))
        release_models(root)  # what this process loaded from the folder before may be stale
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


def _export_head(head: Any, dim: int, path: Path) -> None:
    """A slot scorer's MIL head -> ``path``: ``(h, mask, q)`` -> bag logits, axes dynamic."""
    import torch

    sample = (torch.zeros(1, 3, dim), torch.ones(1, 3, dtype=torch.bool), torch.zeros(1, dim))
    axes = {"h": {0: "batch", 1: "tokens"}, "mask": {0: "batch", 1: "tokens"},
            "q": {0: "batch"}, "logit": {0: "batch"}}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(head.eval(), sample, str(path), input_names=["h", "mask", "q"],
                          output_names=["logit"], dynamic_axes=axes, opset_version=OPSET,
                          dynamo=False)


def _quantize(source: Path, target: Path) -> None:
    """``source`` with int8 weights (dynamic quantisation, per output channel) -> ``target``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True)


def calibrate_int8(root: Path, probe: Path, *, data_dir: str | Path | None = None,
                   log: Callable[[str], None] = print) -> dict[str, Any]:
    """The int8 encoders' operating points: the folder's own, moved to flag as many dev pairs.

    Both exports score the folder's dev split (every dev pair, rebuilt from
    ``data_card.json``'s size and seed; never an evaluation-only source).  Each threshold
    ``t`` on a score (``fit_threshold`` and ``relevance_min_fit`` on tool-fit pairs,
    ``slot_threshold`` on slot pairs) becomes the value below which as many int8 scores
    fall as float32 scores fall below ``t`` (:func:`same_share`); ``relevance_margin``, a
    difference of scores, is kept.  The folder's calibration rule is not run again: the dev
    examples it was run on may have changed since, and the float32 thresholds are the
    folder's decision, not the exporter's.

    Args:
        root: The trained folder (``data_card.json``; its thresholds in ``calibration.json``).
        probe: A folder the library loads the staged export from (``fit/``, ``slot/``,
            ``onnx/``, ``calibration.json``).
        data_dir: The data root (default ``$TOOLGUARD_DATA_DIR``).
        log: Progress lines.

    Returns:
        ``{"thresholds": {...}, "float32_thresholds": {...}, "dev": {"tool_fit": n,
        "slot": n}, "flips": {"tool_fit": n, "slot": n}, "quantization": "..."}``:
        ``flips`` counts dev pairs on the other side of the threshold under int8
        (threshold names: :data:`toolguard.verifier.THRESHOLD_KEYS`).

    Raises:
        toolguard.errors.ConfigurationError: No readable ``data_card.json``, or no
            thresholds in the folder.
        FileNotFoundError: A dataset of the dev split is missing.
    """
    import numpy as np

    from toolguard.verifier import LearnedVerifier
    from toolguard_evals.verifier.data import training_examples

    float32 = LearnedVerifier(probe, backend="onnx")
    int8 = LearnedVerifier(probe, backend="onnx-int8")
    try:
        card = json.loads((root / "data_card.json").read_text(encoding="utf-8"))
        size, seed = card["size"], int(card["seed"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(f"--int8 rebuilds {root}'s dev split from its data_card.json: "
                                 f"{exc!r}") from exc
    if not {"fit_threshold", "slot_threshold"} <= set(float32.thresholds):
        raise ConfigurationError(f"--int8 moves {root}'s thresholds; its {CALIBRATION_FILE} "
                                 "has none")
    dev = [e for e in training_examples(size, data_dir=data_dir, seed=seed) if e.split == "dev"]
    kinds = {"tool_fit": [e.pair() for e in dev if e.kind == "tool_fit"],
             "slot": [e.pair() for e in dev if e.kind == "slot"]}
    log(f"dev split rebuilt ({size}, seed {seed}): {len(kinds['tool_fit'])} tool-fit and "
        f"{len(kinds['slot'])} slot pairs")
    scores = {kind: (np.asarray(float32.score(pairs)), np.asarray(int8.score(pairs)))
              for kind, pairs in kinds.items()}
    moved = dict(float32.thresholds)
    flips = {}
    for name, kind in (("fit_threshold", "tool_fit"), ("slot_threshold", "slot"),
                       ("relevance_min_fit", "tool_fit")):
        if name in moved:
            before, after = scores[kind]
            moved[name] = same_share(before, after, float32.thresholds[name])
            if name != "relevance_min_fit":
                flips[kind] = int(((before < float32.thresholds[name])
                                   != (after < moved[name])).sum())
    log(f"int8 thresholds {moved} (float32 {float32.thresholds}); dev pairs flipped {flips}")
    return {"thresholds": moved, "float32_thresholds": float32.thresholds,
            "dev": {k: len(v) for k, v in kinds.items()}, "flips": flips,
            "quantization": "dynamic, int8 weights per output channel"}


def same_share(before: Any, after: Any, threshold: float) -> float:
    """The threshold under which as many ``after`` scores fall as ``before`` under ``threshold``.

    ``threshold`` itself when that keeps the count; else the midpoint between two
    neighbouring ``after`` scores (the lowest one when none is below, just above the
    highest when all are), in ``[0, 1]``.
    """
    import numpy as np

    ordered = np.sort(np.asarray(after, dtype=np.float64))
    k = int((np.asarray(before) < threshold).sum())
    if int((ordered < threshold).sum()) == k:
        return float(threshold)
    if k == 0:
        value = float(ordered[0])
    elif k == len(ordered):
        value = float(np.nextafter(ordered[-1], np.inf))
    else:
        value = float(ordered[k - 1] + ordered[k]) / 2
    return min(1.0, max(0.0, value))
