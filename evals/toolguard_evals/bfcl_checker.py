"""BFCL's own AST checker on single-turn calls, and the call-level labels the agent demo needs.

:func:`check_task` scores what an agent executed on one BFCL v4 single-turn record exactly as
BFCL scores a function-calling model's answer (``bfcl_eval.eval_checker.ast_eval.ast_checker``
for the call categories; for ``irrelevance`` / ``live_irrelevance`` BFCL's relevance rule:
pass when no call was made).  Tool names are sent the way BFCL sends them to function-calling
models (``.`` written as ``_``, its ``underscore_to_dot``), so the checker maps them back.

:func:`match_gold` tells whether one call is a gold call (BFCL's ``simple_function_checker``
against each gold entry), and :func:`call_label` types a call that matches none by
RelyToolBench's taxonomy, decided from the gold and the tool's schema only:

- ``type``: the name is not among the offered tools, or no gold call uses that tool (every
  call on a record whose gold is "no call").
- ``format``: a gold tool, but the arguments break its JSON Schema (unknown or missing
  required key, wrong type, a value outside an enum).
- ``content``: a gold tool with schema-valid arguments whose values no gold call accepts.

(``timing``, an identical repeat of an executed call, needs the run's order: the demo's
scorer decides it.)  ``ast_checker`` cannot be imported as shipped, since its
``constants.model_config`` imports every provider SDK; a stub mapping that answers
``underscore_to_dot=True`` for any model is put in place while it is imported (DATA.md §1).
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import sys
import types
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from jsonschema import Draft202012Validator

from toolguard.specs import gorilla_to_json_schema
from toolguard_evals import bfcl

__all__ = [
    "CHECKER_MODEL",
    "CallLabel",
    "call_label",
    "check_task",
    "match_gold",
    "tool_name",
    "tool_schema",
]

CallLabel = Literal["type", "format", "content"]
CHECKER_MODEL: Final = "toolguard-agent-FC"
"""The model name passed to BFCL's checker (any name: the stub maps every name the same)."""


def tool_name(name: str) -> str:
    """The name BFCL gives a function-calling model (``math.factorial``: ``math_factorial``)."""
    return name.replace(".", "_")


def tool_schema(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A BFCL doc's parameters as JSON Schema (``type: dict`` -> ``object``, ...)."""
    params = doc.get("parameters")
    schema = gorilla_to_json_schema(params) if isinstance(params, Mapping) else {}
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


@functools.cache
def _ast_checker() -> types.ModuleType:
    name = "bfcl_eval.constants.model_config"
    stub = types.ModuleType(name)
    stub.MODEL_CONFIG_MAPPING = defaultdict(  # type: ignore[attr-defined]
        lambda: types.SimpleNamespace(underscore_to_dot=True))
    saved = sys.modules.get(name)
    sys.modules[name] = stub
    try:
        bfcl.package_dir()  # a clear error when bfcl-eval is missing
        return importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
    finally:
        if saved is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved


def _python() -> Any:
    return importlib.import_module("bfcl_eval.constants.enums").Language.PYTHON


def _category(record: Mapping[str, Any]) -> str:
    return str(record["id"]).rsplit("_", 1)[0]


def check_task(record: Mapping[str, Any],
               calls: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """BFCL's verdict on the calls an agent executed for one single-turn record.

    Args:
        record: A record of :func:`toolguard_evals.bfcl.load_category` (``id``,
            ``function``, ``ground_truth``).
        calls: ``(tool name, arguments)`` in execution order, names as the model saw them.

    Returns:
        BFCL's result dict: ``{"valid": bool, "error": [...], "error_type": str}``
        (``error_type`` absent when valid).

    Raises:
        BFCLNotInstalledError: ``bfcl-eval`` is not installed.
    """
    if not record.get("ground_truth"):
        if calls:
            return {"valid": False, "error": [f"{len(calls)} call(s) where none fits"],
                    "error_type": "relevance:called"}
        return {"valid": True, "error": []}
    checker = _ast_checker()
    output = [{name: dict(args)} for name, args in calls]
    return dict(checker.ast_checker(
        copy.deepcopy(list(record["function"])), copy.deepcopy(output),
        copy.deepcopy(list(record["ground_truth"])), _python(), _category(record),
        CHECKER_MODEL))


def match_gold(record: Mapping[str, Any], name: str, args: Mapping[str, Any],
               exclude: frozenset[int] = frozenset()) -> int | None:
    """The index of the first gold entry (not in ``exclude``) that BFCL accepts this call for.

    Returns:
        The index into ``record["ground_truth"]``, or ``None``.
    """
    checker = _ast_checker()
    docs = list(record.get("function") or [])
    for i, entry in enumerate(record.get("ground_truth") or []):
        if i in exclude or not isinstance(entry, Mapping) or len(entry) != 1:
            continue
        ((gold_name, _),) = entry.items()
        if tool_name(str(gold_name)) != name:
            continue
        doc = checker.find_description(docs, gold_name)
        if doc is None:
            continue
        result = checker.simple_function_checker(
            copy.deepcopy(doc), {name: copy.deepcopy(dict(args))}, copy.deepcopy(dict(entry)),
            _python(), CHECKER_MODEL)
        if result.get("valid"):
            return i
    return None


@functools.lru_cache(maxsize=1024)
def _validator(schema_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_json))


def call_label(record: Mapping[str, Any], name: str, args: Any) -> CallLabel:
    """The hallucination type of a call that matches no gold call (see the module docstring).

    ``args`` that are not a JSON object (an unparsable call) are ``format``.
    """
    docs = {tool_name(str(d.get("name"))): d for d in record.get("function") or []
            if isinstance(d, Mapping)}
    gold_tools = {tool_name(str(next(iter(e)))) for e in record.get("ground_truth") or []
                  if isinstance(e, Mapping) and len(e) == 1}
    if name not in docs or name not in gold_tools:
        return "type"
    if not isinstance(args, Mapping):
        return "format"
    schema = tool_schema(docs[name])
    if set(args) - set(schema.get("properties") or {}):
        return "format"
    if not _validator(json.dumps(schema, sort_keys=True, default=str)).is_valid(dict(args)):
        return "format"
    return "content"
