"""Generate, score and report RelyToolBench, unguarded vs guarded.

Generation (:func:`generate`) and scoring (:func:`score`) are separate steps: episodes are
saved in the runner's :class:`~toolguard_evals.runner.GenerationCache` (one JSONL file also holding
the simulator's API answers and the judges' labels), and :func:`score` is a function of
the saved episodes and the cached judgments, so ``--score-only`` recomputes every number
offline.  :func:`run_relytoolbench` does both and builds the report.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal, get_args

from langchain_core.language_models import BaseChatModel

from toolguard.guard import Guard
from toolguard_evals.relytoolbench.agent import FORMATS, AgentFormat, Episode, run_episode
from toolguard_evals.relytoolbench.data import (
    GROUPS,
    SUBSETS,
    Group,
    RtbCase,
    Subset,
    load_relytoolbench,
)
from toolguard_evals.relytoolbench.evaluator import Judges, score_episode
from toolguard_evals.relytoolbench.guarded import run_guarded_episode
from toolguard_evals.relytoolbench.metrics import EpisodeScore, summarize
from toolguard_evals.relytoolbench.simulator import ApiSimulator, prompt_version
from toolguard_evals.runner import (
    Endpoint,
    GenerationCache,
    RunResult,
    check_failures,
    open_endpoint,
    plot_variants,
    print_table,
    release_connections,
    run_cases,
    side_by_side_table,
    write_json,
)

Variant = Literal["unguarded", "guarded", "guarded_engine"]
"""``unguarded``: the paper's loop; ``guarded``: ``create_agent`` + ``GuardMiddleware``
(:mod:`~toolguard_evals.relytoolbench.guarded`); ``guarded_engine``: the paper's loop with
``Guard.check`` on every call, a cross-check of the engine alone."""
ALL_VARIANTS: tuple[Variant, ...] = get_args(Variant)
VARIANTS: tuple[Variant, ...] = ("unguarded", "guarded")
"""The variants run by default."""
TABLE_METRICS: dict[str, str] = {
    "pass_rate": "pass rate %",
    "task_hallucination_rate": "task halluc. %",
    "repr": "RePR",
    "tool_hallucination_rate": "tool halluc. %",
    "utility": "BCU",
    "avg_tool_calls": "avg tool calls",
    "indecisive_rate": "indecisive %",
}


def episode_settings(endpoint: Endpoint, *, fmt: AgentFormat, guarded: bool,
                     max_steps: int, engine: bool = False) -> dict[str, Any]:
    """Everything that changes an episode (the cache key's settings).

    ``engine``: a guarded episode of the paper's loop with ``Guard.check`` (the
    ``guarded_engine`` cross-check) instead of ``create_agent`` + ``GuardMiddleware``.
    """
    guard = None if not guarded else "Guard.check" if engine else "create_agent+GuardMiddleware"
    return {"kind": "rtb-episode", "format": fmt, "guarded": guarded, "max_steps": max_steps,
            "guard": guard, "prompt": prompt_version("rtb_agent"),
            "simulator": prompt_version("rtb_api_simulator"), **endpoint.settings()}


async def generate(
    cases: Sequence[RtbCase], model: BaseChatModel, simulator: ApiSimulator, *,
    settings: Mapping[str, Any], guarded: bool, fmt: AgentFormat, max_steps: int,
    cache: GenerationCache | None, concurrency: int, progress: bool = True,
    engine: bool = False,
) -> RunResult:
    """Run (or take from ``cache``) one episode per case.

    Guarded episodes run through ``create_agent`` + ``GuardMiddleware``
    (:func:`~toolguard_evals.relytoolbench.guarded.run_guarded_episode`); with ``engine``,
    through the paper's loop with ``Guard.check`` instead (the engine-level cross-check).

    Returns:
        The runner's :class:`~toolguard_evals.runner.RunResult`; outputs are
        :class:`~toolguard_evals.relytoolbench.agent.Episode` dumps.
    """
    async def one(case: RtbCase) -> dict[str, Any]:
        if guarded and not engine:
            episode = await run_guarded_episode(case, model, simulator, fmt=fmt,
                                                max_steps=max_steps)
        else:
            episode = await run_episode(case, model, simulator, fmt=fmt, max_steps=max_steps,
                                        guard=Guard(case.specs) if guarded else None)
        return episode.model_dump(mode="json")

    label = "unguarded" if not guarded else "guarded (engine)" if engine else "guarded"
    return await run_cases(cases, one, case_id=lambda c: c.id, settings=settings, cache=cache,
                           concurrency=concurrency, description=f"RelyToolBench {label}",
                           progress=progress)


async def score(cases: Sequence[RtbCase], outputs: Mapping[str, Mapping[str, Any]],
                judges: Judges, *, concurrency: int = 4) -> list[EpisodeScore]:
    """Score the saved episodes of ``cases`` (cases without an output are skipped)."""
    semaphore = asyncio.Semaphore(max(1, concurrency))

    async def one(case: RtbCase) -> EpisodeScore:
        async with semaphore:
            return await score_episode(case, Episode.model_validate(outputs[case.id]), judges)

    return list(await asyncio.gather(*(one(c) for c in cases if c.id in outputs)))


def run_relytoolbench(
    *,
    endpoint: Endpoint,
    judge_endpoint: Endpoint | None = None,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    subsets: Sequence[Subset] = SUBSETS,
    groups: Sequence[Group] = GROUPS,
    ids: Sequence[str] | None = None,
    fmt: AgentFormat = "react",
    max_steps: int = 6,
    concurrency: int = 4,
    cache_path: str | Path | None = None,
    score_only: bool = False,
    variants: Sequence[Variant] = VARIANTS,
    progress: bool = True,
) -> dict[str, Any]:
    """Generate (unless ``score_only``) and score RelyToolBench for each variant.

    Args:
        endpoint: The agent's model (also the API simulator, and the judge unless
            ``judge_endpoint``).  ``base_url=None`` starts the embedded llama.cpp server.
        judge_endpoint: A separate judge model.  With ``score_only`` and no judge endpoint
            the judgments come from the cache only (misses count as Unsure and are
            reported as ``judge_misses``).
        data_dir: RelyToolBench folder (see
            :func:`~toolguard_evals.relytoolbench.data.load_relytoolbench`).
        limit: Records per file.
        subsets: Subsets to run.
        groups: Groups to run.
        ids: Only these case ids (``{file}:{query_id}``).
        fmt: ``react`` (the paper's Appendix F text format) or ``native`` tool calling.
        max_steps: Model turns per episode, >= 1.
        concurrency: Episodes in flight (and judgments in flight), >= 1.
        cache_path: The JSONL cache (episodes, API answers, judgments); ``None``: memory.
        score_only: Score the cached episodes only; no agent or simulator calls.
        variants: Some of :data:`ALL_VARIANTS` (default ``unguarded`` and ``guarded``).
        progress: Show progress bars.

    Returns:
        The report: settings, per-variant metrics (``files`` / ``subsets`` / ``overall``,
        see :func:`~toolguard_evals.relytoolbench.metrics.summarize`), generation counts and timing,
        how episodes ended, and every episode's score.

    Raises:
        ValueError: A bad option (format, variant, ``max_steps``, ``concurrency``).
        FileNotFoundError: A data file is missing.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if not variants or any(v not in ALL_VARIANTS for v in variants):
        raise ValueError(f"variants must be a non-empty subset of {ALL_VARIANTS}")
    if max_steps < 1 or concurrency < 1:
        raise ValueError("max_steps and concurrency must be >= 1")
    cases = load_relytoolbench(data_dir, limit=limit, subsets=subsets, groups=groups, ids=ids)
    cache = GenerationCache(cache_path)
    judge_settings = (judge_endpoint or endpoint).settings()
    started = time.perf_counter()
    with ExitStack() as stack:
        chat: BaseChatModel | None = None
        if not score_only:
            chat = stack.enter_context(open_endpoint(endpoint))
        judge_model = chat
        if judge_endpoint is not None:
            judge_model = stack.enter_context(open_endpoint(judge_endpoint))
        report = asyncio.run(_run(
            cases, chat, judge_model, endpoint=endpoint, judge_settings=judge_settings,
            fmt=fmt, max_steps=max_steps, concurrency=concurrency, cache=cache,
            variants=variants, progress=progress))
    report.update(
        benchmark="RelyToolBench",
        source="Xu et al., Reducing Tool Hallucination via Reliability Alignment, ICML 2025",
        format=fmt, max_steps=max_steps, limit=limit, concurrency=concurrency,
        subsets=list(subsets), groups=list(groups), n_cases=len(cases),
        endpoint=endpoint.settings(), judge=judge_settings, score_only=score_only,
        cache=str(cache_path) if cache_path else None,
        seconds=round(time.perf_counter() - started, 2))
    return report


async def _run(
    cases: Sequence[RtbCase], chat: BaseChatModel | None, judge_model: BaseChatModel | None,
    *, endpoint: Endpoint, judge_settings: Mapping[str, Any], fmt: AgentFormat,
    max_steps: int, concurrency: int, cache: GenerationCache, variants: Sequence[Variant],
    progress: bool,
) -> dict[str, Any]:
    simulator = ApiSimulator(chat, cache=cache, settings=endpoint.settings())
    judges = Judges(judge_model, cache=cache, settings=judge_settings)
    out: dict[str, Any] = {"variants": {}}
    for variant in variants:
        guarded, engine = variant != "unguarded", variant == "guarded_engine"
        settings = episode_settings(endpoint, fmt=fmt, guarded=guarded, max_steps=max_steps,
                                    engine=engine)
        gen: dict[str, Any]
        if chat is not None:
            result = await generate(cases, chat, simulator, settings=settings, guarded=guarded,
                                    fmt=fmt, max_steps=max_steps, cache=cache,
                                    concurrency=concurrency, progress=progress, engine=engine)
            outputs = result.outputs
            gen = {"generated": result.generated, "cached": result.cached,
                   "failed": result.failed, "seconds": round(result.seconds, 2),
                   "cases_per_second": round(result.cases_per_second(), 4)}
        else:
            found = {c.id: cache.get(c.id, settings) for c in cases}
            outputs = {k: v for k, v in found.items() if v is not None}
            gen = {"generated": 0, "cached": len(outputs), "failed": {}, "seconds": 0.0,
                   "cases_per_second": 0.0}
        gen["missing"] = [c.id for c in cases if c.id not in outputs]
        t0 = time.perf_counter()
        asked, misses = judges.asked, judges.misses
        scores = await score(cases, outputs, judges, concurrency=concurrency)
        out["variants"][variant] = {
            "metrics": summarize(scores),
            "generation": gen,
            "scoring": {"seconds": round(time.perf_counter() - t0, 2),
                        "judgments_asked": judges.asked - asked,
                        "judge_misses": judges.misses - misses},
            "ends": dict(Counter(s.end for s in scores)),
            "episodes": [s.model_dump(mode="json") for s in scores],
        }
    out["simulator"] = {**simulator.settings, "generated": simulator.generated,
                        "cached": simulator.cached}
    for model in {id(m): m for m in (chat, judge_model) if m is not None}.values():
        await release_connections(model)
    return out


def table_rows(report: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """``"scope · metric" -> {variant: value}`` for the side-by-side table."""
    variants = report["variants"]
    scopes = ["overall", *[s for s in SUBSETS
                           if any(s in v["metrics"]["subsets"] for v in variants.values())]]
    rows: dict[str, dict[str, float | None]] = {}
    for scope in scopes:
        for key, label in TABLE_METRICS.items():
            row: dict[str, float | None] = {}
            for name, v in variants.items():
                m = v["metrics"] if scope == "overall" else v["metrics"]["subsets"].get(scope)
                block = m["overall"] if scope == "overall" else m
                row[name] = None if block is None else float(block[key])
            rows[f"{scope} · {label}"] = row
    n_row = {name: float(v["metrics"]["overall"]["n"]) for name, v in variants.items()}
    rows["episodes"] = dict(n_row)
    return rows


def print_report(report: Mapping[str, Any]) -> None:
    """Print the side-by-side table and the timing lines."""
    variants = list(report["variants"])
    title = (f"RelyToolBench ({report.get('format')}, {report.get('n_cases')} cases, "
             f"model {report.get('endpoint', {}).get('model')})")
    print_table(side_by_side_table(title, table_rows(report), columns=variants, digits=1))
    for name, v in report["variants"].items():
        g, s = v["generation"], v["scoring"]
        print(f"{name}: generated {g['generated']}, cached {g['cached']}, failed "
              f"{len(g['failed'])}, missing {len(g['missing'])}; generation {g['seconds']} s "
              f"({g['cases_per_second']} cases/s); scoring {s['seconds']} s "
              f"({s['judgments_asked']} judgments asked, {s['judge_misses']} missing); "
              f"ends {v['ends']}")
    print(f"total {report.get('seconds')} s")


def plot_report(report: Mapping[str, Any], path: str | Path) -> Path:
    """Grouped bars of the overall metrics, unguarded vs guarded."""
    metrics = {label: {name: float(v["metrics"]["overall"][key])
                       for name, v in report["variants"].items()}
               for key, label in TABLE_METRICS.items() if key != "avg_tool_calls"}
    return plot_variants(metrics, path, title="RelyToolBench: unguarded vs guarded",
                         ylabel="percent (BCU: points)")


def main(
    *, base_url: str | None, model: str | None, judge_base_url: str | None = None,
    judge_model: str | None = None, concurrency: int = 1, limit: int | None = None,
    fmt: AgentFormat = "react", max_steps: int = 6, cache: str | Path | None = None,
    json_path: str | Path | None = None, plot_path: str | Path | None = None,
    score_only: bool = False, data_dir: str | Path | None = None,
    groups: Sequence[Group] = GROUPS, subsets: Sequence[Subset] = SUBSETS,
    ids: Sequence[str] | None = None, timeout: float = 60.0, max_tokens: int | None = 256,
    variants: Sequence[Variant] = VARIANTS,
) -> dict[str, Any]:
    """The ``toolguard eval relytoolbench`` command: run, print, write JSON and plot.

    ``variants``: add ``guarded_engine`` for the engine-level cross-check.
    """
    endpoint = Endpoint(base_url=base_url, model=model, timeout=timeout, max_tokens=max_tokens)
    judge = (Endpoint(base_url=judge_base_url, model=judge_model, timeout=timeout,
                      max_tokens=max_tokens) if judge_base_url else None)
    report = run_relytoolbench(endpoint=endpoint, judge_endpoint=judge, data_dir=data_dir,
                               limit=limit, subsets=subsets, groups=groups, ids=ids, fmt=fmt,
                               max_steps=max_steps, concurrency=concurrency, cache_path=cache,
                               score_only=score_only, variants=variants)
    print_report(report)
    write_json(json_path, report)
    if plot_path:
        print(f"plot: {plot_report(report, plot_path)}")
    check_report(report)
    return report


def check_report(report: Mapping[str, Any]) -> None:
    """Raise :class:`~toolguard_evals.runner.EvalRunError` when a variant's episodes failed.

    Failed: generation raised (endpoint or model-server error), or, with ``--score-only``,
    the episode is not in the cache.  See :func:`toolguard_evals.runner.check_failures`.
    """
    for name, v in report["variants"].items():
        g = v["generation"]
        failed = dict(g["failed"])
        for case_id in g["missing"]:
            failed.setdefault(case_id, "not generated (not in the cache)")
        check_failures(failed, int(report["n_cases"]), what=f"{name} episodes")
