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
Modes: those of :class:`toolguard.precheck.Precheck`; ``implicit`` (the paper's
implicit evaluation: the agent model with the tools bound; a call is ``proceed``, a text
answer an abstain); ``guarded`` (the same model as an agent with the README's stack,
:func:`toolguard_graphs.create_guarded_agent`: ``GuardMiddleware`` turns a call with
values nobody gave into a question, a call no tool fits into "change tools"; a call that
reaches a tool is ``proceed``) and ``guarded_precheck`` (that stack after
``PrecheckMiddleware()``: deterministic, or learned when a verifier is given).  Every report
counts ``hallucinated_calls``: cases that expect an abstain but would run a call, a call
that matches no gold.
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
from toolguard.middleware import indecisive
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
from toolguard_evals.runner import JsonlLLMCache, check_failures, map_cases
from toolguard_evals.verifier.report import by_split, print_by_split, three_way, trained_verifier

Dataset = Literal["relytoolbench", "bfcl", "dialogues"]
EvalMode = Literal["deterministic", "structured_verification", "cot", "zero_shot", "implicit",
                   "learned", "guarded", "guarded_precheck"]
EVAL_MODES: tuple[EvalMode, ...] = ("deterministic", "structured_verification", "cot",
                                    "zero_shot", "implicit", "learned", "guarded",
                                    "guarded_precheck")
AGENT_MODES: tuple[EvalMode, ...] = ("implicit", "guarded", "guarded_precheck")
"""Modes where the agent model answers the case (the others decide before any model call)."""
GUARDED_MODES: tuple[EvalMode, ...] = ("guarded", "guarded_precheck")
"""The modes that run the model inside the guarded agent (:func:`guarded_decide`)."""
MODEL_FREE_MODES: tuple[EvalMode, ...] = ("deterministic", "learned")
GUARDED_MAX_STEPS = 3
"""Model calls per guarded case at most (a refused call goes back to the model)."""
STUB_RESULT = json.dumps({"status": "ok"})
"""What a stub tool of the guarded modes returns (the turn ends once a call ran)."""
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
                              "by_split": by_split(cases, predictions),
                              "hallucinated_calls": hallucinated_calls(cases, predictions)}
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


def implicit_decide(model: BaseChatModel, case: Case, *,
                    finish_tool: bool = False) -> tuple[PrecheckLabel, str | None]:
    """Run the agent model with the case's tools bound; a tool call is ``proceed``.

    With ``finish_tool`` (a Relign-tuned model), RelyToolBench's ``Finish`` is bound too
    and read as :class:`~toolguard.IndecisiveActionsMiddleware` reads it: TalkToUser is
    ``ask_user``, ChangeTools ``no_suitable_tool``, another ``Finish`` its text.

    Returns:
        The label and ``None``, or ``("proceed", error)`` when the model call raised (no
        abstention was shown; the run counts the case as failed, see
        :func:`toolguard_evals.runner.check_failures`).
    """
    msgs = list(case.messages)
    if not any(isinstance(m, SystemMessage) for m in msgs):
        msgs = [SystemMessage(IMPLICIT_SYSTEM), *msgs]
    tools = [_openai_tool(t) for t in case.tools]
    if finish_tool and all(t["function"]["name"] != indecisive.FINISH for t in tools):
        # as the middleware: a case tool named Finish is the case's, not offered twice
        tools.append({"type": "function", "function": indecisive.finish_tool()})
    try:
        answer = model.bind_tools(tools).invoke(msgs)
    except Exception as exc:  # an endpoint error is no abstention; reported as a failure
        return "proceed", f"{type(exc).__name__}: {exc}"
    if finish_tool and isinstance(answer, AIMessage):
        answer, _ = indecisive.resolve_finish(answer)
        mark = (answer.response_metadata or {}).get(MARK_KEY)
        if isinstance(mark, str) and mark in _MARK_LABELS:
            return _MARK_LABELS[mark], None
    return implicit_label(answer), None


@dataclass(slots=True)
class AgentOutcome:
    """How a guarded agent ended a case.

    Attributes:
        label: The three-way reading (:func:`guarded_decide`).
        source: What decided it: ``executed`` (a call reached a tool), ``toolguard``
            (toolguard's own message: a pre-check or guard question / "no tool fits"),
            ``text`` (the model answered in text), ``limit`` (the graph's recursion
            limit, nothing run) or ``error``.
        mark: toolguard's mark on its message (``ask_user``, ``change_tools``,
            ``no_suitable_tool``, ``loop``), if any.
        executed: The calls that ran, ``{"name", "args"}``.
        refused: Calls the guard refused along the way.
        model_calls: Model calls the agent made.
        error: ``"Type: message"`` when the run raised, else ``None``.
    """

    label: PrecheckLabel
    source: str
    mark: str | None = None
    executed: list[dict[str, Any]] | None = None
    refused: int = 0
    model_calls: int = 0
    error: str | None = None


_MARK_LABELS: dict[str, PrecheckLabel] = {"ask_user": "ask_user",
                                          "no_suitable_tool": "no_suitable_tool",
                                          "change_tools": "no_suitable_tool"}


def stub_tools(case: Case, executed: list[dict[str, Any]]) -> list[Any]:
    """The case's tools as ``return_direct`` stubs that record each run in ``executed``.

    Name, description and JSON Schema are those the implicit mode binds
    (:func:`_openai_tool`), so both modes send the model the same first request (but for
    a description of only spaces, which LangChain sends empty).
    """
    from langchain_core.tools import StructuredTool

    def recorder(name: str) -> Any:
        def run(**kwargs: Any) -> str:
            executed.append({"name": name, "args": kwargs})
            return STUB_RESULT

        return run

    out: list[Any] = []
    for spec in case.tools:
        fn = _openai_tool(spec)["function"]
        out.append(StructuredTool.from_function(
            func=recorder(fn["name"]), name=fn["name"],
            description=fn["description"] or " ",  # LangChain sends " " as ""
            args_schema=fn["parameters"] or {"type": "object", "properties": {}},
            return_direct=True))
    return out


def guarded_decide(model: BaseChatModel, case: Case, *,
                   precheck: Literal["deterministic"] | Precheck | None = None,
                   max_steps: int = GUARDED_MAX_STEPS,
                   finish_tool: bool = False, look_up_first: bool = False) -> AgentOutcome:
    """Run the case through the README's stack around ``model`` (one user turn).

    :func:`toolguard_graphs.create_guarded_agent` (``RetryControllerMiddleware``,
    ``LoopGuardMiddleware``, ``GuardMiddleware`` last; ``PrecheckMiddleware`` first when
    ``precheck`` is given: ``"deterministic"``, or a :class:`~toolguard.precheck.Precheck`
    built on ``case.tools``, e.g. the learned one) with ``ask_user="end"`` and the guard's
    refusal budget ``max_refused_steps = max_steps - 1`` (the README's default is 4; a model
    that answers every refusal with another refused call stops after ``max_steps`` model
    calls), over :func:`stub_tools`. The label: a call that ran is ``proceed``; toolguard's
    message ends the turn with its mark (``ask_user``; ``change_tools`` /
    ``no_suitable_tool`` read as ``no_suitable_tool``; the refusal-budget stop, ``loop``, as
    its text reads, :func:`implicit_label`); the model's text answer as in
    :func:`implicit_label`; a run that hit the graph's recursion limit with nothing run is
    ``no_suitable_tool`` (nothing ran and nothing was asked). A run that raised is
    ``proceed`` with ``error`` set (no abstention was shown). ``finish_tool``: a
    Relign-tuned model, served with :class:`~toolguard.IndecisiveActionsMiddleware`
    (``indecisive_actions=True``). ``look_up_first``: the guard sends a call with ungiven
    values back to the model once before asking (``GuardMiddleware(look_up_first=True)``).
    """
    from langgraph.errors import GraphRecursionError

    from toolguard_graphs import create_guarded_agent

    executed: list[dict[str, Any]] = []
    msgs = list(case.messages)
    system = None if any(isinstance(m, SystemMessage) for m in msgs) else IMPLICIT_SYSTEM
    try:
        graph = create_guarded_agent(
            model, stub_tools(case, executed), system_prompt=system, ask_user="end",
            precheck=precheck, max_refused_steps=max_steps - 1,
            indecisive_actions=finish_tool, look_up_first=look_up_first)
        out = graph.invoke({"messages": msgs}, {"recursion_limit": 16 * max_steps + 16})
    except GraphRecursionError:
        return AgentOutcome("proceed" if executed else "no_suitable_tool", "limit",
                            executed=executed)
    except Exception as exc:  # an endpoint error is no abstention; reported as a failure
        return AgentOutcome("proceed", "error", executed=executed,
                            error=f"{type(exc).__name__}: {exc}"[:2000])
    new = list(out.get("messages") or [])[len(msgs):]
    model_calls = sum(isinstance(m, AIMessage) and MARK_KEY not in (m.response_metadata or {})
                      for m in new)
    refused = sum(isinstance(m, ToolMessage) and m.status == "error" for m in new)
    if executed:
        return AgentOutcome("proceed", "executed", executed=executed, refused=refused,
                            model_calls=model_calls)
    last = next((m for m in reversed(new) if isinstance(m, AIMessage)), None)
    mark = (last.response_metadata or {}).get(MARK_KEY) if last is not None else None
    if last is not None and isinstance(mark, str):
        label = _MARK_LABELS.get(mark) or implicit_label(AIMessage(message_text(last)))
        return AgentOutcome(label, "toolguard", mark=mark, executed=executed,
                            refused=refused, model_calls=model_calls)
    if last is None:
        return AgentOutcome("no_suitable_tool", "limit", executed=executed, refused=refused,
                            model_calls=model_calls)
    return AgentOutcome(implicit_label(AIMessage(message_text(last))), "text",
                        executed=executed, refused=refused, model_calls=model_calls)


def hallucinated_calls(cases: Sequence[Case],
                       predictions: Sequence[PrecheckLabel]) -> dict[str, Any]:
    """Cases that expect an abstain but would run a call (``proceed``): no gold call exists.

    Returns:
        ``{"n": abstain cases, "proceeded": k, "rate": % or None, "by_label": {label:
        {"n", "proceeded", "rate"}}}``.
    """
    def block(label: str | None) -> dict[str, Any]:
        xs = [p == "proceed" for c, p in zip(cases, predictions, strict=True)
              if c.expected != "proceed" and (label is None or c.expected == label)]
        return {"n": len(xs), "proceeded": sum(xs),
                "rate": round(100.0 * sum(xs) / len(xs), 2) if xs else None}

    return {**block(None), "by_label": {lab: block(lab)
                                        for lab in ("ask_user", "no_suitable_tool")}}


def run(cases: Sequence[Case], *, mode: EvalMode = "deterministic",
        model: BaseChatModel | None = None, relevance: RelevanceBackend = "lexical",
        missing_info: MissingInfoPolicy = "vague", progress: bool = False,
        verifier: str | Path | None = None,
        thresholds: dict[str, float] | None = None,
        backend: Backend = "torch", finish_tool: bool = False,
        look_up_first: bool = False) -> dict[str, Any]:
    """Run the pre-check (or the implicit evaluation) on every case and score it.

    The cases run through :func:`toolguard_evals.runner.map_cases`, one after another in
    this thread (a scripted or local model answers in order).  Adds ``latency_ms_p50`` (per
    case: building the pre-check and deciding), ``endpoint_errors`` (``case id -> error``
    for the cases whose model call raised; they are scored with the fallback /
    ``proceed``), ``cases`` (per case: ``id``, ``subset``, ``turn``, ``expected``,
    ``predicted``, ``latency_ms``, and with a model ``cache_hits`` / ``cache_misses`` of
    a :class:`~toolguard_evals.runner.JsonlLLMCache` on it, whose cached cases' latency is
    not the model's), ``latency_ms_p50_uncached`` (cases with no cache hit), for LLM modes
    ``llm`` = ``{"calls", "retries", "fallbacks"}`` and for the guarded modes ``agent`` =
    ``{"sources": {source: n}, "marks": {mark: n}, "model_calls", "refused_calls",
    "executed_calls"}`` (:class:`AgentOutcome`).

    Args:
        cases: The cases; their ids must be unique.
        mode: A pre-check mode, ``implicit``, ``guarded`` or ``guarded_precheck``.
        model: The chat model of the LLM, implicit and guarded modes.
        relevance: Deterministic tool-relevance backend.
        missing_info: Deterministic ``ask_user`` policy.
        progress: Show the runner's progress bar on stderr.
        verifier: ``learned``: a ``toolguard verifier train`` output or model folder
            (``None``: ``$TOOLGUARD_VERIFIER``).  ``guarded_precheck``: the same, and the
            agent's pre-check is then the learned one (``None``: deterministic).
        thresholds: ``learned`` / ``guarded_precheck`` with a verifier: ``fit_threshold`` /
            ``slot_threshold`` for the pre-check (default: the folder's
            ``calibration.json``, else the library's defaults).
        backend: The same modes: where the verifier's encoders run (``LearnedVerifier``'s
            ``backend``); one verifier instance serves every case.
        finish_tool: ``implicit`` and the guarded modes: ``model`` is Relign-tuned; offer
            it ``Finish`` (:func:`implicit_decide`, :func:`guarded_decide`).
        look_up_first: The guarded modes: the guard sends a call with ungiven values back
            to the model once before asking (:func:`guarded_decide`).

    Raises:
        ValueError: For an unknown mode, an LLM/implicit mode without ``model``, or
            duplicate case ids, ``finish_tool`` with a mode that does not run the
            model as the agent, ``verifier`` with a mode other than ``learned`` /
            ``guarded_precheck``, or ``look_up_first`` with a mode other than the guarded
            ones.
    """
    if mode not in EVAL_MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {list(EVAL_MODES)}")
    if mode not in MODEL_FREE_MODES and model is None:
        raise ValueError(f"mode {mode!r} needs a chat model")
    if finish_tool and mode not in AGENT_MODES:
        raise ValueError(f"finish_tool is for the modes where the model is the agent "
                         f"({', '.join(AGENT_MODES)}), not {mode!r}")
    learned: dict[str, Any] = {}
    options: dict[str, Any] = {}
    if look_up_first and mode not in GUARDED_MODES:
        raise ValueError(f"look_up_first is for the guarded modes, not {mode!r}")
    if verifier is not None and mode not in ("learned", "guarded_precheck"):
        raise ValueError(f"verifier is for the modes learned and guarded_precheck, not {mode!r}")
    if mode == "learned" or (mode == "guarded_precheck" and verifier is not None):
        folder, calibrated = (trained_verifier(verifier) if verifier is not None
                              else (None, {}))
        learned = {"verifier": folder, **calibrated, **(thresholds or {})}
        options = {**learned, "verifier": LearnedVerifier(folder, backend=backend)}
        learned["backend"] = backend

    llm_cache = getattr(model, "cache", None)
    llm_cache = llm_cache if isinstance(llm_cache, JsonlLLMCache) else None

    def decide(case: Case) -> dict[str, Any]:
        before = (llm_cache.hits, llm_cache.misses) if llm_cache is not None else (0, 0)
        out = _decide(case)
        if llm_cache is not None:
            out["cache_hits"] = llm_cache.hits - before[0]
            out["cache_misses"] = llm_cache.misses - before[1]
        return out

    def _decide(case: Case) -> dict[str, Any]:
        if mode == "implicit":
            assert model is not None
            label, error = implicit_decide(model, case, finish_tool=finish_tool)
            return {"label": label, "error": error, "decision": None}
        if mode == "guarded" or mode == "guarded_precheck":
            assert model is not None
            pre: Literal["deterministic"] | Precheck | None = None
            if mode == "guarded_precheck":
                pre = (Precheck(case.tools, mode="learned", **options) if options
                       else "deterministic")
            o = guarded_decide(model, case, precheck=pre, finish_tool=finish_tool,
                               look_up_first=look_up_first)
            return {"label": o.label, "error": o.error, "decision": None, "agent": o}
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
    report["cases"] = [_case_row(c, o, 1000 * ran.case_seconds[c.id])
                       for c, o in zip(cases, outputs, strict=True)]
    if llm_cache is not None:
        fresh = sorted(r["latency_ms"] for r in report["cases"] if not r["cache_hits"])
        report["latency_ms_p50_uncached"] = (round(fresh[len(fresh) // 2], 3) if fresh
                                             else None)
        report["llm_cache"] = {"hits": sum(r["cache_hits"] for r in report["cases"]),
                               "misses": sum(r["cache_misses"] for r in report["cases"]),
                               "path": str(llm_cache.store.path)}
    if mode in GUARDED_MODES:
        agents: list[AgentOutcome] = [o["agent"] for o in outputs]
        sources: dict[str, int] = {}
        marks: dict[str, int] = {}
        for a in agents:
            sources[a.source] = sources.get(a.source, 0) + 1
            if a.mark:
                marks[a.mark] = marks.get(a.mark, 0) + 1
        report["agent"] = {"sources": sources, "marks": marks,
                           "model_calls": sum(a.model_calls for a in agents),
                           "refused_calls": sum(a.refused for a in agents),
                           "executed_calls": sum(len(a.executed or ()) for a in agents)}
    if learned:
        report["learned"] = {k: str(v) if k == "verifier" else v for k, v in learned.items()}
    if mode in LLM_MODES:
        decisions: list[PrecheckDecision] = [o["decision"] for o in outputs]
        report["llm"] = {"calls": sum(d.attempts for d in decisions),
                         "retries": sum(d.attempts > 1 for d in decisions),
                         "fallbacks": sum(d.fallback for d in decisions)}
    return report


def _case_row(case: Case, out: dict[str, Any], latency_ms: float) -> dict[str, Any]:
    row: dict[str, Any] = {"id": case.id, "subset": case.subset, "turn": case.turn,
                           "expected": case.expected, "predicted": out["label"],
                           "latency_ms": round(latency_ms, 3)}
    for key in ("cache_hits", "cache_misses"):
        if key in out:
            row[key] = out[key]
    agent: AgentOutcome | None = out.get("agent")
    if agent is not None:
        row.update(source=agent.source, mark=agent.mark, model_calls=agent.model_calls,
                   refused=agent.refused, executed=agent.executed)
    if out.get("error"):
        row["error"] = out["error"]
    return row


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
    hc = report.get("hallucinated_calls") or {}
    if hc.get("n"):
        Console().print(f"abstain cases answered with a call (hallucinated calls): "
                        f"{hc['proceeded']}/{hc['n']} ({hc['rate']:.1f} %)")
    if "agent" in report:
        ag = report["agent"]
        Console().print(f"guarded agent: outcomes {ag['sources']}, toolguard marks "
                        f"{ag['marks']}, model calls {ag['model_calls']}, refused calls "
                        f"{ag['refused_calls']}, executed calls {ag['executed_calls']}")
    if "llm_cache" in report:
        lc = report["llm_cache"]
        Console().print(f"response cache {lc['path']}: {lc['hits']} hits, "
                        f"{lc['misses']} misses")


HELD_BACK = "held-back"
"""``parts`` of the dialogues: the domains held back from the learned verifier's training."""


def load_cases(dataset: Dataset, *, data_dir: str | Path | None = None,
               limit: int | None = None, parts: Sequence[str] | None = None) -> list[Case]:
    """The cases of ``dataset``.

    Args:
        dataset: ``relytoolbench``, ``bfcl`` or ``dialogues``.
        data_dir: RelyToolBench's folder.
        limit: Records per file / category, episodes per multi-turn category, dialogues
            per domain.
        parts: Only these parts (``None``: all): RelyToolBench groups (``G2_category``),
            BFCL categories (``multi_turn_miss_param``, ``irrelevance`` ...; a multi-turn
            category brings its feasible turns), dialogue domains (``mail`` ...; or
            ``held-back``: those the learned verifier never trains on,
            :data:`toolguard_evals.verifier.data.EVAL_DOMAINS`).

    Raises:
        ValueError: For an unknown dataset or part.
    """
    wanted = list(parts or ())
    if dataset == "relytoolbench":
        if not wanted:
            return load_relytoolbench(data_dir, limit=limit)
        bad = [p for p in wanted if p not in rtb_data.GROUPS]
        if bad:
            raise ValueError(f"unknown RelyToolBench group(s) {bad}; expected "
                             f"{list(rtb_data.GROUPS)}")
        return [Case(id=c.id, subset=c.subset, tools=list(c.specs),
                     expected=_RTB_LABELS[c.subset], messages=[HumanMessage(c.query)])
                for c in rtb_data.load_relytoolbench(data_dir, limit=limit,
                                                     groups=wanted)]  # type: ignore[arg-type]
    if dataset == "bfcl":
        if not wanted:
            return load_bfcl(limit=limit)
        bad = [p for p in wanted if p not in _BFCL_SUBSETS and p not in _BFCL_MULTI_TURN]
        if bad:
            raise ValueError(f"unknown BFCL abstain categor(ies) {bad}; expected "
                             f"{[*_BFCL_SUBSETS, *_BFCL_MULTI_TURN]}")
        single = [p for p in wanted if p in _BFCL_SUBSETS]
        cases = ([c for c in load_bfcl(limit=limit, multi_turn=False) if c.subset in single]
                 if single else [])
        for cat in (p for p in wanted if p in _BFCL_MULTI_TURN):
            cases += load_multi_turn_cases(cat, limit=limit)
        return cases
    if dataset == "dialogues":
        from toolguard_evals.dialogues.cases import load_dialogue_cases
        from toolguard_evals.verifier.data import EVAL_DOMAINS, TRAIN_DOMAINS

        cases = load_dialogue_cases(limit=limit)
        if not wanted:
            return cases
        domains = {d for p in wanted for d in (EVAL_DOMAINS if p == HELD_BACK else (p,))}
        bad = sorted(domains - {*EVAL_DOMAINS, *TRAIN_DOMAINS})
        if bad:
            raise ValueError(f"unknown dialogue domain(s) {bad}; expected "
                             f"{[*TRAIN_DOMAINS, *EVAL_DOMAINS]} or {HELD_BACK!r}")
        return [c for c in cases if c.id.split(":")[0].rsplit("-", 1)[0] in domains]
    raise ValueError(f"unknown dataset {dataset!r}; expected 'relytoolbench', 'bfcl' or "
                     "'dialogues'")


def main(dataset: Dataset, *, mode: EvalMode = "deterministic",
         model: BaseChatModel | None = None, relevance: RelevanceBackend = "lexical",
         missing_info: MissingInfoPolicy = "vague",
         data_dir: str | Path | None = None, json_path: str | Path | None = None,
         limit: int | None = None, quiet: bool = False, verifier: str | Path | None = None,
         thresholds: dict[str, float] | None = None,
         backend: Backend = "torch", parts: Sequence[str] | None = None,
         finish_tool: bool = False, look_up_first: bool = False) -> dict[str, Any]:
    """Evaluate on ``dataset`` (``parts``: :func:`load_cases`); print the table, write JSON.

    Raises:
        ValueError: For an unknown dataset, part or mode, or an LLM mode without ``model``.
    """
    cases = load_cases(dataset, data_dir=data_dir, limit=limit, parts=parts)
    report = run(cases, mode=mode, model=model, relevance=relevance, missing_info=missing_info,
                 progress=not quiet, verifier=verifier, thresholds=thresholds,
                 backend=backend, finish_tool=finish_tool, look_up_first=look_up_first)
    report["dataset"] = dataset
    report["parts"] = list(parts) if parts else None
    report["limit"] = limit
    report["relevance"] = relevance
    report["missing_info"] = missing_info
    report["finish_tool"] = finish_tool
    report["look_up_first"] = look_up_first
    if not quiet:
        print_table(report)
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    if mode not in MODEL_FREE_MODES:
        check_failures(report["endpoint_errors"], len(cases), what="cases")
    return report


__all__ = ["AGENT_MODES", "EVAL_MODES", "HELD_BACK", "MODEL_FREE_MODES", "AgentOutcome",
           "Case", "EvalMode", "guarded_decide", "hallucinated_calls", "implicit_decide",
           "implicit_label", "load_bfcl", "load_cases", "load_multi_turn_cases",
           "load_relytoolbench", "main", "run", "score", "stub_tools"]
