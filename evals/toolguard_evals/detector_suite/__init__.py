"""The labelled suite of hallucinated tool calls from BFCL v4 gold calls, and its scorer.

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

Modules: ``records`` (labels, :class:`Case`, :class:`Suite`), ``target`` (:class:`Target`,
what the perturbations work on), ``perturb`` (the seven single-call perturbations, shared
with :mod:`toolguard_evals.suite_b`), ``values`` (invented values), ``build`` (BFCL records
and ``multi_turn_base`` episodes -> cases), ``run`` (``toolguard eval detectors``),
``scoring``, ``report``.
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
    fabricate_name,
    invented_value,
    rename_key,
    value_slots,
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
from toolguard_evals.detector_suite.target import (
    BFCL_SAMPLING,
    SUITE_B_SAMPLING,
    Perturbed,
    Sampling,
    Target,
)
from toolguard_evals.detector_suite.values import (
    Grounding,
    Invented,
    StringKind,
    absent,
    invent_kind_number,
    invent_number,
    invent_string,
    invent_value,
    number_words,
    string_kind,
)

__all__ = [
    "BFCL_SAMPLING",
    "DEFAULT_LIMIT_PER_CATEGORY",
    "DEFAULT_TIMING_EPISODES",
    "GUARD_MODES",
    "PERTURBATION_LABELS",
    "PERTURBERS",
    "SCORE_CLASSES",
    "SINGLE_TURN_PERTURBATIONS",
    "SUITE_B_SAMPLING",
    "SUITE_CATEGORIES",
    "Case",
    "Grounding",
    "GuardFactory",
    "GuardLike",
    "Invented",
    "Label",
    "Outcome",
    "Perturbation",
    "Perturbed",
    "Sampling",
    "ScoreClass",
    "StringKind",
    "Suite",
    "Target",
    "VerdictLike",
    "absent",
    "build_suite",
    "calls_message",
    "fabricate_name",
    "gold_problems",
    "guard_factory",
    "invent_kind_number",
    "invent_number",
    "invent_string",
    "invent_value",
    "invented_value",
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
    "value_slots",
    "wrong_type_value",
]
