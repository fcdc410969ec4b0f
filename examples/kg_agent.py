"""Personal references resolved from a per-user knowledge graph before the model runs.

Run: ``.venv/bin/python examples/kg_agent.py``.  No network, no keys: a scripted model
books "my mom's favourite restaurant" in a LangChain ``create_agent`` agent; the
``KGResolveMiddleware`` adds the user's facts (from the agent's store, one KG per user) to
the request, so the ``GuardMiddleware`` sees the restaurant as grounded; a missing link
becomes a question.
"""

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.store.memory import InMemoryStore

from toolguard import GuardMiddleware, KGResolveMiddleware, KGStore
from toolguard.testing import ScriptedChatModel


@tool
def book_table(restaurant: str, people: int) -> str:
    """Book a table at a restaurant for a number of people."""
    return f"booked {restaurant} for {people}"


def build(model: ScriptedChatModel, store: InMemoryStore):  # type: ignore[no-untyped-def]
    return create_agent(model, [book_table], store=store,
                        middleware=[KGResolveMiddleware(), GuardMiddleware()])


if __name__ == "__main__":
    store = InMemoryStore()
    KGStore(store).add_many("user-42", [("Bob", "mother", "Alice"),
                                        ("Alice", "favourite_restaurant", "Chez Paul")])
    model = ScriptedChatModel(script=[
        AIMessage("", tool_calls=[{"name": "book_table", "id": "1",
                                   "args": {"restaurant": "Chez Paul", "people": 2}}]),
        AIMessage("Booked Chez Paul for two."),
    ])
    agent = build(model, store)
    config = {"configurable": {"user_id": "user-42", "kg_speaker": "Bob"}}
    out = agent.invoke({"messages": [HumanMessage(
        "Book a table for two at my mom's favourite restaurant.")]}, config)
    print("request :", out["messages"][0].content)
    print("answer  :", out["messages"][-1].content)
    out = agent.invoke({"messages": [HumanMessage(
        "Book a table at my dad's favourite restaurant.")]}, config)
    print("question:", out["messages"][-1].content)
