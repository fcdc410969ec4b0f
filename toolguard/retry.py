"""Bounded retry -> skip -> finish controller for tool calls (CRITICTOOL).

CRITICTOOL (Huang et al., 2025) separates *internal* errors — the model's own mistakes,
in four categories (tool selection, tool hallucination, parameter key, parameter value) —
from *external* environment errors, and scores a model on retrying a transient error, then
skipping the step or finishing and telling the user.  :class:`RetryController` does that for
any LangGraph ``ToolNode`` (``wrap_tool_call``/``awrap_tool_call``) and, through
:class:`RetryControllerMiddleware`, for LangChain v1 ``create_agent``.

Per tool call:

1. Caps first: when ``max_tool_calls`` calls were made in this run, or
   ``max_consecutive_failures`` failed in a row, the call is not executed and the run
   finishes (the user is told and asked how to proceed).
2. The tool runs (with ``timeout_s`` if set); its outcome is classified
   (:func:`classify_exception`, :func:`classify_result`):

   - ``success``;
   - ``internal`` (the model's fault: unknown tool, unexpected/missing keyword, invalid
     value): one ``ToolMessage`` naming the CRITICTOOL category so the model can correct it;
     never retried;
   - ``transient`` (timeout, connection reset, 429 / rate limit / quota, 5xx): retried up to
     ``max_retries`` times with exponential backoff and jitter (tenacity), honouring
     ``Retry-After``; an *ambiguous* failure (the effect may have happened: a timeout, a
     connection reset, any 5xx but 503) is retried only for tools marked idempotent or
     read-only;
   - ``permanent`` (401 / 403 / permission denied / not subscribed, 404): never retried.

3. When retries are spent (or the error is permanent), the tool's policy applies:
   ``skip`` (the model is told the step failed and continues with the remaining subtasks) or
   ``finish`` (the run stops: the user is told what failed and asked how to proceed).

Every call gets exactly one ``ToolMessage``, and the controller writes no state from inside
the tool node: each answer carries what happened in ``response_metadata["toolguard_retry"]``
(:class:`RetryRecord`: outcome, category, retries, the policy that applied).  A *run* is one
user turn; its counters (tool calls made, failures in a row, whether a ``finish`` fired)
are read from the turn's own answers by :meth:`RetryController.tally`, so checkpoints,
interrupts and restarts keep them and parallel calls never race.  A single node after the
tools applies the tally — :class:`~toolguard.middleware.RetryControllerMiddleware`'s
``before_model`` in ``create_agent``, :class:`~toolguard.nodes.RetryGateNode` in a
hand-built graph — and ends the run when it must finish.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import email.utils
import re
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, Tool
from langgraph.errors import GraphBubbleUp, is_invalid_resume
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError
from tenacity import RetryCallState, wait_exponential_jitter

from toolguard.context import error_text, message_text
from toolguard.errors import ConfigurationError
from toolguard.specs import declared_traits

Outcome = Literal["success", "internal", "transient", "permanent"]
InternalCategory = Literal[
    "tool_selection", "tool_hallucination", "parameter_key", "parameter_value"
]
"""CRITICTOOL's internal-error categories."""
EnvironmentKind = Literal["timeout", "connection", "rate_limit", "server", "permission",
                          "not_found"]
OnExhausted = Literal["skip", "finish"]

CATEGORY_TEXT: dict[str, str] = {
    "tool_selection": "tool selection error (this tool does not fit the step)",
    "tool_hallucination": "tool hallucination error (there is no such tool)",
    "parameter_key": "parameter key error (an argument name is wrong or missing)",
    "parameter_value": "parameter value error (an argument value is invalid)",
}


class Classification(BaseModel):
    """The class of one tool outcome.

    Attributes:
        outcome: ``success``, ``internal``, ``transient`` or ``permanent``.
        category: For ``internal``: a CRITICTOOL category; for environment errors: an
            :data:`EnvironmentKind`; else ``None``.
        retry_after: Seconds the environment asked to wait (``Retry-After``), if any.
        ambiguous: ``True`` when the effect may have happened (a timeout): not retried for
            tools that are not idempotent.
        detail: The error text (cut to 500 characters).
    """

    model_config = ConfigDict(frozen=True)

    outcome: Outcome
    category: str | None = None
    retry_after: float | None = None
    ambiguous: bool = False
    detail: str = ""


SUCCESS = Classification(outcome="success")

_HTTP = r"(?:http|status|code|error)\W{0,3}"  # a status number only counts in an HTTP context
_PATTERNS: tuple[tuple[re.Pattern[str], Outcome, str, bool], ...] = (
    (re.compile(r"not a valid tool|no such tool|unknown tool|is not defined|has no attribute",
                re.I), "internal", "tool_hallucination", False),
    (re.compile(r"unexpected keyword|missing \d+ required|required property|"
                r"field required|missing required|unexpected param|extra inputs are not permitted",
                re.I), "internal", "parameter_key", False),
    (re.compile(_HTTP + r"429\b|^429\b|too many requests|rate.?limit|quota exceeded", re.I),
     "transient", "rate_limit", False),
    (re.compile(r"timed? ?out|timeout|deadline exceeded", re.I), "transient", "timeout", True),
    (re.compile(r"connection refused|temporarily unavailable", re.I),
     "transient", "connection", False),
    (re.compile(r"connection (reset|aborted|error)|broken pipe", re.I),
     "transient", "connection", True),
    (re.compile(_HTTP + r"503\b|^503\b|service unavailable", re.I), "transient", "server",
     False),
    (re.compile(_HTTP + r"5\d\d\b|^5\d\d\b|bad gateway|internal server error|"
                r"gateway timeout", re.I), "transient", "server", True),
    (re.compile(_HTTP + r"40[13]\b|^40[13]\b|permission denied|unauthori[sz]ed|forbidden|"
                r"not subscribed|access denied", re.I), "permanent", "permission", False),
    (re.compile(r"validation error|invalid (value|argument|literal)|must be|not a valid|"
                r"no such file|does not exist|not found|cannot|can't|invalid", re.I),
     "internal", "parameter_value", False),
)


SCAN_CHARS = 2_000
"""Characters of an error text the patterns look at: its first and its last ``SCAN_CHARS``
(a status, an exception name or a ``Retry-After`` sits at one end; a 10 MB message is
classified in microseconds, not seconds)."""
DETAIL_CHARS = 500
"""Characters of the error text kept in :attr:`Classification.detail`."""


def _scanned(text: str) -> str:
    """The part of ``text`` the patterns search: all of it, or both ends of a long one."""
    if len(text) <= 2 * SCAN_CHARS:
        return text
    return f"{text[:SCAN_CHARS]}\n{text[-SCAN_CHARS:]}"


def _attr(obj: Any, name: str) -> Any:
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
    for obj in (exc, _attr(exc, "response")):
        for attr in ("status_code", "status", "code", "http_status"):
            value = _attr(obj, attr)
            if isinstance(value, int) and 100 <= value <= 599:
                return value
    return None


def _header_retry_after(exc: BaseException | None) -> Any:
    """The ``Retry-After`` header of an exception or its ``response``, if any."""
    headers: Any = None
    for obj in (exc, _attr(exc, "response")):
        headers = _attr(obj, "headers")
        if headers:
            break
    if not isinstance(headers, Mapping):
        return None
    try:
        return next((v for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    except Exception:  # a broken headers object: no header
        return None


def _retry_after(exc: BaseException | None, text: str) -> float | None:
    raw: Any = _header_retry_after(exc)
    if raw is None:
        m = re.search(r"retry[- ]after[\"':= ]+(\d+(?:\.\d+)?)", _scanned(text), re.I)
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


def classify_text(text: str, *, exc: BaseException | None = None) -> Classification:
    """Classify an error text (an exception message or an error payload).

    Only both ends of a long text are searched (:data:`SCAN_CHARS` characters each), so
    the cost does not grow with the text.
    """
    scanned = _scanned(text)
    for pattern, outcome, category, ambiguous in _PATTERNS:
        if pattern.search(scanned):
            return Classification(
                outcome=outcome, category=category, ambiguous=ambiguous,
                retry_after=_retry_after(exc, scanned) if category == "rate_limit" else None,
                detail=text[:DETAIL_CHARS],
            )
    return Classification(outcome="internal", category="parameter_value",
                          detail=text[:DETAIL_CHARS])


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
        inner = _attr(current, "source")
        current = inner if isinstance(inner, BaseException) else current.__cause__
    return None


def classify_exception(exc: BaseException) -> Classification:
    """Classify an exception raised by a tool; never raises.

    By type (``TimeoutError`` -> transient/timeout, ambiguous; ``ConnectionRefusedError`` ->
    transient; other ``ConnectionError`` s -> transient, ambiguous; ``PermissionError`` ->
    permanent; ``TypeError`` about keywords ->
    internal/parameter_key; validation errors -> internal), then by an HTTP status on the
    exception or its ``response`` (429 and 5xx transient, 401/403/404 permanent), then by its
    message (:func:`classify_text`).

    A 5xx other than 503 is *ambiguous*: the server may have committed the effect before
    it failed (a charge answered ``502 Bad Gateway``), so, like a timeout, it is retried
    only for idempotent tools.  503 Service Unavailable and 429 say the request was not
    handled (RFC 9110 §15.6.4, RFC 6585 §4) and are retried for any tool.

    An exception that cannot be printed (``__str__`` raises or returns a non-string, a
    ``response`` or ``headers`` property raises) is classified by what can be read of it;
    whatever goes wrong inside the classification gives an ``internal`` outcome (never
    retried) rather than an error escaping the tool node.
    """
    try:
        return _classify_exception(exc)
    except Exception:  # the classifier never crashes the graph on a hostile exception
        return Classification(outcome="internal", category="parameter_value",
                              detail=exception_text(exc)[:DETAIL_CHARS])


def _classify_exception(exc: BaseException) -> Classification:
    text = exception_text(exc)
    detail = text[:DETAIL_CHARS]
    validation = _validation_error(exc)
    if validation is not None:
        kinds = {str(e.get("type", "")) for e in validation.errors()}
        key_error = bool(kinds & {"missing", "extra_forbidden", "missing_argument",
                                  "unexpected_keyword_argument"})
        return Classification(outcome="internal",
                              category="parameter_key" if key_error else "parameter_value",
                              detail=detail)
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError)):
        return Classification(outcome="transient", category="timeout", ambiguous=True,
                              detail=detail)
    if isinstance(exc, ConnectionRefusedError):  # nothing was sent: safe to retry
        return Classification(outcome="transient", category="connection", detail=detail)
    if isinstance(exc, ConnectionError):  # reset/aborted after sending: the effect may exist
        return Classification(outcome="transient", category="connection", ambiguous=True,
                              detail=detail)
    if isinstance(exc, PermissionError):
        return Classification(outcome="permanent", category="permission", detail=detail)
    status = _status_code(exc)
    if status is not None:
        if status == 429:
            return Classification(outcome="transient", category="rate_limit",
                                  retry_after=_retry_after(exc, text), detail=detail)
        if status == 408 or status == 504:
            return Classification(outcome="transient", category="timeout", ambiguous=True,
                                  detail=detail)
        if status >= 500:  # the effect may be committed, except for 503 (not handled)
            return Classification(outcome="transient", category="server",
                                  ambiguous=status != 503, detail=detail)
        if status in (401, 403):
            return Classification(outcome="permanent", category="permission", detail=detail)
        if status == 404:
            return Classification(outcome="permanent", category="not_found", detail=detail)
    return classify_text(text, exc=exc)


def classify_result(message: ToolMessage) -> Classification:
    """Classify a ``ToolMessage`` answer.

    ``status="error"`` or an error payload (``{"error": ...}`` as BFCL's environments answer,
    ``Error ...`` text as ToolNode and BFCL's executor write) is classified by its text; any
    other answer is ``success``.
    """
    error = error_text(message)
    return SUCCESS if error is None else classify_text(error)


class ToolPolicy(BaseModel):
    """Per-tool overrides of :class:`RetryController` settings.

    Attributes:
        max_retries: Retries of transient errors for this tool (``None``: the default).
        on_exhausted: ``skip`` or ``finish`` when retries are spent (``None``: the default).
        idempotent: Safe to run twice (a timeout is then retried); ``None``: the default.
        timeout_s: Seconds before a call to this tool counts as timed out.
    """

    model_config = ConfigDict(frozen=True)

    max_retries: int | None = Field(default=None, ge=0)
    on_exhausted: OnExhausted | None = None
    idempotent: bool | None = None
    timeout_s: float | None = Field(default=None, gt=0)


@dataclass
class _Attempts:
    """What happened to one tool call (shared by the sync and async loops)."""

    retries: int = 0
    classes: list[Classification] = field(default_factory=list)


RETRY_KEY = "toolguard_retry"
"""``ToolMessage.response_metadata`` key of the controller's :class:`RetryRecord`."""


class RetryRecord(BaseModel):
    """What happened to one tool call under the controller (in the answer's metadata).

    Attributes:
        outcome: ``success``, ``internal``, ``transient``, ``permanent``, or ``refused``
            (a cap was hit: the call did not run).
        category: The :class:`Classification` category, if any.
        retries: Retries made (attempts - 1).
        policy: ``skip`` or ``finish`` when the retries were spent on an environment
            error (or a cap refused the call: ``finish``), else ``None``.
        reason: Why the run must finish (``policy == "finish"``), else ``""``.
    """

    model_config = ConfigDict(frozen=True)

    outcome: Literal["success", "internal", "transient", "permanent", "refused"]
    category: str | None = None
    retries: int = 0
    policy: OnExhausted | None = None
    reason: str = ""

    @property
    def failed(self) -> bool:
        """The call did not succeed (it counts towards failures in a row)."""
        return self.outcome != "success"


class Tally(BaseModel):
    """The counters of one run (a user turn), read from its answers.

    Attributes:
        run_tool_calls: Calls that ran in this turn (a call refused by a cap did not).
        consecutive_failures: Failed calls in a row at the end of the turn so far (a
            step's parallel calls count in their order in the ``AIMessage``; refused calls
            do not count).
        finish_reason: Why the run must stop (a ``finish`` policy fired, a cap was hit, or
            ``max_consecutive_failures`` calls failed in a row), else ``None``.
        step: Counter increments of the latest step only (``tool_calls``, ``retries``,
            ``internal_errors``, ``environment_errors``, ``skips``, ``finishes``,
            ``refused``), for thread totals.
        step_id: Id of the ``AIMessage`` whose answers ``step`` counts.
    """

    model_config = ConfigDict(frozen=True)

    run_tool_calls: int = 0
    consecutive_failures: int = 0
    finish_reason: str | None = None
    step: dict[str, int] = Field(default_factory=dict)
    step_id: str | None = None

    @property
    def finished(self) -> bool:
        """Whether the run must stop."""
        return self.finish_reason is not None


def retry_record(message: BaseMessage) -> RetryRecord | None:
    """The :class:`RetryRecord` of a controller's answer, or ``None`` for other messages."""
    raw = (message.response_metadata or {}).get(RETRY_KEY) if isinstance(
        message, ToolMessage) else None
    if raw is None:
        return None
    try:
        return raw if isinstance(raw, RetryRecord) else RetryRecord.model_validate(raw)
    except PydanticValidationError:
        return None


def _with_record(message: ToolMessage, record: RetryRecord) -> ToolMessage:
    meta = {**(message.response_metadata or {}), RETRY_KEY: record.model_dump(mode="json")}
    return message.model_copy(update={"response_metadata": meta})


Handler = Callable[[Any], ToolMessage | Command[Any]]
AsyncHandler = Callable[[Any], Awaitable[ToolMessage | Command[Any]]]


class RetryController:
    """Bounded retry -> skip -> finish for tool calls (CRITICTOOL).

    Args:
        max_retries: Retries of a transient error (CRITICTOOL's budget: 3). Must be >= 0.
        initial_delay: First backoff in seconds; retry ``n`` (1-based) waits
            ``min(max_delay, initial_delay * backoff_factor**(n-1) + U(0, jitter))`` seconds
            (tenacity's ``wait_exponential_jitter``), or ``Retry-After`` when larger
            (capped at ``max_delay``).
        backoff_factor: Exponential base, >= 1.
        max_delay: Cap of one wait, in seconds.
        jitter: Upper bound of the uniform jitter added to each wait, in seconds.
        on_exhausted: Default policy when retries are spent: ``skip`` or ``finish``.
        idempotent_tools: Names of tools that are safe to run twice (timeouts are retried).
            A tool is also idempotent when its ``metadata`` says so
            (:func:`~toolguard.specs.declared_traits`: ``{"idempotent": True}``,
            ``{"effects": "read"}``, or the MCP annotations ``idempotentHint`` /
            ``readOnlyHint``); ``tool_policies`` win over both.
        read_only_tools: Names of tools without side effects (also idempotent).
        tool_policies: Per-tool :class:`ToolPolicy`.
        max_tool_calls: Cap on tool calls per run, i.e. per user turn (``None``: no cap).
            Parallel calls of one step count in their order in the ``AIMessage``.
        max_consecutive_failures: Failed calls in a row before the run finishes.
        timeout_s: Default seconds before a tool call counts as timed out (``None``: none);
            the answer says ``tool call timed out after N s``, sync and async.  A
            synchronous tool runs in its own daemon thread (in an async run, on its own
            event loop there), so a timed-out one keeps running there (Python cannot stop
            it; its result is discarded) and nothing waits for it: neither the next call,
            nor ``asyncio.run`` shutting its executor down, nor the interpreter's exit.
            An async tool is cancelled.
        state_key: State key of the thread's totals (see :meth:`tally`).
        sleep: Sleep function (injectable for tests); async code uses ``asyncio.sleep``
            unless ``asleep`` is given.
        asleep: Async sleep function.

    Raises:
        toolguard.errors.ConfigurationError: On an invalid bound (the message states it).
    """

    def __init__(
        self,
        *,
        max_retries: int = 3,
        initial_delay: float = 1.0,
        backoff_factor: float = 2.0,
        max_delay: float = 60.0,
        jitter: float = 1.0,
        on_exhausted: OnExhausted = "skip",
        idempotent_tools: Collection[str] = (),
        read_only_tools: Collection[str] = (),
        tool_policies: Mapping[str, ToolPolicy] | None = None,
        max_tool_calls: int | None = 100,
        max_consecutive_failures: int | None = 5,
        timeout_s: float | None = None,
        state_key: str = "toolguard_controller",
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        if max_retries < 0:
            raise ConfigurationError("max_retries must be >= 0")
        if initial_delay < 0 or max_delay < 0 or jitter < 0:
            raise ConfigurationError("initial_delay, max_delay and jitter must be >= 0 seconds")
        if backoff_factor < 1:
            raise ConfigurationError("backoff_factor must be >= 1")
        if on_exhausted not in ("skip", "finish"):
            raise ConfigurationError("on_exhausted must be 'skip' or 'finish'")
        if max_tool_calls is not None and max_tool_calls < 1:
            raise ConfigurationError("max_tool_calls must be >= 1 or None")
        if max_consecutive_failures is not None and max_consecutive_failures < 1:
            raise ConfigurationError("max_consecutive_failures must be >= 1 or None")
        if timeout_s is not None and timeout_s <= 0:
            raise ConfigurationError("timeout_s must be > 0 seconds or None")
        self.max_retries = max_retries
        self.max_delay = max_delay
        self._wait = wait_exponential_jitter(
            multiplier=initial_delay, max=max_delay, exp_base=backoff_factor, jitter=jitter)
        self.on_exhausted: OnExhausted = on_exhausted
        self.read_only_tools = frozenset(read_only_tools)
        self.idempotent_tools = frozenset(idempotent_tools) | self.read_only_tools
        self.tool_policies = dict(tool_policies or {})
        self.max_tool_calls = max_tool_calls
        self.max_consecutive_failures = max_consecutive_failures
        self.timeout_s = timeout_s
        self.state_key = state_key
        self.sleep = sleep
        self.asleep = asleep or asyncio.sleep

    # ------------------------------------------------------------------ policy helpers
    def _policy(self, name: str) -> ToolPolicy:
        return self.tool_policies.get(name, ToolPolicy())

    def _retries_for(self, name: str) -> int:
        p = self._policy(name).max_retries
        return self.max_retries if p is None else p

    def _idempotent(self, name: str, tool: Any) -> bool:
        p = self._policy(name).idempotent
        if p is not None:
            return p
        if name in self.idempotent_tools:
            return True
        meta = getattr(tool, "metadata", None)  # toolguard's keys, else MCP annotations
        return bool(declared_traits(meta if isinstance(meta, Mapping) else None).get(
            "idempotent"))

    def _timeout_for(self, name: str) -> float | None:
        p = self._policy(name).timeout_s
        return self.timeout_s if p is None else p

    def on_exhausted_for(self, name: str) -> OnExhausted:
        """The skip/finish policy of a tool."""
        return self._policy(name).on_exhausted or self.on_exhausted

    def delay(self, attempt: int, classification: Classification) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
        state.attempt_number = attempt
        wait = float(self._wait(state))
        if classification.retry_after is not None:
            wait = max(wait, min(classification.retry_after, self.max_delay))
        return wait

    def _retryable(self, c: Classification, name: str, tool: Any, attempts: _Attempts) -> bool:
        if c.outcome != "transient" or attempts.retries >= self._retries_for(name):
            return False
        return not c.ambiguous or self._idempotent(name, tool)

    # ------------------------------------------------------------------ pure pieces
    def tally(self, messages: Sequence[BaseMessage]) -> Tally:
        """The run's counters, read from the answers of the current user turn.

        A run is the messages after the latest ``HumanMessage``.  Every answer carrying a
        :class:`RetryRecord` counts: refused or not, failed or not, in the order of the
        calls of its ``AIMessage``.  The run must finish when a ``finish`` policy fired, a
        cap refused a call, or ``max_consecutive_failures`` calls failed in a row.
        ``step`` counts the answers to the latest ``AIMessage`` with tool calls only (add
        them to thread totals once per step; ``step_id`` names the step).

        Answers are matched to calls by position (:func:`answers_by_step`), so a provider
        that reuses call ids (``call_0`` every step) never has one step's answer counted
        for another.
        """
        start = next((i + 1 for i in range(len(messages) - 1, -1, -1)
                      if isinstance(messages[i], HumanMessage)), 0)
        calls = 0
        failures = 0
        reason: str | None = None
        step: dict[str, int] = {}
        step_id: str | None = None
        for m, answers in answers_by_step(messages[start:]):
            step, step_id = {}, m.id
            for tc in m.tool_calls:
                answer = answers.get(str(tc.get("id")))
                record = retry_record(answer) if answer is not None else None
                if record is None:
                    continue
                if record.outcome != "refused":  # a refused call never ran
                    calls += 1
                    failures = failures + 1 if record.failed else 0
                if record.policy == "finish" and reason is None:
                    reason = record.reason or f"'{tc.get('name')}' failed"
                for key, hit in _step_counts(record).items():
                    step[key] = step.get(key, 0) + hit
            if step.get("finishes", 0) > 1:
                step["finishes"] = 1  # parallel calls that finish end one run once
        limit = self.max_consecutive_failures
        if reason is None and limit is not None and failures >= limit:
            reason = f"{limit} tool calls failed in a row"
        return Tally(run_tool_calls=calls, consecutive_failures=failures,
                     finish_reason=reason, step=step, step_id=step_id)

    def _capped(self, request: Any) -> str | None:
        """Why a call must not run (a cap of this run is reached), else ``None``."""
        messages = _messages(request.state)
        tally = self.tally(messages)
        if self.max_tool_calls is not None:
            made = tally.run_tool_calls + _earlier_siblings(messages, request.tool_call)
            if made >= self.max_tool_calls:
                return (f"the tool-call budget of {self.max_tool_calls} calls for this run "
                        "is spent")
        limit = self.max_consecutive_failures
        if limit is not None and tally.consecutive_failures >= limit:
            return f"{limit} tool calls failed in a row"
        return None

    def _outcome_of(self, result: ToolMessage | Command[Any]) -> Classification:
        if isinstance(result, ToolMessage):
            return classify_result(result)
        return SUCCESS  # a Command from the tool is its own business

    def _finish(
        self, request: Any, result: ToolMessage | Command[Any] | None, c: Classification,
        attempts: _Attempts,
    ) -> ToolMessage | Command[Any]:
        """The one answer for the call, with its :class:`RetryRecord`."""
        call = request.tool_call
        name = str(call.get("name", ""))
        call_id = str(call.get("id") or "")
        record = RetryRecord(outcome=c.outcome, category=c.category, retries=attempts.retries)
        if c.outcome == "success" and isinstance(result, Command):
            return _command_with_record(result, call_id, record)
        if c.outcome == "success" and isinstance(result, ToolMessage):
            return _with_record(result, record)
        if c.outcome == "internal":
            text = message_text(result) if isinstance(result, ToolMessage) else c.detail
            message = ToolMessage(
                content=f"{text}\nError category: {CATEGORY_TEXT.get(c.category or '', '')}. "
                "Correct the call (right tool, parameter names and values) and try again.",
                tool_call_id=call_id, name=name, status="error")
            return _with_record(message, record)
        policy = self.on_exhausted_for(name)
        why = _env_reason(c, attempts, self._retries_for(name),
                          self._idempotent(name, request.tool))
        if policy == "finish":
            text = (f"Error: '{name}' failed ({why}). Stop here: do not call more tools; "
                    "tell the user what failed and ask how to proceed.")
        else:
            text = (f"Error: '{name}' failed ({why}). Skip this step and continue with "
                    "the remaining subtasks; tell the user at the end that this step "
                    "could not be done.")
        record = record.model_copy(update={
            "policy": policy, "reason": f"'{name}' failed: {why}" if policy == "finish" else ""})
        return _with_record(ToolMessage(content=text, tool_call_id=call_id, name=name,
                                        status="error"), record)

    def _refuse(self, request: Any, why: str) -> ToolMessage:
        call = request.tool_call
        message = ToolMessage(
            content=f"Not executed: {why}. Stop calling tools; tell the user and ask how to "
                    "proceed.",
            tool_call_id=str(call.get("id") or ""), name=str(call.get("name", "")),
            status="error")
        return _with_record(message, RetryRecord(outcome="refused", policy="finish",
                                                 reason=why))

    # ------------------------------------------------------------------ execution
    def _call(self, handler: Handler, request: Any) -> tuple[Any, Classification]:
        timeout = self._timeout_for(str(request.tool_call.get("name", "")))
        try:
            result = handler(request) if timeout is None else _run_with_timeout(
                handler, request, timeout)
        except GraphBubbleUp:
            raise
        except Exception as exc:  # a tool failure becomes an answer, never a crash
            return None, _failure(exc)
        return result, self._outcome_of(result)

    async def _acall(self, handler: AsyncHandler, request: Any) -> tuple[Any, Classification]:
        timeout = self._timeout_for(str(request.tool_call.get("name", "")))
        try:
            if timeout is None:
                result = await handler(request)
            elif _sync_only(_attr(request, "tool")):
                result = await _arun_in_thread(handler, request, timeout)
            else:
                result = await _await_with_timeout(handler, request, timeout)
        except GraphBubbleUp:
            raise
        except Exception as exc:  # a tool failure becomes an answer, never a crash
            return None, _failure(exc)
        return result, self._outcome_of(result)

    def wrap_tool_call(self, request: Any, handler: Handler) -> ToolMessage | Command[Any]:
        """``ToolNode(wrap_tool_call=...)`` / ``AgentMiddleware.wrap_tool_call`` hook."""
        why = self._capped(request)
        if why is not None:
            return self._refuse(request, why)
        name = str(request.tool_call.get("name", ""))
        attempts = _Attempts()
        while True:
            result, c = self._call(handler, request)
            attempts.classes.append(c)
            if not self._retryable(c, name, request.tool, attempts):
                return self._finish(request, result, c, attempts)
            attempts.retries += 1
            self.sleep(self.delay(attempts.retries, c))

    async def awrap_tool_call(
        self, request: Any, handler: AsyncHandler
    ) -> ToolMessage | Command[Any]:
        """Async twin of :meth:`wrap_tool_call`."""
        why = self._capped(request)
        if why is not None:
            return self._refuse(request, why)
        name = str(request.tool_call.get("name", ""))
        attempts = _Attempts()
        while True:
            result, c = await self._acall(handler, request)
            attempts.classes.append(c)
            if not self._retryable(c, name, request.tool, attempts):
                return self._finish(request, result, c, attempts)
            attempts.retries += 1
            await self.asleep(self.delay(attempts.retries, c))

    # ------------------------------------------------------------------ graph helpers
    def finished(self, state: Any) -> bool:
        """Whether the run must stop (see :meth:`tally`).

        It must when, in this user turn, a ``finish`` policy fired, a cap was hit, or
        ``max_consecutive_failures`` calls failed in a row.
        """
        return self.tally(_messages(state)).finished

    def finish_message(self, reason: str) -> AIMessage:
        """The final message to the user when the run finishes."""
        return AIMessage(
            f"I had to stop: {reason}. The steps before it are done. "
            "How would you like me to proceed?",
            response_metadata={"toolguard": "finish"},
        )

    def counters_update(self, state: Any, tally: Tally | None = None) -> dict[str, Any]:
        """The thread totals after the latest step (under ``state_key``), or ``{}``.

        Totals add each step's :attr:`Tally.step` once (``tallied`` remembers the step);
        ``consecutive_failures``, ``finished`` and ``finish_reason`` describe the current
        run.  Written by one node per step (no reducer needed, no parallel writes).
        """
        tally = tally or self.tally(_messages(state))
        prior = state.get(self.state_key) if isinstance(state, Mapping) else None
        totals: dict[str, Any] = dict(prior or {})
        if tally.step_id is not None and totals.get("tallied") != tally.step_id:
            for key, value in tally.step.items():
                totals[key] = int(totals.get(key, 0)) + value
            totals["tallied"] = tally.step_id
        totals.update(run_tool_calls=tally.run_tool_calls,
                      consecutive_failures=tally.consecutive_failures,
                      finished=tally.finished, finish_reason=tally.finish_reason)
        return {} if totals == dict(prior or {}) else {self.state_key: totals}

    def finish_update(self, state: Any) -> dict[str, Any]:
        """The counter update and, when the run must stop, the finish message.

        ``{}`` when nothing changed and the run goes on.
        """
        tally = self.tally(_messages(state))
        update = self.counters_update(state, tally)
        if tally.finish_reason is not None:
            update["messages"] = [self.finish_message(tally.finish_reason)]
            counters = dict(update.get(self.state_key) or (state.get(self.state_key) or {}))
            update[self.state_key] = counters
        return update


def answers_by_step(
    messages: Sequence[BaseMessage],
) -> list[tuple[AIMessage, dict[str, ToolMessage]]]:
    """Each ``AIMessage`` with tool calls and the answers to its calls, by call id.

    A call is answered by the first ``ToolMessage`` with its id after the ``AIMessage``
    that made it and before an ``AIMessage`` that reuses the id (the rule of
    :class:`toolguard.conversation.Conversation`): ids are never matched across steps.
    """
    steps: list[tuple[AIMessage, dict[str, ToolMessage]]] = []
    open_calls: dict[str, dict[str, ToolMessage]] = {}
    for m in messages:
        if isinstance(m, AIMessage) and m.tool_calls:
            answers: dict[str, ToolMessage] = {}
            steps.append((m, answers))
            for tc in m.tool_calls:
                open_calls[str(tc.get("id"))] = answers
        elif isinstance(m, ToolMessage):
            slot = open_calls.pop(m.tool_call_id, None)
            if slot is not None:
                slot[m.tool_call_id] = m
    return steps


def _messages(state: Any) -> list[BaseMessage]:
    value = state.get("messages") if isinstance(state, Mapping) else getattr(
        state, "messages", None)
    return list(value or [])


def _step_counts(record: RetryRecord) -> dict[str, int]:
    """Thread-total increments of one answer."""
    if record.outcome == "refused":  # it never ran
        return {"refused": 1, "finishes": 1}
    out = {"tool_calls": 1, "retries": record.retries}
    if record.outcome == "internal":
        out["internal_errors"] = 1
    elif record.failed:
        out["environment_errors"] = 1
    if record.policy == "skip":
        out["skips"] = 1
    elif record.policy == "finish":
        out["finishes"] = 1
    return out


def _failure(exc: Exception) -> Classification:
    """Classify a tool exception (never raises, see :func:`classify_exception`).

    An interrupt resumed with an invalid value is re-raised, so it can be answered again
    (as ``ToolNode`` does).
    """
    try:
        invalid_resume = is_invalid_resume(exc)
    except Exception:  # an exception whose attributes cannot be read is no resume error
        invalid_resume = False
    if invalid_resume:
        raise exc
    return classify_exception(exc)


def _earlier_siblings(messages: Sequence[BaseMessage], call: Mapping[str, Any]) -> int:
    """How many calls come before ``call`` in the ``AIMessage`` that made it.

    Parallel calls of one step all see the same state, so the cap counts them by position.
    """
    call_id = call.get("id")
    for m in reversed(messages):
        if isinstance(m, AIMessage) and m.tool_calls:
            ids = [tc.get("id") for tc in m.tool_calls]
            return ids.index(call_id) if call_id in ids else 0
    return 0


def _run_with_timeout(handler: Handler, request: Any, timeout: float) -> Any:
    """Run ``handler(request)`` in a daemon thread; ``TimeoutError`` after ``timeout`` seconds.

    The thread runs with the caller's context variables, so LangGraph's config and
    interrupts work.  Each call gets its own thread, so a hung tool never delays another
    call; a timed-out call keeps running in its thread (Python cannot kill it) and its result
    is discarded.
    """
    ctx = contextvars.copy_context()
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["result"] = ctx.run(handler, request)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="toolguard-tool", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError(_timeout_text(timeout))
    if "error" in box:
        raise box["error"]
    return box["result"]


def _timeout_text(timeout: float) -> str:
    """The message of a call that ran past its timeout (sync and async say the same)."""
    return f"tool call timed out after {timeout:g} s"


async def _await_with_timeout(handler: AsyncHandler, request: Any, seconds: float) -> Any:
    """``await handler(request)``; ``TimeoutError`` naming ``seconds`` when it runs past it.

    A ``TimeoutError`` the tool raises itself is passed on as it is.
    """
    try:
        async with asyncio.timeout(seconds) as scope:
            return await handler(request)
    except TimeoutError:
        if scope.expired():
            raise TimeoutError(_timeout_text(seconds)) from None
        raise


def _sync_only(tool: Any) -> bool:
    """Whether ``tool`` is a LangChain tool without a coroutine (run in a thread when async).

    ``StructuredTool`` / ``Tool`` without ``coroutine``, or a ``BaseTool`` subclass that does
    not override ``_arun``.
    """
    if not isinstance(tool, BaseTool):
        return False
    if isinstance(tool, StructuredTool | Tool):
        return tool.coroutine is None
    return type(tool)._arun is BaseTool._arun


class _DaemonThreadExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each submitted function in its own daemon thread.

    The default executor of the event loop :func:`_arun_in_thread` makes: a timed-out
    synchronous tool keeps running in a daemon thread, which neither the caller's
    ``asyncio.run`` (it shuts down *its* default executor, joining every worker) nor the
    interpreter's exit waits for.  (A ``ThreadPoolExecutor`` by type, as
    ``loop.set_default_executor`` requires; its pool is never used.)
    """

    def submit(self, fn: Callable[..., Any], /, *args: Any,
               **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the awaiting coroutine
                future.set_exception(exc)

        threading.Thread(target=run, name="toolguard-tool", daemon=True).start()
        return future


async def _arun_in_thread(handler: AsyncHandler, request: Any, seconds: float) -> Any:
    """``await handler(request)`` for a synchronous tool, abandoned after ``seconds``.

    The async tool node runs a synchronous tool in the running loop's default executor;
    a hung tool would then keep that executor's worker busy and ``asyncio.run`` would wait
    for it when it shuts the executor down (seconds after the run answered the timeout).
    Here the handler runs on its own event loop in a daemon thread (the caller's context
    variables copied, as :func:`_run_with_timeout` does), whose default executor makes
    daemon threads; the caller awaits the outcome for at most ``seconds``.
    """
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if outcome.done():
            return
        if error is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(result)

    def target() -> None:
        inner = asyncio.new_event_loop()
        inner.set_default_executor(_DaemonThreadExecutor())
        result: Any = None
        error: BaseException | None = None
        try:
            result = inner.run_until_complete(handler(request))
        except BaseException as exc:  # handed to the caller below
            error = exc
        finally:
            inner.close()
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=lambda: ctx.run(target), name="toolguard-tool",
                     daemon=True).start()
    try:
        async with asyncio.timeout(seconds) as scope:
            return await outcome  # cancelled on timeout: a late outcome is dropped
    except TimeoutError:
        if scope.expired():
            raise TimeoutError(_timeout_text(seconds)) from None
        raise  # the tool's own TimeoutError


def _env_reason(c: Classification, attempts: _Attempts, budget: int, idempotent: bool) -> str:
    kind = (c.category or "error").replace("_", " ")
    if c.outcome == "permanent":
        return f"{kind}: {c.detail[:200]}; this is permanent, retrying cannot help"
    if c.ambiguous and not idempotent and attempts.retries == 0:
        return (f"{kind}: {c.detail[:200]}; not retried because the tool is not idempotent "
                "and the action may already have happened")
    return f"{kind} after {attempts.retries + 1} attempts (retry budget {budget}): {c.detail[:200]}"


def _command_with_record(result: Command[Any], call_id: str,
                         record: RetryRecord) -> Command[Any]:
    """A tool's own ``Command`` with the record on the ``ToolMessage`` that answers the call."""
    body = result.update if isinstance(result.update, dict) else None
    if body is None or not isinstance(body.get("messages"), list):
        return result
    messages = [_with_record(m, record) if isinstance(m, ToolMessage) and m.tool_call_id
                == call_id else m for m in body["messages"]]
    return Command(graph=result.graph, update={**body, "messages": messages},
                   resume=result.resume, goto=result.goto)
