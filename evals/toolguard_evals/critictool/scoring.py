"""CRITICTOOL's scores, rule for rule as its evaluators compute them (``docs/DATA.md`` §5).

Works offline on saved predictions: an internal record's prediction is the model's reply
(a string, CriticTool's ``llm`` mode); an external record's is the list of replies of the
retry protocol (``environment`` mode).  Every reply is parsed with
:func:`~toolguard_evals.critictool.data.format_load` ``(reply, "{", "}")``.

Internal (``evaluators/internal_evaluator.py``, ``LLMEvaluator._post_process``), per sample:

- ``parse_rate`` = 1 if the reply has a ``name`` and its ``args`` is a dict or non-empty
  (CoT: and a ``thought``).
- error-free sample (``error_type == ""``): ``critic`` = 1 if the reply has no ``error``
  and parses.
- error sample: ``critic`` = 1 if the reply has a non-empty ``error``; ``reflect`` = 1 if
  that error is one of the four categories and equals ``error_type``; ``name`` = 1 if the
  tool equals the gold tool, and then ``args`` = :func:`arg_eval`; CoT: ``goal`` = similarity
  of the thoughts.
- means: ``critic`` and ``parse_rate`` over all samples; ``reflect``, ``name``, ``args``,
  ``goal`` over the error samples.

External (``evaluators/external_evaluator.py``, ``EnvironmentEvaluator._post_process``), per
sample, over its replies: ``parse_rate`` = 1 if every reply parses; ``retry`` = 1 if any reply
equals the failed call ``gold[0]`` (name and args); a reply that differs sets ``break`` = 1
(if all parsed) and is scored against ``gold[1]``: skip mode ``name`` = tool equals
``gold[1]``'s, then ``args`` = :func:`arg_eval` (``FinishAction``: similarity of the args);
finish mode ``name`` = the reply is ``FinishAction``.  CoT adds ``thought``.  All means are
over all samples.

Overall (not in CriticTool's code; the paper's weights): reflect 0.2, correct 0.3,
retry 0.05, skip/finish 0.45.  Our split of each dimension into its sub-scores (equal weights,
:func:`overall_score`): reflect = mean(detect=``critic``, category=``reflect``);
correct = mean(tool=``name``, args); retry = mean over the skip and finish runs of ``retry``;
skip/finish = mean of the skip score mean(break, tool, args) and the finish score
mean(break, tool).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from toolguard_evals.critictool.data import ERROR_TYPES, FINISH, CriticToolRecord, Mode, format_load
from toolguard_evals.critictool.similarity import Similarity

_TYPE_MAP: Final[dict[str, Any]] = {
    "NUMBER": int, "integer": int,
    "FLOAT": float, "float": float,
    "BOOLEAN": bool, "boolean": bool,
    "STRING": str, "string": str,
    "array": list,
    "dict": dict,
    "any": "any",
}
"""CriticTool's ``TYPE_MAP`` (``_arg_eval``); other type names map to ``str``."""

WEIGHTS: Final[dict[str, float]] = {"reflect": 0.2, "correct": 0.3, "retry": 0.05,
                                    "skip_finish": 0.45}
"""The paper's overall weights per dimension."""


def _has_chinese(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def arg_eval(function_list: Sequence[Mapping[str, Any]], pred: Mapping[str, Any],
             gold: Mapping[str, Any], similarity: Similarity) -> float:
    """CriticTool's ``_arg_eval``: the argument score of a step whose tool is right, in [0, 1].

    - The predicted tool is not in ``function_list``, or ``pred["args"]`` is not a dict: 0.
    - Gold has no args: 1, or 0 if the prediction has a key the tool does not declare.
    - Otherwise the mean over the gold args of: present with the declared type (or type
      ``any``): 1 if ``str(pred) == str(gold)``, else ``similarity`` (cosine clipped at 0);
      present with another type, both strings: ``similarity`` unless either has Chinese
      characters (then 0); other type mismatch: 0; missing: 0.5 unless the arg is required
      (then 0).  Extra predicted args are not penalised.

    A gold arg the tool does not declare is typed ``str`` (CriticTool raises ``KeyError``).
    """
    func = next((f for f in function_list if f.get("name") == pred.get("name")), None)
    if not func:
        return 0.0
    types: dict[str, Any] = {}
    required: list[str] = []
    optional: list[str] = []
    for group in ("required_parameters", "optional_parameters"):
        for arg in func.get(group) or []:
            (required if group == "required_parameters" else optional).append(arg["name"])
            types[arg["name"]] = _TYPE_MAP.get(arg.get("type"), str)
    pred_args = pred.get("args")
    if not isinstance(pred_args, dict):
        return 0.0
    gold_args = gold.get("args") or {}
    if len(gold_args) == 0:
        return 0.0 if any(a not in required and a not in optional for a in pred_args) else 1.0
    score = 0.0
    for arg, gv in gold_args.items():
        if arg in pred_args:
            pv = pred_args[arg]
            kind = types.get(arg, str)
            if kind == "any" or isinstance(pv, kind):
                score += 1.0 if str(pv) == str(gv) else similarity(pv, gv)
            elif (type(pv) is type(gv) and isinstance(gv, str)
                  and not _has_chinese(str(gv)) and not _has_chinese(str(pv))):
                score += similarity(pv, gv)
        elif arg not in required:
            score += 0.5
    return score / len(gold_args)


# ---------------------------------------------------------------------------- results
@dataclass
class Scores:
    """Scores of one run (a split, and for external errors one mode).

    Attributes:
        kind: ``internal``, ``skip`` or ``finish``.
        per_sample: Record id -> its metric values.
        metrics: Metric -> mean in [0, 1] (``None`` where the denominator is 0: internal
            metrics over error samples when there are none).
        n: Samples scored.
        n_error: Internal: samples with an injected error (the denominator of ``reflect``,
            ``name``, ``args``, ``goal``).
        missing: Record ids without predictions (not scored).

    """

    kind: str
    per_sample: dict[str, dict[str, float]] = field(default_factory=dict)
    metrics: dict[str, float | None] = field(default_factory=dict)
    n: int = 0
    n_error: int = 0
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """JSON-able summary with per-sample values."""
        return {"kind": self.kind, "n": self.n, "n_error": self.n_error,
                "missing": list(self.missing), "metrics": dict(self.metrics),
                "per_sample": {k: dict(v) for k, v in self.per_sample.items()}}


def score_internal(records: Sequence[CriticToolRecord], predictions: Mapping[str, str],
                   similarity: Similarity) -> Scores:
    """Score internal-error records as ``LLMEvaluator`` does (see the module docstring).

    Args:
        records: Internal records (``error_type`` set).
        predictions: Record id -> the model's reply.
        similarity: The argument/thought similarity.

    Raises:
        ValueError: If a record is not internal.

    """
    out = Scores(kind="internal")
    cot = any(r.cot for r in records)
    keys = ["critic", "reflect", "name", "args", *(["goal"] if cot else []), "parse_rate"]
    for rec in records:
        if rec.split != "internal":
            raise ValueError(f"{rec.id}: not an internal record")
        if rec.id not in predictions:
            out.missing.append(rec.id)
            continue
        pred = format_load(predictions[rec.id], "{", "}")
        gt = rec.ground_truth
        m = dict.fromkeys(keys, 0.0)
        parsed = bool(pred["name"]) and (isinstance(pred["args"], dict) or bool(pred["args"]))
        if cot:
            parsed = parsed and bool(pred["thought"])
        m["parse_rate"] = float(parsed)
        if not rec.error_type:
            m["critic"] = float(not pred["error"] and parsed)
        else:
            out.n_error += 1
            if pred["error"]:
                m["critic"] = 1.0
                if pred["error"] in ERROR_TYPES and pred["error"] == rec.error_type:
                    m["reflect"] = 1.0
            if cot and pred["thought"]:
                m["goal"] = similarity(pred["thought"], gt.get("thought", ""))
            if pred["name"] and pred["name"] == gt["name"]:
                m["name"] = 1.0
                m["args"] = arg_eval(rec.function_list, pred, gt, similarity)
        out.per_sample[rec.id] = m
        out.n += 1
    for key in keys:
        total = sum(s[key] for s in out.per_sample.values())
        denom = out.n if key in ("critic", "parse_rate") else out.n_error
        out.metrics[key] = total / denom if denom else None
    return out


def finish_thought(failed_tool: str) -> str:
    """The fixed reference thought of finish mode (CriticTool's text, missing space included)."""
    return (f"I encountered an issue while trying to call{failed_tool}, please let me know how "
            "you would like to proceed.")


def score_external(records: Sequence[CriticToolRecord], predictions: Mapping[str, Sequence[str]],
                   mode: Mode, similarity: Similarity) -> Scores:
    """Score external-error records in ``skip`` or ``finish`` mode as ``EnvironmentEvaluator``.

    Args:
        records: External records (``ground_truth == [failed call, next step]``).
        predictions: Record id -> the replies of the retry protocol, in order.
        mode: ``skip`` or ``finish``.
        similarity: The argument/thought similarity.

    Raises:
        ValueError: For another mode or a record that is not external.

    """
    if mode not in ("skip", "finish"):
        raise ValueError(f"external mode must be 'skip' or 'finish', got {mode!r}")
    out = Scores(kind=mode)
    cot = any(r.cot for r in records)
    keys = ["retry", "break", *(["thought"] if cot else []), "name",
            *(["args"] if mode == "skip" else []), "parse_rate"]
    for rec in records:
        if rec.split != "external":
            raise ValueError(f"{rec.id}: not an external record")
        if rec.id not in predictions:
            out.missing.append(rec.id)
            continue
        gt0, gt1 = rec.ground_truth
        replies = [format_load(p, "{", "}") for p in predictions[rec.id]]
        m = dict.fromkeys(keys, 0.0)
        m["parse_rate"] = 1.0
        for item in replies:
            if (cot and not item["thought"]) or not item["name"] or (
                    not isinstance(item["args"], dict) and not item["args"]):
                m["parse_rate"] = 0.0
        for resp in replies:
            if resp["name"] == gt0["name"] and resp["args"] == gt0["args"]:
                m["retry"] = 1.0
                continue
            if m["parse_rate"] == 1.0:
                m["break"] = 1.0
            if mode == "skip":
                if cot:
                    m["thought"] = similarity(resp["thought"], gt1.get("thought", ""))
                if resp["name"] == gt1["name"]:
                    m["name"] = 1.0
                    if resp["name"] != FINISH:
                        m["args"] = arg_eval(rec.function_list, resp, gt1, similarity)
                    else:
                        m["args"] = similarity(resp["args"], gt1["args"])
            else:
                reference = finish_thought(gt0["name"])
                if cot:
                    m["thought"] = similarity(str(resp["thought"]), reference)
                if resp["name"] == FINISH:
                    m["name"] = 1.0
                    if cot:
                        m["thought"] = max(m["thought"], similarity(str(resp["args"]), reference))
        out.per_sample[rec.id] = m
        out.n += 1
    for key in keys:
        total = sum(s[key] for s in out.per_sample.values())
        out.metrics[key] = total / out.n if out.n else None
    return out


def _mean(values: Sequence[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None) / len(values)


def overall_score(internal: Scores | None, skip: Scores | None,
                  finish: Scores | None) -> dict[str, float | None]:
    """The paper's dimensions and weighted overall, in [0, 1] (see the module docstring).

    Returns:
        ``{"reflect", "correct", "retry", "skip_finish", "overall"}``; a dimension whose
        scores are missing is ``None``, and so is ``overall`` then.

    """
    im = internal.metrics if internal else {}
    dims: dict[str, float | None] = {
        "reflect": _mean([im.get("critic"), im.get("reflect")]) if internal else None,
        "correct": _mean([im.get("name"), im.get("args")]) if internal else None,
    }
    skip_score = _mean([skip.metrics.get(k) for k in ("break", "name", "args")]) if skip else None
    finish_score = _mean([finish.metrics.get(k) for k in ("break", "name")]) if finish else None
    dims["retry"] = (_mean([skip.metrics.get("retry"), finish.metrics.get("retry")])
                     if skip and finish else None)
    dims["skip_finish"] = _mean([skip_score, finish_score]) if skip and finish else None
    values = [dims[k] for k in WEIGHTS]
    dims["overall"] = (None if any(v is None for v in values)
                       else sum(WEIGHTS[k] * (dims[k] or 0.0) for k in WEIGHTS))
    return dims
