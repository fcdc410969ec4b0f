r"""CRITICTOOL records: the official dataset layout, CriticTool's parsers and prompt insertion.

The official dataset (``CriticTool-Dataset/``, not redistributed here) holds four files per
split (``docs/DATA.md`` §5)::

    CriticTool-Dataset/internal_error/{base,evol}_data_{wo,w}_cot.json
    CriticTool-Dataset/external_error/{base,evol}_data_{wo,w}_cot.json

Each file is one JSON object ``{id: datum}``:

- ``query_prompt``: the history, ``[{"role": "system"|"user"|"assistant"|"function",
  "content": str}, ...]``.  ``query_prompt[0]["content"]`` holds the tool list as a JSON (or
  Python-literal) array between its first ``[`` and ``"\nTo use a tool"``
  (:func:`get_function_list`, CriticTool's ``utils/format.get_function_list``), each tool
  ``{"name", "required_parameters": [{"name", "type"}], "optional_parameters": [...]}``, and
  the anchor ``"Remember: only generate ONE step each time"`` before which the mode prompt is
  inserted (:func:`insert_system_prompt`, CriticTool's ``test.insert_system_prompt``).
- internal records: ``error_type`` is ``""`` (error-free) or one of :data:`ERROR_TYPES`;
  ``ground_truth`` is the corrected step ``{"name", "args", "thought"?}``.
- external records: ``ground_truth`` is ``[failed call, next step]``; the next step may be
  ``{"name": "FinishAction", "args": str}``.

:func:`format_load` is CriticTool's parser of a model's reply (``utils/format.format_load``),
reproduced rule for rule, since the scores depend on what it accepts.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, get_args

from toolguard_evals.prompts import load_prompt

Split = Literal["internal", "external"]
"""``internal_error`` (the model's own mistakes) or ``external_error`` (environment errors)."""
Level = Literal["base", "evol"]
"""CRITICTOOL's base data or its evolved (harder, longer-context) data."""
Mode = Literal["llm", "skip", "finish"]
"""CriticTool's prompt modes: ``llm`` for internal errors, ``skip``/``finish`` for external."""
ExternalMode = Literal["skip", "finish"]
"""The modes of an external (environment) error."""
ErrorType = Literal[
    "tool_select_error", "tool_hallucination_error", "parameters_key_error",
    "parameters_value_error",
]
"""CRITICTOOL's four internal-error categories (the only values ``reflect`` counts)."""

SPLITS: Final[tuple[Split, ...]] = get_args(Split)
LEVELS: Final[tuple[Level, ...]] = get_args(Level)
MODES: Final[tuple[Mode, ...]] = get_args(Mode)
ERROR_TYPES: Final[tuple[ErrorType, ...]] = get_args(ErrorType)
ANCHOR: Final = "Remember: only generate ONE step each time"
"""The system-prompt anchor before which the mode prompt goes (``test.insert_system_prompt``)."""
TOOLS_END: Final = "\nTo use a tool"
"""What follows the tool list in the system prompt (``utils/format.get_function_list``)."""
FINISH: Final = "FinishAction"
"""The pseudo-tool of a final answer (skip/finish modes)."""
ROLES: Final = frozenset({"system", "user", "assistant", "function"})
_SPLIT_DIRS: Final[dict[Split, str]] = {"internal": "internal_error", "external": "external_error"}


@dataclass(frozen=True, slots=True)
class CriticToolRecord:
    """One CRITICTOOL sample.

    Attributes:
        id: The key in its file (our built set: ``"multi_turn_base_3:tool_select_error"``).
        split: ``internal`` or ``external``.
        query_prompt: The history (see the module docstring); never mutated.
        ground_truth: Internal: ``{"name", "args", "thought"?}``; external: a list of two
            such steps ``[failed call, next step]``.
        error_type: Internal: ``""`` or one of :data:`ERROR_TYPES`; external: ``None``.
        cot: From a ``*_w_cot`` file (the model is asked for a ``thought`` too).
        meta: Extra keys of the datum (our built set: ``source``, ``step``, ``environment_error``,
            ``read_only``); written back by :meth:`to_datum`.

    """

    id: str
    split: Split
    query_prompt: tuple[Mapping[str, str], ...]
    ground_truth: Any
    error_type: str | None = None
    cot: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def function_list(self) -> list[dict[str, Any]]:
        """The tools of the system prompt (:func:`get_function_list`)."""
        return get_function_list(self.query_prompt[0]["content"])

    def to_datum(self) -> dict[str, Any]:
        """The record as a value of an official file (``{id: datum}``)."""
        datum: dict[str, Any] = {"query_prompt": [dict(m) for m in self.query_prompt],
                                 "ground_truth": self.ground_truth}
        if self.split == "internal":
            datum["error_type"] = self.error_type or ""
        datum.update(self.meta)
        return datum

    def prompt(self, mode: Mode) -> list[dict[str, str]]:
        """A fresh copy of the history with the ``mode`` prompt inserted (what the model sees)."""
        messages = [dict(m) for m in self.query_prompt]
        messages[0]["content"] = insert_system_prompt(messages[0]["content"], mode, cot=self.cot)
        return messages

    def external(self, mode: Mode) -> tuple[ExternalMode, list[dict[str, str]],
                                            dict[str, Any], str]:
        """``(mode, prompt, first gold call, the environment's error)`` of an external record.

        Raises:
            ValueError: If ``mode`` is not ``skip`` or ``finish`` (an external error's modes).
        """
        if mode == "skip" or mode == "finish":
            return mode, self.prompt(mode), self.ground_truth[0], self.query_prompt[-1]["content"]
        raise ValueError(f"external mode must be 'skip' or 'finish', got {mode!r}")


# ---------------------------------------------------------------------------- CriticTool's parsers
def format_load(raw: str, start_character: str = "", end_character: str = "") -> dict[str, Any]:
    """Parse a model reply into ``{"error", "thought", "name", "args"}`` as CriticTool does.

    Rules (``utils/format.format_load``): text after a `````json`` fence (back-ticks stripped);
    cut from the first ``start_character`` to the last ``end_character``; then
    ``ast.literal_eval``, else ``json.loads``, else ``json.loads`` with ``'`` -> ``"``.  Each
    field falls back to ``""`` when the parse failed or the key is missing; ``thought`` and
    ``name`` are ``str()``-ed, ``error`` and ``args`` kept as parsed.

    Returns:
        The four fields; ``name == ""`` means no usable step.

    """
    text = raw if isinstance(raw, str) else str(raw)
    if "```json" in text:
        text = text[text.find("```json") + len("```json"):]
        text = text.strip("`").strip()
    if start_character:
        text = text[text.find(start_character):]  # find() == -1 keeps the last char, as theirs
    if end_character:
        text = text[: text.rfind(end_character) + len(end_character)]
    data: Any = _MISSING
    try:
        data = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        try:
            data = json.loads(text)
        except ValueError:
            try:
                data = json.loads(text.replace("'", '"'))
            except ValueError:
                data = _MISSING
    out: dict[str, Any] = {}
    out["error"] = _field(data, "error", "")
    thought = _field(data, "thought", _MISSING)
    out["thought"] = "" if thought is _MISSING else str(thought)
    name = _field(data, "name", _MISSING)
    out["name"] = "" if name is _MISSING else str(name)
    out["args"] = _field(data, "args", "")
    return out


_MISSING: Final = object()


def _field(data: Any, key: str, default: Any) -> Any:
    """``data[key]`` or ``default`` whatever goes wrong (CriticTool's bare ``except``)."""
    if data is _MISSING:
        return default
    try:
        return data[key]
    except (KeyError, TypeError, IndexError):
        return default


def get_function_list(system_prompt: str) -> list[dict[str, Any]]:
    r"""The tool list of a system prompt: from its first ``[`` up to ``"\nTo use a tool"``.

    As ``utils/format.get_function_list``: parsed as JSON, else as a Python literal.

    Raises:
        ValueError: If there is no ``[`` or no ``"\nTo use a tool"``, or the slice parses to
            something other than a list of tool dicts.

    """
    start = system_prompt.find("[")
    end = system_prompt.find(TOOLS_END)
    if start < 0 or end < 0 or end <= start:
        raise ValueError("system prompt has no tool list: expected '[...]' followed by "
                         f"{TOOLS_END!r}")
    text = system_prompt[start:end]
    try:
        tools = json.loads(text)
    except ValueError:
        try:
            tools = ast.literal_eval(text)
        except (ValueError, SyntaxError) as exc:
            raise ValueError(f"tool list does not parse as JSON or a Python literal: {exc}") \
                from exc
    if not isinstance(tools, list) or not all(
            isinstance(t, Mapping) and "name" in t for t in tools):
        raise ValueError("tool list must be a list of {name, required_parameters, ...} objects")
    return [dict(t) for t in tools]


def mode_prompt(mode: Mode, *, cot: bool = False) -> str:
    """CriticTool's instruction for ``mode`` (``utils/prompt.py``; ``prompts/critictool_*.md``).

    Raises:
        ValueError: For an unknown mode.

    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {list(MODES)}")
    name = {"llm": "critictool_llm", "skip": "critictool_env_skip",
            "finish": "critictool_env_finish"}[mode]
    return load_prompt(name + ("_cot" if cot else ""))


def insert_system_prompt(content: str, mode: Mode, *, cot: bool = False) -> str:
    """Insert the ``mode`` prompt just before :data:`ANCHOR` (``test.insert_system_prompt``).

    Raises:
        ValueError: If ``content`` lacks the anchor (CriticTool would insert before the
            last character instead, silently).

    """
    at = content.find(ANCHOR)
    if at < 0:
        raise ValueError(f"system prompt lacks the anchor {ANCHOR!r}")
    return content[:at] + mode_prompt(mode, cot=cot) + content[at:]


def system_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    """Our system prompt (``prompts/critictool_system.md``) around a CriticTool tool list."""
    return load_prompt("critictool_system").format(tools=json.dumps(list(tools)))


# ---------------------------------------------------------------------------- validation
def record_from_datum(key: str, datum: Mapping[str, Any], *, split: Split,
                      cot: bool = False) -> CriticToolRecord:
    """Validate one datum of an official file and wrap it.

    Raises:
        ValueError: With the record id, for a missing/ill-typed field, an unknown role, a
            system prompt without tool list or anchor, an unknown ``error_type``, or an
            external ``ground_truth`` that is not two steps.

    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
    prompt = datum.get("query_prompt")
    if not isinstance(prompt, list) or not prompt:
        raise ValueError(f"{key}: query_prompt must be a non-empty list of messages")
    for i, m in enumerate(prompt):
        if not isinstance(m, Mapping) or m.get("role") not in ROLES or not isinstance(
                m.get("content"), str):
            raise ValueError(f"{key}: query_prompt[{i}] must be {{role: one of "
                             f"{sorted(ROLES)}, content: str}}")
    if prompt[0]["role"] != "system":
        raise ValueError(f"{key}: query_prompt[0] must be the system message")
    try:
        get_function_list(prompt[0]["content"])
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from exc
    if ANCHOR not in prompt[0]["content"]:
        raise ValueError(f"{key}: system prompt lacks the anchor {ANCHOR!r}")
    gt = datum.get("ground_truth")
    error_type: str | None = None
    if split == "internal":
        error_type = datum.get("error_type")
        if error_type is None:
            raise ValueError(f"{key}: internal record without error_type")
        if error_type not in ("", *ERROR_TYPES):
            raise ValueError(f"{key}: error_type {error_type!r} is not '' or one of "
                             f"{list(ERROR_TYPES)}")
        if not _is_step(gt):
            raise ValueError(f"{key}: ground_truth must be {{name, args}}")
    elif not (isinstance(gt, list) and len(gt) == 2 and all(_is_step(s) for s in gt)):
        raise ValueError(f"{key}: external ground_truth must be [failed call, next step]")
    meta = {k: v for k, v in datum.items()
            if k not in ("query_prompt", "ground_truth", "error_type")}
    return CriticToolRecord(id=str(key), split=split,
                            query_prompt=tuple(dict(m) for m in prompt),
                            ground_truth=gt, error_type=error_type, cot=cot, meta=meta)


def _is_step(step: Any) -> bool:
    return isinstance(step, Mapping) and isinstance(step.get("name"), str) and "args" in step


# ---------------------------------------------------------------------------- files
def official_path(root: Path | str, split: Split, level: Level = "base", *,
                  cot: bool = False) -> Path:
    """``root/{internal_error,external_error}/{base,evol}_data_{w,wo}_cot.json``.

    ``root`` may be the ``CriticTool-Dataset`` folder or its parent.
    """
    base = Path(root)
    if not (base / _SPLIT_DIRS[split]).is_dir() and (base / "CriticTool-Dataset").is_dir():
        base = base / "CriticTool-Dataset"
    return base / _SPLIT_DIRS[split] / f"{level}_data_{'w' if cot else 'wo'}_cot.json"


def load_file(path: Path | str, *, split: Split, cot: bool | None = None,
              limit: int | None = None) -> list[CriticToolRecord]:
    """Load one file in the official format (``{id: datum}``), validated.

    Args:
        path: The JSON file.
        split: Its split (the folder it lives in).
        cot: Whether it is a CoT file; default: from the name (``_w_cot``).
        limit: Keep the first ``limit`` records (file order, as ``--test_num``).

    Raises:
        FileNotFoundError: If the file is missing.
        ValueError: If it is not a JSON object, ``limit < 0``, or a record is invalid.

    """
    p = Path(path)
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    if not p.is_file():
        raise FileNotFoundError(f"CRITICTOOL file {p} is missing (expected the official "
                                "layout CriticTool-Dataset/{internal_error,external_error}/"
                                "{base,evol}_data_{wo,w}_cot.json)")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{p}: not JSON ({exc})") from exc
    if not isinstance(data, Mapping):
        raise ValueError(f"{p}: expected a JSON object {{id: datum}}")
    use_cot = p.name.endswith("_w_cot.json") if cot is None else cot
    items = list(data.items())[: limit if limit is not None else None]
    return [record_from_datum(k, v, split=split, cot=use_cot) for k, v in items]


def load_official(root: Path | str, *, level: Level = "base", cot: bool = False,
                  limit: int | None = None) -> dict[Split, list[CriticToolRecord]]:
    """Load both splits of the official dataset at ``root`` (see :func:`official_path`).

    A missing split file is an error only when both are missing.

    Raises:
        FileNotFoundError: If neither split's file exists.
        ValueError: See :func:`load_file`.

    """
    out: dict[Split, list[CriticToolRecord]] = {}
    for split in SPLITS:
        path = official_path(root, split, level, cot=cot)
        if path.is_file():
            out[split] = load_file(path, split=split, cot=cot, limit=limit)
    if not out:
        raise FileNotFoundError(
            f"no CRITICTOOL files under {root}: expected "
            f"{official_path(root, 'internal', level, cot=cot)} and/or "
            f"{official_path(root, 'external', level, cot=cot)}")
    return out


def write_file(path: Path | str, records: Sequence[CriticToolRecord]) -> Path:
    """Write records as one official-format file (``{id: datum}``, UTF-8, indented)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({r.id: r.to_datum() for r in records}, indent=2,
                            ensure_ascii=False), encoding="utf-8")
    return p


def iter_steps(record: CriticToolRecord) -> Iterator[dict[str, Any]]:
    """The steps of the history's assistant messages, parsed with :func:`format_load`."""
    for m in record.query_prompt:
        if m["role"] == "assistant":
            yield format_load(m["content"], "{", "}")
