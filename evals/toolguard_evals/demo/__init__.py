"""Agent demo: one chat model on BFCL v4 multi-turn episodes, unguarded vs guarded.

The same model and episodes run through :func:`~toolguard_graphs.create_plain_agent` and
:func:`~toolguard_graphs.create_guarded_agent` (``GuardMiddleware``, by default with
``RetryControllerMiddleware``), turn by turn in BFCL's executable environments as BFCL's
``base_handler.inference_multi_turn_FC`` runs them (``docs/DATA.md`` §1); ``miss_func``
functions appear at their turn.  With ``faults=True`` the first state-changing tool of
each episode fails (:mod:`toolguard_evals.faults`).  Metrics count what reached a tool,
labelled by oracles that do not ask the guard, and compare the final state with BFCL's
gold replay (:mod:`~toolguard_evals.demo.scoring`).

Modules: ``data`` (episodes, gold), ``fault_plan``, ``tools``, ``episode`` (one episode in
one mode), ``run`` (:func:`run_demo`, the command line), ``scoring``, ``report``.  Run
``toolguard demo``, or ``python -m toolguard_evals.demo --base-url URL --model M``
(``--gold`` replays the gold calls).
"""

from toolguard.specs import Effects
from toolguard_evals.demo.data import (
    DEFAULT_MIX,
    MISS_FUNC_PROMPT,
    doc_chars,
    episode_importable,
    episodes_by_id,
    gold_script,
    gold_state,
    select_episodes,
    turn_messages,
)
from toolguard_evals.demo.episode import (
    CONTROLLER_KEY,
    GUARD_KEY,
    SYSTEM_PROMPT,
    EpisodeRun,
    GraphFactory,
    run_episode,
)
from toolguard_evals.demo.fault_plan import DEMO_FAULT_KINDS, FaultPlan, plan_fault
from toolguard_evals.demo.report import check_demo, print_report
from toolguard_evals.demo.run import DemoCase, ModelFactory, default_modes, main, run_demo
from toolguard_evals.demo.scoring import (
    HALLUCINATION_LABELS,
    AnsweredBy,
    CallOutcome,
    HallucinationLabel,
    accumulate,
    empty_summary,
    score_run,
    trace_lines,
)
from toolguard_evals.demo.tools import (
    REPEATABLE_METHODS,
    WRITE_METHODS,
    EpisodeTools,
    FaultStyle,
    ToolExecution,
    method_effects,
)
from toolguard_evals.faults import (
    FAULT_KINDS,
    FaultKind,
    InjectedFault,
    InjectedHTTPError,
    InjectedTimeout,
)

__all__ = [
    "CONTROLLER_KEY",
    "DEFAULT_MIX",
    "DEMO_FAULT_KINDS",
    "FAULT_KINDS",
    "GUARD_KEY",
    "HALLUCINATION_LABELS",
    "MISS_FUNC_PROMPT",
    "REPEATABLE_METHODS",
    "SYSTEM_PROMPT",
    "WRITE_METHODS",
    "AnsweredBy",
    "CallOutcome",
    "DemoCase",
    "Effects",
    "EpisodeRun",
    "EpisodeTools",
    "FaultKind",
    "FaultPlan",
    "FaultStyle",
    "GraphFactory",
    "HallucinationLabel",
    "InjectedFault",
    "InjectedHTTPError",
    "InjectedTimeout",
    "ModelFactory",
    "ToolExecution",
    "accumulate",
    "check_demo",
    "default_modes",
    "doc_chars",
    "empty_summary",
    "episode_importable",
    "episodes_by_id",
    "gold_script",
    "gold_state",
    "main",
    "method_effects",
    "plan_fault",
    "print_report",
    "run_demo",
    "run_episode",
    "score_run",
    "select_episodes",
    "trace_lines",
    "turn_messages",
]
