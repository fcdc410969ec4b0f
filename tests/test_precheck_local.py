"""LLM pre-check modes against the real local llama-server (SmolLM2-135M).

The contract only, not quality: a valid decision comes back whatever the 135M model
writes (a valid answer, or malformed output retried once and then the fallback), and the
``--base-url`` path of the abstain eval runs against an OpenAI-compatible endpoint.  Few
requests, short prompts (one-tool BFCL records), small completions.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import require_bfcl
from langchain_openai import ChatOpenAI

from tests.conftest import needs_local_model
from toolguard.precheck import PRECHECK_LABELS, Precheck
from toolguard_evals.abstain import Case, load_bfcl, run
from toolguard_evals.local_model import LocalModelServer, chat_model_for

pytestmark = needs_local_model


@pytest.fixture(scope="module")
def server() -> Iterator[LocalModelServer]:
    # explicit pre-check prompts bind no tools: the row's chatml-tools template renders
    # them as plain ChatML
    with LocalModelServer("smollm2", n_ctx=2048, startup_timeout=120,
                          max_tokens_cap=96) as srv:
        yield srv


@pytest.fixture(scope="module")
def small_cases() -> dict[str, Case]:
    require_bfcl()
    return {c.id: c for c in load_bfcl(limit=1, multi_turn=False)}


def _chat(server: LocalModelServer) -> ChatOpenAI:
    return server.chat_model(max_tokens=96, timeout=90)


def test_structured_verification_returns_a_valid_decision(
    server: LocalModelServer, small_cases: dict[str, Case]
) -> None:
    case = small_cases["simple_python_0"]
    d = Precheck(case.tools, mode="structured_verification", model=_chat(server)).decide(
        case.messages)
    assert d.decision in PRECHECK_LABELS
    assert 1 <= d.attempts <= 2
    if d.fallback:  # malformed (or failed) twice: the documented fallback decided
        assert d.mode == "deterministic"
        assert "structured_verification answer unusable" in d.reason
        assert d.decision == Precheck(case.tools).decide(case.messages).decision
    else:
        assert d.mode == "structured_verification" and d.raw


def test_eval_against_an_openai_compatible_endpoint(
    server: LocalModelServer, small_cases: dict[str, Case]
) -> None:
    chat = chat_model_for(server.base_url, None, max_tokens=96, request_timeout=90,
                          max_retries=0)
    assert chat is not None and chat.model_name == "smollm2"
    report = run([small_cases["irrelevance_0"]], mode="zero_shot", model=chat)
    assert report["mode"] == "zero_shot"
    assert 1 <= report["llm"]["calls"] <= 2
    assert report["per_subset"]["irrelevance"]["n"] == 1
