"""Timing hallucination: calling the same tool again with identical inputs.

RelyToolBench defines a timing hallucination as a repeated call with identical inputs
*and* outputs: the model calls a tool whose answer it already has.  Outputs cannot be
compared before the call runs, so toolguard predicts them: the repeat is flagged when

1. an earlier call to the same tool had canonically equal arguments
   (:func:`~toolguard.context.canonical_args`), and
2. that earlier call was answered successfully (failed or refused identical calls in
   between are skipped: a retry after a failure is allowed when nothing succeeded), and
3. no call that may have changed the world came back successfully in between, or in
   parallel with it in the same message (any tool whose
   :attr:`~toolguard.specs.ToolSpec.effects` is not ``"read"``), so the earlier answer
   is still what the tool would return, and
4. for a read: no call since took an argument from inside the earlier result.  An agent
   that follows a text ("do the tasks in this email") reads it, acts on one line, and
   reads it again for the next; that re-read consults the instructions, it does not ask
   for an answer the agent is missing.

Policy for state-changing tools (``effects="write"`` or ``"unknown"``): an identical,
immediately repeated write (``send_message`` twice with the same text, a second
``book_flight``) is flagged too — executing it again would duplicate the side effect,
which BFCL's multi-turn environments show is the harmful case (DATA.md §2b: 190 of 1142
duplicated gold calls changed the final state).  The call is not executed; the model gets
the earlier result and a note saying the action was already done.  Tools where an
identical repeat is meaningful (``cd("..")``, ``increment()``) should be declared
``repeatable=True`` and are never flagged.

An *idempotent* write (:attr:`~toolguard.specs.ToolSpec.idempotent`, e.g. from MCP's
``idempotentHint``: ``put_note`` overwriting a note with the same text) is flagged as well:
running it again would be harmless, but it would change nothing and answer what it already
answered — a repeat with identical inputs and outputs, RelyToolBench's definition.  The
earlier result is replayed and the note says so; ``destructiveHint`` changes nothing here
(a destructive and an additive write are refused alike).  Declare a tool ``repeatable`` to
let such repeats run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from toolguard.context import CheckContext, ProposedCall, canonical_args
from toolguard.conversation import CallRecord, Conversation
from toolguard.detectors.base import Detector, register_detector
from toolguard.errors import ConfigurationError
from toolguard.grounding import TRUSTED
from toolguard.specs import ToolSpec
from toolguard.types import Evidence, Verdict
from toolguard.values.tokens import tokens_of

_MAX_REPLAY_CHARS = 4000


@register_detector
class TimingDetector(Detector):
    """Flags a repeat of a call that already succeeded with identical arguments.

    Args:
        max_replay_chars: The earlier result replayed to the model is cut to this many
            characters.
    """

    kind: ClassVar = "timing"

    def __init__(self, *, max_replay_chars: int = _MAX_REPLAY_CHARS) -> None:
        if max_replay_chars < 0:
            raise ConfigurationError("max_replay_chars must be >= 0")
        self.max_replay_chars = max_replay_chars

    def check(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        """Look back through earlier identical calls for one that succeeded.

        Identical earlier calls come from the conversation's index (not a scan of the
        history); "something changed the world since" is one lookup per tool that may
        change it.
        """
        spec = ctx.specs.get(call.name)
        if spec is None or spec.repeatable or call.args is None:
            return None
        key = canonical_args(call.args)
        conv = ctx.conversation
        changers = [n for n in conv.tool_names() if _may_change_world(ctx, n)]
        for prior in reversed(conv.calls_like(call.name, key)):
            if prior.refused or not prior.ok or prior.result is None:
                continue  # refused: it never ran; failed: a retry is fine
            # calls after it, and its parallel siblings (run in an unknown order), that
            # succeeded and may have changed the world make a re-read legitimate
            if any(conv.succeeded_since(n, prior.position, besides=prior) for n in changers):
                return None
            if spec.effects == "read" and _followed(conv, prior):
                return None  # the agent follows that text: it consults it again
            return self._verdict(call, spec, key, prior.result)
        return None

    def _verdict(self, call: ProposedCall, spec: ToolSpec, key: str, result: str) -> Verdict:
        replay = result
        if len(replay) > self.max_replay_chars:
            replay = replay[: self.max_replay_chars] + " ...(truncated)"
        if spec.effects == "read":
            what = "returned this result already and nothing has changed since"
        elif spec.idempotent:
            what = ("already ran successfully with these exact arguments; running it again "
                    "would change nothing")
        else:
            what = ("already ran successfully with these exact arguments; running it again "
                    "would repeat its effect")
        return Verdict.on(
            call, "block",
            hallucination="timing",
            reason=(
                f"Not executed: '{call.name}' {what}. Use the earlier result below "
                "and continue with the next step (or give the final answer). If the "
                "user really wants it done again, ask the user to confirm."
            ),
            evidence=(
                Evidence(
                    detector="timing",
                    code="repeated_call",
                    detail=f"identical call {call.name}({key[:200]}) already succeeded",
                    value=key[:200],
                ),
            ),
            replay=replay,
        )

MAX_FOLLOWED_CHARS = 20_000
"""Characters of an earlier result read to tell whether later calls follow it."""


def _followed(conv: Conversation, prior: CallRecord) -> bool:
    """Whether a call after ``prior`` took an argument from inside its result.

    The agent then follows that text ("do what the email says": read it, act on a line,
    read it again for the next): re-reading it is not a repeat the model should have
    avoided.  A value counts when every token of it is in the result and some token of
    three or more characters is not the user side's (the user did not give it).
    """
    words = set(tokens_of((prior.result or "")[:MAX_FOLLOWED_CHARS]))
    if not words:
        return False
    said = conv.grounding
    for c in conv.calls:
        if c.position <= prior.position or c is prior or not c.ok or not c.args:
            continue
        for leaf in _strings(c.args):
            toks = tokens_of(leaf)
            if toks and all(t in words for t in toks) and any(
                    len(t) >= 3 and not (said.tokens.get(t, 0) | said.trusted_run(t))
                    & TRUSTED for t in toks):
                return True
    return False


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if value.strip():
            yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value[:100]:
            yield from _strings(v)


def _may_change_world(ctx: CheckContext, name: str) -> bool:
    spec = ctx.specs.get(name)
    return spec is None or spec.effects != "read"
