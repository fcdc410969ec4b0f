"""The learned verifier's encoders on onnxruntime instead of torch (``backend="onnx"``).

The scores are the same as torch's (the exporter checks them to within
:data:`PARITY_TOLERANCE` on sample texts before it writes anything); on 2 CPU cores one
MiniLM pass is faster (numbers: the CHANGELOG, ``toolguard bench precheck --backend onnx``).

Folder layout, inside a folder ``toolguard verifier train`` wrote (:data:`EXPORT_COMMAND`
adds it)::

    DIR/onnx/
      export.json    EXPORT_CONFIG: format, version, the fit model's token limit, the
                     slot model's kind, the parity measured at export
      fit.onnx       the tool-fit bi-encoder's transformer -> token vectors; mean pooling
                     and L2 normalisation are done here (as the folder's
                     sentence-transformers modules do)
      slot.onnx      the slot model: a cross-encoder -> one logit per pair (the score is its
                     sigmoid), or a slot scorer's encoder -> token vectors (its MIL head
                     stays in torch)

Tokenizers are the ones in ``fit/`` and ``slot/`` (the slot scorer's encoder folder).
onnxruntime is imported only when a model loads (extra ``onnx``); sessions run on the
CPU with spinning threads off, so they do not compete with torch's threads for the cores.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from toolguard.errors import ConfigurationError

__all__ = ["EXPORT_COMMAND", "EXPORT_CONFIG", "FIT_FILE", "FORMAT", "ONNX_FOLDER",
           "PARITY_TOLERANCE", "SLOT_FILE", "OnnxBiEncoder", "OnnxCrossEncoder",
           "OnnxTokenEncoder", "read_export_config"]

ONNX_FOLDER: Final = "onnx"
"""Sub-folder of a trained verifier folder holding the ONNX models."""
EXPORT_CONFIG: Final = "export.json"
FIT_FILE: Final = "fit.onnx"
SLOT_FILE: Final = "slot.onnx"
FORMAT: Final = "toolguard-verifier-onnx"
EXPORT_COMMAND: Final = "toolguard verifier export-onnx DIR"
PARITY_TOLERANCE: Final = 1e-4
"""Largest absolute difference from torch's scores the exporter accepts."""
SLOT_KINDS: Final = ("cross_encoder", "slot_scorer")
_INSTALL = "pip install 'toolguard-agents[onnx]'"
_FIT, _SLOT = "fit", "slot"  # toolguard.verifier's FIT_FOLDER and SLOT_FOLDER (it imports this)


def read_export_config(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """``DIR/onnx/export.json`` of a trained folder, checked.

    Returns:
        ``{"format", "version", "fit_max_length": int, "slot": "cross_encoder" |
        "slot_scorer", "parity": {...}}``.

    Raises:
        toolguard.errors.ConfigurationError: The folder has no ONNX export (the message
            names :data:`EXPORT_COMMAND`), or the config is malformed.
    """
    root = Path(folder) / ONNX_FOLDER
    path = root / EXPORT_CONFIG
    if not path.is_file():
        raise ConfigurationError(f"{folder} has no ONNX export ({ONNX_FOLDER}/{EXPORT_CONFIG}); "
                                 f"write one with `{EXPORT_COMMAND}`")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        ok = (isinstance(config, dict) and config.get("format") == FORMAT
              and isinstance(config.get("fit_max_length"), int)
              and config.get("slot") in SLOT_KINDS)
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path} cannot be read: {exc!r}") from exc
    if not ok:
        raise ConfigurationError(f"{path} is not a {FORMAT} config; write it again with "
                                 f"`{EXPORT_COMMAND}`")
    for name in (FIT_FILE, SLOT_FILE):
        if not (root / name).is_file():
            raise ConfigurationError(f"{root / name} is missing; run `{EXPORT_COMMAND}`")
    return dict(config)


def _session(path: Path, threads: int | None) -> Any:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ImportError(f"backend='onnx' needs onnxruntime: {_INSTALL}") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 0  # 0: onnxruntime's default (the cores)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxTokenEncoder:
    """A transformer encoder exported to ONNX: texts (or text pairs) -> its output.

    Args:
        model: The ``.onnx`` file.
        tokenizer: A folder holding the model's tokenizer (transformers format).
        threads: onnxruntime intra-op threads (``None``: its default).

    Raises:
        ImportError: onnxruntime or transformers is not installed.
    """

    def __init__(self, model: str | os.PathLike[str], tokenizer: str | os.PathLike[str], *,
                 threads: int | None = None) -> None:
        from transformers import AutoTokenizer

        self.session = _session(Path(model), threads)
        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        self.inputs = [i.name for i in self.session.get_inputs()]

    def run(self, texts: Sequence[str], max_length: int,
            second: Sequence[str] | None = None) -> tuple[Any, Any]:
        """``(output, attention_mask)`` as numpy arrays for one padded batch.

        ``second``: the pairs' second texts (a cross-encoder's input: ``texts[i]`` with
        ``second[i]``).  Longer inputs are cut to ``max_length`` tokens.  The output is
        ``[batch, tokens, dim]`` token vectors or ``[batch, labels]`` logits, as exported.
        """
        if second is not None:
            enc = self.tokenizer(list(texts), list(second), padding=True, truncation=True,
                                 max_length=max_length, return_tensors="np")
        else:
            enc = self.tokenizer(list(texts), padding=True, truncation=True,
                                 max_length=max_length, return_tensors="np")
        feed = {name: enc[name].astype("int64") for name in self.inputs}
        return self.session.run(None, feed)[0], enc["attention_mask"]


class OnnxBiEncoder:
    """The tool-fit bi-encoder on onnxruntime: mean-pooled, L2-normalised embeddings.

    Offers the part of sentence-transformers' ``SentenceTransformer.encode`` that the
    verifier calls.

    Args:
        folder: A trained verifier folder (with ``fit/`` and ``onnx/``).
        threads: onnxruntime intra-op threads (``None``: its default).

    Raises:
        toolguard.errors.ConfigurationError: No ONNX export in ``folder``.
        ImportError: onnxruntime or transformers is not installed.
    """

    def __init__(self, folder: str | os.PathLike[str], *, threads: int | None = None) -> None:
        root = Path(folder)
        config = read_export_config(root)
        self.max_length: int = config["fit_max_length"]
        self.encoder = OnnxTokenEncoder(root / ONNX_FOLDER / FIT_FILE, root / _FIT,
                                        threads=threads)

    def encode(self, texts: Sequence[str], *, batch_size: int = 32, **_: Any) -> Any:
        """``[len(texts), dim]`` float32 unit vectors (mean pooling over real tokens)."""
        import numpy as np

        out = []
        for start in range(0, len(texts), batch_size):
            hidden, mask = self.encoder.run(list(texts[start:start + batch_size]),
                                            self.max_length)
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            out.append((pooled / norms).astype(np.float32))
        return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


class OnnxCrossEncoder:
    """A one-label cross-encoder on onnxruntime: the sigmoid of its logit per pair.

    Offers the part of sentence-transformers' ``CrossEncoder.predict`` that the verifier
    calls.

    Args:
        folder: A trained verifier folder whose ``slot/`` is a cross-encoder.
        max_length: Tokens per pair (query and document together).
        threads: onnxruntime intra-op threads (``None``: its default).

    Raises:
        toolguard.errors.ConfigurationError: No ONNX export in ``folder``, or its slot
            model is not a cross-encoder.
        ImportError: onnxruntime or transformers is not installed.
    """

    def __init__(self, folder: str | os.PathLike[str], max_length: int, *,
                 threads: int | None = None) -> None:
        root = Path(folder)
        config = read_export_config(root)
        if config["slot"] != "cross_encoder":
            raise ConfigurationError(f"{root / ONNX_FOLDER} holds a {config['slot']}, not a "
                                     "cross-encoder")
        self.max_length = max_length
        self.encoder = OnnxTokenEncoder(root / ONNX_FOLDER / SLOT_FILE, root / _SLOT,
                                        threads=threads)

    def predict(self, pairs: Sequence[tuple[str, str]], *, batch_size: int = 32,
                **_: Any) -> Any:
        """``[len(pairs)]`` float32 scores in ``[0, 1]``."""
        import numpy as np

        out = []
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start:start + batch_size]
            logits, _ = self.encoder.run([q for q, _ in batch], self.max_length,
                                         [d for _, d in batch])
            out.append(1.0 / (1.0 + np.exp(-logits.reshape(-1).astype(np.float64))))
        return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)
