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

The deterministic judge (default) implements rules 1-4 by normalisation (casefold,
accents, separators, number words, percentages, month names) and fuzzy matching with
``rapidfuzz``.  Optionally an LLM judge (the paper's prompt through any LangChain chat
model) decides the values the deterministic rules flag (``llm_mode="confirm"``) or
every call (``llm_mode="always"``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from langchain_core.language_models import BaseChatModel
from rapidfuzz import fuzz

from toolguard.context import CheckContext, ProposedCall
from toolguard.detectors.base import Detector, DetectorOptions, register_detector
from toolguard.errors import ConfigurationError
from toolguard.judge import JudgeResult, LLMJudge
from toolguard.specs import ToolSpec
from toolguard.text import normalize
from toolguard.types import Evidence, Verdict

_NUM = re.compile(r"(?<![\d.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?", re.I)
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", re.I)
_URL = re.compile(r"^(https?://|www\.)", re.I)
_DATE = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}|^\d{1,2}[/.-]\d{1,2}[/.-]\d{2,4}$")
_ID_LIKE = re.compile(r"^(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9_\-:.#]{4,}$|^\d{5,}$")

_WORD_NUMBERS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
    "million": 1_000_000, "billion": 1_000_000_000, "dozen": 12, "half": 0.5,
    "quarter": 0.25, "twice": 2, "double": 2, "triple": 3, "single": 1, "once": 1,
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "pair": 2, "couple": 2,
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9,
    "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}

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


_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_RELATIVE_DATE = re.compile(
    r"\b(?:today|tonight|tomorrow|yesterday|weekend|" + _WEEKDAY + r"|"
    r"(?:this|next|last|past|coming|upcoming)\s+(?:hour|day|week|month|year|decade|century|"
    r"quarter|weekend|morning|afternoon|evening|night|" + _WEEKDAY + r")|"
    r"(?:\d+|[a-z]+)\s+(?:hours?|days?|weeks?|months?|years?)\s+(?:ago|from now)|"
    r"(?:daily|weekly|monthly|yearly|annually|quarterly|hourly)|"
    r"\d{1,2}\s*[ap]\.?m\.?)(?![a-z])",
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


@dataclass(frozen=True, slots=True)
class _Grounding:
    """Normalised view of everything the values may be grounded in."""

    text: str  # normalised, separators folded to spaces
    compact: str  # normalised, no separators at all
    tokens: frozenset[str]
    numbers: frozenset[float]
    derived: frozenset[float]  # one arithmetic step over tool-result numbers
    relative_dates: bool  # the text names a relative date ("this Friday", "tomorrow")


def _numbers_in(text: str) -> set[float]:
    out: set[float] = set()
    for m in _NUM.finditer(text):
        raw = m.group(0).replace(",", "")
        try:
            x = float(raw)
        except ValueError:
            continue
        out.add(x)
        out.add(abs(x))
    # every digit run on its own too: "2023.4.15", "5,10 and 15", "[22,33]"
    out.update(float(d) for d in re.findall(r"\d+", text))
    # "two dozen" grounds 24, "3 hundred" grounds 300
    for m in re.finditer(r"\b(\d+|[a-z]+)\s+(dozen|hundred|thousand|million)\b", text, re.I):
        head, unit = m.group(1).lower(), m.group(2).lower()
        base = float(head) if head.isdigit() else _WORD_NUMBERS.get(head)
        if base is not None:
            out.add(float(base) * _WORD_NUMBERS[unit])
    # two-digit years: "'19" grounds 2019 and 1919
    for m in re.finditer(r"['’](\d{2})\b", text):
        out.update((2000.0 + int(m.group(1)), 1900.0 + int(m.group(1))))
    for word in _TOKEN.findall(text.casefold()):
        if word in _WORD_NUMBERS:
            out.add(float(_WORD_NUMBERS[word]))
    # percentages and scaled forms: "5%" grounds 0.05, "2k" grounds 2000
    for m in re.finditer(r"(\d+(?:\.\d+)?)\s*(%|percent|k\b|m\b|million|thousand|billion)",
                         text, re.I):
        base = float(m.group(1))
        unit = m.group(2).lower()
        if unit in ("%", "percent"):
            out.add(round(base / 100, 10))
        elif unit in ("k", "thousand"):
            out.add(base * 1000)
        elif unit in ("m", "million"):
            out.add(base * 1_000_000)
        else:
            out.add(base * 1_000_000_000)
    return out


def _rounded_from(x: float, g: _Grounding) -> bool:
    """Whether ``x`` is a grounded or derived number rounded to its decimals.

    For 1-4 decimals only: 3.96 from a tool's 3.9626 gallons.  Integers are not matched this
    way (too many invented integers would round from something).
    """
    text = repr(x)
    if "e" in text or "." not in text:
        return False
    decimals = len(text.split(".")[1].rstrip("0"))
    if not 1 <= decimals <= 4:
        return False
    return any(round(n, decimals) == x for n in g.numbers | g.derived if n != x)


def _snake(name: str) -> str:
    """``ingredientLimit`` -> ``ingredient_limit``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def fold_text(text: str) -> str:
    """Casefolded, accent-free tokens joined by single spaces (separators dropped)."""
    return " ".join(_TOKEN.findall(normalize(text)))


def build_grounding(texts: list[str], results: list[str] | None = None) -> _Grounding:
    """Normalise grounding texts once per check (shared by all calls).

    Args:
        texts: Everything values may be quoted from (user turns, tool results, ...).
        results: Tool results; numbers computed from one of them and any grounded number
            with one step (``+ - * /``) count as grounded ("fill up to 50" after
            ``fuelLevel: 10`` gives 40).  At most 40 result numbers are combined.
    """
    joined = "\n".join(texts)
    numbers = _numbers_in(normalize(joined))
    derived: set[float] = set()
    if results:
        from_results = sorted(_numbers_in(normalize("\n".join(results))))[:40]
        for a in from_results:
            for b in numbers:
                derived.update((round(a + b, 6), round(abs(a - b), 6), round(a * b, 6)))
                if b:
                    derived.add(round(a / b, 6))
                if a:
                    derived.add(round(b / a, 6))
    folded = fold_text(joined)
    return _Grounding(
        text=folded,
        compact=folded.replace(" ", ""),
        tokens=frozenset(folded.split()),
        numbers=frozenset(numbers),
        derived=frozenset(derived),
        relative_dates=bool(_RELATIVE_DATE.search(joined)),
    )


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
        self._tool_cache: dict[ToolSpec, _Grounding] = {}
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
        """``(parameter path, value, why)`` for each value rules 1-4 find ungrounded."""
        spec = ctx.specs.get(call.name)
        if spec is None or not call.args:
            return []
        ground: _Grounding = ctx.memo("content.grounding", lambda: build_grounding(
            ctx.grounding_texts, ctx.tool_texts))
        tool_text = self._tool_grounding(spec)
        out: list[tuple[str, Any, str]] = []
        for path, value, schema in iter_leaves(call.args, "", {"properties": spec.properties}):
            why = self._needs_fact(path, value, schema)
            if why is None:
                continue
            if self._found(value, ground, why) or self._found(value, tool_text):
                continue
            out.append((path, value, why))
        return out

    def _tool_grounding(self, spec: ToolSpec) -> _Grounding:
        """Grounding from the tool's own description and schema (rule 2), cached per spec."""
        cached = self._tool_cache.get(spec)
        if cached is None:
            cached = build_grounding([spec.description, json.dumps(spec.parameters, default=str)])
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

    def _found(self, value: Any, g: _Grounding, kind: str = "") -> bool:
        if kind == "time number" and g.relative_dates:
            return True
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            x = float(value)
            if abs(x) in g.numbers or round(x * 100, 8) in g.numbers or (
                    x != 0 and round(x / 100, 10) in g.numbers) or round(abs(x), 6) in g.derived:
                return True
            return _rounded_from(abs(x), g)
        raw = str(value).strip()
        if _DATE.match(raw):
            return self._date_found(raw, g)
        text = fold_text(raw)
        if not text:
            return True
        if self._phrase_found(text, g):
            return True
        # "Berkeley, CA", "Europe/London": any substantial segment grounds the value
        segments = [fold_text(p) for p in re.split(r"[,/;|]", raw)]
        if len(segments) > 1:
            return any(len(p) >= 4 and self._phrase_found(p, g) for p in segments)
        return False

    def _phrase_found(self, text: str, g: _Grounding) -> bool:
        if f" {text} " in f" {g.text} " or (len(text) >= 4 and text.replace(" ", "") in g.compact):
            return True
        tokens = text.split()
        if len(tokens) > 1:
            initials = "".join(t[0] for t in tokens)
            if len(initials) >= 2 and initials in g.tokens:  # "LA" for "Los Angeles"
                return True
            hits = sum(1 for t in tokens if self._token_found(t, g))
            if hits / len(tokens) >= self.token_share:
                return True
        elif self._token_found(text, g) and not text.isdigit():
            return True
        if 4 <= len(text) <= 60:
            return fuzz.partial_ratio(text, g.text) >= self.fuzzy_threshold
        return False

    @staticmethod
    def _token_found(t: str, g: _Grounding) -> bool:
        if t in g.tokens:
            return True
        if t.replace(".", "", 1).isdigit():
            return float(t) in g.numbers
        if t in _WORD_NUMBERS:
            return float(_WORD_NUMBERS[t]) in g.numbers
        if len(t) < 4:
            return False
        # abbreviations and typos: "fran" ~ "francisco", "philly" ~ "philadelphia",
        # "german" ~ "germany", "chcicago" ~ "chicago"
        for c in g.tokens:
            if c[:1] != t[:1] or len(c) < 4:
                continue
            pairs = zip(c, t, strict=False)
            shared = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(c), len(t)))
            if shared >= 4 and shared >= 0.6 * min(len(c), len(t)):
                return True
            if len(t) >= 5 and len(c) >= 5 and fuzz.ratio(c, t) >= 85:
                return True
        return False

    @staticmethod
    def _date_found(raw: str, g: _Grounding) -> bool:
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
        return {month, day} <= g.numbers or {parts[0], parts[1]} <= g.numbers

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

