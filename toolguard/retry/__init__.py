"""Bounded retry -> skip -> finish for tool calls (CRITICTOOL), in parts.

- :mod:`~toolguard.retry.classify`: what a failure is (the classification table,
  :func:`classify_exception`, :func:`classify_result`, :class:`Classification`);
- :mod:`~toolguard.retry.policy`: how it is retried (:class:`RetryPolicy`, per-tool
  :class:`ToolPolicy`, the delay formula);
- :mod:`~toolguard.retry.controller`: :class:`RetryController`, the ``wrap_tool_call``
  hooks and the run's tally;
- :mod:`~toolguard.retry.records`: what each answer carries (:class:`RetryRecord`) and
  the run's counters (:class:`Tally`);
- :mod:`~toolguard.retry.timeout`: tool calls with a deadline, sync and async.

Example:
    >>> from toolguard.retry import RetryController, RetryPolicy, ToolPolicy
    >>> controller = RetryController(RetryPolicy(
    ...     max_retries=2, on_failure="finish",
    ...     tool_policies={"get_quote": ToolPolicy(timeout_s=5, idempotent=True)}))
    >>> controller.policy.retries_for("get_quote"), controller.policy.on_failure_for("x")
    (2, 'finish')
"""

from toolguard.retry.classify import (
    CATEGORY_TEXT,
    DETAIL_CHARS,
    SCAN_CHARS,
    SUCCESS,
    Classification,
    EnvironmentKind,
    ErrorClass,
    InternalCategory,
    Outcome,
    classify_exception,
    classify_result,
    classify_text,
    exception_text,
)
from toolguard.retry.controller import AsyncHandler, Handler, RetryController
from toolguard.retry.policy import OnFailure, RetryPolicy, ToolPolicy
from toolguard.retry.records import RETRY_KEY, RetryRecord, Tally, retry_record

__all__ = [
    "CATEGORY_TEXT",
    "DETAIL_CHARS",
    "RETRY_KEY",
    "SCAN_CHARS",
    "SUCCESS",
    "AsyncHandler",
    "Classification",
    "EnvironmentKind",
    "ErrorClass",
    "Handler",
    "InternalCategory",
    "OnFailure",
    "Outcome",
    "RetryController",
    "RetryPolicy",
    "RetryRecord",
    "Tally",
    "ToolPolicy",
    "classify_exception",
    "classify_result",
    "classify_text",
    "exception_text",
    "retry_record",
]
