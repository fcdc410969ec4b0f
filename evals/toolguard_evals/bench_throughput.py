"""Throughput of the RelyToolBench generation step: cases per second against concurrency.

One endpoint (the embedded llama.cpp server by default, or ``--base-url``) serves every
level; each level runs the same slice from scratch (fresh in-memory caches for episodes
and simulated API answers, so nothing is reused between levels) and reports wall-clock
seconds, cases per second and model requests per second.  The embedded server answers
one request at a time, so its numbers show queueing rather than scaling; a vLLM server or
a router over replicas is where concurrency pays off.  Prints numbers; asserts nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolguard_evals.relytoolbench.agent import AgentFormat, Episode, system_prompt
from toolguard_evals.relytoolbench.data import GROUPS, SUBSETS, Group, RtbCase, load_relytoolbench
from toolguard_evals.relytoolbench.run import episode_settings, generate
from toolguard_evals.relytoolbench.simulator import ApiSimulator
from toolguard_evals.runner import (
    Endpoint,
    GenerationCache,
    check_failures,
    open_endpoint,
    print_table,
    release_connections,
    side_by_side_table,
    write_json,
)


def small_slice(per_subset: int, *, groups: Sequence[Group] = GROUPS,
                data_dir: str | Path | None = None) -> list[RtbCase]:
    """The ``per_subset`` cases of each subset with the shortest ReAct prompts (stable)."""
    cases = load_relytoolbench(data_dir, groups=groups)
    out: list[RtbCase] = []
    for subset in SUBSETS:
        mine = [c for c in cases if c.subset == subset]
        mine.sort(key=lambda c: (len(system_prompt(c, "react")), c.id))
        out += mine[:per_subset]
    return out


def bench_throughput(
    *, endpoint: Endpoint, levels: Sequence[int] = (1, 2, 4), per_subset: int = 1,
    groups: Sequence[Group] = GROUPS[:1], fmt: AgentFormat = "react", max_steps: int = 2,
    guarded: bool = False, data_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Time the generation of one slice at each concurrency level.

    Args:
        endpoint: Model endpoint (``base_url=None``: the embedded server).
        levels: Concurrency levels, each >= 1.
        per_subset: Cases per subset in the slice: those with the shortest prompts
            (:func:`small_slice`), so a CPU-served small model finishes in minutes.
        groups: Groups the slice is drawn from.
        fmt: Agent format.
        max_steps: Model turns per episode.
        guarded: Run the guarded agent.
        data_dir: RelyToolBench folder.

    Returns:
        ``{"levels": [{concurrency, cases, seconds, cases_per_second, model_requests,
        requests_per_second, failed}], ...settings}``.

    Raises:
        ValueError: A level < 1 or no levels.
    """
    if not levels or any(level < 1 for level in levels):
        raise ValueError("levels must be a non-empty list of integers >= 1")
    cases = small_slice(per_subset, groups=groups, data_dir=data_dir)
    settings = episode_settings(endpoint, fmt=fmt, guarded=guarded, max_steps=max_steps)
    rows: list[dict[str, Any]] = []

    async def all_levels(chat: Any) -> None:
        for level in levels:
            cache = GenerationCache(None)
            simulator = ApiSimulator(chat, cache=cache, settings=endpoint.settings())
            result = await generate(cases, chat, simulator, settings=settings,
                                    guarded=guarded, fmt=fmt, max_steps=max_steps,
                                    cache=cache, concurrency=level, progress=False)
            agent_calls = sum(Episode.model_validate(o).model_calls
                              for o in result.outputs.values())
            requests = agent_calls + simulator.generated
            rows.append({
                "concurrency": level,
                "cases": result.generated,
                "seconds": round(result.seconds, 2),
                "cases_per_second": round(result.cases_per_second(), 4),
                "model_requests": requests,
                "requests_per_second": round(requests / result.seconds, 3)
                if result.seconds > 0 else 0.0,
                "failed": len(result.failed),
                "errors": result.failed,
            })
            print(f"concurrency {level}: {rows[-1]}", flush=True)
        await release_connections(chat)

    started = time.perf_counter()
    with open_endpoint(endpoint) as chat:
        startup = time.perf_counter() - started
        asyncio.run(all_levels(chat))
    return {"endpoint": endpoint.settings(), "format": fmt, "max_steps": max_steps,
            "guarded": guarded, "slice": {"per_subset": per_subset, "groups": list(groups),
                                          "cases": len(cases), "ids": [c.id for c in cases]},
            "server_startup_seconds": round(startup, 2), "levels": rows}


def main(*, base_url: str | None = None, model: str | None = None,
         levels: Sequence[int] = (1, 2, 4), per_subset: int = 1, max_steps: int = 2,
         fmt: AgentFormat = "react", timeout: float = 900.0, max_tokens: int | None = 64,
         json_path: str | Path | None = None) -> dict[str, Any]:
    """The ``toolguard bench throughput`` command: print cases/s per concurrency level."""
    endpoint = Endpoint(base_url=base_url, model=model, timeout=timeout, max_tokens=max_tokens)
    report = bench_throughput(endpoint=endpoint, levels=levels, per_subset=per_subset,
                              max_steps=max_steps, fmt=fmt)
    rows = {key: {f"c={r['concurrency']}": float(r[key]) for r in report["levels"]}
            for key in ("cases", "seconds", "cases_per_second", "model_requests",
                        "requests_per_second", "failed")}
    print_table(side_by_side_table(
        f"RelyToolBench generation throughput ({report['endpoint']['model']}, "
        f"{report['slice']['cases']} cases, {fmt}, max_steps {max_steps})", rows,
        columns=[f"c={r['concurrency']}" for r in report["levels"]], digits=3))
    print(f"server start-up {report['server_startup_seconds']} s")
    write_json(json_path, report)
    for r in report["levels"]:
        check_failures(r["errors"], report["slice"]["cases"],
                       what=f"cases at concurrency {r['concurrency']}")
    return report
