"""Issue 14, defect 2: a pending ``ask_user`` never leaks into the next turn.

The guard asks about ``book_table`` (``b1``, a restaurant nobody named) while ``get_weather``
(``w1``) is allowed in the same step.  The user then writes a new message instead of
``Command(resume=...)``.  At 0.1.0 the next turn's ``get_time`` call got the old question,
``w1`` was never run nor answered, and a resume put the old answer after the new
``AIMessage``: ``AI[w1,b1], Human, AI[t2], Tool b1, Tool t2``, a history providers reject.

Documented behaviour: a new user message abandons the pending step (its calls are answered
"not executed" before the new message; nothing of it runs) and the pending question is
dropped; a resume sent after that has nothing to answer and changes nothing.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

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

SURFACES_2 = ["agent", "middleware", "graph"]

FIRST = "What's the weather in Paris? And book a table in Paris."
SECOND = "Forget the table. What time is it in Paris?"


def _script() -> list[AIMessage]:
    return [calls(("get_weather", {"city": "Paris"}, "w1"),
                  ("book_table", {"restaurant": "Chez Luc", "city": "Paris"}, "b1")),
            calls(("get_time", {"city": "Paris"}, "t2")),
            AIMessage("It is noon in Paris.")]


def _ask_then_write(surface: Surface, mode: str) -> tuple[Effects, object, dict, dict]:
    effects = Effects()
    graph, _ = build(surface, _script(), effects.tools(), checkpointer=InMemorySaver())
    first = invoke(graph, ask(FIRST), thread(), mode)
    (pending,) = first["__interrupt__"]
    assert [r["name"] for r in pending.value["action_requests"]] == ["book_table"]
    assert effects.log == []  # nothing of the asked step ran, w1 included
    out = invoke(graph, ask(SECOND), thread(), mode)
    return effects, graph, first, out


def _check_second_turn(effects: Effects, graph: object, out: dict) -> None:
    messages = out["messages"]
    assert_valid_history(messages)
    assert "__interrupt__" not in out
    assert graph.get_state(thread()).next == ()  # type: ignore[attr-defined]
    new_user = next(i for i, m in enumerate(messages)
                    if isinstance(m, HumanMessage) and m.content == SECOND)
    for cid in ("w1", "b1"):  # answered "not executed", before the new message
        answer = only_answer(messages, cid)
        assert answer.content.startswith("Not executed")
        assert messages.index(answer) < new_user
    assert only_answer(messages, "t2").content == "12:00 in Paris"  # not the old question
    assert effects.log == [("get_time", "Paris")]  # book_table and w1 never ran


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES_2)
def test_a_new_message_instead_of_a_resume_drops_the_question(
        surface: Surface, mode: str) -> None:
    effects, graph, _, out = _ask_then_write(surface, mode)
    _check_second_turn(effects, graph, out)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES_2)
def test_a_resume_after_a_new_message_changes_nothing(surface: Surface, mode: str) -> None:
    effects, graph, _, out = _ask_then_write(surface, mode)
    before = list(out["messages"])
    late = invoke(graph, Command(resume={"decisions": [{"type": "respond",
                                                        "message": "Le Jardin"}]}),
                  thread(), mode)
    assert late["messages"] == before  # the old call gets no second, misplaced answer
    _check_second_turn(effects, graph, late)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
def test_a_question_of_the_new_turn_is_the_one_answered(surface: Surface, mode: str) -> None:
    effects = Effects()
    script = [calls(("book_table", {"restaurant": "Chez Luc", "city": "Paris"}, "b1")),
              calls(("book_table", {"restaurant": "Da Mario", "city": "Rome"}, "b2")),
              AIMessage("Booked.")]
    graph, _ = build(surface, script, effects.tools(), checkpointer=InMemorySaver())
    invoke(graph, ask("Book a table in Paris."), thread(), mode)
    second = invoke(graph, ask("Actually, book a table in Rome instead."), thread(), mode)
    (pending,) = second["__interrupt__"]
    assert pending.value["action_requests"][0]["args"]["city"] == "Rome"
    out = invoke(graph, Command(resume={"decisions": [{"type": "approve"}]}), thread(), mode)
    assert effects.log == [("book_table", "Da Mario")]
    assert only_answer(out["messages"], "b1").content.startswith("Not executed")
    assert only_answer(out["messages"], "b2").content == "booked Da Mario in Rome"
    assert_valid_history(out["messages"])
