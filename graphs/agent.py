"""Prebuilt agents with and without toolguard, for production use and comparisons.

- :func:`create_guarded_agent` is LangChain v1's ``create_agent(model, tools,
  middleware=[...])`` with toolguard's middleware (retry controller, KG resolution,
  pre-check, loop guard, guard) in the recommended order.
- :func:`create_plain_agent` is the same ``create_agent`` loop without toolguard (the
  comparison baseline; a retry controller can be added alone).
- :func:`create_guarded_graph` is the hand-built ``StateGraph`` equivalent made of
  toolguard's LangGraph nodes (``model -> guard -> tools -> retry gate -> model``), for
  people composing their own graphs; it gives the same verdicts and answers as the
  middleware (both run the same engine and step planner).

All compile to LangGraph graphs and run sync or async (``invoke`` / ``ainvoke`` /
``stream`` / ``astream``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from langchain.agents import create_agent
from langchain.agents.middleware import ToolErrorMiddleware
from langchain.agents.middleware.types import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, SystemMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer

from toolguard.errors import ConfigurationError
from toolguard.guard import Guard
from toolguard.middleware import (
    GuardMiddleware,
    IndecisiveActionsMiddleware,
    KGResolveMiddleware,
    LoopGuardMiddleware,
    PrecheckMiddleware,
    RetryControllerMiddleware,
)
from toolguard.nodes import (
    AskUserMode,
    AskUserNode,
    GuardNode,
    PrecheckAskNode,
    PrecheckNode,
    PrecheckState,
    RetryGateNode,
    dangling_update,
    needs_guard,
)
from toolguard.precheck import PRECHECK_MODES, Precheck, PrecheckMode
from toolguard.retry import RetryController

__all__ = ["create_guarded_agent", "create_guarded_graph", "create_plain_agent",
           "guarded_middleware", "tool_errors_as_messages"]

ControllerOption = RetryController | Literal["default"] | None


def _controller(controller: ControllerOption) -> RetryController | None:
    return RetryController() if controller == "default" else controller


def _tool_error_text(exc: Exception, request: Any) -> str:
    """``ToolNode(handle_tool_errors=True)``'s answer to a tool that raised.

    An exception whose ``repr`` raises is named by its type (issue 14, defect 4).
    """
    try:
        text = repr(exc)
    except Exception:
        text = f"{type(exc).__name__}(<unprintable>)"
    return f"Error: {text}\n Please fix your mistakes."


def _node_error_text(exc: Exception) -> str:
    """``ToolNode``'s error handler (it reads the handled types from the annotation)."""
    return _tool_error_text(exc, None)


def _repair(state: Any) -> dict[str, Any]:
    """Answer calls a previous turn left dangling and drop a question nobody answered."""
    return {**dangling_update(state), "toolguard_pending": None}


def tool_errors_as_messages() -> ToolErrorMiddleware[Any, Any]:
    """LangChain's ``ToolErrorMiddleware`` answering every tool exception to the model.

    ``create_agent``'s tool node re-raises exceptions a tool raises; the classic ReAct loop
    (``ToolNode(handle_tool_errors=True)``) answers them with an error ``ToolMessage``.
    The prebuilt agents keep the classic behaviour when no retry controller answers them.
    """
    return ToolErrorMiddleware(on_error=_tool_error_text)


def _precheck(precheck: Precheck | PrecheckMode | None, tools: Sequence[BaseTool],
              model: BaseChatModel) -> Precheck | None:
    """A :class:`Precheck` from an instance or a mode name (LLM modes use ``model``)."""
    if precheck is None or isinstance(precheck, Precheck):
        return precheck
    if precheck not in PRECHECK_MODES:
        raise ConfigurationError(f"unknown pre-check mode {precheck!r}; expected a Precheck "
                                 f"or one of {list(PRECHECK_MODES)}")
    return Precheck(tools, mode=precheck, model=None if precheck == "deterministic" else model)


_GUARD_MIDDLEWARE_OPTIONS = ("max_refused_steps", "look_up_first")
"""Keyword options of :class:`~toolguard.GuardMiddleware` / ``GuardNode`` (not the Guard's)."""


def guarded_middleware(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    guard: Guard | None = None,
    ask_user: AskUserMode = "auto",
    controller: ControllerOption = "default",
    precheck: Precheck | PrecheckMode | None = None,
    precheck_model: BaseChatModel | None = None,
    kg: KGResolveMiddleware | None = None,
    loop: AgentMiddleware[Any, Any, Any] | Literal["default"] | None = "default",
    **guard_options: Any,
) -> list[AgentMiddleware[Any, Any, Any]]:
    """Toolguard's middleware in the recommended order (see :func:`create_guarded_agent`).

    Raises:
        toolguard.errors.ConfigurationError: ``guard`` and guard options together, or an
            unknown pre-check mode.
    """
    # GuardMiddleware's own options go to it with or without a configured guard
    own = {k: guard_options.pop(k) for k in _GUARD_MIDDLEWARE_OPTIONS if k in guard_options}
    if guard is not None and guard_options:
        raise ConfigurationError("pass either guard= or Guard options, not both")
    out: list[AgentMiddleware[Any, Any, Any]] = []
    ctl = _controller(controller)
    out.append(RetryControllerMiddleware(controller=ctl) if ctl is not None
               else tool_errors_as_messages())
    if kg is not None:
        out.append(kg)
    pre = _precheck(precheck, tools, precheck_model or model)
    if pre is not None:
        out.append(PrecheckMiddleware(precheck=pre, ask_user=ask_user))
    if loop == "default":
        loop = LoopGuardMiddleware()
    if loop is not None:
        out.append(loop)
    out.append(GuardMiddleware(guard=guard, ask_user=ask_user, **own) if guard is not None
               else GuardMiddleware(ask_user=ask_user, **own, **guard_options))
    return out


def create_guarded_agent(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    guard: Guard | None = None,
    system_prompt: str | None = None,
    checkpointer: Checkpointer = None,
    store: BaseStore | None = None,
    ask_user: AskUserMode = "auto",
    controller: ControllerOption = "default",
    precheck: Precheck | PrecheckMode | None = None,
    precheck_model: BaseChatModel | None = None,
    kg: KGResolveMiddleware | None = None,
    loop: AgentMiddleware[Any, Any, Any] | Literal["default"] | None = "default",
    middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (),
    indecisive_actions: bool = False,
    **guard_options: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``create_agent(model, tools, middleware=[...toolguard...])``.

    The middleware, in order: :class:`~toolguard.RetryControllerMiddleware` (unless
    ``controller=None``), ``kg`` (a :class:`~toolguard.KGResolveMiddleware`, if given),
    :class:`~toolguard.PrecheckMiddleware` (if ``precheck``), the loop guard (default
    ``LoopGuardMiddleware()``), then your ``middleware``, and
    :class:`~toolguard.GuardMiddleware` last, so it checks a call before anything else
    sees it after the model.

    Args:
        model: A chat model that supports ``bind_tools``.
        tools: Executable LangChain tools.
        guard: A configured :class:`~toolguard.guard.Guard`; default: a guard over the
            tools each model call is offered, with ``guard_options``.
        system_prompt: The agent's system prompt.
        checkpointer: Optional checkpointer; with one, ``ask_user`` interrupts.
        store: Optional LangGraph store (the KG middleware reads per-user KGs from it).
        ask_user: ``"auto"`` (interrupt with a checkpointer, else end the turn with the
            question), ``"interrupt"`` or ``"end"``.
        controller: ``"default"`` (``RetryController()``: 3 retries, then skip), one of
            your own, or ``None`` (tool exceptions are then answered as error
            ``ToolMessage`` s, :func:`tool_errors_as_messages`).  Totals in
            ``state["toolguard_controller"]``.
        precheck: A :class:`~toolguard.precheck.Precheck`, or a mode name (LLM modes use
            ``precheck_model``, default ``model``); ``None``: no pre-check.
        precheck_model: The chat model of an LLM pre-check mode given by name.
        kg: A configured :class:`~toolguard.KGResolveMiddleware`, or ``None``.
        loop: A loop-guard middleware, ``"default"`` or ``None``.
        middleware: More middleware, placed before the guard.
        indecisive_actions: ``model`` is Relign-tuned (``toolguard relign run``): add
            :class:`~toolguard.IndecisiveActionsMiddleware` after the guard (innermost), so
            its ``Finish`` ends the turn as ``ask_user`` / ``no_suitable_tool``.
        **guard_options: Keyword options for :class:`~toolguard.guard.Guard`, and
            :class:`~toolguard.GuardMiddleware`'s ``max_refused_steps`` / ``look_up_first``
            (these also with ``guard``).

    Returns:
        The compiled agent; ``state["toolguard"]`` holds toolguard's counters.

    Raises:
        toolguard.errors.ConfigurationError: ``guard`` and guard options together, or an
            unknown pre-check mode.
    """
    stack = guarded_middleware(model, tools, guard=guard, ask_user=ask_user,
                               controller=controller, precheck=precheck,
                               precheck_model=precheck_model, kg=kg, loop=loop,
                               **guard_options)
    stack[-1:-1] = list(middleware)
    if indecisive_actions:
        stack.append(IndecisiveActionsMiddleware())
    return create_agent(model, list(tools), system_prompt=system_prompt, middleware=stack,
                        checkpointer=checkpointer, store=store, name="guarded_agent")


def create_plain_agent(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    system_prompt: str | None = None,
    checkpointer: Checkpointer = None,
    store: BaseStore | None = None,
    controller: RetryController | None = None,
    middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (),
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The unguarded ``create_agent`` loop: ``model -> (tools -> model)* -> END``.

    Tool exceptions become error ``ToolMessage`` s, as in the classic ReAct loop (LangChain's
    ``ToolErrorMiddleware``, or the retry controller when one is given).

    Args:
        model: A chat model that supports ``bind_tools``.
        tools: Executable LangChain tools.
        system_prompt: The agent's system prompt.
        checkpointer: Optional LangGraph checkpointer.
        store: Optional LangGraph store.
        controller: Optional :class:`~toolguard.retry.RetryController` around the tools
            (default none: the plain loop).
        middleware: More middleware.
    """
    stack: list[AgentMiddleware[Any, Any, Any]] = list(middleware)
    stack.insert(0, RetryControllerMiddleware(controller=controller) if controller is not None
                 else tool_errors_as_messages())
    return create_agent(model, list(tools), system_prompt=system_prompt, middleware=stack,
                        checkpointer=checkpointer, store=store, name="plain_agent")


# ---------------------------------------------------------------------------- hand-built
def _model_node(
    model: BaseChatModel, tools: Sequence[BaseTool], system_prompt: str | None
) -> RunnableLambda[Any, dict[str, Any]]:
    bound = model.bind_tools(list(tools)) if tools else model

    def _prompt(state: dict[str, Any]) -> list[AnyMessage]:
        messages = list(state["messages"])
        return [SystemMessage(system_prompt), *messages] if system_prompt else messages

    def call(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [bound.invoke(_prompt(state), config)]}

    async def acall(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(_prompt(state), config)]}

    return RunnableLambda(call, afunc=acall, name="model")


def create_guarded_graph(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    guard: Guard | None = None,
    system_prompt: str | None = None,
    checkpointer: Checkpointer = None,
    ask_user: AskUserMode = "auto",
    controller: ControllerOption = "default",
    precheck: Precheck | PrecheckMode | None = None,
    precheck_model: BaseChatModel | None = None,
    **guard_options: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The hand-built ``StateGraph`` made of toolguard's nodes (see the module docstring).

    ``START -> repair -> [precheck -> (precheck_ask | END)] -> model -> guard -> (ask_user |
    tools | model | END)``, ``tools -> retry_gate -> (model | END)``.  The ``repair`` node
    answers calls left dangling by a new user message.  Options as
    :func:`create_guarded_agent`.

    Raises:
        toolguard.errors.ConfigurationError: ``guard`` and guard options together, or an
            unknown pre-check mode.
    """
    own = {k: guard_options.pop(k) for k in _GUARD_MIDDLEWARE_OPTIONS if k in guard_options}
    if guard is not None and guard_options:
        raise ConfigurationError("pass either guard= or Guard options, not both")
    guard = guard or Guard(tools, **guard_options)
    node = GuardNode(guard, ask_user=ask_user, pending_key="toolguard_pending", **own)
    pre = _precheck(precheck, tools, precheck_model or model)
    ctl = _controller(controller)
    builder = StateGraph(PrecheckState)
    builder.add_node("repair", RunnableLambda(_repair, name="repair"))
    builder.add_node("model", _model_node(model, tools, system_prompt))
    builder.add_node("guard", node)
    builder.add_node("ask_user", AskUserNode())
    builder.add_edge(START, "repair")
    if pre is None:
        builder.add_edge("repair", "model")
    else:
        pre_node = PrecheckNode(pre, ask_user=ask_user)
        builder.add_node("precheck", pre_node)
        builder.add_node("precheck_ask", PrecheckAskNode())
        builder.add_edge("repair", "precheck")
        builder.add_conditional_edges("precheck", pre_node.route,
                                      ["model", "precheck_ask", END])
        builder.add_edge("precheck_ask", "model")
    builder.add_conditional_edges("model", lambda s: "guard" if needs_guard(s) else END,
                                  ["guard", END])
    builder.add_conditional_edges("guard", node.route, ["ask_user", "tools", "model", END])
    builder.add_conditional_edges("ask_user", node.route, ["tools", "model", END])
    if ctl is None:
        builder.add_node("tools", ToolNode(list(tools), handle_tool_errors=_node_error_text))
        builder.add_edge("tools", "model")
    else:
        gate = RetryGateNode(ctl)
        builder.add_node("tools", ToolNode(list(tools), handle_tool_errors=False,
                                           wrap_tool_call=ctl.wrap_tool_call,
                                           awrap_tool_call=ctl.awrap_tool_call))
        builder.add_node("retry_gate", gate)
        builder.add_edge("tools", "retry_gate")
        builder.add_conditional_edges("retry_gate", gate.route, ["model", END])
    return builder.compile(checkpointer=checkpointer, name="guarded_graph")
