"""One guarded agent, built the same way in every process of the persistence tests.

``build_agent(checkpointer, store, log)`` is ``create_agent`` with toolguard's recommended
middleware chain (``RetryControllerMiddleware``, ``KGResolveMiddleware``,
``PrecheckMiddleware``, ``LoopGuardMiddleware``, ``GuardMiddleware``), real LangChain
tools, and :func:`policy` as the model: a ``ScriptedChatModel`` whose every step is a
function of the conversation, so a process that resumes a thread from the database
continues it exactly as the process that started it would have.

The tools append each execution to the JSON-lines file ``log`` (one line per run,
``{"tool", "args", "pid"}``), so a test sees what ran in which process:

- ``get_weather(city)``: read-only, ``"sunny, 21 C in <city>"``.
- ``search(query)``: read-only; fails once per tool call with a transient ``503`` (the
  retry controller retries it), then answers.
- ``lookup(query)``: read-only; always fails with ``"service unavailable"`` (the retry
  controller gives up, the loop guard nudges then stops the model's repeats).
- ``send_email(to, body)``: a write.

Run as a script (``python tests/persistence_agent.py SPEC_JSON``, a fresh interpreter) or
as a ``multiprocessing`` target (:func:`worker`) it opens the backend named in the spec,
runs the spec's steps on one thread or several threads at once, and reports the toolguard
state and messages after each step (see :func:`run_spec`).  The last section holds what
the Postgres and SQLite test modules share: process helpers, the in-memory reference run
and the checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain.agents.middleware.types import AgentState
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, ToolException
from langgraph.types import Command

from toolguard import (
    GuardMiddleware,
    KGResolveMiddleware,
    LoopGuardMiddleware,
    PrecheckMiddleware,
    RetryControllerMiddleware,
)
from toolguard.retry import RetryController, RetryPolicy
from toolguard.testing import ScriptedChatModel

USER = "u1"
"""The KG user of every thread (``config["configurable"]["user_id"]``)."""
SPEAKER = "Bob"
FAMILY = [("Bob", "mother", "Alice"), ("Alice", "lives_in", "Lyon"),
          ("Bob", "colleague", "Carol"), ("Carol", "works_in", "Geneva")]
"""The KG of :data:`USER`; "my mom's city" resolves to Lyon."""

RESTART_REQUEST = ("Get the weather in Paris and search for Paris weather news, look up the "
                   "Paris office hours, then email the forecast to my colleague.")
AGAIN_REQUEST = "Look up the Paris office hours again."
KG_REQUEST = "What's the weather in the city where my mom lives?"
CALENDAR_REQUEST = "Get the Paris weather calendar."
PRECHECK_REQUEST = "Send an email."
"""The pre-check asks for the recipient (a question before the model acts)."""
UNGROUNDED_EMAIL = "colleague@example.com"
"""The address the model makes up: nobody gave it, so the guard asks the user."""


# ---------------------------------------------------------------------------- tools
class ToolLog:
    """Executions appended to a JSON-lines file (one ``write`` per line, ``O_APPEND``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def add(self, tool: str, args: dict[str, Any]) -> None:
        line = json.dumps({"tool": tool, "args": args, "pid": os.getpid()}) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(line)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text("utf-8").splitlines()
                if line.strip()]


def make_tools(log: ToolLog) -> list[BaseTool]:
    """The four tools of the module docstring, recording into ``log``."""
    failed_once: set[str] = set()
    lock = threading.Lock()

    def get_weather(city: str) -> str:
        log.add("get_weather", {"city": city})
        return f"sunny, 21 C in {city}"

    def search(query: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        log.add("search", {"query": query})
        with lock:
            first = tool_call_id not in failed_once
            failed_once.add(tool_call_id)
        if first:
            raise ToolException("503 temporarily unavailable")
        return f"news: mild and sunny week ahead ({query})"

    def lookup(query: str) -> str:
        log.add("lookup", {"query": query})
        raise ToolException("service unavailable")

    def send_email(to: str, body: str) -> str:
        log.add("send_email", {"to": to, "body": body})
        return f"sent to {to}"

    specs = [(get_weather, "Get the current weather for a city.", "read"),
             (search, "Search the web for news about a topic.", "read"),
             (lookup, "Look up opening or office hours of a place.", "read"),
             (send_email, "Send an email message to an address.", "write")]
    tools: list[BaseTool] = []
    for func, description, effects in specs:
        t = StructuredTool.from_function(func=func, name=func.__name__,
                                         description=description)
        t.handle_tool_error = True  # a ToolException becomes an error ToolMessage
        t.metadata = {"effects": effects}
        tools.append(t)
    return tools


# ---------------------------------------------------------------------------- the model
def _call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def policy(messages: list[BaseMessage]) -> AIMessage:
    """The model's next step, from the conversation alone.

    By the current turn's user message and the model's steps in that turn (``k``):

    - :data:`RESTART_REQUEST`: weather + search, then ``lookup`` three times, then
      ``send_email`` to the made-up :data:`UNGROUNDED_EMAIL`;
    - :data:`AGAIN_REQUEST`: ``lookup`` until stopped;
    - :data:`CALENDAR_REQUEST`: a tool that does not exist, then a text answer;
    - "Send it to ADDRESS" (an answer to the pre-check): ``send_email`` to it;
    - "Email the CITY forecast to my friend": ``send_email`` to a made-up address;
    - "weather in CITY" / :data:`KG_REQUEST`: ``get_weather`` (the KG's city), then text.

    After a guard question on ``send_email`` answered with text, it sends to the answer;
    after ``send_email`` ran, it says done.  Call ids are ``c<number of messages>`` (+ a
    letter), unique within a thread.
    """
    n = len(messages)
    last = messages[-1]
    turn_start = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    request = str(messages[turn_start].content)
    k = sum(1 for m in messages[turn_start:] if isinstance(m, AIMessage))
    if isinstance(last, ToolMessage) and last.name == "send_email":
        answered = re.search(r"The user answered: (\S+)", str(last.content))
        if answered:  # the user gave the address: send to it
            return AIMessage("", tool_calls=[_call(
                "send_email", {"to": answered.group(1), "body": _forecast(messages)},
                f"c{n}")])
        return AIMessage(f"Done: {last.content}.")
    if request.startswith("Get the weather in Paris"):
        if k == 0:
            return AIMessage("", tool_calls=[
                _call("get_weather", {"city": "Paris"}, f"c{n}a"),
                _call("search", {"query": "Paris weather news"}, f"c{n}b")])
        if k <= 3:
            return AIMessage("", tool_calls=[
                _call("lookup", {"query": "Paris office hours"}, f"c{n}")])
        return AIMessage("", tool_calls=[_call(
            "send_email", {"to": UNGROUNDED_EMAIL, "body": _forecast(messages)}, f"c{n}")])
    if request.startswith("Get the Paris weather calendar"):  # no such tool: refused
        if k == 0:
            return AIMessage("", tool_calls=[_call("get_calendar", {"city": "Paris"}, f"c{n}")])
        return AIMessage("I have no calendar tool.")
    if request.startswith("Look up the Paris office hours"):
        return AIMessage("", tool_calls=[_call("lookup", {"query": "Paris office hours"},
                                               f"c{n}")])
    send_to = re.search(r"Send it to ([\w.-]+@[\w-]+(?:\.[\w-]+)+)", request)
    if send_to:  # the user's answer to the pre-check's question
        if k == 0:
            return AIMessage("", tool_calls=[_call(
                "send_email", {"to": send_to.group(1), "body": _forecast(messages)},
                f"c{n}")])
        return AIMessage(f"Done: {last.content}.")
    weather = re.search(r"weather in (?:the city where my mom lives|([A-Z][a-z]+))", request)
    email = re.search(r"Email the ([A-Z][a-z]+) forecast to my friend", request)
    if email:  # a made-up address: the guard asks
        return AIMessage("", tool_calls=[_call(
            "send_email", {"to": "friend@example.com", "body": _forecast(messages)},
            f"c{n}")])
    if weather:
        city = weather.group(1) or _kg_city(request)
        if k == 0:
            return AIMessage("", tool_calls=[_call("get_weather", {"city": city}, f"c{n}")])
        return AIMessage(f"{city}: {last.content}")
    return AIMessage("I cannot help with that.")


def _forecast(messages: Sequence[BaseMessage]) -> str:
    """The latest weather tool result (what the email sends)."""
    for m in reversed(messages):
        if isinstance(m, ToolMessage) and m.name == "get_weather":
            return str(m.content)
    return "no forecast"


def _kg_city(request: str) -> str:
    """The city the KG resolver appended to the request ("[Alice, lives_in, Lyon]")."""
    found = re.search(r"lives_in, ([A-Za-z]+)\]", request)
    return found.group(1) if found else "unknown"


def scripted_model(steps: int = 1000) -> ScriptedChatModel:
    """A scripted model that follows :func:`policy` for up to ``steps`` calls."""
    return ScriptedChatModel(script=[policy] * steps)


# ---------------------------------------------------------------------------- the agent
def middleware() -> list[Any]:
    """The recommended chain (README "Use"), with retries that do not sleep."""
    async def no_asleep(seconds: float) -> None:
        return None

    return [RetryControllerMiddleware(RetryController(
                RetryPolicy(max_retries=1), sleep=lambda seconds: None, asleep=no_asleep)),
            KGResolveMiddleware(), PrecheckMiddleware(), LoopGuardMiddleware(),
            GuardMiddleware()]


def build_agent(checkpointer: Any, store: Any, log: ToolLog) -> Any:
    """``create_agent`` with :func:`middleware`, :func:`make_tools` and :func:`policy`."""
    return create_agent(scripted_model(), make_tools(log), middleware=middleware(),
                        checkpointer=checkpointer, store=store)


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "user_id": USER, "kg_speaker": SPEAKER}}


def toolguard_keys() -> list[str]:
    """Every state key toolguard's middleware declare beyond LangChain's ``AgentState``."""
    base = set(AgentState.__annotations__)
    keys: set[str] = set()
    for m in middleware():
        for cls in m.state_schema.__mro__:
            keys.update(k for k in getattr(cls, "__annotations__", {}) if k not in base)
    return sorted(keys)


def toolguard_state(values: dict[str, Any]) -> dict[str, Any]:
    """The toolguard keys of a state that are set."""
    return {k: values[k] for k in toolguard_keys() if k in values}


def summary(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Messages without their random ids: type, text, tool calls, answered call id, name."""
    out = []
    for m in messages:
        row: dict[str, Any] = {"type": m.type, "content": m.content}
        if isinstance(m, AIMessage) and m.tool_calls:
            row["tool_calls"] = [{"name": c["name"], "args": c["args"], "id": c["id"]}
                                 for c in m.tool_calls]
        if isinstance(m, ToolMessage):
            row.update(tool_call_id=m.tool_call_id, name=m.name, status=m.status)
        out.append(row)
    return out


# ---------------------------------------------------------------------------- backends
@contextlib.contextmanager
def open_backend(kind: str, target: str) -> Iterator[tuple[Any, Any]]:
    """``(checkpointer, store)`` of a synchronous backend, set up.

    ``kind`` is ``postgres`` (``target``: a libpq connection string; a connection pool of
    4, shared by the threads of this process) or ``sqlite`` (``target``: a file path; one
    connection for the saver and one for the store).
    """
    if kind == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
        with ConnectionPool(target, min_size=1, max_size=4, kwargs=kwargs, open=True,
                            timeout=120) as pool:
            saver, store = PostgresSaver(pool), PostgresStore(pool)  # type: ignore[arg-type]
            saver.setup()
            store.setup()
            yield saver, store
    elif kind == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.sqlite import SqliteStore

        # one connection each: both begin and commit their own transactions on it
        with contextlib.closing(sqlite3.connect(target, check_same_thread=False,
                                                timeout=120)) as saver_conn, \
                contextlib.closing(sqlite3.connect(target, check_same_thread=False,
                                                   isolation_level=None,
                                                   timeout=120)) as store_conn:
            saver, store = SqliteSaver(saver_conn), SqliteStore(store_conn)
            saver.setup()
            store.setup()
            yield saver, store
    else:
        raise ValueError(f"unknown backend {kind!r}")


@contextlib.asynccontextmanager
async def open_async_backend(kind: str, target: str) -> AsyncIterator[tuple[Any, Any]]:
    """The async twin of :func:`open_backend` (``AsyncPostgresSaver`` / ``AsyncSqliteSaver``)."""
    if kind == "postgres":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from langgraph.store.postgres.aio import AsyncPostgresStore

        async with AsyncPostgresSaver.from_conn_string(target) as saver, \
                AsyncPostgresStore.from_conn_string(target) as store:
            await saver.setup()
            await store.setup()
            yield saver, store
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        from langgraph.store.sqlite.aio import AsyncSqliteStore

        async with AsyncSqliteSaver.from_conn_string(target) as saver, \
                AsyncSqliteStore.from_conn_string(target) as store:
            await saver.setup()
            await store.setup()
            yield saver, store
    else:
        raise ValueError(f"unknown backend {kind!r}")


# ---------------------------------------------------------------------------- steps
def _input(step: dict[str, Any]) -> Any:
    if "user" in step:
        return {"messages": [HumanMessage(step["user"])]}
    return Command(resume=step["resume"])


def _report(agent: Any, cfg: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    interrupts = out.get("__interrupt__") or []
    values = agent.get_state(cfg).values
    return {"interrupts": [i.value for i in interrupts],
            "state": toolguard_state(values), "messages": summary(values["messages"])}


async def _areport(agent: Any, cfg: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    interrupts = out.get("__interrupt__") or []
    values = (await agent.aget_state(cfg)).values
    return {"interrupts": [i.value for i in interrupts],
            "state": toolguard_state(values), "messages": summary(values["messages"])}


def run_thread(agent: Any, thread_id: str, steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Run ``steps`` (``{"user": text}`` or ``{"resume": value}``) on one thread.

    ``{"resume": "@ask"}`` answers the pending question's call id with ``"<thread>@ask"``
    (resume by ``{tool_call_id: answer}``).  Returns the toolguard state found before the
    first step and a report (interrupt values, toolguard state, messages) after each.
    """
    cfg = config(thread_id)
    before = toolguard_state(agent.get_state(cfg).values)
    reports = []
    for step in steps:
        if step.get("resume") == "@ask":
            step = _answer_by_id(agent.get_state(cfg), thread_id)
        reports.append(_report(agent, cfg, agent.invoke(_input(step), cfg)))
    return {"thread": thread_id, "before": before, "steps": reports}


def _answer_by_id(snapshot: Any, thread_id: str) -> dict[str, Any]:
    """A ``{tool_call_id: "<thread>@example.org"}`` resume of the one pending question."""
    (pending,) = snapshot.interrupts
    (question,) = pending.value["questions"]
    return {"resume": {question["tool_call_id"]: f"{thread_id}@example.org"}}


async def arun_thread(agent: Any, thread_id: str,
                      steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Async twin of :func:`run_thread`."""
    cfg = config(thread_id)
    before = toolguard_state((await agent.aget_state(cfg)).values)
    reports = []
    for step in steps:
        if step.get("resume") == "@ask":
            step = _answer_by_id(await agent.aget_state(cfg), thread_id)
        reports.append(await _areport(agent, cfg, await agent.ainvoke(_input(step), cfg)))
    return {"thread": thread_id, "before": before, "steps": reports}


def run_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one spec in this process; ``{"pid", "threads": {thread_id: run_thread(...)}}``.

    The spec: ``{"backend": "postgres" | "sqlite", "target": dsn or path, "log": path,
    "async": bool, "threads": {thread_id: [steps]}, "kg": bool}``.  Threads run at once
    (one Python thread each, or one task each when async) on one agent; ``"kg": true``
    first writes :data:`FAMILY` for :data:`USER` to the store.
    """
    log = ToolLog(spec["log"])
    threads: dict[str, list[dict[str, Any]]] = spec["threads"]
    if spec.get("async"):
        result = asyncio.run(_amain(spec, log, threads))
    else:
        with open_backend(spec["backend"], spec["target"]) as (saver, store):
            if spec.get("kg"):
                from toolguard import KGStore

                KGStore(store).add_many(USER, FAMILY)
            agent = build_agent(saver, store, log)
            with ThreadPoolExecutor(max_workers=max(1, len(threads))) as pool:
                futures = {t: pool.submit(run_thread, agent, t, s) for t, s in threads.items()}
                result = {t: f.result() for t, f in futures.items()}
    return {"pid": os.getpid(), "threads": result}


def main(argv: Sequence[str]) -> int:
    """``python persistence_agent.py SPEC_JSON``: :func:`run_spec`, printed as JSON."""
    print(json.dumps(run_spec(json.loads(argv[1])), default=repr))
    return 0


def worker(spec: dict[str, Any], out: str) -> None:
    """A ``multiprocessing`` target: :func:`run_spec` with warnings as errors (as pytest
    runs), its result written to the file ``out`` as JSON."""
    import warnings

    warnings.simplefilter("error")
    Path(out).write_text(json.dumps(run_spec(spec), default=repr), encoding="utf-8")


async def _amain(spec: dict[str, Any], log: ToolLog,
                 threads: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    async with open_async_backend(spec["backend"], spec["target"]) as (saver, store):
        if spec.get("kg"):
            from toolguard import KGStore

            await KGStore(store).aadd_many(USER, FAMILY)
        agent = build_agent(saver, store, log)
        runs = await asyncio.gather(*(arun_thread(agent, t, s) for t, s in threads.items()))
        return {r["thread"]: r for r in runs}


# ---------------------------------------------------------------------------- for the tests
SCRIPT = Path(__file__).resolve()
PROCESS_TIMEOUT_S = 300
"""Generous: a process imports LangChain and runs a few turns (~2 s idle, far more loaded)."""


def start_process(spec: dict[str, Any]) -> Any:
    """This module as a new Python process running ``spec`` (``-W error``, as pytest)."""
    import subprocess

    return subprocess.Popen([sys.executable, "-W", "error", str(SCRIPT), json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=SCRIPT.parent)


def finish_process(process: Any) -> dict[str, Any]:
    """The JSON a process started by :func:`start_process` printed (``AssertionError`` on a
    failure, with its stderr)."""
    out, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
    assert process.returncode == 0, f"agent process failed ({process.returncode}):\n{err}"
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def stop_processes(processes: Iterable[Any]) -> None:
    """Kill the processes still running (after a failure) and reap every one."""
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


def run_process(spec: dict[str, Any]) -> dict[str, Any]:
    """:func:`start_process` then :func:`finish_process`."""
    process = start_process(spec)
    try:
        return finish_process(process)
    finally:
        stop_processes([process])


_RANDOM_IDS = {("toolguard_controller", "tallied"), ("toolguard_verdicts", "message_id"),
               ("toolguard_loop", "turn")}


def normalized(state: dict[str, Any]) -> dict[str, Any]:
    """A toolguard state with the random message ids it records replaced by ``"<id>"``
    (LangChain gives messages random ids, so two runs differ only there)."""
    out = json.loads(json.dumps(state))
    for key, field in _RANDOM_IDS:
        if isinstance(out.get(key), dict) and out[key].get(field) is not None:
            out[key][field] = "<id>"
    return out


def reference_run(calls: Sequence[Sequence[dict[str, Any]]],
                  thread_id: str = "t") -> list[dict[str, Any]]:
    """The same steps in this process on ``InMemorySaver`` / ``InMemoryStore`` (with
    :data:`FAMILY`): one :func:`run_thread` result per entry of ``calls``."""
    import tempfile

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.memory import InMemoryStore

    from toolguard import KGStore

    store = InMemoryStore()
    KGStore(store).add_many(USER, FAMILY)
    with tempfile.TemporaryDirectory() as tmp:
        agent = build_agent(InMemorySaver(), store, ToolLog(Path(tmp) / "tools.jsonl"))
        return [run_thread(agent, thread_id, steps) for steps in calls]


RESTART_ANSWER = "carol@work.example"
SENT = {"to": RESTART_ANSWER, "body": "sunny, 21 C in Paris"}
LOOKUP_SIGNATURE_PREFIX = "repeated_failure:lookup:"


def check_first_half(report: dict[str, Any]) -> None:
    """What the first process saw: asked about the made-up address after a retried search
    and a nudged third lookup (counters of the guard, the controller and the loop guard)."""
    (ask,) = report["interrupts"]
    assert ask["type"] == "toolguard.ask_user", ask
    (question,) = ask["questions"]
    assert (question["source"], question["tool_name"], question["missing"],
            question["args"]["to"]) == ("guard", "send_email", ["to"], UNGROUNDED_EMAIL), ask
    state = report["state"]
    counters, controller, loop = (state["toolguard"], state["toolguard_controller"],
                                  state["toolguard_loop"])
    assert (counters["checked"], counters["asked_user"], counters["content"],
            counters["loop_nudges"], counters["precheck_proceed"]) == (6, 1, 1, 1, 1), counters
    # search failed once and was retried; lookup ran twice x (1 attempt + 1 retry)
    assert (controller["retries"], controller["skips"], controller["tool_calls"]) == (3, 2, 4), \
        controller
    ((signature, nudges),) = loop["nudges"].items()
    assert signature.startswith(LOOKUP_SIGNATURE_PREFIX) and nudges == 1, loop
    assert loop["stop"] is None, loop
    (verdict,) = state["toolguard_verdicts"]["verdicts"]
    assert (verdict["action"], verdict["tool_name"]) == ("ask_user", "send_email"), verdict
    assert state["kg_grounding"] == ["Carol", "Bob colleague Carol"], state


def restart_across_processes(spec: dict[str, Any], log: ToolLog,
                             resume: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Process A asks (:data:`RESTART_REQUEST`), a new process B resumes with ``resume`` and
    sends :data:`AGAIN_REQUEST`; the checks both backends share.

    Returns:
        ``(first, second)``: the two processes' reports.  A asked and ran nothing that
        sends; B read exactly A's toolguard state, was not interrupted again, sent the email
        once with the user's values, and every counter went on from A's.
    """
    first = run_process({**spec, "kg": True, "threads": {"t": [{"user": RESTART_REQUEST}]}})
    (asked,) = first["threads"]["t"]["steps"]
    check_first_half(asked)
    ran_first = log.read()
    assert {r["pid"] for r in ran_first} == {first["pid"]}
    assert "send_email" not in {r["tool"] for r in ran_first}  # nothing sent yet

    second = run_process({**spec, "threads": {"t": [{"resume": resume},
                                                    {"user": AGAIN_REQUEST}]}})
    assert second["pid"] != first["pid"]
    run = second["threads"]["t"]
    assert run["before"] == asked["state"]  # the new process reads what the first one left
    resumed, again = run["steps"]
    assert resumed["interrupts"] == [] and again["interrupts"] == []
    sends = [r for r in log.read() if r["tool"] == "send_email"]
    assert sends == [{"tool": "send_email", "args": SENT, "pid": second["pid"]}]
    check_kept_counting(asked["state"], resumed["state"], again["state"])
    check_same_as_reference([first["threads"]["t"], run], reference_run(
        [[{"user": RESTART_REQUEST}], [{"resume": resume}, {"user": AGAIN_REQUEST}]]))
    return first, second


def check_kept_counting(first: dict[str, Any], resumed: dict[str, Any],
                        again: dict[str, Any]) -> None:
    """Counters after the resume and after one more turn went on from the first process's."""
    a, r, g = (s["toolguard"] for s in (first, resumed, again))
    for key, value in a.items():
        assert value <= r[key] <= g[key], (key, value, r[key], g[key])
    assert r["asked_user"] == g["asked_user"] == 1  # asked once, answered after the restart
    assert g["checked"] == r["checked"] + 4  # the second turn's four lookups
    assert (g["loop_nudges"], g.get("loop_stops")) == (a["loop_nudges"] + 1, 1), g
    assert g["precheck_proceed"] == a["precheck_proceed"] + 1
    ca, cr, cg = (s["toolguard_controller"] for s in (first, resumed, again))
    assert cr["tool_calls"] == ca["tool_calls"] + 1  # send_email, once
    assert cr["retries"] == ca["retries"] and cg["retries"] == ca["retries"] + 2
    assert (cg["tool_calls"], cg["skips"]) == (ca["tool_calls"] + 3, ca["skips"] + 2), cg
    loop = again["toolguard_loop"]
    assert loop["turn"] != first["toolguard_loop"]["turn"]  # a new turn's record
    assert loop["stop"]["tool_name"] == "lookup" and loop["stop"]["action"] == "stop", loop


def check_same_as_reference(runs: Sequence[dict[str, Any]],
                            reference: Sequence[dict[str, Any]]) -> None:
    """Each step's toolguard state and messages equal the uninterrupted in-memory run's."""
    assert len(runs) == len(reference)
    for run, ref in zip(runs, reference, strict=True):
        assert len(run["steps"]) == len(ref["steps"])
        for got, want in zip(run["steps"], ref["steps"], strict=True):
            assert normalized(got["state"]) == normalized(want["state"])
            assert got["messages"] == want["messages"]
            assert got["interrupts"] == want["interrupts"]


ROUND_TRIP_CALLS = [
    [{"user": RESTART_REQUEST}],
    [{"resume": RESTART_ANSWER}, {"user": AGAIN_REQUEST}, {"user": KG_REQUEST},
     {"user": CALENDAR_REQUEST}, {"user": PRECHECK_REQUEST}],
    [{"resume": "Send it to dave@example.com."}],
]
"""A thread that writes every toolguard state key: an ask_user verdict, a retried search,
a loop nudge and a loop stop, KG grounding, a refused made-up tool, a pending pre-check
question."""


def check_round_trips(history: list[Any], serde: Any) -> None:
    """Every checkpoint's toolguard keys and messages survive ``dumps_typed`` /
    ``loads_typed`` of the saver's serializer and of a default ``JsonPlusSerializer``; every
    key was set somewhere, with the records the runs must have left."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    seen: dict[str, list[Any]] = {}
    assert len(history) > 20
    for snapshot in history:
        state = toolguard_state(snapshot.values)
        messages = snapshot.values.get("messages", [])
        for s in (serde, JsonPlusSerializer()):
            for key, value in [*state.items(), ("messages", messages)]:
                assert s.loads_typed(s.dumps_typed(value)) == value, key
        for key, value in state.items():
            if value:
                seen.setdefault(key, []).append(value)
    assert set(seen) == set(toolguard_keys())
    actions = {(v["action"], v["hallucination"]) for record in seen["toolguard_verdicts"]
               for v in record["verdicts"]}
    assert {("ask_user", "content"), ("block", "type"), ("allow", None)} <= actions
    assert any(p["decision"] == "ask_user" for p in seen["toolguard_precheck"])
    assert any(r["stop"] for r in seen["toolguard_loop"])
    assert any("Lyon" in g for g in seen["kg_grounding"])
    assert max(c.get("retries", 0) for c in seen["toolguard_controller"]) == 5
    final = history[0].values["toolguard"]
    assert (final["blocked"], final["type"], final["precheck_ask_user"]) == (1, 1, 1), final


if __name__ == "__main__":
    sys.exit(main(sys.argv))
