"""Relign's SFT data: single-step tool-use samples split 4 : 3 : 3 into three targets.

The paper's §3.2 (Xu et al., ICML 2025, arXiv 2412.04141): from samples with a gold call,
**unchanged** (target: the gold call), **tools replaced** (the functions swapped for
another sample's; target ``Finish(give_up_and_change_tools)``) and **parameters removed**
(the required values deleted from the request, as RelyToolBench's Missing Parameter subset
does; target ``Finish(give_up_and_talk_to_user)`` with a question).  Sources
(:class:`SourceSample`): BFCL v4 :data:`~toolguard_evals.relign.config.TRAIN_SOURCES` and
ToolBench-format files (:func:`read_toolbench`); samples whose query occurs in an evaluated
set are dropped (:func:`check_no_overlap`).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolguard.specs import gorilla_to_json_schema
from toolguard_evals.relign.chat_format import (
    CHANGE_TOOLS_ANSWER,
    KINDS,
    Kind,
    call_message,
    finish_message,
    prompt_messages,
    talk_to_user_answer,
    tools_with_finish,
)
from toolguard_evals.relign.config import EVAL_BFCL, EVAL_BFCL_ACCURACY, TRAIN_SOURCES

LengthFn = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]], int]
"""``(messages, tools) -> tokens`` of a rendered sample."""
TOOL_RESPONSE_NOTE = "done"
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True, slots=True)
class SourceSample:
    """One single-step sample with a gold call.

    Attributes:
        id: ``{source}:{record id}``.
        source: BFCL category or ToolBench file stem.
        query: The user request.
        functions: Function dicts (``name``, ``description``, JSON-Schema ``parameters``).
        call: ``(name, arguments)`` of the gold call; ``name`` is one of ``functions``.
    """

    id: str
    source: str
    query: str
    functions: tuple[dict[str, Any], ...]
    call: tuple[str, dict[str, Any]]

    def function(self, name: str) -> dict[str, Any] | None:
        """The function named ``name``, or ``None``."""
        return next((f for f in self.functions if f.get("name") == name), None)


@dataclass(frozen=True, slots=True)
class SynthRecord:
    """One synthesized training sample (a JSONL line, see :meth:`to_json`).

    Attributes:
        id: ``{source id}#{kind}``.
        kind: ``original`` / ``change_tools`` / ``talk_to_user``.
        source: Where the sample came from.
        query: The request as the model sees it (values removed for ``talk_to_user``).
        messages: System, user, assistant target (and, for ``original`` samples with a
            continuation, the tool answer and ``Finish(give_answer)``).
        tools: OpenAI tools, ``Finish`` last.
        gold: The gold call ``{"name", "arguments"}`` of ``original`` samples, else ``None``.
        missing: ``talk_to_user``: the parameters whose values were removed.
        split: ``sft`` or ``dpo`` (prompts sampled for preference pairs).
    """

    id: str
    kind: Kind
    source: str
    query: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    gold: dict[str, Any] | None = None
    missing: list[str] = field(default_factory=list)
    split: str = "sft"

    @property
    def functions(self) -> list[dict[str, Any]]:
        """The sample's function dicts, ``Finish`` excluded."""
        return [t["function"] for t in self.tools if t["function"]["name"] != "Finish"]

    @property
    def prompt(self) -> list[dict[str, Any]]:
        """System and user turns (what the model answers in the first step)."""
        return self.messages[:2]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SynthRecord:
        return cls(**dict(data))


# ---------------------------------------------------------------------------- sources
def bfcl_samples(categories: Sequence[str] = TRAIN_SOURCES) -> list[SourceSample]:
    """Single-call samples of BFCL v4 categories (see the module docstring).

    Records whose gold has more than one call, or whose question has more than one user
    turn, are skipped.  The gold call keeps an optional parameter (one the schema does not
    require and BFCL lets be left out, ``""`` among its acceptable values) only when the
    request states its value (:func:`unstated_optional`): BFCL lists a default such as
    ``day: ["", "Monday"]`` for "the open hours of the Louvre", and a target that sends it
    teaches the model to fill in values nobody gave (a content hallucination, in the terms
    of Relign / RelyToolBench).

    Raises:
        ValueError: A category is not in :data:`~toolguard_evals.relign.config.TRAIN_SOURCES`.
        toolguard_evals.bfcl.BFCLNotInstalledError: bfcl-eval is not installed.
    """
    from toolguard_evals.bfcl import gold_calls, load_category

    bad = [c for c in categories if c not in TRAIN_SOURCES]
    if bad:
        raise ValueError(f"{bad} may not be trained on; allowed: {TRAIN_SOURCES}")
    out: list[SourceSample] = []
    for cat in categories:
        for record in load_category(cat):  # type: ignore[arg-type]
            calls = gold_calls(record)
            turns = record["question"]
            users = [m for m in turns[0] if m.get("role") == "user"] if len(turns) == 1 else []
            if len(calls) != 1 or len(users) != 1:
                continue
            name, args = calls[0]
            functions = tuple(bfcl_function(d) for d in record["function"])
            query = str(users[0]["content"])
            for param in unstated_optional(record, query):
                args.pop(param, None)
            out.append(SourceSample(id=f"{cat}:{record['id']}", source=cat,
                                    query=query, functions=functions,
                                    call=(bfcl_name(name), args)))
    return out


def unstated_optional(record: Mapping[str, Any], query: str) -> list[str]:
    """Optional parameters of a one-call BFCL record's gold whose value ``query`` never states.

    A parameter counts when its function's schema does not require it, BFCL accepts leaving
    it out (``""`` or ``None`` among its acceptable values), and none of its other acceptable
    values occurs in ``query`` (case-insensitive, whole words; numbers and strings only, so a
    list, dict or boolean value is never stated).

    Returns:
        Parameter names in gold order; ``[]`` for a record without exactly one gold call.
    """
    gold = record.get("ground_truth") or []
    if len(gold) != 1 or not isinstance(gold[0], Mapping) or len(gold[0]) != 1:
        return []
    ((name, params),) = gold[0].items()
    doc: Mapping[str, Any] = next(
        (d for d in record.get("function") or [] if d.get("name") == name), {})
    required = set((doc.get("parameters") or {}).get("required") or [])
    text = query.lower()
    out: list[str] = []
    for param, values in (params or {}).items():
        if param in required or not isinstance(values, list):
            continue
        if not any(v is None or v == "" for v in values):
            continue
        given = [v for v in values if v is not None and v != ""]
        if not any(_stated(v, text) for v in given):
            out.append(str(param))
    return out


def _stated(value: Any, text: str) -> bool:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return False
    word = str(value).lower().strip()
    return bool(word) and re.search(rf"(?<![\w.]){re.escape(word)}(?![\w])", text) is not None


def bfcl_name(name: str) -> str:
    """A BFCL function name as a tool name (``math.factorial`` -> ``math_factorial``)."""
    return name.replace(".", "_")


def bfcl_function(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A BFCL function doc as a function dict with JSON-Schema parameters."""
    params = doc.get("parameters") or {"type": "dict", "properties": {}}
    return {"name": bfcl_name(str(doc["name"])), "description": str(doc.get("description", "")),
            "parameters": gorilla_to_json_schema(params)}


_APIS = "Specifically, you have access to the following APIs: "


def read_toolbench(path: str | Path) -> list[SourceSample]:
    """Single-step samples from a ToolBench-format file (JSON list or JSON lines).

    Records are ToolLLaMA conversations (functions from the system turn's "Specifically,
    you have access to the following APIs:" list, the query from the user turn, the gold
    call from the first assistant ``Action`` / ``Action Input``; a first action of
    ``Finish`` is skipped) or ``{"query", "functions", "call": {"name", "arguments"}}``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: A record is of neither form (the message names it).
    """
    from toolguard_evals.relytoolbench.agent import parse_arguments, parse_react

    source = Path(path)
    text = source.read_text(encoding="utf-8")
    stripped = text.lstrip()
    records: list[Any] = (json.loads(text) if stripped.startswith("[") else
                          [json.loads(line) for line in text.splitlines() if line.strip()])
    out: list[SourceSample] = []
    for i, rec in enumerate(records):
        rid = f"{source.stem}:{rec.get('id', i)}"
        if "conversations" in rec:
            turns = rec["conversations"]
            system = next((t["value"] for t in turns if t.get("from") == "system"), "")
            user = next((t["value"] for t in turns if t.get("from") == "user"), "")
            first = next((t["value"] for t in turns if t.get("from") == "assistant"), "")
            if _APIS not in system or not user or not first:
                raise ValueError(f"{rid}: a ToolBench conversation needs system (with the API "
                                 "list), user and assistant turns")
            functions = json.loads(system[system.index(_APIS) + len(_APIS):].strip())
            action = parse_react(first)
            if action is None or action.action == "Finish":
                continue
            args = parse_arguments(action.action_input)
            if args is None:
                continue
            query = user.replace("Begin!", "").strip()
            out.append(SourceSample(id=rid, source=source.stem, query=query,
                                    functions=tuple(f for f in functions
                                                    if f.get("name") != "Finish"),
                                    call=(action.action, args)))
        elif {"query", "functions", "call"} <= set(rec):
            call = rec["call"]
            out.append(SourceSample(id=rid, source=source.stem, query=str(rec["query"]),
                                    functions=tuple(rec["functions"]),
                                    call=(str(call["name"]), dict(call.get("arguments") or {}))))
        else:
            raise ValueError(f"{rid}: neither a ToolBench conversation nor "
                             "{query, functions, call}")
    return out


# ---------------------------------------------------------------------------- eval sets
def normalize(text: str) -> str:
    """Lower-cased words joined by single spaces (overlap checks ignore punctuation)."""
    return " ".join(_WORD.findall(text.lower()))


def eval_queries(rtb_dir: str | Path | None = None, *,
                 bfcl: Sequence[str] = (*EVAL_BFCL, *EVAL_BFCL_ACCURACY)) -> set[str]:
    """Normalized queries of every evaluated set.

    RelyToolBench (all 958, with ``orig_query``) and the BFCL categories in ``bfcl``.

    Raises:
        FileNotFoundError: The RelyToolBench folder is missing.
    """
    from toolguard_evals.bfcl import load_category
    from toolguard_evals.relytoolbench.data import load_relytoolbench

    texts = set()
    for case in load_relytoolbench(rtb_dir):
        texts.add(normalize(case.query))
        if case.orig_query:
            texts.add(normalize(case.orig_query))
    for cat in bfcl:
        for record in load_category(cat):  # type: ignore[arg-type]
            for turn in record["question"]:
                for m in turn:
                    if m.get("role") == "user":
                        texts.add(normalize(str(m["content"])))
    texts.discard("")
    return texts


def check_no_overlap(records: Iterable[SynthRecord], evaluated: set[str]) -> None:
    """Raise when a training record's query (or its source query) is an evaluated query.

    Raises:
        ValueError: Names up to five overlapping record ids.
    """
    bad = [r.id for r in records if normalize(r.query) in evaluated
           or normalize(str(r.messages[1]["content"]).replace("Begin!", "")) in evaluated]
    if bad:
        raise ValueError(f"{len(bad)} training records overlap an evaluated set: {bad[:5]}")


# ---------------------------------------------------------------------------- synthesis
def remove_values(query: str, values: Mapping[str, Any]) -> tuple[str, list[str]]:
    """Delete the values of ``values`` from ``query``.

    Strings (>= 2 characters) and numbers are deleted where they occur as whole words
    (case-insensitive), with surrounding quotes; spaces are then collapsed and a space
    before punctuation dropped.  Returns the new query and the names whose value was found.
    """
    removed: list[str] = []
    out = query
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            continue
        text = str(value).strip()
        if len(text) < 2 and not isinstance(value, int | float):
            continue
        pattern = re.compile(rf"""(?<![\w])['"]?{re.escape(text)}['"]?(?![\w])""", re.I)
        new = pattern.sub("", out)
        if new != out:
            out = new
            removed.append(name)
    out = re.sub(r"\s{2,}", " ", out)
    out = re.sub(r"\s+([?.!,;:])", r"\1", out).strip()
    return out, removed


def _required(sample: SourceSample) -> list[str]:
    fn = sample.function(sample.call[0]) or {}
    return [str(r) for r in (fn.get("parameters") or {}).get("required") or []]


def _name_words(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower())
            if len(w) > 2}


def _unrelated(sample: SourceSample, other: SourceSample) -> bool:
    mine = _name_words(sample.call[0]) | set(_WORD.findall(sample.query.lower()))
    theirs = set().union(*(_name_words(str(f["name"])) for f in other.functions))
    return not (mine & theirs) and {f["name"] for f in other.functions}.isdisjoint(
        {f["name"] for f in sample.functions})


def build_record(sample: SourceSample, kind: Kind, *, split: str,
                 replacement: SourceSample | None = None,
                 with_answer: bool = False) -> SynthRecord | None:
    """One :class:`SynthRecord` of ``kind`` from ``sample``; ``None`` when it does not apply.

    Args:
        sample: The source sample.
        kind: The target to build.
        split: ``sft`` or ``dpo``.
        replacement: ``change_tools``: the sample whose functions replace ``sample``'s.
        with_answer: ``original``: continue with a tool answer and ``Finish(give_answer)``
            (teaches the model to end an episode after its call).

    Raises:
        ValueError: ``change_tools`` without ``replacement``.
    """
    name, args = sample.call
    functions: Sequence[Mapping[str, Any]] = sample.functions
    query = sample.query
    missing: list[str] = []
    gold: dict[str, Any] | None = None
    if kind == "original":
        gold = {"name": name, "arguments": args}
        target = [call_message(name, args)]
        if with_answer:
            result = json.dumps({"error": "", "response": TOOL_RESPONSE_NOTE})
            target += [{"role": "tool", "content": result},
                       call_message("Finish", {
                           "return_type": "give_answer",
                           "final_answer": f"I called {name} for your request; "
                                           f"the result is: {TOOL_RESPONSE_NOTE}."})]
    elif kind == "change_tools":
        if replacement is None:
            raise ValueError("change_tools needs a replacement sample")
        functions = replacement.functions
        target = [finish_message("change_tools", CHANGE_TOOLS_ANSWER)]
    else:
        required = {k: v for k, v in args.items() if k in _required(sample)}
        query, missing = remove_values(sample.query, required)
        if not missing or not query:
            return None
        target = [finish_message("talk_to_user", talk_to_user_answer(missing))]
    return SynthRecord(id=f"{sample.id}#{kind}", kind=kind, source=sample.source, query=query,
                       messages=[*prompt_messages(query, functions), *target],
                       tools=tools_with_finish(functions), gold=gold, missing=missing,
                       split=split)


@dataclass(slots=True)
class SynthReport:
    """What :func:`synthesize` did (counts per kind and split, drops and why)."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)
    dropped_overlap: int = 0
    dropped_length: int = 0
    eval_sets_checked: list[str] = field(default_factory=list)


def synthesize(
    samples: Sequence[SourceSample],
    *,
    sft_examples: int,
    dpo_prompts: int,
    ratios: tuple[float, float, float] = (0.4, 0.3, 0.3),
    seed: int = 0,
    evaluated: set[str] | None = None,
    length: LengthFn | None = None,
    max_length: int | None = None,
    answer_share: float = 0.25,
    dpo_twins: bool = False,
) -> tuple[list[SynthRecord], SynthReport]:
    """Split ``samples`` into SFT records (``sft_examples``, by ``ratios``) and DPO prompts.

    Args:
        samples: Source samples (:func:`bfcl_samples`, :func:`read_toolbench`).
        sft_examples: SFT records wanted, >= 3.
        dpo_prompts: DPO prompt records wanted (same ratios, disjoint source samples), >= 0.
        ratios: ``(original, change_tools, talk_to_user)`` shares (paper: 4 : 3 : 3).
        seed: Shuffle seed.
        evaluated: Normalized evaluated queries (:func:`eval_queries`): overlapping samples
            are dropped.
        length: Tokens of a rendered record; with ``max_length``, longer records are dropped.
        max_length: See ``length``.
        answer_share: Share of ``original`` SFT records that continue to ``Finish``.
        dpo_twins: Draw the DPO prompts as twins: each ``talk_to_user`` DPO record comes
            with the ``original`` record of the same source sample (counted in the
            ``original`` quota while it lasts), so the pairs contrast calling when the
            values are given with asking when they were removed, on the same request.

    Returns:
        ``(records, report)``: SFT records first, then DPO records.  Fewer records than
        asked come back when the sources run out (the report's counts say how many).

    Raises:
        ValueError: ``sft_examples`` < 3, ``dpo_prompts`` < 0, bad ratios or
            ``answer_share``, or no samples.
    """
    if sft_examples < 3 or dpo_prompts < 0:
        raise ValueError("sft_examples must be >= 3 and dpo_prompts >= 0")
    if any(r < 0 for r in ratios) or abs(sum(ratios) - 1) > 1e-6:
        raise ValueError(f"ratios must be >= 0 and sum to 1, got {ratios}")
    if not 0 <= answer_share <= 1:
        raise ValueError("answer_share must be in [0, 1]")
    if not samples:
        raise ValueError("no source samples")
    report = SynthReport()
    rng = random.Random(seed)
    pool = list(samples)
    if evaluated is not None:
        kept = [s for s in pool if normalize(s.query) not in evaluated]
        report.dropped_overlap = len(pool) - len(kept)
        pool = kept
    rng.shuffle(pool)
    records: list[SynthRecord] = []
    used: set[str] = set()
    for split, total in (("sft", sft_examples), ("dpo", dpo_prompts)):
        quota = _quota(total, ratios)
        report.counts[split] = dict.fromkeys(KINDS, 0)
        twins = 0  # ``original`` DPO records drawn as twins of ``talk_to_user`` ones
        for kind in ("talk_to_user", "change_tools", "original"):  # scarcest first
            made = twins if kind == "original" else 0
            for sample in pool:
                if made >= quota[kind]:
                    break
                if sample.id in used:
                    continue
                replacement = None
                if kind == "change_tools":
                    replacement = next((o for o in _shuffled(pool, rng)
                                        if o.id != sample.id and _unrelated(sample, o)), None)
                    if replacement is None:
                        continue
                answer = split == "sft" and kind == "original" and rng.random() < answer_share
                record = build_record(sample, kind, split=split, replacement=replacement,
                                      with_answer=answer)
                if record is None:
                    continue
                if length is not None and max_length is not None and \
                        length(record.messages, record.tools) > max_length:
                    report.dropped_length += 1
                    continue
                used.add(sample.id)
                records.append(record)
                made += 1
                if split == "dpo" and dpo_twins and kind == "talk_to_user":
                    twin = build_record(sample, "original", split=split)
                    if twin is not None and twins < quota["original"] and not (
                            length is not None and max_length is not None
                            and length(twin.messages, twin.tools) > max_length):
                        records.append(twin)
                        twins += 1
            report.counts[split][kind] = made
    report.sources = dict(Counter(r.source for r in records))
    if evaluated is not None:
        check_no_overlap(records, evaluated)
    return records, report


def _quota(total: int, ratios: tuple[float, float, float]) -> dict[Kind, int]:
    counts = [int(total * r) for r in ratios]
    for i in sorted(range(3), key=lambda i: total * ratios[i] - counts[i], reverse=True):
        if sum(counts) >= total:
            break
        counts[i] += 1
    return dict(zip(KINDS, counts, strict=True))


def _shuffled(pool: Sequence[SourceSample], rng: random.Random) -> list[SourceSample]:
    start = rng.randrange(len(pool))
    return [*pool[start:], *pool[:start]]


def write_jsonl(records: Iterable[SynthRecord], path: str | Path) -> Path:
    """Write ``records`` as JSON lines (folders created)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r.to_json(), ensure_ascii=False) + "\n")
    return out


def read_jsonl(path: str | Path) -> list[SynthRecord]:
    """Records written by :func:`write_jsonl`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    with Path(path).open(encoding="utf-8") as fh:
        return [SynthRecord.from_json(json.loads(line)) for line in fh if line.strip()]
