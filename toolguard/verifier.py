"""The learned verifier: tool fit and slot presence, judged by small trained encoders.

Two questions need meaning, not word overlap:

- **tool fit**: does a tool serve (a part of) what the user wants?
  Pair: (:func:`goal_text`, one tool's name, description and parameters) ->
  :func:`tool_fit_pair`.
- **slot presence**: is a required parameter's value stated in the conversation, or
  derivable from it?  Pair: (:func:`slot_context`, one required parameter's name,
  description and type, and its tool) -> :func:`slot_pair`.

**One interface, two models.**  Every judgment goes through ``score(text_pairs)`` (LangChain's
``BaseCrossEncoder`` shape), one score in ``[0, 1]`` per ``(query, document)`` pair; the task
is named by a prefix of the query text: :data:`TOOL_FIT_PREFIX` (``"tool fit: "``) or
:data:`SLOT_PREFIX` (``"slot: "``).  Labels: ``1`` = the tool fits / a value is present,
``0`` = it does not / absent.  What ``toolguard verifier train`` writes holds two models:

- ``fit/``: a sentence-transformers bi-encoder (all-MiniLM-L6-v2 fine-tuned on tool-fit
  pairs).  The score is the cosine of the goal's and the tool document's embeddings, clipped
  to ``[0, 1]``.  Embeddings are cached per text, so a tool set's documents are encoded once
  and a goal once per turn: a decision over N tools costs one forward pass, not N.
- ``slot/``: a sentence-transformers ``CrossEncoder`` (``num_labels=1``, sigmoid score)
  for slot presence, which needs the context and the parameter read together; or a
  token-level slot scorer (:mod:`toolguard.slot_scorer`: a ``slot_head.json`` folder), which
  encodes the context once and scores each parameter with a small head.

A single ``CrossEncoder`` folder, a hub id or any object with ``score`` answers both tasks
in place of ours.  Training builds its pairs with exactly these functions, so what the
models see at run time is what they were trained on.

Lengths are bounded in characters before tokenisation (:data:`MAX_GOAL_CHARS`,
:data:`MAX_CONTEXT_CHARS`, :data:`MAX_TOOL_CHARS`), so the pair fits the encoder's
:data:`MAX_TOKENS` window with the query's most relevant part kept, instead of the
tokenizer cutting whatever is longest from the end.

**At run time** (:class:`LearnedVerifier`, any LangChain ``BaseCrossEncoder`` in its place):
``Precheck(mode="learned")`` and ``Guard(relevance="learned")``
(:class:`LearnedRelevanceJudge`) name a trained folder with ``verifier=`` or the
:data:`ENV_VAR` environment variable; without one they raise
:class:`~toolguard.errors.ConfigurationError` naming :data:`TRAIN_COMMAND`.  The operating
points are the trained folder's (``calibration.json``: chosen on the training sources' dev
split for "when unsure, proceed"); an explicit option or, for a model without them, the
constants :data:`FIT_THRESHOLD`, :data:`SLOT_THRESHOLD`, :data:`RELEVANCE_MARGIN` apply.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from langchain_core.cross_encoders import BaseCrossEncoder

from toolguard.conversation import Conversation, MessagesLike
from toolguard.errors import ConfigurationError, InputError, at_least
from toolguard.lru import LRUCache
from toolguard.relevance import RelevanceJudge, RelevanceResult
from toolguard.specs import ToolSpec
from toolguard.text import split_identifier

__all__ = [
    "BACKENDS",
    "ENV_VAR",
    "FIT_THRESHOLD",
    "GOAL_CENTER_FILE",
    "MAX_CONTEXT_CHARS",
    "MAX_GOAL_CHARS",
    "MAX_TOKENS",
    "MAX_TOOL_CHARS",
    "RELEVANCE_MARGIN",
    "SLOT_PREFIX",
    "SLOT_THRESHOLD",
    "TOOL_FIT_PREFIX",
    "TOP_K",
    "TRAIN_COMMAND",
    "Backend",
    "CrossEncoderLike",
    "LearnedRelevanceJudge",
    "LearnedVerifier",
    "VerifierOption",
    "candidates",
    "check_top_k",
    "goal_text",
    "parameter_document",
    "read_goal_center",
    "release_models",
    "resolve_verifier",
    "slot_context",
    "slot_pair",
    "tool_document",
    "tool_fit_pair",
    "tool_fit_pairs",
    "verifier_thresholds",
]

TOOL_FIT_PREFIX = "tool fit: "
"""Query prefix of a tool-fit pair."""
SLOT_PREFIX = "slot: "
"""Query prefix of a slot-presence pair."""

MAX_TOKENS = 256
"""The cross-encoder's input window (tokens, query and document together); training and
loading both set ``max_length`` to it."""
MAX_GOAL_CHARS = 600
"""Characters of the goal kept (~150 tokens)."""
MAX_CONTEXT_CHARS = 700
"""Characters of the slot context kept (~175 tokens)."""
MAX_TOOL_CHARS = 400
"""Characters of a tool document (tool fit) or parameter document (slot) kept (~100 tokens)."""
MAX_ITEM_CHARS = 300
"""Characters kept of one message or tool result inside the slot context (its start)."""
MAX_PARAMS = 10
"""Parameters listed in a tool-fit document at most (required ones first)."""


def _squash(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str, limit: int) -> str:
    text = _squash(text)
    return text if len(text) <= limit else text[: max(0, limit - 3)].rstrip() + "..."


def _conversation(messages: MessagesLike | Conversation) -> Conversation:
    return messages if isinstance(messages, Conversation) else Conversation.read(messages)


def _type_of(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = "/".join(str(k) for k in kind)
    text = str(kind or ("enum" if "enum" in schema else "any"))
    if isinstance(schema.get("enum"), list):
        text += " one of " + ", ".join(json.dumps(v) for v in schema["enum"][:8])
    return text


def _describe(schema: Any) -> str:
    if isinstance(schema, dict) and isinstance(schema.get("description"), str):
        return _squash(schema["description"])
    return ""


def _name(name: str) -> str:
    """``get_user_id`` -> ``get_user_id (get user id)``; plain words stay as they are."""
    words = " ".join(split_identifier(name).split()).casefold()
    return name if words == name.casefold() else f"{name} ({words})"


# ---------------------------------------------------------------------------- texts
def goal_text(messages: MessagesLike | Conversation) -> str:
    """What the user wants now, across turns, as the query of a tool-fit pair (no prefix).

    The :class:`~toolguard.conversation.Goal` of the conversation: the latest user message
    joined with the earlier ones it answers, confirms, corrects or refers to ("Reset my
    password" + "my username is JaneSmith" -> the two lines ``Reset my password`` and
    ``my username is JaneSmith``), one line per message, oldest first.  At most
    :data:`MAX_GOAL_CHARS` characters: when longer, each message keeps an equal share of
    its start, so the opening request and the latest answer are both there.

    Args:
        messages: The conversation (any form :func:`~toolguard.conversation.as_messages`
            accepts) or an already read :class:`~toolguard.conversation.Conversation`.

    Returns:
        The goal text; ``""`` when there is no user message.

    Raises:
        toolguard.errors.InputError: A message is of no supported form.
    """
    conv = _conversation(messages)
    goal = set(conv.goal.indexes)
    parts = [p for p in (_squash(c.text) for c in conv.texts
                         if c.source == "user" and c.index in goal) if p]
    return _fit_goal(parts)


def _fit_goal(parts: Sequence[str]) -> str:
    """Non-empty lines joined, at most :data:`MAX_GOAL_CHARS`: an equal share of each."""
    lines = [p for p in (_squash(p) for p in parts) if p]
    total = sum(len(p) for p in lines) + len(lines) - 1
    if total > MAX_GOAL_CHARS:
        share = max(40, (MAX_GOAL_CHARS - len(lines) + 1) // len(lines))
        lines = [_cut(p, share) for p in lines]
    return "\n".join(lines)[:MAX_GOAL_CHARS]


def slot_context(messages: MessagesLike | Conversation) -> str:
    """The user side and tool results of a conversation, as the query of a slot pair.

    One line per text: ``User: ...`` for a user message, ``Tool result (NAME): ...`` for a
    tool's answer (system prompts and the assistant's words are not included: a value the
    assistant proposed is not one the user gave).  Bounded to :data:`MAX_CONTEXT_CHARS`
    characters: the goal's user messages come first in priority, then the other texts from
    the newest back; each text keeps its first :data:`MAX_ITEM_CHARS` characters; what is
    kept is printed oldest first.  So the request and its answers are always there and an
    old, long history is what is dropped.

    Args:
        messages: The conversation or an already read
            :class:`~toolguard.conversation.Conversation`.

    Returns:
        The context text; ``""`` when the conversation has no user message or tool result.

    Raises:
        toolguard.errors.InputError: A message is of no supported form.
    """
    conv = _conversation(messages)
    lines: dict[int, str] = {}
    for k, item in enumerate(conv.texts):
        if item.source == "user":
            lines[k] = "User: " + _cut(item.text, MAX_ITEM_CHARS)
        elif item.source == "tool":
            lines[k] = f"Tool result ({item.tool or 'tool'}): " + _cut(item.text, MAX_ITEM_CHARS)
    goal = set(conv.goal.indexes)
    order = sorted(lines, key=lambda k: (conv.texts[k].index not in goal, -k))
    kept: list[int] = []
    used = 0
    for k in order:
        cost = len(lines[k]) + 1
        if used + cost > MAX_CONTEXT_CHARS:
            if not kept:  # the latest goal message alone is too long: its start
                kept.append(k)
                lines[k] = _cut(lines[k], MAX_CONTEXT_CHARS)
            continue
        kept.append(k)
        used += cost
    return "\n".join(lines[k] for k in sorted(kept))


# ---------------------------------------------------------------------------- pairs
def tool_document(tool: ToolSpec) -> str:
    """A tool as the document of a tool-fit pair: name, description, parameters.

    ``NAME (name words): description | parameters: p (type, required): description; ...``,
    required parameters first, at most :data:`MAX_PARAMS`, cut to :data:`MAX_TOOL_CHARS`.
    """
    required = [p for p in tool.required if p in tool.properties]
    rest = [p for p in tool.properties if p not in required]
    params = []
    for pname in [*required, *rest][:MAX_PARAMS]:
        schema = tool.properties[pname]
        flag = "required" if pname in required else "optional"
        desc = _describe(schema)
        params.append(f"{pname} ({_type_of(schema)}, {flag})" + (f": {desc[:80]}" if desc else ""))
    head = f"{_name(tool.name)}: {_squash(tool.description)}".rstrip(": ")
    text = head + (" | parameters: " + "; ".join(params) if params else " | no parameters")
    return _cut(text, MAX_TOOL_CHARS)


def parameter_document(tool: ToolSpec, parameter: str) -> str:
    """A parameter as the document of a slot pair: name, type, description, its tool.

    ``NAME (name words; type): description | tool: TOOL: tool description``, cut to
    :data:`MAX_TOOL_CHARS` (the tool's description gets what the parameter leaves).

    Raises:
        toolguard.errors.InputError: ``parameter`` is not a parameter of ``tool``.
    """
    if parameter not in tool.properties:
        raise InputError(f"{tool.name!r} has no parameter {parameter!r}; it has "
                         f"{sorted(tool.properties)}")
    schema = tool.properties[parameter]
    words = " ".join(split_identifier(parameter).split()).casefold()
    desc = _describe(schema)
    head = f"{parameter} ({words}; {_type_of(schema)})" + (f": {desc}" if desc else "")
    head = _cut(head, MAX_TOOL_CHARS // 2)
    tail = f" | tool: {tool.name}: {_squash(tool.description)}".rstrip(": ")
    return _cut(head + tail, MAX_TOOL_CHARS)


def tool_fit_pair(goal: str, tool: ToolSpec) -> tuple[str, str]:
    """(query text, document text) of the tool-fit task.

    Args:
        goal: What the user wants (:func:`goal_text`); lines (messages) are kept, each
            squashed, and cut to an equal share of :data:`MAX_GOAL_CHARS` when longer
            (``goal_text``'s output passes unchanged).
        tool: One tool.

    Returns:
        ``("tool fit: " + goal, tool_document(tool))``.  Label 1: the tool serves the goal
        or a part of it (a prerequisite step such as a lookup counts as serving it); 0: it
        does not.
    """
    return TOOL_FIT_PREFIX + _fit_goal(goal.split("\n")), tool_document(tool)


def slot_pair(context: str, tool: ToolSpec, parameter: str) -> tuple[str, str]:
    """(query text, document text) of the slot-presence task.

    Args:
        context: The user side and tool results (:func:`slot_context`; cut to
            :data:`MAX_CONTEXT_CHARS`, keeping the end).
        tool: The tool the parameter belongs to.
        parameter: One (required) parameter of ``tool``.

    Returns:
        ``("slot: " + context, parameter_document(tool, parameter))``.  Label 1: a value for
        the parameter is stated in the context or derivable from it (a tool result, a
        relative date, an obvious default the user implies); 0: the user would have to be
        asked.

    Raises:
        toolguard.errors.InputError: ``parameter`` is not a parameter of ``tool``.
    """
    context = _squash_lines(context)
    if len(context) > MAX_CONTEXT_CHARS:
        context = "..." + context[-(MAX_CONTEXT_CHARS - 3):]
    return SLOT_PREFIX + context, parameter_document(tool, parameter)


def _squash_lines(text: str) -> str:
    return "\n".join(s for s in (_squash(line) for line in text.split("\n")) if s)


def tool_fit_pairs(goal: str, tools: Sequence[ToolSpec]) -> list[tuple[str, str]]:
    """:func:`tool_fit_pair` for each tool, in order."""
    return [tool_fit_pair(goal, t) for t in tools]


# ---------------------------------------------------------------------------- the model
ENV_VAR = "TOOLGUARD_VERIFIER"
"""Environment variable naming a trained verifier (a folder, or a hub id with network)."""
TRAIN_COMMAND = "toolguard verifier train --size full --out DIR"
"""The command that trains a verifier (``toolguard-evals``)."""

FIT_THRESHOLD = 0.5
"""Tool fit: a tool serves the goal at or above this score (pre-check: no tool at or above
it gives ``no_suitable_tool``; relevance: a better tool must reach it)."""
SLOT_THRESHOLD = 0.5
"""Slot presence: a required value counts as present at or above this score (below it, the
pre-check asks for the parameter)."""
RELEVANCE_MARGIN = 0.3
"""Relevance: another tool's fit must exceed the called tool's by at least this much."""
TOP_K: int | None = None
"""Tools scored per goal at most, picked by word overlap first (``None``: every tool)."""


@runtime_checkable
class CrossEncoderLike(Protocol):
    """Anything that scores text pairs: LangChain's ``BaseCrossEncoder`` shape.

    ``score(text_pairs)`` returns one float per pair, in order; toolguard's thresholds read
    them as probabilities in ``[0, 1]`` (1: fits / present).
    """

    def score(self, text_pairs: list[tuple[str, str]]) -> list[float]:
        """One score in ``[0, 1]`` per ``(query, document)`` pair."""
        ...


Backend: TypeAlias = Literal["torch", "onnx", "onnx-int8"]
"""Where :class:`LearnedVerifier` runs a trained folder's encoders: torch, or its ONNX export
on onnxruntime with float32 or int8 encoder weights."""
BACKENDS: tuple[Backend, ...] = ("torch", "onnx", "onnx-int8")
VerifierOption: TypeAlias = "str | os.PathLike[str] | CrossEncoderLike | None"
"""What a ``verifier=`` option takes (see :func:`resolve_verifier`)."""


def _missing_model_error(why: str) -> ConfigurationError:
    return ConfigurationError(
        f"{why}: the learned verifier needs a trained model. Train one with "
        f"`{TRAIN_COMMAND}` (toolguard-evals) and pass verifier=DIR or set {ENV_VAR}=DIR "
        "(a Hugging Face hub id also works where the machine has network).")


def _looks_like_hub_id(source: str) -> bool:
    parts = source.split("/")
    return len(parts) == 2 and all(
        p and p.replace("-", "").replace("_", "").replace(".", "").isalnum() for p in parts)


_LOADED: dict[tuple[Any, ...], Any] = {}
"""Models loaded, shared process-wide: ``(kind, source, onnx folder or None, *options)``."""
_LOADED_LOCK = threading.Lock()
_PREDICT_LOCK = threading.Lock()
"""One forward pass at a time, process-wide: on a few CPU cores parallel passes only contend."""

FIT_FOLDER = "fit"
"""Sub-folder of a trained verifier holding the tool-fit bi-encoder."""
SLOT_FOLDER = "slot"
"""Sub-folder of a trained verifier holding the slot-presence model (a cross-encoder, or a
:mod:`toolguard.slot_scorer` folder)."""
CALIBRATION_FILE = "calibration.json"
"""File of a trained verifier holding its operating points (:attr:`LearnedVerifier.thresholds`)."""
GOAL_CENTER_FILE = "goal_center.json"
"""File in ``fit/``: ``{"vector": [...], "n_goals": N}``, the mean embedding of N training
goals.  A tool's fit is its cosine to the goal minus its cosine to this average goal, so a
tool whose description is close to every request (a generic or long one) does not fit every
request, and one domain's scores compare with another's (:meth:`LearnedVerifier.score`)."""


def read_goal_center(folder: str | os.PathLike[str]) -> Any:
    """The goal centre of a ``fit/`` folder (:data:`GOAL_CENTER_FILE`) as a numpy vector.

    Returns:
        A float32 array of the embedding width, or ``None`` when the folder has no such
        file (a verifier trained before it: plain cosine).

    Raises:
        toolguard.errors.ConfigurationError: The file is not a goal centre.
    """
    path = Path(folder) / GOAL_CENTER_FILE
    if not path.is_file():
        return None
    import numpy as np

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        vector = np.asarray(data["vector"], dtype=np.float32)
        if vector.ndim != 1 or not vector.size or not np.isfinite(vector).all():
            raise ValueError(f"a non-empty finite vector expected, got shape {vector.shape}")
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigurationError(f"{path} is not a goal centre: {exc!r}") from exc
    return vector


def _load_cross_encoder(source: str, max_length: int, onnx: Path | None = None,
                        int8: bool = False) -> Any:
    """One sentence-transformers ``CrossEncoder`` per source, shared (CPU, eval mode).

    With ``onnx`` (a trained folder): its exported slot cross-encoder on onnxruntime (the
    int8 one with ``int8``).
    """
    key = ("ce", source, onnx, max_length, int8)
    with _LOADED_LOCK:
        model = _LOADED.get(key)
        if model is None and onnx is not None:
            from toolguard.onnx_backend import OnnxCrossEncoder

            model = _LOADED[key] = OnnxCrossEncoder(onnx, max_length, int8=int8)
        if model is None:
            from sentence_transformers import CrossEncoder

            model = CrossEncoder(source, max_length=max_length, device="cpu")
            if model.num_labels != 1:
                raise ConfigurationError(
                    f"the verifier at {source!r} has {model.num_labels} labels; toolguard reads "
                    f"one score per pair (num_labels=1); train one with `{TRAIN_COMMAND}`")
            model.model.eval()
            _LOADED[key] = model
        return model


def _is_under(path: str | os.PathLike[str] | None, root: str) -> bool:
    """Whether ``path`` is ``root`` or inside it (absolute paths, links not followed)."""
    if path is None:
        return False
    found = os.path.abspath(path)
    return found == root or found.startswith(root.rstrip(os.sep) + os.sep)


def release_models(folder: str | os.PathLike[str]) -> int:
    """Forget the shared models and verifiers loaded from ``folder`` or a folder inside it.

    Models are loaded once per folder and shared process-wide (:func:`resolve_verifier`,
    :class:`LearnedVerifier`); after retraining or re-exporting a folder in the same
    process, or before deleting one, release it so the next load reads its files again.
    Components built before keep the models they hold.

    Args:
        folder: A trained verifier folder, or a folder holding some.

    Returns:
        How many shared models and verifiers were forgotten.
    """
    root = os.path.abspath(folder)
    with _LOADED_LOCK:
        models = [k for k in _LOADED if _is_under(k[1], root) or _is_under(k[2], root)]
        verifiers = [k for k in _VERIFIERS if _is_under(k, root)]
        for key in models:
            del _LOADED[key]
        for name in verifiers:
            del _VERIFIERS[name]
    return len(models) + len(verifiers)


def _is_slot_scorer(source: str | Path) -> bool:
    """Whether ``source`` is a folder holding a token-level slot scorer (``slot_head.json``)."""
    from toolguard.slot_scorer import is_slot_scorer_folder

    return Path(source).is_dir() and is_slot_scorer_folder(source)


def _load_slot_scorer(source: str, onnx: Path | None = None, int8: bool = False) -> Any:
    """One :class:`~toolguard.slot_scorer.SlotScorer` per folder, shared, loaded now.

    With ``onnx`` (a trained folder): its exported encoder (the int8 one with ``int8``) and
    head on onnxruntime.
    """
    from toolguard.onnx_backend import model_files
    from toolguard.slot_scorer import SlotScorer

    key = ("mil", source, onnx, int8)
    with _LOADED_LOCK:
        model = _LOADED.get(key)
        if model is None:
            files = {} if onnx is None else model_files(onnx, "slot_scorer", int8=int8)
            model = SlotScorer(source, onnx_encoder=files.get("slot"), onnx_head=files.get("head"))
            model.load()
            _LOADED[key] = model
        return model


def _load_bi_encoder(source: str, onnx: Path | None = None, int8: bool = False) -> Any:
    """One sentence-transformers ``SentenceTransformer`` per source, shared (CPU, eval mode).

    Its saved ``max_seq_length`` (what it was trained with) is kept.  With ``onnx`` (a
    trained folder): its exported fit encoder on onnxruntime (the int8 one with ``int8``).
    """
    key = ("bi", source, onnx, int8)
    with _LOADED_LOCK:
        model = _LOADED.get(key)
        if model is None and onnx is not None:
            from toolguard.onnx_backend import OnnxBiEncoder

            model = _LOADED[key] = OnnxBiEncoder(onnx, int8=int8)
        if model is None:
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(source, device="cpu")
            model.eval()
            _LOADED[key] = model
        return model


class LearnedVerifier(BaseCrossEncoder):
    """toolguard's learned verifier: tool fit and slot presence scored as text pairs.

    A LangChain ``BaseCrossEncoder``: :meth:`score` takes ``(query, document)`` pairs (from
    :func:`tool_fit_pair` / :func:`slot_pair`) and returns scores in ``[0, 1]``.  For a
    folder that ``toolguard verifier train`` wrote, tool-fit pairs go to its bi-encoder
    (``fit/``: cosine of embeddings, each text encoded once and cached) and slot pairs to its
    ``slot/`` model (a cross-encoder's sigmoid, or a token-level slot scorer's; cached per
    pair); for a single ``CrossEncoder`` (a folder, a hub id or a loaded model) both go to
    it.  Models load on first use (once per process and source, under a lock; ~0.2-1 s on 2
    cores), on the CPU.

    Args:
        model: A trained folder (what ``toolguard verifier train`` writes), a
            ``CrossEncoder`` folder, a Hugging Face hub id (``owner/name``; needs network
            unless cached), or a sentence-transformers ``CrossEncoder`` already loaded
            (num_labels=1).  ``None``: the :data:`ENV_VAR` environment variable.
        max_length: Tokens per cross-encoder pair (query and document together); longer
            pairs are cut.  The bi-encoder keeps the length it was trained with.
        batch_size: Pairs (texts) per forward pass.
        cache_size: Pair scores, and text embeddings, kept each, >= 0 (0: no cache).
        backend: ``"torch"`` (default), ``"onnx"`` or ``"onnx-int8"``: the trained folder's
            models on onnxruntime (:mod:`toolguard.onnx_backend`; the ``onnx`` extra and an
            export the folder holds: ``toolguard verifier export-onnx DIR [--int8]``),
            without torch.  ``"onnx"``: the same scores, faster on the CPU.
            ``"onnx-int8"``: int8 encoder weights, faster again and smaller; scores move
            slightly, so the export moves the folder's operating points to flag as many of
            its dev pairs as before.

    Attributes:
        thresholds: The trained folder's operating points, ``{"fit_threshold": float,
            "slot_threshold": float}`` and, when calibrated, ``relevance_min_fit`` and
            ``relevance_margin`` (from its ``calibration.json``; empty for another model).
            ``Precheck`` and :class:`LearnedRelevanceJudge` use them unless given their own.
            With ``backend="onnx-int8"``, the export's int8 ones.
        backend: Where the models run (:data:`BACKENDS`).
        root: The trained folder (with ``fit/`` and ``slot/``), or ``None`` for a single
            cross-encoder.

    Raises:
        toolguard.errors.ConfigurationError: No model given and :data:`ENV_VAR` unset, a
            path that is neither a folder nor a hub id, a folder holding no model, a
            ``calibration.json`` that is not a JSON object of thresholds in ``[0, 1]``, or a
            bound out of range, an unknown ``backend``, or an ONNX backend for anything but
            a trained folder with that export (at construction); a cross-encoder with more
            than one label (at load).
        ImportError: ``sentence-transformers`` is not installed (the ``learned`` extra;
            backend ``"torch"``), or onnxruntime and tokenizers with an ONNX backend (the
            ``onnx`` extra).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | Any | None = None,
        *,
        max_length: int = MAX_TOKENS,
        batch_size: int = 32,
        cache_size: int = 4096,
        backend: Backend = "torch",
    ) -> None:
        at_least("max_length", max_length, 16)
        at_least("batch_size", batch_size, 1)
        at_least("cache_size", cache_size, 0)
        if backend not in BACKENDS:
            raise ConfigurationError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
        self.backend: Backend = backend
        self.root: Path | None = None
        self.max_length = max_length
        self.batch_size = batch_size
        self.cache_size = cache_size
        self._model: Any = None
        self._fit_model: Any = None
        self._center: Any = None
        self._slot_scorer = False
        self.source: str
        self.fit_source: str | None = None
        self.thresholds: dict[str, float] = {}
        if model is not None and not isinstance(model, (str, os.PathLike)):
            if not callable(getattr(model, "predict", None)):
                raise ConfigurationError(
                    "model must be a folder, a hub id or a sentence-transformers CrossEncoder; "
                    f"got {type(model).__name__}")
            self._model = model
            self.source = f"<{type(model).__name__}>"
        else:
            self.source = _resolve_source(model)
            root = Path(self.source)
            if (root / FIT_FOLDER / "config.json").is_file():
                self.fit_source = str(root / FIT_FOLDER)
                self.source = str(root / SLOT_FOLDER)
                self.root = root
            self.thresholds = _read_thresholds(root)
            if backend == "torch" and importlib.util.find_spec("sentence_transformers") is None:
                raise ImportError("the learned verifier needs sentence-transformers and torch: "
                                  "pip install 'toolguard-agents[learned]'")
            if self.fit_source is not None:
                self._center = read_goal_center(self.fit_source)
            self._slot_scorer = _is_slot_scorer(self.source)
            if self._slot_scorer and self.fit_source is None:
                raise ConfigurationError(
                    f"{self.source} is a slot scorer: it scores slot pairs only; pass the "
                    f"trained folder that holds it with a fit/ model ({TRAIN_COMMAND})")
        if backend != "torch":
            from toolguard.onnx_backend import read_export_config

            if self.root is None:
                raise ConfigurationError(
                    f"backend={backend!r} runs a trained folder's ONNX export (fit/, slot/ and "
                    f"onnx/); got {self.source!r}")
            export = read_export_config(self.root, int8=backend == "onnx-int8")
            if backend == "onnx-int8":
                self.thresholds = {**self.thresholds, **_checked_thresholds(
                    export["int8"]["thresholds"], f"{self.root}/onnx/export.json int8")}
            missing = [m for m in ("onnxruntime", "tokenizers")
                       if importlib.util.find_spec(m) is None]
            if missing:  # not a silent fallback at the first decision
                raise ImportError(f"backend={backend!r} needs {' and '.join(missing)}: "
                                  "pip install 'toolguard-agents[onnx]'")
        self._lock = threading.Lock()
        self._scores = LRUCache(cache_size)
        self._vectors = LRUCache(cache_size)

    def __repr__(self) -> str:
        backend = "" if self.backend == "torch" else f", backend={self.backend!r}"
        folder = (self.fit_source or self.source).rsplit(os.sep, 1)[0]
        return f"LearnedVerifier({folder!r}{backend})"

    def load(self) -> Any:
        """The slot (or only) ``CrossEncoder``, loaded now if not yet (thread-safe).

        Raises:
            toolguard.errors.ConfigurationError: The model has more than one label.
            OSError: The folder or hub id cannot be read (no network for a hub id).
        """
        if self._model is None:
            with self._lock:
                if self._model is None:
                    onnx, int8 = self._onnx()
                    self._model = (
                        _load_slot_scorer(self.source, onnx, int8) if self._slot_scorer
                        else _load_cross_encoder(self.source, self.max_length, onnx, int8))
        return self._model

    def load_fit(self) -> Any:
        """The tool-fit bi-encoder, loaded now if not yet; ``None`` without one.

        Raises:
            OSError: The folder cannot be read.
        """
        if self.fit_source is not None and self._fit_model is None:
            with self._lock:
                if self._fit_model is None:
                    self._fit_model = _load_bi_encoder(self.fit_source, *self._onnx())
        return self._fit_model

    def _onnx(self) -> tuple[Path | None, bool]:
        """``(trained folder, int8)`` for an ONNX backend, ``(None, False)`` for torch."""
        return (None if self.backend == "torch" else self.root), self.backend == "onnx-int8"

    def score(self, text_pairs: list[tuple[str, str]]) -> list[float]:
        """Scores in ``[0, 1]``, one per ``(query, document)`` pair, in order.

        Tool-fit pairs (query starting with :data:`TOOL_FIT_PREFIX`) of a trained folder:
        cosine of the bi-encoder's embeddings, less the tool's cosine to the folder's goal
        centre when it has one (:data:`GOAL_CENTER_FILE`), clipped to ``[0, 1]``; other
        pairs: the ``slot/`` (or only) model's score.  Cached texts and pairs are not
        encoded again.
        Thread-safe (forward passes are serialised process-wide).
        """
        pairs = [(str(q), str(d)) for q, d in text_pairs]
        if self.fit_source is None:
            return self._cross(pairs)
        fit = [i for i, (q, _) in enumerate(pairs) if q.startswith(TOOL_FIT_PREFIX)]
        rest = [i for i, (q, _) in enumerate(pairs) if not q.startswith(TOOL_FIT_PREFIX)]
        out = [0.0] * len(pairs)
        for i, s in zip(fit, self._cosine([pairs[i] for i in fit]), strict=True):
            out[i] = s
        for i, s in zip(rest, self._cross([pairs[i] for i in rest]), strict=True):
            out[i] = s
        return out

    def _cross(self, pairs: list[tuple[str, str]]) -> list[float]:
        scores = self._scores.get_many(pairs)
        todo = list(dict.fromkeys(p for p in pairs if p not in scores))
        if todo:
            model = self.load()
            with _PREDICT_LOCK:  # a fast tokenizer shared by threads can fail ("Already borrowed")
                if self._slot_scorer:
                    values = model.score(todo)  # one encoding per context, then a small head
                else:
                    values = model.predict(todo, batch_size=self.batch_size,
                                           show_progress_bar=False,
                                           convert_to_numpy=True).reshape(-1)
            fresh = dict(zip(todo, (float(s) for s in values), strict=True))
            self._scores.put_many(fresh)
            scores.update(fresh)
        return [scores[p] for p in pairs]

    def _cosine(self, pairs: list[tuple[str, str]]) -> list[float]:
        texts = [q[len(TOOL_FIT_PREFIX):] for q, _ in pairs] + [d for _, d in pairs]
        vectors = self._vectors.get_many(texts)
        todo = list(dict.fromkeys(t for t in texts if t not in vectors))
        if todo:
            model = self.load_fit()
            with _PREDICT_LOCK:
                raw = model.encode(todo, batch_size=self.batch_size, show_progress_bar=False,
                                   convert_to_numpy=True, normalize_embeddings=True)
            fresh = dict(zip(todo, raw, strict=True))
            self._vectors.put_many(fresh)
            vectors.update(fresh)
        n = len(pairs)
        center = self._center
        out = []
        for i in range(n):
            tool = vectors[texts[n + i]]
            fit = float(vectors[texts[i]] @ tool)
            if center is not None:
                fit -= float(center @ tool)
            out.append(min(1.0, max(0.0, fit)))
        return out


def _read_thresholds(root: Path) -> dict[str, float]:
    """The operating points in the trained folder's calibration file.

    ``fit_threshold`` and ``slot_threshold`` (the pre-check), and ``relevance_min_fit`` and
    ``relevance_margin`` (:class:`LearnedRelevanceJudge`) when calibrated.

    ``root`` is the folder loaded: the trained folder, or the ``model/`` inside one.
    """
    path = root / CALIBRATION_FILE
    if not path.is_file() and root.name == "model":
        path = root.parent / CALIBRATION_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError(f"a JSON object expected, got {type(data).__name__}")
        found = {f"{kind}_threshold": float(data[key]["threshold"])
                 for kind, key in (("fit", "tool_fit"), ("slot", "slot")) if key in data}
        if isinstance(data.get("relevance"), dict) and data["relevance"].get("min_fit"):
            found["relevance_min_fit"] = float(data["relevance"]["min_fit"])
            found["relevance_margin"] = float(data["relevance"]["margin"])
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigurationError(f"{path} is not a verifier calibration: {exc!r}") from exc
    return _checked_thresholds(found, str(path))


THRESHOLD_KEYS = ("fit_threshold", "slot_threshold", "relevance_min_fit", "relevance_margin")
"""The operating points a verifier carries (:attr:`LearnedVerifier.thresholds`)."""


def _checked_thresholds(found: Any, where: str) -> dict[str, float]:
    """``found`` as operating points: a mapping of :data:`THRESHOLD_KEYS` to ``[0, 1]``.

    Raises:
        toolguard.errors.ConfigurationError: Another shape, key or value.
    """
    if not isinstance(found, dict) or not set(found) <= set(THRESHOLD_KEYS):
        raise ConfigurationError(f"{where}: operating points are a mapping of "
                                 f"{list(THRESHOLD_KEYS)}, got {found!r}")
    out = {}
    for label, value in found.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigurationError(f"{where}: {label} must be a number, got {value!r}")
        _check_unit(f"{where}: {label}", float(value))
        out[label] = float(value)
    return out


def verifier_thresholds(verifier: CrossEncoderLike) -> dict[str, float]:
    """The operating points a verifier carries (:attr:`LearnedVerifier.thresholds`), or ``{}``."""
    found = getattr(verifier, "thresholds", None)
    return dict(found) if isinstance(found, dict) else {}


def _resolve_source(model: str | os.PathLike[str] | None) -> str:
    """The folder or hub id to load: ``model``, else :data:`ENV_VAR`; checked, not loaded.

    A folder is the output folder of ``toolguard verifier train`` (``fit/`` and ``slot/``
    inside; ``slot/`` a cross-encoder or a slot scorer), a saved ``CrossEncoder`` (its
    ``config.json``), or a folder with a ``CrossEncoder`` in its ``model/`` sub-folder
    (earlier trained verifiers).
    """
    if model is None:
        env = os.environ.get(ENV_VAR, "").strip()
        if not env:
            raise _missing_model_error(f"no verifier= given and {ENV_VAR} is not set")
        model = env
    text = os.fspath(model)
    path = Path(text).expanduser()
    if path.is_dir():
        if (path / FIT_FOLDER / "config.json").is_file() and (
                (path / SLOT_FOLDER / "config.json").is_file()
                or _is_slot_scorer(path / SLOT_FOLDER)):
            return str(path.resolve())
        if _is_slot_scorer(path):
            return str(path.resolve())  # refused by LearnedVerifier with the reason
        if not (path / "config.json").is_file() and (path / "model" / "config.json").is_file():
            path = path / "model"
        if not (path / "config.json").is_file():
            raise _missing_model_error(f"{text!r} is a folder without a model (config.json, or "
                                       f"{FIT_FOLDER}/ and {SLOT_FOLDER}/), not a trained "
                                       "verifier")
        return str(path.resolve())
    if path.exists() or not _looks_like_hub_id(text):
        raise _missing_model_error(f"{text!r} is neither a model folder nor a hub id")
    return text


_VERIFIERS: dict[str, LearnedVerifier] = {}


def resolve_verifier(verifier: VerifierOption) -> CrossEncoderLike:
    """The cross-encoder a ``verifier=`` option names (shared per folder or hub id).

    Args:
        verifier: Any object with ``score(text_pairs) -> list[float]`` (a LangChain
            ``BaseCrossEncoder``, a :class:`LearnedVerifier`), used as is; a folder or hub
            id, loaded lazily as a :class:`LearnedVerifier` shared by every component that
            names it; ``None``: the :data:`ENV_VAR` environment variable.

    Raises:
        toolguard.errors.ConfigurationError: No model (``None`` and :data:`ENV_VAR` unset),
            naming the train command; a path that is no model folder; an object without
            ``score``.
        ImportError: ``sentence-transformers`` is not installed.
    """
    if verifier is not None and not isinstance(verifier, (str, os.PathLike)):
        if not callable(getattr(verifier, "score", None)):
            raise ConfigurationError(
                "verifier must be a model folder, a hub id or an object with "
                f"score(text_pairs) -> list[float] (a BaseCrossEncoder); got "
                f"{type(verifier).__name__}")
        return verifier
    source = _resolve_source(verifier)
    with _LOADED_LOCK:
        found = _VERIFIERS.get(source)
    if found is None:
        found = LearnedVerifier(source)
        with _LOADED_LOCK:
            found = _VERIFIERS.setdefault(source, found)
    return found


# ---------------------------------------------------------------------------- scoring
def candidates(goal: str, tools: Sequence[ToolSpec], top_k: int | None) -> list[ToolSpec]:
    """The tools scored for ``goal``: all of them, or the ``top_k`` with most word overlap.

    Overlap is the lexical judge's (``2 * name words + description and parameter words``
    shared with the goal, stemmed); ties keep the tool set's order.  A tool the prefilter
    drops is not scored, so it can neither fit nor be an alternative: the prefilter trades
    recall for time on large tool sets (see the module's measurements in the notes).
    """
    if top_k is None or len(tools) <= top_k:
        return list(tools)
    from toolguard.relevance import _tool_terms
    from toolguard.text import content_stems

    terms = content_stems(goal)

    def overlap(tool: ToolSpec) -> int:
        name, desc = _tool_terms(tool)
        return 2 * len(terms & name) + len(terms & desc)

    ranked = sorted(range(len(tools)), key=lambda i: (-overlap(tools[i]), i))
    return [tools[i] for i in sorted(ranked[:top_k])]


def _check_unit(label: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigurationError(f"{label} must be in [0, 1], got {value}")


def check_top_k(top_k: int | None) -> None:
    """Validate a ``top_k`` option.

    Raises:
        toolguard.errors.ConfigurationError: ``top_k`` < 1.
    """
    if top_k is not None and top_k < 1:
        raise ConfigurationError(f"top_k must be >= 1 or None, got {top_k}")


class LearnedRelevanceJudge(RelevanceJudge):
    """Tool relevance by the learned verifier's tool-fit score.

    For the called tool and the other tools of the set (all, or the ``top_k`` by word
    overlap plus the called one), the verifier scores :func:`tool_fit_pair` ``(goal,
    tool)``:

    - ``Relevant`` if the called tool's fit is at least ``min_fit``;
    - ``Irrelevant`` with alternatives if it is below ``min_fit`` and other tools reach
      ``min_fit`` with a fit at least ``margin`` above it (best first; the type detector
      blocks the call and names them);
    - ``Unsure`` otherwise (no tool fits clearly better: the pre-check decides whether any
      tool fits at all).

    A prerequisite step (a login, a lookup before an action) is the model's to judge: the
    tool-fit label counts a step that serves a part of the goal as fitting, and no lexical
    exception (helper lookups, name words in another tool's parameters) is consulted on
    this judge's path (:attr:`lexical_exceptions` is ``False``).

    Args:
        verifier: See :func:`resolve_verifier` (a folder, a hub id, any cross-encoder with
            ``score``, or ``None`` for :data:`ENV_VAR`).
        min_fit: Fit score in ``[0, 1]`` at which a tool serves the goal (default: the
            verifier's ``relevance_min_fit``, else its ``fit_threshold``, else
            :data:`FIT_THRESHOLD`).
        margin: Fit gap in ``[0, 1]`` another tool needs over the called one (default: the
            verifier's ``relevance_margin``, else :data:`RELEVANCE_MARGIN`).
        top_k: Tools scored at most (by word overlap; the called tool always), or ``None``.

    Raises:
        toolguard.errors.ConfigurationError: No model (naming the train command), or an
            option out of its bounds.
        ImportError: A folder or hub id without the ``learned`` extra.
    """

    name = "learned"
    lexical_exceptions = False

    def __init__(
        self,
        verifier: VerifierOption = None,
        *,
        min_fit: float | None = None,
        margin: float | None = None,
        top_k: int | None = TOP_K,
    ) -> None:
        if min_fit is not None:
            _check_unit("min_fit", min_fit)
        if margin is not None:
            _check_unit("margin", margin)
        check_top_k(top_k)
        self.verifier = resolve_verifier(verifier)
        found = verifier_thresholds(self.verifier)
        self.min_fit: float = (
            min_fit if min_fit is not None
            else found.get("relevance_min_fit", found.get("fit_threshold", FIT_THRESHOLD)))
        self.margin: float = (margin if margin is not None
                              else found.get("relevance_margin", RELEVANCE_MARGIN))
        self.top_k = top_k

    def judge(self, request: str, tool: ToolSpec, tools: Sequence[ToolSpec]) -> RelevanceResult:
        """Judge by tool-fit scores (one batch; cached per pair by :class:`LearnedVerifier`)."""
        pool = [tool, *(t for t in candidates(request, [t for t in tools if t.name != tool.name],
                                              self.top_k))]
        scores = self.verifier.score([tool_fit_pair(request, t) for t in pool])
        return self._result(pool, [float(s) for s in scores])

    async def ajudge(
        self, request: str, tool: ToolSpec, tools: Sequence[ToolSpec]
    ) -> RelevanceResult:
        """Async :meth:`judge`: the scoring runs in a worker thread (it is CPU-bound)."""
        return await asyncio.to_thread(self.judge, request, tool, tools)

    def _result(self, pool: Sequence[ToolSpec], scores: Sequence[float]) -> RelevanceResult:
        own = scores[0]
        if own >= self.min_fit:
            return RelevanceResult(label="Relevant", score=own, reason=f"tool fit {own:.2f}")
        better = sorted(((s, t.name) for t, s in zip(pool[1:], scores[1:], strict=True)
                         if s >= self.min_fit and s - own >= self.margin), reverse=True)
        if better:
            return RelevanceResult(
                label="Irrelevant", score=own, alternatives=tuple(n for _, n in better[:3]),
                reason=f"tool fit {own:.2f}; {better[0][1]!r} fits ({better[0][0]:.2f})")
        return RelevanceResult(label="Unsure", score=own,
                               reason=f"tool fit {own:.2f}; no tool fits clearly better")
