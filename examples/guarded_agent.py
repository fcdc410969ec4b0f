"""A guarded agent with a scripted model that hallucinates, next to the plain loop.

Run: ``.venv/bin/python examples/guarded_agent.py``.  No network, no keys.
"""

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from toolguard.testing import ScriptedChatModel
from toolguard_graphs import create_guarded_agent, create_plain_agent

executed: list[str] = []


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    executed.append(city)
    return f"sunny in {city}"


def script() -> list[AIMessage]:
    return [
        # a fabricated tool next to a good call
        AIMessage("", tool_calls=[
            {"name": "get_weather", "args": {"city": "Paris"}, "id": "1"},
            {"name": "get_forecast", "args": {"city": "Paris"}, "id": "2"},
        ]),
        # an identical repeat (timing)
        AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "3"}]),
        # a city the user never named (content)
        AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Berlin"}, "id": "4"}]),
        AIMessage("It is sunny in Paris."),
    ]


if __name__ == "__main__":
    question = {"messages": [HumanMessage("What's the weather in Paris?")]}
    for name, factory in (("plain", create_plain_agent), ("guarded", create_guarded_agent)):
        executed.clear()
        out = factory(ScriptedChatModel(script=script()), [get_weather]).invoke(question)
        print(f"{name:8s} tool executions: {executed}  counters: {out.get('toolguard', {})}")
        print(f"{'':8s} last message: {out['messages'][-1].content!r}")
