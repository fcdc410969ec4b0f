"""Agent demo: one chat model as an agent on BFCL v4 tasks, unguarded vs guarded, judged by gold.

The main job (``toolguard demo``) runs BFCL v4 single-turn tasks (:mod:`.tasks`: a tool
serves the request, no tool fits, or a required value is missing) through
``create_agent`` in every mode of :data:`AGENT_MODES` (:mod:`.agent`), scores each run with
BFCL's own checker and the tool schemas (:mod:`.agent_score`) and prints the modes side by
side (:mod:`.agent_demo`).

``toolguard demo --suite multi-turn`` runs BFCL's executable multi-turn episodes instead:
the same model and episodes run through :func:`~toolguard_graphs.create_plain_agent` and
:func:`~toolguard_graphs.create_guarded_agent` (``GuardMiddleware``, by default with
``RetryControllerMiddleware``), turn by turn in BFCL's executable environments as BFCL's
``base_handler.inference_multi_turn_FC`` runs them (``docs/DATA.md`` §1); ``miss_func``
functions appear at their turn.  With ``faults=True`` the first state-changing tool of
each episode fails (:mod:`toolguard_evals.faults`).  Metrics count what reached a tool,
labelled by oracles that do not ask the guard, and compare the final state with BFCL's
gold replay (:mod:`~toolguard_evals.demo.scoring`).

Multi-turn modules: ``data`` (episodes, gold), ``fault_plan``, ``tools``, ``episode`` (one
episode in one mode), ``run`` (:func:`run_demo`, the command line), ``scoring``, ``report``.  Run
``toolguard demo``, or ``python -m toolguard_evals.demo --base-url URL --model M``
(``--gold`` replays the gold calls).
"""

from toolguard.specs import Effects
from toolguard_evals.demo.agent import AGENT_MODES, DEFAULT_AGENT_MODES, TaskRun, run_task
from toolguard_evals.demo.agent_demo import (
    check_agent_demo,
    print_agent_report,
    run_agent_demo,
)
from toolguard_evals.demo.agent_score import score_task_run, summarize
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
from toolguard_evals.demo.tasks import DEFAULT_TASK_MIX, AgentTask, select_tasks, tasks_by_id
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
    "AGENT_MODES",
    "CONTROLLER_KEY",
    "DEFAULT_AGENT_MODES",
    "DEFAULT_MIX",
    "DEFAULT_TASK_MIX",
    "DEMO_FAULT_KINDS",
    "FAULT_KINDS",
    "GUARD_KEY",
    "HALLUCINATION_LABELS",
    "MISS_FUNC_PROMPT",
    "REPEATABLE_METHODS",
    "SYSTEM_PROMPT",
    "WRITE_METHODS",
    "AgentTask",
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
    "TaskRun",
    "ToolExecution",
    "accumulate",
    "check_agent_demo",
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
    "print_agent_report",
    "print_report",
    "run_agent_demo",
    "run_demo",
    "run_episode",
    "run_task",
    "score_run",
    "score_task_run",
    "select_episodes",
    "select_tasks",
    "summarize",
    "tasks_by_id",
    "trace_lines",
    "turn_messages",
]
