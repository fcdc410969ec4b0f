"""toolguard as LangGraph nodes, for hand-built ``StateGraph`` s.

Thin adapters over the same engines as :mod:`toolguard.middleware` (``create_agent``
users add the middleware instead): :class:`GuardNode` + :class:`AskUserNode` (the guard),
:class:`PrecheckNode` + :class:`PrecheckAskNode` (the pre-check), :class:`KGResolveNode`
(KG resolution), :class:`RetryGateNode` (the retry controller's finish after a tool step).
"""

from toolguard.nodes.guard import (
    AskUserMode,
    AskUserNode,
    GuardCounters,
    GuardNode,
    GuardState,
    dangling_update,
    needs_guard,
)
from toolguard.nodes.kg import KGResolveNode
from toolguard.nodes.precheck import PrecheckAskNode, PrecheckNode, PrecheckState, needs_precheck
from toolguard.nodes.retry import RetryGateNode

__all__ = [
    "AskUserMode",
    "AskUserNode",
    "GuardCounters",
    "GuardNode",
    "GuardState",
    "KGResolveNode",
    "PrecheckAskNode",
    "PrecheckNode",
    "PrecheckState",
    "RetryGateNode",
    "dangling_update",
    "needs_guard",
    "needs_precheck",
]
