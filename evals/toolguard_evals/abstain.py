"""Abstain evaluation (ICT paper): does the pre-check abstain exactly when it should?

Binary task with *abstain* as the positive class (``ask_user`` or ``no_suitable_tool``),
accuracy and F1 in percent as the ICT paper (Yang et al., arXiv 2406.12307) reports them,
plus ``false_abstain`` (feasible cases answered with an abstain, on first and later turns)
and ``three_way`` (:mod:`toolguard_evals.verifier.report`).  Datasets (:func:`load_cases`):

- ``relytoolbench`` (``docs/DATA.md`` §4): Original (feasible), Missing Parameter (ask),
  Unmatched Tools (no suitable tool);
- ``bfcl`` (BFCL v4, §2a): irrelevance / live_irrelevance vs the feasible single-turn
  categories, and the turns of ``multi_turn_miss_param`` / ``_miss_func`` / ``_base`` with
  their history replayed in BFCL's environments;
- ``dialogues`` (:mod:`toolguard_evals.dialogues`): one case per user turn.

An abstain subset is scored with its feasible counterpart(s), so F1 counts false abstains.
Modes: those of :class:`toolguard.precheck.Precheck`, and ``implicit`` (the paper's
implicit evaluation: the agent model with the tools bound; a call is ``proceed``, a text
answer an abstain).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from toolguard.context import message_text
from toolguard.precheck import (
    LLM_MODES,
    MARK_KEY,
    Precheck,
    PrecheckDecision,
    PrecheckLabel,
    as_messages,
    user_message,
)
from toolguard.precheck.rules import MissingInfoPolicy, RelevanceBackend
from toolguard.specs import ToolSpec
from toolguard.verifier import Backend, LearnedVerifier
from toolguard_evals.relytoolbench import data as rtb_data
from toolguard_evals.runner import check_failures, map_cases
from toolguard_evals.verifier.report import by_split, print_by_split, three_way, trained_verifier

Dataset = Literal["relytoolbench", "bfcl", "dialogues"]
EvalMode = Literal["deterministic", "structured_verification", "cot", "zero_shot", "implicit",
                   "learned"]
EVAL_MODES: tuple[EvalMode, ...] = ("deterministic", "structured_verification", "cot",
                                    "zero_shot", "implicit", "learned")
MISS_FUNC_PROMPT = "I have updated some more functions you can choose from. What about now?"
"""BFCL's ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``."""
IMPLICIT_SYSTEM = ("You are a helpful assistant with access to functions. Call a function "
                   "when it can do what the user asks with the information given; otherwise "
                   "answer the user in text.")
"""System message of the implicit evaluation (llama.cpp shows tools only with one)."""

_RTB_LABELS: dict[str, PrecheckLabel] = {
    "Original": "proceed",
    "Missing Parameter": "ask_user",
    "Unmatched Tools": "no_suitable_tool",
}
_BFCL_SUBSETS: dict[str, PrecheckLabel] = {
    "irrelevance": "no_suitable_tool",
    "live_irrelevance": "no_suitable_tool",
    "simple_python": "proceed",
    "multiple": "proceed",
    "live_simple": "proceed",
    "live_multiple": "proceed",
}
_BFCL_MULTI_TURN: dict[str, tuple[str, PrecheckLabel]] = {
    "multi_turn_base": ("base", "proceed"),  # every turn feasible: base_feasible only
    "multi_turn_miss_param": ("miss_param", "ask_user"),
    "multi_turn_miss_func": ("miss_func", "no_suitable_tool"),
}
_PAIRS: dict[str, tuple[str, ...]] = {
    "Missing Parameter": ("Original",),
    "Unmatched Tools": ("Original",),
    "irrelevance": ("simple_python", "multiple"),
    "live_irrelevance": ("live_simple", "live_multiple"),
    "miss_param": ("miss_param_feasible",),
    "miss_func": ("miss_func_feasible",),
    "dialogues_ask_user": ("dialogues_feasible_first_turn", "dialogues_feasible_followup"),
    "dialogues_no_suitable_tool": ("dialogues_feasible_first_turn",
                                   "dialogues_feasible_followup"),
}


@dataclass(frozen=True, slots=True)
class Case:
    """One labelled request: its subset, the tools, the conversation and the expected label."""

    id: str
    subset: str
    tools: list[ToolSpec]
    messages: list[BaseMessage]
    expected: PrecheckLabel
    turn: int = 0
    """Position of the case's user turn in its conversation (0: the first request)."""


# ---------------------------------------------------------------------------- loaders
def load_relytoolbench(data_dir: str | Path | None = None, *,
                       limit: int | None = None) -> list[Case]:
    """RelyToolBench cases (``limit``: first records per file).

    Raises:
        FileNotFoundError: If a subset file is missing.
    """
    return [Case(id=c.id, subset=c.subset, tools=list(c.specs),
                 expected=_RTB_LABELS[c.subset], messages=[HumanMessage(c.query)])
            for c in rtb_data.load_relytoolbench(data_dir, limit=limit)]


def load_bfcl(*, limit: int | None = None, multi_turn: bool = True) -> list[Case]:
    """BFCL v4 cases (needs ``bfcl-eval``; ``limit``: records/episodes per category)."""
    from toolguard_evals.bfcl import load_category

    cases: list[Case] = []
    for cat, label in _BFCL_SUBSETS.items():
        for r in load_category(cat, limit=limit):  # type: ignore[arg-type]
            tools = list({d["name"]: ToolSpec.from_bfcl(d) for d in r["function"]}.values())
            msgs = as_messages([m for turn in r["question"] for m in turn])
            cases.append(Case(id=r["id"], subset=cat, tools=tools, messages=msgs,
                              expected=label))
    if multi_turn:
        for cat in _BFCL_MULTI_TURN:
            cases += load_multi_turn_cases(cat, limit=limit)
    return cases


def load_multi_turn_cases(category: str, *, limit: int | None = None) -> list[Case]:
    """Turn-level cases of ``multi_turn_base`` / ``_miss_param`` / ``_miss_func`` (module doc).

    Raises:
        ValueError: For another category.
    """
    from toolguard_evals.bfcl import BFCLEnvironment, load_multi_turn

    if category not in _BFCL_MULTI_TURN:
        raise ValueError(f"unknown multi-turn abstain category {category!r}; expected one of "
                         f"{list(_BFCL_MULTI_TURN)}")
    subset, label = _BFCL_MULTI_TURN[category]
    specs: dict[str, ToolSpec] = {}
    cases: list[Case] = []
    for ep in load_multi_turn(category, limit=limit):  # type: ignore[arg-type]
        env = BFCLEnvironment.for_episode(ep)
        history: list[BaseMessage] = []
        for t, turn in enumerate(ep.turns):
            user = as_messages(turn) if turn else [HumanMessage(MISS_FUNC_PROMPT)]
            docs = ep.tools_at(t)
            tools = [specs.setdefault(d["name"], ToolSpec.from_bfcl(d)) for d in docs]
            gold = ep.gold[t]
            if gold or label != "proceed":  # base's few empty-gold turns are no case
                cases.append(Case(
                    id=f"{ep.id}:turn{t}", subset=subset if not gold else f"{subset}_feasible",
                    tools=tools, messages=[*history, *user],
                    expected=label if not gold else "proceed", turn=t))
            history += user
            if not gold:
                history.append(AIMessage("Done.") if label == "proceed" else AIMessage(
                    user_message(label), response_metadata={MARK_KEY: label}))
                continue
            for i, call in enumerate(gold):
                res = env.execute(call)
                cid = f"t{t}_{i}"
                history.append(AIMessage("", tool_calls=[
                    {"name": res.name, "args": res.args, "id": cid, "type": "tool_call"}]))
                history.append(ToolMessage(res.content, tool_call_id=cid, name=res.name))
            history.append(AIMessage("Done."))
    return cases


# ---------------------------------------------------------------------------- scoring
def _binary(pairs: Sequence[tuple[bool, bool]]) -> tuple[float, float | None]:
    """(accuracy %, F1 % of the positive class or None without positives) of (gold, pred)."""
    if not pairs:
        return 0.0, None
    tp = sum(g and p for g, p in pairs)
    fp = sum(p and not g for g, p in pairs)
    fn = sum(g and not p for g, p in pairs)
    acc = 100.0 * sum(g == p for g, p in pairs) / len(pairs)
    if tp + fn == 0:
        return round(acc, 2), None
    f1 = 200.0 * tp / (2 * tp + fp + fn) if tp else 0.0
    return round(acc, 2), round(f1, 2)


def score(cases: Sequence[Case], predictions: Sequence[PrecheckLabel],
          *, mode: str = "deterministic") -> dict[str, Any]:
    """Score predictions (see module docstring for the pairing of subsets).

    Returns:
        ``{"mode", "overall": {"accuracy", "f1"}, "per_subset": {name: {"accuracy",
        "f1", "n"}}, "false_abstain": {"first_turns", "later_turns", "n_first",
        "n_later"}}`` in percent (a rate is ``None`` without cases);
        ``per_subset["3-way"]`` (exact-label accuracy) when a case expects ``ask_user``.
    """
    by_subset: dict[str, list[tuple[bool, bool]]] = {}
    exact: list[bool] = []
    for c, p in zip(cases, predictions, strict=True):
        by_subset.setdefault(c.subset, []).append((c.expected != "proceed", p != "proceed"))
        exact.append(c.expected == p)
    per: dict[str, dict[str, Any]] = {}
    for name, pairs in by_subset.items():
        pool = list(pairs)
        for other in _PAIRS.get(name, ()):
            pool += by_subset.get(other, [])
        acc, f1 = _binary(pool if name in _PAIRS else pairs)
        per[name] = {"accuracy": acc, "f1": f1, "n": len(pairs)}
    acc, f1 = _binary([x for pairs in by_subset.values() for x in pairs])
    report: dict[str, Any] = {"mode": mode, "overall": {"accuracy": acc, "f1": f1},
                              "per_subset": per,
                              "false_abstain": _false_abstains(cases, predictions),
                              "three_way": three_way(cases, predictions),
                              "by_split": by_split(cases, predictions)}
    if any(c.expected == "ask_user" for c in cases):
        per["3-way"] = {"accuracy": round(100.0 * sum(exact) / len(exact), 2), "f1": None,
                        "n": len(exact)}
    return report


def _false_abstains(cases: Sequence[Case],
                    predictions: Sequence[PrecheckLabel]) -> dict[str, Any]:
    """False-abstain rates (%) of feasible cases on first and on later user turns."""
    first = [p != "proceed" for c, p in zip(cases, predictions, strict=True)
             if c.expected == "proceed" and c.turn == 0]
    later = [p != "proceed" for c, p in zip(cases, predictions, strict=True)
             if c.expected == "proceed" and c.turn > 0]

    def rate(xs: list[bool]) -> float | None:
        return round(100.0 * sum(xs) / len(xs), 2) if xs else None

    return {"first_turns": rate(first), "later_turns": rate(later), "n_first": len(first),
            "n_later": len(later)}


# ---------------------------------------------------------------------------- running
def _openai_tool(spec: ToolSpec) -> dict[str, Any]:
    name = re.sub(r"[^A-Za-z0-9_-]", "_", spec.name)[:64]
    return {"type": "function", "function": {"name": name, "description": spec.description,
                                             "parameters": spec.parameters}}


def implicit_label(answer: BaseMessage) -> PrecheckLabel:
    """The implicit evaluation's reading of an agent answer (module docstring)."""
    if isinstance(answer, AIMessage) and (answer.tool_calls or answer.invalid_tool_calls):
        return "proceed"
    return "ask_user" if "?" in message_text(answer) else "no_suitable_tool"


def implicit_decide(model: BaseChatModel, case: Case) -> tuple[PrecheckLabel, str | None]:
    """Run the agent model with the case's tools bound; a tool call is ``proceed``.

    Returns:
        The label and ``None``, or ``("proceed", error)`` when the model call raised (no
        abstention was shown; the run counts the case as failed, see
        :func:`toolguard_evals.runner.check_failures`).
    """
    msgs = list(case.messages)
    if not any(isinstance(m, SystemMessage) for m in msgs):
        msgs = [SystemMessage(IMPLICIT_SYSTEM), *msgs]
    try:
        answer = model.bind_tools([_openai_tool(t) for t in case.tools]).invoke(msgs)
    except Exception as exc:  # an endpoint error is no abstention; reported as a failure
        return "proceed", f"{type(exc).__name__}: {exc}"
    return implicit_label(answer), None


def run(cases: Sequence[Case], *, mode: EvalMode = "deterministic",
        model: BaseChatModel | None = None, relevance: RelevanceBackend = "lexical",
        missing_info: MissingInfoPolicy = "vague", progress: bool = False,
        verifier: str | Path | None = None,
        thresholds: dict[str, float] | None = None,
        backend: Backend = "torch") -> dict[str, Any]:
    """Run the pre-check (or the implicit evaluation) on every case and score it.

    The cases run through :func:`toolguard_evals.runner.map_cases`, one after another in
    this thread (a scripted or local model answers in order).  Adds ``latency_ms_p50`` (per
    case: building the pre-check and deciding), ``endpoint_errors`` (``case id -> error``
    for the cases whose model call raised; they are scored with the fallback /
    ``proceed``) and, for LLM modes, ``llm`` = ``{"calls", "retries", "fallbacks"}``.

    Args:
        cases: The cases; their ids must be unique.
        mode: A pre-check mode or ``implicit``.
        model: The chat model of the LLM and implicit modes.
        relevance: Deterministic tool-relevance backend.
        missing_info: Deterministic ``ask_user`` policy.
        progress: Show the runner's progress bar on stderr.
        verifier: ``learned``: a ``toolguard verifier train`` output or model folder
            (``None``: ``$TOOLGUARD_VERIFIER``).
        thresholds: ``learned``: ``fit_threshold`` / ``slot_threshold`` for the pre-check
            (default: the folder's ``calibration.json``, else the library's defaults).
        backend: ``learned``: where the verifier's encoders run (``LearnedVerifier``'s
            ``backend``); one verifier instance serves every case.

    Raises:
        ValueError: For an unknown mode, an LLM/implicit mode without ``model``, or
            duplicate case ids.
    """
    if mode not in EVAL_MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {list(EVAL_MODES)}")
    if mode not in ("deterministic", "learned") and model is None:
        raise ValueError(f"mode {mode!r} needs a chat model")
    learned: dict[str, Any] = {}
    options: dict[str, Any] = {}
    if mode == "learned":
        folder, calibrated = (trained_verifier(verifier) if verifier is not None
                              else (None, {}))
        learned = {"verifier": folder, **calibrated, **(thresholds or {})}
        options = {**learned, "verifier": LearnedVerifier(folder, backend=backend)}
        learned["backend"] = backend

    def decide(case: Case) -> dict[str, Any]:
        if mode == "implicit":
            assert model is not None
            label, error = implicit_decide(model, case)
            return {"label": label, "error": error, "decision": None}
        d = Precheck(case.tools, mode=mode, model=None if mode == "learned" else model,
                     relevance=relevance, missing_info=missing_info,
                     **options).decide(case.messages)
        return {"label": d.decision, "error": d.model_error, "decision": d}

    ran = map_cases(cases, decide, case_id=lambda c: c.id, description=f"abstain ({mode})",
                    progress=progress, raise_errors=True)
    outputs = [ran.outputs[c.id] for c in cases]
    report = score(cases, [o["label"] for o in outputs], mode=mode)
    report["endpoint_errors"] = {c.id: o["error"] for c, o in zip(cases, outputs, strict=True)
                                 if o["error"] is not None}
    times = sorted(1000 * ran.case_seconds[c.id] for c in cases)
    report["latency_ms_p50"] = round(times[len(times) // 2], 3) if times else None
    if learned:
        report["learned"] = {k: str(v) if k == "verifier" else v for k, v in learned.items()}
    if mode in LLM_MODES:
        decisions: list[PrecheckDecision] = [o["decision"] for o in outputs]
        report["llm"] = {"calls": sum(d.attempts for d in decisions),
                         "retries": sum(d.attempts > 1 for d in decisions),
                         "fallbacks": sum(d.fallback for d in decisions)}
    return report


def print_table(report: dict[str, Any]) -> None:
    """Print the per-subset table with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"abstain pre-check ({report['mode']})")
    for col in ("subset", "n", "accuracy %", "F1 %"):
        table.add_column(col, justify="left" if col == "subset" else "right")
    for name, row in report["per_subset"].items():
        f1 = "-" if row["f1"] is None else f"{row['f1']:.1f}"
        table.add_row(name, str(row["n"]), f"{row['accuracy']:.1f}", f1)
    ov = report["overall"]
    table.add_row("overall", "", f"{ov['accuracy']:.1f}",
                  "-" if ov["f1"] is None else f"{ov['f1']:.1f}")
    Console().print(table)
    fa = report.get("false_abstain") or {}
    if fa.get("n_first") or fa.get("n_later"):
        def pct(x: float | None) -> str:
            return "-" if x is None else f"{x:.1f} %"

        Console().print(f"false abstains on feasible turns: first requests "
                        f"{pct(fa['first_turns'])} (n={fa['n_first']}), later turns "
                        f"{pct(fa['later_turns'])} (n={fa['n_later']})")
    if "by_split" in report:
        print_by_split(report)
    if "llm" in report:
        Console().print(f"model calls {report['llm']['calls']}, retries "
                        f"{report['llm']['retries']}, fallbacks {report['llm']['fallbacks']}")


def load_cases(dataset: Dataset, *, data_dir: str | Path | None = None,
               limit: int | None = None) -> list[Case]:
    """The cases of ``dataset``.

    Raises:
        ValueError: For an unknown dataset.
    """
    if dataset == "relytoolbench":
        return load_relytoolbench(data_dir, limit=limit)
    if dataset == "bfcl":
        return load_bfcl(limit=limit)
    if dataset == "dialogues":
        from toolguard_evals.dialogues.cases import load_dialogue_cases

        return load_dialogue_cases(limit=limit)
    raise ValueError(f"unknown dataset {dataset!r}; expected 'relytoolbench', 'bfcl' or "
                     "'dialogues'")


def main(dataset: Dataset, *, mode: EvalMode = "deterministic",
         model: BaseChatModel | None = None, relevance: RelevanceBackend = "lexical",
         missing_info: MissingInfoPolicy = "vague",
         data_dir: str | Path | None = None, json_path: str | Path | None = None,
         limit: int | None = None, quiet: bool = False, verifier: str | Path | None = None,
         thresholds: dict[str, float] | None = None,
         backend: Backend = "torch") -> dict[str, Any]:
    """Evaluate on ``dataset``; print the table, write JSON if asked.

    Raises:
        ValueError: For an unknown dataset or mode, or an LLM mode without ``model``.
    """
    cases = load_cases(dataset, data_dir=data_dir, limit=limit)
    report = run(cases, mode=mode, model=model, relevance=relevance, missing_info=missing_info,
                 progress=not quiet, verifier=verifier, thresholds=thresholds,
                 backend=backend)
    report["dataset"] = dataset
    report["relevance"] = relevance
    report["missing_info"] = missing_info
    if not quiet:
        print_table(report)
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    if mode not in ("deterministic", "learned"):
        check_failures(report["endpoint_errors"], len(cases), what="cases")
    return report


__all__ = ["EVAL_MODES", "Case", "EvalMode", "implicit_decide", "implicit_label",
           "load_bfcl", "load_cases", "load_multi_turn_cases", "load_relytoolbench", "main",
           "run", "score"]
