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
    ConversationReader,
    ProposedCall,
    canonical_args,
    error_text,
    is_error_result,
    message_text,
    parse_args,
    proposed_calls,
)
from toolguard.errors import InputError
from toolguard.records import SourcedText
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
    """Everything detectors need for one check (views over the conversation, computed on use).

    Attributes:
        specs: Available tools by name.
        calls: The proposed calls of the final ``AIMessage``, in order.
        conversation: The conversation before the final ``AIMessage`` (shared with later
            checks of the same thread: read-only).
        extra_grounding: Values grounded by other components (e.g. KG resolution).
    """

    specs: dict[str, ToolSpec]
    calls: list[ProposedCall]
    conversation: Conversation
    extra_grounding: list[str] = field(default_factory=list)
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def user_texts(self) -> list[str]:
        """Texts of user (and system) messages, oldest first."""
        return self.conversation.texts_from("user", "system")

    @property
    def tool_texts(self) -> list[str]:
        """Contents of earlier ``ToolMessage`` s, oldest first."""
        return self.conversation.texts_from("tool")

    @property
    def prior_calls(self) -> list[CallRecord]:
        """Earlier tool calls with their results, oldest first."""
        return self.conversation.calls

    @property
    def request(self) -> str:
        """What the user wants now: the conversation's goal text.

        The latest user message joined with the requests it answers or corrects (see
        :class:`~toolguard.conversation.Goal`); ``""`` if there is no user message.
        """
        return self.conversation.goal.text

    @property
    def results_since_request(self) -> int:
        """``ToolMessage`` s after the latest user message (0 on a turn's first tool step)."""
        return self.conversation.results_since_request

    @property
    def user_turns(self) -> int:
        """Number of user (``HumanMessage``) messages."""
        return self.conversation.user_turns

    @property
    def grounding_texts(self) -> list[str]:
        """User/system texts, tool results and extra grounding, in that order."""
        return [*self.user_texts, *self.tool_texts, *self.extra_grounding]

    @property
    def sourced_texts(self) -> list[SourcedText]:
        """Every text of the conversation with its provenance, then the extra grounding."""
        return [*self.conversation.texts,
                *(SourcedText(t, "grounding") for t in self.extra_grounding)]

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
    reader: ConversationReader | None = None,
) -> CheckContext:
    """Build the :class:`CheckContext` for the last message.

    Args:
        messages: LangChain messages, the last one an ``AIMessage`` with tool calls.
        specs: Available tools by name.
        extra_grounding: Texts whose values count as grounded (e.g. KG facts).
        reader: A :class:`~toolguard.conversation.ConversationReader` that keeps the
            conversation between checks (each message is then read once); ``None`` reads
            afresh.

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
    conv = (reader.read(messages, len(messages) - 1) if reader is not None
            else Conversation.read(list(messages[:-1])))
    return CheckContext(specs=dict(specs), calls=proposed_calls(last), conversation=conv,
                        extra_grounding=[str(t) for t in extra_grounding])
