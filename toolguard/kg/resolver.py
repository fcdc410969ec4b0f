"""Deterministic relation-path generation (no LLM) for KGETool-style resolution.

The resolver reads a request such as ``<speak>Speaker: Bob</speak> Book a train from my
mother's city to her favourite city`` and writes the ``KG.search`` programs FamilyTool's
LLM would write (``KG.search(start="Bob", path=["mother","prefer_city"])``, ...):

1. **Speaker** from ``<speak>Speaker: NAME</speak>`` (any ``ROLE: NAME`` label), or the
   ``speaker=`` argument (a graph node passes the user's KG name).
2. **People** (anchors), in text order: "my"/"I" (the speaker, when "I" starts a
   relative clause, not a request), kinship phrases (lexicon -> relation chains, e.g.
   "grandma" = ``grandmother`` or ``mother|father`` then ``mother``), the KG's own
   person relations by their words ("best friend" -> ``best_friend``), people named in
   the KG (a shortest person-to-person path from the speaker), and pronouns ("her",
   "his") that point back to the last person.  Possessive chains ("my father's
   mother's") and "of" chains ("the mother of my father") are followed hop by hop; a
   hop missing in the KG is a *missing link*.
3. **Attributes**: each anchor owns a strong window of words (the noun phrase after a
   possessive, "my mom's *preferred dining time*"; the noun before and the verb phrase
   after a relative clause, "the *place* my son *likes to travel*", only when it names a
   preference) and, weakly, the other words of its sentence.  Its relations to
   non-people are scored on those words (relation-name words, synonym lexicon,
   word-stem equality, rapidfuzz ratio, a place/time cue and, optionally, embedding
   similarity to the relation name).  The best relation above ``min_score`` is the last
   hop; a vague phrase (only place/time words) still picks the best one above
   ``vague_score``; a second relation is added when coordinated ("his preferred dining
   and cuisine region"), which makes a branching sub-KG.  A preference with no matching
   relation is a missing link.
4. One program per anchor that owns an attribute, plus one per person reached by a chain
   that owns none ("delete my mother's contact" -> ``["mother"]``).

Everything comes from the KG at call time (people, person relations, attribute
relations), so triples added or removed at run time are used by the next call.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple, TypedDict

from rapidfuzz import fuzz

from toolguard.errors import ConfigurationError
from toolguard.kg.graph import KnowledgeGraph, Triple, search_program
from toolguard.kg.lexicon import (
    ATTRIBUTE_SYNONYMS,
    GENERIC_WORDS,
    KINSHIP,
    KINSHIP_RELATIONS,
    PLACE_RELATION_WORDS,
    PLACE_WORDS,
    POSSESSIVE_PRONOUNS,
    POSSESSIVE_SELF,
    PREFERENCE_WORDS,
    PRONOUNS,
    RELATION_PHRASES,
    RELATION_PREFIXES,
    REQUEST_OPENERS,
    SELF_WORDS,
    TIME_RELATION_WORDS,
    TIME_WORDS,
    Hop,
)
from toolguard.text import stemmer

_SPEAKER = re.compile(r"<speak>\s*(?:[A-Za-z_ ]{1,20}:)?\s*(.*?)\s*\.?\s*</speak>", re.I | re.S)
_TAG = re.compile(r"<[^<>]{0,40}>")
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*(?:'s\b|s'(?!\w)|'(?!\w))?")
_SENT_END = re.compile(r"[.?!;]+(?:\s|$)")
_FILLER = frozenset({"in", "to", "with", "of", "by", "for", "at", "on", "the", "a"})
_STOP = frozenset("""
    a an the and or but if of to in on at by for with from into about as is are was were be
    been do does did have has had you your it its this that these those what which who whom
    whose why how can could would should will shall may might must please want need get
    let make tell give find also any some all each every more most other such no not only
    own same so than too very just there here then now up down out over again once like
    d ll m re s t ve hey hi hello me us am
    """.split())


@lru_cache(maxsize=8192)
def _stem(word: str) -> str:
    return str(stemmer().stemWord(word.lower()))


def relation_stem(relation: str) -> str:
    """The relation name without a preference prefix (``prefer_city`` -> ``city``)."""
    for prefix in RELATION_PREFIXES:
        if relation.startswith(prefix) and len(relation) > len(prefix):
            return relation[len(prefix):]
    return relation


@dataclass(frozen=True)
class _Tok:
    index: int
    word: str  # lower case, possessive removed
    text: str  # as written
    poss: bool
    sent: int


@dataclass
class _Anchor:
    start: int
    end: int  # exclusive
    kind: str  # "self" | "person" | "pronoun"
    entity: str | None
    path: list[str]
    poss: bool
    missing: str | None = None
    marked: bool = False  # a preference word is in its strong window
    key: tuple[str, ...] | None = None  # kinship phrase of a bare mention ("mother of")
    words: list[tuple[_Tok, float]] = field(default_factory=list)


@dataclass(frozen=True)
class Resolution:
    """Output of :meth:`DeterministicPathGenerator.resolve`.

    Attributes:
        speaker: The speaker (start entity of every program), or None when unknown.
        programs: ``KG.search`` programs as the paper's LLM writes them, in text order.
        triples: The extracted sub-KG (greedy extraction of every program, deduplicated).
        missing: Human-readable missing links ("Jack has no 'father' in the knowledge
            graph", "unknown speaker: Mallory"); non-empty means ask the user.
        paths: ``(start, relations)`` of every program.
    """

    speaker: str | None
    programs: list[str] = field(default_factory=list)
    triples: list[Triple] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    paths: list[tuple[str, list[str]]] = field(default_factory=list)

    @property
    def response(self) -> str:
        """The programs joined by newlines, ready for :func:`~toolguard.kg.kg_search`."""
        return "\n".join(self.programs)

    @property
    def entities(self) -> list[str]:
        """Resolved entities (tails of the extracted triples, in order)."""
        return list(dict.fromkeys(t for _, _, t in self.triples))

    @property
    def values(self) -> list[str]:
        """End entities of the programs (the values a tool call would use)."""
        return list(dict.fromkeys(p[-1][2] for p in self._chains() if p))

    def _chains(self) -> list[list[Triple]]:
        by_head: dict[str, list[Triple]] = {}
        for t in self.triples:
            by_head.setdefault(t[0], []).append(t)
        out: list[list[Triple]] = []
        for start, rels in self.paths:
            node, chain = start, []
            for r in rels:
                nxt = next((t for t in by_head.get(node, []) if t[1] == r), None)
                if nxt is None:
                    break
                chain.append(nxt)
                node = nxt[2]
            out.append(chain)
        return out


_Table = dict[tuple[str, ...], tuple[tuple[Hop, ...], ...]]
"""Kinship phrase (words) -> alternative relation chains."""


class _Views(NamedTuple):
    """What the resolver reads from a KG, built once per KG version (``_views``)."""

    people: set[str]
    person_rels: set[str]
    table: _Table
    names: dict[tuple[str, ...], str]  # a person's lower-cased words -> the person
    max_name: int  # words of the longest name
    max_phrase: int  # words of the longest kinship phrase


SimilarityFn = Callable[[str, Sequence[str]], list[float]]
"""``(query words, relation names) -> similarity in [0, 1] per relation``."""


class ResolverOptions(TypedDict, total=False):
    """Keyword options of :class:`DeterministicPathGenerator` (its ``Args`` say what each is).

    Typed so that the KG middleware, node and cache, which pass them on, name them too.
    """

    fuzzy_threshold: float
    min_score: float
    similarity: SimilarityFn | None
    similarity_weight: float
    vague_score: float
    top_k: int
    top_margin: float


class DeterministicPathGenerator:
    """Relation-path generation without an LLM (see the module docstring for the steps).

    Args:
        kg: The knowledge graph; read at every call, so run-time changes are seen.
        fuzzy_threshold: rapidfuzz ``ratio`` (0-100) from which a query word counts as a
            relation-name word (typos, inflections the stemmer misses).
        min_score: Score a relation needs to become the last hop (1.0 = one specific
            relation-name word or synonym matched).
        similarity: Optional ``(words, relation names) -> [0, 1]`` scores (e.g.
            :class:`toolguard.kg.embed.EmbeddingSimilarity`), added with weight
            ``similarity_weight`` to each relation's lexical score.
        similarity_weight: Weight of ``similarity`` (>= 0).
        vague_score: Score from which a vague phrase ("the place my son prefers": only
            place/time words matched) still picks the best relation, ties broken by the
            request's other words; set above ``min_score`` to never guess.
        top_k: Programs per reference: the best relation plus up to ``top_k - 1`` next
            ones within ``top_margin`` (FamilyTool's relation-retrieval trade-off: more
            coverage, less EM).
        top_margin: Score distance (>= 0) of the extra relations from the best one.

    Raises:
        toolguard.errors.ConfigurationError: On a threshold outside its range.
    """

    def __init__(
        self,
        kg: KnowledgeGraph,
        *,
        fuzzy_threshold: float = 88.0,
        min_score: float = 0.8,
        similarity: SimilarityFn | None = None,
        similarity_weight: float = 1.0,
        vague_score: float = 0.3,
        top_k: int = 1,
        top_margin: float = 0.6,
    ) -> None:
        for name, value, ok, bound in (
                ("fuzzy_threshold", fuzzy_threshold, 0 <= fuzzy_threshold <= 100, "in [0, 100]"),
                ("min_score", min_score, min_score > 0, "> 0"),
                ("similarity_weight", similarity_weight, similarity_weight >= 0, ">= 0"),
                ("top_k", top_k, top_k >= 1, ">= 1"),
                ("top_margin", top_margin, top_margin >= 0, ">= 0")):
            if not ok:
                raise ConfigurationError(f"{name} must be {bound}, got {value!r}")
        self.kg = kg
        self.fuzzy_threshold = fuzzy_threshold
        self.min_score = min_score
        self.similarity = similarity
        self.similarity_weight = similarity_weight
        self._cache_key: tuple[int, int] | None = None
        self._cache: _Views | None = None
        self.vague_score = vague_score
        self.top_k = top_k
        self.top_margin = top_margin

    # ------------------------------------------------------------------ KG views
    def _views(self) -> _Views:
        """People (and their names by words), person relations and kinship phrases of the KG.

        Built once per KG version (not per request), so any add/remove is seen by the next
        call and a 50,000-triple graph costs nothing per request.
        """
        key = (id(self.kg), self.kg.version)
        if self._cache_key != key or self._cache is None:
            people = set(self.kg.heads())
            rels = set()
            for h, t, r in self.kg.graph.edges(keys=True):  # any order: a set is built
                if r in KINSHIP_RELATIONS or (t in people and h in people):
                    rels.add(r)
            table = self._phrase_table(rels)
            names = {tuple(p.lower().split()): p for p in people}
            self._cache = _Views(people, rels, table, names,
                                 max((len(k) for k in names), default=1),
                                 max(len(k) for k in table))
            self._cache_key = key
        return self._cache

    # ------------------------------------------------------------------ parsing
    @staticmethod
    def speaker_of(query: str) -> str | None:
        """The name in ``<speak>Speaker: NAME</speak>`` (any ``LABEL:``), or None."""
        m = _SPEAKER.search(query)
        if not m:
            return None
        name = m.group(1).strip().strip(".").strip()
        return name or None

    @staticmethod
    def _tokens(text: str) -> list[_Tok]:
        text = text.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
        sents = _SENT_END.split(text)
        out: list[_Tok] = []
        for s_i, sent in enumerate(sents):
            for m in _TOKEN.finditer(sent):
                raw = m.group(0)
                poss = raw.endswith("'s") or raw.endswith("'")
                core = raw[:-2] if raw.endswith("'s") else raw.rstrip("'")
                for j, part in enumerate(core.split("-")):
                    last = j == len(core.split("-")) - 1
                    out.append(_Tok(len(out), part.lower(), part, poss and last, s_i))
        return out

    def _phrase_table(self, person_rels: set[str]) -> _Table:
        table: dict[tuple[str, ...], tuple[tuple[Hop, ...], ...]] = {}
        for rel in person_rels:
            words = tuple(relation_stem(rel).lower().split("_"))
            table.setdefault(words, (((rel,),),))
        for phrase, alts in KINSHIP.items():
            words = tuple(phrase.split())
            table[words] = alts if words not in table else (*table[words], *alts)
        return table

    def _follow(self, node: str, chain: tuple[Hop, ...]) -> tuple[list[str], str] | None:
        """Walk ``chain`` from ``node``, backtracking when a later hop fails.

        Each hop tries its relations in order, then KG order ("grandma": the mother's or
        the father's mother).
        """
        if not chain:
            return [], node
        out = self.kg.out(node)
        for accepted in chain[0]:
            for _, r, t in out:
                if r != accepted:
                    continue
                rest = self._follow(t, chain[1:])
                if rest is not None:
                    return [r, *rest[0]], rest[1]
        return None

    def _path_between(self, start: str, goal: str, person_rels: set[str]) -> list[str] | None:
        """Shortest person-to-person relation path (BFS, KG order on ties)."""
        if start == goal:
            return []
        seen = {start}
        queue: deque[tuple[str, list[str]]] = deque([(start, [])])
        while queue:
            node, rels = queue.popleft()
            for _, r, t in self.kg.out(node):
                if r not in person_rels or t in seen:
                    continue
                if t == goal:
                    return [*rels, r]
                seen.add(t)
                queue.append((t, [*rels, r]))
        return None

    def _anchors(self, toks: list[_Tok], speaker: str, views: _Views) -> list[_Anchor]:
        person_rels, table, names = views.person_rels, views.table, views.names
        max_len, max_name = views.max_phrase, views.max_name
        anchors: list[_Anchor] = []
        last_person: _Anchor | None = None
        i = 0
        while i < len(toks):
            tok = toks[i]
            prev = anchors[-1] if anchors else None
            chained = (prev is not None and prev.end == i and prev.poss
                       and toks[prev.start].sent == tok.sent)
            # named person
            hit_name = None
            for n in range(min(max_name, len(toks) - i), 0, -1):
                key = tuple(t.word for t in toks[i:i + n])
                if key in names and toks[i].text[:1].isupper():
                    hit_name = (n, names[key])
                    break
            if hit_name is not None:
                n, name = hit_name
                poss = toks[i + n - 1].poss
                if name == speaker:
                    anchors.append(_Anchor(i, i + n, "self", speaker, [], poss))
                else:
                    path = self._path_between(speaker, name, person_rels)
                    anchors.append(_Anchor(
                        i, i + n, "person", name if path is not None else None, path or [], poss,
                        None if path is not None else f"no link from {speaker} to {name} "
                                                      "in the knowledge graph"))
                    last_person = anchors[-1]
                i += n
                continue
            # kinship phrase (longest first)
            hit = None
            for n in range(min(max_len, len(toks) - i), 0, -1):
                key = tuple(t.word for t in toks[i:i + n])
                if key in table:
                    hit = (n, key)
                    break
            if hit is not None:
                n, key = hit
                poss = toks[i + n - 1].poss
                bare = False
                if chained and prev is not None:
                    base, base_path, start = prev.entity, prev.path, prev.start
                    anchors.pop()
                else:
                    base, base_path, start = speaker, [], i
                    if prev is not None and prev.end == i and prev.kind == "self" and prev.poss:
                        anchors.pop()
                        start = prev.start
                    else:
                        bare = True
                phrase = " ".join(key)
                if base is None:
                    anchors.append(_Anchor(start, i + n, "person", None, [], poss,
                                           prev.missing if prev else None))
                else:
                    found = None
                    for chain in table[key]:
                        found = self._follow(base, chain)
                        if found is not None:
                            break
                    if found is None:
                        anchors.append(_Anchor(
                            start, i + n, "person", None, [], poss,
                            f"{base} has no '{phrase}' in the knowledge graph"))
                    else:
                        anchors.append(_Anchor(start, i + n, "person", found[1],
                                               [*base_path, *found[0]], poss))
                anchors[-1].key = key if bare else None
                last_person = anchors[-1]
                i += n
                continue
            w = tok.word
            if w in POSSESSIVE_SELF or w in ("mine", "myself", "ours"):
                anchors.append(_Anchor(i, i + 1, "self", speaker, [], w in POSSESSIVE_SELF))
            elif w in ("i", "we") and tok.text in ("I", "We", "we"):
                before = toks[i - 1] if i > 0 and toks[i - 1].sent == tok.sent else None
                if (before is not None and before.word not in REQUEST_OPENERS
                        and before.word not in SELF_WORDS):
                    anchors.append(_Anchor(i, i + 1, "self", speaker, [], False))
            elif w in PRONOUNS and last_person is not None:
                ref = last_person
                anchors.append(_Anchor(i, i + 1, "pronoun", ref.entity, list(ref.path),
                                       w in POSSESSIVE_PRONOUNS, ref.missing))
            i += 1
        return self._of_chains(toks, anchors, table)

    def _of_chains(self, toks: list[_Tok], anchors: list[_Anchor],
                   table: _Table) -> list[_Anchor]:
        """Re-anchor "the mother of my father" (right to left): X of Y = Y's X."""
        k = len(anchors) - 2
        while k >= 0:
            a, b = anchors[k], anchors[k + 1]
            j = a.end
            linked = a.key is not None and j < len(toks) and toks[j].word == "of" and (
                b.start == j + 1 or (b.start == j + 2 and toks[j + 1].word in ("the", "a")))
            if linked and a.key is not None:
                merged = _Anchor(a.start, b.end, "person", None, [], b.poss)
                if b.entity is None:
                    merged.missing = b.missing
                else:
                    for chain in table[a.key]:
                        found = self._follow(b.entity, chain)
                        if found is not None:
                            merged.entity, merged.path = found[1], [*b.path, *found[0]]
                            break
                    else:
                        merged.missing = (f"{b.entity} has no '{' '.join(a.key)}' in the "
                                          "knowledge graph")
                anchors[k:k + 2] = [merged]
            k -= 1
        return anchors

    # ------------------------------------------------------------------ attributes
    def _relation_words(self, relation: str) -> list[str]:
        words: list[str] = []
        for part in relation_stem(relation).lower().split("_"):
            if not part or part in _FILLER:
                continue
            words.append(part)
        return words

    def _word_hit(self, rel_word: str, stems: dict[str, tuple[int, float]],
                  words: dict[str, tuple[int, float]]) -> tuple[int, float] | None:
        """(position, weight) of the query word best matching ``rel_word`` (or None)."""
        hits: list[tuple[int, float]] = []
        target = _stem(rel_word)
        if target in stems:
            hits.append(stems[target])
        for syn in ATTRIBUTE_SYNONYMS.get(rel_word, ()):
            if " " in syn:
                continue
            s = _stem(syn)
            if s in stems:
                pos, w = stems[s]
                hits.append((pos, w * 0.9))
        parts = _split_compound(rel_word)
        if len(parts) == 2 and not hits:
            halves = [self._word_hit(p, stems, words) for p in parts]
            found = [h for h in halves if h is not None]
            if found:
                pos, w = max(found, key=lambda h: h[1])
                hits.append((pos, w * (1.0 if len(found) == 2 else 0.7)))
        if len(rel_word) >= 5:
            for word, (pos, w) in words.items():
                if len(word) >= 5 and fuzz.ratio(rel_word, word) >= self.fuzzy_threshold:
                    hits.append((pos, w * 0.8))
        return max(hits, key=lambda h: h[1]) if hits else None

    def _score(self, relation: str, toks: list[tuple[_Tok, float]], text: str,
               full: bool = False, strict: bool = False) -> tuple[float, set[int]]:
        stems: dict[str, tuple[int, float]] = {}
        words: dict[str, tuple[int, float]] = {}
        for t, w in toks:
            for key, table in ((_stem(t.word), stems), (t.word, words)):
                if key not in table or table[key][1] < w:
                    table[key] = (t.index, w)
        rel_words = self._relation_words(relation)
        score = 0.0
        used: set[int] = set()
        specific = False
        for rw in rel_words:
            hit = self._word_hit(rw, stems, words)
            if hit is None:
                if full and (strict or rw not in GENERIC_WORDS):
                    return 0.0, set()
                score -= 0.05 if rw in GENERIC_WORDS else 0.15
                continue
            pos, w = hit
            used.add(pos)
            if rw in GENERIC_WORDS:
                score += 0.45 * w
            else:
                score += w
                specific = specific or w >= 0.5
        stem = relation_stem(relation).lower()
        strong_text = " ".join(t.word for t, w in toks if w >= 0.5)
        for phrase in RELATION_PHRASES.get(stem, ()):
            if re.search(rf"\b{re.escape(phrase)}\b", strong_text):
                score += 0.6
                specific = True
                break
        if len(rel_words) > 1 and " ".join(rel_words) in strong_text:
            score += 0.5
        fillers = [p for p in stem.split("_") if p in _FILLER]
        score -= 0.05 * len(fillers)
        kinds = set(rel_words) | {stem} | set(fillers)
        strong_words = {t.word for t, w in toks if w >= 0.5}
        if kinds & PLACE_RELATION_WORDS and strong_words & PLACE_WORDS:
            score += 0.3
        if kinds & TIME_RELATION_WORDS and strong_words & TIME_WORDS:
            score += 0.3
        if not specific:
            score = min(score, 0.6 + 0.1 * sum(w < 0.5 for t, w in toks
                                               if _stem(t.word) in {_stem(x) for x in rel_words}))
        return score, used

    def _attributes(self, node: str, toks: list[tuple[_Tok, float]], person_rels: set[str],
                    people: set[str], *, full: bool = False,
                    strict: bool = False) -> list[str]:
        content = [(t, w) for t, w in toks if t.word not in _STOP and not t.word.isdigit()]
        if not any(w >= 0.5 for _, w in content):
            return []
        text = " ".join(t.word for t, _ in toks)
        rels = list(dict.fromkeys(r for _, r, t in self.kg.out(node)
                                  if r not in person_rels and t not in people))
        if not rels:
            return []
        scored = [(r, *self._score(r, content, text, full, strict)) for r in rels]
        if self.similarity is not None and self.similarity_weight > 0:
            phrase = " ".join(t.word for t, w in content if w >= 0.5)
            sims = self.similarity(phrase, rels)
            scored = [(r, s + self.similarity_weight * sim, u)
                      for (r, s, u), sim in zip(scored, sims, strict=True)]
        best = max(scored, key=lambda x: x[1])
        if best[1] < self.min_score:
            if full or best[1] < self.vague_score:
                return []
            # a vague phrase ("the place my son prefers"): the best place/time relation,
            # words elsewhere in the request breaking ties ("book a *hotel* at the place")
            return self._top(scored, best, self.vague_score)
        chosen = self._top(scored, best, self.min_score)
        # a second attribute of the same person only when coordinated ("X and Y")
        ands = [t.index for t, w in toks if t.word == "and" and w >= 0.5]
        if ands and best[2]:
            rest = [x for x in scored if x[0] != best[0] and x[2] and not (x[2] & best[2])
                    and x[1] >= self.min_score
                    and any(min(x[2] | best[2]) < i < max(x[2] | best[2]) for i in ands)]
            if rest:
                chosen.append(max(rest, key=lambda x: x[1])[0])
        return chosen

    def _top(self, scored: list[tuple[str, float, set[int]]],
             best: tuple[str, float, set[int]], floor: float) -> list[str]:
        """``best`` plus, with ``top_k`` > 1, the next relations within ``top_margin``."""
        if self.top_k == 1:
            return [best[0]]
        ranked = sorted(scored, key=lambda x: -x[1])
        return [r for r, sc, _ in ranked[:self.top_k]
                if r == best[0] or (sc >= floor * 0.5 and sc >= best[1] - self.top_margin)]

    @staticmethod
    def _assign(toks: list[_Tok], anchors: list[_Anchor]) -> None:
        """Give each anchor its words: a strong window (weight 1) and the rest (0.35).

        Strong: after a possessive anchor ("my mom's *preferred dining time*"), up to a
        boundary word or 5 words; around a non-possessive one, the noun before it ("the
        *place* my son *likes to travel*") and the verb phrase after it.  Every other word
        of the sentence goes weakly to the nearest anchor.
        """
        owner: dict[int, tuple[_Anchor, float]] = {}
        taken = {i for a in anchors for i in range(a.start, a.end)}
        for k, a in enumerate(anchors):
            nxt = anchors[k + 1].start if k + 1 < len(anchors) else len(toks)
            sent = toks[a.start].sent
            window: list[int] = []
            if a.poss:
                j = a.end
                while j < nxt and j < a.end + 5 and toks[j].sent == sent:
                    if toks[j].word in _POSS_BOUNDARY or toks[j].word.isdigit():
                        break
                    window.append(j)
                    if toks[j].poss:
                        break
                    j += 1
            else:
                prev_end = anchors[k - 1].end if k > 0 else 0
                back: list[int] = []
                j = a.start - 1
                skipped = False
                # "the favourite city of (the) my father's mother": skip "of (the)"
                if j - 1 >= prev_end and toks[j].word in ("the", "a") and toks[j - 1].word == "of":
                    j -= 2
                    skipped = True
                elif j >= prev_end and toks[j].word == "of":
                    j -= 1
                    skipped = True
                while j >= prev_end and len(back) < 4 and toks[j].sent == sent:
                    w = toks[j].word
                    if w in _RELATIVE and not skipped:
                        # "the playlist that my dad likes", "the time preferred by my son"
                        skipped = True
                        if w in ("where", "when"):
                            back.append(j)
                        j -= 1
                        continue
                    if w in ("by", "of") and not skipped and j > 0 and (
                            toks[j - 1].word in PREFERENCE_WORDS):
                        skipped = True
                        j -= 1
                        continue
                    if w in _BACK_BOUNDARY:
                        if w in ("where", "when"):
                            back.append(j)
                        break
                    back.append(j)
                    j -= 1
                fwd: list[int] = []
                j = a.end
                while j < nxt and j < a.end + 5 and toks[j].sent == sent:
                    if toks[j].word in _FWD_BOUNDARY or toks[j].word.isdigit():
                        break
                    fwd.append(j)
                    j += 1
                # a relative clause names a preference ("the city my son *likes*");
                # without one the person is an object of the request ("help my husband book")
                if any(toks[i].word in PREFERENCE_WORDS or (j > 0 and toks[i].word in (
                        "by", "of")) for i in [*back, *fwd[:3]]) or any(
                        toks[i].word in PREFERENCE_WORDS for i in range(
                            max(0, min(back, default=a.start) - 2), a.start)):
                    window = [*back, *fwd]
            a.marked = any(toks[i].word in PREFERENCE_WORDS for i in window)
            for j in window:
                if j not in taken and (j not in owner or owner[j][1] < 1.0):
                    owner[j] = (a, 1.0)
        by_sent: dict[int, list[_Anchor]] = {}
        for a in anchors:
            by_sent.setdefault(toks[a.start].sent, []).append(a)
        for t in toks:
            if t.index in taken or t.index in owner:
                continue
            cands = by_sent.get(t.sent)
            if cands:
                best = min(cands, key=lambda a: (_dist(a, t.index), a.start > t.index))
                owner[t.index] = (best, 0.35)
        for i in sorted(owner):
            anchor, weight = owner[i]
            anchor.words.append((toks[i], weight))

    # ------------------------------------------------------------------ public
    def resolve(self, query: str, *, speaker: str | None = None) -> Resolution:
        """Resolve the references of one request.

        Args:
            query: The user's request; ``<speak>Speaker: NAME</speak>`` names the speaker.
            speaker: The speaker when the text has no ``<speak>`` tag (e.g. the user the
                graph runs for); the tag wins when both are given.

        Returns:
            A :class:`Resolution`; ``missing`` lists links that could not be resolved
            (unknown speaker, a relation the KG lacks), ``programs`` may be empty when
            the request names nothing in the KG.
        """
        who = self.speaker_of(query) or speaker
        text = _TAG.sub(" ", _SPEAKER.sub(" ", query))
        if who is None or not self.kg.is_head(who):
            if not _has_reference(self._tokens(text)):
                return Resolution(who)  # nothing personal to resolve
            return Resolution(who, missing=[f"unknown speaker: {who or 'the speaker'} "
                                            "is not in the knowledge graph"])
        views = self._views()
        people, person_rels = views.people, views.person_rels
        toks = self._tokens(text)
        anchors = self._anchors(toks, who, views)
        self._assign(toks, anchors)
        default = None
        if not anchors:
            default = _Anchor(0, 0, "self", who, [], False)
            default.words = [(t, 1.0) for t in toks]
        owners = [*anchors, *([default] if default is not None else [])]
        any_marked = any(a.marked for a in anchors)
        programs: list[tuple[int, str, list[str]]] = []
        missing: list[str] = []
        for a in owners:
            if a.entity is None:
                if a.missing and a.missing not in missing:
                    missing.append(a.missing)
                continue
            # "my appointment" next to "my husband's preferred dining time" is the
            # request's object, not a reference: all its relation words must match
            attrs = self._attributes(a.entity, a.words, person_rels, people,
                                     full=not a.marked and a is not default,
                                     strict=a.kind == "self" and any_marked)
            for attr in attrs:
                programs.append((a.start, who, [*a.path, attr]))
            if not attrs and a.marked and a.kind != "pronoun":
                phrase = " ".join(t.word for t, w in a.words
                                  if w >= 0.5 and t.word not in _STOP)
                note = f"{a.entity} has no relation matching '{phrase}' in the knowledge graph"
                if phrase and note not in missing:
                    missing.append(note)
        covered = {tuple(p[:-1]) for _, _, p in programs}
        for a in owners:
            if a.entity is None or not a.path or a.kind == "pronoun":
                continue
            prefixes = {tuple(p[:k]) for _, _, p in programs for k in range(1, len(p) + 1)}
            if tuple(a.path) not in prefixes and tuple(a.path) not in covered:
                programs.append((a.start, who, list(a.path)))
        programs.sort(key=lambda x: x[0])
        uniq: dict[tuple[str, ...], list[str]] = {}
        for _, _, path in programs:
            uniq.setdefault(tuple(path), path)
        paths = [(who, p) for p in uniq.values()]
        triples: list[Triple] = []
        for start, rels in paths:
            triples.extend(self.kg.search(start, rels))
        return Resolution(who, [search_program(s, r) for s, r in paths],
                          list(dict.fromkeys(triples)), missing, paths)


_POSS_BOUNDARY = frozenset({
    "to", "from", "for", "on", "at", "with", "or", "near", "around", "in", "into", "by",
    "than", "that", "which", "who", "while", "but", "so", "because", "if", "then", "is",
    "are", "was", "this", "next", "tomorrow", "today", "tonight", "via", "using", "as",
})
_RELATIVE = frozenset({"that", "which", "who", "where", "when", "whom"})
_BACK_BOUNDARY = frozenset({
    "the", "a", "an", "to", "from", "for", "on", "at", "with", "near", "around", "in",
    "into", "by", "of", "where", "when", "that", "which", "and", "or", "some", "any",
})
_FWD_BOUNDARY = frozenset({
    "on", "this", "next", "from", "at", "and", "with", "so", "but", "because", "please",
    "tomorrow", "today", "tonight", "via", "using", "than", "or",
})


def _has_reference(toks: Sequence[_Tok]) -> bool:
    """Whether a request names something personal (kinship, "my", a preference)."""
    words = {t.word for t in toks}
    kin = {p for p in KINSHIP if " " not in p}
    strong = {"prefer", "prefers", "preferred", "favorite", "favourite", "usual", "usually"}
    return bool(words & (kin | POSSESSIVE_SELF | strong))


def _dist(a: _Anchor, i: int) -> int:
    if i < a.start:
        return a.start - i
    return i - a.end + 1


@lru_cache(maxsize=4096)
def _split_compound(word: str) -> tuple[str, ...]:
    """``dinnertime`` -> ``("dinner", "time")`` when both halves are lexicon words."""
    if len(word) < 7:
        return (word,)
    known = set(ATTRIBUTE_SYNONYMS) | GENERIC_WORDS
    for k in range(3, len(word) - 2):
        head, tail = word[:k], word[k:]
        if head in known and tail in known:
            return (head, tail)
    return (word,)
