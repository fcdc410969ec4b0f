"""CRITICTOOL generation: CriticTool's retry protocol, the guarded variant, caching, report.

Plumbing runs on a scripted chat model (``toolguard.testing.ScriptedChatModel``) and real
records built from BFCL; one end-to-end test runs ``toolguard eval critictool`` against the
real local llama.cpp server (SmolLM2-135M) on a one-record slice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from typer.testing import CliRunner

from tests.conftest import (
    HAS_LOCAL_MODEL,
    LOCAL_MODEL_MISSING,
    LOCAL_MODEL_REQUIRED,
    require_bfcl,
)
from toolguard.testing import ScriptedChatModel
from toolguard_evals.cli import app
from toolguard_evals.critictool.data import CriticToolRecord, Split, format_load
from toolguard_evals.critictool.run import (
    Case,
    environment_protocol,
    generate_case,
    guard_external,
    guard_internal,
    make_cases,
    score_outputs,
    table_rows,
)
from toolguard_evals.critictool.similarity import rapidfuzz_similarity
from toolguard_evals.runner import GenerationCache, run_cases

Built = dict[Split, list[CriticToolRecord]]


@pytest.fixture(scope="module")
def built() -> Built:
    require_bfcl()
    from toolguard_evals.critictool.build import build_from_bfcl

    return build_from_bfcl(seed=0, limit=5)


def by_kind(records: list[CriticToolRecord], kind: str) -> CriticToolRecord:
    return next(r for r in records if r.error_type == kind or r.meta.get(
        "environment_error") == kind)


def text(step: dict[str, Any]) -> AIMessage:
    return AIMessage(json.dumps(step))


def test_protocol_retries_until_the_reply_differs(built: Built) -> None:
    rec = built["external"][0]
    gold0, gold1 = rec.ground_truth
    chat = ScriptedChatModel(script=[text(gold0), text(gold0), text(gold1)])
    prompt = rec.prompt("skip")
    preds = asyncio.run(environment_protocol(chat, prompt, gold0))
    assert [format_load(p)["name"] for p in preds] == [gold0["name"], gold0["name"],
                                                       gold1["name"]]
    # each retry is appended with the error message again (test.environment_infer)
    last = chat.calls[-1]
    assert len(last) == len(prompt) + 4
    assert isinstance(last[-1], HumanMessage) and last[-1].content == prompt[-1]["content"]
    assert isinstance(last[-2], AIMessage) and format_load(str(last[-2].content)) == format_load(
        preds[1])
    # function messages go as user messages, the system prompt carries the skip instruction
    assert isinstance(chat.calls[0][0], SystemMessage)
    assert "skip the current step" in str(chat.calls[0][0].content)
    # at most retry_limit + 1 generations
    stubborn = ScriptedChatModel(script=[text(gold0)] * 10)
    assert len(asyncio.run(environment_protocol(stubborn, prompt, gold0))) == 4
    assert len(asyncio.run(environment_protocol(stubborn, prompt, gold0,
                                                prefilled=["x"] * 3))) == 4


def test_html_escaped_replies_are_unescaped_on_request(built: Built) -> None:
    rec = built["internal"][0]
    escaped = AIMessage(json.dumps(rec.ground_truth).replace('"', "&#34;"))
    chat = ScriptedChatModel(script=[escaped, escaped])
    raw = asyncio.run(generate_case(chat, Case(rec, "llm", "unguarded")))
    assert format_load(raw["prediction"], "{", "}")["name"] == ""
    fixed = asyncio.run(generate_case(chat, Case(rec, "llm", "unguarded"), unescape=True))
    assert format_load(fixed["prediction"], "{", "}")["name"] == rec.ground_truth["name"]


def test_guarded_internal_answers_with_the_guard(built: Built) -> None:
    internal = built["internal"]
    hallucinated = by_kind(internal, "tool_hallucination_error")
    prompt, info = guard_internal(hallucinated)
    assert info["action"] == "block" and info["hallucination"] == "type"
    assert prompt[-1]["content"].startswith("Not executed by toolguard:")
    assert "not a valid tool" in prompt[-1]["content"]
    assert "tool hallucination error" in prompt[-1]["content"]
    assert prompt[:-1] == hallucinated.prompt("llm")[:-1]  # only the last answer changes
    key = by_kind(internal, "parameters_key_error")
    assert guard_internal(key)[1]["category"] == "parameter_key"
    clean = by_kind(internal, "")
    prompt, info = guard_internal(clean)
    assert info["action"] == "allow" and prompt == clean.prompt("llm")  # real answer kept


def test_guarded_external_uses_the_controller(built: Built) -> None:
    rate = by_kind(built["external"], "rate_limit")
    prompt, retries, feedback = guard_external(rate, "skip")
    assert retries == 3 and "Skip this step" in feedback and prompt[-1]["content"] == feedback
    denied = by_kind(built["external"], "permission")
    _, retries, feedback = guard_external(denied, "finish")
    assert retries == 0 and "permanent" in feedback and "Stop here" in feedback


def test_generate_cache_resume_and_offline_scoring(built: Built,
                                                   tmp_path: Path) -> None:
    records: Built = {"internal": built["internal"][:2], "external": built["external"][:1]}
    cases = make_cases(records)
    assert len(cases) == 2 * (2 + 2)
    rate_or_other = records["external"][0]

    def oracle(messages: list[BaseMessage]) -> AIMessage:
        # answers like the oracle: the record is found from its prompt (all but the last
        # answer, which the guarded variant replaces)
        seen = [m.content for m in messages[:-1]]
        for case in cases:
            if [m["content"] for m in case.record.prompt(case.mode)[:-1]] == seen:
                rec = case.record
                break
        else:  # pragma: no cover - every prompt comes from a record
            raise AssertionError("unknown prompt")
        if rec.split == "internal":
            return text({**rec.ground_truth, **({"error": rec.error_type}
                                                if rec.error_type else {})})
        return text(rec.ground_truth[1])

    chat = ScriptedChatModel(script=[oracle] * 50)
    cache = GenerationCache(tmp_path / "gen.jsonl")
    settings = {"model": "scripted"}

    def run() -> Any:
        return asyncio.run(run_cases(cases, lambda c: generate_case(chat, c),
                                     case_id=lambda c: c.id, settings=settings, cache=cache,
                                     concurrency=3, progress=False))

    first = run()
    assert first.generated == len(cases) and not first.failed
    calls = chat.position
    again = run()
    assert again.cached == len(cases) and again.generated == 0 and chat.position == calls
    outputs = GenerationCache(tmp_path / "gen.jsonl").outputs(settings)  # offline, reloaded
    guarded = outputs[f"guarded:skip:{rate_or_other.id}"]
    assert guarded["sources"][-1] == "model"
    scored = score_outputs(records, outputs, rapidfuzz_similarity())
    internal = scored["unguarded"]["internal"].metrics
    assert internal["critic"] == internal["reflect"] == internal["name"] == 1.0
    rows = table_rows(scored)
    assert rows["internal: detect (critic)"] == {"unguarded": 100.0, "guarded": 100.0}
    assert rows["skip: break"]["unguarded"] == 100.0


def test_case_ids_are_unique_per_variant_and_mode(built: Built) -> None:
    cases = make_cases(built)
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids))
    assert Case(built["internal"][0], "llm", "guarded").id.startswith("guarded:llm:")


# ---------------------------------------------------------------------------- real model
@pytest.fixture(scope="module")
def local_server() -> Iterator[str]:
    if not (HAS_LOCAL_MODEL or LOCAL_MODEL_REQUIRED):
        pytest.skip(LOCAL_MODEL_MISSING)
    from toolguard_evals.local_model import LocalModelServer

    with LocalModelServer("smollm2") as server:
        yield server.base_url


def test_end_to_end_against_the_local_model(local_server: str, tmp_path: Path) -> None:
    require_bfcl()
    report_path = tmp_path / "report.json"
    args = ["eval", "critictool", "--limit", "1", "--base-url", local_server,
            "--max-tools", "2", "--max-tokens", "64", "--concurrency", "2",
            "--request-timeout", "900",  # a loaded 2-core runner queues requests for minutes
            "--cache", str(tmp_path / "gen.jsonl"),
            "--similarity", "rapidfuzz", "--json", str(report_path),
            "--plot", str(tmp_path / "plot.png")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "unguarded" in result.output and "guarded" in result.output
    report = json.loads(report_path.read_text())
    assert report["similarity_model"].startswith("rapidfuzz")
    assert not report["generation"]["failed"]
    assert report["generation"]["generated"] == 6  # 1 internal + 1 external x 2 modes, x 2
    for variant in ("unguarded", "guarded"):
        v = report["variants"][variant]
        assert v["internal"]["n"] == 1 and v["skip"]["n"] == 1 and v["finish"]["n"] == 1
        assert all(0.0 <= x <= 1.0 for x in v["dimensions"].values() if x is not None)
    assert (tmp_path / "plot.png").stat().st_size > 0
    rerun = CliRunner().invoke(app, args)  # resumed from the cache: no requests
    assert rerun.exit_code == 0 and "6 cached" in rerun.output


def test_guarded_variant_runs_through_create_agent(built: Built) -> None:
    """The shipped middleware answers the last step; the engines agree as a cross-check."""
    from toolguard.retry import CATEGORY_TEXT
    from toolguard_evals.critictool.guarded import agent_external, agent_internal
    from toolguard_evals.critictool.run import history_messages, tool_specs

    internal = built["internal"]
    for kind in ("tool_hallucination_error", "parameters_key_error", ""):
        rec = by_kind(internal, kind)
        specs, history = tool_specs(rec.function_list), history_messages(rec.query_prompt)
        prompt, info = asyncio.run(agent_internal(rec, specs, history))
        _, engine = guard_internal(rec)
        assert (info["action"], info["hallucination"], info["category"]) == (
            engine["action"], engine["hallucination"], engine["category"]), kind
        assert prompt[:-1] == rec.prompt("llm")[:-1]  # only the last answer changes
        if kind:
            assert prompt[-1]["content"].endswith(
                f"Error category: {CATEGORY_TEXT[info['category']]}.")
        else:
            assert prompt == rec.prompt("llm")  # the real answer, kept
    rate = by_kind(built["external"], "rate_limit")
    rec_history = history_messages(rate.query_prompt)[:-2]
    prompt, retries, feedback = asyncio.run(agent_external(
        rate, "skip", tool_specs(rate.function_list), rec_history, retry_limit=3))
    assert retries == 3 and "Skip this step" in feedback and prompt[-1]["content"] == feedback
    denied = by_kind(built["external"], "permission")
    _, retries, feedback = asyncio.run(agent_external(
        denied, "finish", tool_specs(denied.function_list),
        history_messages(denied.query_prompt)[:-2], retry_limit=3))
    assert retries == 0 and "Stop here" in feedback
    guarded = asyncio.run(generate_case(ScriptedChatModel(script=[text(rate.ground_truth[1])]),
                                        Case(rate, "skip", "guarded")))
    assert guarded["controller_retries"] == 3 and guarded["sources"][-1] == "model"
