"""Loop guard: an agent repeating itself gets one nudge, then is stopped.

A tool-calling agent can burn a whole turn (and its budget) repeating calls that cannot
help: the same failing call again and again (langgraph#6889, deer-flow#1055), a tool that
does not exist (langchain#37961: a model looked for a non-existent ``hex`` tool for a whole
turn), two calls in alternation, or calls that keep coming back with nothing new.
:class:`LoopGuard` reads a conversation and says, for each call of the latest step (the
latest ``AIMessage`` with tool calls, while only ``ToolMessage`` s follow it), whether it
would continue such a loop.

**Scope.**  Only the current user turn is read (the calls after the latest
``HumanMessage``): a new user message starts fresh, so a user asking to "try again" is
never a loop.  Calls are compared by name and canonical arguments
(:func:`~toolguard.conversation.canonical_args`, minus ``ignore_args``).

**Loop kinds** (:data:`LoopKind`), checked in this order, the first that matches wins:

- ``unknown_tool``: the call names a tool that was refused as not existing (by
  toolguard's type detector, evidence code ``unknown_tool``; by LangGraph's ``ToolNode``,
  ``"... is not a valid tool"``; or by this guard) at least ``max_unknown_tool_calls``
  times in the turn, whatever the arguments.
- ``repeated_failure``: an identical call (same name, same canonical arguments) already
  failed (an error answer, or refused by toolguard) ``max_repeats`` times since the last
  *world change* by another call, and has not succeeded since.  Identical calls earlier
  in the same step count too, once the call has failed at least once.  So the same
  failing call runs at most ``max_repeats`` times in a turn while nothing else changes.
- ``oscillation``: the call continues a cycle of ``p`` distinct calls (``p`` in
  ``oscillation_periods``; A-B-A-B is ``p = 2``) that was already made
  ``oscillation_cycles`` times in a row, where every pass after the first brought nothing
  new (each call failed, was refused, or returned the same result as one pass earlier).
  So each call of the cycle runs at most ``oscillation_cycles`` times.
- ``no_progress``: the last ``no_progress_window`` calls of this tool, whatever their
  arguments (calls toolguard refused are skipped), each brought nothing new: it failed,
  or it returned a result the tool already gave in the turn — for a read-only tool
  (``effects="read"``) any earlier result of the tool, or an empty one (``""``, ``[]``,
  ``{}``, ``null``); for a tool that may change the world, the result of an identical
  earlier call.  The count starts again after a world change by another tool and, for a
  tool that may change the world, after another call returned something new
  (``click_next`` is productive while ``read_page`` shows new pages).  After a
  ``no_progress`` nudge one more call of the tool may run (the model may have changed its
  approach); if it brings nothing new either, the turn stops.

**State-changing calls** (deer-flow#2511: a detector that ignored them stopped legitimate
workflows).  A *world change* is a call that came back successfully from a tool whose
:attr:`~toolguard.specs.ToolSpec.effects` is not ``"read"`` (``write``, or ``unknown``:
the default, treated as possibly state-changing), or a call the user answered in
toolguard's ask-user protocol.  After one, an identical call is a fresh attempt (a read
after a write may see something new), so ``repeated_failure`` and ``no_progress`` start
counting again.  A failed call changes nothing.  A successful call of a tool declared
``repeatable=True`` (``cd("..")``, ``next_page()``, ``wait(5)``) always counts as progress
(for ``no_progress`` and ``oscillation``).

**Per-tool thresholds.**  ``tool_thresholds={"search": 5}`` sets ``max_repeats`` and
``no_progress_window`` to 5 for ``search``; ``{"search": {"max_repeats": 1}}`` sets one of
them.

**Nudge, then stop** (:data:`LoopAction`).  Each loop has a *signature*
(:attr:`LoopVerdict.signature`: its kind, tool and arguments, or the cycle).  The first
``max_nudges`` times a loop with a given signature is detected in a turn, the verdict is
``nudge``: the call is not executed and the model is told what is looping and what to do
instead.  Detected again after that, the verdict is ``stop``: the adapter stops the turn.
The nudges given so far are read from the conversation's own answers (each nudge carries
toolguard's mark ``{"loop": ...}``, :func:`~toolguard.conversation.toolguard_mark`) unless
the caller passes them.

:func:`plan_loop_step` turns verdicts into the messages that keep every tool call answered
by exactly one ``ToolMessage``; :class:`~toolguard.middleware.LoopGuardMiddleware` is the
``create_agent`` adapter.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> from toolguard import LoopGuard
    >>> def step(i):
    ...     call = {"name": "search", "args": {"q": "x"}, "id": f"c{i}"}
    ...     return [AIMessage("", tool_calls=[call]),
    ...             ToolMessage("Error: timeout", tool_call_id=f"c{i}", status="error")]
    >>> messages = [HumanMessage("find x"), *step(1), *step(2)]
    >>> messages.append(AIMessage("", tool_calls=[{"name": "search", "args": {"q": "x"},
    ...                                            "id": "c3"}]))
    >>> [(v.kind, v.action) for v in LoopGuard(max_repeats=2).check(messages)]
    [('repeated_failure', 'nudge')]
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from pydantic import BaseModel, ConfigDict
from typing_extensions import TypedDict

from toolguard.conversation import (
    MARK_KEY,
    CallRecord,
    Conversation,
    MessagesLike,
    canonical_args,
    marked_tool_message,
    toolguard_mark,
)
from toolguard.errors import ConfigurationError, at_least
from toolguard.specs import ToolSpec
from toolguard.types import clip

__all__ = [
    "LOOP_KINDS",
    "LoopAction",
    "LoopGuard",
    "LoopKind",
    "LoopPlan",
    "LoopVerdict",
    "ToolThresholds",
    "nudges_from_messages",
    "plan_loop_step",
    "unseen_refused_step",
]

LoopKind = Literal["unknown_tool", "repeated_failure", "oscillation", "no_progress"]
"""What is looping (module docstring, in the order they are checked)."""
LoopAction = Literal["nudge", "stop"]
"""``nudge``: the call is answered with feedback and not executed; the model goes on.
``stop``: the loop goes on after its nudges: the turn stops."""

LOOP_KINDS: tuple[LoopKind, ...] = get_args(LoopKind)
ARTIFACT_KEY = "loop"
"""Key in toolguard's mark (:func:`~toolguard.conversation.toolguard_mark`) of the answers
the loop guard writes."""

_EMPTY_RESULTS = frozenset({"", "[]", "{}", "()", "null", "none", '""', "''"})
_NOT_A_TOOL = re.compile(r"\bis not a valid tool\b", re.I)
_MAX_ERROR_CHARS = 300
_MAX_PERIOD = 4


class ToolThresholds(TypedDict, total=False):
    """Per-tool overrides (``tool_thresholds={"search": {"max_repeats": 4}}``)."""

    max_repeats: int
    no_progress_window: int


class LoopVerdict(BaseModel):
    """One call of the latest step that would continue a loop.

    Attributes:
        tool_call_id: The call's id (``None`` if the model gave none).
        tool_name: The tool the model asked for.
        kind: What is looping (:data:`LoopKind`).
        action: ``nudge`` or ``stop`` (:data:`LoopAction`).
        signature: Identifies the loop within the turn:
            ``"<kind>:<tool>[:<args hash>]"``, or ``"oscillation:<hash>|<hash>..."``.
            Nudges are counted per signature.
        count: How often the loop already went round: failures of the identical call,
            refusals of the unknown tool, passes of the cycle, calls without anything new.
        threshold: The bound ``count`` reached (``max_repeats``, ...).
        nudges: Nudges already given for this signature in the turn.
        cycle: For ``oscillation``: the tool names of one pass, in order.
        last_error: The latest error the looping call got, if any (at most 300 chars).
        answered: The call already has an answer from toolguard (another guard refused
            it): it keeps that answer, the nudge is added to it.
    """

    model_config = ConfigDict(frozen=True)

    tool_call_id: str | None
    tool_name: str
    kind: LoopKind
    action: LoopAction
    signature: str
    count: int
    threshold: int
    nudges: int = 0
    cycle: tuple[str, ...] = ()
    last_error: str | None = None
    answered: bool = False

    @property
    def reason(self) -> str:
        """What is looping, in one sentence (for logs, events and the user)."""
        name = self.tool_name
        if self.kind == "unknown_tool":
            return (f"the tool '{name}' does not exist, and it was called again after "
                    f"being refused {self.count} time(s)")
        if self.kind == "repeated_failure":
            error = f" (last error: {self.last_error})" if self.last_error else ""
            return (f"'{name}' was called again with the same arguments after {self.count} "
                    f"attempts without success{error}")
        if self.kind == "oscillation":
            cycle = " -> ".join((*self.cycle, "..."))
            return (f"the calls {cycle} went round {self.count} times in a row without "
                    "bringing anything new")
        return (f"the last {self.count} calls of '{name}' brought nothing new (failed, empty "
                "or the same result as before)")

    def feedback(self) -> str:
        """The text the model gets instead of the call's result (the nudge)."""
        name = self.tool_name
        if self.kind == "unknown_tool":
            return (f"Not executed: there is no tool named '{name}' (refused {self.count} "
                    "time(s) already). Do not call it again: use one of the tools you were "
                    "given, or answer the user with what you have.")
        if self.kind == "repeated_failure":
            error = f" Last error: {self.last_error}." if self.last_error else ""
            return (f"Not executed: you already called '{name}' with exactly these arguments "
                    f"{self.count} time(s) without success.{error} Repeating it will "
                    "fail the same way. Change approach: correct the arguments, use another "
                    "tool, use the results you already have, or ask the user.")
        if self.kind == "oscillation":
            cycle = " -> ".join((*self.cycle, "..."))
            return (f"Not executed: you are going round in a cycle ({cycle}) that you already "
                    f"made {self.count} times, and it brings nothing new. Break the cycle: use "
                    "the results you already have, try a different approach, or ask the user.")
        return (f"Not executed: your last {self.count} calls of '{name}' brought nothing new "
                "(they failed, came back empty, or repeated an earlier result). Another call "
                "is unlikely to help: use the results you already have, change approach, or "
                "ask the user.")


@dataclass
class LoopPlan:
    """What one step adds to the graph state (:func:`plan_loop_step`).

    Attributes:
        messages: ``ToolMessage`` s answering the calls that must not run (and, for calls
            another guard already answered, their answers with the nudge added, same
            message id, so ``add_messages`` replaces them), then, when the turn stops, the
            ``AIMessage`` for the user.
        stop: The turn stops here.
        nudged: Signatures nudged in this step (one nudge per signature per step).
        stop_verdict: The verdict that stopped the turn, or ``None``.
    """

    messages: list[BaseMessage] = field(default_factory=list)
    stop: bool = False
    nudged: list[str] = field(default_factory=list)
    stop_verdict: LoopVerdict | None = None


# ---------------------------------------------------------------------------- helpers
@dataclass(frozen=True, slots=True)
class _Call:
    """A call of the turn as the guard sees it."""

    rec: CallRecord
    sig: str  # name + canonical arguments (minus ignored ones)
    status: Literal["pending", "failed", "refused", "asked", "ok"]
    digest: str | None  # hash of an ok result
    empty: bool
    unknown: bool  # refused because the tool does not exist
    loop_nudge: str | None  # signature, when the answer is this guard's nudge


def _digest(text: str) -> str:
    return hashlib.blake2b(text.strip().encode("utf-8", "replace"), digest_size=8).hexdigest()


def _loop_artifact(message: BaseMessage) -> dict[str, Any] | None:
    inner = toolguard_mark(message)
    if inner is None:
        return None
    loop = inner.get(ARTIFACT_KEY)
    return dict(loop) if isinstance(loop, Mapping) else None


def _says_unknown(message: BaseMessage) -> bool:
    """Whether an answer refuses a call because its tool does not exist."""
    loop = _loop_artifact(message)
    if loop is not None and loop.get("kind") == "unknown_tool":
        return True
    inner = toolguard_mark(message)
    if inner is not None:
        for evidence in inner.get("evidence") or ():
            if isinstance(evidence, Mapping) and evidence.get("code") == "unknown_tool":
                return True
    content = message.content if isinstance(message.content, str) else str(message.content)
    return bool(_NOT_A_TOOL.search(content[:500]))


def _step_position(messages: Sequence[BaseMessage]) -> int | None:
    """Index of the latest ``AIMessage`` with tool calls, while only answers follow it."""
    for pos in range(len(messages) - 1, -1, -1):
        m = messages[pos]
        if isinstance(m, ToolMessage):
            continue
        if isinstance(m, AIMessage) and m.tool_calls:
            return pos
        return None
    return None


def nudges_from_messages(messages: MessagesLike | Conversation) -> dict[str, int]:
    """Nudges given per loop signature in the current user turn, read from the answers.

    Every nudge answer carries toolguard's mark ``{"loop": ...}``; nudges of one step count
    once per signature.
    """
    conv = messages if isinstance(messages, Conversation) else Conversation.read(messages)
    start = -1 if conv.last_user is None else conv.last_user
    steps: dict[str, set[int]] = {}
    for c in conv.calls:
        if c.position <= start or c.answer is None:
            continue
        loop = _loop_artifact(conv.messages[c.answer])
        if loop is not None and loop.get("action") == "nudge" and loop.get("signature"):
            steps.setdefault(str(loop["signature"]), set()).add(c.position)
    return {sig: len(positions) for sig, positions in steps.items()}


def unseen_refused_step(messages: MessagesLike | Conversation) -> bool:
    """Whether toolguard refused every call of the latest step, none of them by this guard.

    Such a step never reached the loop guard when another guard answered it and sent the
    run straight back to the model; an adapter checks it before the next model call.
    """
    conv = messages if isinstance(messages, Conversation) else Conversation.read(messages)
    step = _step_position(conv.messages)
    if step is None:
        return False
    calls = [c for c in conv.calls_at(step) if not c.invalid]
    return bool(calls) and all(
        c.answer is not None and c.refused and not c.ok
        and _loop_artifact(conv.messages[c.answer]) is None for c in calls)


# ---------------------------------------------------------------------------- engine
class LoopGuardOptions(TypedDict, total=False):
    """The keyword options of :class:`LoopGuard` (``LoopGuardMiddleware(**options)``)."""

    max_repeats: int
    max_unknown_tool_calls: int
    no_progress_window: int
    oscillation_cycles: int
    oscillation_periods: Iterable[int]
    max_nudges: int
    tool_thresholds: Mapping[str, int | ToolThresholds] | None
    ignore_args: Collection[str]
    tools: Iterable[Any] | None
    kinds: Iterable[LoopKind] | None


class LoopGuard:
    """Detect tool-call loops in a conversation (see the module docstring).

    Pure: :meth:`check` reads messages and returns verdicts; nothing is kept between calls,
    so one instance serves many threads at once.

    Args:
        max_repeats: An identical call that failed this many times (since the last world
            change) is a loop: it runs at most this many times.  ``>= 1``; default 2.
        max_unknown_tool_calls: A tool refused as not existing this many times is a loop
            when called again.  ``>= 1``; default 1 (the second call of a made-up tool).
        no_progress_window: This many calls of a tool in a row that brought nothing new
            make the next one a loop.  ``>= 1``; default 3.
        oscillation_cycles: Passes of a cycle (every pass after the first bringing nothing
            new) after which continuing it is a loop.  ``>= 2``; default 2 (A-B-A-B, then
            A is the loop).
        oscillation_periods: Cycle lengths to look for, each in ``[2, 4]``; default
            ``(2,)`` (A-B-A-B); ``(2, 3)`` also finds A-B-C-A-B-C.
        max_nudges: Nudges per loop signature and turn before the verdict is ``stop``.
            ``>= 0`` (0: stop at once); default 1.
        tool_thresholds: Per-tool ``max_repeats`` and ``no_progress_window``: an int sets
            both, a :class:`ToolThresholds` mapping sets either.  Values ``>= 1``.
        ignore_args: Argument names left out when comparing calls (free-text fields such
            as ``"description"`` that a model rewords on every retry: deer-flow#1578).
        tools: The agent's tools, in any form :meth:`ToolSpec.coerce` accepts, for their
            ``effects`` and ``repeatable``; a tool not given is ``effects="unknown"``.
        kinds: The loop kinds to detect; default all (:data:`LOOP_KINDS`).

    Raises:
        toolguard.errors.ConfigurationError: An option is out of its bounds (the message
            states the bound), an unknown kind, or a tool of no supported form.
    """

    def __init__(
        self,
        *,
        max_repeats: int = 2,
        max_unknown_tool_calls: int = 1,
        no_progress_window: int = 3,
        oscillation_cycles: int = 2,
        oscillation_periods: Iterable[int] = (2,),
        max_nudges: int = 1,
        tool_thresholds: Mapping[str, int | ToolThresholds] | None = None,
        ignore_args: Collection[str] = (),
        tools: Iterable[Any] | None = None,
        kinds: Iterable[LoopKind] | None = None,
    ) -> None:
        at_least("max_repeats", max_repeats, 1)
        at_least("max_unknown_tool_calls", max_unknown_tool_calls, 1)
        at_least("no_progress_window", no_progress_window, 1)
        at_least("oscillation_cycles", oscillation_cycles, 2)
        at_least("max_nudges", max_nudges, 0)
        try:
            periods = tuple(oscillation_periods)
        except TypeError:
            raise ConfigurationError(
                f"oscillation_periods must be a collection of integers in [2, {_MAX_PERIOD}], "
                f"got {oscillation_periods!r}") from None
        for p in periods:
            if isinstance(p, bool) or not isinstance(p, int) or not 2 <= p <= _MAX_PERIOD:
                raise ConfigurationError(
                    f"oscillation_periods must hold integers in [2, {_MAX_PERIOD}], got {p!r}")
        chosen = LOOP_KINDS if kinds is None else tuple(kinds)
        for k in chosen:
            if k not in LOOP_KINDS:
                raise ConfigurationError(f"unknown loop kind {k!r}; expected one of "
                                         f"{list(LOOP_KINDS)}")
        if isinstance(ignore_args, str):
            raise ConfigurationError("ignore_args must be a collection of argument names, "
                                     f"not the string {ignore_args!r}")
        self.max_repeats = max_repeats
        self.max_unknown_tool_calls = max_unknown_tool_calls
        self.no_progress_window = no_progress_window
        self.oscillation_cycles = oscillation_cycles
        self.oscillation_periods = tuple(sorted(set(periods)))
        self.max_nudges = max_nudges
        self.kinds = frozenset(chosen)
        self.ignore_args = frozenset(str(a) for a in ignore_args)
        self.tool_thresholds = _thresholds(tool_thresholds)
        self.specs = _specs(tools)

    # ------------------------------------------------------------------ thresholds
    def repeats_for(self, tool: str) -> int:
        """``max_repeats`` for ``tool`` (its override, else the default)."""
        return self.tool_thresholds.get(tool, {}).get("max_repeats", self.max_repeats)

    def window_for(self, tool: str) -> int:
        """``no_progress_window`` for ``tool`` (its override, else the default)."""
        return self.tool_thresholds.get(tool, {}).get("no_progress_window",
                                                      self.no_progress_window)

    # ------------------------------------------------------------------ check
    def check(
        self,
        messages: MessagesLike | Conversation,
        *,
        nudges: Mapping[str, int] | None = None,
        tools: Iterable[Any] | None = None,
    ) -> list[LoopVerdict]:
        """Verdicts on the calls of the latest step that would continue a loop.

        The latest step is the latest ``AIMessage`` with tool calls, as long as only
        ``ToolMessage`` s follow it; its calls are checked when unanswered or answered by a
        toolguard refusal (the call did not run: a guard earlier in the chain refused it).
        Calls a tool already answered, and ``invalid_tool_calls``, get no verdict.

        Args:
            messages: The conversation (any form :func:`~toolguard.conversation.as_messages`
                accepts, or a :class:`~toolguard.conversation.Conversation`).
            nudges: Nudges already given per signature in this turn; default: read from the
                answers (:func:`nudges_from_messages`).
            tools: More tools (any :meth:`ToolSpec.coerce` form) for ``effects`` and
                ``repeatable``; they take precedence over the constructor's ``tools``.

        Returns:
            One verdict per looping call, in call order; ``[]`` when nothing loops.

        Raises:
            toolguard.errors.InputError: A message is of no supported form.
            toolguard.errors.ConfigurationError: A tool in ``tools`` is of no supported
                form.
        """
        conv = messages if isinstance(messages, Conversation) else Conversation.read(messages)
        step = _step_position(conv.messages)
        if step is None:
            return []
        specs = {**self.specs, **_specs(tools)} if tools is not None else self.specs
        given = dict(nudges_from_messages(conv) if nudges is None else nudges)
        start = -1 if conv.last_user is None else conv.last_user
        history = [self._view(conv, c) for c in conv.calls
                   if start < c.position < step and not c.invalid]
        current = [self._view(conv, c) for c in conv.calls_at(step) if not c.invalid]
        out: list[LoopVerdict] = []
        for i, call in enumerate(current):
            if call.status not in ("pending", "refused") or call.loop_nudge is not None:
                continue
            found = self._detect(call, history, current[:i], specs)
            if found is None:
                continue
            kind, signature, count, threshold, extra = found
            used = int(given.get(signature, 0))
            out.append(LoopVerdict(
                tool_call_id=call.rec.id, tool_name=call.rec.name, kind=kind,
                action="stop" if used >= self.max_nudges else "nudge", signature=signature,
                count=count, threshold=threshold, nudges=used,
                answered=call.status == "refused", **extra))
        return out

    # ------------------------------------------------------------------ internals
    def _view(self, conv: Conversation, rec: CallRecord) -> _Call:
        key = rec.key
        if self.ignore_args and rec.args is not None:
            key = canonical_args({k: v for k, v in rec.args.items() if k not in self.ignore_args})
        sig = f"{rec.name}\x00{key}"
        if rec.answer is None:
            return _Call(rec, sig, "pending", None, False, False, None)
        answer = conv.messages[rec.answer]
        loop = _loop_artifact(answer)
        nudge = str(loop.get("signature")) if loop and loop.get("action") == "nudge" else None
        unknown = not rec.ok and _says_unknown(answer)
        text = rec.result or ""
        if rec.refused:
            status: Literal["failed", "refused", "asked", "ok"] = "asked" if rec.ok \
                else "refused"
            return _Call(rec, sig, status, None, False, unknown, nudge)
        if not rec.ok:
            return _Call(rec, sig, "failed", None, False, unknown, nudge)
        return _Call(rec, sig, "ok", _digest(text), text.strip().lower() in _EMPTY_RESULTS,
                     False, None)

    def _detect(
        self,
        call: _Call,
        history: list[_Call],
        siblings: list[_Call],
        specs: Mapping[str, ToolSpec],
    ) -> tuple[LoopKind, str, int, int, dict[str, Any]] | None:
        name = call.rec.name
        if "unknown_tool" in self.kinds:
            refusals = sum(1 for h in history if h.rec.name == name and h.unknown)
            if refusals >= self.max_unknown_tool_calls:
                return ("unknown_tool", f"unknown_tool:{name}", refusals,
                        self.max_unknown_tool_calls, {})
        if "repeated_failure" in self.kinds:
            found = self._repeated_failure(call, history, siblings, specs)
            if found is not None:
                return found
        if "oscillation" in self.kinds:
            found = self._oscillation(call, history, siblings, specs)
            if found is not None:
                return found
        if "no_progress" in self.kinds:
            return self._no_progress(call, history, specs)
        return None

    def _repeated_failure(
        self, call: _Call, history: list[_Call], siblings: list[_Call],
        specs: Mapping[str, ToolSpec],
    ) -> tuple[LoopKind, str, int, int, dict[str, Any]] | None:
        failures = 0
        last_error: str | None = None
        for h in history:
            if h.sig == call.sig:
                if h.status in ("failed", "refused"):
                    failures += 1
                    if h.status == "failed" or (h.loop_nudge is None and last_error is None):
                        last_error = h.rec.error or h.rec.result or last_error
                elif h.status in ("ok", "asked"):
                    failures, last_error = 0, None
            elif _changes_world(h, specs):
                failures, last_error = 0, None
        if failures == 0:
            return None
        failures += sum(1 for s in siblings if s.sig == call.sig)
        threshold = self.repeats_for(call.rec.name)
        if failures < threshold:
            return None
        extra = {"last_error": clip(last_error, _MAX_ERROR_CHARS) if last_error else None}
        return ("repeated_failure", f"repeated_failure:{call.rec.name}:{_short(call.sig)}",
                failures, threshold, extra)

    def _oscillation(
        self, call: _Call, history: list[_Call], siblings: list[_Call],
        specs: Mapping[str, ToolSpec],
    ) -> tuple[LoopKind, str, int, int, dict[str, Any]] | None:
        seq = [*history, *siblings]
        cycles = self.oscillation_cycles
        for period in self.oscillation_periods:
            size = period * cycles
            if len(seq) < size:
                continue
            window = seq[-size:]
            first = [w.sig for w in window[:period]]
            if len(set(first)) != period or call.sig != first[0]:
                continue
            if any(window[j].sig != first[j % period] for j in range(size)):
                continue
            if all(_nothing_new_again(window[j], window[j - period], specs)
                   for j in range(period, size)):
                names = tuple(w.rec.name for w in window[:period])
                sig = "|".join(sorted(_short(s) for s in first))
                return ("oscillation", f"oscillation:{sig}", cycles, cycles,
                        {"cycle": names})
        return None

    def _no_progress(
        self, call: _Call, history: list[_Call], specs: Mapping[str, ToolSpec],
    ) -> tuple[LoopKind, str, int, int, dict[str, Any]] | None:
        name = call.rec.name
        read = _reads(specs, name)
        window = self.window_for(name)
        signature = f"no_progress:{name}"
        streak = 0
        seen: dict[str, set[str]] = {}  # tool -> marks of its results so far
        for h in history:
            novel = False
            if h.status == "ok":
                assert h.digest is not None
                h_read = _reads(specs, h.rec.name)
                mark = h.digest if h_read else f"{h.sig}\x00{h.digest}"
                marks = seen.setdefault(h.rec.name, set())
                novel = mark not in marks and not (h_read and h.empty)
                marks.add(mark)
            if h.rec.name != name:
                # a write may make the same call useful again; so may news from elsewhere,
                # for a tool that may write (click_next, then read_page shows a new page)
                if _changes_world(h, specs) or (novel and not read):
                    streak = 0
                continue
            if h.loop_nudge == signature:
                streak = min(streak, window - 1)  # after a nudge, one more call may run
            elif h.status == "asked" or (h.status == "ok" and (novel or _repeatable(specs, name))):
                streak = 0
            elif h.status in ("ok", "failed"):
                streak += 1
        if streak < window:
            return None
        return ("no_progress", signature, streak, window, {})


# ---------------------------------------------------------------------------- plan
def plan_loop_step(
    messages: MessagesLike | Conversation, verdicts: Sequence[LoopVerdict]
) -> LoopPlan:
    """The messages that carry out ``verdicts`` on the latest step.

    - No verdict is ``stop``: each looping call that is still unanswered gets one error
      ``ToolMessage`` with the nudge (:meth:`LoopVerdict.feedback`); a looping call another
      guard already refused keeps its answer, with the nudge added (same message id, so
      ``add_messages`` replaces it; without an id it is left as it is).
    - A verdict is ``stop``: every call of the step still unanswered gets one "not
      executed" ``ToolMessage`` and the user gets an ``AIMessage`` marked ``loop``
      (:func:`toolguard.protocol.user_message`) saying why the turn stopped.

    Every answer carries toolguard's mark ``{"loop": verdict}`` (:func:`toolguard_mark`:
    the conversation reader sees the call as refused, never executed).

    Raises:
        toolguard.errors.InputError: A message is of no supported form.
    """
    from toolguard.protocol import user_message

    plan = LoopPlan()
    if not verdicts:
        return plan
    conv = messages if isinstance(messages, Conversation) else Conversation.read(messages)
    step = _step_position(conv.messages)
    if step is None:
        return plan
    calls = conv.calls_at(step)
    by_id = {v.tool_call_id: v for v in verdicts}
    stop = next((v for v in verdicts if v.action == "stop"), None)
    if stop is not None:
        plan.stop, plan.stop_verdict = True, stop
        for c in calls:  # invalid_tool_calls too: the turn ends, nothing may dangle
            if c.answer is not None:
                continue
            v = None if c.invalid else by_id.get(c.id)
            if v is not None:
                text = f"Not executed: the turn was stopped because {v.reason}."
                mark: dict[str, Any] = {ARTIFACT_KEY: v.model_dump(mode="json")}
            else:
                text = ("Not executed: the turn was stopped because of a tool-call loop "
                        "before this call could run.")
                mark = {ARTIFACT_KEY: {"action": "stop", "closed": True,
                                       "signature": stop.signature}}
            plan.messages.append(marked_tool_message(text, tool_call_id=c.id or "",
                                                     name=c.name, mark=mark))
        plan.messages.append(user_message(
            f"I stopped working on this request because {stop.reason}, and I was not making "
            "progress. Nothing more was executed. Please check the tool or its inputs, "
            "rephrase the request, or tell me how to proceed.", "loop",
            toolguard_loop=stop.model_dump(mode="json")))
        return plan
    nudged: list[str] = []
    for c in calls:
        v = None if c.invalid else by_id.get(c.id)
        if v is None:
            continue
        if v.signature not in nudged:
            nudged.append(v.signature)
        dump = v.model_dump(mode="json")
        if c.answer is None:
            plan.messages.append(marked_tool_message(
                v.feedback(), tool_call_id=c.id or "", name=c.name, mark={ARTIFACT_KEY: dump}))
            continue
        earlier = conv.messages[c.answer]
        if not isinstance(earlier, ToolMessage) or earlier.id is None:
            continue
        mark = {**(toolguard_mark(earlier) or {}), ARTIFACT_KEY: dump}
        artifact = dict(earlier.artifact) if isinstance(earlier.artifact, Mapping) else {}
        artifact[MARK_KEY] = mark
        content = earlier.content if isinstance(earlier.content, str) else str(earlier.content)
        plan.messages.append(earlier.model_copy(update={
            "content": f"{content}\n\n{v.feedback()}", "artifact": artifact,
            "response_metadata": {**(earlier.response_metadata or {}), MARK_KEY: mark},
            "status": "error"}))
    plan.nudged = nudged
    return plan


# ---------------------------------------------------------------------------- helpers
def _short(sig: str) -> str:
    name = sig.split("\x00", 1)[0]
    return f"{name}:{_digest(sig)[:10]}"


def _reads(specs: Mapping[str, ToolSpec], name: str) -> bool:
    spec = specs.get(name)
    return spec is not None and spec.effects == "read"


def _repeatable(specs: Mapping[str, ToolSpec], name: str) -> bool:
    spec = specs.get(name)
    return spec is not None and spec.repeatable


def _changes_world(call: _Call, specs: Mapping[str, ToolSpec]) -> bool:
    """A successful call of a tool that may change the world, or an answer from the user."""
    if call.status == "asked":
        return True
    if call.status != "ok":
        return False
    return not _reads(specs, call.rec.name)


def _nothing_new_again(now: _Call, before: _Call, specs: Mapping[str, ToolSpec]) -> bool:
    """Whether a call in a cycle brought nothing new compared with one pass earlier."""
    if now.status in ("pending", "failed", "refused"):
        return True
    if now.status == "asked":
        return False
    if _repeatable(specs, now.rec.name):
        return False
    return before.status == "ok" and before.digest == now.digest


def _thresholds(
    given: Mapping[str, int | ToolThresholds] | None,
) -> dict[str, dict[str, int]]:
    if given is not None and not isinstance(given, Mapping):
        raise ConfigurationError("tool_thresholds must map tool names to an int or to "
                                 f"{{'max_repeats', 'no_progress_window'}}, got {given!r}")
    out: dict[str, dict[str, int]] = {}
    for tool, value in (given or {}).items():
        if isinstance(value, Mapping):
            unknown = set(value) - {"max_repeats", "no_progress_window"}
            if unknown:
                raise ConfigurationError(
                    f"tool_thresholds[{tool!r}] has unknown keys {sorted(unknown)}; expected "
                    "'max_repeats' and/or 'no_progress_window'")
            entry: dict[str, Any] = {str(k): v for k, v in value.items()}
        else:
            entry = {"max_repeats": value, "no_progress_window": value}
        for key, bound in entry.items():
            at_least(f"tool_thresholds[{tool!r}][{key!r}]", bound, 1)
        out[str(tool)] = {k: int(v) for k, v in entry.items()}
    return out


def _specs(tools: Iterable[Any] | None) -> dict[str, ToolSpec]:
    out: dict[str, ToolSpec] = {}
    for t in tools or ():
        try:
            spec = ToolSpec.coerce(t)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"tools: {exc}") from exc
        out[spec.name] = spec
    return out
