"""Suite B: a second labelled detector suite, from sources other than BFCL.

Same :class:`toolguard_evals.detector_suite.Case` objects, perturbations and labels as the
BFCL suite (``docs/DATA.md`` §2b, :data:`~toolguard_evals.detector_suite.PERTURBATION_LABELS`),
so :func:`~toolguard_evals.detector_suite.run_suite` / ``score`` run unchanged.  Three sources:

- ``dialogues:<domain>`` -- the dialogue corpus (:mod:`toolguard_evals.dialogues`): the
  target call is a gold call at any step of a multi-turn conversation, the history the real
  conversation before it (earlier turns, tool results from the executable backend, the
  current turn's earlier calls).  ``gold`` is the dialogue's first call, ``next_call`` later
  calls (up to two per dialogue), ``repeat`` re-issues a successful call right after its
  result (or after read-only calls only); its metadata say whether running it again changes
  the backend state (``effect``: ``harmful`` / ``harmless``) and whether it succeeds.
- ``toolbench`` -- RelyToolBench Original queries with their ToolBench APIs, single step.  A
  gold call is derived only when every required parameter of a relevant API is filled
  confidently from the query: the API's example value occurs in the query as a whole word
  (>= 3 characters, or >= 2 digits), a URL/email parameter with exactly one URL/email in the
  query, or the single remaining string parameter with exactly one unused quoted string
  (id-like parameters only take quoted values with a digit).  Other records are skipped and
  counted (:attr:`SuiteB.skipped`).
- ``critictool`` -- requests written here for every API of CRITICTOOL's tool docs
  (``../shared/data/critictool/api_descrip.json``), single step; the tool list is the API's
  toolkit plus two toolkits of other purposes.

Perturbations per target: ``fabricated``, ``irrelevant_tool`` (a tool of another purpose
group with schema-valid, grounded arguments), ``drop_required``, ``rename_key``,
``wrong_type``, ``invented_value`` and ``invented_number``.  Invented values are of the
argument's kind (:data:`toolguard_evals.dialogues.records.ValueKind`: username, password,
secret, identifier, code, email, url, address/path, formula, keyword, person, location, date,
time, title, phone, free-text fact) and occur nowhere in the conversation or the tool docs:
neither the value, nor its letters-and-digits form, nor any of its distinctive tokens (>= 3
characters) as part of another text (:func:`absent`); dates and times are also not said in
words ("March 6", "this Friday", "2 pm").  Free text gets an invented fact appended; the
fact is what must be absent.  Every random choice comes from ``random.Random`` seeded with
``f"{seed}:{record}:{perturbation}"``, so a record's cases do not depend on the limits.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import string
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any, Final, Literal, get_args

from jsonschema import Draft202012Validator
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolCall,
)
from pydantic import BaseModel, Field

from toolguard.specs import ToolSpec
from toolguard_evals.datadir import data_root, dataset_dir
from toolguard_evals.detector_suite import (
    PERTURBATION_LABELS,
    Case,
    Perturbation,
    fabricate_name,
    number_words,
    rename_key,
    tools_key,
    wrong_type_value,
)
from toolguard_evals.dialogues.corpus import DEFAULT_PER_DOMAIN, build_corpus, domain
from toolguard_evals.dialogues.framework import numbers_in
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

# ============================================================================ invention pools
# Written for suite B; disjoint from the corpus pools so an invented value is rarely close
# to a real one (the absence check below is what guarantees it).
_FIRST: Final = ("Ottilie", "Barnaby", "Seraphine", "Caspian", "Marisela", "Thaddeus", "Linnea",
                 "Evander", "Rosamund", "Ignatz", "Briony", "Lucian", "Henrietta", "Alaric",
                 "Perpetua", "Wystan")
_LAST: Final = ("Brackwater", "Thistlewood", "Quennell", "Ashcombe", "Marchbank",
                "Featherstone", "Kilbride", "Osgood", "Pendleton", "Ravenscroft", "Strathmore",
                "Winterbourne")
_CITIES: Final = ("Innsbruck", "Tartu", "Groningen", "Bergen", "Lugano", "Aberdeen",
                  "Ljubljana", "Salzburg", "Trondheim", "Antwerp", "Ghent", "Bologna", "Nantes",
                  "Lausanne", "Brno", "Kaunas")
_WORDS: Final = ("sorrel", "tarn", "brindle", "heron", "fennel", "ochre", "slate", "lark",
                 "moss", "cinder", "gorse", "pewter", "quince", "rowan", "sable", "teal")
_DOMAINS: Final = ("fernpost.example", "quaymail.example", "larkbox.example",
                   "ridgewire.example")
_HOSTS: Final = ("cdn.harrowgate.example", "files.wendover.example", "media.tollgate.example",
                 "docs.brightmoor.example")
_PATH_WORDS: Final = ("brochure", "catalogue", "minutes", "timetable", "handbook",
                      "prospectus", "ledger", "inventory")
_KEYWORDS: Final = ("ceramic teapot", "folding ladder", "garden hose", "wool blanket",
                    "paper shredder", "camping stove", "standing desk", "bird feeder",
                    "ice skates", "sewing kit", "tidal energy", "glacier retreat",
                    "medieval trade routes", "sourdough fermentation")
_TITLES: Final = ("Harbour lights retrospective", "Procurement sync", "Winter fair planning",
                  "Archive migration", "Vendor scorecard review", "Lantern project kickoff",
                  "Quayside lease renewal", "Orchard survey results")
_SOFTWARE: Final = ("Scribus", "Darktable", "Shotcut", "Calibre", "FreeCAD", "Inkdrop")
_STREETS: Final = ("Gorse Hill Road", "Pewter Lane", "Quince Row", "Rowan Crescent",
                   "Sable Street")
_TOWNS: Final = (("Wendover Marsh", "WM5 4TZ"), ("Harrowgate", "HG8 2QJ"),
                 ("Tollbridge", "TB1 7XK"))
_CURRENCIES: Final = ("HUF", "CZK", "RON", "ISK", "BGN", "TRY", "ZAR", "MXN", "SGD", "NZD")
_CHINESE: Final = ("日本", "法国", "韩国", "英国", "动作", "爱情", "科幻", "动画", "霸王别姬",
                   "让子弹飞", "无间道", "活着", "杭州西湖", "成都宽窄巷子", "南京夫子庙")
_STRUCTURAL: Final = frozenset({
    "http", "https", "www", "com", "org", "net", "example", "pdf", "docx", "xlsx", "pptx",
    "jpg", "png", "zip", "txt", "csv", "json", "html", "the", "and",
})
_MONTHS: Final = ("january", "february", "march", "april", "may", "june", "july", "august",
                  "september", "october", "november", "december")
_WEEKDAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday",
                    "sunday")
_TOKEN = re.compile(r"[a-z0-9]+")
_CJK = re.compile(r"[\u3400-\u9fff]")


# ============================================================================ absence
@dataclass(frozen=True, slots=True)
class Grounding:
    """Everything an invented value must be absent from (conversation + tool docs).

    Attributes:
        text: Casefolded text.
        compact: ``text`` with letters and digits only.
        numbers: Numbers written with digits in the text.
        today: The conversation's date, if it has one ("Today is ...").
    """

    text: str
    compact: str
    numbers: frozenset[float]
    today: dt.date | None = None

    @classmethod
    def of(cls, texts: Iterable[str], today: dt.date | None = None) -> Grounding:
        joined = "\n".join(texts)
        folded = joined.casefold()
        return cls(folded, "".join(ch for ch in folded if ch.isalnum()),
                   frozenset(numbers_in(joined)), today)


def _tokens(value: str) -> list[str]:
    return _TOKEN.findall(value.casefold())


def absent(value: str, g: Grounding, *, keep: Iterable[str] = ()) -> bool:
    """Whether ``value`` occurs nowhere in ``g``, not even in part.

    The value (casefolded), its letters-and-digits form (>= 3 characters) and each of its
    tokens of >= 3 letters/digits must not be substrings of the text.  Tokens in
    :data:`_STRUCTURAL` (``https``, ``com``, ``pdf``...) and in ``keep`` (format parts kept
    on purpose, e.g. the ``ACC`` of ``ACC-51234``) are not checked on their own.  CJK text:
    no two consecutive characters of the value may occur in the text.
    """
    v = value.casefold().strip()
    if not v or v in g.text:
        return False
    compact = "".join(ch for ch in v if ch.isalnum())
    if len(compact) >= 3 and compact in g.compact:
        return False
    kept = {k.casefold() for k in keep}
    for tok in _tokens(v):
        if len(tok) >= 3 and tok not in _STRUCTURAL and tok not in kept and tok in g.text:
            return False
    cjk = "".join(_CJK.findall(v))
    return not any(cjk[i:i + 2] in g.text for i in range(len(cjk) - 1))


def _date_said(day: dt.date, g: Grounding) -> bool:
    """Whether ``day`` is named in the text (ISO, month-day in words, relative)."""
    month = _MONTHS[day.month - 1]
    forms = [day.isoformat(), f"{month} {day.day}", f"{day.day} {month}",
             f"{day.day}th of {month}", f"{day.day}rd of {month}", f"{day.day}nd of {month}",
             f"{day.day}st of {month}"]
    if any(re.search(rf"(?<![\w]){re.escape(f)}(?![\w])", g.text) for f in forms):
        return True
    if g.today is not None:
        delta = (day - g.today).days
        if (delta == 0 and "today" in g.text) or (delta == 1 and "tomorrow" in g.text):
            return True
        if 0 <= delta <= 7 and _WEEKDAYS[day.weekday()] in g.text:
            return True
    return False


def _time_said(hh: int, mm: int, g: Grounding) -> bool:
    h12, ampm = (hh % 12 or 12), ("am" if hh < 12 else "pm")
    forms = [f"{hh:02d}:{mm:02d}", f"{hh}:{mm:02d}", f"{h12}:{mm:02d}"]
    if mm == 0:
        forms += [f"{h12} {ampm}", f"{h12}{ampm}"]
    if mm == 30:
        forms += [f"{h12}.30{ampm}", f"half past {number_words(h12)}"]
    return any(re.search(rf"(?<![\w:.]){re.escape(f)}(?![\w:])", g.text) for f in forms)


# ============================================================================ invention
@dataclass(frozen=True, slots=True)
class Invented:
    """An invented value: the new argument value, the part that is new, how it was made."""

    value: str
    fact: str
    strategy: str
    keep: tuple[str, ...] = ()


def _redraw(value: str, rng: Random) -> tuple[str, tuple[str, ...]]:
    """Redraw every letter and digit of ``value``.

    Separators and a leading alphabetic prefix (``ACC-``, ``sess_``, ``msg-``) are kept;
    hexadecimal runs stay hexadecimal.
    """
    m = re.match(r"^([A-Za-z]{1,6})(?=[-_ .:/]|\d)", value)
    prefix = m.group(1) if m else ""
    out = [prefix]
    rest = value[len(prefix):]
    for run in re.findall(r"[A-Za-z0-9]+|[^A-Za-z0-9]+", rest):
        if not run[0].isalnum():
            out.append(run)
            continue
        hexrun = all(c in "0123456789abcdef" for c in run) and any(c.isalpha() for c in run)
        for ch in run:
            if hexrun:
                out.append(rng.choice("0123456789abcdef"))
            elif ch.isdigit():
                out.append(rng.choice(string.digits))
            elif ch.isupper():
                out.append(rng.choice(string.ascii_uppercase))
            else:
                out.append(rng.choice(string.ascii_lowercase))
    return "".join(out), ((prefix,) if prefix else ())


def _person(gold: str, rng: Random) -> str:
    n = len(gold.split())
    if n <= 1:
        return rng.choice(_FIRST)
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"


def _username(gold: str, rng: Random) -> str:
    sep = "." if "." in gold else "_" if "_" in gold else ""
    head = rng.choice(_FIRST).lower() if rng.random() < 0.5 else rng.choice(_WORDS)
    tail = rng.choice(_LAST).lower() if sep else rng.choice(_WORDS)
    digits = str(rng.randrange(10, 99)) if any(c.isdigit() for c in gold) else ""
    return f"{head}{sep}{tail}{digits}"


def _password(gold: str, rng: Random) -> tuple[str, tuple[str, ...]]:
    if gold.isdigit():
        return "".join(rng.choice(string.digits) for _ in gold), ()
    if "-" in gold:
        a, b = rng.sample(_WORDS, 2)
        return f"{a.capitalize()}-{b.capitalize()}-{rng.randrange(10, 99)}", ()
    return _redraw(gold, rng)


def _path(gold: str, rng: Random) -> str:
    ext = re.search(r"\.[A-Za-z0-9]{2,4}$", gold)
    parts = [rng.choice(_PATH_WORDS).capitalize(), rng.choice(_WORDS)]
    path = "/" + "/".join(parts)
    return path + (f"/{rng.choice(_PATH_WORDS)}{ext.group(0)}" if ext else "")


def _title(key: str, gold: str, rng: Random) -> str:
    ext = re.search(r"\.[A-Za-z0-9]{2,4}$", gold)
    if _CJK.search(gold):
        return rng.choice(_CHINESE)
    if "software" in key or (len(gold.split()) == 1 and gold[:1].isupper() and not ext):
        return rng.choice(_SOFTWARE)
    title = rng.choice(_TITLES)
    return f"{title}{ext.group(0)}" if ext else title


def _url(gold: str, rng: Random) -> str:
    if "://" not in gold and "/" not in gold:  # a bare domain
        return rng.choice(_DOMAINS)
    ext = re.search(r"\.[A-Za-z0-9]{2,4}$", gold)
    tail = f"{rng.choice(_PATH_WORDS)}-{rng.randrange(2019, 2031)}{ext.group(0) if ext else ''}"
    return f"https://{rng.choice(_HOSTS)}/{rng.choice(_WORDS)}/{tail}"


def _fact(rng: Random) -> tuple[str, str]:
    kind = rng.randrange(4)
    if kind == 0:
        p = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        return f"Please also loop in {p}.", p
    if kind == 1:
        ref = f"REF-{rng.randrange(10000, 99999)}"
        return f"The reference number is {ref}.", ref
    if kind == 2:
        town, _ = rng.choice(_TOWNS)
        addr = f"{rng.randrange(2, 99)} {rng.choice(_STREETS)}, {town}"
        return f"We will meet at {addr}.", addr
    p = rng.choice(_LAST)
    return f"Mr {p} has already approved it.", p


def invent_value(kind: ValueKind, key: str, gold: str, g: Grounding,
                 rng: Random) -> Invented | None:
    """Invent a value of ``kind`` for ``key`` (gold ``gold``) that is :func:`absent` from ``g``.

    Returns:
        The invented value, or ``None`` if 40 tries found nothing absent.
    """
    for _ in range(40):
        keep: tuple[str, ...] = ()
        fact: str | None = None
        strategy = kind
        if kind == "person":
            new = _person(gold, rng)
        elif kind == "username":
            new = _username(gold, rng)
        elif kind == "password":
            new, keep = _password(gold, rng)
        elif kind in ("identifier", "secret", "phone"):
            new, keep = _redraw(gold, rng)
        elif kind == "code":
            if re.fullmatch(r"[A-Z]{3}", gold) and "currenc" in key.casefold():
                new = rng.choice(_CURRENCIES)
            else:
                new, keep = _redraw(gold, rng)
        elif kind == "email":
            new = f"{rng.choice(_FIRST).lower()}.{rng.choice(_LAST).lower()}@{rng.choice(_DOMAINS)}"
        elif kind == "url":
            new = _url(gold, rng)
        elif kind == "address":
            if gold.startswith("/") or "\\" in gold:
                new = _path(gold, rng)
            else:
                town, pc = rng.choice(_TOWNS)
                new = f"{rng.randrange(2, 180)} {rng.choice(_STREETS)}, {town} {pc}"
        elif kind == "formula":
            fn = rng.choice(("MEDIAN", "STDEV", "COUNTA", "PRODUCT", "VAR"))
            col = rng.choice("FGHJKLMN")
            a = rng.randrange(3, 9)
            new = f"={fn}({col}{a}:{col}{a + rng.randrange(12, 60)})"
        elif kind == "keyword":
            new = rng.choice(_CHINESE) if _CJK.search(gold) else rng.choice(_KEYWORDS)
        elif kind == "location":
            if _CJK.search(gold):
                new = rng.choice(_CHINESE)
            elif re.fullmatch(r"-?\d+\.\d+,\s*-?\d+\.\d+", gold):
                new, keep = _redraw(gold, rng)
            else:
                new = rng.choice(_CITIES)
                if "," in gold:
                    new = f"{new}, {rng.choice(('Austria', 'Estonia', 'Norway', 'Slovenia'))}"
        elif kind == "title":
            new = _title(key, gold, rng)
        elif kind == "free_text":
            sentence, fact = _fact(rng)
            new = f"{gold.rstrip()} {sentence}"
        elif kind == "date":
            try:
                base = dt.date.fromisoformat(gold[:10])
            except ValueError:
                return None
            day = base + dt.timedelta(days=rng.choice((-1, 1)) * rng.randint(3, 200))
            if _date_said(day, g):
                continue
            new = day.isoformat() + gold[10:]
        elif kind == "time":
            m = re.fullmatch(r"(\d{1,2}):(\d{2})", gold)
            if m is None:
                return None
            hh, mm = rng.randrange(6, 23), rng.choice((0, 10, 20, 40, 50))
            if _time_said(hh, mm, g) or (hh, mm) == (int(m.group(1)), int(m.group(2))):
                continue
            new = f"{hh:02d}:{mm:02d}"
        else:
            return None
        fact = new if fact is None else fact
        if fact.casefold() != gold.casefold() and absent(fact, g, keep=keep):
            return Invented(new, fact, strategy, keep)
    return None


def invent_number(value: int | float, schema: Mapping[str, Any], g: Grounding,
                  rng: Random) -> int | float | None:
    """Another number of the same type, within the schema's bounds, that the text never states.

    Neither with digits nor, for integers below 100, in words.
    """
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if isinstance(value, int):
        cands: list[int | float] = [value + d for d in (1, 2, 3, 5, 7, 11, 13, 25, 100)]
        cands += [value - d for d in (1, 2, 3, 5, 7)] + [value * 2, value * 3]
    else:
        decimals = len(repr(value).partition(".")[2]) or 1
        cands = [round(value + k * 10.0 ** -decimals, decimals) for k in (3, 7, 11, -3, -7)]
        cands += [round(value * f, decimals) for f in (1.5, 0.5, 1.25)]
    rng.shuffle(cands)
    for c in cands:
        if c == value or c == schema.get("default") or (value >= 0 > c):
            continue
        if (lo is not None and c < lo) or (hi is not None and c > hi):
            continue
        if float(c) in g.numbers:
            continue
        if float(c).is_integer() and 0 <= c < 100 and re.search(
                rf"\b{re.escape(number_words(int(c)))}\b", g.text):
            continue
        return c
    return None


# ============================================================================ targets
@dataclass(slots=True)
class Target:
    """One gold call to build cases from, with what the perturbations need.

    Attributes:
        record: Record id (case ids are ``{record}:{perturbation}``).
        category: ``dialogues:<domain>``, ``toolbench`` or ``critictool``.
        history: Messages before the call.
        tools: Function docs ``{name, description, parameters}`` of the tool list.
        name: Gold tool.
        args: Gold arguments.
        call_id: Id of the call.
        kinds: Tool -> parameter -> value kind (``None``: a setting, not a user fact).
        avoid: Tools whose purpose fits the step (never used as ``irrelevant_tool``).
        pool: ``(kind, value)`` pairs stated in the conversation, for the arguments of an
            ``irrelevant_tool`` call.
        grounding: What invented values must be absent from.
        seed: Suite seed.
        meta: Metadata put on every case of the target.
    """

    record: str
    category: str
    history: list[BaseMessage]
    tools: list[dict[str, Any]]
    name: str
    args: dict[str, Any]
    call_id: str
    kinds: Mapping[str, Mapping[str, ValueKind | None]]
    avoid: frozenset[str]
    pool: list[tuple[ValueKind | None, Any]]
    grounding: Grounding
    seed: int
    meta: dict[str, Any] = field(default_factory=dict)

    def rng(self, what: str) -> Random:
        return Random(f"{self.seed}:{self.record}:{what}")

    def doc(self, name: str) -> dict[str, Any]:
        return next(d for d in self.tools if d["name"] == name)

    def case(self, p: Perturbation, name: str, args: Mapping[str, Any], *, target: bool = True,
             record: str | None = None, **meta: Any) -> Case:
        msg = AIMessage(content="", tool_calls=[ToolCall(name=name, args=dict(args),
                                                          id=self.call_id, type="tool_call")])
        return Case(id=f"{record or self.record}:{p}", category=self.category, perturbation=p,
                    label=PERTURBATION_LABELS[p], messages=[*self.history, msg],
                    tools=self.tools, tools_key=tools_key(self.tools),
                    target=0 if target else None,
                    metadata={**self.meta, "gold_tool": self.name, **meta})


def _props(doc: Mapping[str, Any]) -> dict[str, Any]:
    return dict((doc.get("parameters") or {}).get("properties") or {})


def _required(doc: Mapping[str, Any]) -> list[str]:
    return list((doc.get("parameters") or {}).get("required") or [])


def schema_errors(doc: Mapping[str, Any], args: Mapping[str, Any]) -> list[str]:
    """Schema violations of ``args`` plus unknown keys (as :func:`detector_suite.gold_problems`)."""
    params = ToolSpec.from_bfcl(doc).parameters
    errors = [e.message for e in Draft202012Validator(params).iter_errors(dict(args))]
    props = _props(doc)
    return errors + [f"unknown parameter {k!r}" for k in args if props and k not in props]


def _json_type(schema: Any) -> str | None:
    t = schema.get("type") if isinstance(schema, Mapping) else None
    return t if isinstance(t, str) else None


def _fits(value: Any, jt: str | None) -> bool:
    if jt == "string":
        return isinstance(value, str)
    if jt == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if jt == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if jt == "boolean":
        return isinstance(value, bool)
    if jt == "array":
        return isinstance(value, list)
    return False


# ---------------------------------------------------------------------------- perturbers
def _fabricated(t: Target) -> Case:
    rng = t.rng("fabricated")
    new, strategy = fabricate_name(t.name, [d["name"] for d in t.tools], rng)
    return t.case("fabricated", new, t.args, tool=new, strategy=strategy)


def _irrelevant(t: Target) -> Case | None:
    rng = t.rng("irrelevant_tool")
    others = sorted(d["name"] for d in t.tools if d["name"] not in t.avoid
                    and d["name"] != t.name)
    rng.shuffle(others)
    # tools that take arguments first: a call with grounded arguments is the harder case
    others.sort(key=lambda n: not _required(t.doc(n)))
    earlier = {(tc["name"], json.dumps(tc["args"], sort_keys=True))
               for m in t.history if isinstance(m, AIMessage) for tc in m.tool_calls}
    for other in others:
        doc = t.doc(other)
        args = _irrelevant_args(t, doc, rng)
        # never an exact repeat of an earlier call (that would also be a timing case)
        if args is not None and not schema_errors(doc, args) and (
                other, json.dumps(args, sort_keys=True)) not in earlier:
            return t.case("irrelevant_tool", other, args, tool=other, keys=sorted(args))
    return None


def _irrelevant_args(t: Target, doc: Mapping[str, Any], rng: Random) -> dict[str, Any] | None:
    """Grounded arguments for the required parameters of ``doc`` (``None`` if impossible)."""
    props = _props(doc)
    kinds = t.kinds.get(doc["name"], {})
    out: dict[str, Any] = {}
    for key in _required(doc):
        sub = props.get(key)
        if not isinstance(sub, Mapping):
            return None
        jt = _json_type(sub)
        if key in t.args and _fits(t.args[key], jt) and (
                "enum" not in sub or t.args[key] in sub["enum"]):
            out[key] = t.args[key]
            continue
        if isinstance(sub.get("enum"), list) and sub["enum"]:
            out[key] = rng.choice(sub["enum"])
            continue
        if "default" in sub and _fits(sub["default"], jt):
            out[key] = sub["default"]
            continue
        if jt == "boolean":
            out[key] = True
            continue
        kind = kinds.get(key)
        item_jt = _json_type(sub.get("items")) if jt == "array" else jt
        same = [v for k, v in t.pool if k == kind and kind is not None and _fits(v, item_jt)]
        if not same and item_jt in ("integer", "number"):
            same = [v for k, v in t.pool if _fits(v, item_jt) and not isinstance(v, bool)
                    and (sub.get("minimum") is None or v >= sub["minimum"])
                    and (sub.get("maximum") is None or v <= sub["maximum"])]
        if not same and "example_value" in sub and _fits(sub["example_value"], item_jt):
            same = [sub["example_value"]]  # grounded in the tool's own doc (rule 2)
        if not same:
            return None
        value = rng.choice(same)
        out[key] = [value] if jt == "array" else value
    return out


def _drop_required(t: Target) -> Case | None:
    doc = t.doc(t.name)
    keys = [k for k in _required(doc) if k in t.args]
    if not keys:
        return None
    key = t.rng("drop_required").choice(keys)
    return t.case("drop_required", t.name, {k: v for k, v in t.args.items() if k != key},
                  key=key)


def _rename_key(t: Target) -> Case | None:
    if not t.args:
        return None
    rng = t.rng("rename_key")
    key = rng.choice(sorted(t.args))
    doc = t.doc(t.name)
    new_key, strategy = rename_key(key, set(_props(doc)) | set(t.args), rng)
    args = {(new_key if k == key else k): v for k, v in t.args.items()}
    return t.case("rename_key", t.name, args, key=key, new_key=new_key, strategy=strategy,
                  required=key in _required(doc))


def _wrong_type(t: Target) -> Case | None:
    rng = t.rng("wrong_type")
    doc = t.doc(t.name)
    props = _props(doc)
    keys = sorted(k for k, v in t.args.items() if _fits(v, _json_type(props.get(k))))
    rng.shuffle(keys)
    for key in keys:
        jt = _json_type(props[key])
        assert jt is not None
        new = wrong_type_value(t.args[key], jt, rng)
        args = {**t.args, key: new}
        params = ToolSpec.from_bfcl(doc).parameters
        if any(e.validator == "type" for e in Draft202012Validator(params).iter_errors(args)):
            return t.case("wrong_type", t.name, args, key=key, expected=jt, old=t.args[key],
                          new=new)
    return None


def value_slots(t: Target) -> list[tuple[str, int | None, ValueKind]]:
    """``(key, list index or None, kind)`` of the string values ``invented_value`` may change."""
    props = _props(t.doc(t.name))
    kinds = t.kinds.get(t.name, {})
    out: list[tuple[str, int | None, ValueKind]] = []
    for key, value in t.args.items():
        kind = kinds.get(key)
        sub = props.get(key) or {}
        if kind is None or kind in ("number", "amount") or "enum" in sub:
            continue
        if isinstance(value, str) and value.strip():
            out.append((key, None, kind))
        elif isinstance(value, list) and value and isinstance(value[0], str) and not (
                isinstance(sub.get("items"), Mapping) and "enum" in sub["items"]):
            out.append((key, 0, kind))
    return out


_COMMON_KINDS: Final = frozenset({"identifier", "keyword", "secret"})
_RARE_KINDS: Final = frozenset({"username", "password", "url", "formula", "email", "address",
                                "phone"})


def _invented_value(t: Target, *, avoid_kinds: Iterable[str] = (),
                    only_kinds: Iterable[str] | None = None) -> Case | None:
    rng = t.rng("invented_value")
    slots = value_slots(t)
    if only_kinds is not None:
        wanted = set(only_kinds)
        slots = [s for s in slots if s[2] in wanted]
    skip = set(avoid_kinds)
    by_kind: dict[str, list[tuple[str, int | None, ValueKind]]] = defaultdict(list)
    for s in slots:
        by_kind[s[2]].append(s)
    # rarer kinds first, so the suite covers credentials, URLs, formulas, ... and not
    # mostly ids: ``_COMMON_KINDS`` go last
    order = sorted(by_kind, key=lambda k: (k in skip, k in _COMMON_KINDS, rng.random()))
    for kind in order:
        for key, idx, vk in by_kind[kind]:
            gold = t.args[key] if idx is None else t.args[key][idx]
            made = invent_value(vk, key, str(gold), t.grounding, rng)
            if made is None:
                continue
            value: Any = made.value
            if idx is not None:
                value = [made.value, *t.args[key][1:]]
            args = {**t.args, key: value}
            if schema_errors(t.doc(t.name), args):
                continue
            path = key if idx is None else f"{key}[{idx}]"
            return t.case("invented_value", t.name, args, key=path, kind=vk, old=gold,
                          new=made.value, invented=made.fact, keep=list(made.keep))
    return None


def _invented_number(t: Target) -> Case | None:
    rng = t.rng("invented_number")
    props = _props(t.doc(t.name))
    kinds = t.kinds.get(t.name, {})
    keys = sorted(k for k, v in t.args.items()
                  if isinstance(v, int | float) and not isinstance(v, bool)
                  and kinds.get(k) is not None and "enum" not in (props.get(k) or {}))
    rng.shuffle(keys)
    for key in keys:
        new = invent_number(t.args[key], props.get(key) or {}, t.grounding, rng)
        if new is None:
            continue
        args = {**t.args, key: new}
        if schema_errors(t.doc(t.name), args):
            continue
        return t.case("invented_number", t.name, args, key=key, kind=kinds.get(key),
                      old=t.args[key], new=new)
    return None


_PERTURBERS: Final[dict[Perturbation, Callable[[Target], Case | None]]] = {
    "fabricated": _fabricated,
    "irrelevant_tool": _irrelevant,
    "drop_required": _drop_required,
    "rename_key": _rename_key,
    "wrong_type": _wrong_type,
    "invented_value": _invented_value,
    "invented_number": _invented_number,
}


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
        out.append(Target(
            record=f"{d.id}@{k}", category=f"dialogues:{d.domain}", history=history,
            tools=tools, name=step.name, args=dict(step.args), call_id=step.call_id,
            kinds=kinds, avoid=avoid, pool=list(pool),
            grounding=_grounding_of(history, tools, today), seed=seed,
            meta={"source": "dialogues", "dialogue": d.id, "step": k, "turn": ti,
                  "turn_kind": d.turns[ti].kind}))
    return out


def dialogue_cases(d: Dialogue, corpus: Corpus, *, seed: int = 0) -> list[Case]:
    """The cases of one dialogue (see module docstring)."""
    targets = dialogue_targets(d, corpus, seed=seed)
    if not targets:
        return []
    rng = Random(f"{seed}:{d.id}:plan")
    out = [targets[0].case("gold", targets[0].name, targets[0].args, target=False)]
    later = list(range(1, len(targets)))
    for k in sorted(rng.sample(later, min(NEXT_CALLS_PER_DIALOGUE, len(later)))):
        t = targets[k]
        out.append(t.case("next_call", t.name, t.args, target=False))
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
                made = _invented_value(targets[k], avoid_kinds=kinds_done)
                if made is not None:
                    kinds_done.append(str(made.metadata["kind"]))
            else:
                made = _PERTURBERS[p](targets[k])
            if made is not None:
                out.append(made)
                used.add((targets[k].record, p))
                wanted -= 1
    # rarer kinds the dialogue has but the two picks missed get one case each
    for k in order:
        if (targets[k].record, "invented_value") in used:
            continue
        rare = {kind for _, _, kind in value_slots(targets[k])} & _RARE_KINDS
        if rare - set(kinds_done):
            made = _invented_value(targets[k], only_kinds=rare - set(kinds_done))
            if made is not None:
                out.append(made)
                used.add((targets[k].record, "invented_value"))
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
                tools_key=tools_key(t.tools), target=0,
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

    See the module docstring for the rules; every required parameter must be filled.
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
        if (len(unused) == 1 and _json_type(spec.properties[pname]) == "string"
                and (not _ID_KEY.search(pname) or re.search(r"\d", unused[0]))):
            values[pname], how[pname] = unused[0], "the query's quoted value"
    missing = [n for n, _ in required if n not in values]
    if missing:
        return f"no confident value for required parameter {missing[0]!r}"
    args: dict[str, Any] = {}
    for pname, value in values.items():
        jt = _json_type(spec.properties[pname])
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
        targets.append(Target(
            record=f"toolbench:{c.id}", category="toolbench", history=history, tools=tools,
            name=spec.name, args=args, call_id="call_0", kinds=kinds,
            avoid=frozenset(avoid), pool=pool,
            grounding=_grounding_of(history, tools, None), seed=seed,
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
    all_kinds = {d["name"]: {k: _ct_kind(kit, k) for k in _props(d)}
                 for kit, docs in kits.items() for d in docs}
    for kit, docs in kits.items():
        for doc in docs:
            api = doc["name"]
            templates = _CT_REQUESTS.get(api)
            if not templates:
                skipped[api] = "no request written"
                continue
            n = CRITICTOOL_PER_API if _props(doc) else 2
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
                missing = [r for r in _required(doc) if r not in args]
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
                targets.append(Target(
                    record=f"critictool:{api}#{k}", category="critictool", history=history,
                    tools=tools, name=api, args=args, call_id="call_0", kinds=all_kinds,
                    avoid=frozenset(d["name"] for d in docs),
                    pool=[(all_kinds[api].get(f), v) for f, v in args.items()],
                    grounding=_grounding_of(history, tools, None), seed=seed,
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
    out = [t.case("gold", t.name, t.args, target=False)]
    for p in SINGLE_STEP:
        made = _PERTURBERS[p](t)
        if made is not None:
            out.append(made)
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


__all__ = ["SOURCES", "Grounding", "Invented", "SuiteB", "Target", "absent", "build",
           "build_suite_b", "critictool_docs", "critictool_targets", "derive_toolbench_call",
           "dialogue_cases", "dialogue_targets", "guess_kind", "invent_number", "invent_value",
           "main", "print_report", "run", "schema_errors", "single_step_cases",
           "toolbench_param_name", "toolbench_targets", "value_slots"]

if __name__ == "__main__":  # pragma: no cover
    import argparse

    parser = argparse.ArgumentParser(description="Suite B: build, run the guard, report.")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--mode", default="deterministic")
    a = parser.parse_args()
    main(a.json_path, seed=a.seed, limit=a.limit, mode=a.mode)
