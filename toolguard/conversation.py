"""The one reader of a conversation: what the user wants, what was called, what came back.

Every component reads a LangChain message list through :class:`Conversation`: the guard's
detectors (grounding, earlier calls and results), the pre-check (what the user wants now),
the KG resolver (the latest request), the loop guard (calls and their outcomes).

**The goal** (:class:`Goal`).  In real multi-turn dialogues the latest user message often
only answers a question ("Yes, that's correct.", "my username is foo and my password is
bar", "the second one", "no, make it Friday").  Read alone it names no task, and a
pre-check that reads only it abstains on a turn where the next call is correct.  The goal
is the latest user message joined with the user messages before it while each one is a
*follow-up* — an answer, confirmation, correction or reference to what came before:

- it answers a question: the assistant message just before it (system messages skipped)
  asks one (contains ``?``, or is a toolguard ``ask_user`` / ``no_suitable_tool`` message)
  and the user message does not open a new request of its own (:data:`REQUEST_CUE`);
- it reads as an answer whatever came before: it starts with an answer cue
  (:data:`ANSWER_CUE`: "yes", "no", "ok", "actually", "it's", "my email is", "the second
  one", "use", ...) or refers back (:data:`REFERENCE_CUE`: "the same", "that one",
  "again", "also", "instead", "do it");
- it is short (at most :data:`SHORT_ANSWER_WORDS` words) and opens no request.

At most :data:`MAX_GOAL_MESSAGES` user messages are joined.  The rules err towards joining:
a goal that carries an earlier request only makes tools *more* relevant, so a joined goal
costs a missed abstain at worst, never a false one.

**Calls and answers** (:class:`CallRecord`).  A tool call is answered by the first
``ToolMessage`` with its id that comes after the ``AIMessage`` that made it and before an
``AIMessage`` that reuses the id (some providers number calls ``call_0``, ``call_1`` anew
every turn); ids are never matched across the whole history.

**Provenance** (:class:`SourcedText`).  Every text is kept with where it came from: the
user, the system prompt, the assistant, a tool result (and which tool), or grounding given
from outside (resolved KG facts).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)

from toolguard.errors import InputError
from toolguard.grounding import GroundingIndex
from toolguard.records import Source, SourcedText

__all__ = [
    "ANSWER_CUE",
    "MARK_KEY",
    "MAX_ARGS_CHARS",
    "MAX_GOAL_MESSAGES",
    "REFERENCE_CUE",
    "REQUEST_CUE",
    "SHORT_ANSWER_WORDS",
    "CallRecord",
    "Conversation",
    "ConversationReader",
    "Goal",
    "MessagesLike",
    "Source",
    "SourcedText",
    "answers_toolguard",
    "as_messages",
    "canonical_args",
    "error_text",
    "is_error_result",
    "marked_tool_message",
    "message_text",
    "parse_args",
    "toolguard_mark",
]

MARK_KEY = "toolguard"
"""``response_metadata`` key of the messages toolguard writes.  On an ``AIMessage`` for the
user (a question, a "no tool fits" answer, a finish) its value says which (``ask_user``,
``no_suitable_tool``, ``change_tools``, ``finish``, ``loop``); on a ``ToolMessage`` it is a
mapping (:func:`toolguard_mark`)."""

MAX_ARGS_CHARS = 4_000_000
"""Arguments whose JSON is longer than this (characters) are not parsed; a format error."""
MAX_ARGS_DEPTH = 200
"""Arguments nested deeper than this (objects/arrays) are not parsed; a format error."""

MAX_GOAL_MESSAGES = 4
"""User messages joined into one goal at most."""
SHORT_ANSWER_WORDS = 6
"""A user message of at most this many words that opens no request is a follow-up."""

REQUEST_CUE = re.compile(
    r"^\W*(?:(?:hi|hello|hey|thanks|thank you)\W+)*"
    r"(?:please\b|(?:can|could|would|will) you\b|i(?:'d| would)? (?:want|need|like)\b|"
    r"i'd like\b|help me\b|let'?s\b|(?:what|how|when|where|who|whom|whose|which|why)\b|"
    r"(?:is|are) there\b|(?:show|get|find|book|send|create|make|add|remove|delete|cancel|"
    r"check|list|tell|give|set|schedule|search|look|open|move|copy|compute|calculate|buy|"
    r"sell|order|pay|transfer|update|change|reset|turn|start|stop|post|upload|download|"
    r"reserve|rent|register|log|sign|subscribe|convert|translate|play|call|email|message|"
    r"remind|write|read|fetch|retrieve|display|print|run|install|unlock|lock)\b)",
    re.I,
)
"""A user message that opens a request: a request phrase, a question word or an imperative
verb at its start (after a greeting)."""

ANSWER_CUE = re.compile(
    r"^\W*(?:yes|yeah|yep|yup|sure|ok(?:ay)?|alright|no|nope|nah|correct|right|exactly|"
    r"indeed|confirm(?:ed)?|that'?s|that is|it'?s|it is|its|they'?re|they are|actually|"
    r"sorry|oops|i meant|i mean|rather|instead|(?:my|our|the) [\w' ]{1,30}? (?:is|are|was)\b|"
    r"the (?:first|second|third|fourth|last|other|latter|former|same) one|"
    r"(?:use|go with|pick|choose|take) (?:the|my|that|this|it)\b|go ahead|do it|please do|"
    r"for (?:the|my) )",
    re.I,
)
"""A user message that reads as an answer, a confirmation or a correction."""

REFERENCE_CUE = re.compile(
    r"\b(?:the same|same thing|that one|this one|do that|do it|again|also|as well|too|"
    r"instead|the previous|the last one|the other one)\b",
    re.I,
)
"""A user message that refers back to an earlier request."""

MessagesLike = Sequence[BaseMessage | Mapping[str, Any] | str | tuple[str, str]]


# ---------------------------------------------------------------------------- records
@dataclass(frozen=True, slots=True)
class CallRecord:
    """A tool call made earlier in the conversation and what answered it.

    Attributes:
        id: The tool call id (``None`` if the provider gave none).
        name: Tool name as the model wrote it.
        args: Parsed arguments, or ``None`` when they could not be parsed.
        key: Canonical JSON of ``args`` (:func:`canonical_args`), or ``None``.
        position: Index of the ``AIMessage`` that made the call.
        answer: Index of the answering ``ToolMessage``, or ``None`` while unanswered.
        result: Text of the answer, or ``None``.
        ok: The answer came back successfully (see :func:`error_text`).
        refused: toolguard answered the call instead of the tool (it never ran).
        error: The error the answer reports, or ``None``.
        invalid: The call came from ``invalid_tool_calls`` (arguments the provider could
            not parse).
    """

    id: str | None
    name: str
    args: dict[str, Any] | None
    key: str | None
    position: int
    answer: int | None = None
    result: str | None = None
    ok: bool = False
    refused: bool = False
    error: str | None = None
    invalid: bool = False


@dataclass(frozen=True, slots=True)
class Goal:
    """What the user wants now (see the module docstring).

    Attributes:
        text: The goal's user messages joined with newlines, oldest first.
        request: The first of them: the message that opened the current request.
        indexes: Positions of the joined user messages, oldest first.
        follow_up: The latest user message is a follow-up (answer, confirmation,
            correction, reference) to what came before.
    """

    text: str = ""
    request: str = ""
    indexes: tuple[int, ...] = ()
    follow_up: bool = False


# ---------------------------------------------------------------------------- helpers
def message_text(message: BaseMessage) -> str:
    """Text of a message; content blocks are joined, non-text blocks skipped.

    ``None`` content (which some hand-built messages carry) reads as ``""``.
    """
    content: Any = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else [content]:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(parts)


def as_messages(messages: MessagesLike) -> list[BaseMessage]:
    """LangChain messages from messages, ``{"role", "content"}`` dicts, strings or tuples.

    Lists of ``BaseMessage`` are returned as they are (no copy of the messages).

    Raises:
        InputError: An item is of no supported form.
    """
    items = list(messages)
    if all(isinstance(m, BaseMessage) for m in items):
        return items  # type: ignore[return-value]
    try:
        return list(convert_to_messages(items))  # type: ignore[arg-type]
    except (ValueError, TypeError, NotImplementedError) as exc:
        raise InputError(f"cannot read the messages: {exc}") from exc


def canonical_args(args: Any) -> str:
    """Canonical JSON of arguments: sorted keys, integral floats as ints, no spaces.

    Two calls with canonically equal arguments are "identical inputs" for the timing
    detector and the loop guard.
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
        except (ValueError, RecursionError):
            return None
        if isinstance(payload, dict) and payload.get("error"):
            return str(payload["error"])
    return None


def is_error_result(message: ToolMessage) -> bool:
    """Whether a tool answer reports failure (see :func:`error_text`)."""
    return error_text(message) is not None


def toolguard_mark(message: BaseMessage) -> Mapping[str, Any] | None:
    """The mark toolguard put on a ``ToolMessage`` it wrote or annotated, else ``None``.

    The mark is ``response_metadata[MARK_KEY]``: a tool's output reaches a ``ToolMessage``'s
    ``content`` and ``artifact`` (``ToolNode``, MCP adapters), never its response metadata,
    so a tool cannot forge it.  The same payload is copied to ``artifact["toolguard"]`` for
    UIs; it is never read back from there.
    """
    if not isinstance(message, ToolMessage):
        return None
    mark = (message.response_metadata or {}).get(MARK_KEY)
    return mark if isinstance(mark, Mapping) else None


def marked_tool_message(content: str, *, tool_call_id: str, name: str | None,
                        mark: Mapping[str, Any], status: Literal["success", "error"] = "error",
                        ) -> ToolMessage:
    """A ``ToolMessage`` written by toolguard, carrying ``mark`` (see :func:`toolguard_mark`)."""
    return ToolMessage(content, tool_call_id=tool_call_id, name=name, status=status,
                       artifact={MARK_KEY: dict(mark)},
                       response_metadata={MARK_KEY: dict(mark)})


def refused_by_toolguard(message: ToolMessage) -> bool:
    """Whether toolguard (not the tool) wrote or annotated this answer (:func:`toolguard_mark`)."""
    return toolguard_mark(message) is not None


def _depth_ok(raw: str, limit: int = MAX_ARGS_DEPTH) -> bool:
    """Whether brackets in ``raw`` nest at most ``limit`` deep.

    Brackets inside strings count too: an upper bound that is cheap and never recurses.
    """
    depth = 0
    for ch in raw:
        if ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def parse_args(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """Parse a raw arguments string into a dict, or explain why it cannot be.

    Longer than :data:`MAX_ARGS_CHARS` characters or nested deeper than
    :data:`MAX_ARGS_DEPTH` levels is refused before parsing (no ``RecursionError``).

    Returns:
        ``(args, None)`` on success, ``(None, reason)`` otherwise.
    """
    if len(raw) > MAX_ARGS_CHARS:
        return None, f"arguments are {len(raw)} characters long (limit {MAX_ARGS_CHARS})"
    if not raw.strip():
        return {}, None
    if not _depth_ok(raw):
        return None, f"arguments are nested deeper than {MAX_ARGS_DEPTH} levels"
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return None, f"arguments are not valid JSON: {exc}"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


DEPTH_SCAN_ITEMS = 50_000
"""Values :func:`nested_too_deep` looks at, at most: a wide, shallow value ends the scan
early (such arguments are refused for their size by :func:`args_problem` anyway)."""


def nested_too_deep(value: Any, limit: int = MAX_ARGS_DEPTH) -> bool:
    """Whether dicts / lists / tuples in ``value`` nest deeper than ``limit`` levels.

    Iterative (never recurses), and stops after :data:`DEPTH_SCAN_ITEMS` values.  The
    parsed-arguments twin of the bracket count for raw JSON strings (``parse_args``); used
    where a message must be made storable before it is checked (LangGraph's msgpack
    serializer stops at ~250 levels).
    """
    if not isinstance(value, Mapping | list | tuple):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    budget = DEPTH_SCAN_ITEMS
    while stack and budget > 0:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, Mapping) else item
        for child in itertools.islice(children, budget):
            budget -= 1
            if isinstance(child, Mapping | list | tuple):
                stack.append((child, depth + 1))
    return False


def args_problem(args: Mapping[str, Any]) -> str | None:
    """Why already-parsed arguments cannot be checked (too large or too deep), or ``None``."""
    size = 0
    stack: list[tuple[Any, int]] = [(args, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_ARGS_DEPTH:
            return f"arguments are nested deeper than {MAX_ARGS_DEPTH} levels"
        if isinstance(value, Mapping):
            size += 2 + sum(len(str(k)) + 4 for k in value)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple)):
            size += 2 + len(value)
            stack.extend((v, depth + 1) for v in value)
        else:
            size += len(str(value)) if isinstance(value, str) else 8
        if size > MAX_ARGS_CHARS:
            return f"arguments are over {MAX_ARGS_CHARS} characters long as JSON"
    return None


def _marked(message: BaseMessage) -> str | None:
    """The toolguard mark of a message toolguard wrote for the user, else ``None``."""
    if isinstance(message, AIMessage) and not message.tool_calls:
        mark = (message.response_metadata or {}).get(MARK_KEY)
        return mark if isinstance(mark, str) else None
    return None


def _asks(message: BaseMessage) -> bool:
    """Whether an assistant message (no tool calls) asks the user something."""
    if not isinstance(message, AIMessage) or message.tool_calls:
        return False
    if _marked(message) in ("ask_user", "no_suitable_tool"):
        return True
    return "?" in message_text(message)


def answers_toolguard(messages: Sequence[BaseMessage]) -> bool:
    """Whether the latest message is a user message answering a question toolguard asked.

    The pre-check never asks twice in a row: such an answer is read with its request (the
    goal) and, when information still seems missing, the agent proceeds.
    """
    if not messages or not isinstance(messages[-1], HumanMessage):
        return False
    before = next((m for m in reversed(messages[:-1]) if not isinstance(m, SystemMessage)),
                  None)
    return before is not None and _marked(before) == "ask_user"


# ---------------------------------------------------------------------------- reader
@dataclass
class Conversation:
    """A read-only view of a message list (see the module docstring).

    Build it with :meth:`read`, or through a :class:`ConversationReader`, which keeps one
    conversation per thread and reads only the messages added since the last read.

    Attributes:
        messages: The messages read so far.
        texts: Every message text with its :class:`SourcedText` provenance, in order,
            then the ``grounding`` texts given to :meth:`read`.
        calls: Every tool call of every ``AIMessage`` (``tool_calls`` then
            ``invalid_tool_calls``), in order, with its answer.
        goal: What the user wants now (:class:`Goal`).
        user_turns: Number of ``HumanMessage`` s.
        last_user: Position of the latest ``HumanMessage``, or ``None``.
        results_since_request: ``ToolMessage`` s after the latest user message.
    """

    messages: list[BaseMessage]
    texts: list[SourcedText] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    goal: Goal = field(default_factory=Goal)
    user_turns: int = 0
    last_user: int | None = None
    results_since_request: int = 0
    _users: list[int] = field(default_factory=list, repr=False)
    _open: dict[str, int] = field(default_factory=dict, repr=False)
    _by_key: dict[tuple[str, str], list[int]] = field(default_factory=dict, repr=False)
    _ok_by_name: dict[str, list[tuple[int, int]]] = field(default_factory=dict, repr=False)
    _index: GroundingIndex | None = field(default=None, repr=False)
    _index_lock: Any = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def read(cls, messages: MessagesLike, *, grounding: Iterable[str] = ()) -> Conversation:
        """Read ``messages`` (any form :func:`as_messages` accepts).

        Args:
            messages: The conversation, oldest first.
            grounding: Texts from outside the conversation whose values count as given
                (e.g. resolved KG facts), kept with source ``grounding``.

        Raises:
            InputError: A message is of no supported form.
        """
        msgs = as_messages(messages)
        conv = cls(messages=[])
        conv.extend(msgs)
        conv.texts.extend(SourcedText(str(t), "grounding") for t in grounding)
        return conv

    def extend(self, messages: Sequence[BaseMessage]) -> None:
        """Read ``messages`` that follow the ones read so far; the goal is read again.

        Each message is read once: reading a long conversation step by step costs the new
        messages, not the history.
        """
        start = len(self.messages)
        self.messages.extend(messages)
        self._scan(start)
        self.goal = read_goal(self.messages, self._users)

    def _scan(self, start: int) -> None:
        since = self.results_since_request
        for pos in range(start, len(self.messages)):
            m = self.messages[pos]
            if isinstance(m, HumanMessage):
                self.texts.append(SourcedText(message_text(m), "user", pos))
                self.user_turns += 1
                self.last_user = pos
                self._users.append(pos)
                since = 0
            elif isinstance(m, SystemMessage):
                self.texts.append(SourcedText(message_text(m), "system", pos))
            elif isinstance(m, ToolMessage):
                since += 1
                text = message_text(m)
                slot = self._open.pop(m.tool_call_id, None)
                name = m.name or (self.calls[slot].name if slot is not None else None)
                self.texts.append(SourcedText(text, "tool", pos, name))
                said = (toolguard_mark(m) or {}).get("said")
                if isinstance(said, str) and said:  # the user's answer to toolguard's question
                    self.texts.append(SourcedText(said, "user", pos))
                if slot is not None:
                    self._answer(slot, m, pos, text)
            elif isinstance(m, AIMessage):
                text = message_text(m)
                if text:
                    self.texts.append(SourcedText(text, "assistant", pos))
                for call in proposed_calls(m):
                    if call.id:
                        self._open[call.id] = len(self.calls)
                    key = None if call.args is None else canonical_args(call.args)
                    if key is not None:
                        self._by_key.setdefault((call.name, key), []).append(len(self.calls))
                    self.calls.append(CallRecord(
                        id=call.id, name=call.name, args=call.args, key=key,
                        position=pos, invalid=call.raw_args is not None and call.args is None))
            elif getattr(m, "type", None) in ("human", "system"):  # ChatMessage & co
                src: Source = "user" if m.type == "human" else "system"
                self.texts.append(SourcedText(message_text(m), src, pos))
        self.results_since_request = since

    def _answer(self, slot: int, message: ToolMessage, pos: int, text: str) -> None:
        error = error_text(message)
        rec = self.calls[slot]
        refused = refused_by_toolguard(message)
        self.calls[slot] = CallRecord(
            id=rec.id, name=rec.name, args=rec.args, key=rec.key, position=rec.position,
            answer=pos, result=text, ok=error is None, refused=refused, error=error,
            invalid=rec.invalid)
        if error is None and not refused:
            bisect.insort(self._ok_by_name.setdefault(rec.name, []), (rec.position, slot))

    # ------------------------------------------------------------------ views
    def texts_from(self, *sources: Source) -> list[str]:
        """Texts from the given sources, in conversation order."""
        return [t.text for t in self.texts if t.source in sources]

    @property
    def last_ai(self) -> AIMessage | None:
        """The last message if it is an ``AIMessage``, else ``None``."""
        last = self.messages[-1] if self.messages else None
        return last if isinstance(last, AIMessage) else None

    def calls_at(self, position: int) -> list[CallRecord]:
        """The calls made by the ``AIMessage`` at ``position``."""
        return [c for c in self.calls if c.position == position]

    def tool_names(self) -> list[str]:
        """Names of the tools with at least one successful call, in first-success order."""
        return list(self._ok_by_name)

    def calls_like(self, name: str, key: str) -> list[CallRecord]:
        """Earlier calls of ``name`` with canonically equal arguments ``key``, oldest first."""
        return [self.calls[i] for i in self._by_key.get((name, key), ())]

    def succeeded_since(self, name: str, position: int, *, besides: CallRecord) -> bool:
        """Whether another call of ``name`` made at or after ``position`` succeeded.

        ``besides`` (a call of this conversation) does not count; its parallel siblings
        (same position) do: they ran in an unknown order.
        """
        entries = self._ok_by_name.get(name, ())
        i = bisect.bisect_left(entries, (position, -1))
        return any(self.calls[slot] is not besides for _, slot in entries[i:i + 2])

    def unanswered(self) -> list[CallRecord]:
        """Calls of the latest ``AIMessage`` with tool calls that no ``ToolMessage`` answers."""
        for pos in range(len(self.messages) - 1, -1, -1):
            m = self.messages[pos]
            if isinstance(m, AIMessage) and (m.tool_calls or m.invalid_tool_calls):
                return [c for c in self.calls_at(pos) if c.answer is None]
        return []

    @property
    def grounding(self) -> GroundingIndex:
        """The :class:`~toolguard.grounding.GroundingIndex` of :attr:`texts`, extended on use."""
        with self._index_lock:  # two threads extending at once would index texts twice
            if self._index is None:
                self._index = GroundingIndex()
            index = self._index
            if index.texts_added < len(self.texts):
                index.extend(self.texts[index.texts_added:])
        return index


class ConversationReader:
    """Reads conversations incrementally: one :class:`Conversation` per thread, kept.

    A conversation is recognised by the id of its first message; it is extended when the
    messages given start with the ones read before (checked by the id of the last one read
    and the length), and read afresh otherwise (another thread, an edited history, messages
    without ids).  At most ``max_conversations`` are kept (least recently used dropped), so
    a restarted process simply reads each conversation once again.

    Args:
        max_conversations: Conversations kept, >= 1.

    Raises:
        toolguard.errors.ConfigurationError: ``max_conversations`` < 1.
    """

    def __init__(self, *, max_conversations: int = 256) -> None:
        from toolguard.errors import ConfigurationError

        if max_conversations < 1:
            raise ConfigurationError("max_conversations must be >= 1")
        self.max_conversations = max_conversations
        self._cache: OrderedDict[str, Conversation] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, messages: Sequence[BaseMessage], end: int | None = None) -> Conversation:
        """The conversation of ``messages[:end]`` (extended from the kept one when possible).

        Only the messages not read before are looked at (no copy of the history), so a
        step of a long conversation costs its new messages.  The returned object is shared
        with later reads of the same thread: treat it as read-only.  Checks of one
        conversation may run in several threads at once when they read the same messages
        (its grounding index is extended under a lock); a longer read of it while a check
        of a shorter one runs extends what that check sees, so a conversation's steps are
        checked one after another, as LangGraph runs a thread's steps.

        Raises:
            InputError: A message is not a LangChain message.
        """
        stop = len(messages) if end is None else end
        first = messages[0].id if stop and isinstance(messages[0], BaseMessage) else None
        if first is None:
            return Conversation.read(list(messages[:stop]))
        with self._lock:
            conv = self._cache.get(first)
            n = len(conv.messages) if conv is not None else 0
            if conv is None or n > stop or (n > 0 and (
                    messages[n - 1].id is None or messages[n - 1].id != conv.messages[n - 1].id)):
                conv = Conversation.read(list(messages[:stop]))
            elif n < stop:
                conv.extend(as_messages(messages[n:stop]))
            self._cache[first] = conv
            self._cache.move_to_end(first)
            while len(self._cache) > self.max_conversations:
                self._cache.popitem(last=False)
            return conv


def read_goal(messages: Sequence[BaseMessage], users: Sequence[int] | None = None) -> Goal:
    """The :class:`Goal` of a conversation (see the module docstring for the rules).

    Args:
        messages: The conversation.
        users: Positions of its ``HumanMessage`` s, if known (else they are looked up).
    """
    if users is None:
        users = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    if not users:
        return Goal()
    chosen = [users[-1]]
    follow_up = _follow_up(messages, users[-1])
    joining = follow_up
    k = len(users) - 1
    while joining and k > 0 and len(chosen) < MAX_GOAL_MESSAGES:
        k -= 1
        chosen.insert(0, users[k])
        joining = _follow_up(messages, users[k])
    texts = [message_text(messages[i]) for i in chosen]
    return Goal(text="\n".join(texts), request=texts[0], indexes=tuple(chosen),
                follow_up=follow_up)


def _follow_up(messages: Sequence[BaseMessage], index: int) -> bool:
    """Whether the user message at ``index`` follows up on what came before it."""
    text = message_text(messages[index]).strip()
    before = next((messages[i] for i in range(index - 1, -1, -1)
                   if not isinstance(messages[i], SystemMessage)), None)
    if before is None or not isinstance(before, AIMessage | ToolMessage):
        return False  # the first message, or two user messages in a row: a request
    if ANSWER_CUE.match(text) or REFERENCE_CUE.search(text):
        return True
    opens_request = bool(REQUEST_CUE.match(text))
    if _asks(before) and not opens_request:
        return True
    return len(text.split()) <= SHORT_ANSWER_WORDS and not opens_request


# ---------------------------------------------------------------------------- proposed
@dataclass(frozen=True, slots=True)
class ProposedCall:
    """One tool call proposed by the model.

    Attributes:
        id: The tool call id (``None`` if the provider gave none).
        name: The tool name as written by the model.
        args: Parsed arguments, or ``None`` if they could not be parsed.
        raw_args: The raw arguments string for invalid tool calls (and string ``args``),
            else ``None``.
        parse_error: Why the arguments could not be parsed, else ``None``.
        index: Position among the message's calls (0-based).
    """

    id: str | None
    name: str
    args: dict[str, Any] | None
    raw_args: str | None = None
    parse_error: str | None = None
    index: int = 0


def proposed_calls(message: AIMessage) -> list[ProposedCall]:
    """The calls of an ``AIMessage``: ``tool_calls`` in order, then ``invalid_tool_calls``.

    ``args`` given as a string (some providers and hand-built messages) are parsed as JSON;
    arguments that cannot be parsed, or are too large or too deeply nested, get a
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
        elif (problem := args_problem(args)) is not None:
            error, args = problem, None
        out.append(ProposedCall(id=tc.get("id"), name=str(tc.get("name") or ""), args=args,
                                raw_args=raw, parse_error=error, index=len(out)))
    for itc in message.invalid_tool_calls:
        raw = itc.get("args")
        _, error = parse_args(raw or "")
        if error is None:
            error = str(itc.get("error") or "the provider could not parse these arguments")
        out.append(ProposedCall(id=itc.get("id"), name=str(itc.get("name") or ""), args=None,
                                raw_args=raw or "", parse_error=error, index=len(out)))
    return out
