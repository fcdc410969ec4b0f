"""What the detectors look at: the proposed calls and the conversation before them.

:func:`build_context` reads a LangChain message list ending with the ``AIMessage`` whose
tool calls are checked through :class:`~toolguard.conversation.Conversation` (the one
reader of a conversation) into a :class:`CheckContext`, once per check, so every detector
reads the same pre-computed view (the goal, grounding texts with their provenance, earlier
tool calls and results).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage

from toolguard.conversation import (
    MAX_ARGS_CHARS,
    CallRecord,
    Conversation,
    ProposedCall,
    SourcedText,
    canonical_args,
    error_text,
    is_error_result,
    message_text,
    parse_args,
    proposed_calls,
)
from toolguard.errors import InputError
from toolguard.specs import ToolSpec

__all__ = [
    "MAX_ARGS_CHARS",
    "CheckContext",
    "PriorCall",
    "ProposedCall",
    "build_context",
    "canonical_args",
    "error_text",
    "is_error_result",
    "message_text",
    "parse_args",
    "proposed_calls",
]

PriorCall = CallRecord
"""An earlier tool call and its answer (see :class:`~toolguard.conversation.CallRecord`)."""


@dataclass(slots=True)
class CheckContext:
    """Everything detectors need for one check.

    Attributes:
        specs: Available tools by name.
        calls: The proposed calls of the final ``AIMessage``, in order.
        conversation: The conversation before the final ``AIMessage``.
        user_texts: Texts of user (and system) messages, oldest first.
        tool_texts: Contents of earlier ``ToolMessage`` s, oldest first.
        prior_calls: Earlier tool calls with their results, oldest first.
        request: What the user wants now: the conversation's goal text (the latest user
            message joined with the requests it answers or corrects; see
            :class:`~toolguard.conversation.Goal`), ``""`` if there is no user message.
        results_since_request: ``ToolMessage`` s after the latest user message (0 on the
            first tool step of a turn).
        user_turns: Number of user (``HumanMessage``) messages.
        extra_grounding: Values grounded by other components (e.g. KG resolution).
    """

    specs: dict[str, ToolSpec]
    calls: list[ProposedCall]
    conversation: Conversation | None = None
    user_texts: list[str] = field(default_factory=list)
    tool_texts: list[str] = field(default_factory=list)
    prior_calls: list[CallRecord] = field(default_factory=list)
    request: str = ""
    results_since_request: int = 0
    user_turns: int = 0
    extra_grounding: list[str] = field(default_factory=list)
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def grounding_texts(self) -> list[str]:
        """User/system texts, tool results and extra grounding, in that order."""
        return [*self.user_texts, *self.tool_texts, *self.extra_grounding]

    @property
    def sourced_texts(self) -> list[SourcedText]:
        """Every text of the conversation with its provenance (and the extra grounding)."""
        if self.conversation is None:
            return [SourcedText(t, "grounding") for t in self.grounding_texts]
        return self.conversation.texts

    def memo(self, key: str, factory: Any) -> Any:
        """Compute ``factory()`` once per context (shared by detectors)."""
        if key not in self._cache:
            self._cache[key] = factory()
        return self._cache[key]


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
        InputError: If ``messages`` is empty or does not end with an ``AIMessage``
            (``InputError`` is a ``ValueError``).
    """
    if not messages:
        raise InputError("messages is empty; expected a list ending with an AIMessage")
    last = messages[-1]
    if not isinstance(last, AIMessage):
        raise InputError(
            f"messages must end with the AIMessage whose tool calls are checked, "
            f"got {type(last).__name__}"
        )
    conv = Conversation.read(list(messages[:-1]), grounding=extra_grounding)
    return CheckContext(
        specs=dict(specs),
        calls=proposed_calls(last),
        conversation=conv,
        user_texts=conv.texts_from("user", "system"),
        tool_texts=conv.texts_from("tool"),
        prior_calls=list(conv.calls),
        request=conv.goal.text,
        results_since_request=conv.results_since_request,
        user_turns=conv.user_turns,
        extra_grounding=[str(t) for t in extra_grounding],
    )
