"""FamilyTool KG-extraction evaluation (DATA.md §3).

Loads ``familytool-{b,e}.jsonl`` + ``familykg-{b,e}.txt`` from ``--data-dir``, generates
``KG.search`` programs (the deterministic resolver, or the golden paths with
``generator="golden"``), runs FamilyTool's ``KG_search`` on them and scores the result
exactly as ``metric_KG_extraction`` in the paper's
``pipeline/KG_extraction_post_process_make_intermediate_json.py`` does:

- format error: the extraction is ``""``; rate over all records;
- no-hallucination: non-empty extractions without ``bad_extract`` / (total - format errors);
- EM / F1: sets of ``"h<>r<>t"`` strings, gold vs extracted, averaged over all records;
- coverage: 1 if every gold-triple entity that occurs (as a substring) in
  ``str(gold tool calls)`` is an entity of the extraction; averaged over all records.

Values are percent, as the paper prints them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from toolguard.kg import (
    DeterministicPathGenerator,
    ExtractionMode,
    KnowledgeGraph,
    kg_search,
    programs_for_links,
)

Subset = Literal["b", "e"]
_LINK = re.compile(r"\[([^\[\]]+)\]")
_GOLD_KG = re.compile(r"\(.*?\)")
QUERY_CUT = "The extra information for the query"


@dataclass(frozen=True)
class Record:
    """One FamilyTool record: id, user text (with the golden sub-KG) and gold calls."""

    id: str
    user: str
    gold_calls: list[dict[str, Any]]

    @property
    def query(self) -> str:
        """The request without the golden sub-KG (``preprocessdata``)."""
        return self.user.split(QUERY_CUT)[0].strip()

    @property
    def gold_links(self) -> list[list[str]]:
        m = _GOLD_KG.search(self.user)
        return extract_links(m.group(0)) if m else []


def extract_links(text: str) -> list[list[str]]:
    """FamilyTool's ``extract_links_func``: strip quotes, ``[...]`` groups split on commas."""
    text = text.replace("'", "").replace('"', "")
    return [[item.strip() for item in g.split(",")] for g in _LINK.findall(text)]


def load(data_dir: str | Path, subset: Subset = "b") -> tuple[list[Record], KnowledgeGraph]:
    """Records and KG of one FamilyTool subset."""
    root = Path(data_dir)
    records = []
    for line in (root / f"familytool-{subset}.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        msgs = json.loads(line)
        records.append(Record(str(msgs[0]["content"]), str(msgs[2]["content"]),
                              list(msgs[-1]["content"])))
    return records, KnowledgeGraph.from_file(root / f"familykg-{subset}.txt")


def _entities(links: Sequence[Sequence[str]]) -> set[str]:
    out: set[str] = set()
    for h, _, t in links:  # the pipeline unpacks triples, so must we
        out |= {h, t}
    return out


def score_sample(gold: Sequence[Sequence[str]], extracted_text: str,
                 gold_response: str) -> tuple[float, int, int]:
    """``(f1, em, coverage)`` of one record, as ``changelink2label`` + ``calculate_f1em``."""
    extracted = extract_links(extracted_text)
    g = {"<>".join(link) for link in gold}
    p = {"<>".join(link) for link in extracted}
    tp = len(g & p)
    precision = tp / len(p) if p else 0.0
    recall = tp / len(g) if g else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    em = int(g == p)
    got = _entities(extracted)
    cover = int(all(e in got for e in _entities(gold) if e in gold_response))
    return f1, em, cover


def kg_metrics(records: Sequence[Record], extractions: Sequence[str]) -> dict[str, float]:
    """The five KG-extraction metrics in percent (keys of the JSON report)."""
    total = len(records)
    em = f1 = cov = nohal = fmt = 0.0
    for rec, ext in zip(records, extractions, strict=True):
        if ext == "":
            fmt += 1
        elif "bad_extract" not in ext:
            nohal += 1
        f, e, c = score_sample(rec.gold_links, ext, str(rec.gold_calls))
        f1 += f
        em += e
        cov += c
    denom = total - fmt
    return {
        "em": 100 * em / total,
        "f1": 100 * f1 / total,
        "no_hallucination": 100 * nohal / denom if denom else 0.0,
        "coverage": 100 * cov / total,
        "format_error": 100 * fmt / total,
    }


def golden_response(record: Record) -> str:
    """The golden path as ``KG.search`` programs (the oracle of ``ft_kgmetric.py``)."""
    return "\n".join(programs_for_links(record.gold_links))


def run(data_dir: str | Path, subset: Subset = "b", *, extraction: ExtractionMode = "exact",
        generator: Literal["deterministic", "golden"] = "deterministic"
        ) -> tuple[dict[str, float], list[Record], list[str]]:
    records, kg = load(data_dir, subset)
    gen: Callable[[Record], str]
    if generator == "golden":
        gen = golden_response
    else:
        resolver = DeterministicPathGenerator(kg)
        gen = lambda r: resolver.resolve(r.query).response  # noqa: E731
    extractions = [kg_search(gen(r), kg, mode=extraction) for r in records]
    return kg_metrics(records, extractions), records, extractions


def main(data_dir: str | Path, subset: Subset = "b", json_path: str | Path | None = None,
         extraction: ExtractionMode = "exact",
         generator: Literal["deterministic", "golden"] = "deterministic") -> dict[str, Any]:
    from rich.console import Console
    from rich.table import Table

    metrics, records, _ = run(data_dir, subset, extraction=extraction, generator=generator)
    report: dict[str, Any] = {"subset": subset, "records": len(records),
                              "generator": generator, "extraction": extraction,
                              "kg_extraction": metrics}
    table = Table(title=f"FamilyTool-{subset} KG extraction ({generator}, {extraction})")
    for col in ("EM", "F1", "No-Hall.", "Coverage", "Format err."):
        table.add_column(col, justify="right")
    table.add_row(*(f"{metrics[k]:.1f}" for k in
                    ("em", "f1", "no_hallucination", "coverage", "format_error")))
    Console().print(table)
    if json_path:
        out = Path(json_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return report
