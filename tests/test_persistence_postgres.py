"""toolguard's state on a real PostgreSQL: ``PostgresSaver`` / ``AsyncPostgresSaver`` and
``PostgresStore`` on a throwaway server (``tests/postgres_server.py``).

The agent is ``create_agent`` with toolguard's recommended middleware chain, real tools and
a scripted model (``tests/persistence_agent.py``); the database is the real part.  An
``ask_user`` question asked in one process is answered by another; the guard's, loop
guard's and retry controller's counters survive the restart and keep counting; a KG
written by 8 concurrent writers resolves as the same triples in memory; 8 worker
processes on one database see no cross-talk; every toolguard state key round-trips the
checkpoint serializer.

Skipped when no PostgreSQL server is installed, except under CI (``$CI`` set), where the
missing server is a failure.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED_DATA, assert_every_call_answered_once
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.store.memory import InMemoryStore
from persistence_agent import (
    AGAIN_REQUEST,
    FAMILY,
    KG_REQUEST,
    PROCESS_TIMEOUT_S,
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
    make_tools,
    normalized,
    open_async_backend,
    open_backend,
    reference_run,
    restart_across_processes,
    run_process,
    run_thread,
    scripted_model,
    summary,
    toolguard_state,
    worker,
)
from postgres_server import PostgresServer, find_bindir, running_server

from toolguard import GuardMiddleware, KGResolveMiddleware, KGStore
from toolguard.kg import DeterministicPathGenerator, KnowledgeGraph
from toolguard.kg.request import EXTRA_INFO

NO_SERVER = ("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found under "
             "$PG_BINDIR, /usr/lib/postgresql/*/bin or PATH: apt-get install postgresql-15")
FAMILYTOOL = SHARED_DATA / "familytool"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server, stopped and deleted at the end of the session."""
    bindir = find_bindir()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail(f"{NO_SERVER} (CI is set: the Postgres tests must run there)")
        pytest.skip(NO_SERVER)
    with running_server(bindir) as server:
        yield server


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    """A fresh, empty database on the server."""
    return postgres.create_database()


def final_values(dsn: str, *thread_ids: str) -> list[dict[str, Any]]:
    """The threads' latest checkpointed states, read here through ``PostgresSaver``."""
    with open_backend("postgres", dsn) as (saver, store):
        agent = build_agent(saver, store, ToolLog(os.devnull))
        return [agent.get_state(config(t)).values for t in thread_ids]


# ---------------------------------------------------------------------------- the server
def test_the_server_runs_unprivileged_on_a_private_socket_and_is_deleted_after(
        postgres: PostgresServer) -> None:
    import psycopg

    with psycopg.connect(postgres.dsn(), autocommit=True) as conn:
        (listen,) = conn.execute("SHOW listen_addresses").fetchone() or ("?",)
        (data_dir,) = conn.execute("SHOW data_directory").fetchone() or ("?",)
        (fsync,) = conn.execute("SHOW fsync").fetchone() or ("?",)
        (backend,) = conn.execute("SELECT pg_backend_pid()").fetchone() or (0,)
    assert listen == ""  # no TCP port: parallel runs cannot collide
    assert Path(data_dir) == postgres.data and fsync == "off"
    server_uid = os.stat(f"/proc/{backend}").st_uid  # the server process serving us
    assert server_uid != 0, "PostgreSQL must not run as root"
    assert server_uid == (pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0
                          else os.geteuid())
    with running_server(postgres.bindir) as other:  # a second one beside it, then gone
        root = other.root
        assert root is not None and root != postgres.root and other.create_database()
    assert not root.exists()


# ---------------------------------------------------------------------------- a, b
def test_ask_user_asked_in_one_process_is_answered_by_a_new_process(
        dsn: str, tmp_path: Path) -> None:
    log = ToolLog(tmp_path / "tools.jsonl")
    _, second = restart_across_processes(
        {"backend": "postgres", "target": dsn, "log": str(log.path)}, log, RESTART_ANSWER)
    (_, again) = second["threads"]["t"]["steps"]
    # and a third reader (this process) finds the same, with every call answered once
    (values,) = final_values(dsn, "t")
    assert toolguard_state(values) == again["state"]
    assert summary(values["messages"]) == again["messages"]
    assert_every_call_answered_once(values["messages"])


async def test_async_postgres_saver_answers_a_question_another_process_asked(
        dsn: str, tmp_path: Path) -> None:
    """Asked by ``AsyncPostgresSaver`` in a subprocess; answered here, by call id."""
    log = ToolLog(tmp_path / "tools.jsonl")
    first = run_process({"backend": "postgres", "target": dsn, "log": str(log.path),
                         "async": True, "kg": True, "threads": {"t": [{"user": RESTART_REQUEST}]}})
    (asked,) = first["threads"]["t"]["steps"]
    check_first_half(asked)
    call_id = asked["interrupts"][0]["questions"][0]["tool_call_id"]
    async with open_async_backend("postgres", dsn) as (saver, store):
        agent = build_agent(saver, store, log)
        run = await arun_thread(agent, "t", [{"resume": {call_id: RESTART_ANSWER}},
                                             {"user": AGAIN_REQUEST}])
        values = (await agent.aget_state(config("t"))).values
    assert run["before"] == asked["state"]
    resumed, again = run["steps"]
    sends = [r for r in log.read() if r["tool"] == "send_email"]
    assert sends == [{"tool": "send_email", "args": SENT, "pid": os.getpid()}]
    check_kept_counting(asked["state"], resumed["state"], again["state"])
    assert toolguard_state(values) == again["state"]
    assert_every_call_answered_once(values["messages"])
    reference = reference_run([[{"user": RESTART_REQUEST}],
                               [{"resume": {call_id: RESTART_ANSWER}}, {"user": AGAIN_REQUEST}]])
    check_same_as_reference([first["threads"]["t"], run], reference)


# ---------------------------------------------------------------------------- c
def familytool_requests(limit: int) -> list[str]:
    """The first ``limit`` FamilyTool requests, without the sub-KG the data set appends."""
    out = []
    with (FAMILYTOOL / "familytool-b.jsonl").open(encoding="utf-8") as f:
        for line in f:
            user = next(m["content"] for m in json.loads(line) if m["role"] == "user")
            out.append(user.split(EXTRA_INFO)[0].strip())
            if len(out) == limit:
                break
    return out


def _by_head(triples: list[tuple[str, str, str]]) -> list[list[tuple[str, str, str]]]:
    """Triples grouped by head, groups and their triples in file order."""
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for t in triples:
        groups.setdefault(t[0], []).append(t)
    return list(groups.values())


@pytest.mark.skipif(not (FAMILYTOOL / "familykg-b.txt").is_file(),
                    reason=f"FamilyTool data not found under {FAMILYTOOL}")
def test_a_kg_written_by_8_concurrent_writers_resolves_as_in_memory(dsn: str) -> None:
    """FamilyTool's KG for four users, written by 8 threads at once, each with its own
    connection, in batches of two; every writer also writes the whole small KG of a fifth
    user (concurrent duplicates).

    An entity's triples come from one writer, in file order: the resolver breaks ties in
    KG order ("Jack" reaches "Alice" as ``wife`` and as ``mother`` in FamilyTool's KG;
    the first wins), and concurrent writers of one entity have no order to keep.
    """
    import psycopg
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row

    kg = KnowledgeGraph.from_file(FAMILYTOOL / "familykg-b.txt").triples()
    familytool_users = ["ft-a", "ft-b", "ft-c", "ft-d"]
    users = {**dict.fromkeys(familytool_users, kg), USER: list(FAMILY)}
    writers = 8
    parts: list[list[tuple[str, list[tuple[str, str, str]]]]] = [[] for _ in range(writers)]
    groups = [(user, group) for user in familytool_users for group in _by_head(kg)]
    for i, (user, group) in enumerate(groups):
        parts[i % writers].append((user, group))
    with PostgresStore.from_conn_string(dsn) as setup_store:
        setup_store.setup()
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(part: list[tuple[str, list[tuple[str, str, str]]]]) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True, prepare_threshold=0,
                                 row_factory=dict_row) as conn:
                store = KGStore(PostgresStore(conn))
                barrier.wait(timeout=120)
                store.add_many(USER, FAMILY)
                for user, group in part:
                    for start in range(0, len(group), 2):  # small batches, interleaved
                        store.add_many(user, group[start:start + 2])
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=write, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    assert all(any(user != USER for user, _ in part) for part in parts)  # all 8 write FamilyTool

    memory = InMemoryStore()
    for user, triples in users.items():
        KGStore(memory).add_many(user, triples)
    with PostgresStore.from_conn_string(dsn) as pg:
        for user, triples in users.items():
            ns = KGStore(pg).namespace(user)
            items = pg.search(ns, limit=10_000)
            assert len([i for i in items if tuple(i.namespace) == ns]) == len(set(triples))
            assert len(items) == len(set(triples)) + 1  # no triple lost, none twice; a version
            graph, version = KGStore(pg).load_versioned(user)
            assert version is not None
            reference = KGStore(memory).load(user)
            assert set(graph.triples()) == set(reference.triples())
            for head, relation, _ in triples:
                assert graph.tails(head, relation) == reference.tails(head, relation)

        requests = familytool_requests(60)
        resolved = 0
        for user in familytool_users:
            ours = DeterministicPathGenerator(KGStore(pg).load(user))
            theirs = DeterministicPathGenerator(KGStore(memory).load(user))
            for text in requests:
                got, want = ours.resolve(text), theirs.resolve(text)
                assert got == want, text
                resolved += bool(got.triples and not got.missing)
        # nearly all resolve (59 of 60 per user in memory): the comparison is not vacuous
        assert resolved >= 0.9 * len(familytool_users) * len(requests)

        # through KGResolveMiddleware in an agent on each store: the same rewritten request
        for text in [*requests[:6], KG_REQUEST]:
            outs = []
            for store in (pg, memory):
                agent = create_agent(scripted_model(), make_tools(ToolLog(os.devnull)),
                                     middleware=[KGResolveMiddleware(), GuardMiddleware()],
                                     store=store)
                user = USER if text == KG_REQUEST else "ft-b"
                outs.append(agent.invoke({"messages": [HumanMessage(text)]}, {
                    "configurable": {"user_id": user, "kg_speaker": "Bob"}}))
            got, want = ({"request": o["messages"][0].content,
                          "grounding": o.get("kg_grounding")} for o in outs)
            assert got == want and EXTRA_INFO in got["request"], text
            assert got["grounding"], text


# ---------------------------------------------------------------------------- d
CITIES = ["Paris", "Lyon", "Oslo", "Bergen", "Madrid", "Lisbon", "Porto", "Rome", "Milan",
          "Vienna", "Prague", "Berlin", "Hamburg", "Munich", "Zurich", "Geneva", "Dublin",
          "Cork", "London", "Leeds", "Athens", "Warsaw", "Krakow", "Riga"]


def test_8_worker_processes_on_one_database_see_no_cross_talk(
        dsn: str, tmp_path: Path) -> None:
    """8 processes x 3 threads of one shared agent each (its own connection pool), at once;
    each conversation asks and answers its own question."""
    workers, per_worker = 8, 3
    plan: dict[int, dict[str, str]] = {
        w: {f"w{w}-t{j}": CITIES[w * per_worker + j] for j in range(per_worker)}
        for w in range(workers)}

    def steps(city: str) -> list[dict[str, Any]]:
        return [{"user": f"What's the weather in {city}?"},
                {"user": f"Email the {city} forecast to my friend."}, {"resume": "@ask"}]

    with open_backend("postgres", dsn) as (_, store):  # the KG once, tables created once
        KGStore(store).add_many(USER, FAMILY)
    results = run_workers({w: {
        "backend": "postgres", "target": dsn, "log": str(tmp_path / f"w{w}.jsonl"),
        "threads": {tid: steps(city) for tid, city in threads.items()}}
        for w, threads in plan.items()}, tmp_path)
    assert len({r["pid"] for r in results.values()}) == workers

    every = [(tid, city) for threads in plan.values() for tid, city in threads.items()]
    reference = {tid: ref for (tid, _), ref in zip(every, reference_threads(
        [(tid, steps(city)) for tid, city in every]), strict=True)}
    stored = dict(zip([tid for tid, _ in every],
                      final_values(dsn, *[tid for tid, _ in every]), strict=True))
    for w, threads in plan.items():
        pid = results[w]["pid"]
        expected = [row for tid, city in threads.items() for row in (
            {"tool": "get_weather", "args": {"city": city}, "pid": pid},
            {"tool": "send_email", "args": {"to": f"{tid}@example.org",
                                            "body": f"sunny, 21 C in {city}"}, "pid": pid})]
        log = ToolLog(tmp_path / f"w{w}.jsonl").read()
        assert sorted(log, key=json.dumps) == sorted(expected, key=json.dumps)
        for tid, city in threads.items():
            run = results[w]["threads"][tid]
            assert run["before"] == {}  # a new thread: nothing of anyone else's
            values = stored[tid]
            last = run["steps"][-1]
            assert toolguard_state(values) == last["state"]
            assert summary(values["messages"]) == last["messages"]
            assert_every_call_answered_once(values["messages"])
            ref = reference[tid]["steps"][-1]
            assert normalized(last["state"]) == normalized(ref["state"])
            assert last["messages"] == ref["messages"]  # exactly its own conversation
            text = json.dumps(last["messages"])
            others = [c for _, c in every if c != city] + [
                t for t, _ in every if t != tid]
            assert not [o for o in others if re.search(rf"\b{o}\b", text)], tid
            assert f"{tid}@example.org" in text and city in text


def run_workers(specs: dict[int, dict[str, Any]], tmp_path: Path) -> dict[int, dict[str, Any]]:
    """Each spec in its own worker process, all at once; their results.

    The workers fork from a ``forkserver`` that imported LangChain and toolguard once (a
    fresh interpreter per worker costs ~2 CPU seconds of imports); each opens its own
    connections after the fork.
    """
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    # installed packages only: the server does not get the tests' sys.path
    context.set_forkserver_preload(["toolguard", "langchain.agents", "psycopg_pool",
                                    "langgraph.checkpoint.postgres", "langgraph.store.postgres"])
    processes = {w: context.Process(target=worker, args=(spec, str(tmp_path / f"w{w}.json")))
                 for w, spec in specs.items()}
    try:
        for process in processes.values():
            process.start()
        for process in processes.values():
            process.join(timeout=PROCESS_TIMEOUT_S)
    finally:
        for process in processes.values():
            if process.is_alive():
                process.kill()
                process.join()
    assert [p.exitcode for p in processes.values()] == [0] * len(processes)
    return {w: json.loads((tmp_path / f"w{w}.json").read_text("utf-8")) for w in specs}


def reference_threads(threads: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Each thread's steps in this process, one after the other, on ``InMemorySaver``."""
    from langgraph.checkpoint.memory import InMemorySaver

    memory = InMemoryStore()
    KGStore(memory).add_many(USER, FAMILY)
    agent = build_agent(InMemorySaver(), memory, ToolLog(os.devnull))
    return [run_thread(agent, tid, steps) for tid, steps in threads]


# ---------------------------------------------------------------------------- e
def test_every_toolguard_state_key_round_trips_the_checkpoint_serializer(dsn: str) -> None:
    with open_backend("postgres", dsn) as (saver, store):
        KGStore(store).add_many(USER, FAMILY)
        agent = build_agent(saver, store, ToolLog(os.devnull))
        runs = [run_thread(agent, "t", steps) for steps in ROUND_TRIP_CALLS]
        history = list(agent.get_state_history(config("t")))
        check_round_trips(history, saver.serde)
        assert_every_call_answered_once(history[0].values["messages"])
    assert runs[1]["steps"][-1]["interrupts"][0]["questions"][0]["source"] == "precheck"
    assert runs[2]["steps"][-1]["interrupts"] == []
    check_same_as_reference(runs, reference_run(ROUND_TRIP_CALLS))
