"""Run one demo episode in one mode: turn by turn, in a fresh BFCL environment.

Each user turn appends its messages and streams the mode's graph until the model answers in
text, the guard ends the turn with a question, or ``max_steps`` model calls were made (see
:func:`run_episode`).  The result is an :class:`EpisodeRun`, the input of
:func:`~toolguard_evals.demo.scoring.score_run`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    BaseMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp, GraphRecursionError

from toolguard_evals import bfcl
from toolguard_evals.demo._messages import (
    add_counters,
    model_steps,
    unanswered,
)
from toolguard_evals.demo.data import turn_messages
from toolguard_evals.demo.fault_plan import FaultPlan
from toolguard_evals.demo.tools import EpisodeTools, FaultStyle, ToolExecution

SYSTEM_PROMPT: Final = (
    "You are an expert in composing functions. You are given a question and a set of "
    "possible functions. Based on the question, you will need to make one or more "
    "function/tool calls to achieve the purpose. If none of the functions can be used, "
    "point it out. If the given question lacks the parameters required by the function, "
    "also point it out.\n\nAt each turn, you should try your best to complete the tasks "
    "requested by the user within the current turn. Continue to output functions to call "
    "until you have fulfilled the user's request to the best of your ability. Once you have "
    "no more functions to call, the system will consider the current turn complete and "
    "proceed to the next turn or task."
)
"""BFCL's ``classic`` system prompt (persona, task, multi-turn behaviour) without its
text-format part, since tools are bound natively (``constants/default_prompts.py``)."""

GUARD_KEY: Final = "toolguard"
"""State key of the guard's counters (``blocked``, ``asked_user``, ``change_tools``, ...)."""
CONTROLLER_KEY: Final = "toolguard_controller"
"""State key of the retry controller's counters (``retries``, ``skips``, ``finishes``)."""


GraphFactory = Callable[[BaseChatModel, Sequence[BaseTool]], Any]
"""``(model, tools) -> compiled graph`` over a state with a ``messages`` channel."""


@dataclass
class EpisodeRun:
    """Everything one episode left behind in one mode (input of ``scoring.score_run``).

    Attributes:
        episode: The episode.
        mode: The mode name.
        messages: The whole conversation (system prompt first, if any).
        turn_starts: Index in ``messages`` where each turn's messages begin (``None`` for
            turns not sent to the model).
        tools: The tools of each turn.
        executions: The tool executions, in order.
        state: The environment's final public state.
        guard: Guard counters summed over turns.
        controller: Controller counters summed over turns.
        step_limited_turns: Turns ended by ``max_steps``, the recursion limit or a model
            request that ran past the client's timeout.
        model_timeouts: Turns ended by a model request timeout (runaway generations).
        wall_s: Seconds the episode took.
        error: ``repr`` of an exception that ended the episode early, else ``None``.
        fault: The fault plan, if faults were injected.
    """

    episode: bfcl.MultiTurnEpisode
    mode: str
    messages: list[BaseMessage]
    turn_starts: list[int | None]
    tools: list[list[BaseTool]]
    executions: list[ToolExecution]
    state: dict[str, dict[str, Any]]
    guard: dict[str, int] = field(default_factory=dict)
    controller: dict[str, int] = field(default_factory=dict)
    step_limited_turns: int = 0
    model_timeouts: int = 0
    wall_s: float = 0.0
    error: str | None = None
    fault: FaultPlan | None = None


_CONTROLLER_ALIASES: Final = {"retry": "retries", "skip": "skips", "finish": "finishes"}


@dataclass
class TurnResult:
    """What :func:`run_turn` saw: the last state, and how the turn ended."""

    last: dict[str, Any]
    limited: bool = False
    timed_out: bool = False
    error: str | None = None


def _is_timeout(exc: BaseException) -> bool:
    """A request that ran past the client's timeout (openai's ``APITimeoutError``, httpx's)."""
    return isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower()


def run_turn(
    graph: Any, messages: list[BaseMessage], *, max_steps: int, recursion_limit: int,
    raise_errors: bool,
) -> TurnResult:
    """Run one user turn, keeping the last state seen even when the graph fails.

    The graph streams (``stream_mode="values"``) until it ends, or the model has been called
    ``max_steps`` times and its last calls were answered (``limited``), or it hits
    ``recursion_limit`` supersteps (``limited``), or a model request times out
    (``limited`` and ``timed_out``); another exception is recorded in ``error`` (or raised
    with ``raise_errors``).  Graph control signals (``GraphBubbleUp``) propagate.
    """
    start = len(messages)
    out = TurnResult(last={"messages": messages})
    config: RunnableConfig = {"recursion_limit": recursion_limit}
    try:
        for value in graph.stream({"messages": messages}, config, stream_mode="values"):
            out.last = value
            msgs = value.get("messages") or []
            if (model_steps(msgs[start:]) >= max_steps and msgs
                    and isinstance(msgs[-1], ToolMessage) and not unanswered(msgs[start:])):
                out.limited = True  # the next step would call the model again
                break
    except GraphRecursionError:
        out.limited = True
    except GraphBubbleUp:
        raise
    except Exception as exc:  # a model/server failure ends this episode, not the demo
        if _is_timeout(exc) and not raise_errors:
            # a runaway generation: end this turn, keep the episode going
            out.limited = True
            out.timed_out = True
            return out
        if raise_errors:
            raise
        out.error = f"{type(exc).__name__}: {exc}"[:6000]
    return out


def run_episode(
    episode: bfcl.MultiTurnEpisode,
    graph_factory: GraphFactory,
    model: BaseChatModel,
    *,
    mode: str = "run",
    max_steps: int = 10,
    recursion_limit: int | None = None,
    system_prompt: str | None = SYSTEM_PROMPT,
    fault: FaultPlan | None = None,
    fault_style: FaultStyle = "raise",
    raise_errors: bool = False,
) -> EpisodeRun:
    """Run one episode turn by turn in a fresh environment.

    Each turn appends its user message(s) and streams the graph (no checkpointer) until it
    ends, or until the model has been called ``max_steps`` times in the turn and its last
    calls were answered, or the graph hits ``recursion_limit`` supersteps
    (``GraphRecursionError``): that ends the turn, not the episode.  Calls left unanswered
    (step limit, or an ``AIMessage`` with only malformed calls in the plain loop) get a
    "not executed" ``ToolMessage`` so the history stays valid for the next turn.  The graph
    is rebuilt when the tool set changes (``miss_func``); the messages are kept.  Only the
    messages carry over between turns; counters in state are summed per turn.

    Args:
        episode: The episode.
        graph_factory: ``(model, tools) -> graph``, e.g.
            :func:`~toolguard_graphs.create_plain_agent`.
        model: The chat model.
        mode: Name recorded in the run.
        max_steps: Model calls per turn (BFCL's ``MAXIMUM_STEP_LIMIT`` is 20).
        recursion_limit: Supersteps per turn; default ``4 * max_steps + 8``.
        system_prompt: Prepended once as a ``SystemMessage`` (``None``: none).
        fault: Fault to inject (see :class:`FaultPlan`).
        fault_style: See :class:`EpisodeTools`.
        raise_errors: Re-raise an exception from the graph (default: record it in
            ``error`` and end the episode, so one failing episode does not end a demo).

    Raises:
        ValueError: For ``max_steps < 1`` or ``recursion_limit < 1``.
    """
    if max_steps < 1:
        raise ValueError("max_steps must be >= 1")
    limit = recursion_limit if recursion_limit is not None else 4 * max_steps + 8
    if limit < 1:
        raise ValueError("recursion_limit must be >= 1")
    t0 = time.perf_counter()
    env = bfcl.BFCLEnvironment.for_episode(episode)
    tools = EpisodeTools(episode, env, fault=fault, fault_style=fault_style)
    messages: list[BaseMessage] = [SystemMessage(system_prompt)] if system_prompt else []
    run = EpisodeRun(episode=episode, mode=mode, messages=messages, turn_starts=[],
                     tools=[], executions=tools.executions, state={}, fault=fault)
    graph: Any = None
    names: list[str] = []
    for t in range(len(episode.turns)):
        turn_tools = tools.tools_at(t)
        run.tools.append(turn_tools)
        new = turn_messages(episode, t)
        if not new or run.error is not None:
            run.turn_starts.append(None)
            continue
        if graph is None or [x.name for x in turn_tools] != names:
            graph = graph_factory(model, turn_tools)
            names = [x.name for x in turn_tools]
        run.turn_starts.append(len(messages))
        messages = [*messages, *new]
        turn = run_turn(graph, messages, max_steps=max_steps, recursion_limit=limit,
                         raise_errors=raise_errors)
        last = turn.last
        run.error = turn.error
        messages = list(last.get("messages") or messages)
        run.step_limited_turns += int(turn.limited)
        run.model_timeouts += int(turn.timed_out)
        for call in unanswered(messages):
            why = ("its arguments could not be parsed" if call.get("invalid")
                   else "the step limit of this turn was reached" if turn.limited
                   else "the turn ended before it ran")
            messages.append(ToolMessage(
                f"Not executed: {why}.", tool_call_id=str(call.get("id") or ""),
                name=str(call.get("name") or ""), status="error",
                artifact={"demo": "unanswered"}))
        add_counters(run.guard, last.get(GUARD_KEY))
        add_counters(run.controller, last.get(CONTROLLER_KEY), _CONTROLLER_ALIASES)
    run.messages = messages
    run.state = env.state()
    run.wall_s = time.perf_counter() - t0
    return run
