"""Type hallucination: a fabricated tool, or an existing tool irrelevant to the request.

RelyToolBench's *type* type (tool selection hallucination).  A tool that is not in
the tool set is blocked with feedback listing the valid tools (as LangGraph's ToolNode
words it).  An existing tool goes to a :class:`~toolguard.relevance.RelevanceJudge`
(Relevant / Irrelevant / Unsure, the paper's "Check Tool Relevance" labels):
``Irrelevant`` with a better tool in the set blocks the call and names that tool;
``Irrelevant`` with none gives ``change_tools`` (RelyToolBench's ChangeTools).
"""

from __future__ import annotations

from typing import ClassVar

from rapidfuzz import process

from toolguard.context import CheckContext, ProposedCall
from toolguard.detectors.base import Detector, DetectorOptions, register_detector
from toolguard.errors import ConfigurationError
from toolguard.grounding import tokens_of
from toolguard.relevance import RelevanceJudge, RelevanceResult, is_lookup
from toolguard.text import split_identifier
from toolguard.types import Evidence, Verdict


@register_detector
class TypeDetector(Detector):
    """Blocks fabricated tools and judges the relevance of existing ones.

    With ``scope="first_step"`` (default) relevance is judged only on the first tool step of
    a conversation (no earlier tool call) and only for the first user turn: later steps and
    turns chain helper tools (``get_zipcode`` before ``estimate_distance``, ``lockDoors``
    before driving) whose link to the latest request a lexical judge often cannot see.
    ``scope="every_step"`` judges every call against the conversation's goal (the latest
    request with the turns it answers or corrects); measured on suite B it raises
    irrelevant-tool recall from 0.26 to 0.44 but false blocks from 1.0 % to 2.5 %, so it is
    opt-in (``Guard(detector_options={"type": {"scope": "every_step"}})``).

    A read lookup of something the request names, for a better tool that could not take it
    as is (``find_contact("Ulrich")`` before ``create_event``), is let through even when the
    judge finds it irrelevant (:func:`_looks_up_what_the_user_named`; suite B gold false
    blocks 1.4 % -> 0.8 % for 1 point of irrelevant-tool recall on each suite), unless the
    judge decides such steps itself (``judge.lexical_exceptions`` is ``False``: the learned
    judge).

    Args:
        judge: The relevance judge, or ``None`` to check only for fabricated tools.
        scope: ``"first_step"`` or ``"every_step"`` (see above).

    Raises:
        ConfigurationError: For another ``scope``.
    """

    kind: ClassVar = "type"

    def __init__(self, *, judge: RelevanceJudge | None = None,
                 scope: str = "first_step") -> None:
        if scope not in ("first_step", "every_step"):
            raise ConfigurationError(f"scope must be 'first_step' or 'every_step', got {scope!r}")
        self.judge = judge
        self.scope = scope

    @classmethod
    def from_options(cls, options: DetectorOptions) -> TypeDetector:
        """The detector with the guard's relevance judge (``extra["type"]``: ``scope``)."""
        return cls(judge=options.relevance, **dict(options.extra.get("type", {})))

    def check(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        """Fabricated tool first, then relevance."""
        fabricated = self._fabricated(call, ctx)
        if fabricated is not None or self.judge is None or not self._judged(call, ctx):
            return fabricated
        spec = ctx.specs[call.name]
        result = self.judge.judge(ctx.request, spec, list(ctx.specs.values()))
        return self._relevance_verdict(call, ctx, result, self.judge.lexical_exceptions)

    async def acheck(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        """Async twin of :meth:`check`."""
        fabricated = self._fabricated(call, ctx)
        if fabricated is not None or self.judge is None or not self._judged(call, ctx):
            return fabricated
        spec = ctx.specs[call.name]
        result = await self.judge.ajudge(ctx.request, spec, list(ctx.specs.values()))
        return self._relevance_verdict(call, ctx, result, self.judge.lexical_exceptions)

    def _judged(self, call: ProposedCall, ctx: CheckContext) -> bool:
        """Whether relevance is judged for this call (see class docstring)."""
        if not ctx.request:
            return False
        if self.scope == "every_step":
            return True
        if ctx.results_since_request > 0 or ctx.prior_calls:
            return False
        return ctx.user_turns <= 1

    @staticmethod
    def _fabricated(call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        if call.name in ctx.specs:
            return None
        names = list(ctx.specs)
        close = process.extractOne(call.name, names, score_cutoff=80) if names else None
        hint = f" Did you mean '{close[0]}'?" if close else ""
        shown = names if len(names) <= 40 else [*names[:40], f"... ({len(names)} tools)"]
        return Verdict.on(
            call, "block",
            hallucination="type",
            reason=f"Error: {call.name!r} is not a valid tool, try one of [{', '.join(shown)}]."
            + hint,
            evidence=(
                Evidence(
                    detector="type",
                    code="unknown_tool",
                    detail=f"'{call.name}' is not in the tool set",
                    value=call.name[:200],
                ),
            ),
        )

    @staticmethod
    def _relevance_verdict(
        call: ProposedCall, ctx: CheckContext, result: RelevanceResult,
        lexical_exceptions: bool = True,
    ) -> Verdict | None:
        if result.label != "Irrelevant":
            return None
        if lexical_exceptions and result.alternatives and _looks_up_what_the_user_named(
                call, ctx, result.alternatives[0]):
            return None
        evidence = (
            Evidence(
                detector="type",
                code="irrelevant_tool",
                detail=result.reason or f"'{call.name}' does not fit the request",
                score=result.score,
                value=call.name[:200],
            ),
        )
        if result.alternatives:
            alts = ", ".join(f"'{a}'" for a in result.alternatives)
            return Verdict.on(
                call, "block",
                hallucination="type",
                reason=f"Not executed: '{call.name}' does not fit the user's request "
                f"({result.reason}). Consider {alts} instead.",
                evidence=evidence,
            )
        return Verdict.on(
            call, "change_tools",
            hallucination="type",
            reason=f"Not executed: no available tool fits the user's request ({result.reason}). "
            "Tell the user this cannot be done with the current tools.",
            evidence=evidence,
        )


def _looks_up_what_the_user_named(call: ProposedCall, ctx: CheckContext, better: str) -> bool:
    """A read lookup of something the request names, for a tool that cannot take it as is.

    ``find_contact(name="Ulrich")`` when the user asked to "set up a meeting with Ulrich"
    and ``create_event`` wants attendees' emails: the lookup shares no word with the
    request, but it resolves what the user named into what the better tool consumes
    (suite B's calendar dialogues).  All of:

    - the tool is a read lookup (:func:`~toolguard.relevance.is_lookup`);
    - every text argument is stated word for word in the request, the values differ from
      each other, and one has a word of three or more letters (numbers and flags aside);
    - ``better`` (the tool the judge prefers) has none of those parameters' names, words
      of them included (``location`` / ``city_location``): else the value could go to it
      directly and the lookup is a detour (a weather request answered by an attractions
      search).
    """
    spec = ctx.specs.get(call.name)
    target = ctx.specs.get(better)
    if spec is None or target is None or not is_lookup(spec) or not isinstance(
            call.args, dict) or not call.args:
        return False
    request = " " + " ".join(tokens_of(ctx.request)) + " "
    values: list[str] = []
    params: set[str] = set()
    for param, value in call.args.items():
        if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
            continue
        if not isinstance(value, str):
            return False
        toks = tokens_of(value)
        if not toks or f" {' '.join(toks)} " not in request:
            return False
        values.append(" ".join(toks))
        params.update(tokens_of(split_identifier(param)))
    if not values or len(set(values)) < len(values) or not any(
            len(t) >= 3 and t.isalpha() for v in values for t in v.split()):
        return False
    theirs = {t for p in target.properties for t in tokens_of(split_identifier(p))}
    return not (params & theirs)
