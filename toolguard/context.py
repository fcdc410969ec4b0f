"""What the detectors look at: the proposed calls and the conversation before them.

:func:`build_context` turns a LangChain message list ending with the ``AIMessage``
whose tool calls are checked into a :class:`CheckContext`, once per check, so every
detector reads the same pre-computed view (user text, earlier tool calls and results).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from toolguard.specs import ToolSpec

MAX_ARGS_CHARS = 4_000_000
"""Arguments whose JSON is longer than this (characters) are not parsed; they are a format error."""


@dataclass(frozen=True, slots=True)
class ProposedCall:
    """One tool call proposed by the model.

    Attributes:
        id: The tool call id (``None`` if the provider gave none).
        name: The tool name as written by the model.
        args: Parsed arguments, or ``None`` if they could not be parsed.
        raw_args: The raw arguments string for invalid tool calls, else ``None``.
        parse_error: Why the arguments could not be parsed, else ``None``.
        index: Position among the message's calls (0-based).
    """

    id: str | None
    name: str
    args: dict[str, Any] | None
    raw_args: str | None = None
    parse_error: str | None = None
    index: int = 0


@dataclass(frozen=True, slots=True)
class PriorCall:
    """A tool call earlier in the conversation and the result it got.

    Attributes:
        name: Tool name.
        key: Canonical JSON of the arguments (see :func:`canonical_args`), or ``None``.
        result: The content of the answering ``ToolMessage`` as text, or ``None`` if unanswered.
        ok: ``True`` if the answer came back successfully (status ``success`` and no error payload).
        position: Index of the ``AIMessage`` that made the call, in the message list.
        refused: ``True`` if toolguard answered the call instead of the tool (it never ran).
    """

    name: str
    key: str | None
    result: str | None
    ok: bool
    position: int
    refused: bool = False


@dataclass(slots=True)
class CheckContext:
    """Everything detectors need for one check.

    Attributes:
        specs: Available tools by name.
        calls: The proposed calls of the final ``AIMessage``, in order.
        user_texts: Texts of user (and system) messages, oldest first.
        tool_texts: Contents of earlier ``ToolMessage``s, oldest first.
        prior_calls: Earlier tool calls with their results, oldest first.
        request: The latest user message text ("" if none).
        results_since_request: ``ToolMessage`` s after the latest user message (0 on the
            first tool step of a turn).
        user_turns: Number of user (``HumanMessage``) messages.
        extra_grounding: Values grounded by other components (e.g. KG resolution).
    """

    specs: dict[str, ToolSpec]
    calls: list[ProposedCall]
    user_texts: list[str] = field(default_factory=list)
    tool_texts: list[str] = field(default_factory=list)
    prior_calls: list[PriorCall] = field(default_factory=list)
    request: str = ""
    results_since_request: int = 0
    user_turns: int = 0
    extra_grounding: list[str] = field(default_factory=list)
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def grounding_texts(self) -> list[str]:
        """User/system texts, tool results and extra grounding, in that order."""
        return [*self.user_texts, *self.tool_texts, *self.extra_grounding]

    def memo(self, key: str, factory: Any) -> Any:
        """Compute ``factory()`` once per context (shared by detectors)."""
        if key not in self._cache:
            self._cache[key] = factory()
        return self._cache[key]


def message_text(message: BaseMessage) -> str:
    """Text of a message; content blocks are joined, non-text blocks skipped."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(parts)


def canonical_args(args: Any) -> str:
    """Canonical JSON of arguments: sorted keys, integral floats as ints, no spaces.

    Two calls with canonically equal arguments are "identical inputs" for the timing detector.
    """
    return json.dumps(_canon(args), sort_keys=True, separators=(",", ":"), default=str)


def _canon(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return int(value)
        return value
    if isinstance(value, Mapping):
        return {str(k): _canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    return value


def error_text(message: ToolMessage) -> str | None:
    """The error a tool answer reports, or ``None`` for a successful answer.

    An answer fails when its ``status`` is ``"error"``, its text starts with ``Error``
    (ToolNode's and BFCL's ``"Error during execution: ..."``) — both give the whole text —
    or it is a JSON object with a non-empty ``"error"`` key (BFCL's environments answer
    ``{"error": "..."}``), which gives that value.
    """
    text = message_text(message).strip()
    if message.status == "error" or text.startswith(("Error", "error:")):
        return text
    if text.startswith("{") and '"error"' in text[:200]:
        try:
            payload = json.loads(text)
        except ValueError:
            return None
        if isinstance(payload, dict) and payload.get("error"):
            return str(payload["error"])
    return None


def is_error_result(message: ToolMessage) -> bool:
    """Whether a tool answer reports failure (see :func:`error_text`)."""
    return error_text(message) is not None


def _refused_by_guard(message: ToolMessage) -> bool:
    artifact = message.artifact
    return isinstance(artifact, Mapping) and "toolguard" in artifact


def proposed_calls(message: AIMessage) -> list[ProposedCall]:
    """The calls of an ``AIMessage``: ``tool_calls`` in order, then ``invalid_tool_calls``.

    ``args`` given as a string (some providers and hand-built messages) are parsed as JSON;
    arguments that cannot be parsed, or are longer than :data:`MAX_ARGS_CHARS`, get a
    ``parse_error``.
    """
    out: list[ProposedCall] = []
    for tc in message.tool_calls:
        args: Any = tc.get("args")
        raw: str | None = None
        error: str | None = None
        if isinstance(args, str):
            raw = args
            args, error = parse_args(args)
        elif args is None:
            args = {}
        elif not isinstance(args, dict):
            error = f"arguments must be a JSON object, got {type(args).__name__}"
            args = None
        elif (size := _json_size(args)) > MAX_ARGS_CHARS:
            error = f"arguments are {size} characters long as JSON (limit {MAX_ARGS_CHARS})"
            args = None
        out.append(
            ProposedCall(
                id=tc.get("id"),
                name=str(tc.get("name") or ""),
                args=args,
                raw_args=raw,
                parse_error=error,
                index=len(out),
            )
        )
    for itc in message.invalid_tool_calls:
        raw = itc.get("args")
        args, error = parse_args(raw or "")
        if error is None:
            error = str(itc.get("error") or "the provider could not parse these arguments")
        out.append(
            ProposedCall(
                id=itc.get("id"),
                name=str(itc.get("name") or ""),
                args=None,
                raw_args=raw,
                parse_error=error,
                index=len(out),
            )
        )
    return out


def _json_size(args: dict[str, Any]) -> int:
    try:
        return len(json.dumps(args, default=str))
    except (TypeError, ValueError, RecursionError):
        return MAX_ARGS_CHARS + 1


def parse_args(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """Parse a raw arguments string into a dict, or explain why it cannot be.

    Returns:
        ``(args, None)`` on success, ``(None, reason)`` otherwise.
    """
    if len(raw) > MAX_ARGS_CHARS:
        return None, f"arguments are {len(raw)} characters long (limit {MAX_ARGS_CHARS})"
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return None, f"arguments are not valid JSON: {exc}"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def build_context(
    messages: Sequence[AnyMessage | BaseMessage],
    specs: Mapping[str, ToolSpec],
    *,
    extra_grounding: Sequence[str] = (),
) -> CheckContext:
    """Build the :class:`CheckContext` for the last message.

    Args:
        messages: LangChain messages, the last one an ``AIMessage`` with tool calls.
        specs: Available tools by name.
        extra_grounding: Texts whose values count as grounded (e.g. KG facts).

    Raises:
        ValueError: If ``messages`` is empty or does not end with an ``AIMessage``.
    """
    if not messages:
        raise ValueError("messages is empty; expected a list ending with an AIMessage")
    last = messages[-1]
    if not isinstance(last, AIMessage):
        raise ValueError(
            f"messages must end with the AIMessage whose tool calls are checked, "
            f"got {type(last).__name__}"
        )
    history = messages[:-1]
    user_texts: list[str] = []
    tool_texts: list[str] = []
    request = ""
    since_request = 0
    turns = 0
    answers: dict[str, ToolMessage] = {}
    for m in history:
        if isinstance(m, ToolMessage):
            answers[m.tool_call_id] = m
    prior: list[PriorCall] = []
    for pos, m in enumerate(history):
        if isinstance(m, (HumanMessage, SystemMessage)):
            text = message_text(m)
            user_texts.append(text)
            if isinstance(m, HumanMessage):
                request = text
                since_request = 0
                turns += 1
        elif isinstance(m, ToolMessage):
            tool_texts.append(message_text(m))
            since_request += 1
        elif isinstance(m, AIMessage):
            for call in proposed_calls(m):
                answer = answers.get(call.id or "")
                prior.append(
                    PriorCall(
                        name=call.name,
                        key=None if call.args is None else canonical_args(call.args),
                        result=None if answer is None else message_text(answer),
                        ok=answer is not None and not is_error_result(answer),
                        position=pos,
                        refused=answer is not None and _refused_by_guard(answer),
                    )
                )
        elif getattr(m, "type", None) in ("human", "system"):
            user_texts.append(message_text(m))
    return CheckContext(
        specs=dict(specs),
        calls=proposed_calls(last),
        user_texts=user_texts,
        tool_texts=tool_texts,
        prior_calls=prior,
        request=request,
        results_since_request=since_request,
        user_turns=turns,
        extra_grounding=list(extra_grounding),
    )
