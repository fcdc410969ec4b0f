"""toolguard: make tool-calling LLM agents reliable.

Middleware for LangChain v1 ``create_agent`` (the primary surface; :mod:`toolguard.middleware`):

- :class:`GuardMiddleware`: every proposed tool call is checked for RelyToolBench's four
  tool-hallucination types (type, timing, format, content) before it reaches a tool.
- :class:`PrecheckMiddleware`: the ICT paper's Structured Verification before the model
  acts: proceed, ask the user (TalkToUser) or no suitable tool (ChangeTools).
- :class:`KGResolveMiddleware`: personal references ("my mom's favourite restaurant")
  through a per-user knowledge graph (FamilyTool / KGETool).
- :class:`LoopGuardMiddleware`: stops agents that repeat failing calls or oscillate.
- :class:`RetryControllerMiddleware`: bounded retry -> skip -> finish (CRITICTOOL).

The engines under them, usable on their own: :class:`Guard` (+ the detectors),
:class:`Precheck`, :class:`RetryController`, :class:`LoopGuard`, :class:`KnowledgeGraph`
/ :class:`KGStore`; the one conversation reader :class:`Conversation`.  LangGraph nodes
for hand-built graphs are in :mod:`toolguard.nodes`.  Errors derive from
:class:`ToolguardError` (:mod:`toolguard.errors`).
"""

from toolguard.conversation import Conversation, Goal
from toolguard.detectors import (
    DETECTORS,
    ContentDetector,
    Detector,
    FormatDetector,
    TimingDetector,
    TypeDetector,
    register_detector,
)
from toolguard.errors import (
    ConfigurationError,
    InputError,
    KGError,
    LoopDetectedError,
    ResumeError,
    ToolguardError,
    ToolSpecError,
)
from toolguard.guard import Guard
from toolguard.kg import (
    DeterministicPathGenerator,
    KGStore,
    KnowledgeGraph,
    LLMPathGenerator,
    Resolution,
    kg_search,
)
from toolguard.loop import LoopGuard
from toolguard.middleware import (
    GuardMiddleware,
    KGResolveMiddleware,
    LoopGuardMiddleware,
    PrecheckMiddleware,
    RetryControllerMiddleware,
    not_answered_by_guard,
)
from toolguard.precheck import (
    Precheck,
    PrecheckDecision,
    PrecheckLabel,
    PrecheckMode,
    StructuredVerificationAnswer,
)
from toolguard.protocol import AskQuestion, AskUserRequest
from toolguard.relevance import (
    EmbeddingRelevanceJudge,
    LexicalRelevanceJudge,
    LLMRelevanceJudge,
    RelevanceJudge,
    RelevanceResult,
)
from toolguard.retry import (
    Classification,
    RetryController,
    ToolPolicy,
    classify_exception,
    classify_result,
)
from toolguard.specs import ToolSpec
from toolguard.types import Action, Evidence, HallucinationType, Verdict

__all__ = [
    "DETECTORS",
    "Action",
    "AskQuestion",
    "AskUserRequest",
    "Classification",
    "ConfigurationError",
    "ContentDetector",
    "Conversation",
    "Detector",
    "DeterministicPathGenerator",
    "EmbeddingRelevanceJudge",
    "Evidence",
    "FormatDetector",
    "Goal",
    "Guard",
    "GuardMiddleware",
    "HallucinationType",
    "InputError",
    "KGError",
    "KGResolveMiddleware",
    "KGStore",
    "KnowledgeGraph",
    "LLMPathGenerator",
    "LLMRelevanceJudge",
    "LexicalRelevanceJudge",
    "LoopDetectedError",
    "LoopGuard",
    "LoopGuardMiddleware",
    "Precheck",
    "PrecheckDecision",
    "PrecheckLabel",
    "PrecheckMiddleware",
    "PrecheckMode",
    "RelevanceJudge",
    "RelevanceResult",
    "Resolution",
    "ResumeError",
    "RetryController",
    "RetryControllerMiddleware",
    "StructuredVerificationAnswer",
    "TimingDetector",
    "ToolPolicy",
    "ToolSpec",
    "ToolSpecError",
    "ToolguardError",
    "TypeDetector",
    "Verdict",
    "classify_exception",
    "classify_result",
    "kg_search",
    "not_answered_by_guard",
    "register_detector",
]
__version__ = "0.2.0.dev0"
