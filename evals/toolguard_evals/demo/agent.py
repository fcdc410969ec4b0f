"""Run a chat model as a ``create_agent`` agent on the main job's BFCL tasks, in several modes.

Every task (:mod:`~toolguard_evals.demo.tasks`) runs in every mode on the same model: the
plain ``create_agent`` loop, the README's stack, and each toolguard middleware alone
(:data:`AGENT_MODES`).  A task's tools record what they ran (:class:`TaskTools`); the run
is judged by BFCL's gold afterwards (:mod:`~toolguard_evals.demo.agent_score`).

Protocol.  BFCL scores a function-calling model's single-turn answer: the calls of one
reply.  With ``protocol="single"`` (the default) the tools are ``return_direct``: once
calls run, the turn ends, as in BFCL; a call the guard refuses is answered to the model,
which may try again, until a call runs, it answers in text, toolguard asks or stops, or
``max_steps`` model calls were made.  ``protocol="loop"`` keeps the ordinary ReAct loop
(tool results go back to the model), where the Qwen2.5-Coder models tend to call the same
tool again after every result (CHANGELOG).

A response cache shared by the modes (LangChain's ``cache=`` on the chat model, see
:class:`~toolguard_evals.runner.JsonlLLMCache`) serves a request that an earlier mode
already sent with identical messages, tools and settings: every mode starts from the very
same first reply, and a rerun resumes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool

from toolguard import (
    GuardMiddleware,
    LoopGuardMiddleware,
    PrecheckMiddleware,
)
from toolguard.retry import RetryController
from toolguard_evals.bfcl_checker import tool_name, tool_schema
from toolguard_evals.demo._messages import add_counters, unanswered
from toolguard_evals.demo.episode import CONTROLLER_KEY, GUARD_KEY, GraphFactory, run_turn
from toolguard_evals.demo.tasks import AgentTask
from toolguard_evals.demo.tools import CallIdTool, ToolExecution, current_call_id
from toolguard_graphs import create_guarded_agent, create_plain_agent

__all__ = [
    "AGENT_MODES",
    "DEFAULT_AGENT_MODES",
    "Protocol",
    "TaskRun",
    "TaskTools",
    "run_task",
]

Protocol = Literal["single", "loop"]
TOOL_RESULT: Final = json.dumps({"status": "ok"})
"""What every task tool returns: BFCL's single-turn functions have no implementation."""


def _guard_alone(model: BaseChatModel, tools: Sequence[BaseTool]) -> Any:
    return create_plain_agent(model, tools, middleware=[GuardMiddleware()])


def _loop_alone(model: BaseChatModel, tools: Sequence[BaseTool]) -> Any:
    return create_plain_agent(model, tools, middleware=[LoopGuardMiddleware()])


def _retry_alone(model: BaseChatModel, tools: Sequence[BaseTool]) -> Any:
    return create_plain_agent(model, tools, controller=RetryController())


def _precheck_alone(model: BaseChatModel, tools: Sequence[BaseTool]) -> Any:
    return create_plain_agent(model, tools, middleware=[PrecheckMiddleware()])


def _guard_llm(model: BaseChatModel, tools: Sequence[BaseTool]) -> Any:
    return create_plain_agent(model, tools, middleware=[
        GuardMiddleware(relevance="llm", judge_model=model)])


def _guarded_precheck(model: BaseChatModel, tools: Sequence[BaseTool]) -> Any:
    return create_guarded_agent(model, tools, precheck="deterministic")


def _guarded_sv(model: BaseChatModel, tools: Sequence[BaseTool]) -> Any:
    return create_guarded_agent(model, tools, precheck="structured_verification")


AGENT_MODES: Final[Mapping[str, GraphFactory]] = {
    "unguarded": create_plain_agent,
    "guarded": create_guarded_agent,
    "guard": _guard_alone,
    "loop_guard": _loop_alone,
    "retry": _retry_alone,
    "precheck": _precheck_alone,
    "guard_llm": _guard_llm,
    "guarded_precheck": _guarded_precheck,
    "guarded_sv": _guarded_sv,
}
"""Mode -> ``(model, tools) -> graph``.

- ``unguarded``: ``create_agent`` without toolguard (:func:`~toolguard_graphs.create_plain_agent`).
- ``guarded``: the README's stack, :func:`~toolguard_graphs.create_guarded_agent`
  (``RetryControllerMiddleware``, ``LoopGuardMiddleware``, ``GuardMiddleware``).
- ``guard`` / ``loop_guard`` / ``retry`` / ``precheck``: ``GuardMiddleware()``,
  ``LoopGuardMiddleware()``, ``RetryControllerMiddleware()``, ``PrecheckMiddleware()`` alone.
- ``guard_llm``: ``GuardMiddleware(relevance="llm", judge_model=<the agent's model>)``
  (RelyToolBench's judge prompts decide tool relevance and confirm content flags).
- ``guarded_precheck``: the README's stack after ``PrecheckMiddleware()`` (deterministic).
- ``guarded_sv``: the README's stack with ``PrecheckMiddleware(mode="structured_verification")``
  judged by the agent's own model (the ICT paper's Structured Verification).
"""
DEFAULT_AGENT_MODES: Final = ("unguarded", "guarded")


class TaskTools:
    """The tools of one task: each BFCL doc as a ``StructuredTool`` that records its runs.

    Names are BFCL's function-calling names (``.`` written ``_``), parameters the doc's
    JSON Schema; a run returns :data:`TOOL_RESULT` and appends a
    :class:`~toolguard_evals.demo.tools.ToolExecution`.  No effects are declared: the guard
    sees what a user who declares nothing gets.

    Args:
        task: The task.
        return_direct: End the turn once calls ran (``protocol="single"``).
    """

    def __init__(self, task: AgentTask, *, return_direct: bool) -> None:
        self.task = task
        self.executions: list[ToolExecution] = []
        self._lock = threading.Lock()
        self.tools: list[BaseTool] = [self._make(d, return_direct) for d in task.functions]

    def _make(self, doc: Mapping[str, Any], return_direct: bool) -> BaseTool:
        name = tool_name(str(doc["name"]))

        def run(**kwargs: Any) -> str:
            with self._lock:
                self.executions.append(ToolExecution(
                    current_call_id(), name, dict(kwargs), TOOL_RESULT, ok=True,
                    executed=True, changed=False))
            return TOOL_RESULT

        return CallIdTool.from_function(
            func=run, name=name, description=str(doc.get("description") or ""),
            args_schema=tool_schema(doc), return_direct=return_direct)


@dataclass
class TaskRun:
    """Everything one task left behind in one mode (the input of ``agent_score``).

    Attributes:
        task: The task.
        mode: The mode name.
        messages: The whole conversation (the system prompt first, if any).
        start: Index in ``messages`` where the task's own messages begin.
        executions: The tool runs, in order.
        guard: toolguard's counters (state key ``toolguard``).
        controller: The retry controller's counters.
        limited: Ended by ``max_steps``, the recursion limit or a request timeout.
        timed_out: A model request ran past the client's timeout.
        error: ``repr`` of an exception that ended the run, else ``None``.
        wall_s: Seconds the run took.
    """

    task: AgentTask
    mode: str
    messages: list[BaseMessage]
    start: int
    executions: list[ToolExecution]
    guard: dict[str, int] = field(default_factory=dict)
    controller: dict[str, int] = field(default_factory=dict)
    limited: bool = False
    timed_out: bool = False
    error: str | None = None
    wall_s: float = 0.0


def run_task(
    task: AgentTask,
    graph_factory: GraphFactory | Callable[..., Any],
    model: BaseChatModel,
    *,
    mode: str = "run",
    protocol: Protocol = "single",
    max_steps: int = 6,
    recursion_limit: int | None = None,
    system_prompt: str | None = None,
    raise_errors: bool = False,
) -> TaskRun:
    """Run one task once: its messages into a fresh graph over fresh tools.

    Args:
        task: The task.
        graph_factory: ``(model, tools) -> graph``, e.g. a value of :data:`AGENT_MODES`.
        model: The chat model.
        mode: Name recorded in the run.
        protocol: ``"single"`` (tools are ``return_direct``) or ``"loop"``.
        max_steps: Model calls at most, >= 1.
        recursion_limit: LangGraph supersteps; default ``4 * max_steps + 8``.
        system_prompt: Prepended as a ``SystemMessage`` (default none: BFCL sends a
            function-calling model only the record's own messages).
        raise_errors: Re-raise an exception from the graph instead of recording it.

    Raises:
        ValueError: ``max_steps`` or ``recursion_limit`` < 1, or an unknown protocol.
    """
    if max_steps < 1:
        raise ValueError("max_steps must be >= 1")
    if protocol not in ("single", "loop"):
        raise ValueError(f"protocol must be 'single' or 'loop', got {protocol!r}")
    limit = recursion_limit if recursion_limit is not None else 4 * max_steps + 8
    if limit < 1:
        raise ValueError("recursion_limit must be >= 1")
    t0 = time.perf_counter()
    tools = TaskTools(task, return_direct=protocol == "single")
    head: list[BaseMessage] = [SystemMessage(system_prompt)] if system_prompt else []
    messages = [*head, *task.messages()]
    run = TaskRun(task=task, mode=mode, messages=messages, start=len(head),
                  executions=tools.executions)
    try:
        graph = graph_factory(model, tools.tools)
    except Exception as exc:
        if raise_errors:
            raise
        run.error = f"{type(exc).__name__}: {exc}"[:6000]
        return run
    turn = run_turn(graph, messages, max_steps=max_steps, recursion_limit=limit,
                    raise_errors=raise_errors)
    out = list(turn.last.get("messages") or messages)
    for call in unanswered(out[run.start:]):
        why = ("its arguments could not be parsed" if call.get("invalid")
               else "the step limit was reached" if turn.limited
               else "the run ended before it ran")
        out.append(ToolMessage(f"Not executed: {why}.", tool_call_id=str(call.get("id") or ""),
                               name=str(call.get("name") or ""), status="error",
                               artifact={"demo": "unanswered"}))
    run.messages = out
    run.limited, run.timed_out, run.error = turn.limited, turn.timed_out, turn.error
    add_counters(run.guard, turn.last.get(GUARD_KEY))
    add_counters(run.controller, turn.last.get(CONTROLLER_KEY))
    run.wall_s = time.perf_counter() - t0
    return run
