"""Content hallucination: argument values that should come from the user but appear nowhere.

RelyToolBench's *content* type, with the rules of the paper's "Check Content
Hallucination" evaluator (``prompts/check_content_hallucination.md``):

1. values stated in the conversation (user/system turns, earlier tool results) are truthful;
2. values stated in the tool description (defaults, enums, consts, its text) are truthful;
   the schema's *examples* (``examples``, ``example``, ToolBench's ``example_value``) are
   not, by default: an example shows a value's form, and a call that copies it runs on a
   value nobody gave (a required parameter filled with its doc's ``"12345"``).  The paper's
   rule counts them as truthful; ``examples_ground=True`` restores that;
3. values that can be inferred (query keywords, page numbers, limits, enum members,
   schema defaults, booleans) are truthful;
4. values that need specific facts from the user (ids, names, numbers, emails, dates,
   URLs, phone numbers, places) and appear nowhere are untruthful -> ``ask_user``;
5. otherwise unsure -> allowed.

The deterministic judge (default) implements rules 1-4: :func:`~toolguard.values.classify`
reads the kind of fact a value states from its shape, and the kind's matcher
(:data:`~toolguard.values.match.MATCHERS`) looks it up in the conversation's
:class:`~toolguard.grounding.GroundingIndex`; a check costs the size of the arguments, not of
the history.  Optionally an LLM judge (the paper's prompt through any LangChain chat
model) decides the values the deterministic rules flag (``llm_mode="confirm"``) or
every call (``llm_mode="always"``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from langchain_core.language_models import BaseChatModel

from toolguard.context import CheckContext, ProposedCall
from toolguard.detectors.base import Detector, DetectorOptions, register_detector
from toolguard.errors import ConfigurationError
from toolguard.grounding import GroundingIndex, GroundingView
from toolguard.judge import JudgeResult, LLMJudge
from toolguard.records import Source, SourcedText
from toolguard.specs import ToolSpec
from toolguard.types import Evidence, Verdict
from toolguard.values import ValueKind, classify, iter_leaves, parameter_words
from toolguard.values.match import MatchOptions, is_stated
from toolguard.values.numbers import ARITHMETIC_CUE

ContentLLMMode = Literal["off", "confirm", "always"]


def index_of(texts: Sequence[str], source: Source = "grounding") -> GroundingIndex:
    """A :class:`~toolguard.grounding.GroundingIndex` of a few texts (tool docs, KG facts)."""
    index = GroundingIndex()
    index.extend(SourcedText(t, source) for t in texts)
    return index


@register_detector
class ContentDetector(Detector):
    """Flags argument values that need user-given facts and appear nowhere in the conversation.

    Args:
        fuzzy_threshold: ``rapidfuzz.fuzz.ratio`` score (0-100) at which a word of 5+
            letters counts as a stated word of 5+ letters with the same first two letters
            (typos: "chcicago" for "chicago").
        token_share: Share of a name's distinctive words that must be stated (1.0: every
            word; "Henrietta Thistlewood" is not grounded by "Henrietta").
        judge_model: Optional chat model for the paper's "Check Content Hallucination" prompt.
        llm_mode: ``"off"`` (default if no model), ``"confirm"`` (default with a model:
            the LLM decides only the calls the rules flag), ``"always"`` (the LLM decides
            every call that has arguments).
        max_value_chars: Longer string values are treated as free text (not checked).
        examples_ground: Whether the schema's examples (``examples``, ``example``,
            ``example_value``) count as stated, as the paper's rule 2 says.  Default
            ``False``: a value of a kind only the user can give (rule 4) that appears only
            as a documentation example is ungrounded.  Defaults, enums and the description
            text ground either way.  Set through a guard with
            ``detector_options={"content": {"examples_ground": True}}``.
    """

    kind: ClassVar = "content"

    def __init__(
        self,
        *,
        fuzzy_threshold: float = 85.0,
        token_share: float = 1.0,
        judge_model: BaseChatModel | None = None,
        llm_mode: ContentLLMMode | None = None,
        max_value_chars: int = 120,
        examples_ground: bool = False,
    ) -> None:
        if not 0 <= fuzzy_threshold <= 100:
            raise ConfigurationError("fuzzy_threshold must be in [0, 100]")
        if not 0 < token_share <= 1:
            raise ConfigurationError("token_share must be in (0, 1]")
        if max_value_chars < 1:
            raise ConfigurationError("max_value_chars must be >= 1")
        mode: ContentLLMMode = llm_mode or ("confirm" if judge_model is not None else "off")
        if mode != "off" and judge_model is None:
            raise ConfigurationError(f"llm_mode={mode!r} needs a judge_model")
        self.fuzzy_threshold = fuzzy_threshold
        self.token_share = token_share
        self.max_value_chars = max_value_chars
        self.llm_mode = mode
        self.examples_ground = examples_ground
        self._tool_cache: dict[ToolSpec, GroundingIndex] = {}
        self._judge = (
            LLMJudge(judge_model, prompt="check_content_hallucination",
                     labels=("Untruthful", "Truthful", "Unsure"))
            if judge_model is not None
            else None
        )

    @classmethod
    def from_options(cls, options: DetectorOptions) -> ContentDetector:
        """The detector with the guard's judge model and content LLM mode.

        ``options.extra["content"]`` holds further keyword options (``examples_ground``,
        ``fuzzy_threshold``, ...).

        Raises:
            ConfigurationError: An unknown LLM mode or keyword option.
        """
        mode = options.content_llm_mode
        if mode is not None and mode not in ("off", "confirm", "always"):
            raise ConfigurationError(
                f"content_llm_mode must be 'off', 'confirm' or 'always', got {mode!r}")
        extra = dict(options.extra.get(cls.kind, {}))
        unknown = sorted(set(extra) - _KEYWORDS)
        if unknown:
            raise ConfigurationError(
                f"unknown content detector option(s) {unknown}; known: {sorted(_KEYWORDS)}")
        return cls(judge_model=options.judge_model,
                   llm_mode=mode, **extra)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ rules
    def ungrounded(self, call: ProposedCall, ctx: CheckContext) -> list[tuple[str, Any, str]]:
        """``(parameter path, value, kind)`` for each value rules 1-4 find ungrounded.

        Lookups go to the conversation's :class:`~toolguard.grounding.GroundingIndex`
        (each message indexed once), the extra grounding and the tool's own docs: the cost
        is the size of the arguments, not of the history.
        """
        spec = ctx.specs.get(call.name)
        if spec is None or not call.args:
            return []
        said = [ctx.conversation.grounding, self._tool_grounding(spec)]
        if ctx.extra_grounding:
            said.append(ctx.memo("content.extra", lambda: index_of(ctx.extra_grounding)))
        view = GroundingView(said)
        # a derived number needs the request to ask for arithmetic ("split the bill")
        view.arithmetic_cues = int(bool(ARITHMETIC_CUE.search(ctx.request or "")))
        out: list[tuple[str, Any, str]] = []
        for path, value, schema in iter_leaves(call.args, "", {"properties": spec.properties}):
            kind = classify(value, schema, parameter=path, max_chars=self.max_value_chars)
            if kind is None or is_stated(value, kind, view, MatchOptions(
                    self.fuzzy_threshold, self.token_share, parameter_words(path, schema))):
                continue
            out.append((path, value, kind))
        return out

    def _tool_grounding(self, spec: ToolSpec) -> GroundingIndex:
        """Grounding from the tool's own description and schema (rule 2), cached per spec."""
        cached = self._tool_cache.get(spec)
        if cached is None:
            schema = spec.parameters if self.examples_ground else without_examples(
                spec.parameters)
            cached = index_of([spec.description, json.dumps(schema, default=str)])
            if len(self._tool_cache) >= 4096:
                self._tool_cache.clear()
            self._tool_cache[spec] = cached
        return cached

    # ------------------------------------------------------------------ verdicts
    def check(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        """Apply rules 1-4; with an LLM judge, let it decide as ``llm_mode`` says."""
        flagged = self.ungrounded(call, ctx)
        if self._judge is not None and self._should_ask_llm(call, flagged):
            result = self._judge.judge(**_judge_fields(call, ctx))
            return self._decide_llm(call, flagged, result)
        return self._verdict(call, flagged)

    async def acheck(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        """Async twin of :meth:`check`."""
        flagged = self.ungrounded(call, ctx)
        if self._judge is not None and self._should_ask_llm(call, flagged):
            result = await self._judge.ajudge(**_judge_fields(call, ctx))
            return self._decide_llm(call, flagged, result)
        return self._verdict(call, flagged)

    def _should_ask_llm(self, call: ProposedCall, flagged: list[Any]) -> bool:
        if self.llm_mode == "always":
            return bool(call.args)
        return self.llm_mode == "confirm" and bool(flagged)

    def _decide_llm(
        self, call: ProposedCall, flagged: list[tuple[str, Any, str]], result: JudgeResult
    ) -> Verdict | None:
        if result.label == "Untruthful":
            items = flagged or [("", None, "value")]
            return self._verdict(call, items, judge_reason=result.reason)
        if result.label == "Truthful":
            return None
        return self._verdict(call, flagged) if self.llm_mode == "confirm" else None

    def _verdict(
        self, call: ProposedCall, flagged: list[tuple[str, Any, str]], judge_reason: str = ""
    ) -> Verdict | None:
        if not flagged:
            return None
        evidence = tuple(
            Evidence(
                detector="content",
                code="ungrounded_value",
                parameter=path or None,
                value=value if not isinstance(value, str) else value[:200],
                detail=(
                    f"value {value!r} for '{path}' carries invisible or bidirectional control "
                    "characters" if kind == ValueKind.INVISIBLE
                    else f"{kind} value {value!r} for '{path}' appears nowhere in the conversation"
                    if path
                    else f"the LLM judge found ungrounded values: {judge_reason[:300]}"
                ),
            )
            for path, value, kind in flagged
        )
        params = [p for p, _, _ in flagged if p]
        names = ", ".join(f"'{p}'" for p in params) or "some arguments"
        plain = [p.replace("_", " ") for p in params]
        question = (
            f"Which {plain[0]} should I use for {call.name}?"
            if len(plain) == 1
            else f"Please tell me the {', '.join(plain[:-1])} and {plain[-1]} for {call.name}."
            if plain
            else f"Could you give me the details {call.name} needs?"
        )
        return Verdict.on(
            call, "ask_user",
            hallucination="content",
            reason=(
                f"Not executed: the value(s) of {names} for '{call.name}' do not appear in the "
                "conversation or in earlier tool results and look like facts only the user can "
                "give. Do not guess them: ask the user, or obtain them with another tool first."
                + (f" Judge: {judge_reason[:300]}" if judge_reason else "")
            ),
            evidence=evidence,
            question=question,
        )


_KEYWORDS = frozenset(
    {"fuzzy_threshold", "token_share", "max_value_chars", "examples_ground"})

#: JSON Schema's ``examples``, OpenAPI's ``example`` and ToolBench's ``example_value``.
EXAMPLE_KEYS = frozenset({"examples", "example", "example_value"})


def without_examples(schema: Any, _depth: int = 0) -> Any:
    """``schema`` without its example annotations (:data:`EXAMPLE_KEYS`), at any depth.

    A property *named* ``example`` (a key under ``properties``) is kept; only annotations
    go.  Returns a new structure; ``schema`` is not changed.  Deeper than 32 levels the
    rest is kept as it is.
    """
    if _depth > 32:
        return schema
    if isinstance(schema, list | tuple):
        return [without_examples(v, _depth + 1) for v in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, Mapping):
            # property names are data, not annotations: keep every one
            out[key] = {name: without_examples(sub, _depth + 1) for name, sub in value.items()}
        elif key not in EXAMPLE_KEYS:
            out[key] = without_examples(value, _depth + 1)
    return out


def _judge_fields(call: ProposedCall, ctx: CheckContext) -> dict[str, Any]:
    spec: ToolSpec | None = ctx.specs.get(call.name)
    history = "\n".join(ctx.user_texts + [f"History: {t}" for t in ctx.tool_texts])
    return {
        "query": history[-12000:],
        "tool_name": call.name,
        "tool_description": json.dumps(
            {"description": spec.description if spec else "",
             "parameters": spec.parameters if spec else {}}, default=str)[:6000],
        "arguments": json.dumps(call.args, default=str)[:4000],
    }

