"""Tool specifications: one typed record for LangChain tools, OpenAI functions and benchmark docs.

A :class:`ToolSpec` holds a tool's name, description and a JSON Schema (draft 2020-12)
for its arguments.  Builders accept:

- a LangChain ``BaseTool`` (its ``tool_call_schema``),
- an OpenAI function schema (``{"type": "function", "function": {...}}`` or the bare
  ``{"name", "description", "parameters"}``),
- a BFCL function doc, whose Gorilla types are mapped as BFCL's
  ``constants/type_mappings.GORILLA_TO_OPENAPI`` does (``dict``->``object``,
  ``float``->``number``, ``tuple``->``array``, ``any``->``string``),
- a StableToolBench / RelyToolBench ``api_list`` entry, named ``{api}_for_{tool}``
  as ToolBench's ``api_json_to_openai_json`` names it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, cast

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from toolguard.errors import ConfigurationError, ToolSpecError

Effects = Literal["read", "write", "unknown"]
"""Whether calling a tool changes the world: ``read`` (no side effects), ``write``
(state-changing, e.g. ``book_flight``), or ``unknown`` (the default; treated as
possibly state-changing where that matters)."""

GORILLA_TO_JSON_SCHEMA: dict[str, str] = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "any": "string",
    "string": "string",
    "integer": "integer",
    "boolean": "boolean",
    "array": "array",
    "object": "object",
    "number": "number",
    "null": "null",
}
"""BFCL (Gorilla) parameter types -> JSON Schema types, as ``GORILLA_TO_OPENAPI``."""

_TOOLBENCH_TYPES = {"NUMBER": "integer", "STRING": "string", "BOOLEAN": "boolean"}


class ToolSpec(BaseModel):
    """A tool the agent may call.

    Attributes:
        name: Tool name as the model must write it.
        description: Free-text description (used by the relevance judge).
        parameters: JSON Schema of the arguments; always ``{"type": "object", ...}``.
        effects: See :data:`Effects`; used by the timing detector.
        repeatable: If ``True`` an identical repeat is never a timing hallucination
            (e.g. ``cd("..")`` twice is meaningful).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    effects: Effects = "unknown"
    repeatable: bool = False
    _hash: int = PrivateAttr(default=0)

    def model_post_init(self, __context: Any) -> None:
        """Cache the hash: specs are frozen and used as cache keys on the hot path."""
        self._hash = hash((self.name, self.description, self.effects, self.repeatable,
                           json.dumps(self.parameters, sort_keys=True, default=str)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolSpec):
            return NotImplemented
        return self._hash == other._hash and self.model_dump() == other.model_dump()

    @property
    def properties(self) -> dict[str, Any]:
        """Top-level argument schemas by name."""
        props = self.parameters.get("properties") or {}
        return props if isinstance(props, dict) else {}

    @property
    def required(self) -> tuple[str, ...]:
        """Names of required top-level arguments."""
        return tuple(self.parameters.get("required") or ())

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_langchain(cls, tool: BaseTool, **overrides: Any) -> ToolSpec:
        """Build from a LangChain tool (injected arguments are left out, as ToolNode does)."""
        fn = convert_to_openai_tool(tool)["function"]
        meta = tool.metadata or {}
        fields: dict[str, Any] = {
            "name": fn["name"],
            "description": fn.get("description", ""),
            "parameters": _as_object_schema(fn.get("parameters")),
        }
        if meta.get("effects") in ("read", "write", "unknown"):
            fields["effects"] = meta["effects"]
        if "repeatable" in meta:
            fields["repeatable"] = bool(meta["repeatable"])
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def from_openai(cls, schema: Mapping[str, Any], **overrides: Any) -> ToolSpec:
        """Build from an OpenAI function schema (wrapped in ``{"type": "function"}`` or bare).

        Raises:
            toolguard.errors.ToolSpecError: If the schema has no ``name``.
        """
        fn = schema.get("function", schema) if schema.get("type") == "function" else schema
        if not isinstance(fn, Mapping) or not fn.get("name"):
            raise ToolSpecError(f"OpenAI function schema needs a 'name': {dict(schema)!r:.200}")
        fields: dict[str, Any] = {
            "name": str(fn["name"]),
            "description": str(fn.get("description") or ""),
            "parameters": _as_object_schema(fn.get("parameters")),
        }
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def from_bfcl(cls, doc: Mapping[str, Any], **overrides: Any) -> ToolSpec:
        """Build from a BFCL function doc (``{name, description, parameters}`` with Gorilla types).

        Raises:
            toolguard.errors.ToolSpecError: If the doc has no ``name``.
        """
        if not doc.get("name"):
            raise ToolSpecError(f"BFCL doc needs a 'name': {dict(doc)!r:.200}")
        fields: dict[str, Any] = {
            "name": str(doc["name"]),
            "description": str(doc.get("description") or ""),
            "parameters": _as_object_schema(gorilla_to_json_schema(doc.get("parameters") or {})),
        }
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def from_toolbench(cls, api: Mapping[str, Any], **overrides: Any) -> ToolSpec:
        """Build from a StableToolBench ``api_list`` entry (RelyToolBench uses the same format).

        The name is ``{standardize(api_name)}_for_{standardize(tool_name)}`` cut to 64
        characters, as ToolBench's ``api_json_to_openai_json``.
        """
        props: dict[str, Any] = {}
        required: list[str] = []
        for group in ("required_parameters", "optional_parameters"):
            for p in api.get(group) or []:
                pname = _change_name(_standardize(str(p.get("name", ""))))
                if not pname:
                    continue
                prop: dict[str, Any] = {
                    "type": _TOOLBENCH_TYPES.get(str(p.get("type", "STRING")).upper(), "string"),
                    "description": str(p.get("description") or ""),
                }
                if p.get("default") not in (None, ""):
                    prop["example_value"] = p["default"]  # as ToolBench shows it to the model
                    if group == "optional_parameters":
                        prop["default"] = p["default"]
                props[pname] = prop
                if group == "required_parameters":
                    required.append(pname)
        name = toolbench_name(str(api.get("api_name", "")), str(api.get("tool_name", "")))
        desc = str(api.get("api_description") or "")
        fields: dict[str, Any] = {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": props, "required": required},
        }
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def coerce(cls, tool: Any) -> ToolSpec:
        """Build a spec from any supported form (see module docstring).

        Raises:
            toolguard.errors.ToolSpecError: If ``tool`` is of no supported form (a
                ``TypeError``).
        """
        if isinstance(tool, ToolSpec):
            return tool
        if isinstance(tool, BaseTool):
            return cls.from_langchain(tool)
        if isinstance(tool, Mapping):
            if "api_name" in tool and "tool_name" in tool:
                return cls.from_toolbench(tool)
            params = tool.get("parameters")
            if isinstance(params, Mapping) and params.get("type") == "dict":
                return cls.from_bfcl(tool)
            return cls.from_openai(tool)
        if callable(tool):
            fn = convert_to_openai_tool(tool)
            return cls.from_openai(fn)
        raise ToolSpecError(
            f"cannot build a ToolSpec from {type(tool).__name__}; expected a LangChain BaseTool, "
            "an OpenAI function dict, a BFCL doc, a ToolBench api_list entry or a callable"
        )


def to_specs(tools: Iterable[Any]) -> list[ToolSpec]:
    """Coerce tools (see :meth:`ToolSpec.coerce`) into specs.

    Raises:
        toolguard.errors.ConfigurationError: If two tools share a name (a ``ValueError``).
        toolguard.errors.ToolSpecError: If a tool is of no supported form (a ``TypeError``).
    """
    specs = [ToolSpec.coerce(t) for t in tools]
    seen: set[str] = set()
    for s in specs:
        if s.name in seen:
            raise ConfigurationError(f"duplicate tool name {s.name!r}")
        seen.add(s.name)
    return specs


def gorilla_to_json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Map a BFCL (Gorilla) parameter schema to JSON Schema, recursively.

    Only ``type`` values are rewritten (see :data:`GORILLA_TO_JSON_SCHEMA`); other keys
    (``enum``, ``default``, ``items``, ``properties``, ``required``, ...) are kept.
    """
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = GORILLA_TO_JSON_SCHEMA.get(value, value)
        elif key == "properties" and isinstance(value, Mapping):
            out[key] = {
                k: gorilla_to_json_schema(v) if isinstance(v, Mapping) else v
                for k, v in value.items()
            }
        elif key == "items" and isinstance(value, Mapping):
            out[key] = gorilla_to_json_schema(value)
        elif key == "items" and isinstance(value, Sequence) and not isinstance(value, str):
            out[key] = [gorilla_to_json_schema(v) if isinstance(v, Mapping) else v for v in value]
        else:
            out[key] = value
    # BFCL puts "enum" on array parameters to list the allowed items
    if out.get("type") == "array" and "enum" in out:
        items = dict(out.get("items") or {}) if isinstance(out.get("items"), Mapping) else {}
        items.setdefault("enum", out.pop("enum"))
        out["items"] = items
    return out


def toolbench_name(api_name: str, tool_name: str) -> str:
    """ToolBench's tool naming: ``change_name(standardize(api)) + "_for_" + standardize(tool)``."""
    return f"{_change_name(_standardize(api_name))}_for_{_standardize(tool_name)}"[-64:]


def _change_name(name: str) -> str:
    """ToolBench's ``change_name``: Python keywords get an ``is_`` prefix."""
    keywords = {"from", "class", "return", "false", "true", "id", "and"}
    return "is_" + name if name in keywords else name


def _standardize(text: str) -> str:
    text = re.sub(r"[^\u4e00-\u9fa5a-zA-Z0-9_]", "_", text)
    text = re.sub(r"_+", "_", text).lower().strip("_")
    if text and text[0].isdigit():
        text = "get_" + text
    return text


def _as_object_schema(params: Any) -> dict[str, Any]:
    if not isinstance(params, Mapping):
        return {"type": "object", "properties": {}}
    out = dict(params)
    if out.get("type") in (None, "dict"):
        out["type"] = "object"
    if not isinstance(out.get("properties"), Mapping):
        # some datasets (FamilyTool) give properties as a list; keep names, drop shapes
        props = out.get("properties")
        if isinstance(props, list):
            out["properties"] = {
                str(p.get("name")): {k: v for k, v in p.items() if k != "name"}
                for p in props
                if isinstance(p, Mapping) and p.get("name")
            }
        else:
            out["properties"] = {}
    return cast(dict[str, Any], out)
