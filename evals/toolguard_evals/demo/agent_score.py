"""Judge the main job's runs by BFCL's gold and the tools' schemas, never by toolguard.

:func:`score_task_run` labels every call the model proposed and every call that ran:

- a call *matches gold* when BFCL's checker accepts it for a gold call that no earlier
  executed call has taken (:func:`~toolguard_evals.bfcl_checker.match_gold`);
- a call that matches no gold call is a hallucination: ``timing`` when it repeats a call
  that already ran (same name, same canonical arguments), else the
  :func:`~toolguard_evals.bfcl_checker.call_label` of the task's record (``type``,
  ``format``, ``content``); on an ``ask`` task a call to the tool that fits is ``content``
  (it needs the value the request lacks);
- *stopped*: proposed and answered by toolguard instead of running.

Task success is BFCL's verdict on the executed calls (:func:`check_task`).  The summary
reports rates with Wilson 95 % intervals, and the paired change against a baseline mode.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import AIMessage, ToolMessage

from toolguard.context import canonical_args
from toolguard_evals.bfcl_checker import CallLabel, call_label, check_task, match_gold
from toolguard_evals.demo._messages import calls_of, is_toolguard_message
from toolguard_evals.demo.agent import TaskRun
from toolguard_evals.demo.tasks import AgentTask
from toolguard_evals.runner import quantile

__all__ = [
    "LABELS",
    "pairwise",
    "score_task_run",
    "summarize",
    "wilson",
]

LABELS: Final[tuple[CallLabel | str, ...]] = ("type", "timing", "format", "content")


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a proportion ``k / n`` (95 % by default); ``(0, 1)`` for n=0."""
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _label(task: AgentTask, name: str, args: Any) -> str:
    if task.kind == "ask" and task.source is not None:
        # the tool that fits with the value the request lacks: a made-up value
        if isinstance(args, Mapping) and match_gold(task.source, name, args) is not None:
            return "content"
        return call_label(task.source, name, args)
    return call_label(task.record, name, args)


def _answered_by_toolguard(answer: ToolMessage | None) -> bool:
    artifact = answer.artifact if answer is not None and isinstance(answer.artifact,
                                                                     Mapping) else {}
    return "toolguard" in artifact


def _key(name: str, args: Any) -> tuple[str, str]:
    return (name, canonical_args(args) if isinstance(args, Mapping) else str(args))


def score_task_run(run: TaskRun) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Metrics of one run, and one trace line per proposed call.

    Returns:
        ``(metrics, calls)``.  ``metrics``: ``id``, ``category``, ``kind``, ``mode``,
        ``success`` (0/1), ``bfcl_error`` (BFCL's ``error_type`` or ``None``), ``proposed``,
        ``executed``, ``gold_proposed`` (proposed calls that match gold), ``gold_stopped``
        (of those, answered by toolguard), ``hallucinated_executed`` and
        ``hallucinated_stopped`` (``{type, timing, format, content}`` counts),
        ``asked`` (toolguard ended the run with a question), ``toolguard_ended`` (with a
        question or a stop), ``ended_by`` (``tool``, ``text``, ``toolguard``, ``limit``,
        ``error``), ``model_calls``, ``after_refusal`` (model calls after the first call
        toolguard refused; ``None`` without a refusal), ``tokens``, ``wall_s``, ``error``.
        Each call line: ``id``, ``name``, ``args``, ``executed``, ``stopped``,
        ``gold`` (the gold index it matched or ``None``), ``label``, ``verdict``.
    """
    task = run.task
    messages = run.messages[run.start:]
    answers = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    ran = {e.call_id: e for e in run.executions if e.executed and e.call_id is not None}
    taken: set[int] = set()
    seen: set[tuple[str, str]] = set()
    calls: list[dict[str, Any]] = []
    executed_calls: list[tuple[str, dict[str, Any]]] = []
    halluc_run: Counter[str] = Counter()
    halluc_stopped: Counter[str] = Counter()
    gold_proposed = gold_stopped = model_calls = tokens = 0
    first_refusal: int | None = None
    for m in messages:
        if not isinstance(m, AIMessage) or is_toolguard_message(m):
            continue
        model_calls += 1
        usage = m.usage_metadata
        tokens += int(usage.get("total_tokens", 0)) if usage else 0
        for call in calls_of(m):
            cid = str(call.get("id") or "")
            name = str(call.get("name") or "")
            args = call.get("args")
            execution = ran.get(cid)
            stopped = execution is None and _answered_by_toolguard(answers.get(cid))
            if stopped and first_refusal is None:
                first_refusal = model_calls
            gold = (match_gold(task.record, name, args, exclude=frozenset(taken))
                    if isinstance(args, Mapping) and not call.get("invalid") else None)
            key = _key(name, args)
            label: str | None = None
            if gold is None:
                label = "timing" if key in seen else _label(task, name, args)
            if execution is not None:
                executed_calls.append((name, dict(execution.args)))
                seen.add(key)
                if gold is not None:
                    taken.add(gold)
                else:
                    halluc_run[str(label)] += 1
            if gold is not None:
                gold_proposed += 1
                gold_stopped += int(stopped)
            elif stopped:
                halluc_stopped[str(label)] += 1
            answer = answers.get(cid)
            artifact = answer.artifact if answer is not None and isinstance(
                answer.artifact, Mapping) else {}
            verdict = artifact.get("toolguard") if isinstance(artifact.get("toolguard"),
                                                               Mapping) else None
            calls.append({"id": cid, "name": name, "args": args,
                          "executed": execution is not None, "stopped": stopped,
                          "gold": gold, "label": label, "verdict": verdict})
    verdict_all = check_task(task.record, executed_calls)
    last = messages[-1] if messages else None
    toolguard_ended = isinstance(last, AIMessage) and is_toolguard_message(last)
    asked = (isinstance(last, AIMessage) and toolguard_ended
             and "ask" in str((last.response_metadata or {}).get("toolguard")))
    if run.error is not None:
        ended_by = "error"
    elif run.limited:
        ended_by = "limit"
    elif toolguard_ended:
        ended_by = "toolguard"
    elif isinstance(last, ToolMessage) and executed_calls:
        ended_by = "tool"
    else:
        ended_by = "text"
    metrics: dict[str, Any] = {
        "id": task.id, "category": task.category, "kind": task.kind, "mode": run.mode,
        "success": int(bool(verdict_all.get("valid")) and run.error is None),
        "bfcl_error": verdict_all.get("error_type"),
        "proposed": len(calls), "executed": len(executed_calls),
        "gold_proposed": gold_proposed, "gold_stopped": gold_stopped,
        "hallucinated_executed": {k: halluc_run.get(k, 0) for k in LABELS},
        "hallucinated_stopped": {k: halluc_stopped.get(k, 0) for k in LABELS},
        "asked": int(asked), "toolguard_ended": int(toolguard_ended), "ended_by": ended_by,
        "model_calls": model_calls,
        "after_refusal": None if first_refusal is None else model_calls - first_refusal,
        "tokens": tokens, "wall_s": round(run.wall_s, 3), "error": run.error,
    }
    return metrics, calls


def _rate(k: int, n: int) -> dict[str, Any]:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": (k / n) if n else None, "ci95": [round(lo, 4),
                                                                       round(hi, 4)]}


def summarize(runs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One mode's summary over its runs' metrics (:func:`score_task_run`).

    Returns:
        ``tasks``, ``success`` (a rate: ``k``, ``n``, ``rate``, ``ci95``), ``success_by_kind``
        and ``success_by_category`` (rates), ``hallucinated_executed`` (by type and
        ``total``), ``hallucinated_stopped``, ``gold_stopped`` (a rate over gold-matching
        proposed calls), ``asks`` (``warranted``: on ``ask`` tasks, ``no_tool``,
        ``unwarranted``: on ``call`` tasks), ``ended_by`` counts, ``model_calls``,
        ``after_refusal`` (``runs`` with a refusal, ``p50``, ``p95``, ``max``, ``within_4``
        rate), ``limited`` (runs ended by ``max_steps``), ``errors``, ``tokens``, ``wall_s``.
    """
    rows = list(runs)
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    by_cat: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_kind.setdefault(str(r["kind"]), []).append(r)
        by_cat.setdefault(str(r["category"]), []).append(r)
    executed = {k: sum(r["hallucinated_executed"][k] for r in rows) for k in LABELS}
    stopped = {k: sum(r["hallucinated_stopped"][k] for r in rows) for k in LABELS}
    refusals = [int(r["after_refusal"]) for r in rows if r["after_refusal"] is not None]
    return {
        "tasks": len(rows),
        "success": _rate(sum(r["success"] for r in rows), len(rows)),
        "success_by_kind": {k: _rate(sum(r["success"] for r in v), len(v))
                            for k, v in by_kind.items()},
        "success_by_category": {k: _rate(sum(r["success"] for r in v), len(v))
                                for k, v in by_cat.items()},
        "proposed": sum(r["proposed"] for r in rows),
        "executed": sum(r["executed"] for r in rows),
        "hallucinated_executed": {**executed, "total": sum(executed.values())},
        "hallucinated_stopped": {**stopped, "total": sum(stopped.values())},
        "gold_stopped": _rate(sum(r["gold_stopped"] for r in rows),
                              sum(r["gold_proposed"] for r in rows)),
        "asks": {
            "warranted": sum(r["asked"] for r in by_kind.get("ask", [])),
            "no_tool": sum(r["asked"] for r in by_kind.get("no_tool", [])),
            "unwarranted": sum(r["asked"] for r in by_kind.get("call", [])),
        },
        "ended_by": dict(Counter(str(r["ended_by"]) for r in rows)),
        "model_calls": sum(r["model_calls"] for r in rows),
        "after_refusal": {
            "runs": len(refusals),
            "p50": quantile(refusals, 0.5) if refusals else None,
            "p95": quantile(refusals, 0.95) if refusals else None,
            "max": max(refusals, default=None),
            "within_4": _rate(sum(1 for v in refusals if v <= 4), len(refusals)),
        },
        "limited": sum(1 for r in rows if r["ended_by"] == "limit"),
        "errors": sum(1 for r in rows if r["error"]),
        "tokens": sum(r["tokens"] for r in rows),
        "wall_s": round(sum(r["wall_s"] for r in rows), 1),
    }


def pairwise(base: Sequence[Mapping[str, Any]],
             other: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Paired task success of ``other`` against ``base`` on the same task ids.

    Returns:
        ``{"tasks", "won", "lost", "both", "neither", "won_ids", "lost_ids"}``: ``won``
        tasks succeed only in ``other``, ``lost`` only in ``base`` (McNemar's discordant
        pairs).
    """
    b = {r["id"]: r["success"] for r in base}
    o = {r["id"]: r["success"] for r in other}
    ids = sorted(set(b) & set(o))
    won = [i for i in ids if o[i] and not b[i]]
    lost = [i for i in ids if b[i] and not o[i]]
    return {"tasks": len(ids), "won": len(won), "lost": len(lost),
            "both": sum(1 for i in ids if b[i] and o[i]),
            "neither": sum(1 for i in ids if not b[i] and not o[i]),
            "won_ids": won, "lost_ids": lost}
