"""toolguard: make tool-calling LLM agents reliable.

Public API:

- :class:`Guard` checks the tool calls of an ``AIMessage`` and returns one
  :class:`Verdict` per call (RelyToolBench's type / timing / format / content).
- :class:`GuardNode` drops the guard into any LangGraph ``StateGraph`` between the model
  node and the tool node.
- :class:`ToolSpec` is the typed tool description every component shares.
"""

from toolguard.detectors import (
    ContentDetector,
    Detector,
    FormatDetector,
    TimingDetector,
    TypeDetector,
)
from toolguard.guard import Guard
from toolguard.node import (
    AskUserNode,
    GuardCounters,
    GuardNode,
    GuardState,
    merge_counters,
    needs_guard,
)
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
    "ContentDetector",
    "Detector",
    "EmbeddingRelevanceJudge",
    "Evidence",
    "FormatDetector",
    "Guard",
    "GuardCounters",
    "GuardNode",
    "GuardState",
    "HallucinationType",
    "LLMRelevanceJudge",
    "LexicalRelevanceJudge",
    "RelevanceJudge",
    "RelevanceResult",
    "TimingDetector",
    "ToolSpec",
    "TypeDetector",
    "Verdict",
    "merge_counters",
    "needs_guard",
]
__version__ = "0.1.0"
