"""RetryController (CRITICTOOL retry -> skip -> finish) in real graphs and create_agent.

Every test runs real LangGraph graphs (``create_plain_agent`` / ``create_guarded_agent`` /
``langchain.agents.create_agent``) over real ``@tool`` functions that record their calls.
Backoff sleeps are recorded (``sleep=`` / ``asleep=``), so no test waits for a backoff.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import (
    BfclEpisode,
    Recorder,
    ai_calls,
    answers_by_id,
    assert_every_call_answered_once,
)
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt.tool_node import INVALID_TOOL_NAME_ERROR_TEMPLATE
from langgraph.types import Command, interrupt
from pydantic import BaseModel, ValidationError

from toolguard.errors import ConfigurationError
from toolguard.middleware import RetryControllerMiddleware
from toolguard.retry import (
    RETRY_KEY,
    Classification,
    RetryController,
    RetryPolicy,
    RetryRecord,
    Tally,
    ToolPolicy,
    classify_exception,
    classify_result,
)
from toolguard.testing import ScriptedChatModel
from toolguard_graphs import create_guarded_agent, create_plain_agent

KEY = "toolguard_controller"
# backoff settings that make every expected wait distinct: retry n (1-based) waits
# INITIAL * FACTOR**(n-1) seconds ±25 % (jitter)
INITIAL, FACTOR = 1.0, 3.0
CONTROLLER_OPTIONS = ("max_tool_calls", "max_consecutive_failures", "state_key")
"""Options of the RetryController itself; every other option is a RetryPolicy field."""


# ---------------------------------------------------------------------------- helpers
class HTTPError(Exception):
    """An HTTP client error: status on the exception itself or on ``.response``."""

    def __init__(
        self,
        status: int,
        message: str = "",
        *,
        headers: dict[str, str] | None = None,
        on_response: bool = False,
    ) -> None:
        super().__init__(message or f"HTTP {status}")
        if on_response:
            self.response = SimpleNamespace(status_code=status, headers=headers or {})
        else:
            self.status_code = status
            self.headers = headers or {}


class Sleeps:
    """Recorder for ``sleep=`` and ``asleep=``: no test waits for a backoff."""

    def __init__(self) -> None:
        self.sync: list[float] = []
        self.async_: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sync.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.async_.append(seconds)

    def controller(self, **options: Any) -> RetryController:
        caps = {k: options.pop(k) for k in CONTROLLER_OPTIONS if k in options}
        options.setdefault("initial_delay", INITIAL)
        options.setdefault("backoff_factor", FACTOR)
        return RetryController(RetryPolicy(**options), sleep=self.sleep, asleep=self.asleep,
                               **caps)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


class Flaky:
    """A real tool that raises (or returns) the scripted outcomes in turn, then succeeds.

    An outcome is an exception (raised), a string (returned as the tool's result) or
    ``None`` (success).  ``metadata`` is the tool's metadata (e.g. ``{"effects": "read"}``).
    """

    def __init__(
        self,
        name: str,
        outcomes: list[BaseException | str | None],
        *,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.outcomes = list(outcomes)
        self.metadata = metadata
        self.calls: list[str] = []

    def _next(self, city: str) -> str:
        self.calls.append(city)
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome if outcome is not None else f"{self.name}: ok for {city}"

    def tool(self) -> BaseTool:
        def run(city: str) -> str:
            return self._next(city)

        async def arun(city: str) -> str:
            await asyncio.sleep(0)
            return self._next(city)

        t = StructuredTool.from_function(
            func=run, coroutine=arun, name=self.name,
            description=f"{self.name.replace('_', ' ')} for a city.")
        t.metadata = self.metadata
        return t


def plain(
    script: list[Any], tools: list[BaseTool], controller: RetryController, **options: Any
) -> tuple[Any, ScriptedChatModel]:
    model = ScriptedChatModel(script=script)
    return create_plain_agent(model, tools, controller=controller, **options), model


def ask(text: str = "Get the quote for Paris") -> dict[str, list[BaseMessage]]:
    return {"messages": [HumanMessage(text)]}


def only_answer(out: dict[str, Any], call_id: str) -> ToolMessage:
    assert_every_call_answered_once(out["messages"])
    (msg,) = answers_by_id(out["messages"])[call_id]
    return msg


def assert_backoff(delay: float, retry: int) -> None:
    """Retry ``retry`` (1-based) waits ``INITIAL * FACTOR**(retry-1)`` seconds ±25 %."""
    base = INITIAL * FACTOR ** (retry - 1)
    assert 0.75 * base <= delay <= 1.25 * base, (retry, delay)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of a test so tools that hang on it end their worker thread."""
    event = threading.Event()
    yield event
    event.set()


# ---------------------------------------------------------------------------- classify
def _tool_validation_error(args: dict[str, Any]) -> ValidationError:
    @tool
    def get_forecast(city: str, days: int = 1) -> str:
        """Weather forecast for a city over a number of days."""
        return f"{city}: {days}"

    with pytest.raises(ValidationError) as info:
        get_forecast.invoke(args)
    return info.value


def _shape(c: Classification) -> tuple[str, str | None, bool]:
    return c.outcome, c.category, c.ambiguous


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError("read timed out"), ("transient", "timeout", True)),
        (ConnectionResetError(104, "Connection reset by peer"),
         ("transient", "connection", True)),  # the request may have been processed
        (ConnectionRefusedError(111, "Connection refused"),
         ("transient", "connection", False)),  # nothing was sent
        (HTTPError(503, "upstream down", on_response=True), ("transient", "server", False)),
        (HTTPError(500), ("transient", "server", True)),  # the effect may be committed
        (HTTPError(504), ("transient", "timeout", True)),
        (HTTPError(401, "bad token"), ("permanent", "permission", False)),
        (HTTPError(403, "not subscribed", on_response=True), ("permanent", "permission", False)),
        (PermissionError("permission denied: /etc/shadow"), ("permanent", "permission", False)),
        (HTTPError(404, "no such order"), ("permanent", "not_found", False)),
        (TypeError("get_weather() got an unexpected keyword argument 'town'"),
         ("internal", "parameter_key", False)),
        (RuntimeError("Error: get_wether is not a valid tool, try one of [get_weather]."),
         ("internal", "tool_hallucination", False)),
    ],
    ids=["timeout", "connection-reset", "connection-refused", "503-on-response", "500", "504",
         "401", "403-on-response", "permission-error", "404", "unexpected-keyword",
         "unknown-tool"],
)
def test_classify_exception(exc: BaseException, expected: tuple[str, str, bool]) -> None:
    c = classify_exception(exc)
    assert _shape(c) == expected
    assert type(exc).__name__ in c.detail


def test_classify_429_reads_retry_after_from_headers() -> None:
    c = classify_exception(HTTPError(429, "slow down", headers={"Retry-After": "7"}))
    assert _shape(c) == ("transient", "rate_limit", False)
    assert c.retry_after == 7.0
    # case-insensitive, and on the response object too
    c = classify_exception(HTTPError(429, headers={"retry-after": "2.5"}, on_response=True))
    assert c.retry_after == 2.5
    # an HTTP date in the past means "now"
    c = classify_exception(HTTPError(429, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}))
    assert c.retry_after == 0.0
    assert classify_exception(HTTPError(429)).retry_after is None


def test_classify_ignores_a_malformed_retry_after() -> None:
    c = classify_exception(HTTPError(429, headers={"Retry-After": "soon"}))
    assert c.outcome == "transient" and c.retry_after is None


def test_classify_pydantic_validation_errors_from_a_real_tool_call() -> None:
    wrong_type = classify_exception(_tool_validation_error({"city": "Paris", "days": "many"}))
    assert _shape(wrong_type) == ("internal", "parameter_value", False)
    missing = classify_exception(_tool_validation_error({"days": 2}))
    assert _shape(missing) == ("internal", "parameter_key", False)


@pytest.mark.parametrize("args", [{"city": 503}, {"city": "Paris", "days": "429 days"}],
                         ids=["value-503", "value-429"])
def test_classify_validation_error_with_status_like_value_is_internal(
    args: dict[str, Any],
) -> None:
    assert _shape(classify_exception(_tool_validation_error(args))) == (
        "internal", "parameter_value", False)


def test_classify_validation_error_mentioning_timeout_is_internal() -> None:
    error = _tool_validation_error({"city": "Paris", "days": "until timeout"})
    assert classify_exception(error).outcome == "internal"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (ToolMessage('{"error": "cd: \'x\': No such file or directory"}', tool_call_id="1"),
         ("internal", "parameter_value", False)),
        (ToolMessage("Error during execution: GorillaFileSystem.mkdir() got an unexpected "
                     "keyword argument 'name'", tool_call_id="1"),
         ("internal", "parameter_key", False)),
        (ToolMessage("429 Too Many Requests", tool_call_id="1", status="error"),
         ("transient", "rate_limit", False)),
        (ToolMessage("Error: 503 Service Unavailable", tool_call_id="1"),
         ("transient", "server", False)),
        (ToolMessage(INVALID_TOOL_NAME_ERROR_TEMPLATE.format(
            requested_tool="get_wether", available_tools="get_weather, get_time"),
            tool_call_id="1", status="error"), ("internal", "tool_hallucination", False)),
        (ToolMessage('{"current_working_directory": "document"}', tool_call_id="1"),
         ("success", None, False)),
        (ToolMessage('{"error": null, "result": 3}', tool_call_id="1"), ("success", None, False)),
        (ToolMessage("sunny, 21 C in Paris", tool_call_id="1"), ("success", None, False)),
    ],
    ids=["bfcl-error-payload", "bfcl-unexpected-keyword", "429-text", "503-text",
         "toolnode-unknown-tool", "bfcl-success", "null-error-field", "plain-success"],
)
def test_classify_result(message: ToolMessage, expected: tuple[str, str | None, bool]) -> None:
    assert _shape(classify_result(message)) == expected


def test_classify_result_reads_retry_after_from_the_text() -> None:
    c = classify_result(ToolMessage("Error: 429 Too Many Requests. Retry-After: 3",
                                    tool_call_id="1"))
    assert c.outcome == "transient" and c.retry_after == 3.0


def test_classify_result_on_a_live_bfcl_environment(episode: BfclEpisode) -> None:
    env = episode.env
    cd_ok = env.execute("cd", {"folder": "document"})
    assert _shape(classify_result(ToolMessage(cd_ok, tool_call_id="1"))) == (
        "success", None, False)
    cd_bad = env.execute("cd", {"folder": "no_such_folder"})
    assert '"error"' in cd_bad
    assert _shape(classify_result(ToolMessage(cd_bad, tool_call_id="2"))) == (
        "internal", "parameter_value", False)
    bad_key = env.execute("mkdir", {"name": "temp"})
    assert "unexpected keyword argument" in bad_key
    assert _shape(classify_result(ToolMessage(bad_key, tool_call_id="3"))) == (
        "internal", "parameter_key", False)


@pytest.mark.parametrize("error", ["Ticket 429 does not exist", "Order 512 not found"])
def test_classify_result_ids_that_look_like_statuses_are_internal(error: str) -> None:
    """A record number is not an HTTP status: only 'HTTP 503', 'status: 429' ... count."""
    c = classify_result(ToolMessage(f'{{"error": "{error}"}}', tool_call_id="1"))
    assert _shape(c) == ("internal", "parameter_value", False)
    for text in ("HTTP 503", "status: 429", "error code 403", "503 Service Unavailable"):
        assert classify_result(ToolMessage(text, tool_call_id="1", status="error")).outcome in (
            "transient", "permanent"), text


def _answer(call_id: str, name: str, record: RetryRecord) -> ToolMessage:
    return ToolMessage("x", tool_call_id=call_id, name=name, status="error" if record.failed
                       else "success", response_metadata={RETRY_KEY: record.model_dump()})


def test_tally_reads_the_run_from_the_turns_answers() -> None:
    controller = RetryController(max_consecutive_failures=2)
    ok, failed = RetryRecord(outcome="success", retries=1), RetryRecord(
        outcome="transient", category="server", retries=3, policy="skip")
    messages: list[BaseMessage] = [
        HumanMessage("old turn"), ai_calls(("a", {}, "0")), _answer("0", "a", failed),
        HumanMessage("new turn"),  # a new user turn is a new run
        ai_calls(("a", {}, "1"), ("b", {}, "2")), _answer("2", "b", failed),
        _answer("1", "a", ok),  # answers arrive in any order; calls count in their order
    ]
    tally = controller.tally(messages)
    assert (tally.run_tool_calls, tally.consecutive_failures, tally.finished) == (2, 1, False)
    assert tally.step == {"tool_calls": 2, "retries": 4, "environment_errors": 1, "skips": 1}
    # parallel failures of one step add up, and the run finishes at the limit
    messages += [ai_calls(("c", {}, "3")), _answer("3", "c", failed)]
    tally = controller.tally(messages)
    assert tally.consecutive_failures == 2
    assert tally.finish_reason == "2 tool calls failed in a row"
    assert tally.step_id == messages[-2].id
    # a finish policy stops the run with its reason
    finish = RetryRecord(outcome="permanent", category="permission", policy="finish",
                         reason="'d' failed: permission")
    tally = controller.tally([HumanMessage("q"), ai_calls(("d", {}, "4")),
                              _answer("4", "d", finish)])
    assert tally.finish_reason == "'d' failed: permission"
    assert controller.tally([]) == Tally()


def test_counters_update_adds_each_step_once() -> None:
    controller = RetryController()
    ok = RetryRecord(outcome="success", retries=2)
    ai = AIMessage("", tool_calls=[{"name": "a", "args": {}, "id": "1"}], id="ai-1")
    state: dict[str, Any] = {"messages": [HumanMessage("q"), ai, _answer("1", "a", ok)]}
    first = controller.counters_update(state)[KEY]
    assert first["tool_calls"] == 1 and first["retries"] == 2 and first["tallied"] == "ai-1"
    state[KEY] = first
    assert controller.counters_update(state) == {}  # the same step is not added twice


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_retries": -1}, "max_retries must be >= 0"),
        ({"initial_delay": -1}, "must be >= 0 seconds"),
        ({"max_delay": float("inf")}, "max_delay must be >= 0 seconds"),
        ({"backoff_factor": 0.5}, "backoff_factor must be >= 1"),
        ({"on_failure": "retry"}, "on_failure must be 'skip' or 'finish'"),
        ({"max_tool_calls": 0}, "max_tool_calls must be >= 1"),
        ({"max_consecutive_failures": 0}, "max_consecutive_failures must be >= 1"),
        ({"timeout_s": 0}, "timeout_s must be > 0"),
    ],
)
def test_controller_validates_its_bounds(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Sleeps().controller(**options)


def test_old_option_names_and_langchain_values_raise_a_clear_error() -> None:
    """0.2 renamed on_exhausted to on_failure and made jitter LangChain's bool (±25 %)."""
    with pytest.raises(ConfigurationError, match=r"jitter must be True or False.*seconds"):
        RetryPolicy(jitter=0.25)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="use 'skip'"):
        RetryPolicy(on_failure="continue")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="use 'finish'"):
        ToolPolicy(on_failure="error")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_exhausted"):
        ToolPolicy(on_exhausted="finish")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="max_retries"):
        RetryController(max_retries=1)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match="policy must be a RetryPolicy"):
        RetryController({"max_retries": 1})  # type: ignore[arg-type]


def test_delay_is_initial_times_factor_to_the_n_capped() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy = RetryPolicy(initial_delay=0.5, backoff_factor=2, max_delay=3, jitter=False)
    assert [policy.delay(n) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.delay(10_000) == 3.0  # no overflow
    assert policy.delay(0, retry_after=2.0) == 2.0 and policy.delay(0, retry_after=99) == 3.0
    jittered = RetryPolicy(initial_delay=2, backoff_factor=1, max_delay=2.2)
    waits = [jittered.delay(1) for _ in range(200)]
    assert all(1.5 <= w <= 2.2 for w in waits) and len(set(waits)) > 1  # ±25 %, capped
    assert RetryPolicy(initial_delay=0).delay(3) == 0.0


def test_policies_are_frozen() -> None:
    policy = RetryPolicy(tool_policies={"a": ToolPolicy(max_retries=1)},
                         read_only_tools=["b"])
    with pytest.raises(AttributeError):
        policy.max_retries = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        policy.tool_policies["c"] = ToolPolicy()  # type: ignore[index]
    assert policy.retries_for("a") == 1 and policy.retries_for("c") == 3
    assert policy.idempotent_for("b") and not policy.idempotent_for("c")


@pytest.mark.parametrize("options", [{"timeout_s": 0}, {"max_retries": -1}])
def test_tool_policy_validates_its_bounds(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        ToolPolicy(**options)


# ---------------------------------------------------------------------------- retries
def _rate_limited_quote() -> Flaky:
    return Flaky("get_quote", [
        HTTPError(429, "Too Many Requests", headers={"Retry-After": "7"}),
        HTTPError(429, "Too Many Requests"),
    ])


def _retry_script() -> list[AIMessage]:
    return [ai_calls(("get_quote", {"city": "Paris"}, "q")), AIMessage("The quote is in.")]


def _check_retry_run(out: dict[str, Any], flaky: Flaky, delays: list[float]) -> None:
    assert flaky.calls == ["Paris"] * 3
    msg = only_answer(out, "q")
    assert msg.status == "success" and msg.content == "get_quote: ok for Paris"
    assert out[KEY]["retries"] == 2 and out[KEY]["tool_calls"] == 1
    assert out[KEY]["consecutive_failures"] == 0
    assert not out[KEY].get("finished")
    assert len(delays) == 2
    assert delays[0] == 7.0  # Retry-After (7 s) beats the backoff (1-1.25 s)
    assert_backoff(delays[1], 2)  # no Retry-After: 1 * 3**1 + jitter
    assert out["messages"][-1].content == "The quote is in."


def test_transient_429_is_retried_then_succeeds(sleeps: Sleeps) -> None:
    flaky = _rate_limited_quote()
    graph, model = plain(_retry_script(), [flaky.tool()], sleeps.controller())
    out = graph.invoke(ask())
    _check_retry_run(out, flaky, sleeps.sync)
    assert sleeps.async_ == []
    assert model.position == 2


async def test_transient_429_is_retried_then_succeeds_async(sleeps: Sleeps) -> None:
    flaky = _rate_limited_quote()
    graph, model = plain(_retry_script(), [flaky.tool()], sleeps.controller())
    out = await graph.ainvoke(ask())
    _check_retry_run(out, flaky, sleeps.async_)
    assert sleeps.sync == []  # the async path never blocks the event loop
    assert model.position == 2


def test_transient_result_text_is_retried(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", ["Error: 503 Service Unavailable"])
    graph, _ = plain(_retry_script(), [flaky.tool()], sleeps.controller())
    out = graph.invoke(ask())
    assert flaky.calls == ["Paris", "Paris"]
    assert only_answer(out, "q").content == "get_quote: ok for Paris"
    assert out[KEY]["retries"] == 1


def test_retries_stop_at_max_retries_with_exponential_backoff(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", [HTTPError(503, on_response=True)] * 10)
    graph, _ = plain(_retry_script(), [flaky.tool()], sleeps.controller())
    out = graph.invoke(ask())
    assert len(flaky.calls) == 4  # 1 attempt + 3 retries (CRITICTOOL's default budget)
    assert len(sleeps.sync) == 3
    for n, delay in enumerate(sleeps.sync, start=1):
        assert_backoff(delay, n)
    msg = only_answer(out, "q")
    assert msg.status == "error"
    assert "after 4 attempts (retry budget 3)" in msg.content
    assert out[KEY]["retries"] == 3 and out[KEY]["skips"] == 1


@pytest.mark.parametrize(("controller_options", "attempts"), [
    ({"max_retries": 0}, 1),
    ({"max_retries": 1}, 2),
    ({"tool_policies": {"get_quote": ToolPolicy(max_retries=1)}}, 2),
    ({"max_retries": 0, "tool_policies": {"get_quote": ToolPolicy(max_retries=2)}}, 3),
])
def test_retry_budget_per_controller_and_per_tool(
    sleeps: Sleeps, controller_options: dict[str, Any], attempts: int,
) -> None:
    flaky = Flaky("get_quote", [HTTPError(503)] * 10)
    graph, _ = plain(_retry_script(), [flaky.tool()], sleeps.controller(**controller_options))
    out = graph.invoke(ask())
    assert len(flaky.calls) == attempts
    assert out[KEY]["retries"] == attempts - 1 == len(sleeps.sync)


def test_retry_after_is_capped_at_max_delay(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", [HTTPError(429, headers={"Retry-After": "3600"})])
    graph, _ = plain(_retry_script(), [flaky.tool()], sleeps.controller(max_delay=30))
    graph.invoke(ask())
    assert sleeps.sync == [30.0]


@pytest.mark.parametrize("error", [
    HTTPError(403, "Forbidden"), HTTPError(401, on_response=True),
    PermissionError("not subscribed to this API"), HTTPError(404, "Not Found"),
])
def test_permanent_errors_are_never_retried(sleeps: Sleeps, error: Exception) -> None:
    flaky = Flaky("get_quote", [error] * 5)
    graph, model = plain(_retry_script(), [flaky.tool()], sleeps.controller())
    out = graph.invoke(ask())
    assert flaky.calls == ["Paris"] and sleeps.sync == []
    msg = only_answer(out, "q")
    assert msg.status == "error"
    assert "permanent, retrying cannot help" in msg.content
    assert out[KEY]["retries"] == 0 and out[KEY]["environment_errors"] == 1
    assert model.position == 2  # default policy skip: the model goes on


@pytest.mark.parametrize("error", [
    TimeoutError("read timed out"), HTTPError(504, "Gateway Timeout"),
    ConnectionResetError(104, "Connection reset by peer"),
], ids=["timeout", "504", "connection-reset"])
def test_ambiguous_error_of_a_non_idempotent_tool_is_not_retried(
    sleeps: Sleeps, error: Exception,
) -> None:
    """langchain issue 40688: a timed-out write may have happened; retrying may repeat it."""
    flaky = Flaky("book_table", [error] * 5, metadata={"effects": "write"})
    script = [ai_calls(("book_table", {"city": "Paris"}, "b")), AIMessage("Sorry.")]
    graph, _ = plain(script, [flaky.tool()], sleeps.controller())
    out = graph.invoke(ask("Book a table in Paris"))
    assert flaky.calls == ["Paris"] and sleeps.sync == []
    msg = only_answer(out, "b")
    assert msg.status == "error"
    assert "not idempotent" in msg.content and "may already have happened" in msg.content
    assert out[KEY]["retries"] == 0 and out[KEY]["skips"] == 1


def test_refused_connection_of_a_non_idempotent_tool_is_retried(sleeps: Sleeps) -> None:
    """Nothing was sent, so even a write is safe to try again."""
    flaky = Flaky("book_table", [ConnectionRefusedError(111, "Connection refused")],
                  metadata={"effects": "write"})
    script = [ai_calls(("book_table", {"city": "Paris"}, "b")), AIMessage("Booked.")]
    graph, _ = plain(script, [flaky.tool()], sleeps.controller())
    out = graph.invoke(ask("Book a table in Paris"))
    assert flaky.calls == ["Paris", "Paris"]
    assert only_answer(out, "b").content == "book_table: ok for Paris"
    assert out[KEY]["retries"] == 1 and len(sleeps.sync) == 1


@pytest.mark.parametrize(
    ("metadata", "controller_options"),
    [
        ({"effects": "read"}, {}),
        ({"idempotent": True}, {}),
        (None, {"idempotent_tools": ["get_quote"]}),
        (None, {"read_only_tools": ["get_quote"]}),
        ({"effects": "write"}, {"tool_policies": {"get_quote": ToolPolicy(idempotent=True)}}),
    ],
    ids=["metadata-effects-read", "metadata-idempotent", "idempotent_tools", "read_only_tools",
         "policy-idempotent"],
)
def test_timeout_of_an_idempotent_tool_is_retried(
    sleeps: Sleeps, metadata: dict[str, Any] | None, controller_options: dict[str, Any],
) -> None:
    flaky = Flaky("get_quote", [TimeoutError("read timed out")], metadata=metadata)
    graph, _ = plain(_retry_script(), [flaky.tool()], sleeps.controller(**controller_options))
    out = graph.invoke(ask())
    assert flaky.calls == ["Paris", "Paris"]
    assert only_answer(out, "q").status == "success"
    assert out[KEY]["retries"] == 1 and len(sleeps.sync) == 1


def test_policy_idempotent_false_overrides_read_metadata(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", [TimeoutError()], metadata={"effects": "read"})
    controller = sleeps.controller(
        tool_policies={"get_quote": ToolPolicy(idempotent=False)})
    graph, _ = plain(_retry_script(), [flaky.tool()], controller)
    out = graph.invoke(ask())
    assert flaky.calls == ["Paris"]
    assert out[KEY]["retries"] == 0


# ---------------------------------------------------------------------------- skip / finish
def test_skip_policy_answers_and_the_model_continues(sleeps: Sleeps, recorder: Recorder) -> None:
    flaky = Flaky("get_quote", [HTTPError(503)] * 10)
    script = [
        ai_calls(("get_quote", {"city": "Paris"}, "q")),
        ai_calls(("get_weather", {"city": "Paris"}, "w")),
        AIMessage("No quote today; Paris is sunny."),
    ]
    graph, model = plain(script, [flaky.tool(), *recorder.tools()],
                         sleeps.controller(max_retries=1))
    out = graph.invoke(ask("Quote and weather for Paris"))
    msg = only_answer(out, "q")
    assert msg.status == "error"
    assert "Skip this step and continue with the remaining subtasks" in msg.content
    assert model.position == 3
    assert model.calls[1][-1] == msg  # the model saw the skip answer
    assert recorder.calls == [("get_weather", {"city": "Paris"})]
    assert out[KEY]["skips"] == 1 and not out[KEY].get("finished")
    assert out[KEY].get("finishes", 0) == 0
    assert out["messages"][-1].content == "No quote today; Paris is sunny."


def _check_finished(out: dict[str, Any], model: ScriptedChatModel, call_id: str) -> None:
    msg = only_answer(out, call_id)
    assert msg.status == "error" and "Stop here" in msg.content
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert last.response_metadata["toolguard"] == "finish"
    assert last.content.startswith("I had to stop: 'get_quote' failed")
    assert "How would you like me to proceed?" in last.content
    assert out[KEY]["finishes"] == 1 and out[KEY]["finished"] is True
    assert model.position == 1  # the model was not called again (the script has one step)


@pytest.mark.parametrize("controller_options", [
    {"on_failure": "finish"},
    {"tool_policies": {"get_quote": ToolPolicy(on_failure="finish")}},
], ids=["default-finish", "per-tool-finish"])
def test_finish_policy_ends_the_run(sleeps: Sleeps, controller_options: dict[str, Any]) -> None:
    flaky = Flaky("get_quote", [HTTPError(503)] * 10)
    script = [ai_calls(("get_quote", {"city": "Paris"}, "q"))]
    graph, model = plain(script, [flaky.tool()], sleeps.controller(**controller_options))
    out = graph.invoke(ask())
    _check_finished(out, model, "q")
    assert out[KEY]["retries"] == 3
    assert "503" in out[KEY]["finish_reason"]


def test_per_tool_skip_overrides_a_finish_default(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", [HTTPError(403)])
    controller = sleeps.controller(
        on_failure="finish", tool_policies={"get_quote": ToolPolicy(on_failure="skip")})
    graph, model = plain(_retry_script(), [flaky.tool()], controller)
    out = graph.invoke(ask())
    assert out[KEY]["skips"] == 1 and not out[KEY].get("finished")
    assert model.position == 2


def test_finish_in_the_guarded_agent(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", [PermissionError("403 Forbidden")], metadata={"effects": "read"})
    model = ScriptedChatModel(script=[ai_calls(("get_quote", {"city": "Paris"}, "q"))])
    graph = create_guarded_agent(model, [flaky.tool()],
                                 controller=sleeps.controller(on_failure="finish"))
    out = graph.invoke(ask())
    _check_finished(out, model, "q")
    assert out["toolguard"]["allowed"] == 1


def test_finish_does_not_stick_to_the_next_turn(sleeps: Sleeps, recorder: Recorder) -> None:
    flaky = Flaky("get_quote", [HTTPError(403)])
    script = [ai_calls(("get_quote", {"city": "Paris"}, "q")),
              ai_calls(("get_weather", {"city": "Paris"}, "w")),
              AIMessage("Paris is sunny.")]
    graph, _ = plain(script, [flaky.tool(), *recorder.tools()],
                     sleeps.controller(on_failure="finish"), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "two-turns"}}
    first = graph.invoke(ask(), config)
    assert first[KEY]["finished"] is True
    out = graph.invoke(ask("Never mind the quote, just the weather in Paris"), config)
    assert recorder.calls == [("get_weather", {"city": "Paris"})]
    assert out["messages"][-1].content == "Paris is sunny."


# ---------------------------------------------------------------------------- caps
def test_max_tool_calls_refuses_the_next_call_and_finishes(
    sleeps: Sleeps, recorder: Recorder,
) -> None:
    script = [ai_calls(("get_weather", {"city": "Paris"}, "a")),
              ai_calls(("get_time", {"city": "Paris"}, "b")),
              ai_calls(("get_weather", {"city": "Oslo"}, "c"))]
    graph, model = plain(script, recorder.tools(), sleeps.controller(max_tool_calls=2))
    out = graph.invoke(ask("Weather and time in Paris, then Oslo"))
    assert recorder.calls == [("get_weather", {"city": "Paris"}),
                              ("get_time", {"city": "Paris"})]
    refused = only_answer(out, "c")
    assert refused.status == "error"
    assert refused.content.startswith("Not executed: the tool-call budget of 2 calls")
    assert out[KEY]["tool_calls"] == 2 and out[KEY]["refused"] == 1
    assert out[KEY]["finished"] is True
    assert out["messages"][-1].response_metadata["toolguard"] == "finish"
    assert model.position == 3


def test_max_tool_calls_holds_for_parallel_calls(sleeps: Sleeps, recorder: Recorder) -> None:
    script = [ai_calls(("get_weather", {"city": "Paris"}, "a"),
                       ("get_weather", {"city": "Oslo"}, "b"),
                       ("get_weather", {"city": "Rome"}, "c")),
              AIMessage("done")]
    graph, _ = plain(script, recorder.tools(), sleeps.controller(max_tool_calls=2))
    out = graph.invoke(ask("Weather in Paris, Oslo and Rome"))
    assert_every_call_answered_once(out["messages"])
    assert len(recorder.calls) <= 2


def test_max_consecutive_failures_finishes_even_with_skip(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", [HTTPError(403), "Error: unexpected keyword argument 'town'"])
    script = [ai_calls(("get_quote", {"city": "Paris"}, "a")),
              ai_calls(("get_quote", {"city": "Paris"}, "b"))]
    graph, model = plain(script, [flaky.tool()],
                         sleeps.controller(max_consecutive_failures=2))
    out = graph.invoke(ask())
    assert out[KEY]["consecutive_failures"] == 2
    assert out[KEY]["skips"] == 1 and out[KEY]["internal_errors"] == 1  # both kinds count
    assert out[KEY]["finished"] is True
    assert out[KEY]["finish_reason"] == "2 tool calls failed in a row"
    assert out["messages"][-1].response_metadata["toolguard"] == "finish"
    assert model.position == 2
    assert_every_call_answered_once(out["messages"])


def test_a_success_resets_consecutive_failures(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", [HTTPError(403), None, HTTPError(403)])
    script = [ai_calls(("get_quote", {"city": "Paris"}, c)) for c in "abc"]
    script.append(AIMessage("partly done"))
    graph, model = plain(script, [flaky.tool()], sleeps.controller(max_consecutive_failures=2))
    out = graph.invoke(ask())
    assert out[KEY]["consecutive_failures"] == 1 and not out[KEY].get("finished")
    assert model.position == 4


def test_parallel_failures_count_towards_max_consecutive_failures(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", [HTTPError(403)] * 3)
    script = [ai_calls(*[("get_quote", {"city": c}, c) for c in ("Paris", "Oslo", "Rome")]),
              AIMessage("done")]
    graph, _ = plain(script, [flaky.tool()], sleeps.controller(max_consecutive_failures=3))
    out = graph.invoke(ask())
    assert out[KEY]["consecutive_failures"] == 3
    assert out[KEY]["finished"] is True


# ---------------------------------------------------------------------------- one answer each
def test_parallel_calls_each_get_one_answer(sleeps: Sleeps, recorder: Recorder) -> None:
    denied = Flaky("get_quote", [HTTPError(403)])
    limited = Flaky("get_rate", [HTTPError(429)])
    script = [ai_calls(("get_quote", {"city": "Paris"}, "q"),
                       ("get_weather", {"city": "Paris"}, "w"),
                       ("get_rate", {"city": "Paris"}, "r"),
                       ("get_wether", {"city": "Paris"}, "typo")),
              AIMessage("done")]
    graph, _ = plain(script, [denied.tool(), limited.tool(), *recorder.tools()],
                     sleeps.controller())
    out = graph.invoke(ask("Quote, weather and rate for Paris"))
    assert_every_call_answered_once(out["messages"])
    answers = {k: v[0] for k, v in answers_by_id(out["messages"]).items()}
    assert answers["q"].status == "error" and "permanent" in answers["q"].content
    assert answers["w"].content == "sunny, 21 C in Paris"
    assert answers["r"].content == "get_rate: ok for Paris"
    assert "tool hallucination error" in answers["typo"].content
    assert recorder.calls == [("get_weather", {"city": "Paris"})]
    assert denied.calls == ["Paris"] and limited.calls == ["Paris", "Paris"]
    counters = out[KEY]
    assert counters["tool_calls"] == 4 and counters["retries"] == 1
    assert counters["environment_errors"] == 1 and counters["internal_errors"] == 1


# ---------------------------------------------------------------------------- internal errors
def _internal_feedback(
    sleeps: Sleeps, tools: list[BaseTool], call: tuple[str, dict[str, Any], str],
) -> tuple[ToolMessage, dict[str, Any]]:
    graph, model = plain([ai_calls(call), AIMessage("fixed")], tools, sleeps.controller())
    out = graph.invoke(ask())
    assert sleeps.sync == []  # internal errors are never retried
    assert model.position == 2  # the model gets the feedback and goes on
    msg = only_answer(out, call[2])
    assert msg.status == "error"
    assert msg.content.rstrip().endswith(
        "Correct the call (right tool, parameter names and values) and try again.")
    assert out[KEY]["internal_errors"] == 1 and out[KEY]["retries"] == 0
    return msg, out


def test_internal_unknown_tool(sleeps: Sleeps, recorder: Recorder) -> None:
    msg, _ = _internal_feedback(sleeps, recorder.tools(), ("get_wether", {"city": "Paris"}, "x"))
    assert "get_wether is not a valid tool" in msg.content
    assert "Error category: tool hallucination error" in msg.content
    assert recorder.calls == []


def test_internal_unexpected_keyword_raised_by_the_tool(sleeps: Sleeps) -> None:
    calls: list[str] = []

    @tool
    def get_quote(city: str) -> str:
        """Get a quote for a city."""
        calls.append(city)
        raise TypeError("fetch() got an unexpected keyword argument 'town'")

    msg, _ = _internal_feedback(sleeps, [get_quote], ("get_quote", {"city": "Paris"}, "k"))
    assert "Error category: parameter key error" in msg.content
    assert calls == ["Paris"]


@pytest.mark.parametrize(("args", "category"), [
    ({"city": "Paris", "days": "many"}, "parameter value error"),
    ({"days": 3}, "parameter key error"),
])
def test_internal_invalid_arguments(
    sleeps: Sleeps, args: dict[str, Any], category: str,
) -> None:
    calls: list[str] = []

    @tool
    def get_forecast(city: str, days: int = 1) -> str:
        """Weather forecast for a city over a number of days."""
        calls.append(city)
        return "ok"

    msg, _ = _internal_feedback(sleeps, [get_forecast], ("get_forecast", args, "f"))
    assert f"Error category: {category}" in msg.content
    assert calls == []


def test_invalid_argument_that_looks_like_a_status_is_not_retried(sleeps: Sleeps) -> None:
    @tool
    def get_forecast(city: str, days: int = 1) -> str:
        """Weather forecast for a city over a number of days."""
        return "ok"

    graph, _ = plain([ai_calls(("get_forecast", {"city": 503}, "f")), AIMessage("fixed")],
                     [get_forecast], sleeps.controller())
    out = graph.invoke(ask())
    assert sleeps.sync == []
    assert "Error category: parameter value error" in only_answer(out, "f").content


def test_internal_errors_from_a_live_bfcl_environment(
    sleeps: Sleeps, episode: BfclEpisode,
) -> None:
    """BFCL's executor answers text, not exceptions: the controller reads the payloads."""
    def bfcl_tool(name: str) -> BaseTool:
        return StructuredTool.from_function(
            func=lambda **kwargs: episode.env.execute(name, kwargs), name=name,
            description=episode.docs[name]["description"],
            args_schema={"type": "object", "properties": {}, "additionalProperties": True})

    tools = [bfcl_tool("cd"), bfcl_tool("mkdir")]
    script = [ai_calls(("cd", {"folder": "no_such_folder"}, "cd")),
              ai_calls(("mkdir", {"name": "temp"}, "mk")),
              ai_calls(("cd", {"folder": "document"}, "ok")),
              AIMessage("done")]
    graph, _ = plain(script, tools, sleeps.controller())
    out = graph.invoke(ask(episode.turns[0]))
    answers = {k: v[0] for k, v in answers_by_id(out["messages"]).items()}
    assert "No such file or directory" in answers["cd"].content
    assert "Error category: parameter value error" in answers["cd"].content
    assert "unexpected keyword argument" in answers["mk"].content
    assert "Error category: parameter key error" in answers["mk"].content
    assert answers["ok"].status == "success"
    assert episode.env.log == [("cd", {"folder": "no_such_folder"}), ("mkdir", {"name": "temp"}),
                               ("cd", {"folder": "document"})]  # each ran once
    assert out[KEY]["internal_errors"] == 2 and out[KEY]["consecutive_failures"] == 0
    assert sleeps.sync == []


# ---------------------------------------------------------------------------- hanging tools
def test_a_hanging_tool_is_answered_as_a_timeout(
    sleeps: Sleeps, release: threading.Event, recorder: Recorder,
) -> None:
    done: list[str] = []

    @tool
    def book_table(city: str) -> str:
        """Book a table in a city's restaurant."""
        release.wait(5)
        done.append(city)
        return "booked"

    script = [ai_calls(("book_table", {"city": "Paris"}, "b")),
              ai_calls(("get_weather", {"city": "Paris"}, "w")),
              AIMessage("Could not book; sunny anyway.")]
    graph, model = plain(script, [book_table, *recorder.tools()],
                         sleeps.controller(timeout_s=0.2))
    out = graph.invoke(ask("Book a table in Paris"))
    assert done == []  # the graph did not wait for the tool
    msg = only_answer(out, "b")
    assert msg.status == "error" and "timeout" in msg.content
    assert "not idempotent" in msg.content  # a write that timed out is not repeated
    assert out[KEY]["retries"] == 0 and sleeps.sync == []
    assert recorder.calls == [("get_weather", {"city": "Paris"})]
    assert model.position == 3


def test_a_hanging_read_tool_is_retried_per_its_policy(
    sleeps: Sleeps, release: threading.Event,
) -> None:
    started: list[str] = []

    @tool
    def get_quote(city: str) -> str:
        """Get a quote for a city."""
        started.append(city)
        release.wait(5)
        return "late"

    get_quote.metadata = {"effects": "read"}
    controller = sleeps.controller(
        tool_policies={"get_quote": ToolPolicy(timeout_s=0.1, max_retries=1)})
    graph, _ = plain(_retry_script(), [get_quote], controller)
    out = graph.invoke(ask())
    assert started == ["Paris", "Paris"]
    msg = only_answer(out, "q")
    assert "timeout after 2 attempts (retry budget 1)" in msg.content
    assert out[KEY]["retries"] == 1 and len(sleeps.sync) == 1


async def test_a_hanging_async_tool_is_answered_as_a_timeout(sleeps: Sleeps) -> None:
    finished: list[str] = []

    @tool
    async def book_table(city: str) -> str:
        """Book a table in a city's restaurant."""
        await asyncio.sleep(5)
        finished.append(city)
        return "booked"

    script = [ai_calls(("book_table", {"city": "Paris"}, "b")), AIMessage("Could not book.")]
    graph, model = plain(script, [book_table], sleeps.controller(timeout_s=0.2))
    out = await graph.ainvoke(ask("Book a table in Paris"))
    assert finished == []
    msg = only_answer(out, "b")
    assert msg.status == "error" and "timeout" in msg.content
    assert out[KEY]["retries"] == 0 and sleeps.async_ == [] and sleeps.sync == []
    assert model.position == 2


async def test_a_hanging_async_read_tool_is_retried(sleeps: Sleeps) -> None:
    attempts: list[str] = []

    @tool
    async def get_quote(city: str) -> str:
        """Get a quote for a city."""
        attempts.append(city)
        if len(attempts) == 1:
            await asyncio.sleep(5)
        return "quote: 42"

    graph, _ = plain(_retry_script(), [get_quote],
                     sleeps.controller(timeout_s=0.2, read_only_tools=["get_quote"]))
    out = await graph.ainvoke(ask())
    assert attempts == ["Paris", "Paris"]
    assert only_answer(out, "q").content == "quote: 42"
    assert out[KEY]["retries"] == 1 and len(sleeps.async_) == 1


def test_a_call_queued_behind_hung_tools_does_not_run_after_its_timeout(
    sleeps: Sleeps, release: threading.Event,
) -> None:
    sent = threading.Event()

    @tool
    def get_quote(city: str) -> str:
        """Get a quote for a city."""
        release.wait(5)
        return "late"

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email message to an address."""
        sent.set()
        return "sent"

    script = [ai_calls(*[("get_quote", {"city": f"c{i}"}, f"q{i}") for i in range(8)]),
              ai_calls(("send_email", {"to": "ops@example.com", "body": "hi"}, "mail")),
              AIMessage("done")]
    graph, _ = plain(script, [get_quote, send_email],
                     sleeps.controller(timeout_s=0.1, max_retries=0,
                                       max_consecutive_failures=None))
    out = graph.invoke(ask())
    answered_as_timeout = "timeout" in only_answer(out, "mail").content
    release.set()
    assert not (answered_as_timeout and sent.wait(2)), "the email ran after its timeout answer"


# ---------------------------------------------------------------------------- interrupts
def test_tool_interrupt_passes_through_the_controller(sleeps: Sleeps) -> None:
    confirmed: list[Any] = []

    @tool
    def delete_file(city: str) -> str:
        """Delete the report of a city after the user confirms."""
        answer = interrupt({"confirm": city})
        confirmed.append(answer)
        return f"deleted {city}: {answer}"

    script = [ai_calls(("delete_file", {"city": "Paris"}, "d")), AIMessage("Deleted.")]
    graph, _ = plain(script, [delete_file], sleeps.controller(timeout_s=2),
                     checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "confirm"}}
    first = graph.invoke(ask(), config)
    assert first["__interrupt__"][0].value == {"confirm": "Paris"}
    out = graph.invoke(Command(resume="yes"), config)
    assert confirmed == ["yes"]
    assert only_answer(out, "d").content == "deleted Paris: yes"
    assert out[KEY]["tool_calls"] == 1 and out[KEY]["retries"] == 0


class Confirmation(BaseModel):
    ok: bool


def test_invalid_resume_value_is_not_swallowed(sleeps: Sleeps) -> None:
    @tool
    def delete_file(city: str) -> str:
        """Delete the report of a city after the user confirms."""
        answer = interrupt({"confirm": city}, response_schema=Confirmation)
        return f"deleted: {answer}"

    script = [ai_calls(("delete_file", {"city": "Paris"}, "d")), AIMessage("Deleted.")]
    graph, _ = plain(script, [delete_file], sleeps.controller(), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "bad-resume"}}
    assert graph.invoke(ask(), config)["__interrupt__"]
    with pytest.raises(ValidationError):
        graph.invoke(Command(resume={"ok": "maybe"}), config)


def _resume_script() -> list[AIMessage]:
    return [
        ai_calls(("get_weather", {"city": "Paris"}, "w1")),
        ai_calls(("get_temperature", {"city": "Paris"}, "t1")),
        ai_calls(("get_weather", {"city": "Reykjavik"}, "guess")),  # content: ask the user
        ai_calls(("get_weather", {"city": "Oslo"}, "w2")),
        ai_calls(("get_time", {"city": "Oslo"}, "over")),  # the 4th call: over the cap
    ]


def _resume_graph(
    saver: InMemorySaver, recorder: Recorder, sleeps: Sleeps, flaky: Flaky, position: int = 0,
) -> tuple[Any, ScriptedChatModel]:
    model = ScriptedChatModel(script=_resume_script(), position=position)
    graph = create_guarded_agent(model, [flaky.tool(), *recorder.tools()], checkpointer=saver,
                                 controller=sleeps.controller(max_tool_calls=3))
    return graph, model


def test_counters_survive_interrupt_resume_and_restart(sleeps: Sleeps, recorder: Recorder) -> None:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "budget"}}
    flaky = Flaky("get_temperature", [HTTPError(503)], metadata={"effects": "read"})
    graph, model = _resume_graph(saver, recorder, sleeps, flaky)
    first = graph.invoke(ask("Weather and temperature in Paris, then the weather"), config)
    assert first["__interrupt__"][0].value["questions"][0]["tool_call_id"] == "guess"
    before = graph.get_state(config).values[KEY]
    assert before["tool_calls"] == 2 and before["retries"] == 1
    assert model.position == 3

    # a new process: same checkpoints, new graph, controller and model objects
    restarted, model2 = _resume_graph(saver, recorder, sleeps, flaky, position=3)
    assert restarted.get_state(config).values[KEY] == before
    out = restarted.invoke(Command(resume="Oslo"), config)

    assert recorder.calls == [("get_weather", {"city": "Paris"}),
                              ("get_weather", {"city": "Oslo"})]
    assert flaky.calls == ["Paris", "Paris"]
    refused = only_answer(out, "over")
    assert refused.content.startswith("Not executed: the tool-call budget of 3 calls")
    counters = restarted.get_state(config).values[KEY]
    assert counters["tool_calls"] == 3  # 2 before the interrupt + 1 after it
    assert counters["retries"] == 1 and counters["refused"] == 1
    assert counters["finished"] is True
    assert out["messages"][-1].response_metadata["toolguard"] == "finish"
    assert model2.position == 5
    assert_every_call_answered_once(out["messages"])


async def test_counters_survive_interrupt_resume_async(
    sleeps: Sleeps, recorder: Recorder,
) -> None:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "budget-async"}}
    flaky = Flaky("get_temperature", [HTTPError(503)], metadata={"effects": "read"})
    graph, model = _resume_graph(saver, recorder, sleeps, flaky)
    first = await graph.ainvoke(ask("Weather and temperature in Paris, then the weather"), config)
    assert first["__interrupt__"]
    assert (await graph.aget_state(config)).values[KEY]["tool_calls"] == 2
    out = await graph.ainvoke(Command(resume="Oslo"), config)
    assert out[KEY]["tool_calls"] == 3 and out[KEY]["refused"] == 1
    assert len(sleeps.async_) == 1 and sleeps.sync == []
    assert model.position == 5


# ---------------------------------------------------------------------------- middleware
def _agent(script: list[Any], tools: list[BaseTool], controller: RetryController,
           **options: Any) -> tuple[Any, ScriptedChatModel]:
    model = ScriptedChatModel(script=script)
    agent = create_agent(model=model, tools=tools,
                         middleware=[RetryControllerMiddleware(controller)], **options)
    return agent, model


def test_middleware_retries_transient_errors(sleeps: Sleeps) -> None:
    flaky = _rate_limited_quote()
    agent, model = _agent(_retry_script(), [flaky.tool()], sleeps.controller())
    out = agent.invoke(ask())
    _check_retry_run(out, flaky, sleeps.sync)
    assert model.position == 2


async def test_middleware_retries_transient_errors_async(sleeps: Sleeps) -> None:
    flaky = _rate_limited_quote()
    agent, model = _agent(_retry_script(), [flaky.tool()], sleeps.controller())
    out = await agent.ainvoke(ask())
    _check_retry_run(out, flaky, sleeps.async_)
    assert sleeps.sync == []
    assert model.position == 2


def _check_middleware_finish(out: dict[str, Any], model: ScriptedChatModel) -> None:
    _check_finished(out, model, "q")
    assert out[KEY]["environment_errors"] == 1


def test_middleware_finish_jumps_to_the_end(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", [HTTPError(403)])
    agent, model = _agent([ai_calls(("get_quote", {"city": "Paris"}, "q"))], [flaky.tool()],
                          sleeps.controller(on_failure="finish"))
    _check_middleware_finish(agent.invoke(ask()), model)


async def test_middleware_finish_jumps_to_the_end_async(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", [HTTPError(403)])
    agent, model = _agent([ai_calls(("get_quote", {"city": "Paris"}, "q"))], [flaky.tool()],
                          sleeps.controller(on_failure="finish"))
    _check_middleware_finish(await agent.ainvoke(ask()), model)


def test_middleware_cap_refuses_and_finishes(sleeps: Sleeps, recorder: Recorder) -> None:
    script = [ai_calls(("get_weather", {"city": "Paris"}, "a")),
              ai_calls(("get_time", {"city": "Paris"}, "b"))]
    agent, model = _agent(script, recorder.tools(), sleeps.controller(max_tool_calls=1))
    out = agent.invoke(ask("Weather and time in Paris"))
    assert recorder.calls == [("get_weather", {"city": "Paris"})]
    assert only_answer(out, "b").content.startswith("Not executed: the tool-call budget of 1")
    assert out["messages"][-1].response_metadata["toolguard"] == "finish"
    assert out[KEY]["refused"] == 1 and model.position == 2


def test_middleware_internal_error_feedback(sleeps: Sleeps) -> None:
    @tool
    def get_forecast(city: str, days: int = 1) -> str:
        """Weather forecast for a city over a number of days."""
        return "ok"

    agent, model = _agent(
        [ai_calls(("get_forecast", {"city": "Paris", "days": "many"}, "f")), AIMessage("ok")],
        [get_forecast], sleeps.controller())
    out = agent.invoke(ask())
    msg = only_answer(out, "f")
    assert "Error category: parameter value error" in msg.content
    assert out[KEY]["internal_errors"] == 1 and sleeps.sync == []
    assert model.position == 2


def test_middleware_options_and_validation() -> None:
    middleware = RetryControllerMiddleware(
        policy=RetryPolicy(max_retries=1, on_failure="finish"))
    assert middleware.controller.policy.max_retries == 1
    assert middleware.controller.policy.on_failure == "finish"
    with pytest.raises(ValueError, match="either controller= or policy="):
        RetryControllerMiddleware(RetryController(), policy=RetryPolicy(max_retries=1))
    with pytest.raises(ValueError, match="state_key='toolguard_controller'"):
        RetryControllerMiddleware(RetryController(state_key="other"))


def test_middleware_finish_does_not_stick_to_the_next_turn(sleeps: Sleeps) -> None:
    flaky = Flaky("get_quote", [HTTPError(403)])
    agent, model = _agent(
        [ai_calls(("get_quote", {"city": "Paris"}, "q")), AIMessage("What else can I do?")],
        [flaky.tool()], sleeps.controller(on_failure="finish"), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "mw-two-turns"}}
    assert agent.invoke(ask(), config)[KEY]["finished"] is True
    out = agent.invoke(ask("OK, forget the quote."), config)
    assert model.position == 2
    assert out["messages"][-1].content == "What else can I do?"

