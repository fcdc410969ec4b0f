"""Content hallucination: argument values that should come from the user but appear nowhere.

RelyToolBench's *content* type, with the rules of the paper's "Check Content
Hallucination" evaluator (``prompts/check_content_hallucination.md``):

1. values stated in the conversation (user/system turns, earlier tool results) are truthful;
2. values stated in the tool description (examples, defaults, enums) are truthful;
3. values that can be inferred (query keywords, page numbers, limits, enum members,
   schema defaults, booleans) are truthful;
4. values that need specific facts from the user (ids, names, numbers, emails, dates,
   URLs, phone numbers, places) and appear nowhere are untruthful -> ``ask_user``;
5. otherwise unsure -> allowed.

The deterministic judge (default) implements rules 1-4 with the conversation's
:class:`~toolguard.grounding.GroundingIndex` (casefold, accents, separators, number words,
percentages, month names, one arithmetic step over tool-result numbers) and near-spelling
matching of single words with ``rapidfuzz``; a check costs the size of the arguments, not of
the history.  Optionally an LLM judge (the paper's prompt through any LangChain chat
model) decides the values the deterministic rules flag (``llm_mode="confirm"``) or
every call (``llm_mode="always"``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Literal

from langchain_core.language_models import BaseChatModel
from rapidfuzz import fuzz

from toolguard.context import CheckContext, ProposedCall
from toolguard.conversation import Source, SourcedText
from toolguard.detectors.base import Detector, DetectorOptions, register_detector
from toolguard.errors import ConfigurationError
from toolguard.grounding import WORD_NUMBERS, GroundingIndex, tokens_of
from toolguard.judge import JudgeResult, LLMJudge
from toolguard.specs import ToolSpec
from toolguard.types import Evidence, Verdict

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", re.I)
_URL = re.compile(r"^(https?://|www\.)", re.I)
_DATE = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}|^\d{1,2}[/.-]\d{1,2}[/.-]\d{2,4}$")
_ID_LIKE = re.compile(r"^(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9_\-:.#]{4,}$|^\d{5,}$")

# parameter names whose values are composed or chosen by the model (rule 3: inferable)
_FREE_TEXT_PARAM = re.compile(
    r"(^|_)(query|queries|keyword|keywords|search|q|text|message|content|body|prompt|"
    r"description|summary|comment|question|instruction|instructions|note|notes|reason|"
    r"unit|units|format|language|lang|sort|order|order_by|sort_by|mode|detail|details|"
    r"page|limit|offset|max_results|top_k|count|size|per_page|timeout|verbose|precision|"
    r"round|decimal|decimals|tone|style|command|cmd|code|script|expression|formula|equation|"
    r"sql|regex|pattern|function|func)$",
    re.I,
)
_CODE = re.compile(r"^[A-Z]{2,4}$")

# numeric parameters that are settings or common knowledge (rule 3: "number of limits")
_INFERABLE_NUMBER_PARAM = re.compile(
    r"(^|_)(n|k|limit|top|top_k|page|outcomes|sides|cards|temperature|volume|threshold|"
    r"permittivity|permeability|constant|factor)s?$",
    re.I,
)
# time spans and calendar numbers: inferable when the user speaks in relative time
# ("next week" -> days=7, "this year" -> year=2026, "monthly" -> periods=12)
_TIME_NUMBER_PARAM = re.compile(
    r"(^|_)(year|years|month|months|day|days|hour|hours|minute|minutes|second|seconds|"
    r"duration|time[_]?frame|time[_]?span|period|periods|interval|ahead)$",
    re.I,
)

ContentLLMMode = Literal["off", "confirm", "always"]


def _snake(name: str) -> str:
    """``ingredientLimit`` -> ``ingredient_limit``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def fold_text(text: str) -> str:
    """Casefolded, accent-free tokens joined by single spaces (separators dropped)."""
    return " ".join(tokens_of(text))


def _decimals(x: float) -> int | None:
    """Decimal places of ``x`` when 1-4 (``None`` for integers and longer fractions)."""
    text = repr(x)
    if "e" in text or "." not in text:
        return None
    decimals = len(text.split(".")[1].rstrip("0"))
    return decimals if 1 <= decimals <= 4 else None


def _rounded_from(x: float, g: GroundingIndex) -> bool:
    """Whether ``x`` is a stated number rounded to its decimals.

    For 1-4 decimals only: 3.96 from a tool's 3.9626 gallons.  Integers are not matched this
    way (too many invented integers would round from something).
    """
    decimals = _decimals(x)
    return decimals is not None and g.rounded(x, decimals)


def index_of(texts: Sequence[str], source: Source = "grounding") -> GroundingIndex:
    """A :class:`~toolguard.grounding.GroundingIndex` of a few texts (tool docs, KG facts)."""
    index = GroundingIndex()
    index.extend(SourcedText(t, source) for t in texts)
    return index


def iter_leaves(
    value: Any, path: str, schema: Any
) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """``(json path, leaf value, leaf schema)`` for every scalar in ``value`` (lists: first 50)."""
    sch = schema if isinstance(schema, dict) else {}
    if isinstance(value, dict):
        raw_props = sch.get("properties")
        props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
        for k, v in value.items():
            yield from iter_leaves(v, f"{path}.{k}" if path else str(k), props.get(k, {}))
    elif isinstance(value, (list, tuple)):
        items = sch.get("items", {})
        for i, v in enumerate(value[:50]):
            yield from iter_leaves(v, f"{path}[{i}]", items)
    else:
        yield path, value, sch


@register_detector
class ContentDetector(Detector):
    """Flags argument values that need user-given facts and appear nowhere in the conversation.

    Args:
        fuzzy_threshold: ``rapidfuzz.fuzz.partial_ratio`` score (0-100) at which a string
            value counts as found (typos, casing, punctuation).
        token_share: Share of a value's tokens that must be found for a multi-word value.
        judge_model: Optional chat model for the paper's "Check Content Hallucination" prompt.
        llm_mode: ``"off"`` (default if no model), ``"confirm"`` (default with a model:
            the LLM decides only the calls the rules flag), ``"always"`` (the LLM decides
            every call that has arguments).
        max_value_chars: Longer string values are treated as free text (not checked).
    """

    kind: ClassVar = "content"

    def __init__(
        self,
        *,
        fuzzy_threshold: float = 90.0,
        token_share: float = 0.6,
        judge_model: BaseChatModel | None = None,
        llm_mode: ContentLLMMode | None = None,
        max_value_chars: int = 120,
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
        self._tool_cache: dict[ToolSpec, GroundingIndex] = {}
        self._judge = (
            LLMJudge(judge_model, prompt="check_content_hallucination",
                     labels=("Untruthful", "Truthful", "Unsure"))
            if judge_model is not None
            else None
        )

    @classmethod
    def from_options(cls, options: DetectorOptions) -> ContentDetector:
        """The detector with the guard's judge model and content LLM mode."""
        mode = options.content_llm_mode
        if mode is not None and mode not in ("off", "confirm", "always"):
            raise ConfigurationError(
                f"content_llm_mode must be 'off', 'confirm' or 'always', got {mode!r}")
        return cls(judge_model=options.judge_model,
                   llm_mode=mode)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ rules
    def ungrounded(self, call: ProposedCall, ctx: CheckContext) -> list[tuple[str, Any, str]]:
        """``(parameter path, value, why)`` for each value rules 1-4 find ungrounded.

        Lookups go to the conversation's :class:`~toolguard.grounding.GroundingIndex`
        (each message indexed once), the extra grounding and the tool's own docs: the cost
        is the size of the arguments, not of the history.
        """
        spec = ctx.specs.get(call.name)
        if spec is None or not call.args:
            return []
        said = [ctx.conversation.grounding]
        if ctx.extra_grounding:
            said.append(ctx.memo("content.extra", lambda: index_of(ctx.extra_grounding)))
        docs = self._tool_grounding(spec)
        out: list[tuple[str, Any, str]] = []
        for path, value, schema in iter_leaves(call.args, "", {"properties": spec.properties}):
            why = self._needs_fact(path, value, schema)
            if why is None:
                continue
            if any(self._found(value, g, why) for g in said) or self._found(value, docs):
                continue
            out.append((path, value, why))
        return out

    def _tool_grounding(self, spec: ToolSpec) -> GroundingIndex:
        """Grounding from the tool's own description and schema (rule 2), cached per spec."""
        cached = self._tool_cache.get(spec)
        if cached is None:
            cached = index_of([spec.description, json.dumps(spec.parameters, default=str)])
            if len(self._tool_cache) >= 4096:
                self._tool_cache.clear()
            self._tool_cache[spec] = cached
        return cached

    def _needs_fact(self, path: str, value: Any, schema: dict[str, Any]) -> str | None:
        """Why ``value`` needs a user-given fact, or ``None`` if it can be inferred (rule 3)."""
        if value is None or isinstance(value, bool):
            return None
        if "enum" in schema or ("default" in schema and schema.get("default") == value):
            return None
        leaf = re.sub(r"\[\d+\]", "", path).rsplit(".", 1)[-1]
        if _FREE_TEXT_PARAM.search(_snake(leaf)):
            return None
        if isinstance(value, (int, float)):
            # 0 and 1 are identities/defaults ("from rest", "a pizza"): inferable
            name = _snake(leaf)
            if abs(value) in (0, 1) or _INFERABLE_NUMBER_PARAM.search(name):
                return None
            return "time number" if _TIME_NUMBER_PARAM.search(name) else "number"
        if not isinstance(value, str):
            return None
        v = value.strip()
        if not v or len(v) > self.max_value_chars:
            return None
        if _EMAIL.match(v):
            return "email"
        if _URL.match(v):
            return "url"
        if _DATE.match(v):
            return "date"
        if _CODE.match(v):
            return None  # "CA", "USD", "AAPL": codes inferable from common knowledge
        if _ID_LIKE.match(v):
            return "id"
        if re.fullmatch(r"[-+]?\d+(\.\d+)?", v):
            return None if abs(float(v)) in (0, 1) else "number"
        words = v.split()
        if len(words) <= 6 and any(w[:1].isupper() for w in words):
            return "name"
        return None

    def _found(self, value: Any, g: GroundingIndex, kind: str = "") -> bool:
        if kind == "time number" and g.relative_dates:
            return True
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            x = float(value)
            return bool(g.number(x).found or g.derived(abs(x), _decimals(abs(x))).found
                        or _rounded_from(abs(x), g))
        raw = str(value).strip()
        if _DATE.match(raw):
            return self._date_found(raw, g)
        tokens = tokens_of(raw)
        if not tokens:
            return True
        if self._phrase_found(tokens, g):
            return True
        # "Berkeley, CA", "Europe/London": any substantial segment grounds the value
        segments = [tokens_of(p) for p in re.split(r"[,/;|]", raw)]
        if len(segments) > 1:
            return any(len("".join(p)) >= 4 and self._phrase_found(p, g) for p in segments)
        return False

    def _phrase_found(self, tokens: list[str], g: GroundingIndex) -> bool:
        if g.phrase(tokens).found:
            return True
        if len(tokens) > 1:
            initials = "".join(t[0] for t in tokens)
            if len(initials) >= 2 and g.tokens.get(initials, 0):  # "LA" for "Los Angeles"
                return True
            hits = sum(1 for t in tokens if self._token_found(t, g))
            return hits / len(tokens) >= self.token_share
        t = tokens[0]
        return not t.isdigit() and self._token_found(t, g)

    @staticmethod
    def _token_found(t: str, g: GroundingIndex) -> bool:
        if g.token(t).found or (len(t) >= 3 and (g.token(t + "s").found or g.token(
                t + "es").found or (t.endswith("s") and g.token(t[:-1]).found))):
            return True  # "Big Mac" for "two Big Macs"
        if t.replace(".", "", 1).isdigit():
            return g.number(float(t)).found
        if t in WORD_NUMBERS:
            return g.number(float(WORD_NUMBERS[t])).found
        if len(t) < 4:
            return False
        # abbreviations and typos: "fran" ~ "francisco", "philly" ~ "philadelphia",
        # "german" ~ "germany", "chcicago" ~ "chicago" (candidates share 3 letters)
        for c in g.candidates(t):
            if len(c) < 4:
                continue
            pairs = zip(c, t, strict=False)
            shared = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(c), len(t)))
            if shared >= 4 and shared >= 0.6 * min(len(c), len(t)):
                return True
            if len(t) >= 5 and len(c) >= 5 and fuzz.ratio(c, t) >= 85:
                return True
        return False

    @staticmethod
    def _date_found(raw: str, g: GroundingIndex) -> bool:
        """Whether a date's day and month appear, or a relative date was used.

        Day and month may appear as numbers or month names; a relative date ("this Friday")
        is one the model had to resolve itself.
        """
        if g.relative_dates:
            return True
        parts = [float(p) for p in re.findall(r"\d+", raw)[:3]]
        if len(parts) < 3:
            return False
        if parts[0] > 31:  # ISO: year-month-day
            _, month, day = parts
        else:  # 05/01/2023 (US) or 01/05/2023: either order
            month, day = parts[0], parts[1]
        return (g.number(month).found and g.number(day).found) or (
            g.number(parts[0]).found and g.number(parts[1]).found)

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
                    f"{kind} value {value!r} for '{path}' appears nowhere in the conversation"
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
        return Verdict(
            tool_call_id=call.id,
            tool_name=call.name,
            action="ask_user",
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

