"""The public entry point: :class:`Guard` checks the tool calls of an ``AIMessage``.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> from toolguard import Guard
    >>> weather = {"name": "get_weather", "description": "Current weather for a city.",
    ...            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
    ...                           "required": ["city"]}}
    >>> guard = Guard([weather])
    >>> msgs = [HumanMessage("What's the weather in Paris?"),
    ...         AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"},
    ...                                    "id": "1"},
    ...                                   {"name": "get_forecast", "args": {}, "id": "2"}])]
    >>> [(v.action, v.hallucination) for v in guard.check(msgs)]
    [('allow', None), ('block', 'type')]
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langgraph.errors import GraphBubbleUp
from typing_extensions import TypedDict

from toolguard.context import CheckContext, ProposedCall, build_context
from toolguard.conversation import ConversationReader
from toolguard.detectors import DETECTORS, Detector, DetectorOptions
from toolguard.detectors.content import ContentLLMMode
from toolguard.errors import ConfigurationError
from toolguard.relevance import (
    EmbeddingRelevanceJudge,
    LexicalRelevanceJudge,
    LLMRelevanceJudge,
    RelevanceJudge,
)
from toolguard.specs import ToolSet, ToolSpec
from toolguard.types import Evidence, Verdict

if TYPE_CHECKING:
    from toolguard.verifier import VerifierOption

logger = logging.getLogger("toolguard")

RelevanceOption = Literal["lexical", "embedding", "llm", "learned", "off"]
DEFAULT_DETECTORS: tuple[str, ...] = ("type", "format", "timing", "content", "provenance")
"""RelyToolBench's four types, in the order they run (cheap and decisive first)."""


class GuardOptions(TypedDict, total=False):
    """The keyword options of :class:`Guard` (what ``GuardMiddleware(**options)`` takes)."""

    detectors: Sequence[str | Detector]
    relevance: RelevanceOption | RelevanceJudge
    verifier: VerifierOption
    judge_model: BaseChatModel | None
    content_llm_mode: ContentLLMMode | None
    fail_open: bool
    detector_options: Mapping[str, Mapping[str, Any]] | None


class Guard:
    """Checks proposed tool calls for RelyToolBench's four tool-hallucination types.

    Detectors run in order (default ``type -> format -> timing -> content``); the first one
    that objects decides the call's :class:`~toolguard.types.Verdict`.  The default is fully
    deterministic (no LLM); pass ``judge_model`` to use the paper's LLM-judge prompts.

    Args:
        tools: LangChain tools, OpenAI function dicts, BFCL docs, ToolBench ``api_list``
            entries or :class:`~toolguard.specs.ToolSpec` s.
        detectors: Detector kinds (any registered in
            :data:`~toolguard.detectors.DETECTORS`) or instances, in the order they run.
        relevance: Relevance judge for existing tools: ``"lexical"`` (default),
            ``"embedding"`` (needs the ``embed`` extra), ``"llm"`` (needs ``judge_model``),
            ``"learned"`` (a trained verifier: :class:`~toolguard.verifier.LearnedRelevanceJudge`;
            needs ``verifier`` or the ``TOOLGUARD_VERIFIER`` environment variable), ``"off"``,
            or a :class:`~toolguard.relevance.RelevanceJudge`.
        verifier: For ``relevance="learned"``: a trained verifier folder, a hub id, or any
            cross-encoder with ``score(text_pairs) -> list[float]`` (LangChain's
            ``BaseCrossEncoder``); see :func:`toolguard.verifier.resolve_verifier`.
        judge_model: A LangChain chat model for the LLM judges (content: confirms the values
            the rules flag, or judges every call with ``content_llm_mode="always"``).
        content_llm_mode: See :class:`~toolguard.detectors.ContentDetector`.
        fail_open: When a detector raises, allow the call (``True``, default: the guard never
            breaks an agent) or block it (``False``); the error is in the verdict's evidence.
        detector_options: Keyword options for registered third-party detectors, by kind.

    Raises:
        toolguard.errors.ToolSpecError: A tool is of no supported form (a ``TypeError``).
        toolguard.errors.ConfigurationError: Duplicate tool names, an unknown detector or
            relevance option, or an option that needs ``judge_model`` without one (a
            ``ValueError``); ``relevance="learned"`` without a trained verifier (the message
            names ``toolguard verifier train``), or ``verifier`` with another relevance.
        ImportError: ``relevance="embedding"`` / ``"learned"`` without its extra.
    """

    def __init__(
        self,
        tools: Iterable[Any],
        *,
        detectors: Sequence[str | Detector] = DEFAULT_DETECTORS,
        relevance: RelevanceOption | RelevanceJudge = "lexical",
        verifier: VerifierOption = None,
        judge_model: BaseChatModel | None = None,
        content_llm_mode: ContentLLMMode | None = None,
        fail_open: bool = True,
        detector_options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.toolset = ToolSet.coerce(tools)  # compiled once per tool set, shared
        self.specs: dict[str, ToolSpec] = dict(self.toolset.by_name)
        self.fail_open = fail_open
        options = DetectorOptions(relevance=_relevance_judge(relevance, judge_model, verifier),
                                  judge_model=judge_model, content_llm_mode=content_llm_mode,
                                  extra=dict(detector_options or {}))
        self.reader = ConversationReader()
        self.detectors: list[Detector] = []
        for d in detectors:
            if isinstance(d, Detector):
                self.detectors.append(d)
            elif isinstance(d, str) and d in DETECTORS:
                self.detectors.append(DETECTORS[d].from_options(options))
            else:
                raise ConfigurationError(
                    f"unknown detector {d!r}; expected one of {list(DETECTORS)} or a Detector"
                )

    @property
    def tools(self) -> list[ToolSpec]:
        """The tool specs, in the order given."""
        return list(self.specs.values())

    def context(
        self, messages: Sequence[BaseMessage], *, extra_grounding: Sequence[str] = ()
    ) -> CheckContext:
        """The :class:`~toolguard.context.CheckContext` the detectors see (for debugging)."""
        return build_context(messages, self.specs, extra_grounding=extra_grounding,
                             reader=self.reader)

    def check(
        self, messages: Sequence[BaseMessage], *, extra_grounding: Sequence[str] = ()
    ) -> list[Verdict]:
        """Check the tool calls of the last message.

        Args:
            messages: LangChain messages ending with the ``AIMessage`` whose calls are checked.
            extra_grounding: Texts whose values count as grounded (e.g. resolved KG facts).

        Returns:
            One verdict per call: ``tool_calls`` in order, then ``invalid_tool_calls``.
            An ``AIMessage`` with no calls gives ``[]``.

        Raises:
            toolguard.errors.InputError: ``messages`` is empty or does not end with an
                ``AIMessage`` (a ``ValueError``).
        """
        ctx = self.context(messages, extra_grounding=extra_grounding)
        return [self._check_call(call, ctx) for call in ctx.calls]

    async def acheck(
        self, messages: Sequence[BaseMessage], *, extra_grounding: Sequence[str] = ()
    ) -> list[Verdict]:
        """Async twin of :meth:`check`; the calls of one message are checked concurrently."""
        ctx = self.context(messages, extra_grounding=extra_grounding)
        return list(await asyncio.gather(*(self._acheck_call(c, ctx) for c in ctx.calls)))

    def _check_call(self, call: ProposedCall, ctx: CheckContext) -> Verdict:
        errors: list[Evidence] = []
        for detector in self.detectors:
            try:
                verdict = detector.check(call, ctx)
            except GraphBubbleUp:
                raise
            except Exception as exc:  # never crash the user's graph on a detector bug
                errors.append(_detector_error(call, detector, exc))
                continue
            if verdict is not None:
                return verdict
        return self._no_objection(call, errors)

    async def _acheck_call(self, call: ProposedCall, ctx: CheckContext) -> Verdict:
        errors: list[Evidence] = []
        for detector in self.detectors:
            try:
                verdict = await detector.acheck(call, ctx)
            except GraphBubbleUp:
                raise
            except Exception as exc:  # never crash the user's graph on a detector bug
                errors.append(_detector_error(call, detector, exc))
                continue
            if verdict is not None:
                return verdict
        return self._no_objection(call, errors)

    def _no_objection(self, call: ProposedCall, errors: list[Evidence]) -> Verdict:
        """No detector objected: allow, unless one failed and ``fail_open`` is off."""
        if errors and not self.fail_open:
            return Verdict.on(
                call, "block",
                reason="Not executed: the guard could not check this call "
                f"({errors[0].detail}).",
                evidence=tuple(errors),
            )
        return Verdict(
            tool_call_id=call.id, tool_name=call.name, action="allow", evidence=tuple(errors)
        )


def _detector_error(call: ProposedCall, detector: Detector, exc: Exception) -> Evidence:
    logger.warning("toolguard: %s detector failed on %r: %r", detector.kind, call.name, exc)
    return Evidence(detector=detector.kind, code="detector_error", detail=repr(exc)[:500])


def _relevance_judge(
    relevance: RelevanceOption | RelevanceJudge, judge_model: BaseChatModel | None,
    verifier: VerifierOption = None,
) -> RelevanceJudge | None:
    if verifier is not None and relevance != "learned":
        raise ConfigurationError(
            f"verifier= is used by relevance='learned' only (relevance is {relevance!r})")
    if relevance == "learned":
        from toolguard.verifier import LearnedRelevanceJudge

        return LearnedRelevanceJudge(verifier)
    if isinstance(relevance, RelevanceJudge):
        return relevance
    if relevance == "off":
        return None
    if relevance == "lexical":
        return LexicalRelevanceJudge()
    if relevance == "embedding":
        return EmbeddingRelevanceJudge()
    if relevance == "llm":
        if judge_model is None:
            raise ConfigurationError("relevance='llm' needs judge_model")
        return LLMRelevanceJudge(judge_model)
    raise ConfigurationError(
        f"unknown relevance option {relevance!r}; expected lexical, embedding, llm, learned, off "
        "or a RelevanceJudge"
    )
