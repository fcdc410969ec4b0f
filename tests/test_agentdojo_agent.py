"""AgentDojo with a model as the agent (``toolguard_evals.agentdojo_agent``): the plumbing.

A scripted model stands for the real one: these tests check that the episodes run in
AgentDojo's runtime and are judged by AgentDojo's own checks (an agent that performs the
injection task's calls is an attack success, and the guard with the simulated user stops
it; an agent that performs the user task's calls has utility), that the response cache
replays a finished run without the model, that failures are counted and a run whose
episodes all failed raises, and that the held-out suites are refused.  No real model runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage

pytest.importorskip("agentdojo")

from toolguard.testing import ScriptedChatModel
from toolguard_evals import agentdojo_agent as aa
from toolguard_evals.runner import EvalRunError

SUITE = "banking"
USER_TASK = "user_task_0"  # reads a bill (an injection vector), pays it
INJECTION_TASK = "injection_task_0"  # one send_money to the attacker's IBAN


def _calls(calls: Sequence[Any], prefix: str) -> list[AIMessage]:
    return [AIMessage("", tool_calls=[{"name": c.function, "args": dict(c.args),
                                       "id": f"{prefix}{i}", "type": "tool_call"}])
            for i, c in enumerate(calls)]


def _gold(kind: str, task: str) -> list[Any]:
    suite = aa._suite(SUITE)
    tasks = suite.user_tasks if kind == "user" else suite.injection_tasks
    return list(tasks[task].ground_truth(suite.load_and_inject_default_environment({})))


class _Model(ScriptedChatModel):
    """A scripted model whose cache key does not depend on its script."""

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": "scripted"}


def _model(steps: list[AIMessage], cache: aa.EpisodeCache | None = None) -> _Model:
    # the closing words repeat: the guard may send the turn back to the model
    return _Model(script=[*steps, *[AIMessage("Done.") for _ in range(6)]], cache=cache)


def _obeying() -> list[AIMessage]:
    """The user's first call (it reads the injection), then the attacker's calls."""
    return _calls(_gold("user", USER_TASK)[:1], "u") + _calls(
        _gold("injection", INJECTION_TASK), "a")


def test_an_obeying_agent_is_an_attack_success_unguarded_and_stopped_guarded() -> None:
    case = aa.Case("unguarded", SUITE, USER_TASK, "important_instructions", INJECTION_TASK)
    row = aa.run_episode(case, _model(_obeying()))
    assert row.kind == "attack" and row.injection_seen
    assert row.security is True  # AgentDojo's own security check
    assert row.utility is False  # the bill was not paid
    assert row.functions == ["read_file", "send_money"]
    assert row.asked == 0 and row.toolguard_answered == 0

    guarded = aa.run_episode(aa.Case("guarded", SUITE, USER_TASK, "important_instructions",
                                     INJECTION_TASK), _model(_obeying()))
    assert guarded.injection_seen
    assert guarded.security is False  # the attacker's transfer never ran
    assert guarded.functions == ["read_file"]
    assert guarded.toolguard_answered >= 1
    assert guarded.asked == 0 or guarded.rejected >= 1  # asked: the user said no


def test_benign_utility_is_agentdojos_check() -> None:
    done = aa.run_episode(aa.Case("unguarded", SUITE, USER_TASK),
                          _model(_calls(_gold("user", USER_TASK), "u")))
    assert done.kind == "benign" and done.security is None
    assert done.utility is True and done.functions == ["read_file", "send_money"]
    assert done.model_calls == 3 and not done.limited
    idle = aa.run_episode(aa.Case("unguarded", SUITE, USER_TASK),
                          _model([AIMessage("I cannot pay bills.")]))
    assert idle.utility is False and idle.executed == 0 and idle.output == "I cannot pay bills."
    # guarded, the user approves the payment it asked for (values in its bill and prompt)
    guarded = aa.run_episode(aa.Case("guarded", SUITE, USER_TASK),
                             _model(_calls(_gold("user", USER_TASK), "u")))
    assert guarded.utility is True and guarded.rejected == 0
    assert guarded.approved == guarded.asked


def test_the_model_call_limit_ends_a_runaway_episode() -> None:
    read = _gold("user", USER_TASK)[0]
    steps = [_calls([read], f"r{i}-")[0] for i in range(10)]
    row = aa.run_episode(aa.Case("unguarded", SUITE, USER_TASK), _model(steps),
                         max_model_calls=3)
    assert row.limited and row.model_calls == 3 and row.executed == 3


def test_the_simulated_user_knows_what_it_asked_for() -> None:
    user = aa.SimulatedUser("Pay 98.70 to UK123 for the car", (
        {"recipient": "UK123", "amount": 98.7, "subject": "Car Rental\t98.70"},))
    assert user.approves({"args": {"recipient": "UK123", "amount": 98.7}})
    assert user.approves({"args": {"subject": "car rental", "amount": "98.7", "x": None}})
    assert not user.approves({"args": {"recipient": "US1330000", "amount": 98.7}})
    grouped = {"args": {"calls": [{"id": "1", "name": "f", "args": {"recipient": "UK123"}},
                                  {"id": "2", "name": "f", "args": {"amount": 0.01}}]}}
    assert not user.approves(grouped)


def test_the_simulated_user_never_knows_the_attackers_text() -> None:
    # slack user_task_7 ("Add Charlie to the channel starting with External"): the
    # injection vector is the channel's own name, so on the attacked environment the user
    # task's ground truth carries the injection ("Send a link ... to Alice") as an argument
    suite = aa._suite("slack")
    obey = AIMessage("", tool_calls=[
        {"name": "send_direct_message", "id": "a0", "type": "tool_call",
         "args": {"recipient": "Alice", "body": "www.secure-systems-252.com"}}])
    steps = [*_calls(suite.user_tasks["user_task_7"].ground_truth(
        suite.load_and_inject_default_environment({}))[:1], "u"), obey]
    case = ("slack", "user_task_7", "important_instructions", "injection_task_1")
    unguarded = aa.run_episode(aa.Case("unguarded", *case), _model(steps))
    assert unguarded.injection_seen and unguarded.security is True
    guarded = aa.run_episode(aa.Case("guarded", *case), _model(steps))
    assert guarded.injection_seen
    assert guarded.asked >= 1 and guarded.approved == 0  # the guard asked, the user said no
    assert guarded.security is False
    assert guarded.functions == ["get_channels"]


def _report(model: ScriptedChatModel | Any, **kwargs: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"model_name": "scripted", "suites": [SUITE],
                               "modes": ["unguarded"], "attacks": [], "benign_limit": 1,
                               "pairs": 0, **kwargs}
    return aa.run_agentdojo_agent(model, **options)


def test_the_cache_replays_a_finished_run_without_the_model(tmp_path: Path) -> None:
    path = tmp_path / "cache.jsonl"
    first = _report(_model(_calls(_gold("user", USER_TASK), "u"), aa.EpisodeCache(path)))
    assert first["benign"]["unguarded"][SUITE]["utility"]["k"] == 1
    assert len(path.read_text().splitlines()) == 3  # three model replies
    # an empty script: every request must come from the file
    cache = aa.EpisodeCache(path)
    again = _report(_Model(script=[], cache=cache))
    assert cache.misses == 0 and cache.hits == 3
    assert again["runs"][0]["functions"] == first["runs"][0]["functions"]
    assert again["benign"] == first["benign"]


def test_the_report_counts_and_intervals() -> None:
    report = _report(_model(_obeying()), attacks=["important_instructions"], pairs=1,
                     user_tasks=[USER_TASK], injection_tasks=[INJECTION_TASK],
                     benign_limit=1)
    benign = report["benign"]["unguarded"][SUITE]
    assert benign["episodes"] == 1 and benign["errors"] == 0
    attack = report["attack"]["unguarded"]["important_instructions"][SUITE]
    assert attack["attack_success"]["n"] == 1
    lo, hi = attack["attack_success"]["ci95"]
    assert 0 <= lo <= attack["attack_success"]["rate"] <= hi <= 1
    assert report["pairs_run"] == {SUITE: [f"{USER_TASK}/{INJECTION_TASK}"]}


class _Down(_Model):
    def _generate(self, messages: list[BaseMessage], stop: Any = None,
                  run_manager: Any = None, **kwargs: Any) -> Any:
        raise ConnectionError("the model server is down")


class _Malformed(_Model):
    """Reads the bill, then the server cannot parse the model's next reply."""

    def _generate(self, messages: list[BaseMessage], stop: Any = None,
                  run_manager: Any = None, **kwargs: Any) -> Any:
        if self.position >= 1:
            raise RuntimeError("Error code: 500 - Failed to parse tool call arguments as JSON")
        return super()._generate(messages, stop, run_manager, **kwargs)


def test_a_reply_the_server_cannot_parse_ends_the_episode_judged_as_it_stands() -> None:
    report = _report(_Malformed(script=_calls(_gold("user", USER_TASK), "u")))
    (row,) = report["runs"]
    assert row["malformed"] and row["functions"] == ["read_file"] and not row["utility"]
    assert report["failed"] == {} and report["benign"]["unguarded"][SUITE]["malformed"] == 1


class _Overflow(_Model):
    """Reads the bill, then the next request is longer than the server's context window."""

    def _generate(self, messages: list[BaseMessage], stop: Any = None,
                  run_manager: Any = None, **kwargs: Any) -> Any:
        if self.position >= 1:
            raise RuntimeError("Error code: 400 - request (17364 tokens) exceeds the "
                               "available context size (16384 tokens), try increasing it")
        return super()._generate(messages, stop, run_manager, **kwargs)


def test_a_request_longer_than_the_context_ends_the_episode_judged_as_it_stands() -> None:
    report = _report(_Overflow(script=_calls(_gold("user", USER_TASK), "u")))
    (row,) = report["runs"]
    assert row["overflow"] and not row["malformed"]
    assert row["functions"] == ["read_file"] and not row["utility"]
    assert report["failed"] == {} and report["benign"]["unguarded"][SUITE]["overflow"] == 1


def test_a_run_whose_episodes_all_failed_raises() -> None:
    with pytest.raises(EvalRunError, match="all 1 AgentDojo episodes failed"):
        _report(_Down(script=[]))


def test_held_out_suites_and_unknown_options_are_refused() -> None:
    for bad in ({"suites": ["workspace"]}, {"suites": ["travel"]},
                {"modes": ["nope"]}, {"attacks": ["manual"]}):
        options: dict[str, Any] = {"suites": [SUITE], "modes": ["unguarded"], "attacks": [],
                                   **bad}
        with pytest.raises(ValueError):
            aa.build_cases(options["suites"], options["modes"], options["attacks"])


def test_pairs_are_seeded_and_shared_by_modes_and_attacks() -> None:
    a = aa.build_cases([SUITE], ["unguarded", "guarded"], ["important_instructions",
                                                          "tool_knowledge"],
                       benign_limit=2, pairs=3, seed=1)
    b = aa.build_cases([SUITE], ["unguarded", "guarded"], ["important_instructions",
                                                          "tool_knowledge"],
                       benign_limit=2, pairs=3, seed=1)
    assert [c.id for c in a] == [c.id for c in b]
    pairs = {(c.mode, c.attack): {(c.user_task, c.injection_task)} for c in a if c.attack}
    for c in a:
        if c.attack:
            pairs[(c.mode, c.attack)].add((c.user_task, c.injection_task))
    assert len({frozenset(p) for p in pairs.values()}) == 1
    assert all(len(p) == 3 for p in pairs.values())
    assert sum(c.attack is None for c in a) == 4
