"""Prebuilt agents (installed as ``toolguard_graphs``): guarded and plain, middleware or nodes.

See :mod:`toolguard_graphs.agent`.
"""

from toolguard_graphs.agent import (
    create_guarded_agent,
    create_guarded_graph,
    create_plain_agent,
    guarded_middleware,
)

__all__ = ["create_guarded_agent", "create_guarded_graph", "create_plain_agent",
           "guarded_middleware"]
