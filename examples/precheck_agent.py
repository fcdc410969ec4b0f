"""A guarded agent with the deterministic pre-check: it asks or abstains before any tool runs.

Run: ``.venv/bin/python examples/precheck_agent.py``.  No network, no keys.  The scripted
model would call ``get_weather`` at once on every request; the pre-check decides first.
"""

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from toolguard.testing import ScriptedChatModel
from toolguard_graphs import create_guarded_agent

executed: list[str] = []


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    executed.append(city)
    return f"sunny in {city}"


def agent() -> object:
    model = ScriptedChatModel(script=[
        AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"},
                                   "id": "1"}]),
        AIMessage("It is sunny in Paris."),
    ] * 3)
    return create_guarded_agent(model, [get_weather], precheck="deterministic",
                                checkpointer=InMemorySaver())


if __name__ == "__main__":
    graph = agent()
    requests = {
        "no tool fits": "Book me a table for two at an Italian restaurant tonight.",
        "value missing": "What is the weather like in a certain city?",
        "feasible": "What is the weather like in Paris?",
    }
    for i, (label, text) in enumerate(requests.items()):
        config = {"configurable": {"thread_id": str(i)}}
        out = graph.invoke({"messages": [HumanMessage(text)]}, config)  # type: ignore[attr-defined]
        if "__interrupt__" in out:
            question = out["__interrupt__"][0].value["questions"][0]["question"]
            print(f"{label:14} asks: {question}")
            out = graph.invoke(Command(resume="Paris"), config)  # type: ignore[attr-defined]
        print(f"{label:14} answer: {out['messages'][-1].content}")
    print(f"tool executions: {executed}")
