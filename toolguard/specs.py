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

A LangChain tool's ``metadata`` declares how it behaves (:func:`declared_traits`): toolguard's
own keys (``effects``, ``idempotent``, ``repeatable``, ``open_world``), else the MCP tool
annotations that ``langchain-mcp-adapters`` copies there (``readOnlyHint``,
``destructiveHint``, ``idempotentHint``, ``openWorldHint``), so tools loaded from an MCP
server are guarded by what their server states, with no configuration.

A spec carries a content digest computed once at construction: hashing and equality are a
dictionary read and a string comparison, so specs are cheap cache keys.  A
:class:`ToolSet` is an ordered set of specs compiled once (by-name table, JSON Schema
validators, term tables of the detectors and the pre-check) and shared by every
:class:`~toolguard.Guard`, :class:`~toolguard.Precheck` and middleware built from the same
tools: :meth:`ToolSet.coerce` keeps the last :data:`TOOLSET_CACHE_SIZE` sets by digest,
and :meth:`ToolSpec.coerce` the specs of the last :data:`COERCE_CACHE_SIZE` tool objects.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, Literal, TypeVar, cast

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

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


@dataclass(frozen=True, eq=False, slots=True)
class ToolSpec:
    """A tool the agent may call.

    Attributes:
        name: Tool name as the model must write it.
        description: Free-text description (used by the relevance judge).
        parameters: JSON Schema of the arguments; always ``{"type": "object", ...}``.
        effects: See :data:`Effects`; used by the timing, provenance and loop guards.
        repeatable: If ``True`` an identical repeat is never a timing hallucination
            (e.g. ``cd("..")`` twice is meaningful).
        idempotent: ``True``: running the tool again with the same arguments has no further
            effect (a timeout is retried; an identical repeat is still a timing repeat, whose
            earlier answer is replayed); ``False``: it may have; ``None``: not declared
            (treated as ``False`` unless ``effects`` is ``"read"``).
        open_world: ``True``: the tool reaches entities outside the user's own domain (the
            web, other people): the provenance detector never lets its output, fields
            included, fill a decisive argument, and a read's query is decisive;
            ``False``: a closed domain (the user's own notes or memory): a whole field of
            its output may fill one when the user asked for that output; ``None``: not
            declared (open-world when its call took a URL).
        accepts_tool_values: ``True``: every parameter is meant to take values from tool
            output (the provenance detector never asks about them); a tuple: those
            parameters (a ``reply_to`` that is always the sender being answered);
            ``False``: none (the default).

    Built from a LangChain tool, ``effects``, ``repeatable``, ``idempotent``,
    ``open_world`` and ``accepts_tool_values`` come from its metadata
    (:func:`declared_traits`).

    A frozen dataclass: change a spec with :meth:`replace`.  Its :attr:`digest` (every
    field, canonical JSON) is computed at construction; specs hash and compare by it, so
    they are cheap cache keys (a :class:`ToolSet` interns them).  ``parameters`` must not
    be mutated in place afterwards (the digest would not see it).

    Raises:
        toolguard.errors.ToolSpecError: An empty ``name``, a ``parameters`` that is not a
            mapping, or an unknown ``effects`` (a ``TypeError``).
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}})
    effects: Effects = "unknown"
    repeatable: bool = False
    idempotent: bool | None = None
    open_world: bool | None = None
    accepts_tool_values: bool | tuple[str, ...] = False
    digest: str = field(init=False, repr=False, compare=False)
    """Hex BLAKE2b digest of the spec's content (every field, canonical JSON)."""
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ToolSpecError(f"a tool needs a non-empty string name, got {self.name!r}")
        if not isinstance(self.parameters, Mapping):
            raise ToolSpecError(f"parameters of {self.name!r} must be a JSON Schema object, "
                                f"got {type(self.parameters).__name__}")
        if self.effects not in ("read", "write", "unknown"):
            raise ToolSpecError(f"effects of {self.name!r} must be 'read', 'write' or "
                                f"'unknown', got {self.effects!r}")
        accepts = self.accepts_tool_values
        if not isinstance(accepts, bool):
            if isinstance(accepts, str) or not all(isinstance(p, str) for p in accepts):
                raise ToolSpecError(f"accepts_tool_values of {self.name!r} must be a bool or "
                                    f"parameter names, got {accepts!r}")
            object.__setattr__(self, "accepts_tool_values", tuple(accepts))
        digest = _digest_of(["ToolSpec", self.name, self.description, self.parameters,
                             self.effects, self.repeatable, self.idempotent,
                             self.open_world]
                            + ([self.accepts_tool_values] if self.accepts_tool_values else []))
        object.__setattr__(self, "digest", digest)
        object.__setattr__(self, "_hash", int(digest[:16], 16))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, ToolSpec):
            return NotImplemented
        return self.digest == other.digest

    def replace(self, **changes: Any) -> ToolSpec:
        """A copy with ``changes`` (field values); its digest follows them."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The spec's fields as a plain dict (``ToolSpec(**spec.to_dict())`` rebuilds it).

        ``accepts_tool_values`` is in it only when declared.
        """
        out = {"name": self.name, "description": self.description,
               "parameters": self.parameters, "effects": self.effects,
               "repeatable": self.repeatable, "idempotent": self.idempotent,
               "open_world": self.open_world}
        if self.accepts_tool_values:
            out["accepts_tool_values"] = self.accepts_tool_values
        return out

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
    def _built(cls, doc: Mapping[str, Any], parameters: Any,
               overrides: Mapping[str, Any]) -> ToolSpec:
        """A spec from a doc's name and description, ``parameters`` and ``overrides``."""
        return cls(**{"name": str(doc["name"]), "description": str(doc.get("description") or ""),
                      "parameters": _as_object_schema(parameters), **overrides})

    @classmethod
    def from_langchain(cls, tool: BaseTool, **overrides: Any) -> ToolSpec:
        """Build from a LangChain tool (injected arguments are left out, as ToolNode does).

        ``effects``, ``repeatable``, ``idempotent`` and ``open_world`` are what the tool's
        ``metadata`` declares (:func:`declared_traits`: toolguard's keys, else MCP tool
        annotations); ``overrides`` win over both.
        """
        fn = convert_to_openai_tool(tool)["function"]
        return cls._built(fn, fn.get("parameters"),
                          {**declared_traits(tool.metadata), **overrides})

    @classmethod
    def from_openai(cls, schema: Mapping[str, Any], **overrides: Any) -> ToolSpec:
        """Build from an OpenAI function schema (wrapped in ``{"type": "function"}`` or bare).

        Raises:
            toolguard.errors.ToolSpecError: If the schema has no ``name``.
        """
        fn = schema.get("function", schema) if schema.get("type") == "function" else schema
        if not isinstance(fn, Mapping) or not fn.get("name"):
            raise ToolSpecError(f"OpenAI function schema needs a 'name': {dict(schema)!r:.200}")
        return cls._built(fn, fn.get("parameters"), overrides)

    @classmethod
    def from_bfcl(cls, doc: Mapping[str, Any], **overrides: Any) -> ToolSpec:
        """Build from a BFCL function doc (``{name, description, parameters}`` with Gorilla types).

        Raises:
            toolguard.errors.ToolSpecError: If the doc has no ``name``.
        """
        if not doc.get("name"):
            raise ToolSpecError(f"BFCL doc needs a 'name': {dict(doc)!r:.200}")
        return cls._built(doc, gorilla_to_json_schema(doc.get("parameters") or {}), overrides)

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

        The spec of a LangChain tool or a dict is kept (for the last
        :data:`COERCE_CACHE_SIZE` objects) and given again for the same object while its
        content is unchanged (a tool's name, description, ``args_schema`` and
        ``metadata``; a dict compared with a copy taken when it was first seen).

        Raises:
            toolguard.errors.ToolSpecError: If ``tool`` is of no supported form (a
                ``TypeError``).
        """
        if type(tool) is ToolSpec:
            return tool
        if cls is ToolSpec:  # the kept spec first: an isinstance check costs more
            hit = _COERCED.get(id(tool))
            if hit is not None and hit[0] is tool and _unchanged(tool, hit[1]):
                return hit[2]
        if isinstance(tool, ToolSpec):
            return tool
        if cls is not ToolSpec:
            return cls._coerce(tool)
        if isinstance(tool, BaseTool | Mapping):
            # a dict's spec gets its own containers: an edit of the dict later must not
            # reach a spec that is already hashed and shared
            spec = cls._coerce(_own_copy(tool) if isinstance(tool, Mapping) else tool)
            fingerprint = _fingerprint(tool)
            if fingerprint is not _UNCACHEABLE:
                _COERCED.put(id(tool), (tool, fingerprint, spec))
            return spec
        return cls._coerce(tool)

    @classmethod
    def _coerce(cls, tool: Any) -> ToolSpec:
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


MCP_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
"""The MCP ``ToolAnnotations`` hints :func:`declared_traits` reads (MCP specification
2025-06-18, "Tool annotations"), as ``langchain-mcp-adapters`` puts them in a tool's
``metadata`` (``ToolAnnotations.model_dump()``: camelCase keys, ``None`` when unset)."""


def declared_traits(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a tool's ``metadata`` declares about its behaviour, as :class:`ToolSpec` fields.

    The one place where toolguard reads tool behaviour; specs, the retry controller and
    the loop guard all read it here.  toolguard's own keys win, key by key, over the MCP
    tool annotations (``tool.metadata`` as ``langchain-mcp-adapters`` fills it; MCP
    specification 2025-06-18, ``ToolAnnotations``):

    ==============  ===========================================  =========================
    field           toolguard key                                MCP annotation
    ==============  ===========================================  =========================
    ``effects``     ``effects``: ``"read"``/``"write"``/         ``readOnlyHint`` true ->
                    ``"unknown"``                                ``"read"``; false (or
                                                                 unset beside a
                                                                 ``destructiveHint`` or
                                                                 ``idempotentHint``) ->
                                                                 ``"write"``
    ``idempotent``  ``idempotent`` (bool)                        ``idempotentHint``; a
                                                                 read-only tool is
                                                                 idempotent
    ``repeatable``  ``repeatable`` (bool)                        (none)
    ``open_world``  ``open_world`` (bool)                        ``openWorldHint``
    (the same)      ``accepts_tool_values``: ``True`` or a list  (none)
                    of parameter names
    ==============  ===========================================  =========================

    ``destructiveHint`` (destructive vs additive updates) only marks a tool ``"write"``:
    toolguard refuses an identical repeat of either kind and retries neither blindly
    unless it is idempotent.  A hint that is unset (``None``) or not a bool declares
    nothing, so a tool without annotations keeps toolguard's defaults (``effects``
    ``"unknown"``, treated as possibly state-changing; not idempotent; provenance's default
    rule) rather than the MCP defaults (which would make every unannotated tool an
    open-world, destructive write: the same behaviour except for provenance).

    MCP calls annotations *hints* that clients must not trust from untrusted servers: a
    server that marks ``send_money`` read-only gets it past the provenance check and the
    write-repeat rule, and its timeouts retried (the schema and content checks still
    apply).  Override a tool of such a server with toolguard's keys
    (``tool.metadata["effects"] = "write"``).

    Args:
        metadata: A LangChain tool's ``metadata`` (``None``: nothing declared).

    Returns:
        The declared fields only, any of ``{"effects": Effects, "idempotent": bool,
        "repeatable": bool, "open_world": bool, "accepts_tool_values": bool | tuple}``;
        ``{}`` when nothing is declared.
    """
    if not metadata:
        return {}
    out: dict[str, Any] = {}
    read_only, destructive, idempotent, open_world = (
        v if isinstance(v := metadata.get(k), bool) else None for k in MCP_HINTS)
    if read_only:
        out.update(effects="read", idempotent=True)
    else:  # readOnlyHint false, or unset (the MCP default is false): the other hints apply
        if read_only is False or destructive is not None or idempotent is not None:
            out["effects"] = "write"
        if idempotent is not None:
            out["idempotent"] = idempotent
    if open_world is not None:
        out["open_world"] = open_world
    effects = metadata.get("effects")
    if effects in ("read", "write", "unknown"):
        out["effects"] = effects
        if effects == "read":
            out.setdefault("idempotent", True)
        elif read_only:  # a declared writer is not idempotent because a hint said read-only
            out.pop("idempotent", None)
    for key in ("idempotent", "repeatable", "open_world"):
        if key in metadata and metadata[key] is not None:
            out[key] = bool(metadata[key])
    accepts = metadata.get("accepts_tool_values")
    if isinstance(accepts, bool):
        out["accepts_tool_values"] = accepts
    elif isinstance(accepts, (list, tuple, set, frozenset)):
        out["accepts_tool_values"] = tuple(str(p) for p in accepts)
    return out


def to_specs(tools: Iterable[Any]) -> list[ToolSpec]:
    """Coerce tools (see :meth:`ToolSpec.coerce`) into specs.

    Raises:
        toolguard.errors.ConfigurationError: If two tools share a name (a ``ValueError``).
        toolguard.errors.ToolSpecError: If a tool is of no supported form (a ``TypeError``).
    """
    specs = [ToolSpec.coerce(t) for t in tools]
    _check_unique(specs)
    return specs


def _check_unique(specs: Sequence[ToolSpec]) -> None:
    names = {s.name for s in specs}
    if len(names) == len(specs):
        return
    seen: set[str] = set()
    for s in specs:
        if s.name in seen:
            raise ConfigurationError(f"duplicate tool name {s.name!r}")
        seen.add(s.name)


# ---------------------------------------------------------------------------- caches
K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class _Bounded(Generic[K, V]):
    """A dict of at most ``size`` entries, oldest insert evicted first.

    Reads take no lock (a dict read is atomic under the GIL); inserts do.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        return self._data.get(key)

    def put(self, key: K, value: V) -> V:
        """Insert ``value`` unless ``key`` is there; returns the value kept."""
        with self._lock:
            kept = self._data.get(key)
            if kept is not None:
                return kept
            while len(self._data) >= self.size:
                self._data.pop(next(iter(self._data)))
            self._data[key] = value
            return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


COERCE_CACHE_SIZE = 8192
"""Tool objects (LangChain tools, dicts) whose spec :meth:`ToolSpec.coerce` keeps."""
TOOLSET_CACHE_SIZE = 128
"""Compiled :class:`ToolSet` s interned (their tables included)."""
VALIDATOR_CACHE_SIZE = 16384
"""Compiled JSON Schema validators kept by spec (:func:`schema_validator`)."""

_UNCACHEABLE: Any = object()
_COERCED: _Bounded[int, tuple[Any, Any, ToolSpec]] = _Bounded(COERCE_CACHE_SIZE)


def _fingerprint(tool: Any) -> Any:
    """What :func:`_unchanged` compares later: a deep copy of what the spec was built from.

    A dict: a deep copy of it.  A LangChain tool: name, description, ``args_schema`` (a
    pydantic class as is, a JSON schema deep-copied) and a copy of ``metadata``.
    """
    try:
        if isinstance(tool, BaseTool):
            schema = tool.args_schema
            return (tool.name, tool.description,
                    schema if isinstance(schema, type) else copy.deepcopy(schema),
                    copy.deepcopy(tool.metadata))
        return _copy_dict(tool)
    except Exception:  # an uncopyable value: build its spec every time
        return _UNCACHEABLE


_IMMUTABLE = (str, int, float, bool, bytes, type(None))


def _copy_dict(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a tool dict that shares its strings and numbers with the original.

    Containers (dicts, lists, tuples) are copied, so an in-place edit of the tool shows as
    a difference; immutable leaves are shared, so comparing the copy with the unchanged
    tool meets identical objects and is about a third faster than comparing a JSON round
    trip (and building it twice as fast).  Other values are deep-copied.
    """
    return cast(dict[str, Any], _copy_tree(tool, 0))


def _own_copy(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """:func:`_copy_dict`, or the dict itself when it cannot be copied."""
    try:
        return _copy_dict(tool)
    except Exception:  # an uncopyable value: the spec shares it (as before)
        return tool


def _copy_tree(value: Any, depth: int) -> Any:
    if isinstance(value, _IMMUTABLE):
        return value
    if depth > 200:  # deeper than any schema: copied whole (rare; no recursion limit)
        return copy.deepcopy(value)
    if isinstance(value, Mapping):
        return {k: _copy_tree(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_tree(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(_copy_tree(v, depth + 1) for v in value)
    return copy.deepcopy(value)


def _unchanged(tool: Any, fingerprint: Any) -> bool:
    try:
        if type(fingerprint) is dict:
            return bool(fingerprint == tool)
        name, description, schema, metadata = fingerprint
        return bool(tool.name == name and tool.description == description
                    and (tool.args_schema is schema or tool.args_schema == schema)
                    and tool.metadata == metadata)
    except Exception:  # a value whose comparison fails: treat the tool as changed
        return False


def _digest_of(value: Any) -> str:
    """Hex BLAKE2b (128-bit) of ``value`` as canonical JSON (``str`` for non-JSON values)."""
    try:
        text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    except TypeError:  # keys of mixed types cannot be sorted
        text = json.dumps(value, default=str, ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@functools.lru_cache(maxsize=VALIDATOR_CACHE_SIZE)
def schema_validator(spec: ToolSpec) -> Draft202012Validator | None:
    """The JSON Schema (draft 2020-12) validator of ``spec.parameters``, compiled once.

    Kept by spec (its digest; the last :data:`VALIDATOR_CACHE_SIZE`), so every guard built
    from the same tools shares it.  Formats are checked (``FORMAT_CHECKER``).

    Returns:
        ``None`` when the schema itself is invalid (the tool author's problem, not the
        model's: such a tool's arguments are not validated).
    """
    try:
        Draft202012Validator.check_schema(spec.parameters)
    except SchemaError:
        return None
    return Draft202012Validator(spec.parameters,
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


class ToolSet:
    """An ordered set of tool specs with unique names, compiled once and shared.

    Immutable; equal (and hashed) by :attr:`digest`, the digest of its specs' digests in
    order.  Build it with :meth:`coerce` (any tool form) or :meth:`of` (specs): both give
    the same object for the same tools while it is among the last
    :data:`TOOLSET_CACHE_SIZE` sets, so tables derived from it (:meth:`derived`: the
    pre-check's term index, the relevance judge's tables) are computed once per tool set
    and process.  Pickles as its specs.

    Attributes:
        specs: The specs, in the order given.
        by_name: Read-only ``{name: spec}``.
        digest: Hex digest of the set (order matters).
    """

    __slots__ = ("__weakref__", "_derived", "_lock", "by_name", "digest", "names", "specs")

    specs: tuple[ToolSpec, ...]
    names: tuple[str, ...]
    by_name: Mapping[str, ToolSpec]
    digest: str
    _derived: dict[str, Any]
    _lock: threading.Lock

    def __init__(self, specs: Iterable[ToolSpec]) -> None:
        """Use :meth:`of` or :meth:`coerce` (cached) rather than this.

        Raises:
            toolguard.errors.ConfigurationError: If two specs share a name.
            toolguard.errors.ToolSpecError: If an item is not a :class:`ToolSpec`.
        """
        items = tuple(specs)
        for s in items:
            if not isinstance(s, ToolSpec):
                raise ToolSpecError(f"ToolSet takes ToolSpecs, got {type(s).__name__}")
        _check_unique(items)
        object.__setattr__(self, "specs", items)
        object.__setattr__(self, "names", tuple(s.name for s in items))
        object.__setattr__(self, "by_name", MappingProxyType({s.name: s for s in items}))
        object.__setattr__(self, "digest", _set_digest(items))
        object.__setattr__(self, "_derived", {})
        object.__setattr__(self, "_lock", threading.Lock())

    # ------------------------------------------------------------------ building
    @classmethod
    def of(cls, specs: Iterable[ToolSpec]) -> ToolSet:
        """The (cached) set of ``specs``.

        Raises:
            toolguard.errors.ConfigurationError: If two specs share a name.
        """
        if isinstance(specs, ToolSet):
            return specs
        items = tuple(specs)
        for s in items:
            if not isinstance(s, ToolSpec):
                raise ToolSpecError(f"ToolSet takes ToolSpecs, got {type(s).__name__}")
        return _interned(items)

    @classmethod
    def coerce(cls, tools: Iterable[Any]) -> ToolSet:
        """The (cached) set of tools in any form :meth:`ToolSpec.coerce` accepts.

        Raises:
            toolguard.errors.ConfigurationError: If two tools share a name.
            toolguard.errors.ToolSpecError: If a tool is of no supported form.
        """
        if isinstance(tools, ToolSet):
            return tools
        return cls.of([ToolSpec.coerce(t) for t in tools])

    # ------------------------------------------------------------------ compiled tables
    def derived(self, key: str, build: Callable[[ToolSet], T]) -> T:
        """``build(self)``, computed once per set and ``key`` and kept with the set.

        For tables that depend only on the specs (term indexes); ``key`` names the table
        (``"precheck.lexical"``).  ``build`` must not mutate the set.
        """
        found = self._derived.get(key, _UNCACHEABLE)
        if found is not _UNCACHEABLE:
            return cast(T, found)
        with self._lock:  # one build per table, also under threads
            found = self._derived.get(key, _UNCACHEABLE)
            if found is _UNCACHEABLE:
                found = self._derived[key] = build(self)
        return cast(T, found)

    def validator(self, name: str) -> Draft202012Validator | None:
        """:func:`schema_validator` of the tool ``name`` (``KeyError`` if absent)."""
        return schema_validator(self.by_name[name])

    # ------------------------------------------------------------------ protocol
    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ToolSet is immutable")

    def __len__(self) -> int:
        return len(self.specs)

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self.specs)

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def __hash__(self) -> int:
        return hash(self.digest)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolSet):
            return NotImplemented
        return self is other or self.digest == other.digest

    def __reduce__(self) -> tuple[Any, ...]:
        return (ToolSet.of, (self.specs,))

    def __repr__(self) -> str:
        shown = ", ".join(self.names[:5]) + (f", ... ({len(self.names)} tools)"
                                             if len(self.names) > 5 else "")
        return f"ToolSet([{shown}], digest={self.digest[:12]})"


@functools.lru_cache(maxsize=TOOLSET_CACHE_SIZE)
def _interned(specs: tuple[ToolSpec, ...]) -> ToolSet:
    """The one :class:`ToolSet` of ``specs`` (specs hash and compare by digest)."""
    return ToolSet(specs)


def _set_digest(specs: Sequence[ToolSpec]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for s in specs:
        h.update(s.digest.encode("ascii"))
    return h.hexdigest()


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
