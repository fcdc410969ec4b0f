"""Prebuilt LangGraph graphs: a guarded tool-calling agent and its plain equivalent."""

from toolguard_graphs.agent import create_guarded_agent, create_plain_agent

__all__ = ["create_guarded_agent", "create_plain_agent"]
