"""toolguard in a LangChain v1 ``create_agent`` agent: four middleware, real tools.

Run: ``.venv/bin/python examples/middleware_agent.py``.  No network, no keys: a scripted
model stands in for the LLM and makes the mistakes real models make.  The tools are real
functions with an in-memory ledger.

- ``PrecheckMiddleware`` (ICT Structured Verification) abstains before the model acts when
  no tool fits the request.
- ``GuardMiddleware`` (RelyToolBench) refuses a fabricated tool, arguments that break the
  schema, and a value nobody gave (it asks the user: with the checkpointer, an interrupt
  shaped like LangChain's human-in-the-loop request).
- ``LoopGuardMiddleware`` stops the model from calling a failing tool over and over.
- ``RetryControllerMiddleware`` (CRITICTOOL) retries a transient error, then skips.
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from toolguard import (
    GuardMiddleware,
    LoopGuardMiddleware,
    PrecheckMiddleware,
    RetryControllerMiddleware,
)
from toolguard.retry import RetryPolicy
from toolguard.testing import ScriptedChatModel

LEDGER: dict[str, float] = {"ACC-1": 120.0, "ACC-2": 15.0}
EXECUTED: list[str] = []
_flaky = {"left": 1}


@tool
def get_balance(account: str) -> str:
    """Get the balance of a bank account, by account id."""
    EXECUTED.append(f"get_balance({account})")
    if _flaky["left"]:  # the bank's API times out once
        _flaky["left"] -= 1
        raise TimeoutError("bank API timed out")
    return f"{account}: {LEDGER[account]:.2f} EUR"


@tool
def transfer(source: str, target: str, amount: float) -> str:
    """Transfer an amount in EUR from one bank account to another."""
    EXECUTED.append(f"transfer({source}, {target}, {amount})")
    if LEDGER[source] < amount:
        raise ValueError(f"insufficient funds on {source}")
    LEDGER[source] -= amount
    LEDGER[target] += amount
    return f"moved {amount:.2f} EUR from {source} to {target}"


get_balance.metadata = {"effects": "read"}
transfer.metadata = {"effects": "write"}


def calls(*items: tuple[str, dict[str, Any], str]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in items])


def script() -> list[AIMessage]:
    return [
        # turn 1: a good read (which times out once), a fabricated tool, and a transfer
        # with an amount the user never gave (the guard asks; the user says 50 EUR)
        calls(("get_balance", {"account": "ACC-1"}, "b1"),
              ("get_statement", {"account": "ACC-1"}, "s1"),
              ("transfer", {"source": "ACC-1", "target": "ACC-2", "amount": 500}, "t1")),
        # the model calls again with the user's amount: now grounded, it runs
        calls(("transfer", {"source": "ACC-1", "target": "ACC-2", "amount": 50}, "t2")),
        AIMessage("Done: 50 EUR moved to ACC-2."),
        # turn 2: the model insists on a transfer that keeps failing
        *(calls(("transfer", {"source": "ACC-2", "target": "ACC-1", "amount": 900},
                 f"x{i}")) for i in range(6)),
        AIMessage("never reached"),
    ]


def build() -> Any:
    return create_agent(
        ScriptedChatModel(script=script()), [get_balance, transfer],
        middleware=[RetryControllerMiddleware(policy=RetryPolicy(initial_delay=0)),
                    PrecheckMiddleware(), LoopGuardMiddleware(), GuardMiddleware()],
        checkpointer=InMemorySaver())


if __name__ == "__main__":
    agent = build()
    config = {"configurable": {"thread_id": "demo"}}
    out = agent.invoke({"messages": [HumanMessage(
        "Check the balance of ACC-1, then transfer some money from ACC-1 to ACC-2.")]},
        config)
    ask = out["__interrupt__"][0].value
    print("asked   :", ask["action_requests"][0]["description"])
    out = agent.invoke(Command(resume="50 EUR"), config)
    print("answer  :", out["messages"][-1].content)
    out = agent.invoke({"messages": [HumanMessage(
        "Now move 900 EUR from ACC-2 back to ACC-1.")]}, config)
    print("stopped :", out["messages"][-1].content.splitlines()[0])
    # a new conversation: no tool fits (later in a session the pre-check proceeds instead:
    # absence of shared words is no evidence there)
    out = agent.invoke({"messages": [HumanMessage("Order me a pizza, please.")]},
                       {"configurable": {"thread_id": "other"}})
    print("abstain :", out["messages"][-1].content.split(".")[0])
    print("executed:", EXECUTED)
    print("ledger  :", LEDGER)
    print("counters:", out["toolguard"])
