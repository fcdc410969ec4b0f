"""BFCL function-doc schema helpers shared by the perturbations and the builder.

Gorilla types are mapped to JSON Schema as :meth:`toolguard.specs.ToolSpec.from_bfcl` maps
them; validators are cached per doc.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator

from toolguard.specs import GORILLA_TO_JSON_SCHEMA, ToolSpec


def doc_props(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The ``parameters.properties`` of a BFCL doc (``{}`` when absent)."""
    params = doc.get("parameters") or {}
    props = params.get("properties") if isinstance(params, Mapping) else None
    return dict(props) if isinstance(props, Mapping) else {}


def required_keys(doc_or_schema: Mapping[str, Any]) -> list[str]:
    """The required keys of a BFCL doc or of an object schema."""
    params = doc_or_schema.get("parameters", doc_or_schema)
    req = params.get("required") if isinstance(params, Mapping) else None
    return [str(r) for r in req] if isinstance(req, list) else []


def schema_type(schema: Any) -> str | None:
    """The JSON Schema type of a (Gorilla-typed) property schema, or ``None``."""
    if not isinstance(schema, Mapping) or not isinstance(schema.get("type"), str):
        return None
    return GORILLA_TO_JSON_SCHEMA.get(schema["type"])


def is_json_type(value: Any, json_type: str) -> bool:
    """Whether ``value`` has the JSON type ``json_type`` (``bool`` is not a number)."""
    if json_type == "string":
        return isinstance(value, str)
    if json_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if json_type == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if json_type == "boolean":
        return isinstance(value, bool)
    if json_type == "array":
        return isinstance(value, list)
    if json_type == "object":
        return isinstance(value, dict)
    return False


@functools.lru_cache(maxsize=4096)
def _validator_for(doc_json: str) -> Draft202012Validator:
    spec = ToolSpec.from_bfcl(json.loads(doc_json))
    return Draft202012Validator(spec.parameters)


def doc_validator(doc: Mapping[str, Any]) -> Draft202012Validator:
    """A JSON Schema validator of the doc's parameters (cached)."""
    return _validator_for(json.dumps(doc, sort_keys=True, default=str))


def schema_errors(doc: Mapping[str, Any], args: Mapping[str, Any]) -> list[str]:
    """Schema violations of ``args`` against ``doc``, plus unknown keys."""
    errors = [e.message for e in doc_validator(doc).iter_errors(dict(args))]
    props = doc_props(doc)
    errors += [f"unknown parameter {k!r}" for k in args if props and k not in props]
    return errors
