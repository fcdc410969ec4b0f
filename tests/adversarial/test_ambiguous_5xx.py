"""Issue 14, defect 6: a 5xx after a write is as ambiguous as a timeout.

At 0.1.0 a charge that committed and then answered ``502 Bad Gateway`` ran 4 times (every
5xx was retried).  Documented policy (``toolguard.retry.classify_exception``): a 5xx other
than 503 may come after the effect, so it is retried only for idempotent tools (read-only,
``idempotent`` metadata, ``idempotent_tools``, ``ToolPolicy(idempotent=True)``); 503 and
429 say the request was not handled and are retried for any tool.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage

from adversarial.support import (
    MODES,
    SURFACES,
    Effects,
    Surface,
    ask,
    assert_valid_history,
    build,
    calls,
    controller,
    invoke,
    only_answer,
)
from toolguard.retry import ToolPolicy, classify_exception, classify_result


class HTTPError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status} {text}")
        self.status_code = status


def _charge(surface: Surface, mode: str, errors: list[BaseException], *, commits: bool,
            **options: Any) -> tuple[Effects, dict[str, Any]]:
    effects = Effects()
    effects.charge_errors = list(errors)
    effects.charge_commits = commits
    graph, _ = build(surface, [calls(("charge_card", {"amount": 500}, "c")),
                               AIMessage("Done.")], effects.tools(),
                     ctl=controller(**options))
    out = invoke(graph, ask("Charge my card 500 euros"), mode=mode)
    assert_valid_history(out["messages"])
    return effects, out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("error", [HTTPError(502, "Bad Gateway"),
                                   HTTPError(500, "Internal Server Error"),
                                   HTTPError(504, "Gateway Timeout"),
                                   RuntimeError("upstream answered HTTP 502 Bad Gateway")],
                         ids=["502", "500", "504", "502-text"])
def test_a_write_that_commits_then_fails_with_5xx_runs_once(
        error: BaseException, surface: Surface, mode: str) -> None:
    effects, out = _charge(surface, mode, [error] * 4, commits=True)
    assert effects.ran("charge_card") == [500]  # one charge, no blind retry
    answer = only_answer(out["messages"], "c")
    assert answer.status == "error"
    assert "not idempotent" in str(answer.content)
    assert "may already have happened" in str(answer.content)
    assert out["toolguard_controller"]["retries"] == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
def test_503_before_the_write_is_retried(surface: Surface, mode: str) -> None:
    effects, out = _charge(surface, mode, [HTTPError(503, "Service Unavailable")],
                           commits=False)
    assert effects.ran("charge_card") == [500]
    assert only_answer(out["messages"], "c").content == "charged 500 EUR"
    assert out["toolguard_controller"]["retries"] == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
def test_a_write_declared_idempotent_is_retried_after_a_502(surface: Surface,
                                                            mode: str) -> None:
    effects, out = _charge(surface, mode, [HTTPError(502, "Bad Gateway")], commits=False,
                           tool_policies={"charge_card": ToolPolicy(idempotent=True)})
    assert effects.ran("charge_card") == [500]
    assert out["toolguard_controller"]["retries"] == 1


def test_the_classes_of_5xx() -> None:
    from langchain_core.messages import ToolMessage

    for status, ambiguous in [(500, True), (502, True), (503, False), (504, True),
                              (507, True)]:
        c = classify_exception(HTTPError(status, "x"))
        assert (c.outcome, c.ambiguous) == ("transient", ambiguous), status
    for text, ambiguous in [("Error: 502 Bad Gateway", True),
                            ("Error: HTTP 500 Internal Server Error", True),
                            ("Error: 503 Service Unavailable", False)]:
        c = classify_result(ToolMessage(text, tool_call_id="1"))
        assert (c.outcome, c.ambiguous) == ("transient", ambiguous), text
