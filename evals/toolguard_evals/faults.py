"""Fault injection on BFCL multi-turn gold replays: retry policies compared on final state.

Each ``multi_turn_base`` episode's gold calls are replayed in BFCL's executable
environments; one state-changing gold call per episode (``docs/DATA.md`` §2b-c), drawn with
``random.Random(f"{seed}:{episode_id}")``, fails as an HTTP client or a timeout would make
it fail (:data:`FAULT_KINDS`: transient timeout / 429 / 5xx, an ambiguous timeout after the
effect happened (langchain issue 40688), a permanent 403).  Every gold call goes through a
policy as a ``ToolNode`` wrapper would run it: ``toolguard``
(:class:`toolguard.retry.RetryController`, defaults, no sleeping) or
``langchain_tool_retry`` (LangChain's ``ToolRetryMiddleware()``, sleeps recorded, not
waited).  Scores (:func:`run_faults`): episodes whose final state equals the clean gold
replay (as BFCL's ``multi_turn_checker._compare_instances``), executions and retries spent,
effects applied twice.

Run: ``toolguard eval faults --json PATH`` (:func:`main`).
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Final, Literal, Protocol, cast, get_args
from unittest import mock

from langchain.agents.middleware import tool_retry
from langchain.agents.middleware.tool_retry import ToolRetryMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from toolguard.retry import RetryController
from toolguard_evals import bfcl
from toolguard_evals.runner import map_cases, write_json

FaultKind = Literal[
    "transient_timeout", "transient_429", "transient_5xx", "ambiguous_timeout", "permanent_403"
]
"""The injected faults (see the module docstring)."""
FAULT_KINDS: Final[tuple[FaultKind, ...]] = get_args(FaultKind)

PolicyName = Literal["toolguard", "langchain_tool_retry"]
"""The retry policies compared."""
POLICIES: Final[tuple[PolicyName, ...]] = get_args(PolicyName)

RETRY_AFTER_S: Final = 2
"""``Retry-After`` seconds sent with the injected 429."""
CATEGORY: Final = "multi_turn_base"


# ============================================================================ records: the faults
class InjectedFault(Exception):
    """Base class of the faults raised by an injected tool call."""


class InjectedTimeout(InjectedFault, TimeoutError):
    """The tool call timed out (``TimeoutError``): whether it executed is unknown to the caller."""


class InjectedHTTPError(InjectedFault):
    """An HTTP error answer, shaped like ``requests``/``httpx`` errors.

    Args:
        status_code: The HTTP status, e.g. 429, 503, 403.
        reason: The reason phrase.
        headers: Response headers, e.g. ``{"Retry-After": "2"}``.

    """

    def __init__(
        self, status_code: int, reason: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(f"HTTP {status_code} {reason}")
        self.status_code = status_code
        self.headers = dict(headers or {})


def make_fault(kind: FaultKind) -> InjectedFault:
    """Return the exception one failing attempt of ``kind`` raises."""
    if kind in ("transient_timeout", "ambiguous_timeout"):
        return InjectedTimeout("the tool call timed out after 30 s")
    if kind == "transient_429":
        return InjectedHTTPError(429, "Too Many Requests", {"Retry-After": str(RETRY_AFTER_S)})
    if kind == "transient_5xx":
        return InjectedHTTPError(503, "Service Unavailable")
    if kind == "permanent_403":
        return InjectedHTTPError(403, "Forbidden")
    raise ValueError(f"unknown fault kind {kind!r}; expected one of {list(FAULT_KINDS)}")


# ============================================================================ build: episodes
@dataclass(frozen=True, slots=True)
class GoldCall:
    """One gold call of an episode, with what the clean replay learnt about it.

    Attributes:
        turn: Turn index.
        index: Index within the turn.
        source: The gold call string, e.g. ``"mkdir(dir_name='temp')"``.
        name: Method name.
        args: Arguments by parameter name (positional ones bound from the signature).
        state_changing: Whether running it changed the public state in the clean replay.
        read_only: Safe to run again: it left the public state unchanged and a second run
            (on a clone) answers the same and changes nothing either.  ``cd`` is not: it moves
            the private working directory, so a repeat fails.

    """

    turn: int
    index: int
    source: str
    name: str
    args: dict[str, Any]
    state_changing: bool
    read_only: bool


@dataclass(frozen=True, slots=True)
class PreparedEpisode:
    """An episode replayed once without faults, with its injection point.

    Attributes:
        episode: The BFCL episode.
        calls: Its gold calls in replay order.
        gold_state: Public state after the clean replay (``BFCLEnvironment.state``).
        injected: Index into ``calls`` of the call that fails.
        failures: Failing attempts of a transient or ambiguous fault (1 or 2).

    """

    episode: bfcl.MultiTurnEpisode
    calls: tuple[GoldCall, ...]
    gold_state: dict[str, dict[str, Any]]
    injected: int
    failures: int

    @property
    def injected_call(self) -> GoldCall:
        """The gold call that fails."""
        return self.calls[self.injected]


def prepare_episode(episode: bfcl.MultiTurnEpisode, *, seed: int) -> PreparedEpisode:
    """Replay an episode's gold calls once, find its state-changing calls, pick the injection.

    The injection point is drawn with ``random.Random(f"{seed}:{episode.id}")`` among the
    state-changing calls (among all calls when there is none), then the number of failing
    attempts (1 or 2).

    Raises:
        ValueError: For an episode without gold calls, or a gold call that does not parse.

    """
    env = bfcl.BFCLEnvironment.for_episode(episode)
    calls: list[GoldCall] = []
    for turn, sources in enumerate(episode.gold):
        for index, source in enumerate(sources):
            parsed = bfcl.parse_call(source)
            args = env.bind(parsed)
            before = env.state()
            first = env.call(parsed.name, copy.deepcopy(args))
            changing = env.state() != before
            read_only = not changing and _repeat_is_silent(env, parsed.name, args, first)
            calls.append(GoldCall(turn, index, source, parsed.name, args, changing, read_only))
    if not calls:
        raise ValueError(f"{episode.id}: no gold calls to inject a fault into")
    rng = random.Random(f"{seed}:{episode.id}")
    candidates = [i for i, c in enumerate(calls) if c.state_changing] or list(range(len(calls)))
    injected = rng.choice(candidates)
    return PreparedEpisode(episode, tuple(calls), env.state(), injected, rng.choice((1, 2)))


def _repeat_is_silent(
    env: bfcl.BFCLEnvironment, name: str, args: Mapping[str, Any], first: bfcl.ExecResult
) -> bool:
    """Whether running the call again (on a clone) answers ``first`` and keeps the state."""
    clone = env.clone()
    before = clone.state()
    again = clone.call(name, copy.deepcopy(dict(args)))
    return again.content == first.content and clone.state() == before


# ============================================================================ run: the faulty tool
@dataclass
class _FaultyTool:
    """Executes gold calls on an environment; the injected call raises its fault.

    ``attempts`` counts every handler invocation (tool executions spent, failed or not);
    ``injected_executions`` counts the runs of the injected call that reached the environment.
    """

    env: bfcl.BFCLEnvironment
    injected_id: str
    kind: FaultKind | None
    failures: int
    attempts: int = 0
    injected_attempts: int = 0
    injected_executions: int = 0

    def __call__(self, request: ToolCallRequest) -> ToolMessage:
        self.attempts += 1
        call = request.tool_call
        injected = self.kind is not None and call["id"] == self.injected_id
        failing = False
        if self.kind is not None and injected:
            self.injected_attempts += 1
            failing = self.kind == "permanent_403" or self.injected_attempts <= self.failures
            if failing and self.kind != "ambiguous_timeout":
                raise make_fault(self.kind)
        result = self.env.call(call["name"], copy.deepcopy(call["args"]))
        if injected:
            self.injected_executions += 1
            if failing:  # ambiguous: the effect happened, the answer is lost
                raise make_fault("ambiguous_timeout")
        # as ToolNode answers: an exception inside the tool is an error, a payload is content
        status = "error" if result.content.startswith("Error during execution") else "success"
        return ToolMessage(result.content, tool_call_id=call["id"], name=call["name"],
                           status=status)


# ============================================================================ run: policies
@dataclass(frozen=True, slots=True)
class _ToolStub:
    """What a policy reads from ``request.tool``: the name and metadata of the tool."""

    name: str
    metadata: dict[str, Any]


class _Policy(Protocol):
    def answer(
        self, call: ToolCall, tool: _ToolStub | None, handler: Callable[[Any], ToolMessage]
    ) -> tuple[ToolMessage, bool]:
        """Run one call through the policy; return its answer and whether to stop."""
        ...

    @property
    def backoff_s(self) -> float:
        """Seconds the policy asked to sleep so far."""
        ...


def _request(call: ToolCall, tool: _ToolStub | None, state: dict[str, Any]) -> ToolCallRequest:
    # the runtime is only used by ToolNode's own execution, never by these wrappers
    return ToolCallRequest(tool_call=call, tool=cast(Any, tool), state=state,
                           runtime=cast(Any, None))


class _ToolguardPolicy:
    """``RetryController`` defaults; the run's messages are kept in the request state."""

    def __init__(self) -> None:
        self._slept: list[float] = []
        self.controller = RetryController(sleep=self._slept.append)
        self.messages: list[BaseMessage] = [HumanMessage("replay")]

    @property
    def backoff_s(self) -> float:
        return sum(self._slept)

    def answer(
        self, call: ToolCall, tool: _ToolStub | None, handler: Callable[[Any], ToolMessage]
    ) -> tuple[ToolMessage, bool]:
        self.messages.append(AIMessage("", tool_calls=[call]))
        result = self.controller.wrap_tool_call(
            _request(call, tool, {"messages": list(self.messages)}), handler)
        if isinstance(result, Command):
            update = cast(dict[str, Any], result.update)
            message = update["messages"][0]
        else:
            message = result
        self.messages.append(message)
        return message, self.controller.tally(self.messages).finished


class _LangChainPolicy:
    """``ToolRetryMiddleware()`` defaults; its module's ``time.sleep`` is recorded, not slept."""

    def __init__(self) -> None:
        self.middleware: ToolRetryMiddleware[Any, Any] = ToolRetryMiddleware()
        self._slept: list[float] = []

    @property
    def backoff_s(self) -> float:
        return sum(self._slept)

    def answer(
        self, call: ToolCall, tool: _ToolStub | None, handler: Callable[[Any], ToolMessage]
    ) -> tuple[ToolMessage, bool]:
        with _recorded_sleep(self._slept):
            result = self.middleware.wrap_tool_call(_request(call, tool, {"messages": []}),
                                                    handler)
        if not isinstance(result, ToolMessage):  # pragma: no cover - the handler answers so
            raise TypeError(f"ToolRetryMiddleware returned {type(result).__name__}")
        return result, False


def _recorded_sleep(sink: list[float]) -> contextlib.AbstractContextManager[Any]:
    """Replace ``time`` inside ``tool_retry`` only (the global module is left alone)."""
    return mock.patch.object(tool_retry, "time", SimpleNamespace(sleep=sink.append))


_POLICY_FACTORIES: Final[dict[PolicyName, Callable[[], _Policy]]] = {
    "toolguard": _ToolguardPolicy,
    "langchain_tool_retry": _LangChainPolicy,
}
RETRY_BUDGET: Final[dict[PolicyName, int]] = {"toolguard": 3, "langchain_tool_retry": 2}
"""Retries of one failing call under each policy's defaults (the bound on extra executions)."""


# ============================================================================ run: replay
@dataclass(frozen=True, slots=True)
class EpisodeOutcome:
    """One episode replayed under one fault kind and policy.

    Attributes:
        id: Episode id.
        gold_calls: Gold calls of the episode.
        calls: Tool executions spent (handler invocations, failed attempts included).
        answered: Gold calls that got an answer before the episode stopped.
        failed_answers: Answers that were errors (the injected call when it was skipped, and
            later gold calls that failed because of it).
        injected_failed: Whether the injected call's answer was an error.
        injected_executions: Runs of the injected call that reached the environment.
        duplicated_effect: The injected call ran more than once and the state after it
            differs from the state after one run.
        finished: The policy stopped the episode early.
        state_match: The final public state equals the clean gold replay's.
        backoff_s: Seconds the policy asked to sleep.

    """

    id: str
    gold_calls: int
    calls: int
    answered: int
    failed_answers: int
    injected_failed: bool
    injected_executions: int
    duplicated_effect: bool
    finished: bool
    state_match: bool
    backoff_s: float


@dataclass(frozen=True, slots=True)
class ReplayCase:
    """One case of the eval: an episode replayed with one fault kind (or none) and policy."""

    prepared: PreparedEpisode
    kind: FaultKind | None
    policy: PolicyName

    @property
    def id(self) -> str:
        """``"{episode id}:{fault kind or baseline}:{policy}"``."""
        return f"{self.prepared.episode.id}:{self.kind or 'baseline'}:{self.policy}"


def replay_with_fault(
    prepared: PreparedEpisode, kind: FaultKind | None, policy: PolicyName
) -> EpisodeOutcome:
    """Replay the gold calls of one episode through ``policy`` with ``kind`` injected.

    Args:
        prepared: The episode (:func:`prepare_episode`).
        kind: The fault, or ``None`` for a fault-free replay.
        policy: ``toolguard`` or ``langchain_tool_retry``.

    Raises:
        ValueError: For an unknown policy.

    """
    if policy not in _POLICY_FACTORIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {list(POLICIES)}")
    runner = _POLICY_FACTORIES[policy]()
    episode = prepared.episode
    env = bfcl.BFCLEnvironment.for_episode(episode)
    target = prepared.injected_call
    target_id = _call_id(episode.id, target)
    tool = _FaultyTool(env, target_id, kind, prepared.failures)
    answered = failed = 0
    injected_failed = duplicated = finished = False
    for call in prepared.calls:
        once_state: dict[str, Any] | None = None
        if call is target and kind is not None:
            once = env.clone()
            once.call(call.name, copy.deepcopy(call.args))
            once_state = once.state()
        stub = _ToolStub(call.name, {"effects": "read"}) if call.read_only else None
        tool_call = ToolCall(name=call.name, args=call.args, id=_call_id(episode.id, call),
                             type="tool_call")
        message, stop = runner.answer(tool_call, stub, tool)
        answered += 1
        is_error = _is_error(message)
        failed += is_error
        if once_state is not None:
            injected_failed = is_error
            duplicated = tool.injected_executions > 1 and env.state() != once_state
        if stop:
            finished = answered < len(prepared.calls)
            break
    return EpisodeOutcome(
        id=episode.id,
        gold_calls=len(prepared.calls),
        calls=tool.attempts,
        answered=answered,
        failed_answers=failed,
        injected_failed=injected_failed,
        injected_executions=tool.injected_executions,
        duplicated_effect=duplicated,
        finished=finished,
        state_match=env.state() == prepared.gold_state,
        backoff_s=runner.backoff_s,
    )


def _call_id(episode_id: str, call: GoldCall) -> str:
    return f"{episode_id}:{call.turn}:{call.index}"


def _is_error(message: ToolMessage) -> bool:
    if message.status == "error":
        return True
    text = message.content if isinstance(message.content, str) else str(message.content)
    if text.startswith("{"):
        try:
            payload = json.loads(text)
        except ValueError:
            return False
        return isinstance(payload, dict) and bool(payload.get("error"))
    return text.startswith("Error")


# ============================================================================ score
def summarize(outcomes: Sequence[EpisodeOutcome], policy: PolicyName) -> dict[str, Any]:
    """Aggregate one (fault kind, policy) cell.

    Returns:
        ``{"state_match": share, "state_match_n", "calls", "gold_calls", "extra_calls",
        "max_calls", "max_extra_calls", "retry_budget", "within_bound", "injected_failed",
        "failed_answers", "finished", "duplicated_effects", "backoff_s", "mismatched": [ids]}``;
        ``within_bound`` is whether every episode spent at most its gold calls plus the
        policy's retry budget.

    """
    n = len(outcomes)
    budget = RETRY_BUDGET[policy]
    calls = sum(o.calls for o in outcomes)
    gold = sum(o.gold_calls for o in outcomes)
    matched = sum(o.state_match for o in outcomes)
    return {
        "state_match": round(matched / n, 4) if n else None,
        "state_match_n": matched,
        "calls": calls,
        "gold_calls": gold,
        "extra_calls": calls - gold,
        "max_calls": max((o.calls for o in outcomes), default=0),
        "max_extra_calls": max((o.calls - o.gold_calls for o in outcomes), default=0),
        "retry_budget": budget,
        "within_bound": all(o.calls <= o.gold_calls + budget for o in outcomes),
        "injected_failed": sum(o.injected_failed for o in outcomes),
        "failed_answers": sum(o.failed_answers for o in outcomes),
        "finished": sum(o.finished for o in outcomes),
        "duplicated_effects": sum(o.duplicated_effect for o in outcomes),
        "backoff_s": round(sum(o.backoff_s for o in outcomes), 3),
        "mismatched": [o.id for o in outcomes if not o.state_match],
    }


# ============================================================================ run: every case
@contextlib.contextmanager
def _seeded_random(seed: int) -> Iterator[None]:
    """Seed the global ``random`` (the policies' backoff jitter) and restore it afterwards."""
    saved = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved)


def run_faults(
    episodes: Sequence[bfcl.MultiTurnEpisode],
    *,
    seed: int = 0,
    kinds: Sequence[FaultKind] = FAULT_KINDS,
    progress: bool = False,
) -> dict[str, Any]:
    """Replay every episode under every fault kind and policy, plus a fault-free baseline.

    Each (episode, fault kind or none, policy) is one :class:`ReplayCase`, run through
    :func:`toolguard_evals.runner.map_cases` in this thread, one after another (the policies'
    backoff jitter comes from the global ``random``, seeded once, so the order is fixed).

    Returns:
        ``{"per_fault": {kind: {policy: summary}}, "baseline": {policy: summary},
        "episodes", "gold_calls", "injection_points": {"state_changing", "read_only"},
        "injected_calls": {method: count}, "seed", "wall_s"}``; summaries as
        :func:`summarize` gives them.

    Raises:
        ValueError: For an unknown fault kind.

    """
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; expected some of {list(FAULT_KINDS)}")
    started = time.perf_counter()
    prepared = [prepare_episode(e, seed=seed) for e in episodes]
    cases = [ReplayCase(p, kind, policy) for p in prepared for kind in (None, *kinds)
             for policy in POLICIES]

    def replay(case: ReplayCase) -> dict[str, Any]:
        return {"outcome": replay_with_fault(case.prepared, case.kind, case.policy)}

    with _seeded_random(seed):  # one case after another: the jitter draws in a fixed order
        ran = map_cases(cases, replay, case_id=lambda c: c.id, description="fault replays",
                        progress=progress, raise_errors=True)
    cells: dict[tuple[str, PolicyName], list[EpisodeOutcome]] = defaultdict(list)
    for case in cases:
        cells[case.kind or "baseline", case.policy].append(ran.outputs[case.id]["outcome"])

    def report(kind: str) -> dict[str, Any]:
        return {policy: summarize(cells[kind, policy], policy) for policy in POLICIES}

    injected_calls = Counter(p.injected_call.name for p in prepared)
    changing = sum(p.injected_call.state_changing for p in prepared)
    return {
        "per_fault": {kind: report(kind) for kind in kinds},
        "baseline": report("baseline"),
        "episodes": len(prepared),
        "gold_calls": sum(len(p.calls) for p in prepared),
        "injection_points": {"state_changing": changing, "read_only": len(prepared) - changing},
        "injected_calls": dict(injected_calls.most_common()),
        "seed": seed,
        "wall_s": round(time.perf_counter() - started, 3),
    }


# ============================================================================ report (entry point)
def main(json_path: str | None, *, seed: int = 0, limit: int | None = None,
         progress: bool = True) -> dict[str, Any]:
    """Run the fault-injection eval on ``multi_turn_base``, print a table and write JSON.

    Args:
        json_path: Where to write the report (``None``: print only).
        seed: Seed of the injection points and of the backoff jitter.
        limit: Keep only the first ``limit`` episodes (``None``: all 200).
        progress: Show the runner's progress bar on stderr.

    Returns:
        The report of :func:`run_faults`.

    Raises:
        ValueError: For a negative limit.
        toolguard_evals.bfcl.BFCLNotInstalledError: If ``bfcl-eval`` is not installed.

    """
    episodes = bfcl.load_multi_turn(CATEGORY, limit=limit)
    report = run_faults(episodes, seed=seed, progress=progress)
    print_report(report)
    write_json(json_path, report)
    return report


def print_report(r: Mapping[str, Any]) -> None:
    """Print the table: gold-state matches and calls per fault kind and policy."""
    from rich.console import Console
    from rich.table import Table

    n, gold = r["episodes"], r["gold_calls"]
    t = Table(title=f"faults on BFCL {CATEGORY} gold replays: {n} episodes, {gold} gold calls, "
                    f"seed {r['seed']} (langchain = ToolRetryMiddleware defaults)")
    for col in ("fault", "policy"):
        t.add_column(col, justify="left", no_wrap=True)
    for col in ("gold state", "calls", "extra", "max+/budget", "inj. failed", "finished",
                "duplicated", "backoff s"):
        t.add_column(col, justify="right")
    rows = {"baseline (no fault)": r["baseline"], **r["per_fault"]}
    for kind, cell in rows.items():
        for i, policy in enumerate(POLICIES):
            m = cell[policy]
            t.add_row(
                kind if i == 0 else "",
                policy.removesuffix("_tool_retry"),
                f"{m['state_match_n']}/{n}",
                str(m["calls"]),
                f"{m['extra_calls']:+d}",
                f"{m['max_extra_calls']}/{m['retry_budget']}",
                str(m["injected_failed"]),
                str(m["finished"]),
                str(m["duplicated_effects"]),
                f"{m['backoff_s']:.0f}",
                end_section=i == len(POLICIES) - 1,
            )
    console = Console()
    if not console.is_terminal:  # piped or captured: do not squeeze the table into 80 columns
        console = Console(width=140)
    console.print(t)
    points = r["injection_points"]
    console.print(f"injection points: {points['state_changing']} state-changing, "
                  f"{points['read_only']} read-only (episodes without a state-changing call); "
                  f"wall {r['wall_s']} s")
