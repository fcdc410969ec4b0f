"""The hallucination evaluator: rule checks plus the paper's LLM judges, per episode.

Follows the authors' ``rtl.py`` (X-LANCE/ToolHallucination commit c6fed60,
``check_tool_hallucination`` / ``check_hallucination_reason`` / ``check_is_solved``).
Each executed call gets the first reason that applies, in this order:

1. ``tool_name_hallucination`` (type): the tool is not in the case's list.
2. ``tool_relevance_hallucination`` (type): judge ``check_tool_relevance`` says
   Irrelevant.  As in ``eval_pass_rate.py`` the judge is asked only on Unmatched Tools
   (Original and Missing Parameter tools are relevant by construction); once per tool.
3. ``tool_duplicated_hallucination`` (timing): an earlier call had the same name, the same
   arguments text and the same response.
4. ``parameter_json_format_hallucination`` (format): the arguments are not a JSON object.
5. ``parameter_required_missing`` (format): a required parameter is missing.
6. ``parameter_name_hallucination`` (format): a parameter the API does not have.
7. ``parameter_value_type_error`` (format): a value's Python type does not match
   (``integer`` -> int, ``string`` -> str, ``boolean`` -> bool, as ``check_type``).
8. ``parameter_value_hallucination`` (content): for non-empty arguments, judge
   ``check_content_hallucination`` says Untruthful; the interaction history it sees is
   the query plus the responses of earlier calls that were clean or flagged 2 or 8.
9. else ``no_hallucination``.

A ``give_answer`` answer is judged with StableToolBench's ``check_answer_status`` and, when
that says Unsure, ``parse_answer_status`` over the whole trajectory; then the task
hallucination rule of ``check_is_solved`` (see :mod:`toolguard_evals.relytoolbench.metrics`) with
judge ``check_answer_relevance``.

Judgments are cached (a :class:`~toolguard_evals.runner.GenerationCache` keyed by prompt and
fields, under the judge's settings), so scoring is recomputable offline: with no judge
model, cached judgments are used and a missing one counts as ``Unsure`` and is reported
in ``judge_misses``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel

from toolguard.judge import LLMJudge
from toolguard_evals.prompts import load_prompt
from toolguard_evals.relytoolbench.agent import Episode
from toolguard_evals.relytoolbench.data import RtbCase
from toolguard_evals.relytoolbench.metrics import (
    AnswerStatus,
    EpisodeScore,
    pass_score,
    utility,
)
from toolguard_evals.relytoolbench.simulator import canonical_json, prompt_version
from toolguard_evals.runner import GenerationCache

JUDGE_PROMPTS: dict[str, tuple[str, ...]] = {
    "check_tool_relevance": ("Irrelevant", "Relevant", "Unsure"),
    "check_content_hallucination": ("Untruthful", "Truthful", "Unsure"),
    "check_answer_relevance": ("Irrelevant", "Relevant", "Unsure"),
    "rtb_check_answer_status": ("Unsolved", "Solved", "Unsure"),
    "rtb_parse_answer_status": ("Unsolved", "Solved", "Unsure"),
}
"""Prompt name -> its closed label set (most specific first for substring matching)."""
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "int": (int,), "float": (float,),
    "number": (int, float), "boolean": (bool,), "bool": (bool,), "list": (list,),
    "array": (list,), "dict": (dict,), "object": (dict,),
}


class Judges:
    """The evaluator's LLM judges with a persistent cache.

    Args:
        model: Judge chat model; ``None`` for offline rescoring (cache only).
        cache: Where judgments are saved and looked up; ``None`` keeps them in memory.
        settings: What identifies the judge model in cache keys (e.g.
            :meth:`toolguard_evals.runner.Endpoint.settings`); each prompt's version is added.

    Attributes:
        asked: Judgments asked of the model in this process.
        misses: Judgments neither cached nor askable (counted as ``Unsure``).
    """

    def __init__(self, model: BaseChatModel | None, *, cache: GenerationCache | None = None,
                 settings: Mapping[str, Any] | None = None) -> None:
        self.model = model
        self.cache = cache if cache is not None else GenerationCache(None)
        self.settings = {"kind": "rtb-judge", **dict(settings or {})}
        self._judges = ({name: LLMJudge(model, prompt=name, labels=labels,
                                          template=load_prompt(name))
                         for name, labels in JUDGE_PROMPTS.items()} if model else {})
        self._versions = {name: prompt_version(name) for name in JUDGE_PROMPTS}
        self.asked = 0
        self.misses = 0

    async def label(self, prompt: str, **fields: Any) -> tuple[str, bool]:
        """``(label, missed)``: the judge's label for ``fields`` under ``prompt``.

        Raises:
            KeyError: ``prompt`` is not one of :data:`JUDGE_PROMPTS`.
        """
        labels = JUDGE_PROMPTS[prompt]
        digest = hashlib.sha256(canonical_json(fields).encode("utf-8")).hexdigest()
        key = f"judge:{prompt}:{digest}"
        settings = {**self.settings, "prompt": self._versions[prompt]}
        hit = self.cache.get(key, settings)
        if hit is not None and hit.get("label") in labels:
            return str(hit["label"]), False
        judge = self._judges.get(prompt)
        if judge is None:
            self.misses += 1
            return "Unsure", True
        result = await judge.ajudge(**fields)
        self.asked += 1
        if not result.reason.startswith("judge model failed"):
            self.cache.put(key, settings, {"label": result.label, "raw": result.raw[:500]})
        return result.label, False


def check_type(value: Any, type_name: str) -> bool:
    """The authors' ``check_type``: Python ``isinstance`` against the schema's type name.

    An unknown type name fails.
    """
    types = _PY_TYPES.get(type_name.strip().lower())
    return types is not None and isinstance(value, types)


async def score_episode(case: RtbCase, episode: Episode, judges: Judges) -> EpisodeScore:
    """Score one episode.

    Rules in the module docstring; metric definitions in
    :mod:`toolguard_evals.relytoolbench.metrics`.

    Raises:
        ValueError: ``episode`` is not an episode of ``case``.
    """
    if episode.case_id != case.id:
        raise ValueError(f"episode {episode.case_id!r} is not of case {case.id!r}")
    misses = 0
    history = f"History: {case.query}\n"
    seen: list[tuple[str, str, str]] = []
    relevance: dict[str, str] = {}
    reasons: list[str] = []
    calls = episode.executed_calls
    for step in calls:
        reason, missed = await _call_reason(case, step.action, step.action_input, step.args,
                                            step.observation, history, seen, relevance, judges)
        misses += missed
        seen.append((step.action, step.action_input, step.observation))
        if reason in ("no_hallucination", "tool_relevance_hallucination",
                      "parameter_value_hallucination"):
            history += f"History: {_response_text(step.observation)}\n"
        reasons.append(reason)

    status: AnswerStatus | None = None
    hallucinated = False
    if episode.end == "give_answer":
        status, missed = await _answer_status(case, episode, judges)
        misses += missed
        if status in ("Solved", "Unsure"):
            clean = reasons.count("no_hallucination")
            if clean == 0:
                hallucinated = True  # every call hallucinated, or an answer with no call
            elif clean < len(reasons):
                flagged = "".join(
                    f"tool:\n{s.action}\nresponse:\n{_response_text(s.observation)}\n"
                    for s, r in zip(calls, reasons, strict=True)
                    if r in ("tool_relevance_hallucination", "parameter_value_hallucination")
                    and not _response_error(s.observation))
                if flagged:
                    label, missed = await judges.label(
                        "check_answer_relevance", query=flagged, answer=episode.final_answer)
                    misses += missed
                    hallucinated = label == "Relevant"
    p = pass_score(case.subset, episode.end, status)
    return EpisodeScore(case_id=case.id, subset=case.subset, group=case.group,
                        end=episode.end, reasons=reasons, blocked=len(episode.blocked_calls),
                        answer_status=status, task_hallucinated=hallucinated, pass_score=p,
                        utility=utility(case.subset, p, hallucinated, len(reasons)),
                        judge_misses=misses)


async def _call_reason(
    case: RtbCase, name: str, args_text: str, args: dict[str, Any] | None, response: str,
    history: str, seen: Sequence[tuple[str, str, str]], relevance: dict[str, str],
    judges: Judges,
) -> tuple[str, int]:
    spec = case.spec(name)
    if spec is None:
        return "tool_name_hallucination", 0
    misses = 0
    if case.subset == "Unmatched Tools":
        if name not in relevance:
            label, missed = await judges.label(
                "check_tool_relevance", query=case.query, tool_name=name,
                tool_description=f"{spec.description}\nParameters: "
                                 f"{json.dumps(spec.parameters, ensure_ascii=False)}")
            relevance[name] = label
            misses += missed
        if relevance[name] == "Irrelevant":
            return "tool_relevance_hallucination", misses
    if (name, args_text, response) in seen:
        return "tool_duplicated_hallucination", misses
    if args is None:
        return "parameter_json_format_hallucination", misses
    if any(r not in args for r in spec.required):
        return "parameter_required_missing", misses
    if any(k not in spec.properties for k in args):
        return "parameter_name_hallucination", misses
    for key, value in args.items():
        if not check_type(value, str(spec.properties[key].get("type", "string"))):
            return "parameter_value_type_error", misses
    if args:
        label, missed = await judges.label(
            "check_content_hallucination", query=history.strip(),
            tool_description=json.dumps(spec.parameters, ensure_ascii=False),
            tool_name=name, arguments=json.dumps(args, ensure_ascii=False))
        misses += missed
        if label == "Untruthful":
            return "parameter_value_hallucination", misses
    return "no_hallucination", misses


async def _answer_status(case: RtbCase, episode: Episode,
                         judges: Judges) -> tuple[AnswerStatus, int]:
    if not episode.final_answer.strip():
        return "Unsolved", 0  # check_is_solved: an empty final answer is Unsolved
    label, missed = await judges.label("rtb_check_answer_status", query=case.query,
                                       answer=episode.final_answer)
    misses = int(missed)
    if label == "Unsure":
        details = [{"role": "tool", "message": {"name": s.action, "arguments": s.action_input,
                                                "response": s.observation}}
                   for s in episode.executed_calls]
        label, missed = await judges.label(
            "rtb_parse_answer_status", query=case.query,
            answer=json.dumps({"final_answer": episode.final_answer,
                               "answer_details": details}, ensure_ascii=False)[:6000])
        misses += missed
    return label, misses  # type: ignore[return-value]


def _response_text(observation: str) -> str:
    """The ``response`` of a simulator answer, else the text itself."""
    try:
        value = json.loads(observation)
    except ValueError:
        return observation
    if isinstance(value, dict) and "response" in value:
        resp = value["response"]
        return resp if isinstance(resp, str) else json.dumps(resp, ensure_ascii=False)
    return observation


def _response_error(observation: str) -> bool:
    try:
        value = json.loads(observation)
    except ValueError:
        return False
    return isinstance(value, dict) and bool(value.get("error"))
