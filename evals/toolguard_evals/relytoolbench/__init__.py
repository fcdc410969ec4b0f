"""RelyToolBench reproduction: loader, agent, API simulator, evaluator, metrics, report.

Paper: Xu et al., "Reducing Tool Hallucination via Reliability Alignment", ICML 2025,
arXiv 2412.04141.

- :mod:`~toolguard_evals.relytoolbench.data`: the 958 queries (Original / Missing Parameter /
  Unmatched Tools x G1_instruction / G2_category / G3_instruction).
- :mod:`~toolguard_evals.relytoolbench.agent`: the paper's ReAct text format and native tool
  calling,
  with or without :class:`toolguard.Guard`.
- :mod:`~toolguard_evals.relytoolbench.simulator`: StableToolBench-style LLM API simulator (cached).
- :mod:`~toolguard_evals.relytoolbench.evaluator`: rule checks + the paper's LLM judges.
- :mod:`~toolguard_evals.relytoolbench.metrics`: pass rate, hallucination rates, RePR, Benefit-Cost
  Utility, average tool calls (definitions there).
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
    "run_relytoolbench",
    "score_episode",
    "summarize",
]
