"""toolguard: make tool-calling LLM agents reliable.

Public API:

- :class:`Guard` checks the tool calls of an ``AIMessage`` and returns one
  :class:`Verdict` per call (RelyToolBench's type / timing / format / content).
- :class:`GuardNode` drops the guard into any LangGraph ``StateGraph`` between the model
  node and the tool node.
- :class:`RetryController` retries transient tool errors a bounded number of times, then
  skips the step or finishes (CRITICTOOL); ``toolguard.middleware`` wraps it for
  LangChain's ``create_agent``.
- :class:`Precheck` / :class:`PrecheckNode` decide, before the model acts, whether to
  proceed, ask the user or say no tool fits (the ICT paper's Structured Verification).
- :class:`KnowledgeGraph`, :class:`KGStore` and :class:`KGResolveNode` resolve personal
  references ("my mom's favourite restaurant") through a per-user knowledge graph before
  the model acts (FamilyTool / KGETool).
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
from toolguard.kg import (
    DeterministicPathGenerator,
    KGResolveNode,
    KGStore,
    KnowledgeGraph,
    LLMPathGenerator,
    Resolution,
    kg_search,
)
from toolguard.node import (
    AskUserNode,
    GuardCounters,
    GuardNode,
    GuardState,
    merge_counters,
    needs_guard,
)
from toolguard.precheck import (
    Precheck,
    PrecheckDecision,
    PrecheckLabel,
    PrecheckMode,
    StructuredVerificationAnswer,
)
from toolguard.precheck_node import PrecheckAskNode, PrecheckNode, PrecheckState
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
    "KGResolveNode",
    "KGStore",
    "KnowledgeGraph",
    "LLMPathGenerator",
    "LLMRelevanceJudge",
    "LexicalRelevanceJudge",
    "Precheck",
    "PrecheckAskNode",
    "PrecheckDecision",
    "PrecheckLabel",
    "PrecheckMode",
    "PrecheckNode",
    "PrecheckState",
    "RelevanceJudge",
    "RelevanceResult",
    "Resolution",
    "RetryController",
    "StructuredVerificationAnswer",
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
