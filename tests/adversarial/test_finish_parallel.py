"""Issue 14, defect 1: a ``finish`` among parallel calls stops the run, once.

LangGraph evaluates the edge after the tool node per parallel call; at 0.1.0 the model ran
again after the finish and its next call (a message) executed, and 200 parallel calls
counted ``finishes: 100`` for one finish.  Today one node per step (the middleware's
``before_model``, the graph's ``RetryGateNode``) reads the step's answers.
"""

from __future__ import annotations

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
)

KEY = "toolguard_controller"


class Forbidden(Exception):
    status_code = 403


# 200 parallel calls once per surface (about half a second each), sync and async in turn
WIDE = [("agent", "async", 200), ("middleware", "sync", 200), ("graph", "async", 200)]


@pytest.mark.parametrize(("surface", "mode", "width"),
                         [(s, m, 2) for s in SURFACES for m in MODES] + WIDE)
def test_a_finish_beside_parallel_calls_ends_the_run_once(
        surface: Surface, mode: str, width: int) -> None:
    effects = Effects()
    effects.charge_errors = [Forbidden("403 Forbidden")]
    effects.charge_commits = False
    cities = [f"City{i}" for i in range(width - 1)]
    step = calls(("charge_card", {"amount": 500}, "c"),
                 *[("get_weather", {"city": c}, f"w{i}") for i, c in enumerate(cities)])
    script = [step, calls(("send_message", {"to": "bob@example.com"}, "s")),
              AIMessage("Sent.")]
    graph, model = build(surface, script, effects.tools(),
                         ctl=controller(on_failure="finish", max_tool_calls=None,
                                        max_consecutive_failures=None))
    out = invoke(graph, ask("Charge my card 500 euros and get the weather in "
                            + ", ".join(cities)), mode=mode)
    assert effects.ran("send_message") == []  # nothing ran after the finish
    assert model.position == 1  # the model was not called again
    assert sorted(effects.ran("get_weather")) == sorted(cities)
    last = out["messages"][-1]
    assert last.response_metadata.get("toolguard") == "finish"
    assert last.content.startswith("I had to stop: 'charge_card' failed")
    assert out[KEY]["finishes"] == 1 and out[KEY]["finished"] is True
    assert out[KEY]["tool_calls"] == width
    assert_valid_history(out["messages"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
def test_a_cap_hit_by_parallel_calls_refuses_the_rest_and_finishes_once(
        surface: Surface, mode: str) -> None:
    effects = Effects()
    step = calls(*[("get_weather", {"city": f"C{i}"}, f"w{i}") for i in range(6)])
    script = [step, calls(("send_message", {"to": "bob@example.com"}, "s")), AIMessage("x")]
    graph, model = build(surface, script, effects.tools(), ctl=controller(max_tool_calls=4))
    out = invoke(graph, ask("Weather in " + ", ".join(f"C{i}" for i in range(6))), mode=mode)
    assert sorted(effects.ran("get_weather")) == [f"C{i}" for i in range(4)]
    assert effects.ran("send_message") == [] and model.position == 1
    assert out[KEY]["refused"] == 2 and out[KEY]["finishes"] == 1
    assert_valid_history(out["messages"])
