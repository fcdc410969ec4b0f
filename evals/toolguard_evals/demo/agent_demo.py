"""The main job: one model as an agent on BFCL tasks, every mode side by side, judged by gold.

:func:`run_agent_demo` runs every task (:func:`~toolguard_evals.demo.tasks.select_tasks`) in
every mode (:data:`~toolguard_evals.demo.agent.AGENT_MODES`) through
:func:`toolguard_evals.runner.map_cases`, mode after mode so that each later mode finds the
shared first request in the model's response cache, scores each run
(:func:`~toolguard_evals.demo.agent_score.score_task_run`) and summarises per mode.
:func:`print_agent_report` prints the table; :func:`check_agent_demo` fails a run whose
cases errored.  ``toolguard demo`` is the command line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from toolguard_evals import bfcl
from toolguard_evals.demo.agent import (
    AGENT_MODES,
    DEFAULT_AGENT_MODES,
    Protocol,
    run_task,
)
from toolguard_evals.demo.agent_score import pairwise, score_task_run, summarize
from toolguard_evals.demo.run import model_name
from toolguard_evals.demo.tasks import DEFAULT_TASK_MIX, AgentTask, select_tasks
from toolguard_evals.runner import check_failures, map_cases

__all__ = ["check_agent_demo", "print_agent_report", "run_agent_demo"]


def run_agent_demo(
    model: BaseChatModel,
    *,
    tasks: Sequence[AgentTask] | None = None,
    mix: Mapping[str, int] | None = None,
    seed: int = 0,
    modes: Sequence[str] = DEFAULT_AGENT_MODES,
    protocol: Protocol = "single",
    max_steps: int = 6,
    system_prompt: str | None = None,
    concurrency: int = 1,
    trace_path: str | Path | None = None,
    progress: bool = True,
    raise_errors: bool = False,
) -> dict[str, Any]:
    """Run the tasks in every mode and compare.

    Args:
        model: The chat model (thread-safe when ``concurrency`` > 1); give it a response
            cache (``cache=``) so the modes share their identical first requests.
        tasks: The tasks; default :func:`select_tasks` ``(mix, seed=seed)``.
        mix: ``category -> count``; default :data:`DEFAULT_TASK_MIX`.
        seed: Task sampling seed.
        modes: Names of :data:`AGENT_MODES`, run in this order; the first is the baseline
            of the paired comparison.
        protocol: See :mod:`toolguard_evals.demo.agent`.
        max_steps: Model calls per task at most.
        system_prompt: A system prompt for every mode (default none, as BFCL).
        concurrency: Runs in flight (threads), >= 1.
        trace_path: Write one JSON line per run here: the run's metrics and its calls.
        progress: Show the runner's progress bar.
        raise_errors: Re-raise a run's exception.

    Returns:
        ``{mode: summary, ..., "paired": {mode: pairwise vs the first mode},
        "runs": [metrics, ...], "config": {...}}`` (see :func:`summarize`).

    Raises:
        ValueError: No modes, an unknown mode, or no tasks.
    """
    if not modes or any(m not in AGENT_MODES for m in modes):
        raise ValueError(f"modes must be among {list(AGENT_MODES)}, got {list(modes)}")
    chosen = list(tasks) if tasks is not None else select_tasks(mix, seed=seed)
    if not chosen:
        raise ValueError("no tasks to run")
    cases = [(task, mode) for mode in modes for task in chosen]

    def one(case: tuple[AgentTask, str]) -> dict[str, Any]:
        task, mode = case
        run = run_task(task, AGENT_MODES[mode], model, mode=mode, protocol=protocol,
                       max_steps=max_steps, system_prompt=system_prompt,
                       raise_errors=raise_errors)
        metrics, calls = score_task_run(run)
        return {"metrics": metrics, "calls": calls}

    ran = map_cases(cases, one, case_id=lambda c: f"{c[0].id}:{c[1]}", concurrency=concurrency,
                    description="demo: tasks x modes", progress=progress,
                    raise_errors=raise_errors)
    per_mode: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    lines: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for task, mode in cases:
        cid = f"{task.id}:{mode}"
        out = ran.outputs.get(cid)
        if out is None:
            failed[cid] = ran.failed.get(cid, "no output")
            continue
        per_mode[mode].append(out["metrics"])
        lines.append({**out["metrics"], "calls": out["calls"]})
    if trace_path is not None:
        path = Path(trace_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(line, default=str) + "\n" for line in lines),
                        encoding="utf-8")
    result: dict[str, Any] = {mode: summarize(per_mode[mode]) for mode in modes}
    base = modes[0]
    result["paired"] = {m: pairwise(per_mode[base], per_mode[m]) for m in modes[1:]}
    result["runs"] = [r for m in modes for r in per_mode[m]]
    result["failed"] = failed
    result["config"] = {
        "model": model_name(model), "tasks": [t.id for t in chosen],
        "categories": {c: sum(1 for t in chosen if t.category == c)
                       for c in dict.fromkeys(t.category for t in chosen)},
        "seed": seed, "modes": list(modes), "baseline": base, "protocol": protocol,
        "max_steps": max_steps, "system_prompt": system_prompt, "concurrency": concurrency,
        "bfcl": bfcl.BFCL_REQUIREMENT, "trace": None if trace_path is None else str(trace_path),
        "default_mix": dict(DEFAULT_TASK_MIX) if tasks is None and mix is None else None,
    }
    return result


def _pct(rate: Mapping[str, Any]) -> str:
    if not rate.get("n"):
        return "-"
    lo, hi = rate["ci95"]
    return f"{rate['k']}/{rate['n']} {100 * rate['rate']:.0f}% [{100 * lo:.0f}-{100 * hi:.0f}]"


_ROWS: tuple[tuple[str, Any], ...] = (
    ("tasks", lambda s: str(s["tasks"])),
    ("task success (BFCL checker)", lambda s: _pct(s["success"])),
    ("  where a tool serves", lambda s: _pct(s["success_by_kind"].get("call", {}))),
    ("  where no tool fits", lambda s: _pct(s["success_by_kind"].get("no_tool", {}))),
    ("  where a value is missing", lambda s: _pct(s["success_by_kind"].get("ask", {}))),
    ("calls proposed / executed", lambda s: f"{s['proposed']} / {s['executed']}"),
    ("hallucinated calls executed", lambda s: str(s["hallucinated_executed"]["total"])),
    ("  type / timing / format / content", lambda s: " / ".join(
        str(s["hallucinated_executed"][k]) for k in ("type", "timing", "format", "content"))),
    ("hallucinated calls stopped", lambda s: str(s["hallucinated_stopped"]["total"])),
    ("gold-matching calls stopped", lambda s: _pct(s["gold_stopped"])),
    ("asks: warranted / no tool / not", lambda s: " / ".join(
        str(s["asks"][k]) for k in ("warranted", "no_tool", "unwarranted"))),
    ("after a refusal: model calls p95", lambda s: "-" if s["after_refusal"]["p95"] is None
     else f"{s['after_refusal']['p95']:g} (max {s['after_refusal']['max']}, "
          f"{s['after_refusal']['runs']} runs)"),
    ("runs stopped by max_steps", lambda s: str(s["limited"])),
    ("errors", lambda s: str(s["errors"])),
    ("model calls", lambda s: str(s["model_calls"])),
    ("tokens", lambda s: str(s["tokens"])),
    ("wall s", lambda s: f"{s['wall_s']:.0f}"),
)


def print_agent_report(result: Mapping[str, Any], *, console: Any = None) -> None:
    """Print the modes side by side, then the paired task changes against the baseline."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(140, Console().width))
    config = result.get("config") or {}
    modes = list(config.get("modes") or [])
    table = Table(title=(f"toolguard demo: {config.get('model')} as a create_agent agent on "
                         f"BFCL v4 tasks (seed {config.get('seed')}, judged by BFCL's gold)"))
    table.add_column("metric")
    for mode in modes:
        table.add_column(mode, justify="right")
    for label, get in _ROWS:
        table.add_row(label, *(get(result[m]) for m in modes))
    console.print(table)
    for mode, p in (result.get("paired") or {}).items():
        console.print(f"{mode} vs {config.get('baseline')}: tasks won {p['won']} "
                      f"{p['won_ids']}, lost {p['lost']} {p['lost_ids']}")
    console.print("Rates with Wilson 95 % intervals. Hallucination types from the gold and "
                  "the tool schemas (RelyToolBench's taxonomy); the first mode's replies are "
                  "reused by later modes when the request is identical.")


def check_agent_demo(result: Mapping[str, Any]) -> None:
    """Raise :class:`~toolguard_evals.runner.EvalRunError` when too many runs failed.

    A run fails when the harness could not run it or the graph / endpoint raised (not on a
    step limit); see :func:`toolguard_evals.runner.check_failures` for the share.
    """
    runs = list(result.get("runs") or [])
    failed = {f"{r['id']}:{r['mode']}": str(r["error"]) for r in runs if r.get("error")}
    failed.update(result.get("failed") or {})
    check_failures(failed, len(runs) + len(result.get("failed") or {}), what="demo runs")
