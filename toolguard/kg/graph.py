"""The knowledge graph and FamilyTool's extraction (KGETool, FamilyTool paper).

- :class:`KnowledgeGraph`: (head, relation, tail) triples on a networkx ``MultiDiGraph``
  (one edge per triple, keyed by relation), mutable at run time, read from FamilyTool's
  KG files (one Python list literal per line, parsed with :func:`ast.literal_eval`).
- :meth:`KnowledgeGraph.extract`: FamilyTool's ``extractpath`` (greedy, first tail in
  insertion order, ``<bad_extract>`` when the start entity or a relation is missing).
- :func:`kg_search`: FamilyTool's ``KG_search`` on a model response: every
  ``KG.search(start=..., path=[...])`` call is parsed and extracted; the result string is
  what the paper's pipeline puts into the query (``""`` when there is no call).
- Relation-path generation lives in :mod:`toolguard.kg.resolver` (deterministic) and
  :mod:`toolguard.kg.llm` (KGETool prompt).

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
from pathlib import Path
from typing import Literal

import networkx as nx  # type: ignore[import-untyped]  # no stubs installed
from rapidfuzz import fuzz

from toolguard.errors import KGError

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
        self.version = 0
        """Incremented by every change (readers cache derived views per version)."""
        self._bulk_add(triples)

    def _bulk_add(self, triples: Iterable[Sequence[str]]) -> None:
        """Add triples to the (empty) graph in bulk: what ``add`` per triple does.

        Writes networkx's adjacency dicts as ``MultiDiGraph.add_edge`` does, without its
        per-edge view and cache work: 50,000 triples in a fraction of the per-edge time.
        """
        g = self.graph
        succ, pred, node = g._succ, g._pred, g._node
        added = 0
        for triple in triples:
            if len(triple) != 3:
                self.add(*triple)  # the TypeError a single add raises
            h, r, t = triple
            for n in (h, t):
                if n not in succ:
                    if n is None:
                        raise ValueError("None cannot be a node")
                    succ[n] = g.adjlist_inner_dict_factory()
                    pred[n] = g.adjlist_inner_dict_factory()
                    node[n] = g.node_attr_dict_factory()
            keydict = succ[h].get(t)
            if keydict is None:
                keydict = succ[h][t] = pred[t][h] = g.edge_key_dict_factory()
            elif r in keydict:
                continue  # already there
            data = keydict[r] = g.edge_attr_dict_factory()
            data["seq"] = next(self._seq)
            added += 1
        nx._clear_cache(g)
        self.version += added

    @classmethod
    def from_file(cls, path: str | Path) -> KnowledgeGraph:
        """Read a FamilyTool KG file (``['Bob', 'mother', 'Alice']`` per line).

        Raises:
            toolguard.errors.KGError: If a non-empty line is not a list/tuple of three strings.
        """
        kg = cls()
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            value = ast.literal_eval(line.strip())
            if not (isinstance(value, list | tuple) and len(value) == 3
                    and all(isinstance(v, str) for v in value)):
                raise KGError(f"{path}:{n}: expected [head, relation, tail], got {line!r}")
            kg.add(*value)
        return kg

    def add(self, head: str, relation: str, tail: str) -> bool:
        """Add a triple; returns False if it was already there."""
        if self.graph.has_edge(head, tail, key=relation):
            return False
        self.graph.add_edge(head, tail, key=relation, seq=next(self._seq))
        self.version += 1
        return True

    def remove(self, head: str, relation: str, tail: str) -> bool:
        """Remove a triple (and entities left without edges); False if absent."""
        if not self.graph.has_edge(head, tail, key=relation):
            return False
        self.graph.remove_edge(head, tail, key=relation)
        self.version += 1
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
        return bool(self.graph.succ[entity])

    def heads(self) -> list[str]:
        """Entities that start at least one triple."""
        return [n for n, succ in self.graph.succ.items() if succ]

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
