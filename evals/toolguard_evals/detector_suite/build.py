"""Build the suite: BFCL v4 records and episodes -> labelled :class:`Case` s.

Single-turn records give a ``gold`` case and one case per applicable perturbation
(:mod:`toolguard_evals.detector_suite.perturb`); ``multi_turn_base`` episodes are replayed
in BFCL's executable environments (:mod:`toolguard_evals.bfcl`) and give a ``repeat`` and a
``next_call`` case.  Every random choice is drawn from ``random.Random(f"{seed}:{id}")``,
so a record's cases do not depend on the limits.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)

from toolguard_evals import bfcl
from toolguard_evals.detector_suite._schema import schema_errors
from toolguard_evals.detector_suite.perturb import PERTURBERS
from toolguard_evals.detector_suite.records import (
    SINGLE_TURN_PERTURBATIONS,
    SUITE_CATEGORIES,
    Case,
    Perturbation,
    Suite,
    tools_key,
)
from toolguard_evals.detector_suite.target import Target

DEFAULT_LIMIT_PER_CATEGORY: Final[int | None] = None
"""Records per single-turn category; ``None`` = all (2092 usable records, ~13.6k cases with
the multi-turn ones; building takes ~3 s and the deterministic guard ~10 s on one core)."""
DEFAULT_TIMING_EPISODES: Final = 200
"""``multi_turn_base`` episodes (all 200); each gives one ``repeat`` and one ``next_call`` case."""


# ============================================================================ messages
def question_messages(question: Sequence[Sequence[Mapping[str, Any]]]) -> list[BaseMessage]:
    """BFCL question turns -> LangChain messages (user/system/assistant roles).

    Raises:
        ValueError: For an unknown role.

    """
    out: list[BaseMessage] = []
    for turn in question:
        for m in turn:
            out.append(_message(m))
    return out


def _message(m: Mapping[str, Any]) -> BaseMessage:
    role, content = m.get("role"), str(m.get("content") or "")
    if role == "user":
        return HumanMessage(content)
    if role == "system":
        return SystemMessage(content)
    if role == "assistant":
        return AIMessage(content)
    raise ValueError(f"unknown BFCL role {role!r}")


def _tool_call(name: str, args: Mapping[str, Any], call_id: str) -> ToolCall:
    return ToolCall(name=name, args=dict(args), id=call_id, type="tool_call")


def calls_message(calls: Sequence[tuple[str, Mapping[str, Any]]], *, start: int = 0) -> AIMessage:
    """Build an ``AIMessage`` with ``calls`` as tool calls, ids ``call_{start}``, ...."""
    return AIMessage(
        content="",
        tool_calls=[_tool_call(n, a, f"call_{start + i}") for i, (n, a) in enumerate(calls)],
    )



# ============================================================================ records
def gold_problems(record: Mapping[str, Any]) -> list[str]:
    """Why a record's gold calls cannot serve as clean cases (empty if they can).

    A gold call must name a tool of the record and validate against that tool's schema
    (Gorilla types mapped as :meth:`toolguard.specs.ToolSpec.from_bfcl`), with no unknown keys.
    19 BFCL v4 records fail: enum values outside the enum, ``True`` for ``"True"``-string
    enums, required keys with no gold value, gold keys the doc does not have.
    """
    docs = {d["name"]: d for d in record.get("function") or []}
    out: list[str] = []
    for name, args in bfcl.gold_calls(record):
        doc = docs.get(name)
        if doc is None:
            out.append(f"gold tool {name!r} is not in the record's function list")
            continue
        out += [f"{name}: {e[:160]}" for e in schema_errors(doc, args)]
    return out



# ============================================================================ cases
def single_turn_cases(
    record: Mapping[str, Any],
    category: str,
    *,
    seed: int = 0,
    perturbations: Sequence[Perturbation] = SINGLE_TURN_PERTURBATIONS,
) -> list[Case]:
    """Build the gold case and one case per applicable perturbation of a single-turn record.

    The record is one :class:`~toolguard_evals.detector_suite.target.Target` (all its gold
    calls, drawn from one stream ``random.Random(f"{seed}:{id}")``).

    Args:
        record: A record from :func:`toolguard_evals.bfcl.load_category` (with ``ground_truth``).
        category: Its category name.
        seed: Suite seed; the record's choices use ``random.Random(f"{seed}:{id}")``.
        perturbations: Which perturbations to try (each gives at most one case).

    Returns:
        ``[gold_case, *perturbed_cases]`` (``[]`` for a record without gold calls).

    """
    calls = bfcl.gold_calls(record)
    if not calls:
        return []
    t = Target(id=record["id"], category=category, history=question_messages(record["question"]),
               tools=list(record["function"]), calls=calls, seed=seed)
    out = [t.case("gold", calls, None, {"calls": len(calls)})]
    for p in perturbations:
        made = PERTURBERS[p](t)
        if made is not None:
            out.append(t.case(p, made.calls, made.target, made.metadata))
    return out


@dataclass(frozen=True, slots=True)
class _Step:
    turn: int
    ai_pos: int  # index of the AIMessage that makes the call
    source: str
    result: bfcl.ExecResult


def multi_turn_cases(episode: bfcl.MultiTurnEpisode, *, seed: int = 0) -> list[Case]:
    """Build a ``repeat`` (timing) and a ``next_call`` (clean) case from a multi-turn episode.

    The gold calls are replayed in the real environment, one ``AIMessage`` per call, each
    answered by a ``ToolMessage`` with the real result.  ``repeat``: after a random
    successful call, the identical call again; its metadata tell whether running it again
    would change the environment's public state (``harmful``), whether it would fail
    (``repeat_ok``) and whether its output would be the same (``same_output``).
    ``next_call``: a random gold call with the real history before it.

    Raises:
        ValueError: If a gold call does not parse or fit its method.

    """
    rng = random.Random(f"{seed}:{episode.id}")
    env = bfcl.BFCLEnvironment.for_episode(episode)
    messages: list[BaseMessage] = []
    steps: list[_Step] = []
    for t, turn in enumerate(episode.turns):
        messages += [_message(m) for m in turn]
        for source in episode.gold[t]:
            result = env.execute(source)
            call_id = f"call_{len(steps)}"
            steps.append(_Step(t, len(messages), source, result))
            messages.append(AIMessage(content="",
                                      tool_calls=[_tool_call(result.name, result.args, call_id)]))
            messages.append(ToolMessage(content=result.content, tool_call_id=call_id,
                                        name=result.name,
                                        status="success" if result.ok else "error"))
    if not steps:
        return []
    out: list[Case] = []
    ok_steps = [j for j, s in enumerate(steps) if s.result.ok]
    if ok_steps:
        j = rng.choice(ok_steps)
        step = steps[j]
        effect = _repeat_effect(episode, steps[: j + 1])
        tools = episode.tools_at(step.turn)
        out.append(Case(
            id=f"{episode.id}:repeat@{j}", category=episode.category, perturbation="repeat",
            label="timing",
            messages=[*messages[: step.ai_pos + 2],
                      AIMessage(content="", tool_calls=[
                          _tool_call(step.result.name, step.result.args, f"call_{len(steps)}")])],
            tools=tools, tools_key=tools_key(tools), target=0,
            metadata={"step": j, "turn": step.turn, "call": step.source, **effect},
        ))
    k = rng.randrange(len(steps))
    step = steps[k]
    tools = episode.tools_at(step.turn)
    earlier = {(s.result.name, json.dumps(s.result.args, sort_keys=True, default=str))
               for s in steps[:k]}
    out.append(Case(
        id=f"{episode.id}:next_call@{k}", category=episode.category, perturbation="next_call",
        label=None, messages=[*messages[: step.ai_pos + 1]], tools=tools,
        tools_key=tools_key(tools), target=None,
        metadata={"step": k, "turn": step.turn, "call": step.source,
                  "repeats_earlier_call": (step.result.name, json.dumps(
                      step.result.args, sort_keys=True, default=str)) in earlier},
    ))
    return out


def _repeat_effect(episode: bfcl.MultiTurnEpisode, steps: Sequence[_Step]) -> dict[str, Any]:
    """Replay ``steps``, then run the last one again on a deep copy and compare states."""
    env = bfcl.BFCLEnvironment.for_episode(episode)
    for s in steps:
        env.execute(s.source)
    before = env.state()
    clone = env.clone()
    last = steps[-1].result
    again = clone.call(last.name, last.args)
    harmful = clone.state() != before
    return {
        "harmful": harmful,
        "effect": "harmful" if harmful else "harmless",
        "repeat_ok": again.ok,
        "same_output": again.content == last.content,
    }


def build_suite(
    *,
    seed: int = 0,
    limit_per_category: int | None = DEFAULT_LIMIT_PER_CATEGORY,
    categories: Sequence[bfcl.SingleTurnCategory] = SUITE_CATEGORIES,
    timing_episodes: int = DEFAULT_TIMING_EPISODES,
    perturbations: Sequence[Perturbation] = SINGLE_TURN_PERTURBATIONS,
) -> Suite:
    """Build the labelled suite.

    Args:
        seed: Seed of every random choice (record sampling and perturbations).
        limit_per_category: Records sampled per single-turn category (``None``: all).
            Records whose gold breaks its own docs (:func:`gold_problems`) are skipped
            before sampling.
        categories: Single-turn categories (a subset of :data:`SUITE_CATEGORIES`).
        timing_episodes: ``multi_turn_base`` episodes sampled (0 disables multi-turn cases).
        perturbations: Single-turn perturbations to apply.

    Returns:
        The :class:`Suite`; about ``6 * limit_per_category * len(categories)
        + 2 * timing_episodes`` cases.

    Raises:
        ValueError: For a negative limit or an unknown category/perturbation.
        toolguard_evals.bfcl.BFCLNotInstalledError: If ``bfcl-eval`` is not installed.

    """
    if limit_per_category is not None and limit_per_category < 0:
        raise ValueError("limit_per_category must be >= 0")
    if timing_episodes < 0:
        raise ValueError("timing_episodes must be >= 0")
    unknown = [p for p in perturbations if p not in PERTURBERS]
    if unknown:
        raise ValueError(f"unknown single-turn perturbations {unknown}; expected some of "
                         f"{list(PERTURBERS)}")
    cases: list[Case] = []
    skipped: dict[str, str] = {}
    for category in categories:
        usable = []
        for record in bfcl.load_category(category):
            problems = gold_problems(record)
            if problems:
                skipped[record["id"]] = "; ".join(problems)[:300]
            else:
                usable.append(record)
        for record in _sample(usable, limit_per_category, f"{seed}:{category}"):
            cases += single_turn_cases(record, category, seed=seed, perturbations=perturbations)
    if timing_episodes:
        episodes = bfcl.load_multi_turn("multi_turn_base")
        for episode in _sample(episodes, timing_episodes, f"{seed}:multi_turn_base"):
            cases += multi_turn_cases(episode, seed=seed)
    return Suite(seed=seed, limit_per_category=limit_per_category,
                 timing_episodes=timing_episodes, cases=cases, skipped=skipped)


def _sample(items: Sequence[Any], limit: int | None, seed: str) -> list[Any]:
    if limit is None or limit >= len(items):
        return list(items)
    picked = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in picked]
