"""toolguard as LangChain v1 ``create_agent`` middleware (the primary surface).

- :class:`GuardMiddleware`: checks every proposed tool call (RelyToolBench's type /
  timing / format / content); refused calls are answered before the tool node.
- :class:`PrecheckMiddleware`: Structured Verification before the model acts (ICT):
  proceed, ask the user, or no suitable tool.
- :class:`KGResolveMiddleware`: personal references through a per-user knowledge graph
  (FamilyTool / KGETool).
- :class:`LoopGuardMiddleware`: the same failing call again, oscillation, calls that bring
  nothing new: a nudge, then a stop.
- :class:`RetryControllerMiddleware`: retry -> skip -> finish (CRITICTOOL).
- :class:`IndecisiveActionsMiddleware`: a Relign-tuned model's ``Finish`` (TalkToUser,
  ChangeTools) as toolguard's ``ask_user`` / ``no_suitable_tool`` outcomes.

Order in ``create_agent(..., middleware=[...])``: ``before_*`` hooks run in list order,
``after_*`` hooks in reverse, ``wrap_*`` hooks nest with the first outermost.  The
recommended order is ``[RetryControllerMiddleware, KGResolveMiddleware,
PrecheckMiddleware, LoopGuardMiddleware, GuardMiddleware]`` (what
``toolguard_graphs.create_guarded_agent`` builds): the KG rewrites the request before the
pre-check reads it, the pre-check decides before the model is called, and the guard checks
the model's calls first, before the loop guard and any human review listed earlier.
"""

from toolguard.middleware.guard import GuardMiddleware, GuardMiddlewareState, not_answered_by_guard
from toolguard.middleware.indecisive import IndecisiveActionsMiddleware
from toolguard.middleware.kg import KGResolveMiddleware
from toolguard.middleware.loop import LoopGuardMiddleware, LoopGuardState
from toolguard.middleware.precheck import PrecheckMiddleware, PrecheckMiddlewareState
from toolguard.middleware.retry import RetryControllerMiddleware, RetryControllerState

__all__ = [
    "GuardMiddleware",
    "GuardMiddlewareState",
    "IndecisiveActionsMiddleware",
    "KGResolveMiddleware",
    "LoopGuardMiddleware",
    "LoopGuardState",
    "PrecheckMiddleware",
    "PrecheckMiddlewareState",
    "RetryControllerMiddleware",
    "RetryControllerState",
    "not_answered_by_guard",
]
