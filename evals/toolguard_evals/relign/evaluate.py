"""The Relign eval: a model on sets it was not trained on, unguarded and guarded.

- RelyToolBench slice (first ``per_file`` records per file) in the native format, through
  :func:`toolguard_evals.relytoolbench.run.generate`, scored by its evaluator with the
  rule-based parts only (:class:`RuleJudges`; :class:`TemplateSimulator` answers the APIs).
- BFCL v4 ``irrelevance`` / ``live_irrelevance`` (no call is right) and ``live_simple``
  (BFCL's AST checker scores the call): one turn in the same format.

Metrics per subset (percent): ``tool_call_rate``, ``indecisive_rate``
(``change_tools_rate`` + ``talk_to_user_rate``), ``tool_hallucination_rate`` (rules only:
content hallucinations need a judge), ``bcu`` (Original's is an upper estimate without a
judge) and, on BFCL, ``accuracy`` (BFCL's checker).  Pass rate is not reported: it needs a
capable judge.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from toolguard import Guard
from toolguard_evals.relign.chat_format import prompt_messages, tools_with_finish
from toolguard_evals.relign.chat_model import HFChatModel, ServedChatModel
from toolguard_evals.relign.config import EVAL_BFCL, EVAL_BFCL_ACCURACY
from toolguard_evals.relign.synth import TOOL_RESPONSE_NOTE, bfcl_function
from toolguard_evals.relytoolbench.agent import INDECISIVE_END, Episode, parse_arguments
from toolguard_evals.relytoolbench.data import GROUPS, SUBSETS, Group, RtbCase, load_relytoolbench
from toolguard_evals.relytoolbench.evaluator import Judges
from toolguard_evals.relytoolbench.metrics import EpisodeScore, aggregate
from toolguard_evals.relytoolbench.simulator import ApiSimulator
from toolguard_evals.runner import GenerationCache

METRICS = ("tool_call_rate", "indecisive_rate", "change_tools_rate", "talk_to_user_rate",
           "tool_hallucination_rate", "bcu", "accuracy")
SERVED_CONTEXT = 16384
"""Tokens of context the served model opens (G1's longest Unmatched Tools prompt: ~8,000)."""


class TemplateSimulator(ApiSimulator):
    """A deterministic API: answers with the API's ``template_response`` (or ``"done"``).

    Unknown tools and non-JSON arguments get StableToolBench's errors, as in
    :class:`~toolguard_evals.relytoolbench.simulator.ApiSimulator`.
    """

    def __init__(self) -> None:
        super().__init__(None)
        self.settings = {"kind": "relign-template-simulator"}

    async def respond(self, case: RtbCase, name: str, args_text: str) -> str:
        api = case.api(name)
        if api is None:
            return json.dumps({"error": f"No such function name: {name}", "response": ""})
        if parse_arguments(args_text) is None:
            return json.dumps({"error": "Tool input parse error...\n", "response": ""})
        self.generated += 1
        example = api.get("template_response")
        return json.dumps({"error": "", "response": example or TOOL_RESPONSE_NOTE},
                          ensure_ascii=False)


class RuleJudges(Judges):
    """The evaluator's judges without a model.

    Tool relevance is ``Irrelevant`` (it is asked only on Unmatched Tools, whose tools are
    unrelated by construction); every other judgment is ``Unsure`` and counted as a miss.
    """

    def __init__(self) -> None:
        super().__init__(None)

    async def label(self, prompt: str, **fields: Any) -> tuple[str, bool]:
        if prompt == "check_tool_relevance":
            return "Irrelevant", False
        self.misses += 1
        return "Unsure", True


def rtb_metrics(episodes: Sequence[Episode], scores: Sequence[EpisodeScore]) -> dict[str, Any]:
    """The module docstring's metrics of one subset's episodes."""
    if not episodes:
        return {k: None for k in METRICS} | {"n": 0}
    agg = aggregate(scores)
    ends = [INDECISIVE_END.get(e.end) for e in episodes]
    return {
        "n": len(episodes),
        "tool_call_rate": 100.0 * fmean(float(bool(e.executed_calls)) for e in episodes),
        "indecisive_rate": 100.0 * fmean(float(x is not None) for x in ends),
        "change_tools_rate": 100.0 * fmean(float(x == "ChangeTools") for x in ends),
        "talk_to_user_rate": 100.0 * fmean(float(x == "TalkToUser") for x in ends),
        "tool_hallucination_rate": float(agg["tool_hallucination_rate"]),
        "bcu": float(agg["utility"]),
        "avg_tool_calls": float(agg["avg_tool_calls"]),
        "ends": {e: sum(1 for x in episodes if x.end == e) for e in sorted({x.end
                                                                           for x in episodes})},
        "judge_misses": int(agg["judge_misses"]),
        "accuracy": None,
    }


async def eval_relytoolbench(chat: HFChatModel, *, per_file: int, groups: Sequence[Group],
                             max_steps: int, data_dir: str | Path | None,
                             cache: GenerationCache, settings: Mapping[str, Any],
                             progress: bool) -> dict[str, dict[str, Any]]:
    """``{"unguarded"|"guarded": {subset: metrics}}`` on the RelyToolBench slice."""
    from toolguard_evals.relytoolbench.run import generate, score

    cases = load_relytoolbench(data_dir, limit=per_file, groups=groups)
    simulator = TemplateSimulator()
    out: dict[str, dict[str, Any]] = {}
    for variant in ("unguarded", "guarded"):
        guarded = variant == "guarded"
        run_settings = {**settings, "kind": "relign-rtb", "guarded": guarded,
                        "max_steps": max_steps}
        result = await generate(cases, chat, simulator, settings=run_settings,
                                guarded=guarded, fmt="native", max_steps=max_steps,
                                cache=cache, concurrency=1, progress=progress)
        if result.failed:
            first = next(iter(result.failed.items()))
            raise RuntimeError(f"{len(result.failed)} RelyToolBench episodes failed; "
                               f"first: {first}")
        episodes = {cid: Episode.model_validate(o) for cid, o in result.outputs.items()}
        scores = await score(cases, result.outputs, RuleJudges())
        by_subset: dict[str, Any] = {}
        for subset in SUBSETS:
            ids = [c.id for c in cases if c.subset == subset]
            by_subset[subset] = rtb_metrics([episodes[i] for i in ids],
                                            [s for s in scores if s.subset == subset])
        out[variant] = by_subset
    return out


def _bfcl_turn(chat: HFChatModel, record: Mapping[str, Any]) -> dict[str, Any]:
    """One BFCL turn: the model's reply, and the calls a default :class:`Guard` lets run.

    Returns ``{"calls", "allowed", "change", "talk"}``: ``calls`` every call the model made
    except ``Finish`` (unparsable ones as ``(name, {})``), ``allowed`` those the guard
    allows, ``change`` / ``talk`` the indecisive ``Finish`` return types when no call was
    made.
    """
    from toolguard_evals.relign.chat_format import render
    from toolguard_evals.relign.chat_model import to_ai_message

    users = [m for turn in record["question"] for m in turn if m.get("role") == "user"]
    query = str(users[-1]["content"]) if users else ""
    functions = [bfcl_function(d) for d in record["function"]]
    messages = prompt_messages(query, functions)
    text = chat.complete(render(chat.tokenizer, messages, tools_with_finish(functions),
                                add_generation_prompt=True))
    reply = to_ai_message(text)
    calls = [c for c in reply.tool_calls if c["name"] != "Finish"]
    calls_invalid = [c for c in reply.invalid_tool_calls if c.get("name") != "Finish"]
    finish = next((c["args"] for c in reply.tool_calls if c["name"] == "Finish"), {})
    rtype = str(finish.get("return_type", ""))
    made = [(str(c["name"]), dict(c["args"])) for c in calls]
    made += [(str(c.get("name") or ""), {}) for c in calls_invalid]
    allowed: list[tuple[str, dict[str, Any]]] = []
    if made and functions:
        verdicts = Guard(functions).check([
            SystemMessage(messages[0]["content"]), HumanMessage(query),
            AIMessage("", tool_calls=calls, invalid_tool_calls=calls_invalid)])
        allowed = [call for call, v in zip(made, verdicts, strict=True) if v.action == "allow"]
    return {"calls": made, "allowed": allowed,
            "change": not made and rtype == "give_up_and_change_tools",
            "talk": not made and rtype == "give_up_and_talk_to_user"}


def eval_bfcl(chat: HFChatModel, *, per_category: int,
              categories: Sequence[str] = (*EVAL_BFCL, *EVAL_BFCL_ACCURACY),
              per_accuracy_category: int | None = None) -> dict[str, dict[str, Any]]:
    """``{"unguarded"|"guarded": {subset: metrics}}`` on BFCL v4 single-turn categories.

    Irrelevance categories (:data:`EVAL_BFCL`): a call is a hallucination, so
    ``tool_hallucination_rate`` is the share of turns with a call.  Call categories
    (:data:`EVAL_BFCL_ACCURACY`): ``accuracy`` is BFCL's own AST checker
    (:func:`toolguard_evals.bfcl_checker.check_task`) on the calls made (unguarded) or the
    calls the guard allows (guarded): the price of abstaining on requests a tool serves.

    Args:
        chat: The model.
        per_category: The first N records of each category.
        categories: BFCL v4 category names.
        per_accuracy_category: The first N records of each call category instead
            (``None``: ``per_category``).
    """
    from toolguard_evals.bfcl import load_category
    from toolguard_evals.bfcl_checker import check_task

    out: dict[str, dict[str, Any]] = {"unguarded": {}, "guarded": {}}
    for cat in categories:
        subset = f"BFCL {cat}"
        rows: dict[str, list[dict[str, Any]]] = {"unguarded": [], "guarded": []}
        limit = per_category
        if cat not in EVAL_BFCL and per_accuracy_category is not None:
            limit = per_accuracy_category
        for record in load_category(cat, limit=limit):  # type: ignore[arg-type]
            turn = _bfcl_turn(chat, record)
            for variant, calls in (("unguarded", turn["calls"]),
                                   ("guarded", turn["allowed"])):
                rows[variant].append({
                    "call": bool(calls), "change": turn["change"], "talk": turn["talk"],
                    "correct": bool(check_task(record, calls)["valid"])})
        for variant, items in rows.items():
            def rate(key: str, items: list[dict[str, Any]] = items) -> float:
                return 100.0 * fmean(float(r[key]) for r in items) if items else 0.0

            irrelevance = cat in EVAL_BFCL
            out[variant][subset] = {
                "n": len(items), "tool_call_rate": rate("call"),
                "no_call_rate": 100.0 - rate("call"),
                "indecisive_rate": rate("change") + rate("talk"),
                "change_tools_rate": rate("change"), "talk_to_user_rate": rate("talk"),
                "tool_hallucination_rate": rate("call") if irrelevance else None,
                "accuracy": rate("correct"), "bcu": None}
    return out


def evaluate_model(name: str, model_path: str, tokenizer_path: str, *, per_file: int,
                   bfcl: int, max_steps: int, max_new_tokens: int, accuracy: int | None = None,
                   groups: Sequence[Group] = GROUPS, data_dir: str | Path | None = None,
                   cache_path: str | Path | None = None, fingerprint: str = "",
                   progress: bool = True, gguf: str | Path | None = None) -> dict[str, Any]:
    """Evaluate one model; ``{"unguarded": {subset: m}, "guarded": {...}, "backend", ...}``.

    With ``gguf``, the model is that file served by the embedded llama.cpp server
    (:class:`~toolguard_evals.local_model.LocalModelServer`, prompts rendered here:
    :class:`~toolguard_evals.relign.chat_model.ServedChatModel`) instead of ``model_path``
    in process: the model as it is deployed, and many times faster on CPU.

    Args:
        name: ``base`` / ``sft`` / ``dpo`` (report label, cache key).
        model_path: The weights (folder or hub id).
        tokenizer_path: The tokenizer with the tool-aware chat template.
        per_file: RelyToolBench records per file.
        bfcl: BFCL records per irrelevance category.
        accuracy: BFCL records per accuracy category (``None``: ``bfcl``).
        max_steps: Model turns per RelyToolBench episode.
        max_new_tokens: Tokens per model turn at most.
        groups: RelyToolBench groups.
        data_dir: RelyToolBench folder (default ``../shared/data/relytoolbench``).
        cache_path: Episode cache (JSONL); reruns reuse finished episodes.
        fingerprint: Identifies the weights in cache keys (e.g. the stage's finish time).
        progress: Progress bars.
        gguf: A GGUF file of the same model (``backend`` is then ``llama.cpp``).

    Raises:
        RuntimeError: Episodes failed (the model raised).
        FileNotFoundError: A data file is missing.
        LocalModelError: With ``gguf``: llama-server is missing or the file does not load.
    """
    from toolguard_evals.relign.models import load_model, load_tokenizer

    started = time.perf_counter()
    tokenizer = load_tokenizer(tokenizer_path)
    if gguf is None:
        chat = HFChatModel(model=load_model(model_path), tokenizer=tokenizer,
                           max_new_tokens=max_new_tokens, name_=name)
        return _evaluate(chat, name, "transformers", started, per_file=per_file, bfcl=bfcl,
                         accuracy=accuracy, max_steps=max_steps,
                         max_new_tokens=max_new_tokens, groups=groups, data_dir=data_dir,
                         cache_path=cache_path, fingerprint=fingerprint, progress=progress)
    from toolguard_evals.local_model import LocalModelServer

    with LocalModelServer(gguf, n_ctx=SERVED_CONTEXT, max_tokens_cap=max_new_tokens,
                          startup_timeout=600) as server:
        served = ServedChatModel(model=None, tokenizer=tokenizer, base_url=server.base_url,
                                 served_model=server.model_alias,
                                 max_new_tokens=max_new_tokens, name_=name)
        return _evaluate(served, name, "llama.cpp", started, per_file=per_file, bfcl=bfcl,
                         accuracy=accuracy, max_steps=max_steps,
                         max_new_tokens=max_new_tokens, groups=groups, data_dir=data_dir,
                         cache_path=cache_path, fingerprint=fingerprint, progress=progress)


def _evaluate(chat: HFChatModel, name: str, backend: str, started: float, *, per_file: int,
              bfcl: int, accuracy: int | None, max_steps: int, max_new_tokens: int,
              groups: Sequence[Group], data_dir: str | Path | None,
              cache_path: str | Path | None, fingerprint: str, progress: bool) -> dict[str, Any]:
    settings = {"model": name, "fingerprint": fingerprint, "max_new_tokens": max_new_tokens,
                "backend": backend}
    rtb = asyncio.run(eval_relytoolbench(chat, per_file=per_file, groups=groups,
                                         max_steps=max_steps, data_dir=data_dir,
                                         cache=GenerationCache(cache_path), settings=settings,
                                         progress=progress))
    irr = eval_bfcl(chat, per_category=bfcl, per_accuracy_category=accuracy)
    return {
        "unguarded": {**rtb["unguarded"], **irr["unguarded"]},
        "guarded": {**rtb["guarded"], **irr["guarded"]},
        "generated_turns": chat.generated, "memo_hits": chat.memo_hits, "backend": backend,
        "seconds": round(time.perf_counter() - started, 1),
    }
