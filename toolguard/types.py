"""Typed records that cross module boundaries: actions, hallucination types, verdicts.

The taxonomy follows RelyToolBench (Xu et al., "Reducing Tool Hallucination via
Reliability Alignment", 2025): a tool call can be hallucinated in its *type*
(fabricated or irrelevant tool), its *timing* (an unnecessary repeat), its
*format* (arguments that break the tool's schema) or its *content* (argument
values not grounded in the conversation).  Indecisive actions are first-class:
``ask_user`` is the paper's TalkToUser, ``change_tools`` its ChangeTools.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

MAX_REASON_CHARS = 4000
"""Reasons longer than this are cut: feedback must stay bounded whatever the model sent."""
MAX_DETAIL_CHARS = 1000


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"

def _clipped(limit: int) -> AfterValidator:
    """A field validator that cuts a string (``None`` passes) to ``limit`` characters."""
    return AfterValidator(lambda v: None if v is None else clip(v, limit))


Action = Literal["allow", "block", "ask_user", "change_tools"]
"""What happens to a proposed tool call.

- ``allow``: the call goes on to the tool.
- ``block``: the call never reaches the tool; the model gets actionable feedback.
- ``ask_user``: information only the user can give is missing (RelyToolBench's TalkToUser).
- ``change_tools``: no available tool fits the request (RelyToolBench's ChangeTools).
"""

HallucinationType = Literal["type", "timing", "format", "content"]
"""RelyToolBench's four tool-hallucination types."""

ACTIONS: tuple[Action, ...] = get_args(Action)
HALLUCINATION_TYPES: tuple[HallucinationType, ...] = get_args(HallucinationType)


class Evidence(BaseModel):
    """One observation a detector based its decision on.

    Attributes:
        detector: Name of the detector that produced it (``"type"``, ``"format"``, ...).
        code: Machine-readable label, e.g. ``"unknown_tool"``, ``"missing_required"``,
            ``"ungrounded_value"``; BFCL's checker labels where one exists.
        parameter: The argument concerned, as a JSON path (``"location"``, ``"items[0].id"``),
            or ``None`` when the evidence is about the call as a whole.
        value: The offending value (truncated to 200 characters when it is a long string).
        detail: Human-readable explanation.
        score: A similarity or confidence in ``[0, 1]`` where the detector computes one.
    """

    model_config = ConfigDict(frozen=True)

    detector: str
    code: str
    detail: Annotated[str, _clipped(MAX_DETAIL_CHARS)]
    parameter: Annotated[str | None, _clipped(200)] = None
    value: Any = None
    score: float | None = None


class Verdict(BaseModel):
    """The guard's decision on one proposed tool call.

    Attributes:
        tool_call_id: The ``id`` of the tool call (``None`` if the model gave none).
        tool_name: The tool the model asked for, as written by the model.
        action: One of :data:`Action`.
        hallucination: One of :data:`HallucinationType` (RelyToolBench's taxonomy, what the
            papers' metrics count), or ``None`` for a clean call or a verdict of another kind.
            ``ask_user``/``change_tools`` may carry ``None`` when the call is not
            hallucinated but the conditions are incomplete.
        kind: The kind of the detector that decided (any registered kind:
            :data:`toolguard.detectors.DETECTORS`, e.g. ``"provenance"``); defaults to
            ``hallucination``.  ``None`` for a call no detector objected to.
        reason: Feedback the model can act on (sent back in the ``ToolMessage``).
        evidence: What the decision rests on.
        question: For ``ask_user``: the clarification question for the user.
        replay: For ``timing``: the earlier, successful result of the identical call,
            returned instead of executing the tool again.
        confirm: For ``ask_user``: nothing is missing and the user is asked to approve
            the call as proposed (a confirmation, not a question for a value); the
            confirmations of one step are asked together
            (:func:`toolguard.steps.plan_step`).
    """

    model_config = ConfigDict(frozen=True)

    tool_call_id: str | None
    tool_name: str
    action: Action
    hallucination: HallucinationType | None = None
    kind: str | None = None
    reason: Annotated[str, _clipped(MAX_REASON_CHARS)] = ""
    evidence: tuple[Evidence, ...] = Field(default_factory=tuple)
    question: Annotated[str | None, _clipped(MAX_DETAIL_CHARS)] = None
    replay: str | None = None
    confirm: bool = False

    @model_validator(mode="before")
    @classmethod
    def _kind_defaults_to_hallucination(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") is None and data.get("hallucination"):
            return {**data, "kind": data["hallucination"]}
        return data

    @classmethod
    def on(cls, call: Any, action: Action, *, hallucination: HallucinationType | None = None,
           kind: str | None = None, reason: str = "", evidence: tuple[Evidence, ...] = (),
           question: str | None = None, replay: str | None = None,
           confirm: bool = False) -> Verdict:
        """The verdict on ``call`` (any object with ``id`` and ``name``: a proposed call)."""
        return cls(tool_call_id=call.id, tool_name=call.name, action=action,
                   hallucination=hallucination, kind=kind, reason=reason, evidence=evidence,
                   question=question, replay=replay, confirm=confirm)

    @property
    def allowed(self) -> bool:
        """``True`` when the call may go on to the tool."""
        return self.action == "allow"

    def feedback(self) -> str:
        """Text for the ``ToolMessage`` that answers a call that was not allowed."""
        if self.action == "allow":
            return ""
        if self.replay is not None:
            return f"{self.reason}\nEarlier result:\n{self.replay}"
        return self.reason
