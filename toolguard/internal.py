"""Configs of toolguard's own model calls (judges, the pre-check, the KG generator).

Such a call is not the agent's: it stays out of the user's ``stream_mode="messages"``
stream and is named in traces (LangChain's ``internal_call_transformer``, LangGraph's
``TAG_NOSTREAM``).
"""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig
from langgraph.constants import TAG_NOSTREAM

__all__ = ["INTERNAL_RUN_PREFIX", "internal_config"]

INTERNAL_RUN_PREFIX = "toolguard."
"""Run names of toolguard's internal model calls start with this (``toolguard.judge``)."""


def internal_config(kind: str, config: RunnableConfig | None = None) -> RunnableConfig:
    """The config for one of toolguard's own model calls (a judge, the pre-check, ...).

    The call is tagged ``nostream`` (LangGraph's ``TAG_NOSTREAM``: left out of
    ``stream_mode="messages"``), marked internal for LangChain's stream transformers
    (``lc_internal_call`` metadata), and named ``toolguard.<kind>`` with ``toolguard:
    <kind>`` metadata so a LangSmith trace shows what it was.
    """
    from langchain.agents.middleware.internal_call_transformer import internal_call_metadata

    base: RunnableConfig = dict(config or {})  # type: ignore[assignment]
    tags = [*(base.get("tags") or []), TAG_NOSTREAM, f"toolguard:{kind}"]
    metadata = {**(base.get("metadata") or {}), **internal_call_metadata(), "toolguard": kind}
    return {**base, "tags": tags, "metadata": metadata,
            "run_name": f"{INTERNAL_RUN_PREFIX}{kind}"}
