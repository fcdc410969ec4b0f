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
from functools import lru_cache
from typing import Any, ClassVar, Literal

from langchain_core.language_models import BaseChatModel
from rapidfuzz import fuzz

from toolguard.context import CheckContext, ProposedCall
from toolguard.conversation import Source, SourcedText
from toolguard.detectors.base import Detector, DetectorOptions, register_detector
from toolguard.errors import ConfigurationError
from toolguard.grounding import (
    ARITHMETIC_CUE,
    WORD_NUMBERS,
    GroundingIndex,
    GroundingView,
    tokens_of,
)
from toolguard.judge import JudgeResult, LLMJudge
from toolguard.specs import ToolSpec
from toolguard.text import STOPWORDS, has_hidden_characters
from toolguard.types import Evidence, Verdict
from toolguard.units import factors_named

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", re.I)
_URL = re.compile(r"^(https?://|www\.)\S+$", re.I)
_DATE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[T ][\d:.]+Z?)?$"
                   r"|^(\d{1,2})[/.-](\d{1,2})[/.-](\d{2,4})$")
_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?::\d{2})?\s*([ap]\.?m\.?)?$", re.I)
MAX_TEXT_CHARS = 4000
"""Free text is read for facts up to this many characters (a 1 MB argument costs no more)."""
_CELL = re.compile(r"\b([A-Z]{1,3})\$?\d+\b")
_EXTENSION = re.compile(r"\.([A-Za-z][A-Za-z0-9]{1,4})$")
_NUMERIC = re.compile(r"^[-+]?\d+(\.\d+)?$")
_CODE = re.compile(r"^[A-Z]{2,5}$")
_PATH = re.compile(r"^(?:[A-Za-z]:\\|~?/|\./|\.\./)\S*$|^\S+\.[A-Za-z0-9]{2,5}$")
_IDENT = re.compile(
    r"^(?=\S*[A-Za-z0-9])(?:(?=\S*\d)(?=\S*[A-Za-z])\S{3,}|\S*[A-Za-z0-9][._\-/:#@+][A-Za-z0-9]\S*)$")
_SENTENCE = re.compile(r"(?<!\b[A-Z])[.!?;:]\s|\n|(?<!\b[A-Z])[.!?]$")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")

# numeric parameters that are settings or common knowledge (rule 3: "number of limits")
_INFERABLE_NUMBER_PARAM = re.compile(
    r"(^|_)(n|k|limit|top|top_k|page|outcomes|sides|cards|temperature|volume|threshold|"
    r"permittivity|permeability|constant|factor|precision|decimals?|round|max_results|"
    r"per_page|offset|timeout|retries|seed|verbosity|page_size|num_results)s?$",
    re.I,
)
# time spans and calendar numbers: inferable when the user speaks in relative time
# ("next week" -> days=7, "this year" -> year=2026, "monthly" -> periods=12)
_TIME_NUMBER_PARAM = re.compile(
    r"(^|_)(year|years|month|months|day|days|hour|hours|minute|minutes|second|seconds|"
    r"duration|time[_]?frame|time[_]?span|period|periods|interval|ahead)$",
    re.I,
)
_GENERIC = frozenset("united republic kingdom states state federal democratic people "
                     "islands island north south east west new great".split())
"""Words of ISO names too common to identify a country or currency on their own."""
_ALIASES = {"gb": ("uk", "britain", "british", "england", "english", "london"),
            "gbp": ("uk", "british", "sterling", "pound", "pounds", "quid"),
            "us": ("usa", "america", "american"), "usa": ("us", "america", "american"),
            "usd": ("dollar", "dollars", "usd", "bucks"), "eur": ("euro", "euros")}
_FILLERS = frozenset(
    "hi hello dear best regards thanks thank kind cheers sincerely yours mr mrs ms dr re fwd "
    "fw please note ok okay yes no sure".split())

ContentLLMMode = Literal["off", "confirm", "always"]


def _snake(name: str) -> str:
    """``ingredientLimit`` -> ``ingredient_limit``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def path_climbs(raw: str) -> bool:
    """Whether a ``..`` in path ``raw`` leaves a folder the path itself names.

    ``/data/scratch/../..`` resolves to ``/``: it names a folder and climbs out of it, which
    no one writes for a place they mean, so such a value is never taken as stated.  A path
    that only starts with ``..`` (``../notes.txt``) climbs out of nothing it names.
    """
    named = False
    for part in re.split(r"[\\/]", raw):
        if part == ".." and named:
            return True
        if part not in ("", ".", ".."):
            named = True
    return False


def _parameter_words(path: str, schema: dict[str, Any]) -> frozenset[str]:
    """Folded words of a leaf parameter's name and description (``duration_minutes``)."""
    leaf = _snake(re.sub(r"\[\d+\]", "", path).rsplit(".", 1)[-1]).replace("_", " ")
    description = schema.get("description")
    text = f"{leaf} {description}" if isinstance(description, str) else leaf
    return frozenset(tokens_of(text[:500]))


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


def _rounded_from(x: float, g: GroundingView) -> bool:
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
        said = [ctx.conversation.grounding, self._tool_grounding(spec)]
        if ctx.extra_grounding:
            said.append(ctx.memo("content.extra", lambda: index_of(ctx.extra_grounding)))
        view = GroundingView(said)
        # a derived number needs the request to ask for arithmetic ("split the bill")
        view.arithmetic_cues = int(bool(ARITHMETIC_CUE.search(ctx.request or "")))
        out: list[tuple[str, Any, str]] = []
        for path, value, schema in iter_leaves(call.args, "", {"properties": spec.properties}):
            why = self._needs_fact(path, value, schema)
            if why is None or self._found(value, view, why, _parameter_words(path, schema)):
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
        """The kind of fact ``value`` states (module docstring), or ``None`` if inferable.

        Decided from the value's shape, not the parameter's name: ``email``, ``url``,
        ``path``, ``date``, ``time``, ``number``, ``code`` (2-5 capitals), ``identifier``
        (letters with digits, or alphanumeric runs joined by ``._-/:#@+``), ``name`` (up to
        six words, each capitalised), ``phrase`` (up to eight words, e.g. a search query),
        ``text`` (free text: its facts are checked), ``cjk`` (Chinese/Japanese/Korean),
        ``invisible`` (a value carrying invisible or bidirectional control characters:
        never stated, :func:`~toolguard.text.has_hidden_characters`).
        Enum members, the schema default, booleans, ``None``, 0 and 1 are inferable.
        """
        if value is None or isinstance(value, bool):
            return None
        if "enum" in schema or ("default" in schema and schema.get("default") == value):
            return None
        leaf = _snake(re.sub(r"\[\d+\]", "", path).rsplit(".", 1)[-1])
        if isinstance(value, (int, float)):
            if abs(value) in (0, 1) or _INFERABLE_NUMBER_PARAM.search(leaf):
                return None
            return "time number" if _TIME_NUMBER_PARAM.search(leaf) else "number"
        if not isinstance(value, str):
            return None
        v = value.strip()
        if not v:
            return None
        if has_hidden_characters(v, strict=len(v) <= self.max_value_chars):
            return "invisible"  # never read as stated: it does not show what it is
        if len(v) > self.max_value_chars:
            return "text"
        return value_kind(v)

    def _found(self, value: Any, g: GroundingView, kind: str = "",
               parameter: frozenset[str] = frozenset()) -> bool:
        """Whether ``value`` (of ``kind``) is stated in ``g`` (rules 1-3).

        ``parameter``: the folded words of the parameter's name and description (the units
        a number may be converted to, :mod:`toolguard.units`).
        """
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self._number_found(float(value), g, kind, parameter)
        raw = str(value).strip()
        if kind == "invisible":
            return False
        if kind == "number":
            return self._number_found(float(raw), g, kind, parameter)
        if kind == "date":
            return _date_found(raw, g)
        if kind == "time":
            m = _TIME.match(raw)
            if m is None:
                return True
            h, mi = int(m.group(1)), int(m.group(2))
            if m.group(3) and m.group(3).lower().startswith("p") and h < 12:
                h += 12
            return g.time(h % 24, mi).found
        if kind == "cjk":
            return all(g.token(t).found or g.cjk_text(t).found for t in tokens_of(raw))
        tokens = tokens_of(raw)
        if not tokens:
            return True
        if kind in ("email", "url", "identifier"):
            return self._exact_found(raw, tokens, g, kind)
        if kind == "path":  # the file or folder it names; the directories above it may
            # be the model's knowledge of the layout ("/home/alice/" for "my notes.txt")
            if path_climbs(raw):  # "/data/scratch/../..": nobody states a path that way
                return False
            segs = [p for p in re.split(r"[\\/]", raw) if tokens_of(p)]
            if not segs:
                return True
            last = segs[-1]
            return g.phrase(tokens_of(last)).found or self._exact_found(
                last, tokens_of(last), g, "identifier")
        if kind == "formula":  # "=SUM(B2:B15)": the columns it reads must be named
            return all(g.token(ref.casefold()).found or g.token(col.casefold()).found
                       for ref, col in ((m.group(0), m.group(1)) for m in _CELL.finditer(raw)))
        if kind == "code":
            # an unknown code (LAX, AAPL) is common knowledge unless the conversation
            # deals in codes (a symbol lookup returned one)
            return _code_found(raw, g) or (not _code_names(raw) and (
                len(raw.strip()) <= 3 or not g.codes))
        if kind == "name":
            return self._name_found(raw, tokens, g)
        if kind == "phrase":
            content = [t for t in tokens if t not in STOPWORDS and len(t) >= 3]
            if len(content) < 2:  # one common word ("english", "economy"): a setting
                return True
            return g.phrase(tokens).found or any(self._token_found(t, g) for t in content)
        if kind == "text":
            return not self._text_unfounded(raw, g)
        return True

    def _number_found(self, x: float, g: GroundingView, kind: str,
                      parameter: frozenset[str] = frozenset()) -> bool:
        """Whether number ``x`` is stated.

        Stated means: stated itself (sign kept), rounded from a stated number, one arithmetic
        step from a tool-result number when the request asks for arithmetic, or a unit
        conversion of a stated number where both units are named
        (:func:`toolguard.units.factors_named`).
        """
        if kind == "time number" and g.relative_dates:
            return True
        ax = abs(x)
        if g.standalone_number(x).found or _rounded_from(x, g):
            return True
        # a number inside a date or an identifier: only when unlikely to be a coincidence
        if (ax >= 100 or not ax.is_integer()) and g.number(x).found:
            return True
        if g.arithmetic_cues and g.derived(x, _decimals(ax)).found:
            return True
        factors = factors_named(lambda w: w in parameter or g.token(w).found)
        for f in factors:
            for c in (x * f, x / f):
                if c and g.standalone_number(c).found:
                    return True
        return False

    def _exact_found(self, raw: str, tokens: list[str], g: GroundingView, kind: str) -> bool:
        """Emails, URLs, identifiers: every token stated.

        No near-spellings or partial matches (``mallory@evil.example`` is not
        ``attacker@evil.example``).
        """
        if kind == "url":
            tokens = [t for t in tokens if t not in ("http", "https", "www")]
            if not tokens:
                return True
        elif kind == "identifier" and _EXTENSION.search(raw) and len(tokens) > 1:
            tokens = tokens[:-1]  # "report_draft.txt": the extension is the model's to add
        if g.phrase(tokens).found or g.token("".join(tokens)).found:
            return True
        if kind == "email":
            return False
        return all(g.token(t).found or (
            t.isalpha() and len(t) >= 3 and (g.token(t + "s").found or (
                t.endswith("s") and g.token(t[:-1]).found))) for t in tokens)

    def _name_found(self, raw: str, tokens: list[str], g: GroundingView) -> bool:
        """A name: every distinctive word stated (typos and plurals tolerated).

        Or its initials ("LA"), or, for ``"Berkeley, CA"``, the first part plus well-known places.
        """
        if g.phrase(tokens).found:
            return True
        if len(tokens) > 1:
            initials = "".join(t[0] for t in tokens)
            if len(initials) >= 2 and g.token(initials).found:
                return True
        parts = [p.strip() for p in re.split(r"[,;|]", raw) if p.strip()]
        if len(parts) > 1:
            first = tokens_of(parts[0])
            initials = "".join(t[0] for t in first)
            return (g.phrase(first).found or self._all_words(first, g) or (
                len(first) > 1 and g.token(initials).found)) and all(
                _known_place(p) or _code_found(p, g) or self._all_words(tokens_of(p), g)
                for p in parts[1:])
        return self._all_words(tokens, g) or any(g.token(c).found for c in _place_codes(raw))

    def _all_words(self, tokens: list[str], g: GroundingView) -> bool:
        words = [t for t in tokens if t not in STOPWORDS and t not in _FILLERS]
        if not words:
            return True
        found = sum(1 for t in words if self._token_found(t, g))
        return found == len(words) or found / len(words) >= self.token_share

    def _text_unfounded(self, raw: str, g: GroundingView) -> bool:
        """Free text (a message body, a note): whether a fact it states is ungrounded.

        Facts are names (capitalised words inside a sentence), numbers, emails, URLs, identifiers,
        dates and times; the wording itself is the model's.
        """
        for fact, kind in text_facts(raw[:MAX_TEXT_CHARS]):
            if kind == "number":
                try:
                    x = float(fact.replace(",", ""))
                except ValueError:
                    continue
                if abs(x) in (0, 1) or self._number_found(x, g, "number"):
                    continue
                return True
            if not self._found(fact, g, kind):
                return True
        return False

    def _token_found(self, t: str, g: GroundingView) -> bool:
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
            if len(t) >= 5 and len(c) >= 5 and fuzz.ratio(c, t) >= self.fuzzy_threshold:
                return True
        return False

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
                    "characters" if kind == "invisible"
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



def value_kind(v: str) -> str | None:
    """The fact kind of a string value by its shape (see ``ContentDetector._needs_fact``)."""
    if _CJK.search(v):
        return "cjk"
    if v.startswith("=") and _CELL.search(v):
        return "formula"
    if _EMAIL.match(v):
        return "email"
    if _URL.match(v):
        return "url"
    if _DATE.match(v):
        return "date"
    if _TIME.match(v):
        return "time"
    if _NUMERIC.match(v):
        if v.isdigit() and (len(v) >= 4 or v.startswith("0")) and len(v) > 1:
            return "identifier"  # "0004", "90210", "12345": the digits, not the amount
        return None if abs(float(v)) in (0, 1) else "number"
    if _CODE.match(v):
        return "code"
    if "/" in v and _is_zone(v):
        return None  # "Europe/London": a place normalised to its time zone
    if " " not in v and _PATH.match(v) and any(c in v for c in "/\\."):
        return "path" if ("/" in v or "\\" in v) else "identifier"
    if " " not in v and _IDENT.match(v):
        return "identifier"
    words = v.split()
    if len(words) <= 6 and not _SENTENCE.search(v) and all(
            w[:1].isupper() or w[:1].isdigit() or w.lower() in STOPWORDS for w in words) and any(
            w[:1].isupper() for w in words):
        return "name"
    if len(words) <= 8 and not _SENTENCE.search(v):
        return "phrase"
    return "text"


_FACT = re.compile(
    r"(?<![\w.+-])[\w.+-]+@[^\s@]+\.[a-z]{2,}|https?://\S+|www\.\S+|\d{4}-\d{1,2}-\d{1,2}|\d{1,2}:\d{2}(?:\s*[ap]m)?"
    r"|(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?![\w.]*\w)|\b(?=[\w-]{0,40}[A-Za-z])(?=[\w-]{0,40}\d)[\w-]{3,80}"
    r"|(?<![.!?:]\s)(?<!^)\b[A-Z][a-z][\w'-]*(?:\s+[A-Z][\w'-]*)*", re.M)


def text_facts(text: str) -> list[tuple[str, str]]:
    """``(fact, kind)`` pairs of free text.

    Emails, URLs, dates, times, numbers, identifiers and names (capitalised words not opening a
    sentence, fillers like "Best" dropped).
    """
    out: list[tuple[str, str]] = []
    for m in _FACT.finditer(text):
        f = m.group(0).rstrip(".,;:!?)")
        if not f:
            continue
        if "@" in f:
            out.append((f, "email"))
        elif f.lower().startswith(("http", "www.")):
            out.append((f, "url"))
        elif _DATE.match(f):
            out.append((f, "date"))
        elif _TIME.match(f):
            out.append((f, "time"))
        elif _NUMERIC.match(f.replace(",", "")):
            out.append((f, "number"))
        elif any(c.isdigit() for c in f):
            out.append((f, "identifier"))
        else:
            words = [w for w in f.split() if w.lower() not in _FILLERS
                     and w.lower() not in STOPWORDS and w.lower() not in WORD_NUMBERS]
            if words:
                out.append((" ".join(words), "name"))
    return out


def _date_found(raw: str, g: GroundingView) -> bool:
    """A date value: month and day stated together, or a relative phrase resolving to it."""
    m = _DATE.match(raw)
    if m is None:
        return True
    if m.group(1):
        y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
        return g.date(y, mo, d).found
    a, b, y = int(m.group(4)), int(m.group(5)), int(m.group(6))
    y = y + 2000 if y < 100 else y
    return g.date(y, a, b).found or g.date(y, b, a).found


@lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    import zoneinfo

    return frozenset(zoneinfo.available_timezones())


def _is_zone(v: str) -> bool:
    return v in _zones()


@lru_cache(maxsize=8192)
def _code_names(code: str) -> tuple[tuple[str, ...], ...]:
    """Token lists of what an ISO code may stand for.

    Countries (alpha-2/3), currencies
    (ISO 4217, the name's last word: "euro", "rand") and subdivisions (``CA`` ->
    California), from ``pycountry``.
    """
    import pycountry

    names: list[str] = []
    up = code.upper()
    try:
        c = pycountry.countries.get(alpha_2=up) if len(up) == 2 else (
            pycountry.countries.get(alpha_3=up) if len(up) == 3 else None)
        if c is not None:
            names += [c.name, getattr(c, "common_name", ""), getattr(c, "official_name", "")]
        cur = pycountry.currencies.get(alpha_3=up) if len(up) == 3 else None
        if cur is not None:
            names += [cur.name, cur.name.split()[-1]]
        if len(up) in (2, 3):
            for country in ("US", "CA", "AU", "GB", "IN", "DE", "CN"):
                code_ = f"{country}-{up}"
                sub = pycountry.subdivisions.get(code=code_)  # type: ignore[no-untyped-call]
                if sub is not None:
                    names.append(sub.name)
    except (KeyError, LookupError):
        pass
    return tuple(tuple(tokens_of(n)) for n in names if n)


@lru_cache(maxsize=8192)
def _known_place(part: str) -> bool:
    """A country or subdivision name or code (``"USA"``, ``"California"``, ``"CA"``)."""
    import pycountry

    p = part.strip()
    if _CODE.match(p):
        return bool(_code_names(p))
    try:
        pycountry.countries.lookup(p)
        return True
    except LookupError:
        pass
    return any(s.name.casefold() == p.casefold() for s in pycountry.subdivisions
               if s.country_code in ("US", "CA", "AU", "GB"))


@lru_cache(maxsize=8192)
def _place_codes(name: str) -> tuple[str, ...]:
    """Folded ISO codes of a country or subdivision name ("California" -> ``ca``)."""
    import pycountry

    out: list[str] = []
    try:
        c = pycountry.countries.lookup(name)
        out += [c.alpha_2.casefold(), c.alpha_3.casefold()]
    except LookupError:
        pass
    for s in pycountry.subdivisions:
        if s.name.casefold() == name.casefold():
            out.append(s.code.split("-")[-1].casefold())
    return tuple(out)


def _code_found(raw: str, g: GroundingView) -> bool:
    """Whether a short code is grounded.

    It is stated, or what it stands for is (ISO names), or the initials of stated words ("NYC"),
    or its letters in order in a stated word ("TSLA": Tesla).
    """
    t = raw.strip().casefold()
    if g.token(t).found:
        return True
    for name in _code_names(raw.strip()):
        if name and (g.phrase(list(name)).found or any(
                g.token(w).found or g.token(w + "s").found
                for w in name if len(w) >= 4 and w not in STOPWORDS and w not in _GENERIC)):
            return True
    if t in _ALIASES and any(g.token(a).found for a in _ALIASES[t]):
        return True
    squeezed = re.sub(r"(.)\1+", r"\1", t)  # "aapl" -> "apl" for Apple
    for cand in g.tokens_starting(t[:1]):
        it = iter(cand)
        if cand[0] == t[0] and all(ch in it for ch in squeezed):
            return True
    return _initials_found(t, g)


def _initials_found(t: str, g: GroundingView) -> bool:
    """``nyc`` for "New York City": adjacent stated words whose initials spell ``t``."""
    if len(t) > 4 or len(t) < 2:
        return False
    for _, b in g.bigrams_starting(t[:1]):
        if b[:1] == t[1:2]:
            if len(t) == 2:
                return True
            if any(d[:1] == t[2:3] for _, d in g.bigrams_starting(b)):
                return True
    return False


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

