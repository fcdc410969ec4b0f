"""Run the demo: every episode in every mode, through the runner; and its command line.

:func:`run_demo` makes one case per (episode, mode), runs each with
:func:`~toolguard_evals.demo.episode.run_episode` and scores it with
:func:`~toolguard_evals.demo.scoring.score_run` inside
:func:`toolguard_evals.runner.map_cases` (the graphs are synchronous; one case at a time by
default, threads with ``concurrency > 1``), then sums the metrics per mode.  :func:`main` is
``python -m toolguard_evals.demo``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from toolguard_evals import bfcl
from toolguard_evals.demo.data import episodes_by_id, gold_script, select_episodes
from toolguard_evals.demo.episode import SYSTEM_PROMPT, GraphFactory, run_episode
from toolguard_evals.demo.fault_plan import plan_fault
from toolguard_evals.demo.report import check_demo, print_report
from toolguard_evals.demo.scoring import (
    accumulate,
    empty_summary,
    failed_metrics,
    score_run,
    trace_lines,
)
from toolguard_evals.demo.tools import FaultStyle
from toolguard_evals.runner import map_cases, write_json
from toolguard_graphs import create_guarded_agent, create_plain_agent

ModelFactory = Callable[[bfcl.MultiTurnEpisode], BaseChatModel]
"""Called once per episode and mode (scripted models need a fresh script each run)."""


def default_modes() -> dict[str, GraphFactory]:
    """``{"unguarded": create_plain_agent, "guarded": create_guarded_agent}``."""
    return {"unguarded": create_plain_agent, "guarded": create_guarded_agent}


def model_name(model: BaseChatModel) -> str:
    """The model's id (``model_name``, ``model`` or ``model_id``), else its class name."""
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


@dataclass(frozen=True, slots=True)
class DemoCase:
    """One case of the demo: an episode in one mode."""

    episode: bfcl.MultiTurnEpisode
    mode: str

    @property
    def id(self) -> str:
        """``"{episode id}:{mode}"``."""
        return f"{self.episode.id}:{self.mode}"


def _episodes(episodes: int | Sequence[bfcl.MultiTurnEpisode | str],
              seed: int) -> list[bfcl.MultiTurnEpisode]:
    if isinstance(episodes, int):
        return select_episodes(episodes, seed=seed)
    ids = [e for e in episodes if isinstance(e, str)]
    loaded = iter(episodes_by_id(ids)) if ids else iter(())
    return [next(loaded) if isinstance(e, str) else e for e in episodes]


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
    concurrency: int = 1,
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
            ``answered_by``, ``executed``, ``oracle`` (see :func:`score_run`), ``result``;
            written in case order once the runs are done.
        progress: Show the runner's progress bar over episodes x modes.
        faults: Inject a fault into the first state-changing tool of each episode (see
            :func:`plan_fault`), identically in every mode.
        fault_style: See :class:`EpisodeTools`.
        modes: Mode name -> graph factory; default :func:`default_modes`.
        max_steps: Model calls per turn.
        recursion_limit: Supersteps per turn (see :func:`run_episode`).
        system_prompt: System prompt for every mode (default :data:`SYSTEM_PROMPT`).
        raise_errors: Re-raise graph/model exceptions instead of recording them.
        concurrency: Episode runs in flight (threads), >= 1.  Above 1, give a model
            factory or a thread-safe model (an HTTP client; not one scripted model).

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
        ``per_episode`` (the same metrics per episode; an episode the harness could not
        run at all has zeros and its ``error``).

    Raises:
        ValueError: For an empty mode mapping, a mode named ``config``, bad episodes or
            ``concurrency`` < 1.
    """
    graphs = dict(modes) if modes is not None else default_modes()
    if not graphs or "config" in graphs:
        raise ValueError("modes must name at least one mode, and none may be 'config'")
    chosen = _episodes(episodes, seed)
    if not chosen:
        raise ValueError("no episodes to run")
    cases = [DemoCase(episode, mode) for episode in chosen for mode in graphs]

    def one(case: DemoCase) -> dict[str, Any]:
        fault = plan_fault(case.episode.id, seed) if faults else None
        model = (model_factory if isinstance(model_factory, BaseChatModel)
                 else model_factory(case.episode))
        run = run_episode(case.episode, graphs[case.mode], model, mode=case.mode,
                          max_steps=max_steps, recursion_limit=recursion_limit,
                          system_prompt=system_prompt, fault=fault, fault_style=fault_style,
                          raise_errors=raise_errors)
        metrics, outcomes = score_run(run)
        if fault is not None:
            metrics["fault"] = {"kind": fault.kind, "failures": fault.failures}
        trace = list(trace_lines(run, outcomes)) if trace_path is not None else []
        return {"metrics": metrics, "trace": trace, "model": model_name(model)}

    ran = map_cases(cases, one, case_id=lambda c: c.id, concurrency=concurrency,
                    description="demo: episodes x modes", progress=progress,
                    raise_errors=raise_errors)
    result: dict[str, Any] = {mode: empty_summary() for mode in graphs}
    model_names: set[str] = set()
    lines: list[dict[str, Any]] = []
    for case in cases:
        out = ran.outputs.get(case.id)
        if out is None:
            accumulate(result[case.mode], failed_metrics(case.episode, ran.failed[case.id]))
            continue
        accumulate(result[case.mode], out["metrics"])
        model_names.add(out["model"])
        lines += out["trace"]
    if trace_path is not None:
        path = Path(trace_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(line, default=str) + "\n" for line in lines),
                        encoding="utf-8")
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
        "concurrency": concurrency,
    }
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``python -m toolguard_evals.demo``: the demo on an OpenAI-compatible server or ``--gold``."""
    parser = argparse.ArgumentParser(
        prog="python -m toolguard_evals.demo",
        description="Agent demo: one chat model on BFCL v4 multi-turn episodes, unguarded vs "
                    "guarded.")
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
    write_json(args.json, result)
    check_demo(result)
    return result
