"""Suite B: the detector suite's cases from sources other than BFCL.

The same :class:`~toolguard_evals.detector_suite.Case` s, labels and scorer as the BFCL suite
(``docs/DATA.md`` §2b); this module only supplies the targets
(:class:`~toolguard_evals.detector_suite.target.Target`, perturbed by
:mod:`toolguard_evals.detector_suite.perturb` with declared value kinds and one random
stream per perturbation).  Sources:

- ``dialogues:<domain>``: every gold call of the dialogue corpus
  (:mod:`toolguard_evals.dialogues`) with the real conversation before it
  (:func:`dialogue_cases`);
- ``toolbench``: RelyToolBench Original queries with a gold call derived from the query
  (:func:`derive_toolbench_call`), single step;
- ``critictool``: requests written here for every API of CRITICTOOL's tool docs
  (``../shared/data/critictool/api_descrip.json``), single step.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from random import Random
from typing import Any, Final, Literal, get_args

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall
from pydantic import BaseModel, Field

from toolguard.specs import ToolSpec
from toolguard_evals.datadir import data_root, dataset_dir
from toolguard_evals.detector_suite import (
    PERTURBATION_LABELS,
    PERTURBERS,
    SUITE_B_SAMPLING,
    Case,
    Grounding,
    Perturbation,
    Perturbed,
    Target,
    invented_value,
    value_slots,
)
from toolguard_evals.detector_suite._schema import (
    doc_props,
    required_keys,
    schema_errors,
    schema_type,
)
from toolguard_evals.detector_suite.perturb import RARE_KINDS
from toolguard_evals.dialogues.corpus import DEFAULT_PER_DOMAIN, build_corpus, domain
from toolguard_evals.dialogues.messages import to_messages
from toolguard_evals.dialogues.records import Corpus, Dialogue, ValueKind

Source = Literal["dialogues", "toolbench", "critictool"]
SOURCES: Final[tuple[Source, ...]] = get_args(Source)
SINGLE_STEP: Final[tuple[Perturbation, ...]] = (
    "fabricated", "irrelevant_tool", "drop_required", "rename_key", "wrong_type",
    "invented_value", "invented_number")
CRITICTOOL_PER_API: Final = 4
"""Requests written per CRITICTOOL API with parameters (APIs without: 2)."""
INVENTED_PER_DIALOGUE: Final = 2
NEXT_CALLS_PER_DIALOGUE: Final = 2


# ============================================================================ targets
def _target(record: str, category: str, history: list[BaseMessage],
            tools: list[dict[str, Any]], name: str, args: Mapping[str, Any], call_id: str, *,
            kinds: Mapping[str, Mapping[str, ValueKind | None]], avoid: frozenset[str],
            pool: list[tuple[ValueKind | None, Any]], today: dt.date | None, seed: int,
            meta: dict[str, Any]) -> Target:
    """A suite-B target: one gold call with declared kinds, drawn one stream per perturbation."""
    return Target(id=record, category=category, history=history, tools=tools,
                  calls=[(name, dict(args))], seed=seed, sampling=SUITE_B_SAMPLING,
                  call_ids=[call_id], kinds=kinds, avoid=avoid, pool=pool,
                  grounding=_grounding_of(history, tools, today), meta=meta)


def _case(t: Target, p: Perturbation, made: Perturbed | None = None) -> Case:
    """The case of ``made`` (``None``: the gold call itself), with the gold tool in metadata."""
    gold = t.calls[0][0]
    if made is None:
        return t.case(p, t.calls, None, {"gold_tool": gold})
    return t.case(p, made.calls, made.target, {"gold_tool": gold, **made.metadata})


# ============================================================================ dialogues
def _grounding_of(history: Sequence[BaseMessage], tools: Sequence[Mapping[str, Any]],
                  today: dt.date | None) -> Grounding:
    texts = [json.dumps(list(tools), ensure_ascii=False)]
    for m in history:
        texts.append(m.content if isinstance(m.content, str) else json.dumps(m.content))
        if isinstance(m, AIMessage):
            texts += [json.dumps(tc["args"], ensure_ascii=False) for tc in m.tool_calls]
    return Grounding.of(texts, today)


def _today(system: str) -> dt.date | None:
    m = re.search(r"Today is \w+, (\d{4}-\d{2}-\d{2})", system)
    return dt.date.fromisoformat(m.group(1)) if m else None


def dialogue_targets(d: Dialogue, corpus: Corpus, *, seed: int = 0) -> list[Target]:
    """One target per gold call of ``d`` (history = the real conversation before it)."""
    dom = domain(d.domain)
    tools = corpus.tools[d.domain]
    kinds = {t.name: {k: p.kind for k, p in t.params.items()} for t in dom.tools}
    groups = {t.name: t.group for t in dom.tools}
    today = _today(d.system)
    out: list[Target] = []
    pool: list[tuple[ValueKind | None, Any]] = []
    for k, (ti, si, step) in enumerate(d.steps()):
        history = to_messages(d, turn=ti, step=si)
        turn_tools = {s.name for s in d.turns[ti].steps}
        avoid = frozenset({n for n, g in groups.items() if g == groups[step.name]} | turn_tools)
        for key, v in step.args.items():
            for item in v if isinstance(v, list) else [v]:
                pool.append((kinds[step.name].get(key), item))
        out.append(_target(
            f"{d.id}@{k}", f"dialogues:{d.domain}", history, tools, step.name, step.args,
            step.call_id, kinds=kinds, avoid=avoid, pool=list(pool), today=today, seed=seed,
            meta={"source": "dialogues", "dialogue": d.id, "step": k, "turn": ti,
                  "turn_kind": d.turns[ti].kind}))
    return out


def dialogue_cases(d: Dialogue, corpus: Corpus, *, seed: int = 0) -> list[Case]:
    """The cases of one dialogue.

    ``gold`` is the dialogue's first call, ``next_call`` later calls (up to
    :data:`NEXT_CALLS_PER_DIALOGUE`), each single-step perturbation once (``invented_value``
    :data:`INVENTED_PER_DIALOGUE` times, of different kinds, plus one per rare kind the
    picks missed) at a step drawn from ``Random(f"{seed}:{id}:plan")``, and ``repeat``
    re-issues a successful call right after its result (or after read-only calls only); its
    metadata say whether running it again changes the backend state (``effect``:
    ``harmful`` / ``harmless``) and whether it succeeds.
    """
    targets = dialogue_targets(d, corpus, seed=seed)
    if not targets:
        return []
    rng = Random(f"{seed}:{d.id}:plan")
    out = [_case(targets[0], "gold")]
    later = list(range(1, len(targets)))
    for k in sorted(rng.sample(later, min(NEXT_CALLS_PER_DIALOGUE, len(later)))):
        out.append(_case(targets[k], "next_call"))
    used: set[tuple[str, Perturbation]] = set()
    for p in SINGLE_STEP:
        order = list(range(len(targets)))
        rng.shuffle(order)
        wanted = INVENTED_PER_DIALOGUE if p == "invented_value" else 1
        kinds_done: list[str] = []
        for k in order:
            if wanted == 0:
                break
            if p == "invented_value":
                made = invented_value(targets[k], avoid_kinds=kinds_done)
                if made is not None:
                    kinds_done.append(str(made.metadata["kind"]))
            else:
                made = PERTURBERS[p](targets[k])
            if made is not None:
                out.append(_case(targets[k], p, made))
                used.add((targets[k].id, p))
                wanted -= 1
    # rarer kinds the dialogue has but the two picks missed get one case each
    for k in order:
        if (targets[k].id, "invented_value") in used:
            continue
        rare = {kind for _, _, kind in value_slots(targets[k])} & RARE_KINDS
        if rare - set(kinds_done):
            made = invented_value(targets[k], only_kinds=rare - set(kinds_done))
            if made is not None:
                out.append(_case(targets[k], "invented_value", made))
                used.add((targets[k].id, "invented_value"))
                kinds_done.append(str(made.metadata["kind"]))
    repeat = _repeat_case(d, corpus, targets, rng)
    if repeat is not None:
        out.append(repeat)
    return out


def _repeat_case(d: Dialogue, corpus: Corpus, targets: Sequence[Target],
                 rng: Random) -> Case | None:
    """Repeat a successful call right after its result, or after read-only calls only."""
    dom = domain(d.domain)
    steps = d.steps()
    j = rng.randrange(len(steps))
    ti, si, step = steps[j]
    after = 0
    # read-only calls of the same turn may lie between (nothing changed)
    turn_steps = d.turns[ti].steps
    while (si + after + 1 < len(turn_steps) and rng.random() < 0.3
           and dom.tool(turn_steps[si + after + 1].name).effect == "read"):
        after += 1
    history = to_messages(d, turn=ti, step=si + 1 + after)
    effect = _replay_effect(d, j)
    t = targets[j]
    msg = AIMessage(content="", tool_calls=[ToolCall(name=step.name, args=dict(step.args),
                                                      id=f"call_{len(steps)}",
                                                      type="tool_call")])
    return Case(id=f"{d.id}@{j}:repeat", category=t.category, perturbation="repeat",
                label="timing", messages=[*history, msg], tools=t.tools,
                tools_key=t.tools_key, target=0,
                metadata={**t.meta, "gold_tool": step.name, "repeated_call": step.call_id,
                          "gap": after, "tool_effect": dom.tool(step.name).effect, **effect})


def _replay_effect(d: Dialogue, j: int) -> dict[str, Any]:
    """Replay calls ``0..j`` on a fresh backend, run call ``j`` again, compare states."""
    dom = domain(d.domain)
    backend = dom.backend(d.backend_seed)
    steps = d.steps()
    for _, _, s in steps[: j + 1]:
        backend.execute(s.name, s.args)
    before = backend.state()
    clone = backend.clone()
    again_ok, again = clone.execute(steps[j][2].name, steps[j][2].args)
    harmful = clone.state() != before
    return {"harmful": harmful, "effect": "harmful" if harmful else "harmless",
            "repeat_ok": again_ok, "same_output": again == steps[j][2].result}


# ============================================================================ toolbench
_URL_RE = re.compile(r"https?://[^\s'\"<>)]+[^\s'\"<>).,!?]")
_EMAIL_RE = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]*\w")
_QUOTE_RE = re.compile(r"""(?<!\w)['"“‘]([^'"”’]{2,80})['"”’](?!\w)""")
_ID_KEY = re.compile(r"(^|_)(id|ids|hash|key|uuid|slug)$|id$", re.I)


def _in_query(value: str, query: str) -> bool:
    if not (len(value) >= 3 or (value.isdigit() and len(value) >= 2)):
        return False
    return re.search(r"(?<![\w.-])" + re.escape(value.casefold()) + r"(?![\w-])",
                     query.casefold()) is not None


def _typed(value: str, jt: str | None) -> Any:
    if jt == "integer":
        return int(value)
    if jt == "number":
        return float(value)
    if jt == "boolean":
        raise ValueError("booleans are not derived")
    return value


def toolbench_param_name(raw: str) -> str:
    """ToolBench's parameter naming (``standardize`` + ``change_name``).

    As :meth:`toolguard.specs.ToolSpec.from_toolbench` names the properties.
    """
    text = re.sub(r"[^\u4e00-\u9fa5a-zA-Z0-9_]", "_", raw)
    text = re.sub(r"_+", "_", text).lower().strip("_")
    if text and text[0].isdigit():
        text = "get_" + text
    keywords = {"from", "class", "return", "false", "true", "id", "and"}
    return "is_" + text if text in keywords else text


def derive_toolbench_call(query: str, api: Mapping[str, Any],
                          spec: ToolSpec) -> tuple[dict[str, Any], dict[str, str]] | str:
    """Gold arguments of ``api`` for ``query`` with the source of each, or why not.

    Every required parameter must be filled confidently from the query: the API's example
    value occurs in the query as a whole word (>= 3 characters, or >= 2 digits), a URL /
    email parameter with exactly one URL / email in the query, or the single remaining
    string parameter with exactly one unused quoted string (id-like parameters only take
    quoted values with a digit).  Other records are skipped and counted
    (:attr:`SuiteB.skipped`).
    """
    values: dict[str, str] = {}
    how: dict[str, str] = {}
    urls, emails = _URL_RE.findall(query), _EMAIL_RE.findall(query)
    required = [(toolbench_param_name(str(p.get("name", ""))), p)
                for p in api.get("required_parameters") or []]
    for pname, p in required:
        if pname not in spec.properties:
            return f"parameter {pname!r} is not in the spec"
        example = "" if p.get("default") is None else str(p.get("default"))
        low = pname.casefold()
        if example and _in_query(example, query):
            values[pname], how[pname] = example, "example value in the query"
        elif "url" in low and len(urls) == 1:
            values[pname], how[pname] = urls[0], "the query's URL"
        elif "email" in low and len(emails) == 1:
            values[pname], how[pname] = emails[0], "the query's email"
    unfilled = [n for n, _ in required if n not in values]
    if len(unfilled) == 1:
        pname = unfilled[0]
        unused = [q for q in _QUOTE_RE.findall(query) if q not in values.values()]
        if (len(unused) == 1 and schema_type(spec.properties[pname]) == "string"
                and (not _ID_KEY.search(pname) or re.search(r"\d", unused[0]))):
            values[pname], how[pname] = unused[0], "the query's quoted value"
    missing = [n for n, _ in required if n not in values]
    if missing:
        return f"no confident value for required parameter {missing[0]!r}"
    args: dict[str, Any] = {}
    for pname, value in values.items():
        jt = schema_type(spec.properties[pname])
        try:
            args[pname] = _typed(value, jt)
        except ValueError:
            return f"value {value!r} does not fit {pname!r} ({jt})"
    return args, how


_KIND_RULES: Final[tuple[tuple[str, ValueKind], ...]] = (
    (r"password|passwd|(^|_)pin$", "password"),
    (r"api_?key|token|secret", "secret"),
    (r"user_?name|login|handle|screen_name|channel_name", "username"),
    (r"e_?mail", "email"),
    (r"url|link|uri|website|domain", "url"),
    (r"phone|mobile|msisdn", "phone"),
    (r"date|^from$|^to$|since|until", "date"),
    (r"symbol|ticker|currency|(^|_)code$|lang|country_code", "code"),
    (r"(^|_)(id|ids|hash|uuid|slug)$|id$|isbn|number$", "identifier"),
    (r"author|artist|actor|player|person|driver|(^|_)name$", "person"),
    (r"city|country|location|place|address|region|destination|origin", "location"),
    (r"(^|_)(q|query|keyword|keywords|search|term|text|tag|hashtag|category|genre)$",
     "keyword"),
    (r"title|name", "title"),
)


def guess_kind(name: str, value: Any) -> ValueKind | None:
    """The value kind of a ToolBench parameter from its name and gold value."""
    low = name.casefold()
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return "identifier" if re.search(r"id$|_id|number", low) else "number"
    text = str(value)
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return "date"
    if re.fullmatch(r"https?://\S+", text):
        return "url"
    if _EMAIL_RE.fullmatch(text):
        return "email"
    for pattern, kind in _KIND_RULES:
        if re.search(pattern, low):
            if kind == "person" and not all(w[:1].isupper() for w in text.split()):
                return "keyword"
            return kind
    if re.search(r"\d", text) and " " not in text:
        return "identifier"
    return "keyword" if len(text.split()) <= 4 else "free_text"


def toolbench_targets(data_dir: str | Path | None = None, *, seed: int = 0,
                      limit: int | None = None) -> tuple[list[Target], dict[str, str]]:
    """Targets from RelyToolBench Original and the skipped records (id -> why)."""
    from toolguard_evals.relytoolbench import data as rtb

    root = dataset_dir("relytoolbench", Path(data_dir) / "relytoolbench" if data_dir is not None
                       else None)
    cases = rtb.load_relytoolbench(root, subsets=("Original",))
    targets: list[Target] = []
    skipped: dict[str, str] = {}
    for c in cases:
        relevant = _relevant_apis(root, c)
        best: tuple[int, int, Any, dict[str, Any], dict[str, str]] | None = None
        reasons: list[str] = []
        for i, (spec, api) in enumerate(zip(c.specs, c.apis, strict=True)):
            if (api.get("tool_name"), api.get("api_name")) not in relevant:
                continue
            made = derive_toolbench_call(c.query, api, spec)
            if isinstance(made, str):
                reasons.append(f"{spec.name}: {made}")
                continue
            args, how = made
            if schema_errors(_doc(spec), args):
                reasons.append(f"{spec.name}: derived call breaks its schema")
                continue
            if best is None or len(args) > best[0]:
                best = (len(args), i, spec, args, how)
        if best is None:
            skipped[c.id] = "; ".join(reasons)[:300] or "no relevant API in the list"
            continue
        _, i, spec, args, how = best
        tools = [_doc(s) for s in c.specs]
        kinds = {s.name: {k: guess_kind(k, args.get(k, (sub or {}).get("example_value", "")))
                          for k, sub in s.properties.items()} for s in c.specs}
        rel_names = {s.name for s, a in zip(c.specs, c.apis, strict=True)
                     if (a.get("tool_name"), a.get("api_name")) in relevant}
        other_kit = {s.name for s, a in zip(c.specs, c.apis, strict=True)
                     if a.get("tool_name") != c.apis[i].get("tool_name")}
        # prefer tools of other toolkits; same-toolkit tools only when there is no other,
        # and never one whose API name shares a word with the query (it may serve another
        # part of a multi-part request)
        avoid = rel_names | ({s.name for s in c.specs} - other_kit if other_kit else set())
        avoid |= {s.name for s in c.specs if _names_query_word(s.name, c.query)}
        history: list[BaseMessage] = [HumanMessage(c.query)]
        pool: list[tuple[ValueKind | None, Any]] = [(kinds[spec.name].get(k), v)
                                                    for k, v in args.items()]
        targets.append(_target(
            f"toolbench:{c.id}", "toolbench", history, tools, spec.name, args, "call_0",
            kinds=kinds, avoid=frozenset(avoid), pool=pool, today=None, seed=seed,
            meta={"source": "toolbench", "query_id": c.id, "derived_from": how,
                  "same_toolkit_only": not other_kit}))
    if limit is not None:
        targets = _sample(targets, limit, f"{seed}:toolbench")
    return targets, skipped


def _names_query_word(tool_name: str, query: str) -> bool:
    """Whether a word (>= 4 letters) of the API part of a ToolBench name is in the query."""
    api = tool_name.split("_for_")[0]
    words = {w for w in re.split(r"[_\W\d]+", api.casefold()) if len(w) >= 4}
    q = query.casefold()
    return any(re.search(rf"\b{re.escape(w[:max(4, len(w) - 2)])}", q) for w in words)


def _relevant_apis(root: Path, case: Any) -> set[tuple[str, str]]:
    """The record's ``relevant APIs`` pairs (read from the file, cached per file)."""
    table = _RELEVANT.get(str(root))
    if table is None:
        table = {}
        for group in ("G1_instruction", "G2_category", "G3_instruction"):
            for r in json.loads((root / f"{group}.json").read_text(encoding="utf-8")):
                table[f"{group}:{r['query_id']}"] = {(a, b) for a, b in r["relevant APIs"]}
        _RELEVANT[str(root)] = table
    return table.get(case.id, set())


_RELEVANT: dict[str, dict[str, set[tuple[str, str]]]] = {}


def _doc(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "parameters": spec.parameters}


# ============================================================================ critictool
_CT_TYPES: Final = {"STRING": "string", "NUMBER": "number", "FLOAT": "number",
                    "BOOLEAN": "boolean"}
_CT_PURPOSE: Final = {"BINGMap": "maps", "GaodeMap": "maps", "FilmDouban": "films",
                      "FilmTMDB": "films", "GoogleSearch": "search", "GoogleScholar": "search",
                      "ArxivSearch": "search"}
_CT_KINDS: Final[dict[str, ValueKind | None]] = {
    "place": "location", "propertyId": "identifier", "date": "date", "checkIn": "date",
    "checkOut": "date", "query": "keyword", "start": "location", "end": "location",
    "location": "location", "search_term": "keyword", "places": "location",
    "latitude": "number", "longitude": "number", "radius": "number", "address": "email",
    "title": "title", "body": "free_text", "attachment": "address", "only_unread": None,
    "file_path": "address", "text": "free_text", "region": "keyword", "cate": "keyword",
    "outNum": "number", "film_name": "title", "movie_id": "identifier",
    "origins": "location", "destination": "location", "origin": "location", "city": "location",
    "keywords": "keyword", "author_id": "identifier", "q": "identifier", "mauthors": "person",
    "start_time": "time", "end_time": "time", "room_id": "code", "theme": "keyword",
    "abs_location": "address", "bullet_items": "free_text", "image": "address", "days": "number",
    "search": "keyword", "ticker": "code", "multiplier": "number", "timespan": None,
    "from": "date", "to": "date",
}
_CT_KIND_OVERRIDES: Final[dict[str, ValueKind]] = {
    "Email.address": "email", "GaodeMap.address": "location", "FilmTMDB.query": "title",
}
_GAODE: Final = ("116.397128,39.916527", "121.473701,31.230416", "113.264385,23.129112",
                 "104.066541,30.572269", "120.155070,30.274084")
_CT_VALUES: Final[dict[str, tuple[Any, ...]]] = {
    "place": ("Lisbon", "Kyoto", "Cape Town", "Reykjavik", "Vancouver"),
    "propertyId": (40718223, 51122904, 6630912, 72290045, 18837460),
    "date": ("2024-07-12", "2024-08-03", "2024-09-21", "2024-11-02"),
    "checkIn": ("2024-07-12", "2024-08-03", "2024-10-18"),
    "checkOut": ("2024-07-15", "2024-08-07", "2024-10-21"),
    "ArxivSearch.query": ("graph neural networks for traffic forecasting",
                          "quantum error correction codes", "protein structure prediction",
                          "diffusion models for audio"),
    "GoogleScholar.query": ("federated learning privacy", "coral reef bleaching",
                            "urban heat islands"),
    "GoogleSearch.query": ("opening hours of the Louvre", "how tall is Mount Kilimanjaro",
                           "best time to visit Patagonia"),
    "FilmTMDB.query": ("Arrival", "Spirited Away", "The Grand Budapest Hotel", "Heat"),
    "start": ("Space Needle, Seattle", "Union Station, Chicago", "Golden Gate Park"),
    "end": ("Pike Place Market", "Navy Pier", "Fisherman's Wharf"),
    "BINGMap.location": ("Statue of Liberty", "Griffith Observatory", "Boston Common"),
    "search_term": ("coffee shop", "pharmacy", "bike rental"),
    "places": ("Boston", "Denver", "Austin"),
    "latitude": (42.3601, 39.7392, 30.2672), "longitude": (-71.0589, -104.9903, -97.7431),
    "radius": (500, 1000, 2000),
    "Email.address": ("maria.lopez@orbitmail.example", "dev-team@northwind.example",
                      "j.okoro@cedarworks.example"),
    "Email.title": ("Quarterly report", "Lunch on Friday", "Updated contract"),
    "Email.body": ("The report is attached, let me know what you think.",
                   "Shall we meet at the usual place at noon?",
                   "Please review the changes in section 4."),
    "attachment": ("/home/user/report.pdf", "/docs/contract_v3.docx"),
    "only_unread": (True, False),
    "file_path": ("/home/user/notes/todo.txt", "/data/summary.md", "/tmp/draft_letter.txt"),
    "FileOperation.text": ("Buy milk, call the plumber, renew passport.",
                           "Meeting notes: budget approved, launch in May."),
    "region": ("美国", "中国大陆", "日本"), "cate": ("喜剧", "动作", "科幻"),
    "outNum": (3, 5, 10), "film_name": ("流浪地球", "你好，李焕英", "满江红"),
    "movie_id": (550, 13, 27205, 157336),
    "origins": _GAODE, "GaodeMap.destination": _GAODE, "origin": _GAODE,
    "GaodeMap.address": ("北京市朝阳区望京SOHO", "上海市浦东新区陆家嘴", "广州塔"),
    "city": ("北京", "上海", "广州"),
    "GaodeMap.location": _GAODE, "GaodeMap.keywords": ("restaurant", "school", "hospital"),
    "author_id": ("lbgE3sIAAAAJ", "Xw2k8mQAAAAJ", "p0tTq1cAAAAJ"),
    "q": ("kX9bTqZr3uQJ", "Q7mHs2LpVx0J"),
    "mauthors": ("Helena Voss", "Rafael Almeida", "Ingrid Solberg"),
    "start_time": ("09:30", "13:15", "15:00"), "end_time": ("10:30", "14:00", "16:45"),
    "room_id": ("101", "102", "103"),
    "theme": ("Default", "Education", "Business"),
    "abs_location": ("/home/user/slides/pitch.pptx", "/work/talks/kickoff.pptx"),
    "PPT.keywords": ("mountain lake,sunrise", "city skyline,night", "solar panels,roof"),
    "PPT.title": ("Market overview", "Project timeline", "Team structure"),
    "bullet_items": ("Growth 12%[SPAN]New markets[SPAN]Risks",
                     "Kickoff in May[SPAN]Beta in July"),
    "image": ("/tmp/images/lake.png", "/tmp/images/skyline.jpg"),
    "Weather.location": ("Oslo", "Santiago", "Nairobi", "Montreal"),
    "days": (1, 2, 3),
    "search": ("Apple", "Tesla", "Nvidia"), "ticker": ("AAPL", "TSLA", "NVDA", "MSFT"),
    "multiplier": (1, 5), "timespan": ("day", "week", "hour"),
    "from": ("2024-01-02", "2024-03-01"), "to": ("2024-01-31", "2024-03-28"),
}
_CT_REQUESTS: Final[dict[str, tuple[str, ...]]] = {
    "AirbnbSearch.search_property_by_place": ("Find me Airbnb places to stay in {place}.",
                                              "What Airbnb listings are there in {place}?"),
    "AirbnbSearch.get_property_details": ("Show me the details of Airbnb property "
                                          "{propertyId}.", "What kind of place is listing "
                                          "{propertyId}?"),
    "AirbnbSearch.check_availability": ("Is Airbnb property {propertyId} free on {date}?",
                                        "Check whether listing {propertyId} is available on "
                                        "{date}."),
    "AirbnbSearch.get_property_reviews": ("What do guests say about Airbnb property "
                                          "{propertyId}?", "Show reviews of listing "
                                          "{propertyId}."),
    "AirbnbSearch.get_property_checkout_price": (
        "How much would Airbnb {propertyId} cost from {checkIn} to {checkOut}?",
        "Get the checkout price of property {propertyId}, check-in {checkIn}, check-out "
        "{checkOut}."),
    "ArxivSearch.get_arxiv_article_information": ("Find arXiv papers about {query}.",
                                                  "Search arXiv for '{query}'."),
    "BINGMap.get_distance": ("How far is it from {start} to {end}?",
                             "Distance between {start} and {end} in km?"),
    "BINGMap.get_route": ("Give me the route from {start} to {end}.",
                          "How do I get from {start} to {end}?"),
    "BINGMap.get_coordinates": ("What are the coordinates of {location}?",
                                "Get latitude and longitude for {location}."),
    "BINGMap.search_nearby": ("Find a {search_term} near {places}.",
                              "Search for {search_term} within {radius} meters of {places}."),
    "Email.send": ("Send an email to {address} titled '{title}' saying: {body}",
                   "Email {address} with the subject '{title}'. Body: {body}"),
    "Email.show": ("Show me {only_unread} in my inbox.",),
    "FileOperation.write_file": ("Write '{text}' to {file_path}.",
                                 "Save this text in {file_path}: {text}"),
    "FileOperation.read_file": ("Read the file {file_path}.", "What's in {file_path}?"),
    "FilmDouban.coming_out_filter": ("List {outNum} upcoming {cate} films in {region}.",
                                     "Which {cate} movies are coming out in {region}? "
                                     "Give me {outNum}."),
    "FilmDouban.now_playing_out_filter": ("Show {outNum} films now playing in {region}.",
                                          "What's in cinemas in {region} now? Top {outNum}."),
    "FilmDouban.print_detail": ("Tell me about the film {film_name}.",
                                "Print the details of {film_name}."),
    "FilmTMDB.search_movie": ("Search TMDB for the movie {query}.",
                              "Find the film '{query}' on TMDB."),
    "FilmTMDB.get_movie_details": ("Get details of TMDB movie {movie_id}.",
                                   "What is movie id {movie_id} about?"),
    "FilmTMDB.get_similar_movies": ("Movies similar to TMDB id {movie_id}?",
                                    "Recommend films like movie {movie_id}."),
    "FilmTMDB.get_movie_reviews": ("Show user reviews for movie {movie_id}.",
                                   "What do people think of TMDB film {movie_id}?"),
    "FilmTMDB.get_now_playing": ("What movies are in theatres now?",
                                 "List films currently playing."),
    "FilmTMDB.get_top_rated_movies": ("Show me the top rated movies.",
                                      "Which films have the best ratings?"),
    "FilmTMDB.get_popular_movies": ("What are the most popular movies right now?",
                                    "List popular films."),
    "GaodeMap.get_distance": ("Distance from {origins} to {destination}?",
                              "How many km between coordinates {origins} and {destination}?"),
    "GaodeMap.get_route": ("Route from {origin} to {destination}, please.",
                           "Plan a route between {origin} and {destination}."),
    "GaodeMap.get_coordinate": ("What are the coordinates of {address} in {city}?",
                                "Get the coordinate of {address}."),
    "GaodeMap.search_nearby": ("Find a {keywords} near {location}.",
                               "Search nearby {location} for {keywords}."),
    "GoogleScholar.search_google_scholar": ("Search Google Scholar for {query}.",
                                            "Find scholarly articles on {query}."),
    "GoogleScholar.get_author_information": ("Get information on scholar author {author_id}.",
                                             "Who is the author with id {author_id}?"),
    "GoogleScholar.get_citation_format": ("Give me the MLA citation of result {q}.",
                                          "Cite Google Scholar result {q} in MLA."),
    "GoogleScholar.get_author_id": ("Find the Google Scholar id of {mauthors}.",
                                    "What's {mauthors}'s author id on Google Scholar?"),
    "GoogleSearch.serper_search": ("Google this: {query}.", "Search the web for {query}."),
    "ReserveMeeting.get_room_status": ("What's the booking status of the meeting rooms?",
                                       "Show me which rooms are booked."),
    "ReserveMeeting.get_empty_room_with_time": ("Is any room free from {start_time} to "
                                                "{end_time}?", "Find an empty meeting room "
                                                "between {start_time} and {end_time}."),
    "ReserveMeeting.reserve": ("Book room {room_id} from {start_time} to {end_time} today.",
                               "Reserve meeting room {room_id}, {start_time}-{end_time}."),
    "TimeTool.get_curr_time": ("What time is it?", "Tell me the current time."),
    "TimeTool.get_weekday": ("What day of the week is it today?", "Which weekday is today?"),
    "PPT.create_file": ("Create a slide deck with the {theme} theme at {abs_location}.",
                        "Start a new pptx in {abs_location} using theme {theme}."),
    "PPT.get_image": ("Find an image of {keywords}.", "Get me a picture for: {keywords}."),
    "PPT.add_text_page": ("Add a slide titled '{title}' with bullets {bullet_items}.",
                          "New text page '{title}': {bullet_items}"),
    "PPT.add_text_image_page": ("Add a slide '{title}' with bullets {bullet_items} and the "
                                "image {image}.",),
    "PPT.save_file": ("Save the presentation.", "OK, save the PPT now."),
    "Weather.get_weather_today": ("What's the weather in {location} today?",
                                  "Is it raining in {location} now?"),
    "Weather.forecast_weather": ("Weather forecast for {location} for the next {days} days?",
                                 "Will it be sunny in {location} in {days} days?"),
    "PolygonFinance.search_stock_ticker": ("What's the ticker of {search}?",
                                           "Find the stock symbol for {search}."),
    "PolygonFinance.aggregate_stock_with_time": (
        "Get {multiplier}-{timespan} bars for {ticker} from {from} to {to}.",),
    "PolygonFinance.get_daliy_open_close": ("Open and close price of {ticker} on {date}?",
                                            "How did {ticker} trade on {date}?"),
    "PolygonFinance.get_ticker_news": ("Latest news about {ticker}?",
                                       "Show recent articles on {ticker}."),
    "PolygonFinance.get_ticker_detail": ("Tell me about the company behind {ticker}.",
                                         "Details of ticker {ticker}?"),
}


def critictool_docs(path: str | Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Toolkit -> its APIs as function docs named ``{toolkit}.{api}`` (JSON Schema types).

    Raises:
        FileNotFoundError: If ``api_descrip.json`` is missing.
    """
    p = Path(path) if path is not None else dataset_dir("critictool") / "api_descrip.json"
    raw = json.loads(p.read_text(encoding="utf-8"))
    out: dict[str, list[dict[str, Any]]] = {}
    for kit in raw:
        docs = []
        for api in kit["api_list"]:
            props: dict[str, Any] = {}
            required: list[str] = []
            for group in ("required_parameters", "optional_parameters"):
                for prm in api.get(group) or []:
                    schema: dict[str, Any] = {"description": str(prm.get("description", ""))}
                    jt = _CT_TYPES.get(str(prm.get("type", "")).upper())
                    if jt is not None:
                        schema["type"] = jt
                    props[str(prm["name"])] = schema
                    if group == "required_parameters":
                        required.append(str(prm["name"]))
            docs.append({"name": f"{kit['name']}.{api['name']}",
                         "description": str(api.get("description", "")),
                         "parameters": {"type": "object", "properties": props,
                                        "required": required}})
        out[str(kit["name"])] = docs
    return out


def _ct_pool(kit: str, param: str) -> tuple[Any, ...]:
    return _CT_VALUES.get(f"{kit}.{param}") or _CT_VALUES.get(param) or ()


def _ct_kind(kit: str, param: str) -> ValueKind | None:
    return _CT_KIND_OVERRIDES.get(f"{kit}.{param}", _CT_KINDS.get(param))


def critictool_targets(path: str | Path | None = None, *, seed: int = 0,
                       limit: int | None = None) -> tuple[list[Target], dict[str, str]]:
    """Targets from the requests written for each CRITICTOOL API."""
    kits = critictool_docs(path)
    targets: list[Target] = []
    skipped: dict[str, str] = {}
    all_kinds = {d["name"]: {k: _ct_kind(kit, k) for k in doc_props(d)}
                 for kit, docs in kits.items() for d in docs}
    for kit, docs in kits.items():
        for doc in docs:
            api = doc["name"]
            templates = _CT_REQUESTS.get(api)
            if not templates:
                skipped[api] = "no request written"
                continue
            n = CRITICTOOL_PER_API if doc_props(doc) else 2
            for k in range(n):
                rng = Random(f"{seed}:critictool:{api}:{k}")
                template = templates[k % len(templates)]
                fields = re.findall(r"\{(\w+)\}", template)
                args: dict[str, Any] = {}
                said: dict[str, str] = {}
                for f in fields:
                    pool = _ct_pool(kit, f)
                    value = rng.choice(pool)
                    args[f] = value
                    said[f] = (("unread emails" if value else "all emails")
                               if f == "only_unread" else str(value))
                missing = [r for r in required_keys(doc) if r not in args]
                if missing:
                    skipped[f"{api}#{k}"] = f"template lacks {missing}"
                    continue
                query = template.format(**said)
                extra = _other_toolkits(kit, list(kits), rng)
                tools = list(docs) + [d for x in extra for d in kits[x]]
                if schema_errors(doc, args):
                    skipped[f"{api}#{k}"] = "; ".join(schema_errors(doc, args))
                    continue
                history: list[BaseMessage] = [HumanMessage(query)]
                targets.append(_target(
                    f"critictool:{api}#{k}", "critictool", history, tools, api, args, "call_0",
                    kinds=all_kinds, avoid=frozenset(d["name"] for d in docs),
                    pool=[(all_kinds[api].get(f), v) for f, v in args.items()], today=None,
                    seed=seed,
                    meta={"source": "critictool", "api": api, "toolkits": [kit, *extra]}))
    if limit is not None:
        targets = _sample(targets, limit, f"{seed}:critictool")
    return targets, skipped


def _other_toolkits(kit: str, kits: Sequence[str], rng: Random, n: int = 2) -> list[str]:
    """``n`` toolkits whose purpose differs from ``kit``'s and from each other's."""
    pool = [x for x in kits if x != kit]
    rng.shuffle(pool)
    purposes = {_CT_PURPOSE.get(kit, kit)}
    out: list[str] = []
    for x in pool:
        purpose = _CT_PURPOSE.get(x, x)
        if purpose not in purposes:
            purposes.add(purpose)
            out.append(x)
        if len(out) == n:
            break
    return sorted(out)


def single_step_cases(t: Target) -> list[Case]:
    """The gold case and one case per applicable single-step perturbation."""
    out = [_case(t, "gold")]
    for p in SINGLE_STEP:
        made = PERTURBERS[p](t)
        if made is not None:
            out.append(_case(t, p, made))
    return out


def _sample(items: Sequence[Any], limit: int, key: str) -> list[Any]:
    if limit >= len(items):
        return list(items)
    picked = sorted(Random(key).sample(range(len(items)), limit))
    return [items[i] for i in picked]


# ============================================================================ the suite
class SuiteB(BaseModel):
    """The cases plus how they were drawn.

    Attributes:
        seed: Seed of every choice.
        limit: Records per category (dialogue domain, toolbench, critictool); ``None``: all.
        cases: The cases.
        skipped: Source -> record id -> why no case was built.
        dialogues: Dialogues used.
    """

    seed: int
    limit: int | None
    cases: list[Case]
    skipped: dict[str, dict[str, str]] = Field(default_factory=dict)
    dialogues: int = 0

    def counts(self) -> dict[str, dict[str, int]]:
        """Cases per source and perturbation."""
        out: dict[str, Counter[str]] = defaultdict(Counter)
        for c in self.cases:
            out[c.category.split(":")[0]][c.perturbation] += 1
            out["all"][c.perturbation] += 1
        return {k: {p: v[p] for p in PERTURBATION_LABELS if v[p]} for k, v in out.items()}


def build(*, seed: int = 0, limit: int | None = None,
          sources: Sequence[Source] = SOURCES,
          data_dir: str | Path | None = None) -> SuiteB:
    """Build suite B.

    Args:
        seed: Seed of every choice.
        limit: Records per category: dialogues per domain (``None``: the corpus default,
            36), RelyToolBench targets, CRITICTOOL requests (``None``: all).
        sources: Which sources to use.
        data_dir: The shared data folder (``relytoolbench/``, ``critictool/``); default
            ``../shared/data``.

    Raises:
        ValueError: For ``limit`` < 1 or an unknown source.
        FileNotFoundError: If a data file is missing.
    """
    if limit is not None and limit < 1:
        raise ValueError("limit must be >= 1 (or None)")
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        raise ValueError(f"unknown sources {unknown}; expected some of {list(SOURCES)}")
    cases: list[Case] = []
    skipped: dict[str, dict[str, str]] = {}
    n_dialogues = 0
    if "dialogues" in sources:
        corpus = build_corpus(seed=seed, per_domain=limit or DEFAULT_PER_DOMAIN)
        n_dialogues = len(corpus.dialogues)
        for d in corpus.dialogues:
            cases += dialogue_cases(d, corpus, seed=seed)
    root = data_root(data_dir)
    if "toolbench" in sources:
        targets, skipped["toolbench"] = toolbench_targets(root, seed=seed, limit=limit)
        for t in targets:
            cases += single_step_cases(t)
    if "critictool" in sources:
        targets, skipped["critictool"] = critictool_targets(
            root / "critictool" / "api_descrip.json", seed=seed, limit=limit)
        for t in targets:
            cases += single_step_cases(t)
    return SuiteB(seed=seed, limit=limit, cases=cases, skipped=skipped, dialogues=n_dialogues)


def build_suite_b(seed: int = 0, limit: int | None = None) -> list[Case]:
    """The cases of suite B from all three sources (see :func:`build`)."""
    return build(seed=seed, limit=limit).cases


# ============================================================================ running
def _predicted(verdict: Any) -> str:
    return str(verdict.hallucination or ("none" if verdict.action == "allow" else verdict.action))


def run(cases: Sequence[Case], *, mode: str = "deterministic") -> dict[str, Any]:
    """Run ``toolguard.Guard`` (``detector_suite.GUARD_MODES[mode]``) on ``cases``.

    Returns:
        :func:`toolguard_evals.detector_suite.run_suite`'s report, plus ``by_source``
        (the same report per source), ``content_recall_by_kind`` (invented values and numbers
        flagged as content, per value kind) and ``timing_recall_by_gap`` (repeats flagged as
        timing, by the number of read-only calls between).
    """
    from toolguard_evals.detector_suite import guard_factory, run_suite

    factory = guard_factory(mode)
    report = run_suite(cases, factory)
    report["mode"] = mode
    groups: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        groups[c.category.split(":")[0]].append(c)
    report["by_source"] = {src: run_suite(group, factory) for src, group in groups.items()}
    guards: dict[str, Any] = {}
    kinds: dict[str, list[bool]] = defaultdict(list)
    gaps: dict[str, list[bool]] = defaultdict(list)
    for c in cases:
        if c.perturbation not in ("invented_value", "invented_number", "repeat"):
            continue
        guard = guards.get(c.tools_key)
        if guard is None:
            guard = guards[c.tools_key] = factory(list(c.tools))
        assert c.target is not None
        pred = _predicted(list(guard.check(c.messages))[c.target])
        if c.perturbation == "repeat":
            gaps[f"gap={c.metadata.get('gap')}"].append(pred == "timing")
        else:
            kinds[f"{c.perturbation}:{c.metadata.get('kind')}"].append(pred == "content")
    report["content_recall_by_kind"] = _rates(kinds)
    report["timing_recall_by_gap"] = _rates(gaps)
    return report


def _rates(groups: Mapping[str, list[bool]]) -> dict[str, dict[str, Any]]:
    return {k: {"n": len(v), "recall": round(sum(v) / len(v), 4)}
            for k, v in sorted(groups.items())}


def print_report(report: Mapping[str, Any]) -> None:
    """Per-class precision/recall and false-block rates, overall and per source."""
    rows = [("all", report), *sorted(report.get("by_source", {}).items())]
    print(f"suite B  mode={report.get('mode')}  cases={report['cases']}")
    print(f"{'source':<11}{'class':<17}{'precision':>10}{'recall':>8}{'support':>9}")
    for name, r in rows:
        for cls, m in r["per_type"].items():
            p = "-" if m["precision"] is None else f"{m['precision']:.3f}"
            rc = "-" if m["recall"] is None else f"{m['recall']:.3f}"
            print(f"{name:<11}{cls:<17}{p:>10}{rc:>8}{m['support']:>9}")
        fb = r["false_block_rate"]
        print(f"{name:<11}false blocks: all clean {fb}, gold "
              f"{r['false_block_rate_single_turn']}, next_call "
              f"{r['false_block_rate_multi_turn']}")


def main(json_path: str | None = None, *, seed: int = 0, limit: int | None = None,
         mode: str = "deterministic") -> dict[str, Any]:
    """Build suite B, run the guard, print the table, write JSON if asked."""
    t0 = time.perf_counter()
    suite = build(seed=seed, limit=limit)
    build_s = round(time.perf_counter() - t0, 3)
    report = run(suite.cases, mode=mode)
    report.update(seed=seed, limit=limit, build_s=build_s, counts=suite.counts(),
                  skipped_counts={k: len(v) for k, v in suite.skipped.items()},
                  skipped=suite.skipped, dialogues=suite.dialogues)
    print_report(report)
    if json_path is not None:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    return report


__all__ = ["SOURCES", "SuiteB", "build", "build_suite_b", "critictool_docs", "critictool_targets",
           "derive_toolbench_call", "dialogue_cases", "dialogue_targets", "guess_kind", "main",
           "print_report", "run", "single_step_cases", "toolbench_param_name",
           "toolbench_targets"]

if __name__ == "__main__":  # pragma: no cover
    import argparse

    parser = argparse.ArgumentParser(description="Suite B: build, run the guard, report.")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--mode", default="deterministic")
    a = parser.parse_args()
    main(a.json_path, seed=a.seed, limit=a.limit, mode=a.mode)
