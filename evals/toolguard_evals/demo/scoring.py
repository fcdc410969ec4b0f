"""Score the demo: an ``EpisodeRun`` -> per-call outcomes, per-episode metrics, summaries.

:func:`score_run` labels every proposed call that reached a tool with oracles that do not ask
the guard (see its docstring); :func:`accumulate` sums episode metrics into a mode's summary.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from jsonschema import Draft202012Validator
from langchain_core.messages import (
    AIMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool

from toolguard.context import canonical_args
from toolguard_evals import bfcl
from toolguard_evals.demo._messages import calls_of, is_toolguard_message
from toolguard_evals.demo.data import gold_state
from toolguard_evals.demo.episode import EpisodeRun
from toolguard_evals.demo.tools import REPEATABLE_METHODS, ToolExecution

HallucinationLabel = Literal["type", "timing", "format", "content"]
"""The oracle's labels: RelyToolBench's four tool-hallucination types."""
HALLUCINATION_LABELS: Final[tuple[HallucinationLabel, ...]] = get_args(HallucinationLabel)

AnsweredBy = Literal["tool", "tool_node", "guard", "harness", "other", "none"]
"""Who answered a proposed call: our tool function ran (``tool``, also for an injected
fault), ``ToolNode`` answered without running it (unknown name, invalid arguments),
the guard, this harness (step limit, unanswered calls), something else (e.g. a controller),
or nobody."""

_SCHEMA_ERROR = re.compile(
    r"unexpected keyword argument|missing \d+ required (positional|keyword)"
    r"|required (positional|keyword)[- ]only argument|validation error|got multiple values"
    r"|takes \d+ positional argument|positional arguments? but \d+ (were|was) given",
    re.I,
)
"""Signature errors a BFCL method raises for malformed arguments (the format oracle)."""


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
    - ``content``: the environment ran a call of a tool that the episode's gold also calls,
      with arguments equal to none of the gold calls of that tool (canonical arguments,
      positional ones named by the method's signature).  Decided from BFCL's gold only; a
      call of a tool the gold never uses is not labelled.

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
    gold_args = _gold_arguments(run.episode)
    outcomes: list[CallOutcome] = []
    counts = dict.fromkeys(HALLUCINATION_LABELS, 0)
    proposed = tokens = model_calls = 0
    for pos, m in enumerate(messages):
        if not isinstance(m, AIMessage) or is_toolguard_message(m):
            continue
        model_calls += 1
        usage = m.usage_metadata
        tokens += int(usage.get("total_tokens", 0)) if usage else 0
        turn = max((t for s, t in starts if s <= pos), default=0)
        tools = {x.name: x for x in run.tools[turn]} if turn < len(run.tools) else {}
        for call in calls_of(m):
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
            elif done and not call.get("invalid") and _off_gold(
                    gold_args, name, call.get("args")):
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


def _gold_arguments(episode: bfcl.MultiTurnEpisode) -> dict[str, set[str]]:
    """Tool name -> the canonical arguments of its gold calls, over every turn."""
    env = bfcl.BFCLEnvironment.for_episode(episode)
    out: dict[str, set[str]] = {}
    for calls in episode.gold:
        for source in calls:
            parsed = bfcl.parse_call(source)
            out.setdefault(parsed.name, set()).add(canonical_args(env.bind(parsed)))
    return out


def _off_gold(gold: Mapping[str, set[str]], name: str, args: Any) -> bool:
    """A call of a tool the gold calls, with arguments none of those gold calls has."""
    wanted = gold.get(name)
    if not wanted or not isinstance(args, Mapping):
        return False
    return canonical_args(args) not in wanted


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



# ============================================================================ summaries
_SUMMED: Final = ("calls_proposed", "executed", "blocked", "asked_user", "change_tools",
                  "retries", "skips", "finishes", "state_match", "episodes", "errors",
                  "model_calls", "step_limited_turns", "model_timeouts", "faults_injected",
                  "tokens")


def empty_summary() -> dict[str, Any]:
    """A mode's summary before any episode (the keys of one mode in ``run_demo``'s result)."""
    out: dict[str, Any] = dict.fromkeys(_SUMMED, 0)
    out["hallucinated_executed"] = dict.fromkeys(HALLUCINATION_LABELS, 0)
    out["wall_s"] = 0.0
    out["per_episode"] = []
    return out


def accumulate(summary: dict[str, Any], metrics: Mapping[str, Any]) -> None:
    """Add one episode's metrics (:func:`score_run`) to a mode's summary."""
    for key in _SUMMED:
        summary[key] += metrics[key]
    for key in HALLUCINATION_LABELS:
        summary["hallucinated_executed"][key] += metrics["hallucinated_executed"][key]
    summary["wall_s"] = round(summary["wall_s"] + metrics["wall_s"], 3)
    summary["per_episode"].append(dict(metrics))


def failed_metrics(episode: bfcl.MultiTurnEpisode, error: str) -> dict[str, Any]:
    """The metrics of an episode the harness could not run at all (``error`` set, zeros).

    Counted as an episode with an error, so :func:`~toolguard_evals.demo.report.check_demo`
    sees it among the failures.
    """
    out: dict[str, Any] = {"id": episode.id, "category": episode.category}
    out.update(dict.fromkeys(_SUMMED, 0))
    out.update(hallucinated_executed=dict.fromkeys(HALLUCINATION_LABELS, 0), episodes=1,
               errors=1, error=error, wall_s=0.0)
    return out


def trace_lines(run: EpisodeRun, outcomes: Sequence[CallOutcome]) -> Iterator[dict[str, Any]]:
    """The JSONL trace of a run: one line per proposed call (see ``run_demo``'s ``trace_path``)."""
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
