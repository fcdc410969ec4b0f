"""RelyToolBench: loader, agents, API simulator, evaluator, metrics, report.

Paper: Xu et al., "Reducing Tool Hallucination via Reliability Alignment", ICML 2025,
arXiv 2412.04141; data and evaluator: X-LANCE/ToolHallucination (``docs/DATA.md`` §4).

- :mod:`~toolguard_evals.relytoolbench.data`: the 958 queries.
- :mod:`~toolguard_evals.relytoolbench.agent`: the paper's agent loop (ReAct text or native
  tool calling), unguarded, or with ``Guard.check`` as the engine-level cross-check.
- :mod:`~toolguard_evals.relytoolbench.guarded`: the guarded agent, ``create_agent`` with
  ``GuardMiddleware``.
- :mod:`~toolguard_evals.relytoolbench.simulator`: StableToolBench-style LLM API simulator.
- :mod:`~toolguard_evals.relytoolbench.evaluator` / :mod:`~toolguard_evals.relytoolbench.metrics`:
  the paper's rule checks, judges and metrics.
- :mod:`~toolguard_evals.relytoolbench.run`: generation, scoring, table, JSON, plot.
"""

from toolguard_evals.relytoolbench.agent import (
    Episode,
    Step,
    parse_finish,
    parse_react,
    run_episode,
)
from toolguard_evals.relytoolbench.data import GROUPS, SUBSETS, RtbCase, load_relytoolbench
from toolguard_evals.relytoolbench.evaluator import Judges, score_episode
from toolguard_evals.relytoolbench.guarded import run_guarded_episode
from toolguard_evals.relytoolbench.metrics import EpisodeScore, aggregate, summarize
from toolguard_evals.relytoolbench.run import run_relytoolbench
from toolguard_evals.relytoolbench.simulator import ApiSimulator

__all__ = [
    "GROUPS",
    "SUBSETS",
    "ApiSimulator",
    "Episode",
    "EpisodeScore",
    "Judges",
    "RtbCase",
    "Step",
    "aggregate",
    "load_relytoolbench",
    "parse_finish",
    "parse_react",
    "run_episode",
    "run_guarded_episode",
    "run_relytoolbench",
    "score_episode",
    "summarize",
]
