"""FamilyTool KG-extraction evaluation (``docs/DATA.md`` §3).

Loads ``familytool-{b,e}.jsonl`` + ``familykg-{b,e}.txt`` (the upstream layout or a flat
folder), generates ``KG.search`` programs (the deterministic resolver, an LLM, or the
golden paths), runs FamilyTool's ``KG_search`` on them and scores them as
``metric_KG_extraction`` (``pipeline/KG_extraction_post_process_make_intermediate_json.py``)
does: format error, no-hallucination, EM / F1 over triples, coverage; percent.  With a
model, KG-augmented tool use is scored as UnifiedToolHub's
``metrics_for_single_round_tool_call`` does (Tool Acc, Value Acc, EM), with the golden and
the extracted sub-KG.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from toolguard.kg import (
    DeterministicPathGenerator,
    ExtractionMode,
    KnowledgeGraph,
    kg_search,
    programs_for_links,
)

Subset = str
Generator = Literal["deterministic", "golden", "llm"]
_LINK = re.compile(r"\[([^\[\]]+)\]")
_GOLD_KG = re.compile(r"\(.*?\)")
QUERY_CUT = "The extra information for the query"


@dataclass(frozen=True)
class Record:
    """One FamilyTool record: id, user text (with the golden sub-KG) and gold calls."""

    id: str
    user: str
    gold_calls: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)

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


def _find(root: Path, sub: str, name: str) -> Path:
    for cand in (root / name, root / sub / name):
        if cand.is_file():
            return cand
    raise FileNotFoundError(f"{name} not found in {root} or {root / sub}")


def load(data_dir: str | Path, subset: Subset = "b") -> tuple[list[Record], KnowledgeGraph]:
    """Records and KG of one FamilyTool subset.

    Files: ``familytool-{subset}.jsonl`` and ``familykg-{subset}.txt``, flat in
    ``data_dir`` or in its ``datasets/`` and ``KG/`` folders (the upstream layout).

    Raises:
        FileNotFoundError: A file is missing.
        ValueError: A line is not a FamilyTool record (``id``, ``candidate_tools``,
            ``user``, ``tool_call`` messages).
    """
    root = Path(data_dir)
    data = _find(root, "datasets", f"familytool-{subset}.jsonl")
    records = []
    for n, line in enumerate(data.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        msgs = json.loads(line)
        roles = [m.get("role") for m in msgs] if isinstance(msgs, list) else []
        if roles[:1] != ["id"] or "user" not in roles or roles[-1:] != ["tool_call"]:
            raise ValueError(f"{data}:{n}: not a FamilyTool record (roles {roles})")
        by_role = {m["role"]: m["content"] for m in msgs}
        records.append(Record(str(by_role["id"]), str(by_role["user"]),
                              list(by_role["tool_call"]),
                              list(by_role.get("candidate_tools") or [])))
    kg = KnowledgeGraph.from_file(_find(root, "KG", f"familykg-{subset}.txt"))
    return records, kg


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


def with_sub_kg(record: Record, sub_kg: str) -> str:
    """The request with ``sub_kg`` where the golden sub-KG was (FamilyTool's tool-use input)."""
    return f"{record.query}  {QUERY_CUT} is {sub_kg}."


# ----------------------------------------------------------------------------- tool use
_JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}
_TYPE_NAMES = {"str": "string", "float": "number", "int": "integer", "bool": "boolean",
               "list": "array", "dict": "object"}
"""Python type names some FamilyTool docs use (``float``, ``int``, ``Dict``), as JSON Schema."""


def _json_type(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its ``type`` written as JSON Schema; an unknown type name is dropped.

    llama.cpp's grammar (and any JSON Schema validator) rejects ``"type": "float"``: the
    request fails with HTTP 400 before the model sees it.
    """
    kind = spec.get("type")
    if isinstance(kind, str) and kind not in _JSON_TYPES:
        mapped = _TYPE_NAMES.get(kind.lower())
        spec = {k: v for k, v in spec.items() if k != "type"}
        if mapped:
            spec["type"] = mapped
    return spec


def tool_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """A FamilyTool tool doc as an OpenAI function.

    Untyped properties stay untyped; Python type names (``float``, ``int``, ``Dict``) become
    JSON Schema's (``number``, ``integer``, ``object``) and other unknown names are dropped;
    list-form properties and required names missing from ``properties`` are kept.
    """
    params = doc.get("parameters") or {}
    props_in = params.get("properties") or {}
    props: dict[str, Any] = {}
    if isinstance(props_in, list):
        for p in props_in:
            if isinstance(p, dict) and p.get("name"):
                props[str(p["name"])] = {"description": str(p.get("description", ""))}
    elif isinstance(props_in, dict):
        for k, v in props_in.items():
            spec = dict(v) if isinstance(v, dict) else {}
            spec.pop("default", None)
            props[str(k)] = _json_type(spec)
    required = [r for r in params.get("required") or [] if isinstance(r, str)]
    for r in required:
        props.setdefault(r, {})
    return {"type": "function", "function": {
        "name": str(doc["name"]), "description": str(doc.get("description", ""))[:1024],
        "parameters": {"type": "object", "properties": props, "required": required}}}


def tool_use_scores(gold: Sequence[dict[str, Any]], predicted: Sequence[dict[str, Any]]
                    ) -> tuple[float, float, float]:
    """``(em, tool_acc, value_acc)`` of one record in [0, 1] (UnifiedToolHub, DATA.md §3).

    ``gold``: FamilyTool calls ``{name, parameters}``; ``predicted``: ``{name, args}``.
    """
    names = list(dict.fromkeys(str(g["name"]) for g in gold))
    pred_names = {str(p.get("name")) for p in predicted}
    tool_acc = sum(n in pred_names for n in names) / len(names) if names else 0.0
    n_params = matched = full = 0
    for g in gold:
        cand = [p for p in predicted if p.get("name") == g["name"]]
        args = cand[0].get("args") or {} if cand else {}
        params = g.get("parameters") or {}
        ok = bool(cand)
        for k, v in params.items():
            n_params += 1
            same = k in args and json.dumps(args[k]) == json.dumps(v)
            matched += same
            ok = ok and same
        full += ok
    value_acc = matched / n_params if n_params else float(tool_acc)
    em = float(full / len(gold) == 1) if gold else 0.0
    return em, tool_acc, value_acc


TOOL_SYSTEM = ("You are a helpful assistant with access to tools. Answer the user's request "
               "with one tool call, filling the parameters from the request and from the "
               "extra information given with it.")


def predict_calls(model: Any, record: Record, request: str) -> list[dict[str, Any]]:
    """The model's tool calls (``{name, args}``) for one request; ``[]`` on a model error."""
    from langchain_core.messages import HumanMessage, SystemMessage

    tools = [tool_schema(t) for t in record.tools if isinstance(t, dict) and t.get("name")]
    try:
        reply = model.bind_tools(tools).invoke(
            [SystemMessage(TOOL_SYSTEM), HumanMessage(request)])
    except (ValueError, KeyError, TypeError, OSError) as exc:  # a bad reply scores 0
        return [{"name": None, "args": {}, "error": repr(exc)}]
    except Exception as exc:  # openai.APIError and friends: scored 0, reported
        if _is_client_error(exc):
            return [{"name": None, "args": {}, "error": repr(exc)}]
        raise
    return [{"name": c["name"], "args": c.get("args") or {}}
            for c in getattr(reply, "tool_calls", []) or []]


def tool_use_metrics(model: Any, records: Sequence[Record], requests: Sequence[str],
                     errors: list[str] | None = None) -> dict[str, float]:
    """EM / Tool Acc / Value Acc in percent of the model on ``requests``.

    A request the endpoint fails (timeout, context overflow) scores 0; its error text is
    appended to ``errors`` when given, so a report can tell failures from wrong answers.
    """
    em = tool = value = 0.0
    for rec, req in zip(records, requests, strict=True):
        calls = predict_calls(model, rec, req)
        if errors is not None:
            errors.extend(str(c["error"]) for c in calls if c.get("error"))
        e, t, v = tool_use_scores(rec.gold_calls, [c for c in calls if not c.get("error")])
        em, tool, value = em + e, tool + t, value + v
    n = len(records) or 1
    return {"em": 100 * em / n, "tool_acc": 100 * tool / n, "value_acc": 100 * value / n}


# ----------------------------------------------------------------------------- runs
def _is_client_error(exc: Exception) -> bool:
    """An endpoint failure (openai/httpx errors, or the embedded server died)."""
    from toolguard_evals.local_model import LocalModelError

    return isinstance(exc, LocalModelError) or type(exc).__module__.split(".")[0] in (
        "openai", "httpx", "langchain_openai")


def _generate_or_empty(llm: Any, query: str, errors: list[str] | None = None) -> str:
    """The model's answer; ``""`` (a format error) when the endpoint fails or times out."""
    try:
        return str(llm.generate(query))
    except Exception as exc:
        if _is_client_error(exc):
            if errors is not None:
                errors.append(repr(exc))
            return ""
        raise


def responses(records: Sequence[Record], kg: KnowledgeGraph, generator: Generator,
              model: Any = None, top_k: int = 1, errors: list[str] | None = None
              ) -> list[str]:
    """``KG.search`` responses of one generator for every record.

    Endpoint failures give ``""`` (a format error) and are listed in ``errors``.
    """
    if generator == "golden":
        return [golden_response(r) for r in records]
    if generator == "llm":
        if model is None:
            raise ValueError("generator='llm' needs a model")
        from toolguard.kg.llm import LLMPathGenerator

        kwargs = dict(getattr(model, "model_kwargs", None) or {})
        if "tool_choice" in kwargs:  # text replies (llama.cpp's function-calling handler
            kwargs.pop("tool_choice")  # answers text with "" when tool_choice is sent)
            model = model.model_copy(update={"model_kwargs": kwargs})
        llm = LLMPathGenerator(model, kg)
        return [_generate_or_empty(llm, r.query, errors) for r in records]
    resolver = DeterministicPathGenerator(kg, top_k=top_k)
    return [resolver.resolve(r.query).response for r in records]


def run(data_dir: str | Path, subset: Subset = "b", *, extraction: ExtractionMode = "exact",
        generator: Generator = "deterministic", model: Any = None, limit: int | None = None,
        top_k: int = 1, errors: list[str] | None = None,
        ) -> tuple[dict[str, float], list[Record], list[str]]:
    """KG-extraction metrics, the records and the extracted sub-KG strings."""
    records, kg = load(data_dir, subset)
    if limit is not None:
        records = records[:limit]
    extractions = [kg_search(resp, kg, mode=extraction)
                   for resp in responses(records, kg, generator, model, top_k, errors)]
    return kg_metrics(records, extractions), records, extractions


def main(data_dir: str | Path, subset: Subset = "b", json_path: str | Path | None = None,
         extraction: ExtractionMode = "exact", generator: Generator = "deterministic",
         *, base_url: str | None = None, model_name: str | None = None,
         tool_use: bool = False, limit: int | None = None, top_k: int = 1,
         cache: str | Path | None = None) -> dict[str, Any]:
    """Run, print the table(s), write the JSON report; returns the report.

    A model is opened (``base_url``, else the embedded llama.cpp server) when
    ``generator="llm"`` or ``tool_use``; ``top_k`` > 1 makes the deterministic generator
    write a program for each of its top-k relations (higher coverage, lower EM, like
    FamilyTool's relation retrieval).  Tool use is scored with the golden and with the
    extracted sub-KGs: ``report["tool_use"]`` is the pipeline's result (extracted
    sub-KG), ``report["tool_use_golden"]`` the same model with the golden sub-KG and
    ``report["tool_use_no_kg"]`` the model alone (the request without any sub-KG: the
    unresolved baseline).  ``cache`` is a JSONL response cache
    (:class:`~toolguard_evals.runner.JsonlLLMCache`): a rerun resumes from it and sends no
    request it already answered.
    """
    from rich.console import Console
    from rich.table import Table

    report: dict[str, Any] = {"subset": subset, "generator": generator,
                              "extraction": extraction, "top_k": top_k}
    if generator == "llm" or tool_use:
        from toolguard_evals.runner import Endpoint, JsonlLLMCache, open_endpoint

        llm_cache = JsonlLLMCache(cache)
        with open_endpoint(Endpoint(base_url=base_url, model=model_name,
                                    max_tokens=256, timeout=300)) as endpoint_model:
            model = endpoint_model.model_copy(update={"cache": llm_cache})
            errors: dict[str, list[str]] = {"generation": [], "tool_use_no_kg": [],
                                            "tool_use_golden": [], "tool_use": []}
            metrics, records, extractions = run(data_dir, subset, extraction=extraction,
                                                generator=generator, model=model,
                                                limit=limit, top_k=top_k,
                                                errors=errors["generation"])
            if tool_use:
                report["tool_use_no_kg"] = tool_use_metrics(
                    model, records, [r.query for r in records], errors["tool_use_no_kg"])
                report["tool_use_golden"] = tool_use_metrics(
                    model, records, [r.user for r in records], errors["tool_use_golden"])
                report["tool_use"] = tool_use_metrics(
                    model, records, [with_sub_kg(r, e) for r, e in zip(
                        records, extractions, strict=True)], errors["tool_use"])
            report["endpoint_errors"] = {k: len(v) for k, v in errors.items()}
            report["endpoint_error_examples"] = sorted({e for v in errors.values()
                                                        for e in v})[:5]
            report["cache"] = {"hits": llm_cache.hits, "misses": llm_cache.misses}
    else:
        metrics, records, extractions = run(data_dir, subset, extraction=extraction,
                                            generator=generator, limit=limit, top_k=top_k)
    report["records"] = len(records)
    report["kg_extraction"] = metrics
    console = Console()
    table = Table(title=f"FamilyTool-{subset} KG extraction ({generator}, {extraction})")
    for col in ("EM", "F1", "No-Hall.", "Coverage", "Format err."):
        table.add_column(col, justify="right")
    table.add_row(*(f"{metrics[k]:.1f}" for k in
                    ("em", "f1", "no_hallucination", "coverage", "format_error")))
    console.print(table)
    failed = {k: v for k, v in report.get("endpoint_errors", {}).items() if v}
    if failed:
        console.print(f"[yellow]endpoint failures (scored as errors/0): {failed} "
                      f"e.g. {report['endpoint_error_examples'][:1]}[/yellow]")
    if tool_use:
        tu = Table(title=f"FamilyTool-{subset} tool use")
        for col in ("sub-KG", "EM", "Tool Acc", "Value Acc"):
            tu.add_column(col, justify="right")
        for label, key in (("none (model alone)", "tool_use_no_kg"),
                           ("golden", "tool_use_golden"), ("extracted", "tool_use")):
            m = report[key]
            tu.add_row(label, *(f"{m[k]:.1f}" for k in ("em", "tool_acc", "value_acc")))
        console.print(tu)
    if json_path:
        out = Path(json_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    if generator == "llm" or tool_use:
        from toolguard_evals.runner import check_failures

        for part, errs in errors.items():
            check_failures({f"{part} request {i + 1}": e for i, e in enumerate(errs)},
                           len(records), what=f"{part.replace('_', ' ')} requests")
    return report
