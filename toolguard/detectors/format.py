"""Format hallucination: arguments that break the tool's schema.

RelyToolBench's *format* type; BFCL's checker labels (``missing_required``,
``unexpected_param``, ``type_error``, ``value_error``) are used as evidence codes.
Validation is JSON Schema (draft 2020-12) through ``jsonschema``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from toolguard.context import CheckContext, ProposedCall
from toolguard.detectors.base import Detector, register_detector
from toolguard.errors import ConfigurationError
from toolguard.specs import ToolSpec, schema_validator
from toolguard.types import Evidence, Verdict

_CODES = {
    "required": "missing_required",
    "additionalProperties": "unexpected_param",
    "type": "type_error",
    "enum": "value_error",
    "const": "value_error",
    "format": "value_error",
    "pattern": "value_error",
    "minimum": "value_error",
    "maximum": "value_error",
    "exclusiveMinimum": "value_error",
    "exclusiveMaximum": "value_error",
    "minLength": "value_error",
    "maxLength": "value_error",
    "minItems": "value_error",
    "maxItems": "value_error",
}


@register_detector
class FormatDetector(Detector):
    """Invalid JSON, unknown keys, missing required keys, wrong types, enum/format violations.

    Args:
        allow_unknown_keys: If ``True``, top-level keys not in the schema pass
            (the schema's own ``additionalProperties`` still applies).
        max_errors: At most this many schema errors are reported per call.

    A call to an unknown tool is not checked here (the type detector answers it).
    """

    kind: ClassVar = "format"

    def __init__(self, *, allow_unknown_keys: bool = False, max_errors: int = 5) -> None:
        if max_errors < 1:
            raise ConfigurationError("max_errors must be >= 1")
        self.allow_unknown_keys = allow_unknown_keys
        self.max_errors = max_errors

    @staticmethod
    def _validator(spec: ToolSpec) -> Draft202012Validator | None:
        # compiled once per spec and shared by every guard (None: a broken schema is the
        # tool author's problem, not the model's)
        return schema_validator(spec)

    def check(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        """Validate the call's arguments against its tool's schema."""
        spec = ctx.specs.get(call.name)
        if spec is None:
            return None
        if call.parse_error is not None or call.args is None:
            detail = call.parse_error or "arguments could not be parsed"
            return self._verdict(
                call,
                [Evidence(detector="format", code="invalid_json", detail=detail,
                          value=_clip(call.raw_args))],
                spec,
            )
        evidence: list[Evidence] = []
        if not self.allow_unknown_keys and spec.properties:
            for key in call.args:
                if key not in spec.properties:
                    evidence.append(Evidence(
                        detector="format", code="unexpected_param", parameter=key,
                        detail=f"unknown parameter '{key}'", value=_clip(call.args[key]),
                    ))
        validator = self._validator(spec)
        if validator is not None:
            for err in sorted(validator.iter_errors(call.args), key=_error_order):
                if len(evidence) >= self.max_errors:
                    break
                evidence.append(_evidence_from_error(err))
        if not evidence:
            return None
        return self._verdict(call, evidence, spec)

    def _verdict(self, call: ProposedCall, evidence: list[Evidence], spec: ToolSpec) -> Verdict:
        problems = "; ".join(e.detail for e in evidence)
        expected = _signature(spec)
        return Verdict.on(
            call, "block",
            hallucination="format",
            reason=(
                f"Error: the arguments of '{call.name}' do not match its schema: {problems}. "
                f"Expected arguments: {expected}. Fix the arguments and call it again; "
                "if a required value was not given by the user, ask the user for it."
            ),
            evidence=tuple(evidence),
        )


def _error_order(err: ValidationError) -> tuple[int, str]:
    return (0 if err.validator == "required" else 1, "/".join(map(str, err.absolute_path)))


def _evidence_from_error(err: ValidationError) -> Evidence:
    code = _CODES.get(str(err.validator), "schema_error")
    path = _path(err.absolute_path)
    if err.validator == "required":
        missing = _missing_key(err)
        parameter = f"{path}.{missing}" if path and missing else (missing or path or None)
        detail = f"missing required parameter '{parameter}'"
    elif err.validator == "additionalProperties":
        parameter = path or None
        detail = f"{err.message}" + (f" (in '{path}')" if path else "")
    elif err.validator == "type":
        parameter = path or None
        expected = err.validator_value
        detail = (
            f"parameter '{parameter}' must be of type {expected}, "
            f"got {_json_type(err.instance)} {_clip(err.instance, 60)!r}"
        )
    elif err.validator == "enum":
        parameter = path or None
        detail = f"parameter '{parameter}' must be one of {err.validator_value}, " \
                 f"got {_clip(err.instance, 60)!r}"
    else:
        parameter = path or None
        detail = f"parameter '{parameter}': {_clip(err.message, 200)}"
    return Evidence(
        detector="format", code=code, parameter=parameter, detail=detail,
        value=None if err.validator == "required" else _clip(err.instance),
    )


def _missing_key(err: ValidationError) -> str | None:
    # jsonschema's message is "'x' is a required property"
    msg = str(err.message)
    if msg.startswith("'") and "' is a required property" in msg:
        return msg[1 : msg.index("' is a required property")]
    return None


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"),
    (str, "string"), (list, "array"), (dict, "object"))
"""Python type -> JSON Schema type name, in the order checked (``bool`` before ``int``)."""


def _json_type(value: Any) -> str:
    return next((name for t, name in _JSON_TYPES if isinstance(value, t)),
                type(value).__name__)


def _signature(spec: ToolSpec) -> str:
    parts = []
    for name, schema in spec.properties.items():
        typ = schema.get("type", "any") if isinstance(schema, dict) else "any"
        req = "" if name in spec.required else "?"
        parts.append(f"{name}{req}: {typ}")
    return "{" + ", ".join(parts) + "}" if parts else "{} (no parameters)"


def _clip(value: Any, limit: int = 200) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"... ({len(value)} chars)"
    if isinstance(value, (dict, list)):
        text = repr(value)
        return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"
    return value
