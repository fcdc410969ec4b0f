"""toolguard's state in a SQLite file: ``SqliteSaver`` / ``AsyncSqliteSaver`` with
``SqliteStore`` / ``AsyncSqliteStore``.

The same agent as ``tests/test_persistence_postgres.py`` (``tests/persistence_agent.py``):
an ``ask_user`` question asked in one process is answered by another process (a HITL
``edit``) or by this one (async, a HITL ``respond``); the guard's, loop guard's and retry
controller's counters survive and keep counting; every toolguard state key round-trips the
checkpoint serializer.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import assert_every_call_answered_once
from persistence_agent import (
    AGAIN_REQUEST,
    FAMILY,
    RESTART_ANSWER,
    RESTART_REQUEST,
    ROUND_TRIP_CALLS,
    SENT,
    USER,
    ToolLog,
    arun_thread,
    build_agent,
    check_first_half,
    check_kept_counting,
    check_round_trips,
    check_same_as_reference,
    config,
    open_async_backend,
    open_backend,
    reference_run,
    restart_across_processes,
    run_process,
    summary,
    toolguard_state,
)

from toolguard import KGStore


@pytest.fixture
def database(tmp_path: Path) -> str:
    """A path for a new SQLite file database."""
    return str(tmp_path / "agent.sqlite")


def test_ask_user_asked_in_one_process_is_answered_by_a_new_process(
        database: str, tmp_path: Path) -> None:
    """Answered with a HITL ``edit``: the call runs with the user's arguments at once."""
    log = ToolLog(tmp_path / "tools.jsonl")
    edit = {"decisions": [{"type": "edit",
                           "edited_action": {"name": "send_email", "args": SENT}}]}
    _, second = restart_across_processes(
        {"backend": "sqlite", "target": database, "log": str(log.path)}, log, edit)
    resumed, again = second["threads"]["t"]["steps"]
    # an edit runs the asked call itself: no second model call, nothing checked again
    assert resumed["state"]["toolguard"]["checked"] == second["threads"]["t"]["before"][
        "toolguard"]["checked"]
    with open_backend("sqlite", database) as (saver, store):
        values = build_agent(saver, store, log).get_state(config("t")).values
    assert toolguard_state(values) == again["state"]
    assert summary(values["messages"]) == again["messages"]
    assert_every_call_answered_once(values["messages"])


async def test_async_sqlite_saver_answers_a_question_another_process_asked(
        database: str, tmp_path: Path) -> None:
    """Asked by ``AsyncSqliteSaver`` in a subprocess; answered here with a HITL ``respond``."""
    log = ToolLog(tmp_path / "tools.jsonl")
    respond = {"decisions": [{"type": "respond", "message": RESTART_ANSWER}]}
    first = run_process({"backend": "sqlite", "target": database, "log": str(log.path),
                         "async": True, "kg": True,
                         "threads": {"t": [{"user": RESTART_REQUEST}]}})
    (asked,) = first["threads"]["t"]["steps"]
    check_first_half(asked)
    async with open_async_backend("sqlite", database) as (saver, store):
        agent = build_agent(saver, store, log)
        run = await arun_thread(agent, "t", [{"resume": respond}, {"user": AGAIN_REQUEST}])
        values = (await agent.aget_state(config("t"))).values
    assert run["before"] == asked["state"]
    resumed, again = run["steps"]
    sends = [r for r in log.read() if r["tool"] == "send_email"]
    assert sends == [{"tool": "send_email", "args": SENT, "pid": os.getpid()}]
    # respond: the call did not run; the model called again with the answer (checked again)
    assert resumed["state"]["toolguard"]["checked"] == \
        asked["state"]["toolguard"]["checked"] + 1
    check_kept_counting(asked["state"], resumed["state"], again["state"])
    assert toolguard_state(values) == again["state"]
    assert_every_call_answered_once(values["messages"])
    check_same_as_reference([first["threads"]["t"], run], reference_run(
        [[{"user": RESTART_REQUEST}], [{"resume": respond}, {"user": AGAIN_REQUEST}]]))


async def test_every_toolguard_state_key_round_trips_the_checkpoint_serializer(
        database: str) -> None:
    async with open_async_backend("sqlite", database) as (saver, store):
        await KGStore(store).aadd_many(USER, FAMILY)
        agent = build_agent(saver, store, ToolLog(os.devnull))
        runs = [await arun_thread(agent, "t", steps) for steps in ROUND_TRIP_CALLS]
        history = [s async for s in agent.aget_state_history(config("t"))]
        check_round_trips(history, saver.serde)
        assert_every_call_answered_once(history[0].values["messages"])
    assert runs[1]["steps"][-1]["interrupts"][0]["questions"][0]["source"] == "precheck"
    check_same_as_reference(runs, reference_run(ROUND_TRIP_CALLS))
