"""How far can a deterministic (no-LLM) resolver or pre-check go on these benchmarks?

Each prints numbers from the real data; nothing is fitted here.

- ``familytool`` (FamilyTool-b, ``docs/DATA.md`` §3): the share of records with *lexical
  evidence* (a speaker, and a word of every attribute relation in the request, by stem or
  synonym), an upper bound on EM and Coverage for a resolver that picks relations from the
  request's words.
- ``abstain`` (RelyToolBench + BFCL v4): two trade-off curves of the deterministic
  pre-check, the embedding rescue of ``no_suitable_tool`` per similarity threshold, and
  the missing-information policies (Missing Parameter F1 against Original's false
  abstains).

Usage: ``python -m toolguard_evals.ceilings familytool --data-dir ../shared/data/familytool``
and ``python -m toolguard_evals.ceilings abstain``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from toolguard.kg.lexicon import ATTRIBUTE_SYNONYMS, GENERIC_WORDS
from toolguard.kg.resolver import DeterministicPathGenerator, _stem, relation_stem
from toolguard.precheck import Precheck, current_request
from toolguard.precheck.rules import _FACT_PARAM, stated_values
from toolguard.text import content_stems, split_identifier
from toolguard_evals.abstain import Case, _binary, load_cases
from toolguard_evals.familytool import Record, load

_FILLERS = frozenset({"in", "to", "with", "of", "by", "for", "at", "on"})
_VALUE = re.compile(r"_\d{4}$")  # FamilyTool attribute values: travel_city_0000
_WORD = re.compile(r"[a-z]+")
THRESHOLDS: tuple[float, ...] = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45)


# ---------------------------------------------------------------------------- FamilyTool
def relation_evidence(relation: str, query: str) -> bool:
    """Whether ``query`` names every specific word of ``relation`` (stem or synonym)."""
    stems = {_stem(w) for w in _WORD.findall(query.lower())}
    words = [w for w in relation_stem(relation).lower().split("_") if w and w not in _FILLERS]
    specific = [w for w in words if w not in GENERIC_WORDS] or words

    def named(word: str) -> bool:
        forms = {_stem(word)} | {_stem(s) for s in ATTRIBUTE_SYNONYMS.get(word, ())
                                 if " " not in s}
        return bool(forms & stems)

    return bool(specific) and all(named(w) for w in specific)


def familytool_evidence(records: Sequence[Record]) -> dict[str, Any]:
    """``{"records", "with_speaker", "with_evidence", "evidence_share"}`` (share in %)."""
    speaker = evidence = 0
    for r in records:
        if DeterministicPathGenerator.speaker_of(r.query) is None:
            continue
        speaker += 1
        attrs = [link for link in r.gold_links if len(link) == 3 and _VALUE.search(link[2])]
        evidence += all(relation_evidence(link[1], r.query) for link in attrs)
    n = len(records)
    return {"records": n, "with_speaker": speaker, "with_evidence": evidence,
            "evidence_share": round(100 * evidence / n, 1) if n else 0.0}


# ---------------------------------------------------------------------------- abstain
def _f1(pairs: Iterable[tuple[bool, bool]]) -> float:
    """F1 % of the abstain class as :mod:`.abstain` scores it (0.0 without positives)."""
    return _binary(list(pairs))[1] or 0.0


def _abstain_rate(preds: Sequence[bool]) -> float:
    return round(100 * sum(preds) / len(preds), 1) if preds else 0.0


def rescue_curve(cases: Sequence[Case], thresholds: Sequence[float] = THRESHOLDS
                 ) -> list[dict[str, Any]]:
    """BFCL scores of the lexical pre-check with an embedding rescue, per threshold.

    The first row (``threshold=None``) is the lexical pre-check alone.

    Raises:
        ImportError: Without the ``embed`` extra.
    """
    from toolguard.precheck.rules import DeterministicRules

    rows: list[tuple[str, bool, bool, float]] = []  # subset, gold abstain, lexical, cosine
    for c in cases:
        d = Precheck(c.tools).decide(c.messages)
        cos = -1.0
        if d.decision == "no_suitable_tool" and c.tools:
            rules = DeterministicRules(c.tools, relevance="embedding")
            cos = rules.similarity(current_request(c.messages))
        rows.append((c.subset, c.expected != "proceed", d.decision != "proceed", cos))
    out = []
    for th in (None, *thresholds):
        pred = [(s, g, p and not (th is not None and cos >= th))
                for s, g, p, cos in rows]
        by: dict[str, list[tuple[bool, bool]]] = {}
        for s, g, p in pred:
            by.setdefault(s, []).append((g, p))
        row: dict[str, Any] = {"threshold": th}
        if "irrelevance" in by:
            row["irrelevance_f1"] = _f1(by["irrelevance"] + by.get("simple_python", [])
                                        + by.get("multiple", []))
        if "live_irrelevance" in by:
            row["live_irrelevance_f1"] = _f1(by["live_irrelevance"] + by.get("live_simple", [])
                                             + by.get("live_multiple", []))
        for feasible in ("simple_python", "multiple", "live_simple", "live_multiple"):
            if feasible in by:
                row[f"{feasible}_false_abstain"] = _abstain_rate([p for _, p in by[feasible]])
        out.append(row)
    return out


def typed_missing_info(case: Case) -> bool:
    """The ``typed`` policy (module docstring): whether to ask for ``case``'s request."""
    request = current_request(case.messages)
    if stated_values(request, case.tools):
        return False
    pre = Precheck(case.tools)
    overlaps = pre.rules.overlaps(request)
    best = max(case.tools, key=lambda t: 2 * overlaps[t.name][0] + overlaps[t.name][1])
    said = content_stems(request)
    for p in best.required:
        schema = best.properties.get(p)
        s = schema if isinstance(schema, dict) else {}
        example = str(s.get("example_value", s.get("default", "")) or "")
        fact = bool(_FACT_PARAM.search(split_identifier(p).replace(" ", "_"))
                    or re.search(r"\d", example))
        if fact and "enum" not in s and not (example and content_stems(example) & said):
            return True
    return False


def missing_info_curve(cases: Sequence[Case]) -> list[dict[str, Any]]:
    """Missing Parameter F1 and Original false abstains per missing-info policy."""
    rtb = [c for c in cases if c.subset in ("Original", "Missing Parameter")]
    out = []
    for policy in ("vague", "unstated", "typed"):
        pairs: list[tuple[bool, bool]] = []
        original: list[bool] = []
        for c in rtb:
            if policy == "typed":
                d = Precheck(c.tools).decide(c.messages).decision
                abstain = d != "proceed" or typed_missing_info(c)
            else:
                d = Precheck(c.tools, missing_info=policy).decide(c.messages).decision  # type: ignore[arg-type]
                abstain = d != "proceed"
            pairs.append((c.subset == "Missing Parameter", abstain))
            if c.subset == "Original":
                original.append(abstain)
        out.append({"policy": policy, "missing_parameter_f1": _f1(pairs),
                    "original_false_abstain": _abstain_rate(original)})
    return out


# ---------------------------------------------------------------------------- CLI
app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0] if __doc__ else None)


@app.command("familytool")
def familytool_command(
    data_dir: Annotated[Path, typer.Option(help="FamilyTool folder.")],
    subset: Annotated[str, typer.Option(help="b or e.")] = "b",
) -> None:
    """Lexical evidence share of FamilyTool records (an upper bound for EM/Coverage)."""
    records, _ = load(data_dir, subset)
    typer.echo(familytool_evidence(records))


@app.command("abstain")
def abstain_command(
    rescue: Annotated[bool, typer.Option(help="Also the embedding-rescue curve (BFCL).")] = True,
) -> None:
    """Missing-info policies on RelyToolBench; embedding rescue thresholds on BFCL."""
    for row in missing_info_curve(load_cases("relytoolbench")):
        typer.echo(row)
    if rescue:
        for row in rescue_curve(load_cases("bfcl")):
            typer.echo(row)


if __name__ == "__main__":
    app()
