"""Issue 14, defect 7: classifying a huge error message costs microseconds, not seconds.

At 0.1.0 nine regexes ran over the whole text although 500 characters are kept: a 10 MB
exception message cost 7-8 s per classification.  Now only both ends of a long text are
searched (``toolguard.retry.SCAN_CHARS`` characters each).
"""

from __future__ import annotations

import time

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool

from adversarial.support import (
    MODES,
    SURFACES,
    Surface,
    ask,
    assert_valid_history,
    build,
    calls,
    invoke,
    only_answer,
)
from toolguard.retry import DETAIL_CHARS, classify_exception, classify_result

MB10 = 10_000_000


def _timed(fn: object, *args: object) -> tuple[object, float]:
    started = time.perf_counter()
    result = fn(*args)  # type: ignore[operator]
    return result, time.perf_counter() - started


@pytest.mark.parametrize(("text", "expected"), [
    ("a" * MB10, ("internal", "parameter_value")),
    ("x " * (MB10 // 2), ("internal", "parameter_value")),
    ("HTTP 429 Too Many Requests; " + "y" * MB10, ("transient", "rate_limit")),
    ("z" * MB10 + " connection reset by peer", ("transient", "connection")),
    ("w" * MB10 + "\npermission denied", ("permanent", "permission")),
], ids=["flat", "words", "status-first", "cause-last", "permanent-last"])
def test_a_10_mb_message_is_classified_fast_and_by_its_ends(
        text: str, expected: tuple[str, str]) -> None:
    for classify, value in ((classify_exception, RuntimeError(text)),
                            (classify_result, ToolMessage("Error: " + text, tool_call_id="1"))):
        c, seconds = _timed(classify, value)
        assert (c.outcome, c.category) == expected  # type: ignore[attr-defined]
        assert len(c.detail) <= DETAIL_CHARS  # type: ignore[attr-defined]
        assert seconds < 0.5, f"{classify.__name__} took {seconds:.2f} s"


def _huge_failure() -> str:
    raise RuntimeError("corrupt record: " + "q" * MB10)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
def test_a_tool_raising_a_10_mb_message_is_answered_fast_and_bounded(
        surface: Surface, mode: str) -> None:
    tool = StructuredTool.from_function(func=_huge_failure, name="get_report",
                                        description="Get the daily report.")
    tool.metadata = {"effects": "read"}
    graph, _ = build(surface, [calls(("get_report", {}, "r")), AIMessage("Sorry.")], [tool])
    out, seconds = _timed(invoke, graph, ask("Get the daily report"), None, mode)
    answer = only_answer(out["messages"], "r")  # type: ignore[index]
    assert answer.status == "error" and len(str(answer.content)) < 2 * DETAIL_CHARS
    assert seconds < 3, f"{seconds:.2f} s"
    assert_valid_history(out["messages"])  # type: ignore[index]
