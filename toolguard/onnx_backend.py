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
                     sigmoid), or a slot scorer's encoder -> token vectors
      slot_head.onnx a slot scorer's MIL head -> one logit per (context, document)
      fit.int8.onnx, slot.int8.onnx
                     with ``--int8`` only: the encoders with int8 weights
                     (``backend="onnx-int8"``); export.json's ``"int8"`` then holds the
                     operating points calibrated again on their dev scores

Tokenizers are the ``tokenizer.json`` files in ``fit/`` and ``slot/`` (the slot scorer's
encoder folder), read with the ``tokenizers`` library.  Nothing here imports torch or
transformers: with ``backend="onnx"`` the verifier runs on onnxruntime, tokenizers and numpy
alone (extra ``onnx``), which is most of its memory saving.  onnxruntime is imported only
when a model loads; sessions run on the CPU with spinning threads off, so they do not
compete with other threads for the cores.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from toolguard.errors import ConfigurationError

__all__ = ["EXPORT_COMMAND", "EXPORT_CONFIG", "FIT_FILE", "FORMAT", "HEAD_FILE",
           "INT8_SUFFIX", "ONNX_FOLDER", "PARITY_TOLERANCE", "SLOT_FILE", "VERSION",
           "OnnxBiEncoder", "OnnxCrossEncoder", "OnnxSlotHead", "OnnxTokenEncoder",
           "model_files", "read_export_config"]

ONNX_FOLDER: Final = "onnx"
"""Sub-folder of a trained verifier folder holding the ONNX models."""
EXPORT_CONFIG: Final = "export.json"
FIT_FILE: Final = "fit.onnx"
SLOT_FILE: Final = "slot.onnx"
INT8_SUFFIX: Final = ".int8.onnx"
"""The int8 copies of the two encoders (``fit.int8.onnx``, ``slot.int8.onnx``; dynamic
quantisation of their weights), written by the exporter's ``--int8``."""
HEAD_FILE: Final = "slot_head.onnx"
"""A slot scorer's MIL head (its ``forward``), exported beside its encoder."""
TOKENIZER_FILE: Final = "tokenizer.json"
FORMAT: Final = "toolguard-verifier-onnx"
VERSION: Final = 2
"""Export format version; version 1 (before the slot head was exported) is refused."""
EXPORT_COMMAND: Final = "toolguard verifier export-onnx DIR"
PARITY_TOLERANCE: Final = 1e-4
"""Largest absolute difference from torch's scores the exporter accepts."""
SLOT_KINDS: Final = ("cross_encoder", "slot_scorer")
_INSTALL = "pip install 'toolguard-agents[onnx]'"
_FIT, _SLOT = "fit", "slot"  # toolguard.verifier's FIT_FOLDER and SLOT_FOLDER (it imports this)


def read_export_config(folder: str | os.PathLike[str], *, int8: bool = False) -> dict[str, Any]:
    """``DIR/onnx/export.json`` of a trained folder, checked.

    Args:
        folder: The trained folder.
        int8: Also require the int8 encoders and their operating points.

    Returns:
        ``{"format", "version", "fit_max_length": int, "slot": "cross_encoder" |
        "slot_scorer", "parity": {...}}``, and ``"int8": {"thresholds": {...}, ...}`` when
        the export has int8 encoders.

    Raises:
        toolguard.errors.ConfigurationError: The folder has no ONNX export (the message
            names :data:`EXPORT_COMMAND`), the config is malformed, a model file is
            missing, or ``int8`` and the export has no int8 encoders.
    """
    root = Path(folder) / ONNX_FOLDER
    path = root / EXPORT_CONFIG
    if not path.is_file():
        raise ConfigurationError(f"{folder} has no ONNX export ({ONNX_FOLDER}/{EXPORT_CONFIG}); "
                                 f"write one with `{EXPORT_COMMAND}`")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        ok = (isinstance(config, dict) and config.get("format") == FORMAT
              and config.get("version") == VERSION
              and isinstance(config.get("fit_max_length"), int)
              and config.get("slot") in SLOT_KINDS
              and isinstance(config.get("int8", {}), dict)
              and isinstance(config.get("int8", {}).get("thresholds", {}), dict))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path} cannot be read: {exc!r}") from exc
    if not ok:
        raise ConfigurationError(f"{path} is not a {FORMAT} version {VERSION} config; write "
                                 f"it again with `{EXPORT_COMMAND}`")
    if int8 and "int8" not in config:
        raise ConfigurationError(f"{root} has no int8 encoders; write them with "
                                 f"`{EXPORT_COMMAND} --int8`")
    for name in model_files(folder, config["slot"], int8=int8).values():
        if not name.is_file():
            raise ConfigurationError(f"{name} is missing; run `{EXPORT_COMMAND}"
                                     f"{' --int8' if int8 else ''}`")
    return dict(config)


def model_files(folder: str | os.PathLike[str], slot: str, *, int8: bool = False
                ) -> dict[str, Path]:
    """The ONNX files a backend runs: ``{"fit", "slot"}`` and, for a slot scorer, ``"head"``.

    ``slot`` is the export's slot kind (:data:`SLOT_KINDS`); ``int8`` picks the int8
    encoders (the head is small and stays float32).
    """
    root = Path(folder) / ONNX_FOLDER

    def encoder(name: str) -> Path:
        return root / (name.removesuffix(".onnx") + INT8_SUFFIX if int8 else name)

    files = {"fit": encoder(FIT_FILE), "slot": encoder(SLOT_FILE)}
    if slot == "slot_scorer":
        files["head"] = root / HEAD_FILE
    return files


def _session(path: Path, threads: int | None) -> Any:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ImportError(f"backend='onnx' needs onnxruntime: {_INSTALL}") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 0  # 0: onnxruntime's default (the cores)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # no arena: it keeps the largest batch's buffers for good (an int8 verifier's process
    # stayed at ~440 MiB against ~263 without), and its speed gain is within noise (CHANGELOG)
    options.enable_cpu_mem_arena = False
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxTokenEncoder:
    """A transformer encoder exported to ONNX: texts (or text pairs) -> its output.

    Tokenises with the folder's fast tokenizer (``tokenizer.json``, the ``tokenizers``
    library: the same ids transformers' tokenizer gives, without importing transformers or
    torch); batches are padded to their longest text and cut at ``max_length`` tokens
    (longest first, as transformers' ``truncation=True``).

    Args:
        model: The ``.onnx`` file.
        tokenizer: A folder holding the model's ``tokenizer.json``.
        per_text: Run each text (pair) alone; ``None``: for an int8 model (a file whose
            name ends with :data:`INT8_SUFFIX`).  An int8 model needs it: dynamic
            quantisation scales each activation by its range over the whole batch, padding
            included, so a text batched with others would score differently from the same
            text alone; alone, a text's output depends on the text only.
        threads: onnxruntime intra-op threads (``None``: its default).

    Raises:
        toolguard.errors.ConfigurationError: The folder has no ``tokenizer.json``.
        ImportError: onnxruntime or tokenizers is not installed.
    """

    def __init__(self, model: str | os.PathLike[str], tokenizer: str | os.PathLike[str], *,
                 per_text: bool | None = None, threads: int | None = None) -> None:
        self.per_text = str(model).endswith(INT8_SUFFIX) if per_text is None else per_text
        self.session = _session(Path(model), threads)
        self.inputs = [i.name for i in self.session.get_inputs()]
        path = Path(tokenizer) / TOKENIZER_FILE
        if not path.is_file():
            raise ConfigurationError(f"{path} is missing: backend='onnx' reads the model's fast "
                                     "tokenizer (save the model again with transformers)")
        self._json = path.read_text(encoding="utf-8")
        self._by_length: dict[int, Any] = {}

    def tokenizer(self, max_length: int) -> Any:
        """The ``tokenizers.Tokenizer`` that cuts at ``max_length`` (one per length)."""
        tok = self._by_length.get(max_length)
        if tok is None:
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise ImportError(f"backend='onnx' needs tokenizers: {_INSTALL}") from exc
            tok = Tokenizer.from_str(self._json)
            padding = tok.padding or {}
            tok.enable_padding(pad_id=padding.get("pad_id", 0),
                               pad_type_id=padding.get("pad_type_id", 0),
                               pad_token=padding.get("pad_token", "[PAD]"))  # to the longest
            tok.enable_truncation(max_length, strategy="longest_first")
            self._by_length[max_length] = tok
        return tok

    def run(self, texts: Sequence[str], max_length: int,
            second: Sequence[str] | None = None) -> tuple[Any, Any]:
        """``(output, attention_mask)`` as numpy arrays for one padded batch.

        ``second``: the pairs' second texts (a cross-encoder's input: ``texts[i]`` with
        ``second[i]``).  Longer inputs are cut to ``max_length`` tokens.  The output is
        ``[batch, tokens, dim]`` token vectors or ``[batch, labels]`` logits, as exported;
        the mask is ``[batch, tokens]`` int64 (1 = a real token).
        """
        import numpy as np

        if self.per_text and len(texts) > 1:
            return _stack([self.run([text], max_length,
                                    None if second is None else [second[i]])
                           for i, text in enumerate(texts)])
        tok = self.tokenizer(max_length)
        batch = (list(zip(texts, second, strict=True)) if second is not None else list(texts))
        encodings = tok.encode_batch(batch)
        arrays = {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                  "attention_mask": np.array([e.attention_mask for e in encodings],
                                             dtype=np.int64),
                  "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64)}
        feed = {name: arrays[name] for name in self.inputs}
        return self.session.run(None, feed)[0], arrays["attention_mask"]


def _stack(parts: Sequence[tuple[Any, Any]]) -> tuple[Any, Any]:
    """One batch's ``(output, attention_mask)`` from single-text runs, zero-padded."""
    import numpy as np

    outputs = [out for out, _ in parts]
    masks = [mask for _, mask in parts]
    width = max(mask.shape[1] for mask in masks)
    mask = np.zeros((len(masks), width), dtype=np.int64)
    for i, m in enumerate(masks):
        mask[i, :m.shape[1]] = m[0]
    if outputs[0].ndim == 2:  # [1, labels] logits
        return np.concatenate(outputs), mask
    hidden = np.zeros((len(outputs), width, outputs[0].shape[2]), dtype=outputs[0].dtype)
    for i, out in enumerate(outputs):
        hidden[i, :out.shape[1]] = out[0]
    return hidden, mask


class OnnxSlotHead:
    """A slot scorer's MIL head (:mod:`toolguard.slot_scorer`) exported to ONNX.

    Args:
        model: The exported head (:data:`HEAD_FILE`).
        threads: onnxruntime intra-op threads (``None``: its default).

    Raises:
        ImportError: onnxruntime is not installed.
    """

    def __init__(self, model: str | os.PathLike[str], *, threads: int | None = None) -> None:
        self.session = _session(Path(model), threads)

    def __call__(self, h: Any, mask: Any, q: Any) -> Any:
        """Bag logits ``[B]`` (float32): the torch head's ``forward``.

        ``h``: token vectors ``[B, T, dim]``; ``mask``: ``[B, T]`` (bool, True = a real token;
        one per row at least); ``q``: document vectors ``[B, dim]``.
        """
        import numpy as np

        return self.session.run(None, {"h": np.ascontiguousarray(h, dtype=np.float32),
                                       "mask": np.ascontiguousarray(mask, dtype=bool),
                                       "q": np.ascontiguousarray(q, dtype=np.float32)})[0]


class OnnxBiEncoder:
    """The tool-fit bi-encoder on onnxruntime: mean-pooled, L2-normalised embeddings.

    Offers the part of sentence-transformers' ``SentenceTransformer.encode`` that the
    verifier calls.

    Args:
        folder: A trained verifier folder (with ``fit/`` and ``onnx/``).
        int8: Run the int8 encoder (:data:`INT8_SUFFIX`).
        threads: onnxruntime intra-op threads (``None``: its default).

    Raises:
        toolguard.errors.ConfigurationError: No ONNX export in ``folder`` (or no int8 one).
        ImportError: onnxruntime or tokenizers is not installed.
    """

    def __init__(self, folder: str | os.PathLike[str], *, int8: bool = False,
                 threads: int | None = None) -> None:
        root = Path(folder)
        config = read_export_config(root, int8=int8)
        self.max_length: int = config["fit_max_length"]
        self.encoder = OnnxTokenEncoder(model_files(root, config["slot"], int8=int8)["fit"],
                                        root / _FIT, threads=threads)

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
        int8: Run the int8 encoder (:data:`INT8_SUFFIX`).
        threads: onnxruntime intra-op threads (``None``: its default).

    Raises:
        toolguard.errors.ConfigurationError: No ONNX export in ``folder`` (or no int8
            one), or its slot model is not a cross-encoder.
        ImportError: onnxruntime or tokenizers is not installed.
    """

    def __init__(self, folder: str | os.PathLike[str], max_length: int, *, int8: bool = False,
                 threads: int | None = None) -> None:
        root = Path(folder)
        config = read_export_config(root, int8=int8)
        if config["slot"] != "cross_encoder":
            raise ConfigurationError(f"{root / ONNX_FOLDER} holds a {config['slot']}, not a "
                                     "cross-encoder")
        self.max_length = max_length
        self.encoder = OnnxTokenEncoder(model_files(root, config["slot"], int8=int8)["slot"],
                                        root / _SLOT, threads=threads)

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
