"""A tool-calling agent with and without toolguard, for production use and comparisons.

``create_plain_agent`` is the classic ReAct loop (model -> ToolNode -> model);
``create_guarded_agent`` is the same loop with a :class:`~toolguard.node.GuardNode`
between the model and the tools, and optionally a pre-check
(:class:`~toolguard.precheck_node.PrecheckNode`) before the model acts.  Both compile to a
LangGraph graph and run sync or async (``invoke`` / ``ainvoke`` / ``stream`` / ``astream``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Checkpointer

from toolguard.controller import NEW_RUN, RetryController
from toolguard.guard import Guard
from toolguard.node import AskUserMode, AskUserNode, GuardNode, GuardState, needs_guard
from toolguard.precheck import PRECHECK_MODES, Precheck, PrecheckMode
from toolguard.precheck_node import PrecheckAskNode, PrecheckNode, PrecheckState


def _model_node(
    model: BaseChatModel, tools: Sequence[BaseTool], system_prompt: str | None
) -> RunnableLambda[Any, dict[str, Any]]:
    bound = model.bind_tools(list(tools)) if tools else model

    def _prompt(state: dict[str, Any]) -> list[AnyMessage]:
        messages = list(state["messages"])
        return [SystemMessage(system_prompt), *messages] if system_prompt else messages

    def _update(state: dict[str, Any], answer: BaseMessage) -> dict[str, Any]:
        update: dict[str, Any] = {"messages": [answer]}
        messages = state["messages"]
        if state.get("toolguard_controller") and messages and isinstance(
                messages[-1], HumanMessage):
            update["toolguard_controller"] = NEW_RUN  # a new user turn is a new run
        return update

    def call(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return _update(state, bound.invoke(_prompt(state), config))

    async def acall(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return _update(state, await bound.ainvoke(_prompt(state), config))

    return RunnableLambda(call, afunc=acall, name="model")


def _to_guard(state: dict[str, Any]) -> str:
    return "guard" if needs_guard(state) else END


def _tool_node(
    tools: Sequence[BaseTool], controller: RetryController | None, handle_tool_errors: bool
) -> ToolNode:
    if controller is None:
        return ToolNode(list(tools), handle_tool_errors=handle_tool_errors)
    # the controller turns every tool exception into one classified answer
    return ToolNode(list(tools), handle_tool_errors=False,
                    wrap_tool_call=controller.wrap_tool_call,
                    awrap_tool_call=controller.awrap_tool_call)


def _add_tools_and_finish(
    builder: StateGraph[Any, Any, Any, Any], tools: Sequence[BaseTool],
    controller: RetryController | None, handle_tool_errors: bool, after: str = "model",
) -> None:
    """The tool node, then ``after`` (or ``finish`` when the controller says so)."""
    builder.add_node("tools", _tool_node(tools, controller, handle_tool_errors))
    if controller is None:
        builder.add_edge("tools", after)
        return
    ctl = controller

    def finish(state: Any) -> dict[str, Any]:
        return ctl.finish_update(state)

    builder.add_node("finish", RunnableLambda(finish, name="finish"))
    builder.add_conditional_edges(
        "tools", lambda s: "finish" if ctl.finished(s) else after, ["finish", after])
    builder.add_edge("finish", END)


def create_plain_agent(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    system_prompt: str | None = None,
    checkpointer: Checkpointer = None,
    handle_tool_errors: bool = True,
    controller: RetryController | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The unguarded ReAct loop: ``START -> model -> (tools -> model)* -> END``.

    Args:
        model: A chat model that supports ``bind_tools``.
        tools: Executable LangChain tools.
        system_prompt: Prepended to every model call.
        checkpointer: Optional LangGraph checkpointer.
        handle_tool_errors: Passed to ``ToolNode`` (tool exceptions become error ToolMessages).
        controller: Optional :class:`~toolguard.controller.RetryController` around the tools
            (default none: the plain loop).
    """
    builder = StateGraph(GuardState)
    builder.add_node("model", _model_node(model, tools, system_prompt))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    _add_tools_and_finish(builder, tools, controller, handle_tool_errors)
    return builder.compile(checkpointer=checkpointer, name="plain_agent")


def create_guarded_agent(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    guard: Guard | None = None,
    system_prompt: str | None = None,
    checkpointer: Checkpointer = None,
    ask_user: AskUserMode = "auto",
    handle_tool_errors: bool = True,
    controller: RetryController | Literal["default"] | None = "default",
    precheck: Precheck | PrecheckMode | None = None,
    precheck_model: BaseChatModel | None = None,
    precheck_after_tools: bool = False,
    **guard_options: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The ReAct loop with a guard: ``model -> guard -> (ask_user | tools | model | END)``.

    ``ask_user`` verdicts are stored in graph state and asked by a separate node that
    interrupts (with a checkpointer), so a resume, even in another process, answers exactly
    what was asked.

    With ``precheck``, a :class:`~toolguard.precheck_node.PrecheckNode` runs before the model
    acts on each user message (``START -> precheck -> (model | precheck_ask | END)``): an
    ``ask_user`` decision asks the user (interrupt with a checkpointer, else the turn ends
    with the question) and a ``no_suitable_tool`` decision ends the turn with a message to
    the user; in both cases the model is not called, so no tool runs.  See
    :mod:`toolguard.precheck_node`.

    Args:
        model: A chat model that supports ``bind_tools``.
        tools: Executable LangChain tools.
        guard: A configured :class:`~toolguard.guard.Guard`; default ``Guard(tools,
            **guard_options)``.
        system_prompt: Prepended to every model call.
        checkpointer: Optional checkpointer; with one, ``ask_user`` verdicts interrupt.
        ask_user: See :class:`~toolguard.node.GuardNode`.
        handle_tool_errors: Passed to ``ToolNode`` when there is no controller.
        controller: The :class:`~toolguard.controller.RetryController` around the tools:
            ``"default"`` (``RetryController()``: 3 retries, then skip), one of your own, or
            ``None``.  Its counters are in ``state["toolguard_controller"]``; when it says
            finish, the run ends with a message to the user.
        precheck: A :class:`~toolguard.precheck.Precheck`, or a mode name (a pre-check over
            ``tools``; LLM modes use ``precheck_model``, default ``model`` without tools);
            ``None`` (default): no pre-check, the graph is unchanged.
        precheck_model: The chat model of an LLM pre-check mode given by name.
        precheck_after_tools: Run the pre-check again after each tool result (``tools ->
            precheck`` instead of ``tools -> model``).
        **guard_options: Keyword options for :class:`~toolguard.guard.Guard`.

    Returns:
        A compiled graph over :class:`~toolguard.node.GuardState`; ``state["toolguard"]``
        holds the guard's counters.

    Raises:
        ValueError: If both ``guard`` and ``guard_options`` are given, ``precheck_after_tools``
            is set without a pre-check, or the pre-check mode is unknown.
    """
    if guard is not None and guard_options:
        raise ValueError("pass either guard= or Guard options, not both")
    if precheck_after_tools and precheck is None:
        raise ValueError("precheck_after_tools needs a precheck")
    guard = guard or Guard(tools, **guard_options)
    node = GuardNode(guard, counters_key="toolguard", ask_user=ask_user,
                     pending_key="toolguard_pending")
    pre = _precheck(precheck, tools, precheck_model or model)
    builder = StateGraph(GuardState if pre is None else PrecheckState)
    builder.add_node("model", _model_node(model, tools, system_prompt))
    builder.add_node("guard", node)
    builder.add_node("ask_user", AskUserNode(pending_key="toolguard_pending"))
    if pre is None:
        builder.add_edge(START, "model")
    else:
        pre_node = PrecheckNode(pre, ask_user=ask_user)
        builder.add_node("precheck", pre_node)
        builder.add_node("precheck_ask", PrecheckAskNode())
        builder.add_edge(START, "precheck")
        builder.add_conditional_edges("precheck", pre_node.route,
                                      ["model", "precheck_ask", END])
        builder.add_edge("precheck_ask", "model")
    builder.add_conditional_edges("model", _to_guard, {"guard": "guard", END: END})
    builder.add_conditional_edges("guard", node.route, ["ask_user", "tools", "model", END])
    builder.add_conditional_edges("ask_user", node.route, ["tools", "model", END])
    ctl = RetryController() if controller == "default" else controller
    _add_tools_and_finish(builder, tools, ctl, handle_tool_errors,
                          after="precheck" if precheck_after_tools else "model")
    return builder.compile(checkpointer=checkpointer, name="guarded_agent")


def _precheck(precheck: Precheck | PrecheckMode | None, tools: Sequence[BaseTool],
              model: BaseChatModel) -> Precheck | None:
    """A :class:`Precheck` from an instance or a mode name (LLM modes use ``model``)."""
    if precheck is None or isinstance(precheck, Precheck):
        return precheck
    if precheck not in PRECHECK_MODES:
        raise ValueError(f"unknown pre-check mode {precheck!r}; expected a Precheck or one of "
                         f"{list(PRECHECK_MODES)}")
    return Precheck(tools, mode=precheck, model=None if precheck == "deterministic" else model)
