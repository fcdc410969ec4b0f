"""Latency of the deterministic pre-check per case, over real RelyToolBench and BFCL cases.

For every case of the abstain evaluation (:mod:`toolguard_evals.abstain`) the time of
``Precheck(tools).decide(messages)`` is measured with ``time.perf_counter`` (milliseconds):
``build`` includes constructing the :class:`~toolguard.precheck.Precheck` (what a graph node
built per request pays), ``decide`` reuses one built per case (what
:class:`~toolguard.precheck_node.PrecheckNode` pays).  Each case is run ``repeats`` times
after one untimed warm-up pass over all cases (stem and tool-term caches filled, as in a
long-running process).  Prints p50/p99 per dataset; numbers depend on the machine.

With a trained verifier (``--verifier DIR``), :func:`sweep_learned` times the learned
pre-check and the learned relevance judge at 5 / 20 / 100 tools: each tool set is a
RelyToolBench request's own tools padded with other RelyToolBench tools (the same padding
for every request, as an agent's tool set stays while its users' requests change).  Warm:
the set's tool and parameter documents were encoded before (the verifier caches them per
text), the request is new (its goal and slot context are encoded, its slot pairs scored).
Cold: the first decision of a fresh verifier instance (models loaded, nothing cached):
every tool document is encoded.
Relevance: one judgment with a new goal (it is encoded), then one more of another tool with
the same goal (``relevance_same_goal_ms``: an agent's further calls in the same turn).
Agent step (:func:`agent_steps`): one ``create_agent`` run per new user request on
``bench overhead``'s BFCL case (22 tools, a scripted model: the gold call, then a text
answer), plain, with ``GuardMiddleware(relevance="learned")``, with
``PrecheckMiddleware(mode="learned")``, and with both, in rotating order: the ms each stack
adds to a run.  The guard judges relevance on a turn's first tool step; after the learned
pre-check, that goal is encoded already (both share the verifier and its cache).
Also the process's resident memory (MiB) before and after loading the verifier's models,
after the sweep, and after the sweep once glibc's ``malloc_trim(0)`` has returned the freed
memory its arenas keep (what the verifier still holds), and whether torch was imported (an
ONNX backend does not need it).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolguard.precheck import Precheck
from toolguard.verifier import Backend
from toolguard_evals.abstain import Case, load_cases
from toolguard_evals.runner import latency_summary


def time_cases(cases: Sequence[Case], *, repeats: int = 3) -> dict[str, Any]:
    """p50/p99/mean in ms of build+decide and decide alone over ``cases``.

    Raises:
        ValueError: ``repeats`` < 1.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    for c in cases:  # warm-up
        Precheck(c.tools).decide(c.messages)
    build: list[float] = []
    decide: list[float] = []
    for c in cases:
        for _ in range(repeats):
            t0 = time.perf_counter()
            pre = Precheck(c.tools)
            t1 = time.perf_counter()
            pre.decide(c.messages)
            t2 = time.perf_counter()
            build.append(1000 * (t2 - t0))
            decide.append(1000 * (t2 - t1))
    return {
        "cases": len(cases),
        "build_and_decide_ms": latency_summary(build),
        "decide_ms": latency_summary(decide),
    }


def main(*, datasets: Sequence[str] = ("relytoolbench", "bfcl"), limit: int | None = None,
         repeats: int = 3, json_path: str | Path | None = None,
         verifier: str | Path | None = None, backend: Backend = "torch") -> dict[str, Any]:
    """Time the pre-check on each dataset, print a table, write JSON if asked.

    With ``verifier``, time the learned verifier instead (:func:`sweep_learned`, on
    ``backend``).
    """
    from rich.console import Console
    from rich.table import Table

    if verifier is not None:
        sweep = sweep_learned(verifier, requests=limit or 40, backend=backend)
        print_sweep(sweep)
        _write(json_path, sweep)
        return sweep
    report: dict[str, Any] = {}
    for ds in datasets:
        cases = load_cases(ds, limit=limit)  # type: ignore[arg-type]
        report[ds] = time_cases(cases, repeats=repeats)
    table = Table(title="deterministic pre-check latency per case (ms)")
    for col in ("dataset", "cases", "decide p50", "decide p99", "build+decide p50",
                "build+decide p99"):
        table.add_column(col, justify="left" if col == "dataset" else "right")
    for ds, row in report.items():
        table.add_row(ds, str(row["cases"]), f"{row['decide_ms']['p50']:.3f}",
                      f"{row['decide_ms']['p99']:.3f}",
                      f"{row['build_and_decide_ms']['p50']:.3f}",
                      f"{row['build_and_decide_ms']['p99']:.3f}")
    Console().print(table)
    _write(json_path, report)
    return report


def _write(json_path: str | Path | None, report: dict[str, Any]) -> None:
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2), encoding="utf-8")


def _rss_mb() -> float:
    """Resident memory of this process (MiB; Linux ``/proc``, else 0)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _trimmed_rss_mb() -> float | None:
    """Resident MiB after glibc's ``malloc_trim(0)`` hands freed heap memory back to the OS.

    What the process still uses, without the freed memory glibc keeps in its per-thread
    arenas (onnxruntime's threads free large buffers there); ``None`` without glibc.
    """
    import ctypes
    import gc

    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    gc.collect()
    trim(0)
    return round(_rss_mb(), 1)


def sweep_learned(verifier: str | Path, *, sizes: Sequence[int] = (5, 20, 100),
                  requests: int = 40, data_dir: str | Path | None = None,
                  threads: int | None = None, backend: Backend = "torch") -> dict[str, Any]:
    """Learned pre-check and relevance latency (ms) per tool-set size (module docstring).

    Args:
        verifier: A ``toolguard verifier train`` output folder.
        sizes: Tools per set.
        requests: RelyToolBench G1 requests timed per size.
        data_dir: The RelyToolBench data folder.
        threads: torch threads (``None``: torch's default).
        backend: Where the encoders run (``LearnedVerifier(backend=)``).

    The requests are the answerable G1 ones with at most ``min(sizes)`` tools of their own.

    Raises:
        ValueError: ``requests`` < 1.
    """
    import random

    from toolguard.verifier import LearnedRelevanceJudge, LearnedVerifier, goal_text, slot_pair
    from toolguard_evals.abstain import load_relytoolbench

    if requests < 1:
        raise ValueError("requests must be >= 1")
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    every = [c for c in load_relytoolbench(data_dir) if c.id.startswith("G1_instruction:")]
    rss_start = _rss_mb()  # the requests loaded: what follows is the verifier's
    if backend == "torch":
        import sentence_transformers  # noqa: F401  (torch and transformers with it)

    rss_before = _rss_mb()
    loaded = LearnedVerifier(verifier, backend=backend)
    loaded.load()
    loaded.load_fit()
    rss_loaded = _rss_mb()
    pool = list({t.name: t for c in every for t in c.tools}.values())
    cases = [c for c in every if c.expected == "proceed" and len(c.tools) <= min(sizes)]
    random.Random(0).shuffle(pool)
    timed = cases[:requests]
    report: dict[str, Any] = {"verifier": str(verifier), "backend": backend,
                              "requests": len(timed),
                              "tool_pool": len(pool)}
    for n in sizes:
        sets = []
        for c in timed:
            own = {t.name for t in c.tools}
            sets.append([*c.tools, *[t for t in pool if t.name not in own][: n - len(own)]])
        cold: list[float] = []
        for c, tools in zip(timed[:10], sets[:10], strict=False):
            # the shared models, empty caches
            fresh = LearnedVerifier(verifier, backend=backend)
            t0 = time.perf_counter()
            Precheck(tools, mode="learned", verifier=fresh).decide(c.messages)
            cold.append(1000 * (time.perf_counter() - t0))
        # empty caches: no goal of another size cached
        shared = LearnedVerifier(verifier, backend=backend)
        for tools in sets:  # tool and parameter documents encoded once per set, as in a
            # running agent
            Precheck(tools, mode="learned", verifier=shared).decide([("user", "warm up")])
            shared.score([slot_pair("warm up", t, p)
                          for t in tools for p in t.required if p in t.properties])
        decide: list[float] = []
        judge_ms: list[float] = []
        same_goal_ms: list[float] = []
        judge = LearnedRelevanceJudge(shared)
        for c, tools in zip(timed, sets, strict=True):
            pre = Precheck(tools, mode="learned", verifier=shared)
            t0 = time.perf_counter()
            pre.decide(c.messages)
            decide.append(1000 * (time.perf_counter() - t0))
            goal = goal_text(c.messages) + " (again)"  # a goal the cache has not seen
            t0 = time.perf_counter()
            judge.judge(goal, tools[0], tools)
            judge_ms.append(1000 * (time.perf_counter() - t0))
            t0 = time.perf_counter()  # the turn's next call: the goal is encoded already
            judge.judge(goal, tools[-1], tools)
            same_goal_ms.append(1000 * (time.perf_counter() - t0))
        report[str(n)] = {"decide_warm_ms": latency_summary(decide),
                          "decide_cold_ms": latency_summary(cold),
                          "relevance_ms": latency_summary(judge_ms),
                          "relevance_same_goal_ms": latency_summary(same_goal_ms)}
    after = _rss_mb()
    report["rss_mb"] = {"start": round(rss_start, 1), "before": round(rss_before, 1),
                        "models_loaded": round(rss_loaded, 1), "after": round(after, 1),
                        "after_trim": _trimmed_rss_mb(),
                        "torch_imported": "torch" in sys.modules}
    # after the memory: the agents bring LangChain's graphs and BFCL's environment
    report["agent_step"] = agent_steps(verifier, backend=backend, steps=requests)
    return report


def agent_steps(verifier: str | Path, *, backend: Backend = "torch", steps: int = 40,
                warmup: int = 3) -> dict[str, Any]:
    """Time a ``create_agent`` run (ms) per new request: plain, guarded, pre-checked, both.

    The four agents (module docstring) run ``steps`` new requests each (goals not cached),
    in rotating order, after ``warmup`` untimed ones.
    Returns ``{"case", "tools", "plain_ms", "guard_ms", "precheck_ms",
    "precheck_guard_ms"}`` (latency summaries), ``*_added_ms`` (p50 differences from
    plain), ``guard_after_precheck_added_ms`` (pre-check and guard minus pre-check alone: the
    guard's share once the pre-check has encoded the goal) and ``completed`` (timed runs per
    agent that ran the tool and gave the model's answer; fewer: a guard stopped some, so
    that agent's time is not a full run's).

    Raises:
        ValueError: ``steps`` < 1.
    """
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage

    from toolguard import GuardMiddleware, PrecheckMiddleware
    from toolguard.verifier import LearnedVerifier
    from toolguard_evals.bench_overhead import FINAL_ANSWER, _scripted, agent_case

    if steps < 1:
        raise ValueError("steps must be >= 1")
    case = agent_case()
    shared = LearnedVerifier(verifier, backend=backend)
    total = steps + warmup
    stacks: dict[str, list[Any]] = {
        "plain_ms": [],
        "guard_ms": [GuardMiddleware(relevance="learned", verifier=shared)],
        "precheck_ms": [PrecheckMiddleware(mode="learned", verifier=shared)],
        "precheck_guard_ms": [PrecheckMiddleware(mode="learned", verifier=shared),
                              GuardMiddleware(relevance="learned", verifier=shared)],
    }
    agents = {name: create_agent(_scripted(case, total), case.tools, middleware=mw)
              for name, mw in stacks.items()}
    times: dict[str, list[float]] = {name: [] for name in agents}
    completed = dict.fromkeys(agents, 0)
    names = list(agents)
    for i in range(total):
        for name in names[i % len(names):] + names[:i % len(names)]:  # each agent first in turn
            agent = agents[name]
            request = HumanMessage(f"{case.user} (request {i} of the {name} agent)")
            t0 = time.perf_counter()
            state = agent.invoke({"messages": [request]})
            if i >= warmup:
                times[name].append(1000 * (time.perf_counter() - t0))
                last = state["messages"][-1]
                completed[name] += isinstance(last, AIMessage) and last.content == FINAL_ANSWER
    out: dict[str, Any] = {"case": case.source, "tools": len(case.tools),
                           "completed": completed}
    out.update({name: latency_summary(ms) for name, ms in times.items()})
    for name in ("guard_ms", "precheck_ms", "precheck_guard_ms"):
        out[name.removesuffix("_ms") + "_added_ms"] = round(
            out[name]["p50"] - out["plain_ms"]["p50"], 2)
    out["guard_after_precheck_added_ms"] = round(
        out["precheck_guard_ms"]["p50"] - out["precheck_ms"]["p50"], 2)
    return out


def print_sweep(report: dict[str, Any]) -> None:
    """Print :func:`sweep_learned`'s table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"learned verifier latency (ms, {report.get('backend', 'torch')}), "
                        f"{report['requests']} RelyToolBench requests per size")
    for col in ("tools", "decide warm p50", "p99", "decide cold p50", "relevance p50", "p99",
                "same goal p50"):
        table.add_column(col, justify="right")
    for n, row in report.items():
        if not n.isdigit():
            continue
        table.add_row(n, f"{row['decide_warm_ms']['p50']:.1f}",
                      f"{row['decide_warm_ms']['p99']:.1f}",
                      f"{row['decide_cold_ms']['p50']:.1f}",
                      f"{row['relevance_ms']['p50']:.1f}", f"{row['relevance_ms']['p99']:.1f}",
                      f"{row.get('relevance_same_goal_ms', {}).get('p50', float('nan')):.1f}")
    Console().print(table)
    step = report.get("agent_step")
    if step:
        Console().print(
            f"create_agent run per new request ({step['case']}, {step['tools']} tools), p50: "
            f"plain {step['plain_ms']['p50']:.1f} ms; GuardMiddleware(relevance='learned') "
            f"+{step['guard_added_ms']:.1f} ms; PrecheckMiddleware(mode='learned') "
            f"+{step['precheck_added_ms']:.1f} ms; both +{step['precheck_guard_added_ms']:.1f} "
            f"ms (the guard's share after the pre-check: "
            f"+{step['guard_after_precheck_added_ms']:.1f} ms); runs completed per agent: "
            f"{step['completed']}")
    rss = report["rss_mb"]
    imported = ("torch and sentence-transformers imported" if report.get("backend") == "torch"
                else "before loading")
    Console().print(f"resident memory (MiB): {rss['start']} at the start, {rss['before']} "
                    f"{imported}, {rss['models_loaded']} with both models loaded, "
                    f"{rss['after']} after the sweep (the models and their caches: "
                    f"+{rss['after'] - rss['before']:.0f}), {rss.get('after_trim')} once glibc "
                    f"has returned freed memory (malloc_trim); torch imported: "
                    f"{rss.get('torch_imported')}")


__all__ = ["agent_steps", "main", "print_sweep", "sweep_learned", "time_cases"]
