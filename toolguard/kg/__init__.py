"""Knowledge-graph parameter resolution (KGETool, FamilyTool paper).

- :class:`KnowledgeGraph` (``toolguard.kg.graph``): triples on networkx, FamilyTool's
  greedy extraction, ``KG.search`` parsing and the exact / GS / RR extraction modes.
- :class:`DeterministicPathGenerator` (``toolguard.kg.resolver``): relation paths without
  an LLM (kinship lexicon, relation-name words and synonyms, possessive chains,
  pronouns, two references per request); lexicons in ``toolguard.kg.lexicon``.
- :class:`LLMPathGenerator` (``toolguard.kg.llm``): KGETool's ``KG.search`` prompt with
  any LangChain chat model.
- :class:`KGStore` (``toolguard.kg.store``): per-user KGs in a LangGraph ``BaseStore``,
  versioned (one version item per user, changed by every write through it).
- :class:`KGCache` (``toolguard.kg.cache``): per-user graphs and resolvers kept between
  turns by KG version.
- :class:`KGTurnResolver` (``toolguard.kg.turn``): a user turn (resolve the new request,
  ask about a missing link, rewrite it) as one sans-IO plan; the engine of
  :class:`~toolguard.KGResolveMiddleware` and :class:`~toolguard.nodes.KGResolveNode`,
  whose state keys and marks its module lists.  ``toolguard.kg.plan``: the plan's I/O
  steps (store reads, the interrupt, a stream event) and its sync / async drivers;
  ``toolguard.kg.request``: rewriting the request with the resolved sub-KG.
- ``toolguard.kg.embed.EmbeddingSimilarity``: optional relation-name embedding
  similarity (``embed`` extra); not imported here.
"""

from toolguard.kg.cache import KGCache
from toolguard.kg.graph import (
    BAD_EXTRACT,
    ExtractionMode,
    KnowledgeGraph,
    Triple,
    kg_search,
    parse_search_calls,
    programs_for_links,
    search_program,
)
from toolguard.kg.llm import LLMPathGenerator
from toolguard.kg.request import EXTRA_INFO, format_sub_kg
from toolguard.kg.resolver import DeterministicPathGenerator, Resolution, relation_stem
from toolguard.kg.store import KGStore
from toolguard.kg.turn import KGTurnResolver

__all__ = [
    "BAD_EXTRACT",
    "EXTRA_INFO",
    "DeterministicPathGenerator",
    "ExtractionMode",
    "KGCache",
    "KGStore",
    "KGTurnResolver",
    "KnowledgeGraph",
    "LLMPathGenerator",
    "Resolution",
    "Triple",
    "format_sub_kg",
    "kg_search",
    "parse_search_calls",
    "programs_for_links",
    "relation_stem",
    "search_program",
]
