"""Generation for CRITICTOOL (unguarded vs guarded) and the report (``toolguard eval critictool``).

As CriticTool's code runs it (``docs/DATA.md`` §5): the model sees the record's history with
the mode prompt inserted into the system message (``llm`` for internal records, ``skip`` or
``finish`` for external ones; ``prompts/critictool_*.md``, verbatim), ``function`` messages
as ``user`` messages (its ``api`` template); one chat completion is one step, parsed by
``format_load``.  Internal records: one generation (``prediction``).  External records:
``test.environment_infer``, up to ``retry_limit + 1`` generations while a reply equals the
failed call ``gold[0]``, the error message appended again each time (``predictions``).

Guarded: the same model after toolguard answered the history's last step
(:mod:`~toolguard_evals.critictool.guarded`: ``create_agent`` + ``RetryControllerMiddleware``
+ ``GuardMiddleware``; ``guarded_engine``: the engines called directly,
:func:`guard_internal` / :func:`guard_external`, as a cross-check).  The controller's
retries of an external call count as re-issued ``gold[0]`` replies (``sources``:
``controller``), within the same budget.  Outputs are cached per case
(``{variant}:{mode}:{record id}``), so scores are recomputed offline (:func:`score_outputs`).
"""

from __future__ import annotations

import asyncio
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, cast, get_args

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from toolguard.context import message_text
from toolguard.guard import Guard
from toolguard.retry import CATEGORY_TEXT, RetryController, RetryPolicy, classify_result
from toolguard.specs import ToolSpec
from toolguard_evals.critictool.data import (
    FINISH,
    CriticToolRecord,
    Level,
    Mode,
    Split,
    format_load,
    load_official,
)
from toolguard_evals.critictool.guarded import (
    agent_external,
    agent_internal,
    verdict_category,
)
from toolguard_evals.critictool.scoring import (
    WEIGHTS,
    Scores,
    overall_score,
    score_external,
    score_internal,
)
from toolguard_evals.critictool.similarity import BackendName, Similarity, get_similarity
from toolguard_evals.runner import (
    Endpoint,
    GenerationCache,
    RunResult,
    check_failures,
    open_endpoint,
    plot_variants,
    print_table,
    run_cases,
    side_by_side_table,
    write_json,
)

Variant = Literal["unguarded", "guarded", "guarded_engine"]
"""``guarded``: the last step answered by ``create_agent`` + toolguard's middleware
(:mod:`~toolguard_evals.critictool.guarded`); ``guarded_engine``: by the engines called
directly (:func:`guard_internal`, :func:`guard_external`), a cross-check."""
ALL_VARIANTS: Final[tuple[Variant, ...]] = get_args(Variant)
VARIANTS: Final[tuple[Variant, ...]] = ("unguarded", "guarded")
"""The variants run by default."""
RETRY_LIMIT: Final = 3
"""CriticTool's ``--retry_limit`` default: up to 4 generations per external record."""
PROTOCOL_VERSION: Final = "critictool-v2"
"""Part of the cache settings: bump when prompts or protocols change."""
CRITICTOOL_CATEGORY: Final[dict[str, str]] = {
    "tool_selection": "tool_select_error",
    "tool_hallucination": "tool_hallucination_error",
    "parameter_key": "parameters_key_error",
    "parameter_value": "parameters_value_error",
}
"""toolguard's controller categories -> CRITICTOOL's error types."""
_JSON_TYPES: Final[dict[str, str | None]] = {
    "string": "string", "STRING": "string", "integer": "integer", "NUMBER": "number",
    "float": "number", "FLOAT": "number", "number": "number", "boolean": "boolean",
    "BOOLEAN": "boolean", "array": "array", "tuple": "array", "dict": "object",
    "object": "object", "any": None,
}


@dataclass(frozen=True, slots=True)
class Case:
    """One generation: a record, the prompt mode and the variant."""

    record: CriticToolRecord
    mode: Mode
    variant: Variant

    @property
    def id(self) -> str:
        """``{variant}:{mode}:{record id}`` (the cache key with the settings)."""
        return f"{self.variant}:{self.mode}:{self.record.id}"


def make_cases(records: Mapping[Split, Sequence[CriticToolRecord]], *,
               variants: Sequence[Variant] = VARIANTS,
               modes: Sequence[Mode] = ("skip", "finish")) -> list[Case]:
    """Internal records in ``llm`` mode, external ones in each of ``modes``, per variant."""
    cases: list[Case] = []
    for variant in variants:
        cases += [Case(r, "llm", variant) for r in records.get("internal", [])]
        for mode in modes:
            cases += [Case(r, mode, variant) for r in records.get("external", [])]
    return cases


# ---------------------------------------------------------------------------- messages
def chat_messages(prompt: Sequence[Mapping[str, str]]) -> list[BaseMessage]:
    """CriticTool messages as LangChain messages (``function`` -> user, as its api template)."""
    out: list[BaseMessage] = []
    for m in prompt:
        role, content = m["role"], m["content"]
        if role == "system":
            out.append(SystemMessage(content))
        elif role == "assistant":
            out.append(AIMessage(content))
        else:
            out.append(HumanMessage(content))
    return out


async def _reply(chat: BaseChatModel, prompt: Sequence[Mapping[str, str]], *,
                 unescape: bool = False) -> str:
    text = message_text(await chat.ainvoke(chat_messages(prompt)))
    return html.unescape(text) if unescape else text


def _same_step(reply: str, gold: Mapping[str, Any]) -> bool:
    """``test.environment_infer``'s check (``format_load`` without cut characters)."""
    parsed = format_load(reply)
    return bool(parsed["name"] == gold["name"] and parsed["args"] == gold["args"])


async def environment_protocol(chat: BaseChatModel, prompt: Sequence[Mapping[str, str]],
                               gold0: Mapping[str, Any], *, retry_limit: int = RETRY_LIMIT,
                               prefilled: Sequence[str] = (), unescape: bool = False,
                               ) -> list[str]:
    """CriticTool's retry protocol: generate until a reply differs from ``gold0``.

    At most ``retry_limit + 1`` replies in all, counting ``prefilled`` ones (the guarded
    controller's retries).  After a reply equal to ``gold0`` it is appended as an assistant
    message followed by the last error message again.  ``unescape``: see
    :func:`generate_case`.
    """
    predictions = list(prefilled)
    messages = [dict(m) for m in prompt]
    while len(predictions) <= retry_limit:
        text = await _reply(chat, messages, unescape=unescape)
        predictions.append(text)
        if not _same_step(text, gold0):
            break
        messages.append({"role": "assistant", "content": text})
        messages.append(dict(messages[-2]))
    return predictions


# ---------------------------------------------------------------------------- guard side
def tool_specs(function_list: Sequence[Mapping[str, Any]]) -> list[ToolSpec]:
    """CRITICTOOL tools as toolguard specs (JSON Schema types; unknown types unconstrained)."""
    specs: list[ToolSpec] = []
    for tool in function_list:
        props: dict[str, Any] = {}
        required: list[str] = []
        for group in ("required_parameters", "optional_parameters"):
            for p in tool.get(group) or []:
                schema: dict[str, Any] = {"description": str(p.get("description", ""))}
                kind = _JSON_TYPES.get(str(p.get("type", "")))
                if kind is not None:
                    schema["type"] = kind
                props[str(p["name"])] = schema
                if group == "required_parameters":
                    required.append(str(p["name"]))
        specs.append(ToolSpec(name=str(tool["name"]),
                              description=str(tool.get("description", "")),
                              parameters={"type": "object", "properties": props,
                                          "required": required}))
    return specs


def history_messages(prompt: Sequence[Mapping[str, str]]) -> list[BaseMessage]:
    """The history as a tool-calling conversation (for the guard): steps become tool calls."""
    out: list[BaseMessage] = []
    last_call: tuple[str, str] | None = None
    for i, m in enumerate(prompt):
        role, content = m["role"], m["content"]
        if role == "system":
            out.append(SystemMessage(content))
        elif role == "user":
            out.append(HumanMessage(content))
        elif role == "assistant":
            step = format_load(content, "{", "}")
            if step["name"] and step["name"] != FINISH and isinstance(step["args"], dict):
                last_call = (f"call_{i}", step["name"])
                out.append(AIMessage("", tool_calls=[{"name": step["name"], "args": step["args"],
                                                      "id": last_call[0]}]))
            else:
                last_call = None
                out.append(AIMessage(content))
        elif last_call is not None:
            out.append(ToolMessage(content, tool_call_id=last_call[0], name=last_call[1]))
            last_call = None
        else:
            out.append(HumanMessage(content))
    return out


def _request(call: Mapping[str, Any], messages: Sequence[BaseMessage]) -> ToolCallRequest:
    return ToolCallRequest(tool_call=cast(Any, dict(call)), tool=None,
                           state={"messages": list(messages)}, runtime=cast(Any, None))


def _answer_text(result: ToolMessage | Command[Any]) -> str:
    if isinstance(result, ToolMessage):
        return message_text(result)
    update = result.update if isinstance(result.update, dict) else {}
    messages = update.get("messages") or []
    return message_text(messages[0]) if messages else ""


def guard_internal(record: CriticToolRecord) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """The ``llm`` prompt of a guarded internal record and what the guard decided.

    Returns:
        ``(prompt, info)`` with ``info = {"action", "hallucination", "category",
        "feedback"}``; the prompt is unchanged when the history does not end with a call.

    """
    prompt = record.prompt("llm")
    messages = history_messages(record.query_prompt)
    if len(messages) < 2 or not isinstance(messages[-1], ToolMessage) or not isinstance(
            messages[-2], AIMessage) or not messages[-2].tool_calls:
        return prompt, {"action": None, "hallucination": None, "category": None,
                        "feedback": None}
    call = messages[-2].tool_calls[0]
    verdict = Guard(tool_specs(record.function_list)).check(messages[:-1])[0]
    if verdict.action != "allow":
        category = verdict_category(verdict)
        feedback = f"Not executed by toolguard: {verdict.reason}"
        if category:
            feedback += f"\nError category: {CATEGORY_TEXT[category]}."
    else:
        original = messages[-1]
        controller = RetryController(sleep=lambda _s: None)
        result = controller.wrap_tool_call(_request(call, messages[:-1]),
                                           lambda _req: original)
        feedback = _answer_text(result)
        category = None if feedback == message_text(original) else classify_result(
            original).category
    prompt[-1] = {"role": prompt[-1]["role"], "content": feedback}
    return prompt, {"action": verdict.action, "hallucination": verdict.hallucination,
                    "category": category, "feedback": feedback}


def guard_external(record: CriticToolRecord, mode: Mode, *, retry_limit: int = RETRY_LIMIT,
                   ) -> tuple[list[dict[str, str]], int, str]:
    """The ``mode`` prompt of a guarded external record, the controller's retries, its answer.

    The last call is run through :class:`RetryController` against a tool that answers the
    record's error every time.

    Raises:
        ValueError: If ``mode`` is not ``skip`` or ``finish``.

    """
    policy, prompt, gold0, error = record.external(mode)
    attempts = 0

    def failing_tool(request: ToolCallRequest) -> ToolMessage:
        nonlocal attempts
        attempts += 1
        return ToolMessage(error, tool_call_id=str(request.tool_call.get("id")),
                           name=str(gold0["name"]))

    read_only = {str(gold0["name"])} if record.meta.get("read_only") else set()
    controller = RetryController(
        RetryPolicy(max_retries=retry_limit, on_failure=policy, read_only_tools=read_only),
        sleep=lambda _s: None)
    call = {"name": gold0["name"], "args": gold0["args"] if isinstance(gold0["args"], dict)
            else {}, "id": "call_failed"}
    result = controller.wrap_tool_call(_request(call, []), failing_tool)
    feedback = _answer_text(result)
    prompt[-1] = {"role": prompt[-1]["role"], "content": feedback}
    return prompt, attempts - 1, feedback


# ---------------------------------------------------------------------------- generation
async def generate_case(chat: BaseChatModel, case: Case, *, retry_limit: int = RETRY_LIMIT,
                        unescape: bool = False) -> dict[str, Any]:
    """Generate one case (see the module docstring); the output the cache stores.

    Replies are JSON or a Python literal (``{"error", "name", "args"}``, ``thought`` too for
    CoT files, ``{"name": "FinishAction", "args": str}`` for a final answer), optionally in a
    code fence.

    Args:
        chat: The model under test.
        case: The case.
        retry_limit: CriticTool's ``--retry_limit``.
        unescape: Undo HTML escapes in replies (``html.unescape``), for servers whose chat
            template HTML-escapes the prompt: the model then sees ``&#34;`` for every ``"``
            of the JSON in its prompt and writes its JSON the same way (llama-cpp-python's
            ``chatml-function-calling`` handler; llama-server, which
            :class:`~toolguard_evals.local_model.LocalModelServer` runs, does not escape).

    """
    rec = case.record
    if case.mode == "llm":
        if case.variant == "guarded":
            prompt, info = await agent_internal(rec, tool_specs(rec.function_list),
                                                history_messages(rec.query_prompt))
        elif case.variant == "guarded_engine":
            prompt, info = guard_internal(rec)
        else:
            prompt, info = rec.prompt("llm"), {}
        return {"prediction": await _reply(chat, prompt, unescape=unescape), "guard": info}
    gold0 = rec.ground_truth[0]
    if case.variant == "guarded":
        prompt, retries, feedback = await agent_external(
            rec, case.mode, tool_specs(rec.function_list),
            history_messages(rec.query_prompt)[:-2], retry_limit=retry_limit)
        prefilled = [rec.query_prompt[-2]["content"]] * min(retries, retry_limit)
    elif case.variant == "guarded_engine":
        prompt, retries, feedback = guard_external(rec, case.mode, retry_limit=retry_limit)
        prefilled = [rec.query_prompt[-2]["content"]] * min(retries, retry_limit)
    else:
        prompt, retries, feedback, prefilled = rec.prompt(case.mode), 0, None, []
    predictions = await environment_protocol(chat, prompt, gold0, retry_limit=retry_limit,
                                             prefilled=prefilled, unescape=unescape)
    return {"predictions": predictions,
            "sources": ["controller"] * len(prefilled)
            + ["model"] * (len(predictions) - len(prefilled)),
            "controller_retries": retries, "feedback": feedback}


# ---------------------------------------------------------------------------- scoring
def score_outputs(records: Mapping[Split, Sequence[CriticToolRecord]],
                  outputs: Mapping[str, Mapping[str, Any]], similarity: Similarity, *,
                  variants: Sequence[Variant] = VARIANTS,
                  modes: Sequence[Mode] = ("skip", "finish")) -> dict[str, Any]:
    """Score saved outputs (``case id -> output``) per variant; pure, works offline.

    Returns:
        ``{variant: {"internal": Scores, "skip": Scores, "finish": Scores,
        "dimensions": {...}}}`` (``Scores`` objects; see :func:`report_payload` for JSON).

    """
    result: dict[str, Any] = {}
    internal = list(records.get("internal", []))
    external = list(records.get("external", []))
    for variant in variants:
        scores: dict[str, Any] = {}
        if internal:
            preds = {r.id: str(outputs[f"{variant}:llm:{r.id}"]["prediction"])
                     for r in internal if f"{variant}:llm:{r.id}" in outputs}
            scores["internal"] = score_internal(internal, preds, similarity)
        for mode in modes:
            if external:
                ext = {r.id: [str(p) for p in outputs[f"{variant}:{mode}:{r.id}"]["predictions"]]
                       for r in external if f"{variant}:{mode}:{r.id}" in outputs}
                scores[mode] = score_external(external, ext, mode, similarity)
        scores["dimensions"] = overall_score(scores.get("internal"), scores.get("skip"),
                                             scores.get("finish"))
        result[variant] = scores
    return result


TABLE_ROWS: Final[tuple[tuple[str, str, str], ...]] = (
    ("internal", "critic", "internal: detect (critic)"),
    ("internal", "reflect", "internal: category (reflect)"),
    ("internal", "name", "internal: tool (name)"),
    ("internal", "args", "internal: args"),
    ("internal", "parse_rate", "internal: parse rate"),
    ("skip", "retry", "skip: retry"),
    ("skip", "break", "skip: break"),
    ("skip", "name", "skip: tool"),
    ("skip", "args", "skip: args"),
    ("skip", "parse_rate", "skip: parse rate"),
    ("finish", "retry", "finish: retry"),
    ("finish", "break", "finish: break"),
    ("finish", "name", "finish: tool (FinishAction)"),
    ("finish", "parse_rate", "finish: parse rate"),
    ("dimensions", "reflect", "REFLECT (w 0.2)"),
    ("dimensions", "correct", "CORRECT (w 0.3)"),
    ("dimensions", "retry", "RETRY (w 0.05)"),
    ("dimensions", "skip_finish", "SKIP/FINISH (w 0.45)"),
    ("dimensions", "overall", "OVERALL"),
)


def table_rows(scored: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """``row label -> {variant: percent}`` for :func:`toolguard_evals.runner.side_by_side_table`."""
    rows: dict[str, dict[str, float | None]] = {}
    for part, key, label in TABLE_ROWS:
        values: dict[str, float | None] = {}
        for variant, scores in scored.items():
            src = scores.get(part)
            metrics = src if part == "dimensions" else (src.metrics if src else None)
            value = metrics.get(key) if metrics else None
            values[variant] = None if value is None else 100.0 * value
        if any(v is not None for v in values.values()):
            rows[label] = values
    return rows


def report_payload(scored: Mapping[str, Any], *, similarity: Similarity, data: Mapping[str, Any],
                   endpoint: Endpoint, run: RunResult | None,
                   extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON report: scores per variant, the similarity model used, settings, timings."""
    variants: dict[str, Any] = {}
    for variant, scores in scored.items():
        variants[variant] = {k: (v.to_json() if isinstance(v, Scores) else v)
                             for k, v in scores.items()}
    return {
        "benchmark": "critictool",
        "similarity_model": similarity.name,
        "similarity_is_sentence_bert": similarity.sentence_bert,
        "data": dict(data),
        "endpoint": endpoint.settings() | {"base_url": endpoint.base_url},
        "protocol": {"version": PROTOCOL_VERSION, "retry_limit": RETRY_LIMIT},
        "weights": WEIGHTS,
        "overall_split": "reflect = mean(detect, category); correct = mean(tool, args); retry = "
                         "mean(skip retry, finish retry); skip/finish = mean(mean(skip break, "
                         "tool, args), mean(finish break, tool)); scores in [0, 1]",
        "variants": variants,
        "generation": None if run is None else {
            "total": run.generated + run.cached + len(run.failed),
            "generated": run.generated, "cached": run.cached, "failed": run.failed,
            "seconds": round(run.seconds, 3), "cases_per_second": round(run.cases_per_second(), 4)},
        **dict(extra or {}),
    }


def guard_stats(records: Mapping[Split, Sequence[CriticToolRecord]],
                outputs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """How toolguard answered: refusals on error-free vs erroneous last steps, retries."""
    stats: dict[str, Any] = {"internal_refused_clean": 0, "internal_clean": 0,
                             "internal_refused_error": 0, "internal_error": 0,
                             "external_controller_retries": 0}
    for r in records.get("internal", []):
        out = outputs.get(f"guarded:llm:{r.id}")
        if out is None:
            continue
        refused = (out.get("guard") or {}).get("action") not in (None, "allow")
        kind = "error" if r.error_type else "clean"
        stats[f"internal_{kind}"] += 1
        stats[f"internal_refused_{kind}"] += int(refused)
    for case_id, out in outputs.items():
        if case_id.startswith("guarded:") and ":llm:" not in case_id:
            stats["external_controller_retries"] += int(out.get("controller_retries") or 0)
    return stats


# ---------------------------------------------------------------------------- entry point
def load_records(*, data_dir: Path | str | None, level: Level = "base", cot: bool = False,
                 limit: int | None = None, seed: int = 0, max_tools: int = 12,
                 ) -> tuple[dict[Split, list[CriticToolRecord]], dict[str, Any]]:
    """The official dataset at ``data_dir``, or our set built from BFCL when ``None``.

    ``seed`` and ``max_tools`` (tools per system prompt) only apply to the built set.
    """
    if data_dir is not None:
        records = load_official(data_dir, level=level, cot=cot, limit=limit)
        return records, {"source": f"official CriticTool-Dataset at {data_dir}", "level": level,
                         "cot": cot, "limit": limit,
                         "counts": {k: len(v) for k, v in records.items()}}
    from toolguard_evals.critictool.build import build_from_bfcl

    built = build_from_bfcl(seed=seed, limit=limit, max_tools=max_tools)
    counts: dict[str, Any] = {k: len(v) for k, v in built.items()}
    counts["internal_error_types"] = {
        t or "error-free": sum(1 for r in built["internal"] if r.error_type == t)
        for t in sorted({r.error_type or "" for r in built["internal"]})}
    return dict(built), {"source": "built from BFCL v4 multi_turn_base ground truth "
                                   "(toolguard_evals.critictool.build)", "seed": seed, "limit":
                                   limit,
                         "max_tools": max_tools,
                         "counts": counts}


def run_critictool(*, endpoint: Endpoint, data_dir: Path | str | None = None,
                   level: Level = "base", cot: bool = False, limit: int | None = None,
                   seed: int = 0, concurrency: int = 4, cache: Path | str | None = None,
                   similarity: BackendName = "auto", variants: Sequence[Variant] = VARIANTS,
                   max_tools: int = 12, progress: bool = True) -> dict[str, Any]:
    """Generate (cached, resumable), score and return the JSON report.

    Raises:
        ValueError: For ``concurrency < 1`` or an unknown variant.
        FileNotFoundError: If ``data_dir`` holds no CRITICTOOL file.

    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    bad = [v for v in variants if v not in ALL_VARIANTS]
    if bad:
        raise ValueError(f"unknown variants {bad}; expected some of {list(ALL_VARIANTS)}")
    records, data = load_records(data_dir=data_dir, level=level, cot=cot, limit=limit, seed=seed,
                                 max_tools=max_tools)
    sim = get_similarity(similarity)
    cases = make_cases(records, variants=variants)
    unescape = False  # llama-server renders chat templates as written (no HTML escapes)
    settings = endpoint.settings() | {"benchmark": "critictool", "protocol": PROTOCOL_VERSION,
                                      "html_unescape": unescape}
    store = GenerationCache(cache)
    todo = [c for c in cases if store.get(c.id, settings) is None]
    if todo:
        with open_endpoint(endpoint) as chat:
            run = asyncio.run(run_cases(
                cases, lambda c: generate_case(chat, c, unescape=unescape), case_id=lambda c: c.id,
                settings=settings, cache=store, concurrency=concurrency,
                description="critictool", progress=progress))
    else:
        run = asyncio.run(run_cases(cases, _never, case_id=lambda c: c.id, settings=settings,
                                    cache=store, concurrency=concurrency, progress=False))
    scored = score_outputs(records, run.outputs, sim, variants=variants)
    return report_payload(scored, similarity=sim, data=data, endpoint=endpoint, run=run,
                          extra={"guard_stats": guard_stats(records, run.outputs),
                                 "html_unescape": unescape,
                                 "table": table_rows(scored)})


async def _never(case: Case) -> dict[str, Any]:
    raise RuntimeError(f"{case.id}: not cached")  # pragma: no cover - all cases were cached


def main(*, endpoint: Endpoint, data_dir: Path | None = None, level: Level = "base",
         cot: bool = False, limit: int | None = None, seed: int = 0, concurrency: int = 4,
         cache: Path | None = None, json_path: Path | None = None, plot: Path | None = None,
         similarity: BackendName = "auto", max_tools: int = 12,
         variants: Sequence[Variant] = VARIANTS) -> dict[str, Any]:
    """Run, print the side-by-side table, write the JSON and the plot.

    ``variants``: add ``guarded_engine`` for the engine-level cross-check.
    """
    report = run_critictool(endpoint=endpoint, data_dir=data_dir, level=level, cot=cot,
                            limit=limit, seed=seed, concurrency=concurrency, cache=cache,
                            similarity=similarity, max_tools=max_tools, variants=variants)
    rows = report["table"]
    title = (f"CRITICTOOL ({report['data']['source'].split(' (')[0]}; similarity: "
             f"{report['similarity_model']})")
    print_table(side_by_side_table(title, rows, columns=list(report["variants"])))
    gen = report["generation"]
    print(f"cases: {gen['generated']} generated, {gen['cached']} cached, "
          f"{len(gen['failed'])} failed; {gen['cases_per_second']:.3f} cases/s")
    print(f"guard: {json.dumps(report['guard_stats'])}")
    write_json(json_path, report)
    if plot is not None:
        plot_variants(rows, plot, title="CRITICTOOL: unguarded vs guarded")
    check_failures(gen["failed"], gen["total"], what="cases")
    return report
