"""Personal references resolved from a per-user knowledge graph before the model runs.

Run: ``.venv/bin/python examples/kg_agent.py``.  No network, no keys: a scripted model
books "my mom's favourite restaurant"; the KG node adds the user's facts to the request
(so the guard sees the restaurant as grounded), and a missing link becomes a question.
"""

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.store.memory import InMemoryStore

from toolguard import Guard, GuardNode
from toolguard.kg import KGResolveNode, KGStore
from toolguard.node import needs_guard
from toolguard.testing import ScriptedChatModel


@tool
def book_table(restaurant: str, people: int) -> str:
    """Book a table at a restaurant for a number of people."""
    return f"booked {restaurant} for {people}"


class State(MessagesState):
    kg_grounding: list[str]


def build(model: ScriptedChatModel, store: InMemoryStore):  # type: ignore[no-untyped-def]
    kg_node, guard_node = KGResolveNode(), GuardNode(Guard([book_table]))

    def call_model(state: State) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("kg", kg_node)
    builder.add_node("model", call_model)
    builder.add_node("guard", guard_node)
    builder.add_node("tools", ToolNode([book_table]))
    builder.add_edge(START, "kg")
    builder.add_conditional_edges("kg", kg_node.route, ["model", END])
    builder.add_conditional_edges("model", lambda s: "guard" if needs_guard(s) else END,
                                  ["guard", END])
    builder.add_conditional_edges("guard", guard_node.route, ["tools", "model", END])
    builder.add_edge("tools", "model")
    return builder.compile(store=store)


if __name__ == "__main__":
    store = InMemoryStore()
    KGStore(store).add_many("user-42", [("Bob", "mother", "Alice"),
                                        ("Alice", "favourite_restaurant", "Chez Paul")])
    model = ScriptedChatModel(script=[
        AIMessage("", tool_calls=[{"name": "book_table", "id": "1",
                                   "args": {"restaurant": "Chez Paul", "people": 2}}]),
        AIMessage("Booked Chez Paul for two."),
    ])
    graph = build(model, store)
    config = {"configurable": {"user_id": "user-42", "kg_speaker": "Bob"}}
    out = graph.invoke({"messages": [HumanMessage(
        "Book a table for two at my mom's favourite restaurant.")]}, config)
    print("request :", out["messages"][0].content)
    print("answer  :", out["messages"][-1].content)
    out = graph.invoke({"messages": [HumanMessage(
        "Book a table at my dad's favourite restaurant.")]}, config)
    print("question:", out["messages"][-1].content)
