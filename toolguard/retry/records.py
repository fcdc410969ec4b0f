"""What the controller writes and reads back: :class:`RetryRecord` per answer, :class:`Tally`.

The controller writes no state from inside the tool node: each answer carries what happened
to its call in ``response_metadata[RETRY_KEY]``, and a run's counters are read back from the
turn's answers (:meth:`~toolguard.retry.RetryController.tally`).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from langchain_core.messages import BaseMessage, ToolMessage
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from toolguard.retry.policy import OnFailure

__all__ = ["RETRY_KEY", "RetryRecord", "Tally", "retry_record", "with_record"]

RETRY_KEY: Final = "toolguard_retry"
"""``ToolMessage.response_metadata`` key of the controller's :class:`RetryRecord`."""


class RetryRecord(BaseModel):
    """What happened to one tool call under the controller (in the answer's metadata).

    Attributes:
        outcome: ``success``, ``internal``, ``transient``, ``permanent``, or ``refused``
            (a cap was hit: the call did not run).
        category: The :class:`~toolguard.retry.Classification` category, if any.
        retries: Retries made (attempts - 1).
        policy: ``skip`` or ``finish`` when the retries were spent on an environment
            error (or a cap refused the call: ``finish``), else ``None``.
        reason: Why the run must finish (``policy == "finish"``), else ``""``.
    """

    model_config = ConfigDict(frozen=True)

    outcome: Literal["success", "internal", "transient", "permanent", "refused"]
    category: str | None = None
    retries: int = 0
    policy: OnFailure | None = None
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


def with_record(message: ToolMessage, record: RetryRecord) -> ToolMessage:
    """A copy of ``message`` carrying ``record`` under :data:`RETRY_KEY`."""
    meta = {**(message.response_metadata or {}), RETRY_KEY: record.model_dump(mode="json")}
    return message.model_copy(update={"response_metadata": meta})


def command_with_record(result: Command[Any], call_id: str,
                        record: RetryRecord) -> Command[Any]:
    """A tool's own ``Command`` with the record on the ``ToolMessage`` that answers the call."""
    body = result.update if isinstance(result.update, dict) else None
    if body is None or not isinstance(body.get("messages"), list):
        return result
    messages = [with_record(m, record) if isinstance(m, ToolMessage) and m.tool_call_id
                == call_id else m for m in body["messages"]]
    return Command(graph=result.graph, update={**body, "messages": messages},
                   resume=result.resume, goto=result.goto)
