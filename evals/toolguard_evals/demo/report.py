"""Report the demo: the modes side by side, then the state match of every episode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

_ROWS: Final = (
    ("episodes", "episodes"),
    ("state match (gold)", "state_match"),
    ("calls proposed", "calls_proposed"),
    ("calls executed", "executed"),
    ("hallucinated executed: type", "hallucinated_executed.type"),
    ("hallucinated executed: timing", "hallucinated_executed.timing"),
    ("hallucinated executed: format", "hallucinated_executed.format"),
    ("hallucinated executed: content", "hallucinated_executed.content"),
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
    console.print("Labels from BFCL's gold, the tool schemas and the environment (RelyToolBench's "
                  "types); content: a gold tool called with arguments of no gold call.")


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
