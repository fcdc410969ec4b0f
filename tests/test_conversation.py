"""The one conversation reader: the goal across turns, calls and answers, provenance."""

from __future__ import annotations

import pytest
from conftest import ai_calls
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from toolguard.conversation import (
    MAX_ARGS_DEPTH,
    Conversation,
    answers_toolguard,
    parse_args,
    proposed_calls,
)
from toolguard.errors import InputError
from toolguard.state import close_dangling_calls


def goal(*turns: str | BaseMessage) -> str:
    messages = [HumanMessage(t) if isinstance(t, str) else t for t in turns]
    return Conversation.read(messages).goal.text


@pytest.mark.parametrize(("question", "answer"), [
    ("Which username should I use?", "It's JaneSmith."),
    ("Shall I book the 8:15 one?", "Yes, that's correct."),
    ("What are your login details?", "my username is foo and my password is bar"),
    ("Which of the two accounts?", "the second one"),
    ("Friday at 9?", "No, make it Saturday."),
    ("Which city?", "Oslo"),
])
def test_an_answer_to_a_question_is_read_with_its_request(question: str, answer: str) -> None:
    request = "Reset the password of my account on the staging server."
    assert goal(request, AIMessage(question), answer) == f"{request}\n{answer}"


def test_a_follow_up_after_tool_results_joins_its_request() -> None:
    msgs: list[BaseMessage] = [
        SystemMessage("You are a travel agent."),
        HumanMessage("Find me a hotel in Lisbon for May 3-5."),
        ai_calls(("search_hotels", {"city": "Lisbon"}, "s")),
        ToolMessage('{"hotels": [{"id": "H-17", "name": "Alfama Inn"}]}', tool_call_id="s"),
        AIMessage("I found the Alfama Inn. Shall I book it?"),
        HumanMessage("Yes please, book it."),
    ]
    g = Conversation.read(msgs).goal
    assert g.follow_up and g.request == "Find me a hotel in Lisbon for May 3-5."
    assert g.indexes == (1, 5)


def test_references_join_and_new_requests_stand_alone() -> None:
    assert goal("Get the weather in Paris.", AIMessage("Sunny, 21 C."),
                "Do the same for Berlin.") == ("Get the weather in Paris.\n"
                                               "Do the same for Berlin.")
    assert goal("Book the 8:15 train to Lyon.", AIMessage("Booked."),
                "What's the weather in Oslo tomorrow?") == "What's the weather in Oslo tomorrow?"
    # at most four user messages are joined
    turns: list[str | BaseMessage] = ["Start the migration."]
    for i in range(6):
        turns += [AIMessage("Which one?"), f"number {i}"]
    assert len(goal(*turns).splitlines()) == 4
    assert Conversation.read([AIMessage("hello")]).goal.text == ""


def test_calls_are_matched_to_answers_by_position_not_by_a_reused_id() -> None:
    # some providers number calls call_0, call_1 anew every turn
    msgs: list[BaseMessage] = [
        HumanMessage("Weather in London"),
        AIMessage("", tool_calls=[{"name": "w", "args": {"city": "London"}, "id": "call_0"}]),
        ToolMessage("rain in London", tool_call_id="call_0"),
        HumanMessage("And Paris?"),
        AIMessage("", tool_calls=[{"name": "w", "args": {"city": "Paris"}, "id": "call_0"}]),
        ToolMessage("Error: timeout", tool_call_id="call_0", status="error"),
    ]
    london, paris = Conversation.read(msgs).calls
    assert (london.args, london.ok, london.result) == ({"city": "London"}, True, "rain in London")
    assert (paris.args, paris.ok, paris.error) == ({"city": "Paris"}, False, "Error: timeout")


def test_texts_keep_their_provenance() -> None:
    conv = Conversation.read([
        SystemMessage("policy"), HumanMessage("hi"),
        ai_calls(("search", {"q": "x"}, "1")), ToolMessage("found x", tool_call_id="1",
                                                             name="search"),
    ], grounding=["Alice mother Bob"])
    assert [(t.source, t.tool) for t in conv.texts] == [
        ("system", None), ("user", None), ("tool", "search"), ("grounding", None)]


def test_tool_message_with_none_content_reads_as_empty() -> None:
    answer = ToolMessage("x", tool_call_id="1")
    object.__setattr__(answer, "content", None)
    (call,) = Conversation.read([HumanMessage("q"), ai_calls(("f", {}, "1")), answer]).calls
    assert call.result == "" and call.ok


def test_deeply_nested_arguments_are_refused_without_recursion() -> None:
    raw = "[" * 5000 + "]" * 5000
    args, error = parse_args('{"a": ' + raw + "}")
    assert args is None and error is not None and f"deeper than {MAX_ARGS_DEPTH}" in error
    deep: dict[str, object] = {}
    node = deep
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    message = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "1"}])
    message.tool_calls[0]["args"] = deep
    (call,) = proposed_calls(message)
    assert call.args is None and "deeper than" in (call.parse_error or "")


def test_unreadable_messages_are_a_clear_error() -> None:
    with pytest.raises(InputError, match="cannot read the messages"):
        Conversation.read([object()])  # type: ignore[list-item]


def test_answers_toolguard() -> None:
    asked = AIMessage("Which city?", response_metadata={"toolguard": "ask_user"})
    assert answers_toolguard([HumanMessage("weather"), asked, HumanMessage("Oslo")])
    assert not answers_toolguard([HumanMessage("weather"), AIMessage("Which city?"),
                                  HumanMessage("Oslo")])


def test_close_dangling_calls_moves_the_new_message_after_the_answers() -> None:
    dangling = AIMessage("", id="a1", tool_calls=[
        {"name": "w", "args": {}, "id": "w1"}, {"name": "b", "args": {}, "id": "b1"}])
    new = HumanMessage("never mind", id="h2")
    update = close_dangling_calls([HumanMessage("q", id="h1"), dangling, new])
    assert isinstance(update[0], RemoveMessage) and update[0].id == "h2"
    assert [m.tool_call_id for m in update[1:3]] == ["w1", "b1"]  # type: ignore[attr-defined]
    assert update[3].content == "never mind" and update[3].id == "h2.moved"
    assert close_dangling_calls([HumanMessage("q", id="h1")]) == []
