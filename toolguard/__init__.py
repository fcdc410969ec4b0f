"""toolguard: make tool-calling LLM agents reliable.

Public API:

- :class:`Guard` checks the tool calls of an ``AIMessage`` and returns one
  :class:`Verdict` per call (RelyToolBench's type / timing / format / content).
- :class:`GuardNode` drops the guard into any LangGraph ``StateGraph`` between the model
  node and the tool node.
- :class:`RetryController` retries transient tool errors a bounded number of times, then
  skips the step or finishes (CRITICTOOL); ``toolguard.middleware`` wraps it for
  LangChain's ``create_agent``.
- :class:`ToolSpec` is the typed tool description every component shares.
"""

from toolguard.controller import (
    Classification,
    RetryController,
    ToolPolicy,
    classify_exception,
    classify_result,
)
from toolguard.detectors import (
    ContentDetector,
    Detector,
    FormatDetector,
    TimingDetector,
    TypeDetector,
)
from toolguard.guard import Guard
from toolguard.kg import DeterministicPathGenerator, KnowledgeGraph, Resolution, kg_search
from toolguard.node import (
    AskUserNode,
    GuardCounters,
    GuardNode,
    GuardState,
    merge_counters,
    needs_guard,
)
from toolguard.precheck import Precheck, PrecheckDecision
from toolguard.relevance import (
    EmbeddingRelevanceJudge,
    LexicalRelevanceJudge,
    LLMRelevanceJudge,
    RelevanceJudge,
    RelevanceResult,
)
from toolguard.specs import ToolSpec
from toolguard.types import Action, Evidence, HallucinationType, Verdict

__all__ = [
    "Action",
    "AskUserNode",
    "Classification",
    "ContentDetector",
    "Detector",
    "DeterministicPathGenerator",
    "EmbeddingRelevanceJudge",
    "Evidence",
    "FormatDetector",
    "Guard",
    "GuardCounters",
    "GuardNode",
    "GuardState",
    "HallucinationType",
    "KnowledgeGraph",
    "LLMRelevanceJudge",
    "LexicalRelevanceJudge",
    "Precheck",
    "PrecheckDecision",
    "RelevanceJudge",
    "RelevanceResult",
    "Resolution",
    "RetryController",
    "TimingDetector",
    "ToolPolicy",
    "ToolSpec",
    "TypeDetector",
    "Verdict",
    "classify_exception",
    "classify_result",
    "kg_search",
    "merge_counters",
    "needs_guard",
]
__version__ = "0.1.0"
