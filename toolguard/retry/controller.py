"""Bounded retry -> skip -> finish for tool calls (CRITICTOOL): :class:`RetryController`.

Per tool call:

1. Caps first: when ``max_tool_calls`` calls were made in this run, or
   ``max_consecutive_failures`` failed in a row, the call is not executed and the run
   finishes (the user is told and asked how to proceed).
2. The tool runs (with the policy's timeout, :mod:`toolguard.retry.timeout`); its outcome
   is classified (:mod:`toolguard.retry.classify`): ``success``; ``internal`` (one
   ``ToolMessage`` naming the CRITICTOOL category, never retried); ``transient`` (retried
   per the :class:`~toolguard.retry.RetryPolicy`, honouring ``Retry-After``; an ambiguous
   failure only for an idempotent tool); ``permanent`` (never retried).
3. When retries are spent (or the error is permanent), the tool's ``on_failure`` applies:
   ``skip`` or ``finish``.

Every call gets exactly one ``ToolMessage`` carrying a
:class:`~toolguard.retry.RetryRecord`.  A *run* is one user turn; its counters are read
from the turn's answers (:meth:`RetryController.tally`, through
:class:`~toolguard.conversation.Conversation`), so checkpoints, interrupts and restarts
keep them and parallel calls never race.  A single node after the tools applies the tally
(:class:`~toolguard.middleware.RetryControllerMiddleware`'s ``before_model``,
:class:`~toolguard.nodes.RetryGateNode`) and ends the run when it must finish.

The sync and async hooks drive one plan (:meth:`RetryController._plan`, a generator that
yields "run the tool" and "sleep" steps and receives what happened), so the policy is
written once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.errors import GraphBubbleUp, is_invalid_resume
from langgraph.types import Command

from toolguard._plan import Plan, adrive, drive
from toolguard.conversation import CallRecord, Conversation, ConversationReader, message_text
from toolguard.errors import ConfigurationError
from toolguard.retry.classify import (
    CATEGORY_TEXT,
    SUCCESS,
    Classification,
    classify_exception,
    classify_result,
)
from toolguard.retry.policy import RetryPolicy
from toolguard.retry.records import (
    RetryRecord,
    Tally,
    command_with_record,
    retry_record,
    with_record,
)
from toolguard.retry.timeout import arun_with_timeout, run_with_timeout

__all__ = ["AsyncHandler", "Handler", "RetryController"]

Answer: TypeAlias = ToolMessage | Command[Any]
Handler: TypeAlias = Callable[[Any], Answer]
"""``handler(request)``: runs the tool call (``ToolNode``'s ``execute``)."""
AsyncHandler: TypeAlias = Callable[[Any], Awaitable[Answer]]
"""``await handler(request)``: the async twin."""


@dataclass(frozen=True, slots=True)
class _Run:
    """Plan step: run the tool once (``timeout_s`` seconds, or no deadline).

    Its result is the tool's answer, or the exception the tool raised (a tool failure is an
    answer, never a crash); LangGraph's control signals propagate.
    """

    handler: Callable[[Any], Any]
    request: Any
    timeout_s: float | None

    def run(self) -> _Reply:
        try:
            answer: Answer = run_with_timeout(self.handler, self.request, self.timeout_s)
        except GraphBubbleUp:
            raise
        except Exception as exc:  # a tool failure becomes an answer, never a crash
            return exc
        return answer

    async def arun(self) -> _Reply:
        try:
            answer: Answer = await arun_with_timeout(self.handler, self.request, self.timeout_s,
                                                     getattr(self.request, "tool", None))
        except GraphBubbleUp:
            raise
        except Exception as exc:  # a tool failure becomes an answer, never a crash
            return exc
        return answer


@dataclass(frozen=True, slots=True)
class _Sleep:
    """Plan step: wait ``seconds`` before the next attempt (the controller's sleep functions)."""

    seconds: float
    sleep: Callable[[float], None]
    asleep: Callable[[float], Awaitable[None]]

    def run(self) -> None:
        self.sleep(self.seconds)

    async def arun(self) -> None:
        await self.asleep(self.seconds)


_Reply: TypeAlias = Answer | Exception | None
"""What a step gives back to the plan: the tool's answer or the exception it raised
(``None`` after a sleep)."""


class RetryController:
    """Bounded retry -> skip -> finish for tool calls (CRITICTOOL).

    Use its hooks as ``ToolNode(wrap_tool_call=..., awrap_tool_call=...)``, or through
    :class:`~toolguard.middleware.RetryControllerMiddleware` in ``create_agent``.

    Args:
        policy: How failed calls are retried and what happens when they cannot be
            (:class:`~toolguard.retry.RetryPolicy`; default ``RetryPolicy()``: 3 retries,
            1, 2, 4 s ±25 %, then skip).
        max_tool_calls: Cap on tool calls per run, i.e. per user turn, >= 1 (``None``: no
            cap).  Parallel calls of one step count in their order in the ``AIMessage``.
        max_consecutive_failures: Failed calls in a row before the run finishes, >= 1
            (``None``: no limit).
        state_key: State key of the thread's totals (see :meth:`counters_update`).
        sleep: Sleep function, called with seconds (injectable for tests).
        asleep: Async sleep function (default ``asyncio.sleep``); the async hook never
            calls ``sleep``.

    Raises:
        toolguard.errors.ConfigurationError: ``policy`` is not a ``RetryPolicy``, a cap
            out of its bounds (the message states it), an empty ``state_key``, or a sleep
            function that is not callable.
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        *,
        max_tool_calls: int | None = 100,
        max_consecutive_failures: int | None = 5,
        state_key: str = "toolguard_controller",
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise ConfigurationError(
                f"policy must be a RetryPolicy, got {type(policy).__name__} (write "
                "RetryController(RetryPolicy(max_retries=..., on_failure=...)))")
        for name, cap in (("max_tool_calls", max_tool_calls),
                          ("max_consecutive_failures", max_consecutive_failures)):
            if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool)
                                    or cap < 1):
                raise ConfigurationError(f"{name} must be >= 1 or None, got {cap!r}")
        if not isinstance(state_key, str) or not state_key:
            raise ConfigurationError("state_key must be a non-empty string")
        if not callable(sleep) or (asleep is not None and not callable(asleep)):
            raise ConfigurationError("sleep and asleep must be callables taking seconds")
        self.policy = policy or RetryPolicy()
        self.max_tool_calls = max_tool_calls
        self.max_consecutive_failures = max_consecutive_failures
        self.state_key = state_key
        self.sleep = sleep
        self.asleep = asleep or asyncio.sleep
        self._reader = ConversationReader()

    # ------------------------------------------------------------------ hooks (drivers)
    def wrap_tool_call(self, request: Any, handler: Handler) -> Answer:
        """``ToolNode(wrap_tool_call=...)`` / ``AgentMiddleware.wrap_tool_call`` hook.

        Returns:
            The call's one answer, with its :class:`~toolguard.retry.RetryRecord`.

        Raises:
            GraphBubbleUp: LangGraph's control signals (an interrupt) from the tool.
            Exception: A tool's invalid-resume error (re-raised so it can be answered
                again, as ``ToolNode`` does).
        """
        return drive(self._plan(request, handler))

    async def awrap_tool_call(self, request: Any, handler: AsyncHandler) -> Answer:
        """Async twin of :meth:`wrap_tool_call` (sleeps with ``asleep``)."""
        return await adrive(self._plan(request, handler))

    # ------------------------------------------------------------------ the plan (sans-IO)
    def _plan(self, request: Any, handler: Callable[[Any], Any]) -> Plan[Answer]:
        """One call, as steps: yields :class:`_Run` / :class:`_Sleep`, returns the answer."""
        why = self._capped(request)
        if why is not None:
            return self._refuse(request, why)
        name = str(request.tool_call.get("name", ""))
        tool = getattr(request, "tool", None)
        retries = 0
        while True:
            reply = yield _Run(handler, request, self.policy.timeout_for(name))
            result, c = _settled(reply)
            if not self._retryable(c, name, tool, retries):
                return self._answer(request, result, c, retries)
            yield _Sleep(self.policy.delay(retries, retry_after=c.retry_after), self.sleep,
                         self.asleep)
            retries += 1

    def _retryable(self, c: Classification, name: str, tool: Any, retries: int) -> bool:
        if c.outcome != "transient" or retries >= self.policy.retries_for(name):
            return False
        return not c.ambiguous or self.policy.idempotent_for(name, tool)

    def _answer(self, request: Any, result: Answer | None, c: Classification,
                retries: int) -> Answer:
        """The one answer for the call, with its :class:`RetryRecord`."""
        call = request.tool_call
        name = str(call.get("name", ""))
        call_id = str(call.get("id") or "")
        record = RetryRecord(outcome=c.outcome, category=c.category, retries=retries)
        if c.outcome == "success" and isinstance(result, Command):
            return command_with_record(result, call_id, record)
        if c.outcome == "success" and isinstance(result, ToolMessage):
            return with_record(result, record)
        if c.outcome == "internal":
            text = message_text(result) if isinstance(result, ToolMessage) else c.detail
            message = ToolMessage(
                content=f"{text}\nError category: {CATEGORY_TEXT.get(c.category or '', '')}. "
                "Correct the call (right tool, parameter names and values) and try again.",
                tool_call_id=call_id, name=name, status="error")
            return with_record(message, record)
        policy = self.policy.on_failure_for(name)
        why = _env_reason(c, retries, self.policy.retries_for(name),
                          self.policy.idempotent_for(name, getattr(request, "tool", None)))
        if policy == "finish":
            text = (f"Error: '{name}' failed ({why}). Stop here: do not call more tools; "
                    "tell the user what failed and ask how to proceed.")
        else:
            text = (f"Error: '{name}' failed ({why}). Skip this step and continue with "
                    "the remaining subtasks; tell the user at the end that this step "
                    "could not be done.")
        record = record.model_copy(update={
            "policy": policy, "reason": f"'{name}' failed: {why}" if policy == "finish" else ""})
        return with_record(ToolMessage(content=text, tool_call_id=call_id, name=name,
                                       status="error"), record)

    def _refuse(self, request: Any, why: str) -> ToolMessage:
        call = request.tool_call
        message = ToolMessage(
            content=f"Not executed: {why}. Stop calling tools; tell the user and ask how to "
                    "proceed.",
            tool_call_id=str(call.get("id") or ""), name=str(call.get("name", "")),
            status="error")
        return with_record(message, RetryRecord(outcome="refused", policy="finish",
                                                reason=why))

    def _capped(self, request: Any) -> str | None:
        """Why a call must not run (a cap of this run is reached), else ``None``."""
        conv = self._read(_messages(request.state))
        tally = self.tally(conv)
        if self.max_tool_calls is not None:
            made = tally.run_tool_calls + _earlier_siblings(conv, request.tool_call)
            if made >= self.max_tool_calls:
                return (f"the tool-call budget of {self.max_tool_calls} calls for this run "
                        "is spent")
        limit = self.max_consecutive_failures
        if limit is not None and tally.consecutive_failures >= limit:
            return f"{limit} tool calls failed in a row"
        return None

    # ------------------------------------------------------------------ reading the run
    def _read(self, messages: Sequence[BaseMessage] | Conversation) -> Conversation:
        if isinstance(messages, Conversation):
            return messages
        return self._reader.read([m for m in messages if isinstance(m, BaseMessage)])

    def tally(self, messages: Sequence[BaseMessage] | Conversation) -> Tally:
        """The run's counters, read from the answers of the current user turn.

        A run is the messages after the latest ``HumanMessage``.  Every answer carrying a
        :class:`RetryRecord` counts: refused or not, failed or not, in the order of the
        calls of its ``AIMessage``.  The run must finish when a ``finish`` policy fired, a
        cap refused a call, or ``max_consecutive_failures`` calls failed in a row.
        ``step`` counts the answers to the latest ``AIMessage`` with tool calls only (add
        them to thread totals once per step; ``step_id`` names the step).

        Calls and answers are matched by :class:`~toolguard.conversation.Conversation`
        (an answer belongs to the latest call with its id before it), so a provider that
        reuses call ids (``call_0`` every step) never has one step's answer counted for
        another.
        """
        conv = self._read(messages)
        calls = 0
        failures = 0
        reason: str | None = None
        step: dict[str, int] = {}
        step_id: str | None = None
        for ai, records in _run_steps(conv):
            step, step_id = {}, ai.id
            for call in records:
                answer = conv.messages[call.answer] if call.answer is not None else None
                record = retry_record(answer) if answer is not None else None
                if record is None:
                    continue
                if record.outcome != "refused":  # a refused call never ran
                    calls += 1
                    failures = failures + 1 if record.failed else 0
                if record.policy == "finish" and reason is None:
                    reason = record.reason or f"'{call.name}' failed"
                for key, hit in _step_counts(record).items():
                    step[key] = step.get(key, 0) + hit
            if step.get("finishes", 0) > 1:
                step["finishes"] = 1  # parallel calls that finish end one run once
        limit = self.max_consecutive_failures
        if reason is None and limit is not None and failures >= limit:
            reason = f"{limit} tool calls failed in a row"
        return Tally(run_tool_calls=calls, consecutive_failures=failures,
                     finish_reason=reason, step=step, step_id=step_id)

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


# ---------------------------------------------------------------------------- helpers
def _messages(state: Any) -> list[BaseMessage]:
    value = state.get("messages") if isinstance(state, Mapping) else getattr(
        state, "messages", None)
    return list(value or [])


def _settled(reply: _Reply) -> tuple[Answer | None, Classification]:
    """The tool's answer (``None`` when it raised) and its class."""
    if isinstance(reply, Exception):
        return None, _failure(reply)
    if isinstance(reply, ToolMessage):
        return reply, classify_result(reply)
    return reply, SUCCESS  # a Command from the tool is its own business


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


def _run_steps(conv: Conversation) -> list[tuple[AIMessage, list[CallRecord]]]:
    """Each ``AIMessage`` with tool calls after the latest user message, with its calls.

    Only a message's ``tool_calls`` count (its ``invalid_tool_calls`` never reach a tool).
    """
    start = -1 if conv.last_user is None else conv.last_user
    by_position: dict[int, list[CallRecord]] = {}
    for call in reversed(conv.calls):  # calls are in message order: stop at the user
        if call.position <= start:
            break
        by_position.setdefault(call.position, []).append(call)
    steps: list[tuple[AIMessage, list[CallRecord]]] = []
    for pos in sorted(by_position):
        ai = conv.messages[pos]
        if isinstance(ai, AIMessage) and ai.tool_calls:
            steps.append((ai, by_position[pos][::-1][:len(ai.tool_calls)]))
    return steps


def _earlier_siblings(conv: Conversation, call: Mapping[str, Any]) -> int:
    """How many calls come before ``call`` in the latest ``AIMessage`` with tool calls.

    Parallel calls of one step all see the same state, so the cap counts them by position.
    """
    for record in reversed(conv.calls):
        ai = conv.messages[record.position]
        if isinstance(ai, AIMessage) and ai.tool_calls:
            ids = [tc.get("id") for tc in ai.tool_calls]
            call_id = call.get("id")
            return ids.index(call_id) if call_id in ids else 0
    return 0


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


def _env_reason(c: Classification, retries: int, budget: int, idempotent: bool) -> str:
    """Why an environment error ended the call, for its answer."""
    kind = (c.category or "error").replace("_", " ")
    if c.outcome == "permanent":
        return f"{kind}: {c.detail[:200]}; this is permanent, retrying cannot help"
    if c.ambiguous and not idempotent and retries == 0:
        return (f"{kind}: {c.detail[:200]}; not retried because the tool is not idempotent "
                "and the action may already have happened")
    return f"{kind} after {retries + 1} attempts (retry budget {budget}): {c.detail[:200]}"
