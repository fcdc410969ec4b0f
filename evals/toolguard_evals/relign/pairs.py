"""Sampling and preference pairs: K responses per prompt, sorted, at most one pair per type.

The paper's §3.2 (and the authors' ``generate_sampling_dpo_data.ipynb``): sample responses
from the SFT model, sort each into correct / indecisive / hallucinated, and keep at most
one pair per preference type per step: correct > indecisive, indecisive > hallucinated,
correct > hallucinated.  Sorting (:func:`classify`) uses toolguard's public
:class:`~toolguard.Guard` (the rule checks of the notebook: unknown tool, JSON format,
missing required parameters, types; plus grounding of values) and what the synthesis
knows about the prompt:

- a ``Finish`` with the prompt's own indecisive action (ChangeTools on a tools-replaced
  prompt, TalkToUser on a parameters-removed one): **correct**;
- the other indecisive action: **indecisive**;
- on an unchanged prompt, calls the guard allows with the gold tool first: **correct**;
- a call the guard flags (any hallucination type): **hallucinated**; so is any call on a
  tools-replaced prompt (the tools are unrelated by construction: type) or a
  parameters-removed prompt (the value was deleted: it is missing or invented), a
  ``Finish(give_answer)`` before any call (an answer with no call, the evaluator's task
  hallucination), and a ``Finish`` whose arguments are not a JSON object (format);
- a response with no parsable call at all (prose): **hallucinated** (format: no action
  the agent can execute; the native agent answers it with a format reminder);
- anything else (a clean call to another tool, ``give_up_and_restart``) is **other** and
  never paired; so is a call cut off unfinished at ``max_new_tokens`` (the sampling
  budget's doing, not the model's: labelling it a format hallucination would teach DPO to
  prefer short calls).

Two fills stand in for a missing side (both off in the paper's preset, which pairs
sampled responses only):

- ``fill_gold``: no sample is correct, so the synthesized target is the chosen response;
- ``fill_give_up``, its mirror: on an unchanged prompt where no sample gave up, a
  synthesized give-up (ChangeTools and TalkToUser in turn, the question naming the gold
  call's arguments) is the rejected side of correct > indecisive.  Without it, pairs that
  prefer a call over giving up come only from the rare servable prompts where the SFT
  model gave up, while every changed prompt teaches a give-up over a call, and DPO learns
  to give up on everything.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.messages.tool import invalid_tool_call, tool_call

from toolguard import Guard
from toolguard_evals.relign.chat_format import (
    CHANGE_TOOLS_ANSWER,
    RETURN_TYPE,
    ParsedResponse,
    finish_message,
    parse_completion,
    talk_to_user_answer,
)
from toolguard_evals.relign.chat_model import PromptCache
from toolguard_evals.relign.synth import SynthRecord

Label = Literal["correct", "indecisive", "hallucinated", "other"]
PairType = Literal["correct>indecisive", "indecisive>hallucinated", "correct>hallucinated"]
PAIR_TYPES: tuple[PairType, ...] = ("correct>indecisive", "indecisive>hallucinated",
                                    "correct>hallucinated")
INDECISIVE_TYPES = frozenset(RETURN_TYPE.values())


@dataclass(frozen=True, slots=True)
class Sorted:
    """A sampled response and its label.

    Attributes:
        text: The completion as generated (up to and including the end-of-turn token).
        label: correct / indecisive / hallucinated / other.
        reason: Why (the guard's hallucination type, or the rule that applied).
    """

    text: str
    label: Label
    reason: str


@dataclass(frozen=True, slots=True)
class Pair:
    """One DPO pair (TRL's standard preference format plus provenance).

    Attributes:
        prompt / chosen / rejected: Text; the prompt ends with the generation prompt.
        type: The preference type.
        record_id: The synthesized record the prompt came from.
        chosen_source: ``sampled``, or ``gold`` when the synthesized target stood in for a
            missing correct sample (``fill_gold``).
        rejected_source: ``sampled``, or ``synthesized`` when a synthesized give-up stood
            in for a missing indecisive sample (``fill_give_up``).
    """

    prompt: str
    chosen: str
    rejected: str
    type: PairType
    record_id: str
    chosen_source: Literal["sampled", "gold"] = "sampled"
    rejected_source: Literal["sampled", "synthesized"] = "sampled"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def classify(record: SynthRecord, text: str, *, eos: str | None = None) -> Sorted:
    """Sort one sampled response to ``record``'s prompt (rules in the module docstring).

    Args:
        record: The prompt's record.
        text: The completion.
        eos: The end-of-turn token: a completion without it that began a call (``{``, a
            code fence, ``<tool_call>``) and parses to none was cut at the token budget.
    """
    parsed = parse_completion(text)
    if eos and eos not in text and _began_a_call(text) and not _a_whole_call(parsed):
        return Sorted(text, "other", "cut at max_new_tokens inside a call")
    if parsed.tool_calls:
        return _classify_calls(record, text, parsed)
    fin = parsed.finish
    if fin is None:
        return Sorted(text, "hallucinated", "format: no parsable call")
    if fin.arguments is None:
        return Sorted(text, "hallucinated", "format: Finish arguments are not a JSON object")
    rtype = parsed.return_type()
    if rtype in INDECISIVE_TYPES:
        if record.kind != "original" and rtype == RETURN_TYPE[record.kind]:
            return Sorted(text, "correct", f"the prompt's indecisive action ({rtype})")
        return Sorted(text, "indecisive", rtype or "")
    if rtype == "give_answer":
        return Sorted(text, "hallucinated", "answer without a call")
    return Sorted(text, "other", f"Finish return_type {rtype!r}")


def _a_whole_call(parsed: ParsedResponse) -> bool:
    calls = [*parsed.tool_calls, *([parsed.finish] if parsed.finish else [])]
    return any(c.arguments is not None for c in calls)


def _began_a_call(text: str) -> bool:
    head = text.lstrip()
    return head.startswith(("{", "```")) or "<tool_call>" in head


def _classify_calls(record: SynthRecord, text: str, parsed: ParsedResponse) -> Sorted:
    valid = [tool_call(name=c.name, args=c.arguments, id=f"call_{i}")
             for i, c in enumerate(parsed.tool_calls) if c.arguments is not None]
    invalid = [invalid_tool_call(name=c.name, args=c.raw, id=f"bad_{i}",
                                 error="arguments are not a JSON object")
               for i, c in enumerate(parsed.tool_calls) if c.arguments is None]
    message = AIMessage(content=parsed.content, tool_calls=valid, invalid_tool_calls=invalid)
    verdicts = Guard(record.functions).check([HumanMessage(record.query), message])
    flagged = [v for v in verdicts if v.action != "allow" and v.hallucination is not None]
    if flagged:
        return Sorted(text, "hallucinated", f"guard: {flagged[0].hallucination}")
    if record.kind == "change_tools":
        return Sorted(text, "hallucinated", "type: the tools are unrelated by construction")
    if record.kind == "talk_to_user":
        return Sorted(text, "hallucinated",
                      f"content: {', '.join(record.missing)} removed from the request")
    if any(v.action != "allow" for v in verdicts):
        return Sorted(text, "other", "guard: " + ", ".join(v.action for v in verdicts))
    gold = (record.gold or {}).get("name")
    if parsed.tool_calls[0].name == gold:
        return Sorted(text, "correct", "guard allows the gold tool")
    return Sorted(text, "other", f"clean call to {parsed.tool_calls[0].name}, gold {gold}")


def build_pairs(record: SynthRecord, prompt: str, responses: Sequence[Sorted], *,
                gold_completion: str | None = None,
                give_up_completion: str | None = None) -> list[Pair]:
    """At most one pair per preference type from ``responses`` (first of each label).

    Args:
        record: The prompt's record.
        prompt: The prompt text.
        responses: Sorted samples, in sampling order (duplicates count once).
        gold_completion: When given and no response is ``correct``, it is the chosen
            response (``chosen_source="gold"``).
        give_up_completion: On an ``original`` record only: when given and no response is
            ``indecisive``, it is the rejected side of correct > indecisive
            (``rejected_source="synthesized"``); it never stands as a chosen response.
    """
    first: dict[str, Sorted] = {}
    for r in responses:
        first.setdefault(r.label, r)
    chosen_source: Literal["sampled", "gold"] = "sampled"
    if "correct" not in first and gold_completion is not None:
        first["correct"] = Sorted(gold_completion, "correct", "synthesized target")
        chosen_source = "gold"
    pairs: list[Pair] = []
    for ptype in PAIR_TYPES:
        good, bad = ptype.split(">")
        if good in first and bad in first and first[good].text != first[bad].text:
            pairs.append(Pair(prompt=prompt, chosen=first[good].text,
                              rejected=first[bad].text, type=ptype, record_id=record.id,
                              chosen_source=chosen_source if good == "correct"
                              else "sampled"))
    if (give_up_completion is not None and record.kind == "original"
            and "indecisive" not in first and "correct" in first
            and first["correct"].text != give_up_completion):
        pairs.insert(0, Pair(prompt=prompt, chosen=first["correct"].text,
                             rejected=give_up_completion, type="correct>indecisive",
                             record_id=record.id, chosen_source=chosen_source,
                             rejected_source="synthesized"))
    return pairs


def give_up_message(record: SynthRecord, turn: int) -> dict[str, Any]:
    """The synthesized give-up on ``record``'s prompt (``fill_give_up``).

    Args:
        record: An ``original`` record (its gold call names the arguments asked for).
        turn: Alternates the two give-ups: even ChangeTools, odd TalkToUser.

    Returns:
        The assistant turn calling ``Finish`` (Hugging Face chat dict).
    """
    if turn % 2 == 0:
        return finish_message("change_tools", CHANGE_TOOLS_ANSWER)
    asked = list(((record.gold or {}).get("arguments") or {}).keys())
    return finish_message("talk_to_user", talk_to_user_answer(asked or ["more details"]))


@dataclass(slots=True)
class SampleReport:
    """Counts of a sampling run."""

    prompts: int = 0
    samples: int = 0
    labels: dict[str, int] = field(default_factory=dict)
    labels_by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    pairs: dict[str, int] = field(default_factory=dict)
    chosen_from_gold: int = 0
    rejected_synthesized: int = 0
    seconds: float = 0.0


def sample_texts(model: Any, tokenizer: Any, prompt: str, *, k: int, temperature: float,
                 max_new_tokens: int, seed: int, prose_budget: int | None = 24,
                 prompts: PromptCache | None = None) -> list[str]:
    """``k`` sampled completions of ``prompt`` (each cut after the first end-of-turn token).

    The prompt is run through the model once (with ``prompts``: only the part after the
    prefix it shares with the previous prompt, see
    :class:`~toolguard_evals.relign.chat_model.PromptCache`); its key/value cache is
    repeated ``k`` times for the sampled continuations.  With ``prose_budget``, generation
    stops once every completion is prose that is not a call after that many tokens
    (:class:`~toolguard_evals.relign.chat_format.NoCallStop`; such a response is sorted
    the same, shorter).
    """
    import copy

    import torch
    from transformers import StoppingCriteriaList

    from toolguard_evals.relign.chat_format import NoCallStop

    torch.manual_seed(seed)
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    ids = ids.to(model.device)
    batch = ids.repeat(k, 1)
    kwargs: dict[str, Any] = dict(do_sample=True, temperature=temperature, top_p=1.0,
                                  max_new_tokens=max_new_tokens,
                                  pad_token_id=tokenizer.pad_token_id)
    if prose_budget is not None:
        kwargs["stopping_criteria"] = StoppingCriteriaList(
            [NoCallStop(tokenizer, ids.shape[1], prose_budget)])
    if prompts is None:
        prompts = PromptCache(model)
    with torch.no_grad():
        cache = copy.deepcopy(prompts.prefix(ids))
        cache.batch_repeat_interleave(k)
        out = model.generate(batch, attention_mask=torch.ones_like(batch),
                             past_key_values=cache, **kwargs)
    return [cut_turn(tokenizer.decode(row[ids.shape[1]:], skip_special_tokens=False),
                     tokenizer.eos_token) for row in out]


def cut_turn(text: str, eos: str | None) -> str:
    """``text`` up to and including the first ``eos`` (padding after it dropped)."""
    if eos and eos in text:
        return text[:text.index(eos) + len(eos)]
    return text


def sample_pairs(model: Any, tokenizer: Any, records: Sequence[SynthRecord], *, k: int,
                 temperature: float, max_new_tokens: int, seed: int, fill_gold: bool,
                 fill_give_up: bool = False, progress: bool = True,
                 ) -> tuple[list[Pair], list[dict[str, Any]], SampleReport]:
    """Sample ``k`` responses per record prompt, sort them, build the pairs.

    ``fill_gold`` / ``fill_give_up``: the stand-ins of the module docstring (the give-ups
    alternate over the ``original`` records in order).

    Returns:
        ``(pairs, samples, report)``; ``samples`` are ``{"record_id", "text", "label",
        "reason"}`` rows for inspection.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from toolguard_evals.relign.chat_format import prompt_and_completion, render

    started = time.perf_counter()
    report = SampleReport(prompts=len(records))
    pairs: list[Pair] = []
    rows: list[dict[str, Any]] = []
    labels: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {}
    originals = 0
    with Progress("sampling", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), disable=not progress) as bar:
        task = bar.add_task("sampling", total=len(records))
        prompts = PromptCache(model)
        for i, record in enumerate(records):
            prompt = render(tokenizer, record.prompt, record.tools, add_generation_prompt=True)
            texts = sample_texts(model, tokenizer, prompt, k=k, temperature=temperature,
                                 max_new_tokens=max_new_tokens, seed=seed + i,
                                 prompts=prompts)
            sorted_ = [classify(record, t, eos=tokenizer.eos_token) for t in texts]
            for s in sorted_:
                labels[s.label] += 1
                by_kind.setdefault(record.kind, Counter())[s.label] += 1
                rows.append({"record_id": record.id, "kind": record.kind, "text": s.text,
                             "label": s.label, "reason": s.reason})
            gold = (prompt_and_completion(tokenizer, record.messages[:3], record.tools)[1]
                    if fill_gold else None)
            give_up = None
            if fill_give_up and record.kind == "original":
                give_up = prompt_and_completion(
                    tokenizer, [*record.prompt, give_up_message(record, originals)],
                    record.tools)[1]
                originals += 1
            pairs += build_pairs(record, prompt, sorted_, gold_completion=gold,
                                 give_up_completion=give_up)
            bar.advance(task)
    report.samples = sum(labels.values())
    report.labels = dict(labels)
    report.labels_by_kind = {k: dict(v) for k, v in by_kind.items()}
    report.pairs = dict(Counter(p.type for p in pairs))
    report.chosen_from_gold = sum(p.chosen_source == "gold" for p in pairs)
    report.rejected_synthesized = sum(p.rejected_source == "synthesized" for p in pairs)
    report.seconds = round(time.perf_counter() - started, 1)
    return pairs, rows, report
