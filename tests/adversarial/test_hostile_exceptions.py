"""Issue 14, defect 4: exceptions that cannot be printed never crash the controller.

At 0.1.0 ``classify_exception`` formatted ``f"{type(exc).__name__}: {exc}"`` and read
``exc.response``: an exception whose ``__str__`` raises (or returns a non-string), or whose
``response`` property raises, escaped the tool node in all 16 runs (guarded graph and
``create_agent`` middleware, sync and async).  The checkpoint's next node stayed ``tools``,
so ``invoke(None, config)`` charged the card a second time (``[500, 500]``).  The plain
``ToolNode`` answers ``Error: BadStr()``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from adversarial.support import (
    MODES,
    SURFACES,
    Effects,
    Surface,
    ask,
    assert_valid_history,
    build,
    calls,
    invoke,
    only_answer,
    thread,
)
from toolguard.retry import classify_exception, exception_text
from toolguard.testing import ScriptedChatModel
from toolguard_graphs import create_guarded_agent, create_guarded_graph


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ exploded")


class NonStr(Exception):
    def __str__(self) -> str:
        return 42  # type: ignore[return-value]


class BadResponse(Exception):
    @property
    def response(self) -> Any:
        raise RuntimeError("response exploded")


class BadStatus(Exception):
    @property
    def status_code(self) -> int:
        raise RuntimeError("status exploded")


class BadHeaders(Exception):
    status_code = 429

    @property
    def headers(self) -> Any:
        raise RuntimeError("headers exploded")


class BadRepr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class BadGetattr(Exception):
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no attribute reads ({name})")


HOSTILE = [BadStr, NonStr, BadResponse, BadStatus, BadHeaders, BadRepr, BadGetattr]


@pytest.mark.parametrize("cls", HOSTILE)
def test_classification_never_raises(cls: type[Exception]) -> None:
    c = classify_exception(cls())
    assert c.outcome in ("internal", "transient", "permanent")
    assert isinstance(c.detail, str) and c.detail.startswith(cls.__name__)


def test_the_text_of_an_unprintable_exception() -> None:
    assert exception_text(BadStr()) == "BadStr()"  # as ToolNode writes it
    assert exception_text(NonStr()) == "NonStr()"
    assert exception_text(BadRepr()) == "BadRepr: <unprintable>"
    assert exception_text(ValueError("bad")) == "ValueError: bad"
    assert classify_exception(BadHeaders()).outcome == "transient"  # its 429 still reads


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("cls", [BadStr, NonStr, BadResponse, BadRepr])
def test_the_write_is_answered_once_and_never_repeated(
        cls: type[Exception], surface: Surface, mode: str) -> None:
    effects = Effects()
    effects.charge_errors = [cls()]  # the charge goes through, then the tool raises
    script = [calls(("charge_card", {"amount": 500}, "c")), AIMessage("Sorry."),
              AIMessage("never reached")]
    graph, model = build(surface, script, effects.tools(), checkpointer=InMemorySaver())
    out = invoke(graph, ask("Charge my card 500 euros"), thread(), mode)
    answer = only_answer(out["messages"], "c")
    assert answer.status == "error" and cls.__name__ in str(answer.content)
    assert_valid_history(out["messages"])
    assert graph.get_state(thread()).next == ()  # nothing left to run
    invoke(graph, None, thread(), mode)  # "continue" after the run
    assert effects.ran("charge_card") == [500]  # charged once
    assert model.position == 2


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


def _unprintable_result() -> Unprintable:
    return Unprintable()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
def test_a_tool_result_that_cannot_be_printed(surface: Surface, mode: str) -> None:
    report = StructuredTool.from_function(
        func=_unprintable_result, name="get_report", description="Get the daily report.")
    report.metadata = {"effects": "read"}
    graph, _ = build(surface, [calls(("get_report", {}, "r")), AIMessage("Sorry.")],
                     [report])
    started = time.perf_counter()
    out = invoke(graph, ask("Get the daily report"), mode=mode)
    assert only_answer(out["messages"], "r").status == "error"
    assert_valid_history(out["messages"])
    assert time.perf_counter() - started < 5  # read tools are retried; no backoff waits


@pytest.mark.parametrize(("surface", "cls"), [
    ("agent", ValueError), ("agent", BadStr), ("agent", BadRepr),
    ("graph", ValueError), ("graph", BadStr), ("graph", BadRepr)])
def test_without_a_controller_a_tool_error_is_answered(surface: Surface,
                                                       cls: type[Exception]) -> None:
    effects = Effects()
    effects.charge_errors = [cls()]
    build_graph = create_guarded_agent if surface == "agent" else create_guarded_graph
    graph = build_graph(ScriptedChatModel(script=[calls(("charge_card", {"amount": 500}, "c")),
                                                  AIMessage("Sorry.")]),
                        effects.tools(), controller=None, checkpointer=InMemorySaver())
    out = graph.invoke(ask("Charge my card 500 euros"), thread())
    assert only_answer(out["messages"], "c").status == "error"
    assert graph.get_state(thread()).next == ()
    assert effects.ran("charge_card") == [500]
