"""What a tool's failure is: the error classification table and its readers.

CRITICTOOL (Huang et al., 2025) separates *internal* errors, the model's own mistakes in
four categories (tool selection, tool hallucination, parameter key, parameter value), from
*external* environment errors.  An environment error is *transient* (worth a retry) or
*permanent* (retrying cannot help); a transient one is *ambiguous* when the effect may
already have happened, so only an idempotent tool may be retried blindly.

The rules are data, read in this order, first match wins:

1. a pydantic ``ValidationError`` behind the exception: ``internal``, ``parameter_key``
   when an error type is in :data:`KEY_ERROR_TYPES`, else ``parameter_value``;
2. :data:`EXCEPTION_CLASSES`: exception types;
3. :data:`STATUS_CLASSES`: an HTTP status on the exception or its ``response``, then
   :data:`SERVER_ERROR` for any other 5xx;
4. :data:`MESSAGE_CLASSES`: patterns over the error text (both ends of a long one);
5. else ``internal`` / ``parameter_value`` (never retried).

A 5xx other than 503 is ambiguous: the server may have committed the effect before it
failed (a charge answered ``502 Bad Gateway``).  503 Service Unavailable and 429 say the
request was not handled (RFC 9110 §15.6.4, RFC 6585 §4) and are retried for any tool.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

from langchain_core.messages import ToolMessage
from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from toolguard.conversation import error_text

__all__ = [
    "CATEGORY_TEXT",
    "DETAIL_CHARS",
    "EXCEPTION_CLASSES",
    "KEY_ERROR_TYPES",
    "MESSAGE_CLASSES",
    "SCAN_CHARS",
    "SERVER_ERROR",
    "STATUS_CLASSES",
    "SUCCESS",
    "Classification",
    "EnvironmentKind",
    "ErrorClass",
    "InternalCategory",
    "Outcome",
    "classify_exception",
    "classify_result",
    "classify_text",
    "exception_text",
]

Outcome = Literal["success", "internal", "transient", "permanent"]
"""``success``; ``internal`` (the model's fault, never retried); ``transient`` (retried);
``permanent`` (an environment error retrying cannot fix)."""
InternalCategory = Literal[
    "tool_selection", "tool_hallucination", "parameter_key", "parameter_value"
]
"""CRITICTOOL's internal-error categories."""
EnvironmentKind = Literal["timeout", "connection", "rate_limit", "server", "permission",
                          "not_found"]
"""The kinds of environment error."""

CATEGORY_TEXT: Final[Mapping[str, str]] = MappingProxyType({
    "tool_selection": "tool selection error (this tool does not fit the step)",
    "tool_hallucination": "tool hallucination error (there is no such tool)",
    "parameter_key": "parameter key error (an argument name is wrong or missing)",
    "parameter_value": "parameter value error (an argument value is invalid)",
})
"""How the model is told each internal category (CRITICTOOL's wording)."""

SCAN_CHARS: Final = 2_000
"""Characters of an error text the patterns look at: its first and its last ``SCAN_CHARS``
(a status, an exception name or a ``Retry-After`` sits at one end; a 10 MB message is
classified in microseconds, not seconds)."""
DETAIL_CHARS: Final = 500
"""Characters of the error text kept in :attr:`Classification.detail`."""


class Classification(BaseModel):
    """The class of one tool outcome.

    Attributes:
        outcome: ``success``, ``internal``, ``transient`` or ``permanent``.
        category: For ``internal``: a CRITICTOOL category (:data:`InternalCategory`); for
            environment errors: an :data:`EnvironmentKind`; else ``None``.
        retry_after: Seconds the environment asked to wait (``Retry-After``), if any.
        ambiguous: ``True`` when the effect may have happened (a timeout): not retried for
            tools that are not idempotent.
        detail: The error text (cut to :data:`DETAIL_CHARS` characters).
    """

    model_config = ConfigDict(frozen=True)

    outcome: Outcome
    category: str | None = None
    retry_after: float | None = None
    ambiguous: bool = False
    detail: str = ""


SUCCESS: Final = Classification(outcome="success")
"""The classification of a successful answer."""


@dataclass(frozen=True, slots=True)
class ErrorClass:
    """One row of the classification table: what a matched error is.

    Attributes:
        outcome: ``internal``, ``transient`` or ``permanent``.
        category: A CRITICTOOL category or an :data:`EnvironmentKind`.
        ambiguous: The effect may have happened (retried only for idempotent tools).
    """

    outcome: Outcome
    category: str
    ambiguous: bool = False


_TIMEOUT: Final = ErrorClass("transient", "timeout", ambiguous=True)
_PERMISSION: Final = ErrorClass("permanent", "permission")
_PARAMETER_VALUE: Final = ErrorClass("internal", "parameter_value")

KEY_ERROR_TYPES: Final = frozenset({"missing", "extra_forbidden", "missing_argument",
                                    "unexpected_keyword_argument"})
"""pydantic error types that make a validation error a ``parameter_key`` error."""

EXCEPTION_CLASSES: Final[tuple[tuple[type[BaseException], ErrorClass], ...]] = (
    # asyncio's and concurrent.futures' TimeoutError are this TimeoutError (Python >= 3.11)
    (TimeoutError, _TIMEOUT),
    (ConnectionRefusedError, ErrorClass("transient", "connection")),  # nothing was sent
    # reset / aborted after sending: the effect may exist
    (ConnectionError, ErrorClass("transient", "connection", ambiguous=True)),
    (PermissionError, _PERMISSION),
)
"""Exception types, most specific first (``isinstance``)."""

STATUS_CLASSES: Final[Mapping[int, ErrorClass]] = MappingProxyType({
    401: _PERMISSION,
    403: _PERMISSION,
    404: ErrorClass("permanent", "not_found"),
    408: _TIMEOUT,
    429: ErrorClass("transient", "rate_limit"),
    503: ErrorClass("transient", "server"),  # not handled: safe to retry
    504: _TIMEOUT,
})
"""HTTP statuses with a class of their own; other 4xx are classified by their message."""
SERVER_ERROR: Final = ErrorClass("transient", "server", ambiguous=True)
"""Any 5xx not in :data:`STATUS_CLASSES`: the effect may be committed."""

_HTTP = r"(?:http|status|code|error)\W{0,3}"  # a status number only counts in an HTTP context
MESSAGE_CLASSES: Final[tuple[tuple[re.Pattern[str], ErrorClass], ...]] = (
    (re.compile(r"not a valid tool|no such tool|unknown tool|is not defined|has no attribute",
                re.I), ErrorClass("internal", "tool_hallucination")),
    (re.compile(r"unexpected keyword|missing \d+ required|required property|"
                r"field required|missing required|unexpected param|extra inputs are not permitted",
                re.I), ErrorClass("internal", "parameter_key")),
    (re.compile(_HTTP + r"429\b|^429\b|too many requests|rate.?limit|quota exceeded", re.I),
     ErrorClass("transient", "rate_limit")),
    (re.compile(r"timed? ?out|timeout|deadline exceeded", re.I), _TIMEOUT),
    (re.compile(r"connection refused|temporarily unavailable", re.I),
     ErrorClass("transient", "connection")),
    (re.compile(r"connection (reset|aborted|error)|broken pipe", re.I),
     ErrorClass("transient", "connection", ambiguous=True)),
    (re.compile(_HTTP + r"503\b|^503\b|service unavailable", re.I),
     ErrorClass("transient", "server")),
    (re.compile(_HTTP + r"5\d\d\b|^5\d\d\b|bad gateway|internal server error|"
                r"gateway timeout", re.I), SERVER_ERROR),
    (re.compile(_HTTP + r"40[13]\b|^40[13]\b|permission denied|unauthori[sz]ed|forbidden|"
                r"not subscribed|access denied", re.I), _PERMISSION),
    (re.compile(r"validation error|invalid (value|argument|literal)|must be|not a valid|"
                r"no such file|does not exist|not found|cannot|can't|invalid", re.I),
     _PARAMETER_VALUE),
)
"""Patterns over an error text, in order; the first that matches decides."""

_RETRY_AFTER_TEXT = re.compile(r"retry[- ]after[\"':= ]+(\d+(?:\.\d+)?)", re.I)


# ---------------------------------------------------------------------------- reading
def _scanned(text: str) -> str:
    """The part of ``text`` the patterns search: all of it, or both ends of a long one."""
    if len(text) <= 2 * SCAN_CHARS:
        return text
    return f"{text[:SCAN_CHARS]}\n{text[-SCAN_CHARS:]}"


def _attribute(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)`` that never raises (a property of a tool's exception may)."""
    try:
        return getattr(obj, name, None)
    except Exception:  # a broken property of someone else's exception: treat as absent
        return None


def exception_text(exc: BaseException) -> str:
    """``"TypeName: message"`` of an exception; never raises.

    An exception whose ``__str__`` raises or returns a non-string is written by its
    ``repr`` (``ToolNode``'s ``Error: BadStr()``), and as ``TypeName: <unprintable>`` when
    that fails too.
    """
    name = type(exc).__name__
    try:
        message = str(exc)
    except Exception:  # __str__ raised or returned a non-string
        pass
    else:
        return f"{name}: {message}"
    try:
        return repr(exc)
    except Exception:  # __repr__ is broken as well
        return f"{name}: <unprintable>"


def _status_code(exc: BaseException) -> int | None:
    """An HTTP status (100-599) on the exception or its ``response``, if any."""
    for obj in (exc, _attribute(exc, "response")):
        for attr in ("status_code", "status", "code", "http_status"):
            value = _attribute(obj, attr)
            if isinstance(value, int) and 100 <= value <= 599:
                return value
    return None


def _header_retry_after(exc: BaseException | None) -> Any:
    """The ``Retry-After`` header of an exception or its ``response``, if any."""
    headers: Any = None
    for obj in (exc, _attribute(exc, "response")):
        headers = _attribute(obj, "headers")
        if headers:
            break
    if not isinstance(headers, Mapping):
        return None
    try:
        return next((v for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    except Exception:  # a broken headers object: no header
        return None


def _retry_after(exc: BaseException | None, text: str) -> float | None:
    """Seconds to wait from a ``Retry-After`` header, else from the text; never raises.

    The value is seconds or an HTTP date (RFC 9110 §10.2.3); a date in the past means 0 s, a
    malformed value is ignored.
    """
    raw: Any = _header_retry_after(exc)
    if raw is None:
        m = _RETRY_AFTER_TEXT.search(_scanned(text))
        raw = m.group(1) if m else None
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except (TypeError, ValueError):
        pass
    try:  # an HTTP date
        when = email.utils.parsedate_to_datetime(str(raw))
    except (TypeError, ValueError, IndexError):
        return None  # a malformed header is ignored, never an error
    return max(0.0, when.timestamp() - time.time())


def _classified(row: ErrorClass, text: str, exc: BaseException | None = None,
                ) -> Classification:
    """The :class:`Classification` of an error matched by ``row``."""
    return Classification(
        outcome=row.outcome, category=row.category, ambiguous=row.ambiguous,
        retry_after=_retry_after(exc, text) if row.category == "rate_limit" else None,
        detail=text[:DETAIL_CHARS])


def classify_text(text: str, *, exc: BaseException | None = None) -> Classification:
    """Classify an error text (an exception message or an error payload).

    The first pattern of :data:`MESSAGE_CLASSES` that matches decides; none gives
    ``internal`` / ``parameter_value``.  Only both ends of a long text are searched
    (:data:`SCAN_CHARS` characters each), so the cost does not grow with the text.
    """
    scanned = _scanned(text)
    row = next((r for pattern, r in MESSAGE_CLASSES if pattern.search(scanned)),
               _PARAMETER_VALUE)
    return _classified(row, text, exc)


def _validation_error(exc: BaseException) -> PydanticValidationError | None:
    """The pydantic ``ValidationError`` behind ``exc``, if any.

    LangChain's ``ToolInvocationError`` wraps it (``source``/``__cause__``).
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, PydanticValidationError):
            return current
        inner = _attribute(current, "source")
        current = inner if isinstance(inner, BaseException) else current.__cause__
    return None


def classify_exception(exc: BaseException) -> Classification:
    """Classify an exception raised by a tool; never raises.

    The table in the module docstring, in order: a validation error, the exception's type
    (:data:`EXCEPTION_CLASSES`), an HTTP status on it or its ``response``
    (:data:`STATUS_CLASSES`, :data:`SERVER_ERROR`), its message (:func:`classify_text`).
    A 429 carries the ``Retry-After`` it names (header, else text) in seconds.

    An exception that cannot be printed (``__str__`` raises or returns a non-string, a
    ``response`` or ``headers`` property raises) is classified by what can be read of it;
    whatever goes wrong inside the classification gives an ``internal`` outcome (never
    retried) rather than an error escaping the tool node.
    """
    try:
        return _classify_exception(exc)
    except Exception:  # the classifier never crashes the graph on a hostile exception
        return _classified(_PARAMETER_VALUE, exception_text(exc))


def _classify_exception(exc: BaseException) -> Classification:
    text = exception_text(exc)
    validation = _validation_error(exc)
    if validation is not None:
        kinds = {str(e.get("type", "")) for e in validation.errors()}
        key_error = bool(kinds & KEY_ERROR_TYPES)
        return _classified(ErrorClass("internal", "parameter_key") if key_error
                           else _PARAMETER_VALUE, text)
    for kind, row in EXCEPTION_CLASSES:
        if isinstance(exc, kind):
            return _classified(row, text, exc)
    status = _status_code(exc)
    if status is not None:
        row_for_status = STATUS_CLASSES.get(status, SERVER_ERROR if status >= 500 else None)
        if row_for_status is not None:
            return _classified(row_for_status, text, exc)
    return classify_text(text, exc=exc)


def classify_result(message: ToolMessage) -> Classification:
    """Classify a ``ToolMessage`` answer.

    ``status="error"`` or an error payload (``{"error": ...}`` as BFCL's environments answer,
    ``Error ...`` text as ToolNode and BFCL's executor write) is classified by its text
    (:func:`classify_text`); any other answer is :data:`SUCCESS`.
    """
    error = error_text(message)
    return SUCCESS if error is None else classify_text(error)
