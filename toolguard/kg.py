"""Knowledge-graph parameter resolution (KGETool, FamilyTool paper).

- :class:`KnowledgeGraph`: (head, relation, tail) triples on a networkx ``MultiDiGraph``
  (one edge per triple, keyed by relation), mutable at run time, read from FamilyTool's
  KG files (one Python list literal per line, parsed with :func:`ast.literal_eval`).
- :meth:`KnowledgeGraph.extract`: FamilyTool's ``extractpath`` (greedy, first tail in
  insertion order, ``<bad_extract>`` when the start entity or a relation is missing).
- :func:`kg_search`: FamilyTool's ``KG_search`` on a model response: every
  ``KG.search(start=..., path=[...])`` call is parsed and extracted; the result string is
  what the paper's pipeline puts into the query (``""`` when there is no call).
- :class:`DeterministicPathGenerator`: no-LLM relation-path generation: the speaker from
  ``<speak>Speaker: Bob</speak>``, possessive / kinship chains anchored at the speaker
  ("my father's mother's ...", "my mom's ..."), named people, and the attribute phrase
  mapped onto the KG's relation names with a synonym lexicon and rapidfuzz similarity.

Extraction modes (:data:`ExtractionMode`): ``exact`` follows the path as written;
``gs`` (greedy search) replaces, hop by hop, a relation missing at the current entity
by the most similar relation leaving it; ``rr`` (relation retrieval) replaces each
relation unknown to the KG by its top-k most similar KG relations and keeps every
resulting path that resolves (distinct end entities), as FamilyTool's
``extractpath_relationretrieval`` does (string similarity instead of jina embeddings).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import networkx as nx  # type: ignore[import-untyped]  # no stubs installed
from rapidfuzz import fuzz

Triple = tuple[str, str, str]
"""One fact: ``(head, relation, tail)``."""

ExtractionMode = Literal["exact", "gs", "rr"]
"""Path extraction: exact path, greedy search, relation retrieval (top-k)."""

BAD_EXTRACT = "<bad_extract>"
"""FamilyTool's marker for an extraction that hit a missing entity or relation."""

_SEARCH_CALL = re.compile(r"KG.search\((.*?)\)")
_START = re.compile(r"start=([^,]+)")
_PATH = re.compile(r"path=\[([^\]]+)\]")
_TAG = re.compile(r"<.*?>")
_SPEAKER = re.compile(r"<speak>\s*Speaker\s*:\s*(.*?)\s*\.?\s*</speak>", re.I | re.S)


class KnowledgeGraph:
    """A set of (head, relation, tail) triples kept in insertion order.

    Backed by a networkx ``MultiDiGraph`` with one edge ``head -> tail`` keyed by the
    relation; each edge stores an insertion counter ``seq`` so that "first tail"
    means the same as in FamilyTool's list-based ``KnowledgeGraph``.
    """

    def __init__(self, triples: Iterable[Sequence[str]] = ()) -> None:
        self.graph: nx.MultiDiGraph = nx.MultiDiGraph()
        self._seq = itertools.count()
        for triple in triples:
            self.add(*triple)

    @classmethod
    def from_file(cls, path: str | Path) -> KnowledgeGraph:
        """Read a FamilyTool KG file (``['Bob', 'mother', 'Alice']`` per line).

        Raises:
            ValueError: If a non-empty line is not a list/tuple of three strings.
        """
        kg = cls()
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            value = ast.literal_eval(line.strip())
            if not (isinstance(value, list | tuple) and len(value) == 3
                    and all(isinstance(v, str) for v in value)):
                raise ValueError(f"{path}:{n}: expected [head, relation, tail], got {line!r}")
            kg.add(*value)
        return kg

    def add(self, head: str, relation: str, tail: str) -> bool:
        """Add a triple; returns False if it was already there."""
        if self.graph.has_edge(head, tail, key=relation):
            return False
        self.graph.add_edge(head, tail, key=relation, seq=next(self._seq))
        return True

    def remove(self, head: str, relation: str, tail: str) -> bool:
        """Remove a triple (and entities left without edges); False if absent."""
        if not self.graph.has_edge(head, tail, key=relation):
            return False
        self.graph.remove_edge(head, tail, key=relation)
        for node in (head, tail):
            if node in self.graph and self.graph.degree(node) == 0:
                self.graph.remove_node(node)
        return True

    def __len__(self) -> int:
        return int(self.graph.number_of_edges())

    def __contains__(self, triple: object) -> bool:
        if not (isinstance(triple, tuple | list) and len(triple) == 3):
            return False
        h, r, t = triple
        return bool(self.graph.has_edge(h, t, key=r))

    def triples(self) -> list[Triple]:
        """All triples in insertion order."""
        edges = sorted(self.graph.edges(keys=True, data="seq"), key=lambda e: e[3])
        return [(h, r, t) for h, t, r, _ in edges]

    @property
    def relations(self) -> list[str]:
        """Distinct relation names, in order of first appearance."""
        return list(dict.fromkeys(r for _, r, _ in self.triples()))

    @property
    def entities(self) -> list[str]:
        """All entities (heads and tails)."""
        return list(self.graph.nodes)

    def is_head(self, entity: str | None) -> bool:
        """True if ``entity`` starts at least one triple (FamilyTool's start check)."""
        if entity is None or entity not in self.graph:
            return False
        return bool(self.graph.out_degree(entity) > 0)

    def out(self, head: str) -> list[Triple]:
        """Triples leaving ``head``, in insertion order."""
        if head not in self.graph:
            return []
        edges = sorted(self.graph.out_edges(head, keys=True, data="seq"), key=lambda e: e[3])
        return [(h, r, t) for h, t, r, _ in edges]

    def tails(self, head: str, relation: str) -> list[str]:
        """Tails of ``(head, relation, ?)`` in insertion order."""
        return [t for _, r, t in self.out(head) if r == relation]

    def extract(self, start: str | None, path: Sequence[str]) -> tuple[list[list[Triple]], bool]:
        """FamilyTool's ``extractpath``: follow ``path`` from ``start`` greedily.

        Returns:
            ``(paths, bad)``: the extracted paths (lists of triples) and whether the
            extraction hit a missing start entity or relation (``<bad_extract>``).  On
            a missing relation at the first hop every triple of ``start`` opens a path;
            at a later hop the first failing path is extended by all triples of its
            current entity, as the pipeline does.
        """
        links: list[list[Triple]] = []
        nexts: list[str] = []
        bad = False
        for i, relation in enumerate(path):
            if i == 0:
                if start is None or not self.is_head(start):
                    return [], True
                candidates = self.out(start)
                found = self.tails(start, relation)
                if not found:
                    links = [[c] for c in candidates]
                    nexts = [c[2] for c in candidates]
                    bad = True
                else:
                    links = [[(start, relation, found[0])]]
                    nexts = [found[0]]
                continue
            if not nexts:
                bad = True
                continue
            for j, node in enumerate(nexts):
                if not self.is_head(node):
                    bad = True
                    continue
                found = self.tails(node, relation)
                if not found:
                    if not bad:
                        links[j].extend(self.out(node))
                        bad = True
                    continue
                links[j].append((node, relation, found[0]))
                nexts[j] = found[0]
        return links, bad

    def search(self, start: str, path: Sequence[str]) -> list[Triple]:
        """Triples of the exact greedy extraction (``KG.search`` of the paper), flattened."""
        paths, _ = self.extract(start, path)
        return list(dict.fromkeys(t for p in paths for t in p))


# --------------------------------------------------------------------- KG.search programs


def _clean_call(text: str) -> str:
    for ch in "\"'`‘’“” ":  # the quote forms the pipeline strips
        text = text.replace(ch, "")
    text = text.replace("，", ",").replace("】", "]").replace("【", "[")
    return _TAG.sub("", text)


def parse_search_calls(response: str) -> list[tuple[str | None, list[str] | None]]:
    """``(start, path)`` of every ``KG.search(...)`` call, parsed as FamilyTool does."""
    calls: list[tuple[str | None, list[str] | None]] = []
    for match in _SEARCH_CALL.findall(response):
        cleaned = _clean_call(match)
        start_m = _START.search(cleaned)
        path_m = _PATH.search(cleaned)
        start = start_m.group(1).strip() if start_m else None
        path = [p.strip() for p in path_m.group(1).split(",")] if path_m else None
        calls.append((start, path))
    return calls


def _longest(paths: list[list[Triple]]) -> list[list[Triple]]:
    lengths = {len(p) for p in paths}
    if len(lengths) == 1:
        return paths
    top = max(lengths)
    return [p for p in paths if len(p) == top]


def _similar(relation: str, candidates: Sequence[str], k: int) -> list[str]:
    scored = sorted(candidates, key=lambda c: -fuzz.ratio(relation, c))
    return list(scored[:k])


def _extract_gs(kg: KnowledgeGraph, start: str | None, path: Sequence[str]
                ) -> tuple[list[list[Triple]], bool]:
    if start is None or not kg.is_head(start):
        return [], True
    node, out = start, list[Triple]()
    for relation in path:
        rels = [r for _, r, _ in kg.out(node)]
        if not rels:
            return ([out] if out else []), True
        chosen = relation if relation in rels else _similar(relation, rels, 1)[0]
        tail = kg.tails(node, chosen)[0]
        out.append((node, chosen, tail))
        node = tail
    return [out], False


def _extract_rr(kg: KnowledgeGraph, start: str | None, path: Sequence[str], k: int
                ) -> tuple[list[list[Triple]], bool]:
    known = kg.relations
    options = [[r] if r in known else _similar(r, known, k) for r in path]
    paths: list[list[Triple]] = []
    ends: set[str] = set()
    if start is None:
        return [], True
    for combo in itertools.product(*options):
        node, out = start, list[Triple]()
        for relation in combo:
            found = kg.tails(node, relation)
            if not found:
                continue
            out.append((node, relation, found[0]))
            node = found[0]
        if out and out[-1][2] not in ends:
            ends.add(out[-1][2])
            paths.append(out)
    return paths, False


def kg_search(response: str, kg: KnowledgeGraph, *, mode: ExtractionMode = "exact",
              k: int = 3) -> str:
    """FamilyTool's ``KG_search``: the extracted sub-KG string for a model response.

    Each extracted path becomes ``([['h', 'r', 't'], ...])`` followed by ``<bad_extract>``
    when that call hit a missing link; a call without a parsable path adds
    ``<bad_extract>``; a response with no ``KG.search`` call gives ``""`` (a format
    error in the paper's metrics).  ``k`` is the top-k of relation retrieval.
    """
    calls = parse_search_calls(response)
    if not calls:
        return ""
    parts: list[str] = []
    for start, path in calls:
        if path is None:
            parts += ["", BAD_EXTRACT]
            continue
        if mode == "exact":
            paths, bad = kg.extract(start, path)
        elif mode == "gs":
            paths, bad = _extract_gs(kg, start, path)
        else:
            paths, bad = _extract_rr(kg, start, path, k)
        if paths:
            paths = _longest(paths)
        for p in paths:
            parts.append(f"({[list(t) for t in p]})")
            parts.append(BAD_EXTRACT if bad else "")
    return "".join(parts)


def search_program(start: str, path: Sequence[str]) -> str:
    """``KG.search(start="Bob", path=["mother","prefer_dinnertime"])`` as the paper writes it."""
    rels = ",".join(f'"{r}"' for r in path)
    return f'KG.search(start="{start}", path=[{rels}])'


def programs_for_links(links: Sequence[Sequence[str]]) -> list[str]:
    """``KG.search`` programs whose extraction is the given sub-KG (one per root-to-leaf path).

    Roots are heads that are no triple's tail (the first head if every head is one).
    """
    tails = {t for _, _, t in links}
    roots = list(dict.fromkeys(h for h, _, _ in links if h not in tails)) or [links[0][0]]
    out: list[str] = []

    def walk(node: str, rels: list[str], seen: frozenset[str]) -> None:
        nxt = [(r, t) for h, r, t in links if h == node and t not in seen]
        if not nxt:
            if rels:
                out.append(search_program(root, rels))
            return
        for r, t in nxt:
            walk(t, [*rels, r], seen | {t})

    for root in roots:
        walk(root, [], frozenset({root}))
    return out


# --------------------------------------------------------------- deterministic generator

_KIN: dict[str, tuple[str, ...]] = {
    "mother": ("mother", "mom", "mum", "mommy", "mama", "ma", "mam"),
    "father": ("father", "dad", "daddy", "papa", "pa", "pop"),
    "son": ("son", "child", "kid", "boy", "little one", "children", "kids"),
    "daughter": ("daughter", "child", "kid", "girl", "little one"),
    "child": ("child", "son", "daughter", "kid", "little one"),
    "husband": ("husband", "hubby", "spouse", "partner"),
    "wife": ("wife", "spouse", "partner"),
    "grandmother": ("grandmother", "grandma", "granny", "nana"),
    "grandfather": ("grandfather", "grandpa", "granddad", "grandad"),
    "brother": ("brother", "bro", "sibling"),
    "sister": ("sister", "sis", "sibling"),
}
"""Kinship relation name -> phrases that refer to it."""

_ATTR_SYNONYMS: dict[str, tuple[str, ...]] = {
    "dinnertime": ("dining time", "dinner", "meal", "meals", "mealtime", "eat", "dine time"),
    "appointment_time": ("appointment", "time", "appointments"),
    "appointment_with": ("meet", "meeting", "appointment location", "store", "use"),
    "pickup_location": ("picked up", "pick up", "pickup", "spot", "spots", "visit", "visiting"),
    "dining_location": ("dining", "dine", "eat", "dining spot", "dinner place"),
    "travel_city": ("travel city", "travel", "trip", "visit"),
    "travel_to": ("destination", "traveling", "travelling", "travel to"),
    "city": ("city", "cities", "area", "town"),
    "city_of_residence": ("lives", "live", "resides", "reside", "residence", "home city"),
    "home": ("home", "live", "house", "address"),
    "events_in": ("event type", "events", "event"),
    "event": ("event", "events"),
    "theater": ("theater", "theatre", "cinema", "movie theater", "go"),
    "hotel_location": ("stay", "hotel location", "staying", "vacation", "hotel is"),
    "hotel": ("hotel",),
    "hotel_stars": ("stars", "star", "hotel stars"),
    "genre": ("genre", "music"),
    "song": ("song", "track", "tune"),
    "playlist": ("playlist", "listens"),
    "movie": ("movie", "film", "watch"),
    "movies_directed_by": ("director", "directed"),
    "show_type": ("show",),
    "account_number": ("account", "bank", "wallet", "balance", "transactions"),
    "phone_number": ("phone", "number", "call"),
    "birthday": ("birthday", "born"),
    "bedroom_room": ("bedroom", "room", "lights"),
    "living_apartment": ("apartment", "living"),
    "favourite_restaurant": ("restaurant", "table", "dining at", "eatery"),
    "favourite_performance": ("performance", "show", "concert"),
    "concerts_in": ("concert", "concerts"),
    "sports": ("sports", "sport"),
    "sports_in": ("sports venue", "venue", "stadium"),
    "payment_method": ("payment", "method", "pay"),
    "seating_class": ("seating", "seat", "class"),
    "travel_mode": ("travel mode", "mode"),
    "transport": ("transport", "transportation"),
    "train": ("train",),
    "airline": ("airline", "fly", "flight"),
    "car_rental": ("rental", "rent"),
    "car_type": ("car type", "suv", "car"),
    "license_plate": ("license", "plate"),
    "pizza_topping": ("topping", "toppings"),
    "pizza_crust": ("crust",),
    "food_category": ("food", "category"),
    "cuisine": ("cuisine", "food"),
    "coffee": ("coffee", "latte"),
    "alarm_setting": ("alarm setting", "setting"),
    "alarm_name": ("alarm name", "name"),
    "alarm_time": ("alarm time", "wake"),
    "alarm_recurrence": ("recurrence", "repeat"),
    "doctor": ("doctor", "physician"),
    "dentist": ("dentist",),
    "therapist": ("therapist",),
    "stylist": ("stylist",),
    "hairstylist": ("hairstylist", "hair", "haircut"),
    "book": ("novel", "read", "reading"),
    "property": ("property",),
    "departure": ("departure", "depart", "leave from"),
    "immediate_transfers": ("immediate",),
    "scheduled_transfers": ("scheduled",),
}
"""Relation stem (without ``prefer_`` / ``favourite_``) -> extra phrases naming it."""

_FILLER = frozenset({"in", "to", "with", "of", "by"})
_GENERIC = frozenset({"time", "location", "book", "name", "number", "type", "show", "car",
                      "class", "method", "mode", "category", "setting", "room", "home"})
"""Relation-name words too common in requests to decide alone (``book`` is also a verb)."""
_STOP_PREFIXES = ("prefer_", "favourite_", "favorite_")
_WORD = re.compile(r"[a-z0-9]+")


def _stem(relation: str) -> str:
    for prefix in _STOP_PREFIXES:
        if relation.startswith(prefix):
            return relation[len(prefix):]
    return relation


def _has_phrase(text: str, phrase: str) -> bool:
    return re.search(rf"\b{re.escape(phrase)}s?\b", text) is not None


@dataclass(frozen=True)
class Resolution:
    """Output of :meth:`DeterministicPathGenerator.resolve`.

    ``programs`` are ``KG.search`` strings as the paper's LLM writes them; ``triples``
    the extracted sub-KG; ``missing`` names the links that could not be resolved.
    """

    speaker: str | None
    programs: list[str] = field(default_factory=list)
    triples: list[Triple] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def response(self) -> str:
        """The programs joined, ready for :func:`kg_search`."""
        return "\n".join(self.programs)

    @property
    def entities(self) -> list[str]:
        """Resolved end entities (tails of the last hop of each program)."""
        return list(dict.fromkeys(t for _, _, t in self.triples))


class DeterministicPathGenerator:
    """Relation-path generation without an LLM.

    1. The speaker comes from ``<speak>Speaker: NAME</speak>``.
    2. People: kinship phrases (``mom`` -> ``mother``, ``child`` -> ``son``, ...) and
       named people, chained in text order from the speaker ("my father's mother's").
    3. The attribute: each relation leaving the resolved person is scored against the
       query by its name words, the synonym lexicon and rapidfuzz ``partial_ratio``
       (>= ``fuzzy_threshold``, 0-100); the best one (first in KG order on ties) is the
       last hop, or none when no relation scores.
    """

    def __init__(self, kg: KnowledgeGraph, *, fuzzy_threshold: float = 90.0) -> None:
        if not 0 <= fuzzy_threshold <= 100:
            raise ValueError("fuzzy_threshold must be in [0, 100]")
        self.kg = kg
        self.fuzzy_threshold = fuzzy_threshold

    # people -----------------------------------------------------------------------
    def _kin_relations(self) -> set[str]:
        return {r for r in self.kg.relations if r in _KIN}

    def _person_hops(self, text: str, speaker: str) -> tuple[list[tuple[int, str]], str]:
        """(position, phrase-or-name) mentions of people, and the text left to match."""
        low = text.lower()
        mentions: list[tuple[int, str]] = []
        for rel in self._kin_relations():
            for phrase in _KIN[rel]:
                for m in re.finditer(rf"\b{re.escape(phrase)}\b", low):
                    mentions.append((m.start(), phrase))
        people = {h for h, r, _ in self.kg.triples() if r in _KIN} | {
            t for _, r, t in self.kg.triples() if r in _KIN}
        for name in people - {speaker}:
            for m in re.finditer(rf"\b{re.escape(name)}\b", text):
                mentions.append((m.start(), name))
        mentions.sort()
        return list(dict.fromkeys(mentions)), low

    def _hop(self, node: str, mention: str) -> tuple[str, str] | None:
        for _, r, t in self.kg.out(node):
            if r in _KIN and (mention in _KIN[r] or t == mention):
                return r, t
        return None

    # attributes -------------------------------------------------------------------
    def _attr_score(self, relation: str, low: str, words: set[str]) -> float:
        stem = _stem(relation)
        score = 0.0
        parts = [p for p in stem.split("_") if p not in _FILLER]
        if "_" in stem and _has_phrase(low, stem.replace("_", " ")):
            score += 2.0
        for part in parts:
            if part in words or any(fuzz.ratio(part, w) >= self.fuzzy_threshold for w in words):
                score += 0.3 if part in _GENERIC else 1.0
        for phrase in _ATTR_SYNONYMS.get(stem, ()):
            if _has_phrase(low, phrase):
                score += 1.5 if " " in phrase else 1.0
        return score

    def _best_attribute(self, node: str, low: str) -> str | None:
        words = set(_WORD.findall(low))
        best, best_score = None, 0.0
        for relation in dict.fromkeys(r for _, r, _ in self.kg.out(node)):
            if relation in _KIN:
                continue
            s = self._attr_score(relation, low, words)
            if s > best_score:
                best, best_score = relation, s
        return best

    def resolve(self, query: str) -> Resolution:
        """Resolve the references of one request (shapes: see :class:`Resolution`)."""
        m = _SPEAKER.search(query)
        speaker = m.group(1).strip().rstrip(".") if m else None
        text = _SPEAKER.sub(" ", query)
        if speaker is None or not self.kg.is_head(speaker):
            who = speaker or "the speaker"
            return Resolution(speaker, missing=[f"unknown speaker: {who}"])
        mentions, low = self._person_hops(text, speaker)
        node, rels, missing = speaker, [], []
        seen = {speaker}
        for _, mention in mentions:
            hop = self._hop(node, mention)
            if hop is None:
                if mention not in seen and mention != node:
                    missing.append(f"{node} -> {mention}")
                continue
            if hop[1] in seen:
                continue
            rels.append(hop[0])
            node = hop[1]
            seen.add(node)
        # strip the people words before matching attributes
        rest = low
        for _, mention in mentions:
            rest = re.sub(rf"\b{re.escape(mention.lower())}\b", " ", rest)
        attr = self._best_attribute(node, rest)
        if attr is not None:
            rels.append(attr)
        if not rels:
            return Resolution(speaker, missing=[*missing, f"no relation of {speaker} matched"])
        program = search_program(speaker, rels)
        return Resolution(speaker, [program], self.kg.search(speaker, rels), missing)
