"""A tool-calling agent with and without toolguard, for production use and comparisons.

``create_plain_agent`` is the classic ReAct loop (model -> ToolNode -> model);
``create_guarded_agent`` is the same loop with a :class:`~toolguard.node.GuardNode`
between the model and the tools.  Both compile to a LangGraph graph and run sync or
async (``invoke`` / ``ainvoke`` / ``stream`` / ``astream``).
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
    controller: RetryController | None, handle_tool_errors: bool,
) -> None:
    builder.add_node("tools", _tool_node(tools, controller, handle_tool_errors))
    if controller is None:
        builder.add_edge("tools", "model")
        return
    ctl = controller

    def finish(state: Any) -> dict[str, Any]:
        return ctl.finish_update(state)

    builder.add_node("finish", RunnableLambda(finish, name="finish"))
    builder.add_conditional_edges(
        "tools", lambda s: "finish" if ctl.finished(s) else "model", ["finish", "model"])
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
    **guard_options: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The ReAct loop with a guard: ``model -> guard -> (ask_user | tools | model | END)``.

    ``ask_user`` verdicts are stored in graph state and asked by a separate node that
    interrupts (with a checkpointer), so a resume, even in another process, answers exactly
    what was asked.

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
        **guard_options: Keyword options for :class:`~toolguard.guard.Guard`.

    Returns:
        A compiled graph over :class:`~toolguard.node.GuardState`; ``state["toolguard"]``
        holds the guard's counters.

    Raises:
        ValueError: If both ``guard`` and ``guard_options`` are given.
    """
    if guard is not None and guard_options:
        raise ValueError("pass either guard= or Guard options, not both")
    guard = guard or Guard(tools, **guard_options)
    node = GuardNode(guard, counters_key="toolguard", ask_user=ask_user,
                     pending_key="toolguard_pending")
    builder = StateGraph(GuardState)
    builder.add_node("model", _model_node(model, tools, system_prompt))
    builder.add_node("guard", node)
    builder.add_node("ask_user", AskUserNode(pending_key="toolguard_pending"))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", _to_guard, {"guard": "guard", END: END})
    builder.add_conditional_edges("guard", node.route, ["ask_user", "tools", "model", END])
    builder.add_conditional_edges("ask_user", node.route, ["tools", "model", END])
    ctl = RetryController() if controller == "default" else controller
    _add_tools_and_finish(builder, tools, ctl, handle_tool_errors)
    return builder.compile(checkpointer=checkpointer, name="guarded_agent")
