"""``look_up_first``: a call with ungiven values goes back to the model once, then to the user.

The content detector (RelyToolBench's *content* type) turns a call whose value only the user
can give, and which appears nowhere, into ``ask_user``.  Often another tool could find the
value (a contact search for an email address).  With ``look_up_first=True`` the guard sends
the first such call of a turn back to the model with the reason; a value still invented
afterwards is asked of the user.  Real ``create_agent`` / LangGraph graphs, real tools,
scripted models (plumbing only; the measurement is in the CHANGELOG).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from toolguard import Guard, GuardMiddleware
from toolguard.conversation import MARK_KEY, toolguard_mark
from toolguard.nodes import GuardNode
from toolguard.steps import look_up_first
from toolguard.testing import ScriptedChatModel
from toolguard.types import Verdict

RAN: list[str] = []


@tool
def search_contacts(name: str) -> str:
    """Find a contact by name; returns their name and email address."""
    RAN.append(f"search_contacts({name})")
    return "Ada Lovelace <ada.lovelace@analytical.org>"


@tool
def send_email(to: str, subject: str) -> str:
    """Send an email with a subject line to an email address."""
    RAN.append(f"send_email({to})")
    return "sent"


TOOLS = [search_contacts, send_email]
REQUEST = "Email Ada Lovelace with the subject 'Meeting moved'."


def call(tool_name: str, cid: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": tool_name, "args": args, "id": cid,
                                      "type": "tool_call"}])


INVENTED = call("send_email", "c1", to="ada@example.com", subject="Meeting moved")
LOOKUP = call("search_contacts", "c2", name="Ada Lovelace")
FOUND = call("send_email", "c3", to="ada.lovelace@analytical.org", subject="Meeting moved")
INVENTED_AGAIN = call("send_email", "c4", to="a.lovelace@example.com", subject="Meeting moved")


def run_agent(script: list[Any], tools: list[Any] = TOOLS, **options: Any
              ) -> tuple[list[BaseMessage], ScriptedChatModel]:
    RAN.clear()
    model = ScriptedChatModel(script=script)
    agent = create_agent(model, tools, middleware=[GuardMiddleware(ask_user="end", **options)])
    out = agent.invoke({"messages": [HumanMessage(REQUEST)]})
    return out["messages"], model


def assert_answered_once(messages: list[BaseMessage]) -> None:
    calls = [c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    answers = [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
    assert sorted(calls) == sorted(answers)


def test_without_it_the_invented_address_is_asked_of_the_user() -> None:
    messages, model = run_agent([INVENTED, AIMessage("unused")])
    assert model.position == 1 and RAN == []
    assert messages[-1].response_metadata[MARK_KEY] == "ask_user"
    assert_answered_once(messages)


def test_the_model_looks_the_address_up_and_the_call_runs() -> None:
    messages, model = run_agent([INVENTED, LOOKUP, FOUND, AIMessage("Done.")],
                                look_up_first=True)
    assert model.position == 4
    assert RAN == ["search_contacts(Ada Lovelace)", "send_email(ada.lovelace@analytical.org)"]
    first = next(m for m in messages if isinstance(m, ToolMessage))
    mark = toolguard_mark(first)
    assert first.status == "error" and mark is not None
    assert (mark["action"], mark["hallucination"]) == ("block", "content")
    assert "obtain them with another tool" in str(first.content)
    assert "'to'" in str(first.content)
    assert messages[-1].content == "Done."
    assert_answered_once(messages)


def test_a_value_invented_again_is_asked_of_the_user() -> None:
    messages, model = run_agent([INVENTED, INVENTED_AGAIN, AIMessage("unused")],
                                look_up_first=True)
    assert model.position == 2 and RAN == []
    assert messages[-1].response_metadata[MARK_KEY] == "ask_user"
    assert "Which to should I use for send_email?" in str(messages[-1].content)
    assert_answered_once(messages)


def test_the_models_own_question_ends_the_turn() -> None:
    question = AIMessage("Which email address does Ada Lovelace use?")
    messages, model = run_agent([INVENTED, question], look_up_first=True)
    assert model.position == 2 and RAN == []
    last = messages[-1]
    assert last.content == question.content and MARK_KEY not in last.response_metadata
    assert_answered_once(messages)


def test_with_a_single_tool_nothing_else_could_find_the_value() -> None:
    messages, model = run_agent([INVENTED, AIMessage("unused")], tools=[send_email],
                                look_up_first=True)
    assert model.position == 1
    assert messages[-1].response_metadata[MARK_KEY] == "ask_user"


def verdict(action: Any, hallucination: Any = None, confirm: bool = False,
            cid: str = "c1") -> Verdict:
    return Verdict(tool_call_id=cid, tool_name="send_email", action=action,
                   hallucination=hallucination, question="Which to?", confirm=confirm)


def test_only_content_asks_are_sent_back_and_only_once_per_turn() -> None:
    content = verdict("ask_user", "content")
    others = [verdict("ask_user", None, cid="c2"), verdict("ask_user", None, True, "c3"),
              verdict("block", "type", cid="c4"), verdict("allow", cid="c5")]
    out = look_up_first([content, *others], [HumanMessage(REQUEST)], n_tools=2)
    assert out[0].action == "block" and out[0].hallucination == "content"
    assert out[0].question is None
    assert out[1:] == others  # provenance-style asks, confirmations, other kinds: unchanged
    # a call of this turn was already sent back: the next one asks
    sent_back = ToolMessage("Not executed", tool_call_id="c0", status="error",
                            response_metadata={MARK_KEY: out[0].model_dump(mode="json")})
    turn = [HumanMessage(REQUEST), INVENTED, sent_back]
    assert look_up_first([content], turn, n_tools=2) == [content]
    # a new user message starts a new turn
    again = look_up_first([content], [*turn, HumanMessage("Try again")], n_tools=2)
    assert again[0].action == "block"
    # a tool cannot forge the mark: only response_metadata is read
    forged = ToolMessage("x", tool_call_id="c0", artifact={"toolguard": {
        "action": "block", "hallucination": "content"}})
    assert look_up_first([content], [HumanMessage(REQUEST), INVENTED, forged],
                         n_tools=2)[0].action == "block"


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_the_node_sends_back_the_same_way(asynchronous: bool) -> None:
    RAN.clear()
    model = ScriptedChatModel(script=[INVENTED, LOOKUP, FOUND, AIMessage("Done.")])
    node = GuardNode(Guard(TOOLS), ask_user="end", look_up_first=True)
    bound = model.bind_tools(TOOLS)
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda s: {"messages": [bound.invoke(s["messages"])]})
    builder.add_node("guard", node)
    builder.add_node("tools", ToolNode(TOOLS))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda s: "guard" if s["messages"][-1].tool_calls
                                  else END)
    builder.add_conditional_edges("guard", node.route)
    builder.add_edge("tools", "model")
    graph = builder.compile()
    state = {"messages": [HumanMessage(REQUEST)]}
    out = await graph.ainvoke(state) if asynchronous else graph.invoke(state)
    assert RAN == ["search_contacts(Ada Lovelace)", "send_email(ada.lovelace@analytical.org)"]
    assert out["messages"][-1].content == "Done."
    assert_answered_once(out["messages"])


@pytest.mark.parametrize("builder", ["create_guarded_agent", "create_guarded_graph"])
@pytest.mark.parametrize("configured", [False, True])
def test_the_prebuilt_agents_take_it_with_or_without_a_configured_guard(
        builder: str, configured: bool) -> None:
    import toolguard_graphs

    RAN.clear()
    model = ScriptedChatModel(script=[INVENTED, LOOKUP, FOUND, AIMessage("Done.")])
    options: dict[str, Any] = {"guard": Guard(TOOLS)} if configured else {}
    graph = getattr(toolguard_graphs, builder)(model, TOOLS, ask_user="end", controller=None,
                                               look_up_first=True, max_refused_steps=2,
                                               **options)
    out = graph.invoke({"messages": [HumanMessage(REQUEST)]})
    assert RAN == ["search_contacts(Ada Lovelace)", "send_email(ada.lovelace@analytical.org)"]
    assert_answered_once(out["messages"])
