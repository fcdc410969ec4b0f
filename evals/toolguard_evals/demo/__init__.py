"""Agent demo: one chat model on BFCL v4 multi-turn episodes, unguarded vs guarded.

The same model and the same episodes run through two agents from :mod:`toolguard_graphs`:
``unguarded`` (:func:`~toolguard_graphs.create_plain_agent`, LangChain's ``create_agent``
loop) and ``guarded`` (:func:`~toolguard_graphs.create_guarded_agent`, the same loop with
toolguard's middleware: :class:`~toolguard.GuardMiddleware` checks every call before it
reaches a tool and, by default, a :class:`~toolguard.RetryControllerMiddleware` wraps the
tools); other modes can be passed to :func:`run_demo`.  Each episode runs in BFCL's own
executable environment (:class:`toolguard_evals.bfcl.BFCLEnvironment`), turn by turn, as BFCL's
``base_handler.inference_multi_turn_FC`` does (docs/DATA.md §1):

- every user turn appends its messages and runs the graph until the model answers in text,
  the guard ends the turn with a clarification question (no checkpointer: ``ask_user``
  becomes a question and the next user turn is the answer, which for ``miss_param`` is
  exactly the clarification), or ``max_steps`` model calls were made;
- ``miss_func``: the held-out functions are hidden until their turn, which is the user
  prompt :data:`MISS_FUNC_PROMPT`; the graph is rebuilt with the new tool list and the
  message history is kept.

The graph is streamed (``stream_mode="values"``) rather than invoked, so a turn cut by the
step limit, the recursion limit or a model error keeps the messages it produced.  With
``faults=True`` the first state-changing tool of each episode fails 1-2 times or for good
(timeout, HTTP 429 with ``Retry-After``, 403; :mod:`toolguard_evals.faults`' exception types), the
same way in every mode.

Metrics per mode (see :func:`run_demo`) count what *reached* a tool, labelled by oracles
that do not ask the guard: the tool set at the time (type), the environment's own errors
and the JSON Schema (format), environment state snapshots (timing), and, for content only,
toolguard's deterministic :class:`~toolguard.detectors.ContentDetector` rules.  The final
environment state is compared with a replay of BFCL's gold calls (public attributes, as
``multi_turn_checker._compare_instances``).

Layout (build / run / score / report, as every eval in :mod:`toolguard_evals`):

- :mod:`~toolguard_evals.demo.data`: episodes (:func:`select_episodes`), gold state and gold
  script; :mod:`~toolguard_evals.demo.fault_plan`: the fault of an episode;
  :mod:`~toolguard_evals.demo.tools`: the episode's executable tools.
- :mod:`~toolguard_evals.demo.episode`: one episode in one mode (:func:`run_episode`);
  :mod:`~toolguard_evals.demo.run`: every (episode, mode) through
  :func:`toolguard_evals.runner.map_cases` (:func:`run_demo`) and the command line.
- :mod:`~toolguard_evals.demo.scoring`: the oracles (:func:`score_run`) and the summaries.
- :mod:`~toolguard_evals.demo.report`: :func:`print_report`, :func:`check_demo`.

Run ``python -m toolguard_evals.demo --base-url http://127.0.0.1:8080/v1 --model local`` for an
OpenAI-compatible server, or ``--gold`` for a scripted model replaying the gold calls (a
smoke test of the harness); ``toolguard demo`` runs it on the embedded model.  Needs
``pip install --no-deps bfcl-eval==2026.3.23`` and ``mpmath``.
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
