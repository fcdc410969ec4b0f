"""Values that occur nowhere in a target's conversation and tools, to put in a wrong call.

Two ways to invent one, as the two detector suites define their cases:

- by the value's shape, for targets whose parameters declare no value kind (BFCL records):
  :func:`string_kind` classifies the gold string, :func:`invent_string` and
  :func:`invent_number` make one of the same shape that the target does not contain;
- by the parameter's declared kind (:data:`~toolguard_evals.dialogues.records.ValueKind`,
  suite B's sources): :func:`invent_value` and :func:`invent_kind_number` make one that is
  :func:`absent` from the target's :class:`Grounding`, not even in part, and for dates and
  times not said in words either.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import string
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from random import Random
from typing import TYPE_CHECKING, Any, Final, Literal

from toolguard_evals import bfcl
from toolguard_evals.detector_suite._vocab import (
    CITIES,
    CITY_STATE,
    COMMON_NOUNS,
    FIRST_NAMES,
    LAST_NAMES,
    LOCATION_TOKENS,
    PERSON_TOKENS,
    PROPER_NOUNS,
    SMALL_WORDS,
    TENS_WORDS,
)
from toolguard_evals.detector_suite.records import SUITE_CATEGORIES
from toolguard_evals.dialogues.framework import numbers_in
from toolguard_evals.dialogues.records import ValueKind

if TYPE_CHECKING:
    from toolguard_evals.detector_suite.target import Target


# ============================================================================ words
def number_words(n: int) -> str:
    """English words for an integer: ``25`` -> ``"twenty-five"``, ``-3`` -> ``"minus three"``."""
    if n < 0:
        return "minus " + number_words(-n)
    if n < 20:
        return SMALL_WORDS[n]
    if n < 100:
        tens, rest = divmod(n, 10)
        return TENS_WORDS[tens] + (f"-{SMALL_WORDS[rest]}" if rest else "")
    for size, word in ((10**9, "billion"), (10**6, "million"), (1000, "thousand"),
                       (100, "hundred")):
        if n >= size:
            head, rest = divmod(n, size)
            tail = f" {number_words(rest)}" if rest else ""
            return f"{number_words(head)} {word}{tail}"
    raise AssertionError("unreachable")


def words_for(value: int | float) -> str:
    """English words for a number: ``2.5`` -> ``"two point five"``."""
    if isinstance(value, int) or float(value).is_integer():
        return number_words(int(value))
    whole, _, frac = format(Decimal(repr(float(value))), "f").partition(".")
    digits = " ".join(SMALL_WORDS[int(d)] for d in frac if d.isdigit())
    return f"{number_words(int(whole))} point {digits}"


def key_tokens(key: str) -> list[str]:
    """The lower-case words of a parameter name (``startDate`` -> ``["start", "date"]``)."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key)
    return [t.lower() for t in re.split(r"[_\W]+", spaced) if t]

# ============================================================================ numbers in text
_NUMBER_RE = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")


@functools.lru_cache(maxsize=8192)
def numbers_of(text: str) -> frozenset[float]:
    """The numbers written with digits in ``text`` (``1,200`` is 1200)."""
    out: set[float] = set()
    for m in _NUMBER_RE.finditer(text):
        try:
            out.add(float(m.group(0).replace(",", "")))
        except ValueError:
            continue
    return frozenset(out)


# ============================================================================ by shape
_DATE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_CITY_STATE_RE = re.compile(r"^[A-Z][\w .'-]+, [A-Z]{2}$")
_ID_CHARS = re.compile(r"[_\-@/.:#]")
_PROTECTED = re.compile(r"^[a-z]+://|www\.|\.(?:com|org|net|io|edu|gov|txt|pdf|csv|json|py|"
                        r"jpg|png|html|md)\b|@", re.I)

StringKind = Literal["date", "id", "numbered", "location", "person", "proper", "text"]


def string_kind(key: str, value: str) -> StringKind:
    """Classify a string argument, to invent one of the same kind."""
    if _DATE_RE.match(value):
        return "date"
    words = value.split()
    if len(words) == 1 and (re.search(r"\d", value) or _ID_CHARS.search(value)):
        return "id"
    tokens = set(key_tokens(key))
    if re.search(r"\d", value) and not tokens & LOCATION_TOKENS:
        return "numbered"
    if (tokens & LOCATION_TOKENS or _CITY_STATE_RE.match(value)
            or value.casefold() in {c.casefold() for c in (*CITIES, *CITY_STATE)}):
        return "location"
    titled = bool(words) and all(w[:1].isupper() and w.replace("-", "").replace("'", "")
                                 .isalpha() for w in words)
    if titled and len(words) <= 3 and (tokens & PERSON_TOKENS or key.lower() in
                                       {"name", "full_name", "first_name", "last_name"}):
        return "person"
    if any(w[:1].isupper() for w in words):
        return "proper"
    return "text"


@functools.cache
def _value_pool() -> dict[str, tuple[str, ...]]:
    """Key -> distinct gold string values over the suite's categories (for same-kind values)."""
    pool: dict[str, set[str]] = defaultdict(set)
    for category in SUITE_CATEGORIES:
        for record in bfcl.load_category(category):
            for _, args in bfcl.gold_calls(record):
                for k, v in args.items():
                    if isinstance(v, str) and 3 <= len(v) <= 60:
                        pool[k].add(v)
    return {k: tuple(sorted(v)) for k, v in pool.items()}


def invent_string(key: str, value: str, t: Target,
                  rng: Random) -> tuple[str, StringKind] | None:
    """Invent a value of the same kind as ``value`` that occurs nowhere in the target.

    - ``date`` (``YYYY-MM-DD``): shifted by 3-300 days.
    - ``id`` (one token with digits or ``_-@/.:#``): every letter/digit redrawn, except
      URL schemes, ``www.``, common extensions and ``@``.
    - ``numbered`` (several words with digits, e.g. ``"Room 101"``): digits redrawn.
    - ``location``/``person``/``proper``/``text``: the same key's gold value from another
      BFCL record, if one of the same kind is absent here, else a fixed list (cities,
      ``"City, ST"``, first/last names, proper nouns, common nouns).

    Returns:
        ``(new_value, kind)``, or ``None`` if nothing absent could be made.

    """
    kind = string_kind(key, value)
    gold = value.casefold()

    def ok(v: str) -> bool:
        return bool(v) and v.casefold() != gold and gold not in v.casefold() and (
            v.casefold() not in gold) and t.absent(v)

    if kind == "date":
        y, m, d = (int(x) for x in value.split("-"))
        try:
            base = dt.date(y, m, d)
        except ValueError:
            base = dt.date(y, 1, 1)
        for _ in range(20):
            shifted = base + dt.timedelta(days=rng.choice((-1, 1)) * rng.randint(3, 300))
            if ok(shifted.isoformat()):
                return shifted.isoformat(), kind
        return None
    if kind in ("id", "numbered"):
        for _ in range(20):
            new = _redraw_chars(value, rng, digits_only=kind == "numbered")
            if ok(new):
                return new, kind
        return None
    pool = [v for v in _value_pool().get(key, ()) if string_kind(key, v) == kind and ok(v)]
    if pool:
        return rng.choice(pool), kind
    fallback: tuple[str, ...]
    if kind == "location":
        fallback = CITY_STATE if _CITY_STATE_RE.match(value) else CITIES
    elif kind == "person":
        n_words = len(value.split())
        fallback = tuple(f"{f} {last}" for f in FIRST_NAMES for last in LAST_NAMES) if (
            n_words > 1) else FIRST_NAMES
    elif kind == "proper":
        fallback = PROPER_NOUNS
    else:
        fallback = COMMON_NOUNS
    options = [v for v in fallback if ok(v)]
    return (rng.choice(options), kind) if options else None


def _redraw_chars(value: str, rng: Random, *, digits_only: bool = False) -> str:
    keep = [False] * len(value)
    for m in _PROTECTED.finditer(value):
        for j in range(m.start(), m.end()):
            keep[j] = True
    out = []
    for ch, kept in zip(value, keep, strict=True):
        if kept or not ch.isascii() or (digits_only and not ch.isdigit()):
            out.append(ch)
        elif ch.isdigit():
            out.append(rng.choice(string.digits))
        elif ch.islower():
            out.append(rng.choice(string.ascii_lowercase))
        elif ch.isupper():
            out.append(rng.choice(string.ascii_uppercase))
        else:
            out.append(ch)
    return "".join(out)


def invent_number(value: int | float, t: Target, schema: Mapping[str, Any],
                  rng: Random) -> int | float | None:
    """Invent another number of the same type, within the schema's bounds, that no text mentions."""
    lo, hi = schema.get("minimum"), schema.get("maximum")
    default = schema.get("default")
    if isinstance(value, int):
        deltas = [1, 2, 3, 4, 5, 7, 10, 12, 25, 100]
        cands: list[int | float] = [value + d for d in deltas]
        cands += [value - d for d in deltas] + [value * 2, value * 3, value * 10]
    else:
        decimals = len(repr(value).partition(".")[2]) or 1
        step = 10.0 ** -min(decimals, 6)
        cands = [round(value + k * step, decimals) for k in (1, 2, 3, 5, 7, 11, -1, -2, -3, -5)]
        cands += [round(value * f, decimals) for f in (1.5, 2.0, 0.5)]
    rng.shuffle(cands)
    for c in cands:
        if c in (value, default) or value >= 0 > c:
            continue
        if (lo is not None and c < lo) or (hi is not None and c > hi):
            continue
        if t.number_absent(c):
            return c
    return None


# ============================================================================ by declared kind
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


def date_said(day: dt.date, g: Grounding) -> bool:
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


def time_said(hh: int, mm: int, g: Grounding) -> bool:
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
            if date_said(day, g):
                continue
            new = day.isoformat() + gold[10:]
        elif kind == "time":
            m = re.fullmatch(r"(\d{1,2}):(\d{2})", gold)
            if m is None:
                return None
            hh, mm = rng.randrange(6, 23), rng.choice((0, 10, 20, 40, 50))
            if time_said(hh, mm, g) or (hh, mm) == (int(m.group(1)), int(m.group(2))):
                continue
            new = f"{hh:02d}:{mm:02d}"
        else:
            return None
        fact = new if fact is None else fact
        if fact.casefold() != gold.casefold() and absent(fact, g, keep=keep):
            return Invented(new, fact, strategy, keep)
    return None


def invent_kind_number(value: int | float, schema: Mapping[str, Any], g: Grounding,
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

