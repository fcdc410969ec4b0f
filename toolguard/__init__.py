"""toolguard: make tool-calling LLM agents reliable.

Middleware for LangChain v1 ``create_agent`` (the primary surface; :mod:`toolguard.middleware`):

- :class:`GuardMiddleware`: every proposed tool call is checked for RelyToolBench's four
  tool-hallucination types (type, timing, format, content) before it reaches a tool.
- :class:`PrecheckMiddleware`: the ICT paper's Structured Verification before the model
  acts: proceed, ask the user (TalkToUser) or no suitable tool (ChangeTools); with
  ``mode="learned"`` a trained cross-encoder (:class:`LearnedVerifier`) decides.
- :class:`KGResolveMiddleware`: personal references ("my mom's favourite restaurant")
  through a per-user knowledge graph (FamilyTool / KGETool).
- :class:`LoopGuardMiddleware`: stops agents that repeat failing calls or oscillate.
- :class:`RetryControllerMiddleware`: bounded retry -> skip -> finish (CRITICTOOL).
- :class:`IndecisiveActionsMiddleware`: serves a Relign-tuned model: its ``Finish``
  (TalkToUser, ChangeTools) becomes toolguard's ``ask_user`` / ``no_suitable_tool``.

The engines under them, usable on their own: :class:`Guard`, :class:`Precheck`,
:class:`RetryController` (with a :class:`RetryPolicy`), :class:`LoopGuard`,
:class:`KGStore`, :class:`LearnedVerifier`; the one conversation reader
:class:`Conversation`.  The records: :class:`Verdict`, :class:`Evidence`, :data:`Action`,
:class:`ToolSpec`; a new detector is a :class:`Detector` registered with
:func:`register_detector`.  Errors derive from :class:`ToolguardError`.

Everything else lives in its subpackage: the built-in detectors and relevance judges
(:mod:`toolguard.detectors`, :mod:`toolguard.relevance`), the KG engine
(:mod:`toolguard.kg`), the retry classification (:mod:`toolguard.retry`), the ask-user
protocol (:mod:`toolguard.protocol`), LangGraph nodes for hand-built graphs
(:mod:`toolguard.nodes`), value kinds (:mod:`toolguard.values`).
"""

from toolguard.conversation import Conversation
from toolguard.detectors import Detector, register_detector
from toolguard.errors import (
    ConfigurationError,
    InputError,
    KGError,
    LoopDetectedError,
    ToolguardError,
    ToolSpecError,
)
from toolguard.guard import Guard
from toolguard.kg import KGStore
from toolguard.loop import LoopGuard
from toolguard.middleware import (
    GuardMiddleware,
    IndecisiveActionsMiddleware,
    KGResolveMiddleware,
    LoopGuardMiddleware,
    PrecheckMiddleware,
    RetryControllerMiddleware,
)
from toolguard.precheck import Precheck
from toolguard.retry import RetryController, RetryPolicy
from toolguard.specs import ToolSpec
from toolguard.types import Action, Evidence, Verdict
from toolguard.verifier import LearnedVerifier

__all__ = [
    "Action",
    "ConfigurationError",
    "Conversation",
    "Detector",
    "Evidence",
    "Guard",
    "GuardMiddleware",
    "IndecisiveActionsMiddleware",
    "InputError",
    "KGError",
    "KGResolveMiddleware",
    "KGStore",
    "LearnedVerifier",
    "LoopDetectedError",
    "LoopGuard",
    "LoopGuardMiddleware",
    "Precheck",
    "PrecheckMiddleware",
    "RetryController",
    "RetryControllerMiddleware",
    "RetryPolicy",
    "ToolSpec",
    "ToolSpecError",
    "ToolguardError",
    "Verdict",
    "register_detector",
]
__version__ = "0.2.0.dev0"
