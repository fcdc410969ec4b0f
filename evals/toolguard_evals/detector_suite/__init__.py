"""A labelled suite of hallucinated tool calls built from BFCL v4 gold calls, and its scorer.

Cases follow ``docs/DATA.md`` §2b (RelyToolBench's four hallucination types):

==================  ===============  ======================================================
perturbation        label            what changes in one gold call
==================  ===============  ======================================================
``gold``            ``None``         nothing (every call must be allowed)
``fabricated``      ``type``         the tool name becomes a plausible name not in the list
``irrelevant_tool`` ``type``         another tool of the record, with schema-valid arguments
``drop_required``   ``format``       a required key the gold call has is removed
``rename_key``      ``format``       a key is renamed to a plausible unknown key
``wrong_type``      ``format``       a value gets a wrong JSON type (``5`` -> ``"five"``)
``invented_value``  ``content``      a name/place/id/date found in the question -> invented
``invented_number`` ``content``      a number found in the question -> another number
``repeat``          ``timing``       multi-turn: a successful call is repeated at once
``next_call``       ``None``         multi-turn: the next gold call, with the real history
==================  ===============  ======================================================

Single-turn cases come from ``simple_python``, ``multiple``, ``parallel``, ``live_simple`` and
``live_multiple``; multi-turn ones from ``multi_turn_base`` replayed in BFCL's executable
environments (:mod:`toolguard_evals.bfcl`).  Everything is drawn from ``random.Random`` seeded with
``f"{seed}:{record_id}"``, so a record's cases do not depend on the limits.

Layout (build / run / score / report, as every eval in :mod:`toolguard_evals`):

- :mod:`~toolguard_evals.detector_suite.records`: labels, perturbation names, :class:`Case`,
  :class:`Suite`.
- :mod:`~toolguard_evals.detector_suite.build`: BFCL records and episodes -> cases
  (:func:`build_suite`); :mod:`~toolguard_evals.detector_suite.perturb` holds the seven
  single-turn perturbations (word lists in ``_vocab``, doc-schema helpers in ``_schema``).
- :mod:`~toolguard_evals.detector_suite.run`: :func:`run_suite` runs any ``Guard``-like
  object on the cases through :func:`toolguard_evals.runner.map_cases`; :func:`main` is
  ``toolguard eval detectors --json PATH``.
- :mod:`~toolguard_evals.detector_suite.scoring`: verdicts -> :class:`Outcome` s -> metrics
  (:func:`score`), pure functions.
- :mod:`~toolguard_evals.detector_suite.report`: the tables (:func:`print_report`).
"""

from toolguard_evals.detector_suite.build import (
    DEFAULT_LIMIT_PER_CATEGORY,
    DEFAULT_TIMING_EPISODES,
    build_suite,
    calls_message,
    gold_problems,
    multi_turn_cases,
    question_messages,
    single_turn_cases,
)
from toolguard_evals.detector_suite.perturb import (
    PERTURBERS,
    Perturbed,
    Record,
    StringKind,
    fabricate_name,
    invent_number,
    invent_string,
    number_words,
    rename_key,
    string_kind,
    wrong_type_value,
)
from toolguard_evals.detector_suite.records import (
    PERTURBATION_LABELS,
    SCORE_CLASSES,
    SINGLE_TURN_PERTURBATIONS,
    SUITE_CATEGORIES,
    Case,
    Label,
    Perturbation,
    ScoreClass,
    Suite,
    tools_key,
)
from toolguard_evals.detector_suite.report import print_report
from toolguard_evals.detector_suite.run import (
    GUARD_MODES,
    GuardFactory,
    GuardLike,
    guard_factory,
    main,
    run_suite,
)
from toolguard_evals.detector_suite.scoring import Outcome, VerdictLike, outcome, score

__all__ = [
    "DEFAULT_LIMIT_PER_CATEGORY",
    "DEFAULT_TIMING_EPISODES",
    "GUARD_MODES",
    "PERTURBATION_LABELS",
    "PERTURBERS",
    "SCORE_CLASSES",
    "SINGLE_TURN_PERTURBATIONS",
    "SUITE_CATEGORIES",
    "Case",
    "GuardFactory",
    "GuardLike",
    "Label",
    "Outcome",
    "Perturbation",
    "Perturbed",
    "Record",
    "ScoreClass",
    "StringKind",
    "Suite",
    "VerdictLike",
    "build_suite",
    "calls_message",
    "fabricate_name",
    "gold_problems",
    "guard_factory",
    "invent_number",
    "invent_string",
    "main",
    "multi_turn_cases",
    "number_words",
    "outcome",
    "print_report",
    "question_messages",
    "rename_key",
    "run_suite",
    "score",
    "single_turn_cases",
    "string_kind",
    "tools_key",
    "wrong_type_value",
]
