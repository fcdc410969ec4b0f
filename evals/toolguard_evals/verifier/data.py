"""Labelled examples for the learned verifier, with labels from gold only, and their splits.

Two kinds of example, each a conversation, one tool and a 0/1 label:

- ``tool_fit`` (what the user wants, one tool): 1 when a gold call of the request uses the
  tool; 0 when the tool was removed from (or never belonged to) the request's tool list.
- ``slot`` (the conversation, one tool, one required parameter): 1 when the gold value of the
  parameter is stated in the conversation (user messages and tool results) or derivable from
  it; 0 when a rewrite or a deletion took the value out.

Every example carries the ``rule`` that labelled it:

==========================  =====  ===========================================================
rule                        label  where
==========================  =====  ===========================================================
``gold_call``               1      fit: the tool of a gold call (BFCL, RelyToolBench's
                                   ``relevant APIs``, dialogue steps, a miss_param / ask_user
                                   turn's tool called once the value is given)
``distractor``              0      fit: BFCL ``multiple`` / ``parallel_multiple`` functions
                                   the gold does not call (written as distractors)
``swapped_in``              0      fit: a doc from another BFCL record of the same category
                                   (BFCL irrelevance style: the request's tool removed)
``unmatched_tools``         0      fit: RelyToolBench ``*_with_unmatched_tools``
``other_environment``       0      fit: BFCL multi-turn methods of a class the episode does
                                   not involve
``other_domain``            0      fit: a tool of another training dialogue domain
``infeasible``              0      fit: a dialogue request no tool of its domain serves
``critictool_doc``          0      fit: a CRITICTOOL API paired with a BFCL request that
                                   shares no word with its toolkit or API name
``stated`` / ``derived``    1      slot: the gold value occurs in the conversation / the
                                   dialogue step says how it follows from the conversation
``stated_before_rewrite``   1      slot: RelyToolBench ``orig_query`` of a Missing Parameter
                                   record, for a relevant API with one required parameter
``answerable``              1      slot: a required parameter of a relevant API of a
                                   RelyToolBench request the benchmark labels answerable (its
                                   plain files: the value is stated or has a usable default)
``value_deleted``           0      slot: a ``stated`` value's only user mention deleted (BFCL
                                   single- and multi-turn, dialogues) when no tool result or
                                   other message still states it
``missing_rewrite``         0      slot: RelyToolBench ``*_missing_all_arguments``
``miss_param``              0      slot: BFCL multi_turn_miss_param's turn without the value
                                   (the parameter BFCL removed, required or optional)
``ask_user``                0      slot: a dialogue turn's ``missing`` parameters
==========================  =====  ===========================================================

Weak negatives left out: the other APIs of a RelyToolBench ``api_list`` (siblings of the
same RapidAPI tool, often serving part of the request), the tools of a BFCL multi-turn or
dialogue turn that its gold does not call (prerequisite lookups, later steps), and BFCL
``multi_turn_long_context`` (base's requests with larger environment states).

Splits (:func:`split_of`): training sources are BFCL v4 ``simple_python``, ``multiple``,
``parallel``, ``parallel_multiple``, ``multi_turn_base`` / ``_miss_param`` / ``_miss_func``,
RelyToolBench's G1 files, CRITICTOOL's tool docs and the dialogue domains in
:data:`TRAIN_DOMAINS`; :data:`DEV_PERCENT` % of their requests (by a hash of the request
id, so one conversation stays in one split) form the ``dev`` split that thresholds are
chosen on.  Evaluation-only: BFCL ``live_simple``, ``live_multiple``, ``live_irrelevance``,
``irrelevance``, RelyToolBench's G2 files and the domains in :data:`EVAL_DOMAINS`.
RelyToolBench's G3 files and BFCL's :data:`NEITHER_BFCL` categories are in neither
(``"none"``): tools and domains no model trains on, which :func:`neither_examples` turns
into a second calibration set (the thresholds must also hold on tools never seen).  An
example whose user side equals an evaluation request's (after :func:`normalise`) is
dropped, from training and from that set alike.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, get_args

from langchain_core.messages import BaseMessage, HumanMessage

from toolguard.conversation import as_messages, message_text
from toolguard.specs import ToolSpec, toolbench_name
from toolguard.verifier import goal_text, slot_context, slot_pair, tool_fit_pair

Kind = Literal["tool_fit", "slot"]
"""What an example asks: does the tool fit the goal; is the parameter's value stated."""
Split = Literal["train", "dev", "eval", "none"]
"""Where an example or source belongs (module docstring)."""
Size = Literal["ci", "full"]
"""``ci``: a few records per source; ``full``: every record (:data:`SIZES`)."""

KINDS: Final[tuple[Kind, ...]] = get_args(Kind)
TRAIN_DOMAINS: Final = ("travel", "banking", "calendar", "files", "home", "sheets")
"""Dialogue domains the verifier trains on (six of eleven; fixed)."""
EVAL_DOMAINS: Final = ("mail", "shop", "helpdesk", "stocks", "repo")
"""Dialogue domains held back for evaluation (the other five)."""
TRAIN_BFCL: Final = ("simple_python", "multiple", "parallel", "parallel_multiple")
TRAIN_BFCL_MULTI_TURN: Final = ("multi_turn_base", "multi_turn_miss_param",
                                "multi_turn_miss_func")
EVAL_BFCL: Final = ("live_simple", "live_multiple", "live_irrelevance", "irrelevance")
TRAIN_RTB: Final = ("G1_instruction",)
EVAL_RTB: Final = ("G2_category",)
NEITHER_RTB: Final = ("G3_instruction",)
NEITHER_BFCL: Final = ("simple_java", "simple_javascript", "live_parallel",
                       "live_parallel_multiple")
"""BFCL categories with gold that neither trains nor evaluates: calibration on unseen tools."""
DEV_PERCENT: Final = 12
"""Share of training requests (percent, by request id) held out as the dev split."""


@dataclass(frozen=True, slots=True)
class SizeLimits:
    """How much of each source a size reads (``None``: all)."""

    bfcl_records: int | None
    """Records per BFCL single-turn category."""
    bfcl_episodes: int | None
    """Episodes per BFCL multi-turn category."""
    rtb_records: int | None
    """Records per RelyToolBench file."""
    dialogues_per_domain: int
    """Dialogues built per training domain."""


SIZES: Final[Mapping[Size, SizeLimits]] = {
    "ci": SizeLimits(bfcl_records=10, bfcl_episodes=2, rtb_records=8, dialogues_per_domain=3),
    "full": SizeLimits(bfcl_records=None, bfcl_episodes=None, rtb_records=None,
                       dialogues_per_domain=48),
}


@dataclass(frozen=True, slots=True)
class Example:
    """One labelled pair before it becomes text (:func:`toolguard.verifier` pair functions).

    Attributes:
        kind: ``tool_fit`` or ``slot``.
        source: ``bfcl:<category>``, ``rtb:<file>``, ``dialogues:<domain>`` or
            ``critictool:docs`` (the source of the *request*).
        request_id: The request or conversation it comes from, in all its variants (the
            unit of the dev split; :func:`request_id`).
        messages: The conversation up to and including the user message decided on.
        tool: The tool.
        parameter: ``slot`` only: the required parameter.
        label: 1 (fits / stated) or 0.
        rule: What labelled it (module docstring).
    """

    kind: Kind
    source: str
    request_id: str
    messages: tuple[BaseMessage, ...]
    tool: ToolSpec
    parameter: str | None
    label: int
    rule: str

    @property
    def split(self) -> Split:
        """The split of the example's request (:func:`split_of`)."""
        return split_of(self.source, self.request_id)

    def pair(self) -> tuple[str, str]:
        """The (query, document) text pair the cross-encoder reads (``toolguard.verifier``)."""
        if self.kind == "tool_fit":
            return tool_fit_pair(goal_text(self.messages), self.tool)
        if self.parameter is None:
            raise ValueError("a slot example needs a parameter")
        return slot_pair(slot_context(self.messages), self.tool, self.parameter)

    @property
    def request_text(self) -> str:
        """The user side of the conversation, normalised (:func:`user_side`)."""
        return user_side(self.messages)


# ---------------------------------------------------------------------------- splits
def source_split(source: str) -> Split:
    """``train``, ``eval`` or ``none`` for a source name (``bfcl:live_simple`` ...).

    Raises:
        ValueError: For a source of no known dataset.
    """
    dataset, _, part = source.partition(":")
    if dataset == "bfcl":
        if part in TRAIN_BFCL or part in TRAIN_BFCL_MULTI_TURN:
            return "train"
        return "eval" if part in EVAL_BFCL else "none"
    if dataset == "rtb":
        group = next((g for g in (*TRAIN_RTB, *EVAL_RTB, *NEITHER_RTB) if part.startswith(g)),
                     None)
        return "train" if group in TRAIN_RTB else "eval" if group in EVAL_RTB else "none"
    if dataset == "dialogues":
        return "train" if part in TRAIN_DOMAINS else "eval" if part in EVAL_DOMAINS else "none"
    if dataset == "critictool":
        return "train"
    raise ValueError(f"unknown source {source!r}")


def request_id(source: str, record_id: str) -> str:
    """The unit of the dev split: one request in all of its variants.

    BFCL's multi-turn categories share their questions by index (``multi_turn_base_5``,
    ``multi_turn_miss_param_5`` -> ``multi_turn:5``); RelyToolBench's three files of a group
    share query ids (``G1_instruction_with_unmatched_tools:86143`` ->
    ``G1_instruction:86143``).  Other ids stay as they are.
    """
    dataset, _, part = source.partition(":")
    if dataset == "bfcl" and part.startswith("multi_turn_"):
        return f"multi_turn:{record_id.rsplit('_', 1)[-1]}"
    if dataset == "rtb":
        file, _, query = record_id.rpartition(":")
        group = next((g for g in (*TRAIN_RTB, *EVAL_RTB, *NEITHER_RTB)
                      if file.startswith(g)), file)
        return f"{group}:{query}"
    return record_id


def split_of(source: str, request_id: str) -> Split:
    """The split of a request: its source's, with :data:`DEV_PERCENT` % of training as dev."""
    split = source_split(source)
    if split != "train":
        return split
    digest = int(hashlib.sha256(request_id.encode("utf-8")).hexdigest()[:8], 16)
    return "dev" if digest % 100 < DEV_PERCENT else "train"


_SPACE = re.compile(r"\s+")
_PUNCT = re.compile(r"[^\w\s]")


def normalise(text: str) -> str:
    """Lower case, punctuation dropped, whitespace collapsed: the overlap test's form."""
    return _SPACE.sub(" ", _PUNCT.sub(" ", text.lower())).strip()


def user_side(messages: Iterable[BaseMessage]) -> str:
    """The normalised text of every user message, joined with `` | ``."""
    return " | ".join(normalise(message_text(m)) for m in messages
                      if isinstance(m, HumanMessage))


# ---------------------------------------------------------------------------- value tests
def stated(value: Any, text: str) -> bool | None:
    """Whether ``value`` occurs in ``text`` as a whole token sequence (case-insensitive).

    Strings and numbers are looked up (``10.0`` also as ``10``); a list is stated when every
    element is.  Returns ``None`` for values this cannot decide (booleans, dicts, empty).
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, list):
        parts = [stated(v, text) for v in value]
        if not parts or any(p is None for p in parts):
            return None
        return all(parts)
    return bool(_mentions(value, text)) if _forms(value) else None


def _forms(value: Any) -> list[str]:
    if isinstance(value, str):
        v = value.strip()
        return [v] if v else []
    if isinstance(value, int):
        return [str(value)]
    if isinstance(value, float):
        return [str(int(value)), str(value)] if value.is_integer() else [str(value)]
    return []


def _mentions(value: Any, text: str) -> list[tuple[int, int]]:
    """Spans of ``value``'s mentions in ``text`` (word-bounded, case-insensitive)."""
    spans: list[tuple[int, int]] = []
    for form in _forms(value):
        pattern = rf"(?<![\w.]){re.escape(form)}(?![\w]|\.\d)"
        spans += [(m.start(), m.end()) for m in re.finditer(pattern, text, re.IGNORECASE)]
    return sorted(set(spans))


def delete_mention(value: Any, text: str) -> str | None:
    """``text`` with the only mention of ``value`` removed, or ``None`` if not exactly one."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    spans = _mentions(value, text)
    if len(spans) != 1:
        return None
    start, end = spans[0]
    out = text[:start].rstrip(" '\"") + " " + text[end:].lstrip(" '\"")
    out = re.sub(r"\s+([,.?!;:])", r"\1", _SPACE.sub(" ", out)).strip()
    return out if out and out != text else None


# ---------------------------------------------------------------------------- builders
class _Out:
    """Collects examples of one request, dropping exact duplicates."""

    def __init__(self) -> None:
        self.examples: list[Example] = []
        self._seen: set[tuple[Any, ...]] = set()

    def add(self, kind: Kind, source: str, request_id: str, messages: Sequence[BaseMessage],
            tool: ToolSpec, label: int, rule: str, parameter: str | None = None) -> None:
        key = (kind, tuple((type(m).__name__, message_text(m)) for m in messages), tool.name,
               parameter)
        if key in self._seen:
            return
        self._seen.add(key)
        self.examples.append(Example(kind=kind, source=source, request_id=request_id,
                                     messages=tuple(messages), tool=tool, parameter=parameter,
                                     label=label, rule=rule))


def _bfcl_messages(record: Mapping[str, Any]) -> list[BaseMessage]:
    return as_messages([m for turn in record["question"] for m in turn])


def _name_words(name: str) -> set[str]:
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    return {w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if len(w) > 2} - _GENERIC


_GENERIC: Final = frozenset({"get", "the", "and", "for", "with", "search", "info", "data",
                             "api", "tool", "list", "show"})


def bfcl_single(out: _Out, category: str, records: Sequence[Mapping[str, Any]],
                rng: random.Random, critictool: Sequence[ToolSpec]) -> None:
    """Fit and slot examples of BFCL single-turn records with gold (module docstring)."""
    from toolguard_evals.bfcl import gold_calls

    source = f"bfcl:{category}"
    pool = [d for r in records for d in r["function"]]
    for r in records:
        msgs = _bfcl_messages(r)
        rid = str(r["id"])
        specs = {d["name"]: ToolSpec.from_bfcl(d) for d in r["function"]}
        calls = gold_calls(r)
        gold = list(dict.fromkeys(name for name, _ in calls))  # call order: no hash order
        for name in gold:
            if name in specs:
                out.add("tool_fit", source, rid, msgs, specs[name], 1, "gold_call")
        for name, spec in specs.items():
            if name not in gold:
                out.add("tool_fit", source, rid, msgs, spec, 0, "distractor")
        others = [d for d in pool if d["name"] not in specs]
        if others:
            out.add("tool_fit", source, rid, msgs, ToolSpec.from_bfcl(rng.choice(others)), 0,
                    "swapped_in")
        text = slot_context(msgs)
        words = set(normalise(text).split())
        unrelated = [s for s in critictool if not _name_words(s.name) & words]
        if unrelated:
            out.add("tool_fit", "critictool:docs", rid, msgs, rng.choice(unrelated), 0,
                    "critictool_doc")
        counts = {name: sum(n == name for n, _ in calls) for name in gold}
        for name, args in calls:
            called = specs.get(name)
            if called is None:
                continue
            for p in called.required:
                if stated(args.get(p), text) is not True:
                    continue
                out.add("slot", source, rid, msgs, called, 1, "stated", p)
                if counts[name] > 1 or any(stated(v, str(args[p])) for q, v in args.items()
                                           if q != p and not isinstance(v, bool)):
                    continue  # parallel calls or another value inside this one: not clean
                _add_deletion(out, source, rid, msgs, called, p, args[p])


def _delete_in(messages: Sequence[BaseMessage], value: Any) -> list[BaseMessage] | None:
    """The messages with ``value``'s only mention deleted from the one user message naming it."""
    hits = [i for i, m in enumerate(messages)
            if isinstance(m, HumanMessage) and _mentions(value, message_text(m))]
    if len(hits) != 1:
        return None
    new = delete_mention(value, message_text(messages[hits[0]]))
    if new is None:
        return None
    return [HumanMessage(new) if i == hits[0] else m for i, m in enumerate(messages)]


def _add_deletion(out: _Out, source: str, rid: str, messages: Sequence[BaseMessage],
                  tool: ToolSpec, parameter: str, value: Any) -> None:
    """Add a ``value_deleted`` example: ``value``'s only user mention deleted.

    Only when nothing else in the slot context (another message, a tool result) states it.
    """
    deleted = _delete_in(messages, value)
    if deleted is not None and stated(value, slot_context(deleted)) is False:
        out.add("slot", source, rid, deleted, tool, 0, "value_deleted", parameter)


def bfcl_multi_turn(out: _Out, category: str, limit: int | None, rng: random.Random) -> None:
    """Fit and slot examples of one BFCL multi-turn category, turn by turn."""
    from toolguard_evals.abstain import load_multi_turn_cases
    from toolguard_evals.bfcl import (
        BFCLEnvironment,
        doc_file_mapping,
        function_docs,
        load_multi_turn,
        parse_call,
    )

    source = f"bfcl:{category}"
    episodes = {ep.id: ep for ep in load_multi_turn(category, limit=limit)}  # type: ignore[arg-type]
    cases = {c.id: c for c in load_multi_turn_cases(category, limit=limit)}
    all_classes = sorted(doc_file_mapping())
    other_docs = {c: [ToolSpec.from_bfcl(d) for d in function_docs([c])] for c in all_classes}
    for ep in episodes.values():
        rid = request_id(source, ep.id)
        env = BFCLEnvironment.for_episode(ep)
        foreign = [s for c in all_classes if c not in ep.involved_classes for s in other_docs[c]]

        def bound(t: int, env: BFCLEnvironment = env,
                  gold: list[list[str]] = ep.gold) -> list[tuple[str, dict[str, Any]]]:
            calls = []
            for src in gold[t]:
                parsed = parse_call(src)
                calls.append((parsed.name, env.bind(parsed)))
            return calls

        for t in range(len(ep.turns)):
            case = cases.get(f"{ep.id}:turn{t}")
            if case is None:
                continue
            specs = {s.name: s for s in case.tools}
            msgs = case.messages
            ctx = slot_context(msgs)
            if ep.gold[t]:
                for name, args in bound(t):
                    spec = specs.get(name)
                    if spec is None:
                        continue
                    out.add("tool_fit", source, rid, msgs, spec, 1, "gold_call")
                    for p in spec.required:
                        if stated(args.get(p), ctx) is True:
                            out.add("slot", source, rid, msgs, spec, 1, "stated", p)
                            _add_deletion(out, source, rid, msgs, spec, p, args[p])
                for spec in rng.sample(foreign, min(2, len(foreign))):
                    out.add("tool_fit", source, rid, msgs, spec, 0, "other_environment")
            elif case.expected == "ask_user" and t + 1 < len(ep.turns) and ep.turns[t + 1]:
                answer = " ".join(str(m.get("content", "")) for m in ep.turns[t + 1])
                for name, args in bound(t + 1):
                    spec = specs.get(name)
                    if spec is None:
                        continue
                    out.add("tool_fit", source, rid, msgs, spec, 1, "gold_call")
                    for p, v in args.items():
                        if (p in spec.properties and stated(v, answer) is True
                                and stated(v, ctx) is False):
                            out.add("slot", source, rid, msgs, spec, 0, "miss_param", p)


def rtb(out: _Out, file: str, data_dir: str | Path | None, limit: int | None) -> None:
    """Fit and slot examples of one RelyToolBench file (``G1_instruction_...``)."""
    from toolguard_evals.datadir import dataset_dir

    path = dataset_dir("relytoolbench", data_dir) / f"{file}.json"
    records = json.loads(path.read_text(encoding="utf-8"))[:limit]
    source = f"rtb:{file}"
    for r in records:
        rid = request_id(source, f"{file}:{r['query_id']}")
        msgs = [HumanMessage(str(r["query"]))]
        specs: dict[str, ToolSpec] = {}
        for api in r["api_list"]:
            spec = ToolSpec.from_toolbench(api)
            specs.setdefault(spec.name, spec)
        if file.endswith("_with_unmatched_tools"):
            for spec in specs.values():
                out.add("tool_fit", source, rid, msgs, spec, 0, "unmatched_tools")
            continue
        relevant = [specs[n] for n in (toolbench_name(api, tool)
                                       for tool, api in r.get("relevant APIs") or [])
                    if n in specs]
        for spec in relevant:
            out.add("tool_fit", source, rid, msgs, spec, 1, "gold_call")
        if file in TRAIN_RTB + EVAL_RTB + NEITHER_RTB:  # the benchmark's answerable requests
            for spec in relevant:
                for p in spec.required:
                    out.add("slot", source, rid, msgs, spec, 1, "answerable", p)
        if file.endswith("_missing_all_arguments"):
            orig = [HumanMessage(str(r["orig_query"]))]
            for spec in relevant:
                for p in spec.required:
                    out.add("slot", source, rid, msgs, spec, 0, "missing_rewrite", p)
                if len(spec.required) == 1:
                    out.add("slot", source, rid, orig, spec, 1, "stated_before_rewrite",
                            spec.required[0])


def dialogues(out: _Out, domains: Sequence[str], per_domain: int, rng: random.Random) -> None:
    """Fit and slot examples of the dialogue corpus's ``domains`` (seed 0)."""
    from toolguard_evals.dialogues.cases import corpus_specs
    from toolguard_evals.dialogues.corpus import build_corpus
    from toolguard_evals.dialogues.messages import to_messages

    corpus = build_corpus(seed=0, per_domain=per_domain, names=domains)
    specs = {dom: {s.name: s for s in ss} for dom, ss in corpus_specs(corpus).items()}
    for d in corpus.dialogues:
        source = f"dialogues:{d.domain}"
        own = specs[d.domain]
        foreign = [s for dom, ss in specs.items() if dom != d.domain for s in ss.values()]
        for t, turn in enumerate(d.turns):
            msgs = to_messages(d, turn=t)
            ctx = slot_context(msgs)
            if turn.label == "no_suitable_tool":
                if "\n" in goal_text(msgs):
                    continue  # read as a follow-up: the goal carries a feasible request
                for spec in own.values():
                    out.add("tool_fit", source, d.id, msgs, spec, 0, "infeasible")
            elif turn.label == "ask_user":
                for p in turn.missing:
                    later = next((s for tt in d.turns[t + 1:] for s in tt.steps
                                  if p in s.args and s.name in own), None)
                    if later is not None:
                        out.add("tool_fit", source, d.id, msgs, own[later.name], 1, "gold_call")
                        out.add("slot", source, d.id, msgs, own[later.name], 0, "ask_user", p)
            else:
                for step in turn.steps:
                    tool = own.get(step.name)
                    if tool is None:
                        continue
                    out.add("tool_fit", source, d.id, msgs, tool, 1, "gold_call")
                    for p in tool.required:
                        if p in step.derived:
                            out.add("slot", source, d.id, msgs, tool, 1, "derived", p)
                        elif stated(step.args.get(p), ctx) is True:
                            out.add("slot", source, d.id, msgs, tool, 1, "stated", p)
                            _add_deletion(out, source, d.id, msgs, tool, p, step.args[p])
                if turn.steps and foreign:
                    out.add("tool_fit", source, d.id, msgs, rng.choice(foreign), 0,
                            "other_domain")


def critictool_specs(data_dir: str | Path | None = None) -> list[ToolSpec]:
    """CRITICTOOL's standardized tool docs (``critictool/api_descrip.json``) as specs."""
    from toolguard_evals.suite_b import critictool_docs

    root = None if data_dir is None else Path(data_dir) / "critictool" / "api_descrip.json"
    return [ToolSpec.from_openai(doc) for docs in critictool_docs(root).values()
            for doc in docs]


def _bfcl_records(category: str, limit: int | None) -> list[dict[str, Any]]:
    """A single-turn BFCL category with gold, read from bfcl-eval's files.

    Java and JavaScript categories get their parameters as strings, as BFCL gives them
    (:func:`_typed_as_strings`).
    """
    from toolguard_evals.bfcl import SINGLE_TURN_CATEGORIES, data_dir, load_category, read_jsonl

    if category in SINGLE_TURN_CATEGORIES:
        return load_category(category, limit=limit)
    folder = data_dir()
    records = read_jsonl(folder / f"BFCL_v4_{category}.json")[:limit]
    gold = {a["id"]: a["ground_truth"]
            for a in read_jsonl(folder / "possible_answer" / f"BFCL_v4_{category}.json")}
    out = [{**r, "ground_truth": gold[r["id"]]} for r in records]
    language = {"simple_java": "Java", "simple_javascript": "JavaScript"}.get(category)
    if language is not None:
        for r in out:
            for doc in r["function"]:
                _typed_as_strings(doc.get("parameters"), language)
    return out


def _typed_as_strings(parameters: Any, language: str) -> None:
    """Give every parameter of a Java or JavaScript function as a string, in place.

    BFCL's own convention for these categories (bfcl-eval's function-doc preprocessing): a
    model writes each argument in the language's syntax as a string, and the description
    names the language's type (``HashMap``, ``Bigint``), which JSON Schema does not know.
    """
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    for schema in (properties or {}).values():
        if not isinstance(schema, dict):
            continue
        kind = schema.get("type")
        hint = f"any {language} object" if kind == "any" else f"a {language} {kind}"
        described = str(schema.get("description", "")).rstrip()
        schema["description"] = f"{described} ({hint}, in string form)".strip()
        schema["type"] = "string"
        for key in ("items", "properties"):
            schema.pop(key, None)


# ---------------------------------------------------------------------------- entry points
def training_examples(size: Size = "full", *, data_dir: str | Path | None = None,
                      seed: int = 0,
                      progress: Callable[[str], None] | None = None) -> list[Example]:
    """Every ``train`` and ``dev`` example (module docstring), in a fixed order.

    Args:
        size: ``ci`` or ``full`` (:data:`SIZES`).
        data_dir: The data root holding ``relytoolbench/`` and ``critictool/`` (see
            :mod:`toolguard_evals.datadir`).
        seed: Seed of the sampled negatives.
        progress: Called with a line per source.

    Raises:
        ValueError: For an unknown size.
        FileNotFoundError: A dataset is missing.
    """
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; expected one of {list(SIZES)}")
    limits = SIZES[size]
    rng = random.Random(seed)
    out = _Out()
    say = progress or (lambda _line: None)
    critictool = critictool_specs(data_dir)
    for cat in TRAIN_BFCL:
        bfcl_single(out, cat, _bfcl_records(cat, limits.bfcl_records), rng, critictool)
        say(f"bfcl:{cat}: {len(out.examples)} examples so far")
    for cat in TRAIN_BFCL_MULTI_TURN:
        bfcl_multi_turn(out, cat, limits.bfcl_episodes, rng)
        say(f"bfcl:{cat}: {len(out.examples)} examples so far")
    rtb_root = None if data_dir is None else Path(data_dir) / "relytoolbench"
    for group in TRAIN_RTB:
        for suffix in ("", "_missing_all_arguments", "_with_unmatched_tools"):
            rtb(out, f"{group}{suffix}", rtb_root, limits.rtb_records)
    say(f"rtb: {len(out.examples)} examples so far")
    dialogues(out, TRAIN_DOMAINS, limits.dialogues_per_domain, rng)
    say(f"dialogues: {len(out.examples)} examples")
    held = evaluation_requests(data_dir=data_dir)
    kept = [e for e in out.examples if e.request_text not in held]
    assert all(e.split in ("train", "dev") for e in kept)
    return kept


def neither_examples(*, data_dir: str | Path | None = None, seed: int = 0,
                     limit: int | None = None) -> list[Example]:
    """Fit and slot examples of the ``none`` sources: tools and domains never trained on.

    BFCL's :data:`NEITHER_BFCL` categories (their gold tools fit, their other functions do
    not, a stated value and its deletion) and RelyToolBench's :data:`NEITHER_RTB` files,
    built by the training builders; an example whose user side equals an evaluation
    request's is dropped.  Calibration reads them beside dev (:mod:`.train`); no model
    trains on them.

    Args:
        data_dir: The data root holding ``relytoolbench/``.
        seed: Seed of the sampled negatives.
        limit: Records per file at most (``None``: all; the ``ci`` size reads a few).

    Raises:
        FileNotFoundError: A dataset is missing.
    """
    rng = random.Random(seed)
    out = _Out()
    for cat in NEITHER_BFCL:
        bfcl_single(out, cat, _bfcl_records(cat, limit), rng, ())
    rtb_root = None if data_dir is None else Path(data_dir) / "relytoolbench"
    for group in NEITHER_RTB:
        for suffix in ("", "_missing_all_arguments", "_with_unmatched_tools"):
            rtb(out, f"{group}{suffix}", rtb_root, limit)
    held = evaluation_requests(data_dir=data_dir)
    kept = [e for e in out.examples if e.request_text not in held]
    assert all(e.split == "none" for e in kept)
    return kept


def evaluation_requests(*, data_dir: str | Path | None = None) -> frozenset[str]:
    """The user side (:func:`user_side`) of every evaluation-only request.

    BFCL ``live_simple`` / ``live_multiple`` / ``live_irrelevance`` / ``irrelevance``, the
    three RelyToolBench G2 files, and every turn of the :data:`EVAL_DOMAINS` dialogues
    (the abstain eval's corpus: seed 0, its default size).
    """
    return frozenset(user_side(msgs) for msgs in _evaluation_conversations(data_dir))


def _evaluation_conversations(data_dir: str | Path | None) -> Iterator[list[BaseMessage]]:
    from toolguard_evals.bfcl import load_category
    from toolguard_evals.dialogues.corpus import DEFAULT_PER_DOMAIN, build_corpus
    from toolguard_evals.dialogues.messages import to_messages
    from toolguard_evals.relytoolbench.data import load_relytoolbench

    for cat in EVAL_BFCL:
        for r in load_category(cat):
            yield _bfcl_messages(r)
    rtb_root = None if data_dir is None else Path(data_dir) / "relytoolbench"
    for case in load_relytoolbench(rtb_root, groups=EVAL_RTB):
        yield [HumanMessage(case.query)]
    corpus = build_corpus(seed=0, per_domain=DEFAULT_PER_DOMAIN, names=EVAL_DOMAINS)
    for d in corpus.dialogues:
        for t in range(len(d.turns)):
            yield to_messages(d, turn=t)


def counts(examples: Iterable[Example]) -> dict[str, Any]:
    """Counts by split, kind and label, and by source and rule (the data card's table)."""
    table: dict[str, Any] = {"by_split": {}, "by_source": {}, "by_rule": {}}
    for e in examples:
        key = f"{e.kind}:{e.label}"
        for group, name in (("by_split", e.split), ("by_source", e.source),
                            ("by_rule", f"{e.kind}:{e.rule}")):
            row = table[group].setdefault(name, {})
            row[key] = row.get(key, 0) + 1
    for group in table.values():
        for row in group.values():
            row["total"] = sum(row.values())
    return table


__all__ = ["DEV_PERCENT", "EVAL_BFCL", "EVAL_DOMAINS", "EVAL_RTB", "KINDS", "NEITHER_BFCL",
           "NEITHER_RTB", "SIZES", "TRAIN_BFCL", "TRAIN_BFCL_MULTI_TURN", "TRAIN_DOMAINS",
           "TRAIN_RTB", "Example", "Kind", "Size", "SizeLimits", "Split", "counts",
           "critictool_specs", "delete_mention", "evaluation_requests", "neither_examples",
           "normalise", "request_id", "source_split", "split_of", "stated", "training_examples",
           "user_side"]
