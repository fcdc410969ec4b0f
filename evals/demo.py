"""Agent demo: one chat model on BFCL v4 multi-turn episodes, unguarded vs guarded.

The same model and the same episodes run through two graphs from :mod:`toolguard_graphs.agent`:
``unguarded`` (:func:`~toolguard_graphs.agent.create_plain_agent`, the ReAct loop) and ``guarded``
(:func:`~toolguard_graphs.agent.create_guarded_agent`, the loop with a
:class:`~toolguard.node.GuardNode` before the tools and, by its default, a
:class:`~toolguard.retry.RetryController` around them); other modes can be passed to
:func:`run_demo`.  Each episode runs in BFCL's own
executable environment (:class:`toolguard_evals.bfcl.BFCLEnvironment`), turn by turn, as BFCL's
``base_handler.inference_multi_turn_FC`` does (docs/DATA.md §1):

- every user turn appends its messages and runs the graph until the model answers in text,
  the guard ends the turn with a clarification question (no checkpointer: ``ask_user``
  becomes a question and the next user turn is the answer, which for ``miss_param`` is
  exactly the clarification), or ``max_steps`` model calls were made;
- ``miss_func``: the held-out functions are hidden until their turn, which is the user
  prompt :data:`MISS_FUNC_PROMPT`; the graph is rebuilt with the new tool list and the
  message history is kept.

The graph is streamed (``stream_mode="values"``) rather than invoked, so a turn cut by the
step limit, the recursion limit or a model error keeps the messages it produced.  With
``faults=True`` the first state-changing tool of each episode fails 1-2 times or for good
(timeout, HTTP 429 with ``Retry-After``, 403; :mod:`toolguard_evals.faults`' exception types), the
same way in every mode.

Metrics per mode (see :func:`run_demo`) count what *reached* a tool, labelled by oracles
that do not ask the guard: the tool set at the time (type), the environment's own errors
and the JSON Schema (format), environment state snapshots (timing), and, for content only,
toolguard's deterministic :class:`~toolguard.detectors.ContentDetector` rules.  The final
environment state is compared with a replay of BFCL's gold calls (public attributes, as
``multi_turn_checker._compare_instances``).

Run ``python -m toolguard_evals.demo --base-url http://127.0.0.1:8080/v1 --model local`` for an
OpenAI-compatible server, or ``--gold`` for a scripted model replaying the gold calls (a
smoke test of the harness).  Needs ``pip install --no-deps bfcl-eval==2026.3.23`` and
``mpmath``.
"""

from __future__ import annotations

import argparse
import contextvars
import copy
import functools
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Literal, get_args

from jsonschema import Draft202012Validator
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.errors import GraphBubbleUp, GraphRecursionError

from toolguard import ContentDetector, ToolSpec
from toolguard.context import build_context, canonical_args
from toolguard.specs import Effects, gorilla_to_json_schema
from toolguard_evals import bfcl
from toolguard_evals.faults import (
    FAULT_KINDS,
    FaultKind,
    InjectedFault,
    InjectedHTTPError,
    InjectedTimeout,
    make_fault,
)
from toolguard_graphs import create_guarded_agent, create_plain_agent

__all__ = [
    "CONTROLLER_KEY",
    "DEFAULT_MIX",
    "DEMO_FAULT_KINDS",
    "GUARD_KEY",
    "MISS_FUNC_PROMPT",
    "REPEATABLE_METHODS",
    "SYSTEM_PROMPT",
    "WRITE_METHODS",
    "CallOutcome",
    "EpisodeRun",
    "EpisodeTools",
    "FaultPlan",
    "InjectedFault",
    "InjectedHTTPError",
    "InjectedTimeout",
    "ToolExecution",
    "default_modes",
    "episodes_by_id",
    "gold_script",
    "gold_state",
    "main",
    "method_effects",
    "plan_fault",
    "print_report",
    "run_demo",
    "run_episode",
    "score_run",
    "select_episodes",
]

# ============================================================================ constants
MISS_FUNC_PROMPT: Final = (
    "I have updated some more functions you can choose from. What about now?"
)
"""User prompt of the turn where held-out ``miss_func`` docs are added
(BFCL's ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``)."""

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

DEFAULT_MIX: Final[tuple[bfcl.MultiTurnCategory, ...]] = (
    "multi_turn_base",
    "multi_turn_miss_param",
    "multi_turn_miss_func",
    "multi_turn_base",
)
"""Categories of episodes 1, 2, 3, 4, 5, ... (cycled): 4 episodes give 2 base,
1 miss_param, 1 miss_func."""

GUARD_KEY: Final = "toolguard"
"""State key of the guard's counters (:class:`~toolguard.node.GuardCounters`)."""
CONTROLLER_KEY: Final = "toolguard_controller"
"""State key of the retry controller's counters (``retries``, ``skips``, ``finishes``)."""

HallucinationLabel = Literal["type", "timing", "format", "content"]
HALLUCINATION_LABELS: Final[tuple[HallucinationLabel, ...]] = get_args(HallucinationLabel)

AnsweredBy = Literal["tool", "tool_node", "guard", "harness", "other", "none"]
"""Who answered a proposed call: our tool function ran (``tool``, also for an injected
fault), ``ToolNode`` answered without running it (unknown name, invalid arguments),
the guard, this harness (step limit, unanswered calls), something else (e.g. a controller),
or nobody."""

FaultStyle = Literal["raise", "return"]

WRITE_METHODS: Final[Mapping[str, frozenset[str]]] = {
    "GorillaFileSystem": frozenset(
        {"cd", "cp", "echo", "mkdir", "mv", "rm", "rmdir", "touch"}),
    "MathAPI": frozenset(),
    "MessageAPI": frozenset({"add_contact", "delete_message", "message_login", "send_message"}),
    "TwitterAPI": frozenset({"authenticate_twitter", "comment", "follow_user", "mention",
                             "post_tweet", "retweet", "unfollow_user"}),
    "TicketAPI": frozenset({"close_ticket", "create_ticket", "edit_ticket", "logout",
                            "resolve_ticket", "ticket_login"}),
    "TradingBot": frozenset({"add_to_watchlist", "cancel_order", "fund_account", "place_order",
                             "remove_stock_from_watchlist", "trading_login", "trading_logout",
                             "withdraw_funds"}),
    "TravelAPI": frozenset({"authenticate_travel", "book_flight", "cancel_booking",
                            "purchase_insurance", "register_credit_card", "set_budget_limit"}),
    "VehicleControlAPI": frozenset({"activateParkingBrake", "adjustClimateControl",
                                    "fillFuelTank", "lockDoors", "pressBrakePedal",
                                    "releaseBrakePedal", "setCruiseControl", "setHeadlights",
                                    "set_navigation", "startEngine"}),
}
"""State-changing methods per BFCL environment class; every other method is read-only.

Found empirically (DATA.md §2b): replaying all 3422 gold calls of the three multi-turn
categories and comparing each instance's attributes before and after the call (``random.Random``
state left out), completed for methods never called by the gold by reading which ones assign
to ``self``.  ``cd`` changes only the private current directory, which later calls depend on.
"""

REPEATABLE_METHODS: Final = frozenset({"cd"})
"""Methods whose identical repeat is meaningful (``cd("..")`` twice; the only identical repeat
in BFCL's multi-turn gold is a ``cd``): declared ``repeatable`` to the guard and never a
timing hallucination for the oracle."""

_SCHEMA_ERROR = re.compile(
    r"unexpected keyword argument|missing \d+ required (positional|keyword)"
    r"|required (positional|keyword)[- ]only argument|validation error|got multiple values"
    r"|takes \d+ positional argument|positional arguments? but \d+ (were|was) given",
    re.I,
)
_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "toolguard_demo_call_id", default=None)


def method_effects(class_name: str | None, method: str) -> Effects:
    """``"write"`` / ``"read"`` for a method of a known BFCL class, else ``"unknown"``."""
    writes = WRITE_METHODS.get(class_name or "")
    if writes is None:
        return "unknown"
    return "write" if method in writes else "read"


# ============================================================================ episodes
@functools.cache
def _class_importable(class_name: str) -> bool:
    try:
        bfcl.environment_class(class_name)
    except (ImportError, ValueError):  # memory / web-search classes need heavy packages
        return False
    return True


def episode_importable(episode: bfcl.MultiTurnEpisode) -> bool:
    """Whether every involved environment class imports here."""
    return all(_class_importable(c) for c in episode.involved_classes)


def doc_chars(episode: bfcl.MultiTurnEpisode) -> int:
    """Size of the episode's function docs as JSON (characters): a proxy for prompt size."""
    return len(json.dumps(episode.functions))


@functools.cache
def _episodes(category: bfcl.MultiTurnCategory) -> tuple[bfcl.MultiTurnEpisode, ...]:
    """A category's episodes, loaded once per process (shared: do not mutate them)."""
    return tuple(bfcl.load_multi_turn(category))


def _base_index(episode: bfcl.MultiTurnEpisode) -> int:
    return int(episode.id.rsplit("_", 1)[-1])


def select_episodes(
    n: int = 4,
    *,
    seed: int = 0,
    mix: Sequence[bfcl.MultiTurnCategory] = DEFAULT_MIX,
    max_classes: int = 1,
    max_doc_chars: int | None = 14_000,
) -> list[bfcl.MultiTurnEpisode]:
    """A deterministic mix of multi-turn episodes that small models' contexts fit.

    Episode ``i`` comes from ``mix[i % len(mix)]``.  Within a category, episodes whose
    classes all import, with at most ``max_classes`` involved classes and at most
    ``max_doc_chars`` characters of docs, are preferred (with the defaults: the
    ``TradingBot`` and ``GorillaFileSystem`` episodes, about 3-4k tokens of tools); they
    are sampled with ``random.Random(f"{seed}:{category}")``.  If too few qualify, the
    rest is filled with the smallest other ones.  No two picked episodes share a scenario
    (``multi_turn_miss_param_7`` is ``multi_turn_base_7`` with an argument removed).

    Args:
        n: Number of episodes (>= 1).
        seed: Sampling seed.
        mix: Category cycle.
        max_classes: Preferred maximum of involved classes.
        max_doc_chars: Preferred maximum of doc characters (``None``: no limit).

    Returns:
        The episodes, grouped by category in ``MULTI_TURN_CATEGORIES`` order, by id within.

    Raises:
        ValueError: For ``n < 1``, an empty or unknown ``mix``, or too few episodes.
        BFCLNotInstalledError: If ``bfcl-eval`` is not installed.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    if not mix or any(c not in bfcl.MULTI_TURN_CATEGORIES for c in mix):
        raise ValueError(f"mix must name categories among {list(bfcl.MULTI_TURN_CATEGORIES)}")
    wanted = Counter(mix[i % len(mix)] for i in range(n))
    used: set[int] = set()
    out: list[bfcl.MultiTurnEpisode] = []
    for category in bfcl.MULTI_TURN_CATEGORIES:
        k = wanted.get(category, 0)
        if not k:
            continue
        candidates = [e for e in _episodes(category) if episode_importable(e)]

        def preferred(e: bfcl.MultiTurnEpisode) -> bool:
            return len(e.involved_classes) <= max_classes and (
                max_doc_chars is None or doc_chars(e) <= max_doc_chars)

        rng = random.Random(f"{seed}:{category}")
        pool = [e for e in candidates if preferred(e) and _base_index(e) not in used]
        picked = rng.sample(pool, min(k, len(pool)))
        if len(picked) < k:
            rest = sorted((e for e in candidates if e not in picked
                           and _base_index(e) not in used),
                          key=lambda e: (len(e.involved_classes), doc_chars(e), e.id))
            picked += rest[: k - len(picked)]
        if len(picked) < k:
            raise ValueError(f"only {len(picked)} usable {category} episodes, {k} wanted")
        used.update(_base_index(e) for e in picked)
        out += sorted(picked, key=_base_index)
    return out


def episodes_by_id(ids: Sequence[str]) -> list[bfcl.MultiTurnEpisode]:
    """Load episodes by id, e.g. ``["multi_turn_base_100"]``.

    Raises:
        ValueError: For an id of no multi-turn category, or one not found.
    """
    out: list[bfcl.MultiTurnEpisode] = []
    for episode_id in ids:
        category = next((c for c in bfcl.MULTI_TURN_CATEGORIES
                         if re.fullmatch(rf"{c}_\d+", episode_id)), None)
        if category is None:
            raise ValueError(f"{episode_id!r} is not a multi-turn episode id")
        found = [e for e in _episodes(category) if e.id == episode_id]
        if not found:
            raise ValueError(f"no episode {episode_id!r}")
        out.append(found[0])
    return out


_GOLD_STATES: dict[str, dict[str, dict[str, Any]]] = {}


def gold_state(episode: bfcl.MultiTurnEpisode) -> dict[str, dict[str, Any]]:
    """Public state of every instance after BFCL's gold calls of all turns (cached per id)."""
    if episode.id not in _GOLD_STATES:
        env, _ = bfcl.replay(episode)
        _GOLD_STATES[episode.id] = env.state()
    return _GOLD_STATES[episode.id]


def gold_script(episode: bfcl.MultiTurnEpisode) -> list[AIMessage]:
    """Replies of a model that makes exactly the gold calls, for a ``ScriptedChatModel``.

    Per turn that the harness sends to the model: one ``AIMessage`` per gold call (gold
    calls depend on each other, so they are not sent in parallel), then a text answer.
    Turns with empty gold get only the text answer.

    Raises:
        ValueError: If a gold call does not parse or fit its method.
    """
    env = bfcl.BFCLEnvironment.for_episode(episode)
    out: list[AIMessage] = []
    for t, calls in enumerate(episode.gold):
        if not _turn_messages(episode, t):
            continue
        for i, source in enumerate(calls):
            parsed = bfcl.parse_call(source)
            out.append(AIMessage("", tool_calls=[
                {"name": parsed.name, "args": env.bind(parsed), "id": f"gold_t{t}_{i}",
                 "type": "tool_call"}]))
        out.append(AIMessage(f"Done with turn {t}."))
    return out


def _turn_messages(episode: bfcl.MultiTurnEpisode, turn: int) -> list[BaseMessage]:
    """The messages a turn appends (the ``miss_func`` prompt for a held-out turn)."""
    raw = episode.turns[turn]
    if not raw:
        return [HumanMessage(MISS_FUNC_PROMPT)] if turn in episode.missed_function else []
    roles: dict[str, type[BaseMessage]] = {"user": HumanMessage, "system": SystemMessage,
                                           "assistant": AIMessage}
    return [roles.get(m.get("role", "user"), HumanMessage)(m["content"]) for m in raw]


# ============================================================================ faults
DEMO_FAULT_KINDS: Final[tuple[FaultKind, ...]] = (
    "transient_timeout", "transient_429", "permanent_403")
"""Faults :func:`plan_fault` draws from by default (any of
:data:`toolguard_evals.faults.FAULT_KINDS` may be asked for)."""


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Which call of an episode fails, how and how often (DATA.md §2c).

    The first state-changing (``write``) tool the agent executes in the episode is the
    target; its first ``failures`` executions fail (every one when ``failures`` is ``None``:
    ``permanent_403``).  The exceptions are :mod:`toolguard_evals.faults`' (``InjectedTimeout``, a
    ``TimeoutError``; ``InjectedHTTPError`` with ``status_code`` and ``headers``, e.g.
    ``Retry-After``), built by :func:`toolguard_evals.faults.make_fault`.  Faults leave the
    environment untouched, except ``ambiguous_timeout``, which executes the call and then
    raises the timeout.

    Attributes:
        kind: One of :data:`toolguard_evals.faults.FAULT_KINDS`.
        failures: Failing executions of the target tool (1-2), or ``None`` for permanent.
    """

    kind: FaultKind
    failures: int | None

    def error(self) -> InjectedFault:
        """The exception one failing execution raises."""
        return make_fault(self.kind)


def plan_fault(
    episode_id: str, seed: int = 0, *, kinds: Sequence[FaultKind] = DEMO_FAULT_KINDS
) -> FaultPlan:
    """The fault of one episode, drawn with ``random.Random(f"{seed}:{episode_id}:fault")``.

    Transient kinds fail 1 or 2 times (a retry policy reaches the gold state, DATA.md
    §2c); ``permanent_403`` fails every time (the right action is skip or finish).

    Raises:
        ValueError: For an empty or unknown ``kinds``.
    """
    if not kinds or any(k not in FAULT_KINDS for k in kinds):
        raise ValueError(f"kinds must name fault kinds among {list(FAULT_KINDS)}")
    rng = random.Random(f"{seed}:{episode_id}:fault")
    kind = rng.choice(list(kinds))
    failures = rng.choice((1, 2))
    return FaultPlan(kind=kind, failures=None if kind == "permanent_403" else failures)


# ============================================================================ tools
@dataclass(frozen=True, slots=True)
class ToolExecution:
    """One time a tool function was entered.

    Attributes:
        call_id: The tool call id (``None`` when invoked outside a tool call).
        name: Method name.
        args: Arguments as the model sent them.
        content: What the tool returned (or the injected fault's text).
        ok: The environment reported success.
        executed: The environment ran it (``False``: a fault was injected instead).
        changed: The environment's state (public and private attributes) differs after it.
        fault: The injected fault's kind, if any.
    """

    call_id: str | None
    name: str
    args: dict[str, Any]
    content: str
    ok: bool
    executed: bool
    changed: bool
    fault: FaultKind | None = None


class _EnvTool(StructuredTool):
    """A ``StructuredTool`` that exposes the id of the tool call it runs to its function."""

    def invoke(
        self, input: str | dict[str, Any] | ToolCall, config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        token = _CALL_ID.set(_call_id_of(input))
        try:
            return super().invoke(input, config, **kwargs)
        finally:
            _CALL_ID.reset(token)

    async def ainvoke(
        self, input: str | dict[str, Any] | ToolCall, config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        token = _CALL_ID.set(_call_id_of(input))
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            _CALL_ID.reset(token)


def _call_id_of(value: Any) -> str | None:
    if isinstance(value, Mapping) and value.get("type") == "tool_call":
        cid = value.get("id")
        return str(cid) if cid is not None else None
    return None


def _snapshot(env: bfcl.BFCLEnvironment) -> dict[str, dict[str, Any]]:
    """All attributes per instance (deep copies) but ``random.Random`` generators."""
    return {
        cls: {k: copy.deepcopy(v) for k, v in vars(inst).items()
              if not isinstance(v, random.Random)}
        for cls, inst in env.instances.items()
    }


class EpisodeTools:
    """LangChain tools for one episode, executing on its live environment.

    Every BFCL doc becomes a ``StructuredTool`` with the doc's parameters as JSON Schema
    (:func:`~toolguard.specs.gorilla_to_json_schema`) and ``metadata`` ``{"effects":
    "read" | "write" | "unknown", "repeatable": bool}`` (see :data:`WRITE_METHODS`,
    :data:`REPEATABLE_METHODS`).  A tool runs ``env.call(name, args)`` and returns the
    JSON-serialised result (errors as BFCL's executor words them, never raised), and
    records a :class:`ToolExecution`.  Executions are serialised by a lock (``ToolNode``
    runs parallel calls in threads; the environments are not thread-safe).

    Args:
        episode: The episode.
        env: Its live environment.
        fault: A :class:`FaultPlan`, or ``None`` for no faults.
        fault_style: ``"raise"`` the fault's exception (``ToolNode`` or a controller turns
            it into a message), or ``"return"`` ``{"error": text}`` as the tool's result.
    """

    def __init__(
        self,
        episode: bfcl.MultiTurnEpisode,
        env: bfcl.BFCLEnvironment,
        *,
        fault: FaultPlan | None = None,
        fault_style: FaultStyle = "raise",
    ) -> None:
        if fault_style not in ("raise", "return"):
            raise ValueError(f"fault_style must be 'raise' or 'return', got {fault_style!r}")
        self.episode = episode
        self.env = env
        self.fault = fault
        self.fault_style = fault_style
        self.executions: list[ToolExecution] = []
        self._lock = threading.Lock()
        self._owners = env.methods
        self._fault_target: str | None = None
        self._fault_count = 0
        self.tools: dict[str, BaseTool] = {d["name"]: self._make(d) for d in episode.functions}

    def tools_at(self, turn: int) -> list[BaseTool]:
        """The tools the model may call at ``turn`` (held-out ``miss_func`` tools hidden)."""
        return [self.tools[d["name"]] for d in self.episode.tools_at(turn)]

    def effects(self, name: str) -> Effects:
        """:func:`method_effects` of the class that owns ``name``."""
        return method_effects(self._owners.get(name), name)

    def _make(self, doc: Mapping[str, Any]) -> BaseTool:
        name = str(doc["name"])
        schema = gorilla_to_json_schema(doc.get("parameters") or {})
        schema["type"] = "object"
        schema.setdefault("properties", {})

        def run(**kwargs: Any) -> str:
            return self._execute(name, kwargs)

        return _EnvTool.from_function(
            func=run, name=name, description=str(doc.get("description") or ""),
            args_schema=schema,
            metadata={"effects": self.effects(name), "repeatable": name in REPEATABLE_METHODS},
        )

    def _execute(self, name: str, args: dict[str, Any]) -> str:
        with self._lock:
            call_id = _CALL_ID.get()
            plan = self.fault if self._fails_now(name) else None
            if plan is not None and plan.kind != "ambiguous_timeout":
                error = plan.error()
                self.executions.append(ToolExecution(
                    call_id, name, dict(args), str(error), ok=False, executed=False,
                    changed=False, fault=plan.kind))
                return self._fail(error)
            before = _snapshot(self.env)
            result = self.env.call(name, args)
            changed = _snapshot(self.env) != before
            if plan is not None:  # ambiguous: the effect happened, the caller sees a timeout
                error = plan.error()
                self.executions.append(ToolExecution(
                    call_id, name, dict(args), str(error), ok=False, executed=True,
                    changed=changed, fault=plan.kind))
                return self._fail(error)
            self.executions.append(ToolExecution(
                call_id, name, dict(args), result.content, ok=result.ok, executed=True,
                changed=changed))
            return result.content

    def _fail(self, error: InjectedFault) -> str:
        if self.fault_style == "raise":
            raise error
        return json.dumps({"error": f"{type(error).__name__}: {error}"})

    def _fails_now(self, name: str) -> bool:
        """Whether this execution of ``name`` is one the fault plan makes fail."""
        plan = self.fault
        if plan is None or self.effects(name) != "write":
            return False
        if self._fault_target is None:
            self._fault_target = name
        if name != self._fault_target:
            return False
        if plan.failures is not None and self._fault_count >= plan.failures:
            return False
        self._fault_count += 1
        return True


# ============================================================================ running
GraphFactory = Callable[[BaseChatModel, Sequence[BaseTool]], Any]
"""``(model, tools) -> compiled graph`` over a state with a ``messages`` channel."""
ModelFactory = Callable[[bfcl.MultiTurnEpisode], BaseChatModel]
"""Called once per episode and mode (scripted models need a fresh script each run)."""


def default_modes() -> dict[str, GraphFactory]:
    """``{"unguarded": create_plain_agent, "guarded": create_guarded_agent}``."""
    return {"unguarded": create_plain_agent, "guarded": create_guarded_agent}


@dataclass
class EpisodeRun:
    """Everything one episode left behind in one mode (input of :func:`score_run`).

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


def _is_guard_question(m: BaseMessage) -> bool:
    """An ``AIMessage`` toolguard wrote, not the model (``ask_user`` question, ``finish``)."""
    return isinstance(m, AIMessage) and bool((m.response_metadata or {}).get("toolguard"))


def _calls_of(m: AIMessage) -> list[dict[str, Any]]:
    """Valid and invalid tool calls of a message, as dicts with ``id``, ``name``, ``args``."""
    out: list[dict[str, Any]] = [dict(tc) for tc in m.tool_calls]
    out += [{**dict(itc), "invalid": True} for itc in m.invalid_tool_calls]
    return out


def _unanswered(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    return [c for m in messages if isinstance(m, AIMessage)
            for c in _calls_of(m) if c.get("id") not in answered]


def _model_steps(messages: Sequence[BaseMessage]) -> int:
    return sum(1 for m in messages if isinstance(m, AIMessage) and not _is_guard_question(m))


def _add_counters(
    total: dict[str, int], value: Any, aliases: Mapping[str, str] | None = None
) -> None:
    if not isinstance(value, Mapping):
        return
    aliases = aliases or {}
    for key, n in value.items():
        if isinstance(n, (int, float)) and not isinstance(n, bool):
            k = aliases.get(str(key), str(key))
            total[k] = total.get(k, 0) + int(n)


_CONTROLLER_ALIASES: Final = {"retry": "retries", "skip": "skips", "finish": "finishes"}


@dataclass
class _TurnResult:
    last: dict[str, Any]
    limited: bool = False
    timed_out: bool = False
    error: str | None = None


def _is_timeout(exc: BaseException) -> bool:
    """A request that ran past the client's timeout (openai's ``APITimeoutError``, httpx's)."""
    return isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower()


def _run_turn(
    graph: Any, messages: list[BaseMessage], *, max_steps: int, recursion_limit: int,
    raise_errors: bool,
) -> _TurnResult:
    """Run one user turn, keeping the last state seen even when the graph fails."""
    start = len(messages)
    out = _TurnResult(last={"messages": messages})
    config: RunnableConfig = {"recursion_limit": recursion_limit}
    try:
        for value in graph.stream({"messages": messages}, config, stream_mode="values"):
            out.last = value
            msgs = value.get("messages") or []
            if (_model_steps(msgs[start:]) >= max_steps and msgs
                    and isinstance(msgs[-1], ToolMessage) and not _unanswered(msgs[start:])):
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
        new = _turn_messages(episode, t)
        if not new or run.error is not None:
            run.turn_starts.append(None)
            continue
        if graph is None or [x.name for x in turn_tools] != names:
            graph = graph_factory(model, turn_tools)
            names = [x.name for x in turn_tools]
        run.turn_starts.append(len(messages))
        messages = [*messages, *new]
        turn = _run_turn(graph, messages, max_steps=max_steps, recursion_limit=limit,
                         raise_errors=raise_errors)
        last = turn.last
        run.error = turn.error
        messages = list(last.get("messages") or messages)
        run.step_limited_turns += int(turn.limited)
        run.model_timeouts += int(turn.timed_out)
        for call in _unanswered(messages):
            why = ("its arguments could not be parsed" if call.get("invalid")
                   else "the step limit of this turn was reached" if turn.limited
                   else "the turn ended before it ran")
            messages.append(ToolMessage(
                f"Not executed: {why}.", tool_call_id=str(call.get("id") or ""),
                name=str(call.get("name") or ""), status="error",
                artifact={"demo": "unanswered"}))
        _add_counters(run.guard, last.get(GUARD_KEY))
        _add_counters(run.controller, last.get(CONTROLLER_KEY), _CONTROLLER_ALIASES)
    run.messages = messages
    run.state = env.state()
    run.wall_s = time.perf_counter() - t0
    return run


# ============================================================================ scoring
@dataclass(frozen=True, slots=True)
class CallOutcome:
    """One proposed tool call, what happened to it and the oracle's label.

    Attributes:
        turn: Turn index.
        call: ``{"id", "name", "args"}`` as proposed (``args`` a string for malformed ones).
        answered_by: See :data:`AnsweredBy`.
        executed: The environment ran it.
        result: The answer's text (cut to 500 characters), or ``None``.
        label: The oracle's hallucination label for a call that reached a tool, else
            ``None``.
        verdict: The guard's verdict dump, when the guard answered the call.
    """

    turn: int
    call: dict[str, Any]
    answered_by: AnsweredBy
    executed: bool
    result: str | None
    label: HallucinationLabel | None
    verdict: dict[str, Any] | None


def _answered_by(answer: ToolMessage | None, ran: bool) -> AnsweredBy:
    if ran:
        return "tool"
    if answer is None:
        return "none"
    artifact = answer.artifact if isinstance(answer.artifact, Mapping) else {}
    text = answer.content if isinstance(answer.content, str) else str(answer.content)
    if "toolguard" in artifact or text.startswith("Not executed: waiting for the user"):
        return "guard"
    if "demo" in artifact:
        return "harness"
    if text.startswith("Error"):
        return "tool_node"
    return "other"


@functools.lru_cache(maxsize=512)
def _validator(schema_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_json))


def _violates_schema(tool: BaseTool | None, args: Any) -> bool:
    if tool is None or not isinstance(tool.args_schema, dict):
        return False
    schema = json.dumps(tool.args_schema, sort_keys=True, default=str)
    return not _validator(schema).is_valid(args)


def score_run(run: EpisodeRun) -> tuple[dict[str, Any], list[CallOutcome]]:
    """Metrics of one run, and the outcome of every proposed call.

    Oracles, for calls that reached a tool (first match wins, in the guard's order):

    - ``type``: the name is not in the turn's tool set and ``ToolNode`` answered it (it
      reached the tool node; the guard would have answered instead).
    - ``format``: the name exists and ``ToolNode`` refused the call without running it, or
      the environment ran it and failed with a signature error (unexpected keyword, missing
      argument, validation error) or with arguments that break the doc's JSON Schema.
    - ``timing``: the environment ran an identical call (name and
      :func:`~toolguard.context.canonical_args`) of another tool call that succeeded, and
      no execution in between changed the environment (all attributes but ``random.Random``
      compared); :data:`REPEATABLE_METHODS` are exempt.
    - ``content``: the environment ran a call whose argument values toolguard's own
      deterministic :class:`~toolguard.detectors.ContentDetector` rules flag as ungrounded
      in the conversation before it.  This label is not independent of toolguard.

    Returns:
        ``(metrics, outcomes)``; ``metrics`` has the keys of one mode's result in
        :func:`run_demo` (with ``state_match`` 0 or 1) plus ``id``, ``category``,
        ``executed``, ``model_calls``, ``step_limited_turns``, ``faults_injected``,
        ``error``.
    """
    messages = run.messages
    answers = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    by_call: dict[str, list[int]] = {}
    for i, ex in enumerate(run.executions):
        if ex.call_id is not None:
            by_call.setdefault(ex.call_id, []).append(i)
    starts = [(s, t) for t, s in enumerate(run.turn_starts) if s is not None]
    specs_cache: dict[int, dict[str, ToolSpec]] = {}
    detector = ContentDetector()
    outcomes: list[CallOutcome] = []
    counts = dict.fromkeys(HALLUCINATION_LABELS, 0)
    proposed = tokens = model_calls = 0
    for pos, m in enumerate(messages):
        if not isinstance(m, AIMessage) or _is_guard_question(m):
            continue
        model_calls += 1
        usage = m.usage_metadata
        tokens += int(usage.get("total_tokens", 0)) if usage else 0
        turn = max((t for s, t in starts if s <= pos), default=0)
        tools = {x.name: x for x in run.tools[turn]} if turn < len(run.tools) else {}
        for call in _calls_of(m):
            proposed += 1
            cid = str(call.get("id") or "")
            answer = answers.get(cid)
            runs = [run.executions[i] for i in by_call.get(cid, [])]
            done = [i for i in by_call.get(cid, []) if run.executions[i].executed]
            by = _answered_by(answer, bool(runs))
            label: HallucinationLabel | None = None
            name = str(call.get("name") or "")
            if by == "tool_node" and name not in tools:
                label = "type"
            elif by == "tool_node" or (done and _format_failure(
                    run.executions[done[-1]], tools.get(name))):
                label = "format"
            elif done and _timing(run, done[0], cid):
                label = "timing"
            elif done and not call.get("invalid"):
                if turn not in specs_cache:
                    specs_cache[turn] = {n: ToolSpec.from_langchain(x) for n, x in tools.items()}
                ctx = build_context(messages[: pos + 1], specs_cache[turn])
                proposed_call = next((c for c in ctx.calls if c.id == cid), None)
                if proposed_call is not None and detector.ungrounded(proposed_call, ctx):
                    label = "content"
            if label is not None:
                counts[label] += 1
            artifact = answer.artifact if answer is not None and isinstance(
                answer.artifact, Mapping) else {}
            text = None if answer is None else (
                answer.content if isinstance(answer.content, str) else str(answer.content))
            outcomes.append(CallOutcome(
                turn=turn,
                call={"id": cid, "name": name, "args": call.get("args")},
                answered_by=by, executed=bool(done),
                result=None if text is None else text[:500], label=label,
                verdict=artifact.get("toolguard") if isinstance(
                    artifact.get("toolguard"), Mapping) else None,
            ))
    guard, ctl = run.guard, run.controller
    metrics: dict[str, Any] = {
        "id": run.episode.id,
        "category": run.episode.category,
        "calls_proposed": proposed,
        "executed": sum(1 for e in run.executions if e.executed),
        "hallucinated_executed": counts,
        "blocked": guard.get("blocked", 0),
        "asked_user": guard.get("asked_user", 0),
        "change_tools": guard.get("change_tools", 0),
        "retries": ctl.get("retries", 0),
        "skips": ctl.get("skips", 0),
        "finishes": ctl.get("finishes", 0),
        "state_match": int(run.state == gold_state(run.episode)),
        "episodes": 1,
        "errors": int(run.error is not None),
        "error": run.error,
        "model_calls": model_calls,
        "step_limited_turns": run.step_limited_turns,
        "model_timeouts": run.model_timeouts,
        "faults_injected": sum(1 for e in run.executions if e.fault is not None),
        "tokens": tokens,
        "wall_s": round(run.wall_s, 3),
    }
    return metrics, outcomes


def _format_failure(ex: ToolExecution, tool: BaseTool | None) -> bool:
    if ex.ok:
        return False
    return bool(_SCHEMA_ERROR.search(ex.content)) or _violates_schema(tool, ex.args)


def _timing(run: EpisodeRun, index: int, call_id: str) -> bool:
    ex = run.executions[index]
    if ex.name in REPEATABLE_METHODS:
        return False
    key = canonical_args(ex.args)
    for j in range(index - 1, -1, -1):
        prior = run.executions[j]
        if (prior.executed and prior.ok and prior.call_id != call_id
                and prior.name == ex.name and canonical_args(prior.args) == key):
            return not any(run.executions[k].changed for k in range(j + 1, index))
    return False


# ============================================================================ the demo
_SUMMED: Final = ("calls_proposed", "executed", "blocked", "asked_user", "change_tools",
                  "retries", "skips", "finishes", "state_match", "episodes", "errors",
                  "model_calls", "step_limited_turns", "model_timeouts", "faults_injected",
                  "tokens")


def _empty_summary() -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(_SUMMED, 0)
    out["hallucinated_executed"] = dict.fromkeys(HALLUCINATION_LABELS, 0)
    out["wall_s"] = 0.0
    out["per_episode"] = []
    return out


def _accumulate(summary: dict[str, Any], metrics: Mapping[str, Any]) -> None:
    for key in _SUMMED:
        summary[key] += metrics[key]
    for key in HALLUCINATION_LABELS:
        summary["hallucinated_executed"][key] += metrics["hallucinated_executed"][key]
    summary["wall_s"] = round(summary["wall_s"] + metrics["wall_s"], 3)
    summary["per_episode"].append(dict(metrics))


def _trace_lines(run: EpisodeRun, outcomes: Sequence[CallOutcome]) -> Iterator[dict[str, Any]]:
    for o in outcomes:
        verdict = o.verdict or {}
        yield {
            "episode": run.episode.id,
            "category": run.episode.category,
            "turn": o.turn,
            "mode": run.mode,
            "tool_call": o.call,
            "action": verdict.get("action", "allow"),
            "hallucination": verdict.get("hallucination"),
            "reason": verdict.get("reason", ""),
            "answered_by": o.answered_by,
            "executed": o.executed,
            "oracle": o.label,
            "result": o.result,
        }


def _model_name(model: BaseChatModel) -> str:
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def run_demo(
    model_factory: ModelFactory | BaseChatModel,
    *,
    episodes: int | Sequence[bfcl.MultiTurnEpisode | str] = 4,
    seed: int = 0,
    trace_path: str | Path | None = None,
    progress: bool = True,
    faults: bool = False,
    fault_style: FaultStyle = "raise",
    modes: Mapping[str, GraphFactory] | None = None,
    max_steps: int = 10,
    recursion_limit: int | None = None,
    system_prompt: str | None = SYSTEM_PROMPT,
    raise_errors: bool = False,
) -> dict[str, Any]:
    """Run the same model on the same BFCL episodes in every mode and compare.

    Args:
        model_factory: A chat model (shared by all runs), or a function
            ``episode -> model`` called once per episode and mode.
        episodes: How many to pick with :func:`select_episodes` (``seed``), or the
            episodes (or ids) themselves.
        seed: Episode selection and fault seed.
        trace_path: Write a JSON-lines trace here: one line per proposed tool call and mode
            with ``episode``, ``category``, ``turn``, ``mode``, ``tool_call``, the guard's
            ``action``/``hallucination``/``reason`` (``"allow"`` when no guard answered),
            ``answered_by``, ``executed``, ``oracle`` (see :func:`score_run`), ``result``.
        progress: Show a progress bar over episodes x modes.
        faults: Inject a fault into the first state-changing tool of each episode (see
            :func:`plan_fault`), identically in every mode.
        fault_style: See :class:`EpisodeTools`.
        modes: Mode name -> graph factory; default :func:`default_modes`.
        max_steps: Model calls per turn.
        recursion_limit: Supersteps per turn (see :func:`run_episode`).
        system_prompt: System prompt for every mode (default :data:`SYSTEM_PROMPT`).
        raise_errors: Re-raise graph/model exceptions instead of recording them.

    Returns:
        ``{mode: summary, ..., "config": {...}}``, by default with modes ``unguarded`` and
        ``guarded``.  A summary holds sums over episodes: ``calls_proposed`` (tool calls in
        the model's messages), ``hallucinated_executed`` ``{type, timing, format, content}``
        (calls that reached a tool and the oracle labels, see :func:`score_run`),
        ``blocked``, ``asked_user``, ``change_tools`` (guard counters, state key
        :data:`GUARD_KEY`), ``retries``, ``skips``, ``finishes`` (controller counters,
        state key :data:`CONTROLLER_KEY`; 0 without a controller), ``state_match``
        (episodes whose final environment equals the gold replay's), ``episodes``,
        ``errors``, ``executed``, ``model_calls``, ``step_limited_turns``,
        ``faults_injected``, ``tokens`` (``usage_metadata`` totals), ``wall_s`` and
        ``per_episode`` (the same metrics per episode).

    Raises:
        ValueError: For an empty mode mapping, a mode named ``config``, or bad episodes.
    """
    graphs = dict(modes) if modes is not None else default_modes()
    if not graphs or "config" in graphs:
        raise ValueError("modes must name at least one mode, and none may be 'config'")
    if isinstance(episodes, int):
        chosen = select_episodes(episodes, seed=seed)
    else:
        ids = [e for e in episodes if isinstance(e, str)]
        loaded = iter(episodes_by_id(ids)) if ids else iter(())
        chosen = [next(loaded) if isinstance(e, str) else e for e in episodes]
    if not chosen:
        raise ValueError("no episodes to run")
    result: dict[str, Any] = {mode: _empty_summary() for mode in graphs}
    model_names: set[str] = set()
    trace: IO[str] | None = None
    if trace_path is not None:
        path = Path(trace_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        trace = path.open("w", encoding="utf-8")
    try:
        with _Progress(progress, len(chosen) * len(graphs)) as advance:
            for episode in chosen:
                fault = plan_fault(episode.id, seed) if faults else None
                for mode, factory in graphs.items():
                    advance(f"{episode.id} · {mode}")
                    model = (model_factory if isinstance(model_factory, BaseChatModel)
                             else model_factory(episode))
                    model_names.add(_model_name(model))
                    run = run_episode(
                        episode, factory, model, mode=mode, max_steps=max_steps,
                        recursion_limit=recursion_limit, system_prompt=system_prompt,
                        fault=fault, fault_style=fault_style, raise_errors=raise_errors)
                    metrics, outcomes = score_run(run)
                    if fault is not None:
                        metrics["fault"] = {"kind": fault.kind, "failures": fault.failures}
                    _accumulate(result[mode], metrics)
                    if trace is not None:
                        for line in _trace_lines(run, outcomes):
                            trace.write(json.dumps(line, default=str) + "\n")
                        trace.flush()
            advance(None)
    finally:
        if trace is not None:
            trace.close()
    result["config"] = {
        "episodes": [e.id for e in chosen],
        "categories": dict(Counter(e.category for e in chosen)),
        "seed": seed,
        "modes": {name: getattr(f, "__name__", repr(f)) for name, f in graphs.items()},
        "model": sorted(model_names),
        "max_steps": max_steps,
        "recursion_limit": recursion_limit if recursion_limit is not None
        else 4 * max_steps + 8,
        "system_prompt": system_prompt,
        "faults": faults,
        "fault_style": fault_style if faults else None,
        "bfcl": bfcl.BFCL_REQUIREMENT,
        "trace": None if trace_path is None else str(trace_path),
    }
    return result


class _Progress:
    """A rich progress bar over ``total`` runs; ``advance(label)`` starts the next one."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled = enabled
        self.total = total
        self._bar: Any = None
        self._task: Any = None
        self._started = 0

    def __enter__(self) -> Callable[[str | None], None]:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn())
            self._bar.start()
            self._task = self._bar.add_task("episodes x modes", total=self.total)
        return self._advance

    def _advance(self, label: str | None) -> None:
        if self._bar is None:
            return
        if self._started:
            self._bar.advance(self._task)
        self._started += 1
        if label is not None:
            self._bar.update(self._task, description=label)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


# ============================================================================ report
_ROWS: Final = (
    ("episodes", "episodes"),
    ("state match (gold)", "state_match"),
    ("calls proposed", "calls_proposed"),
    ("calls executed", "executed"),
    ("hallucinated executed: type", "hallucinated_executed.type"),
    ("hallucinated executed: timing", "hallucinated_executed.timing"),
    ("hallucinated executed: format", "hallucinated_executed.format"),
    ("hallucinated executed: content*", "hallucinated_executed.content"),
    ("blocked", "blocked"),
    ("asked user", "asked_user"),
    ("change tools", "change_tools"),
    ("retries", "retries"),
    ("skips", "skips"),
    ("finishes", "finishes"),
    ("faults injected", "faults_injected"),
    ("model calls", "model_calls"),
    ("step-limited turns", "step_limited_turns"),
    ("model requests timed out", "model_timeouts"),
    ("errors", "errors"),
    ("tokens", "tokens"),
    ("wall s", "wall_s"),
)


def _get(summary: Mapping[str, Any], dotted: str) -> Any:
    value: Any = summary
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def print_report(result: Mapping[str, Any], *, console: Any = None) -> None:
    """Print the modes side by side (rich tables), then state matches per episode."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    modes = [k for k in result if k != "config"]
    config = result.get("config") or {}
    table = Table(title=(f"toolguard demo on BFCL v4 multi-turn — model "
                         f"{', '.join(config.get('model') or ['?'])}, seed {config.get('seed')}"))
    table.add_column("metric")
    for mode in modes:
        table.add_column(mode, justify="right")
    for label, key in _ROWS:
        table.add_row(label, *(str(_get(result[mode], key)) for mode in modes))
    console.print(table)
    per = Table(title="per episode: state match / calls proposed / hallucinated executed")
    per.add_column("episode")
    for mode in modes:
        per.add_column(mode, justify="right")
    rows: dict[str, list[str]] = {}
    for i, mode in enumerate(modes):
        for ep in result[mode].get("per_episode", []):
            cells = rows.setdefault(ep["id"], ["-"] * len(modes))
            halluc = sum(ep["hallucinated_executed"].values())
            cells[i] = (f"{'✓' if ep['state_match'] else '✗'} / {ep['calls_proposed']} / "
                        f"{halluc}" + (" (error)" if ep.get("error") else ""))
    for episode_id, cells in rows.items():
        per.add_row(episode_id, *cells)
    console.print(per)
    console.print("* content uses toolguard's own deterministic ContentDetector rules as oracle.")


def check_demo(result: Mapping[str, Any]) -> None:
    """Raise :class:`~toolguard_evals.runner.EvalRunError` when a mode's episodes failed.

    An episode fails when the graph or the model endpoint raised (not on a step limit or a
    runaway generation's timeout); see :func:`toolguard_evals.runner.check_failures` for the share.
    """
    from toolguard_evals.runner import check_failures

    for mode, summary in result.items():
        if mode == "config":
            continue
        episodes = summary.get("per_episode") or []
        failed = {str(ep["id"]): str(ep["error"]) for ep in episodes if ep.get("error")}
        check_failures(failed, len(episodes), what=f"{mode} episodes")


# ============================================================================ CLI
def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``python -m toolguard_evals.demo``: the demo on an OpenAI-compatible server or ``--gold``."""
    parser = argparse.ArgumentParser(
        prog="python -m toolguard_evals.demo",
        description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--ids", nargs="*", help="episode ids instead of --episodes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. llama.cpp's /v1")
    parser.add_argument("--model", default="local", help="model name sent to the server")
    parser.add_argument("--api-key", default="not-needed")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--gold", action="store_true",
                        help="scripted model replaying the gold calls (harness smoke test)")
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--faults", action="store_true")
    parser.add_argument("--trace", help="JSON-lines trace path")
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    factory: ModelFactory
    if args.gold:
        from toolguard.testing import ScriptedChatModel

        def factory(episode: bfcl.MultiTurnEpisode) -> BaseChatModel:
            return ScriptedChatModel(script=list(gold_script(episode)))
    elif args.base_url:
        from langchain_openai import ChatOpenAI

        model = ChatOpenAI(model=args.model, base_url=args.base_url, api_key=args.api_key,
                           temperature=args.temperature)

        def factory(episode: bfcl.MultiTurnEpisode) -> BaseChatModel:
            return model
    else:
        parser.error("give --base-url (an OpenAI-compatible server) or --gold")
    result = run_demo(factory, episodes=args.ids or args.episodes, seed=args.seed,
                      trace_path=args.trace, progress=not args.no_progress, faults=args.faults,
                      max_steps=args.max_steps)
    print_report(result)
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    check_demo(result)
    return result


if __name__ == "__main__":
    main()
