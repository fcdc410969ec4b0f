"""toolguard on MCP tools: the server's tool annotations are the policy, with no configuration.

Run: ``.venv/bin/python examples/mcp_agent.py`` (needs ``mcp`` and ``langchain-mcp-adapters``,
in the ``dev`` extra).  No network, no keys: this file is also a tiny MCP server (FastMCP,
``--serve STATE``), which the example starts over stdio and loads with
``langchain-mcp-adapters``; a scripted model stands in for the LLM.

The server declares MCP ``ToolAnnotations`` on each tool, and the adapter copies them into
``tool.metadata``, where toolguard reads them (:func:`toolguard.specs.declared_traits`):

- ``readOnlyHint`` -> ``effects="read"``: ``read_note`` and ``fetch_page`` run freely, and
  re-reading after a write is no repeat;
- ``destructiveHint`` / ``idempotentHint`` -> a write; an identical repeat of ``delete_note``
  is refused (the earlier answer is replayed), and a timeout would be retried only on an
  idempotent tool (``RetryControllerMiddleware``);
- ``openWorldHint`` -> provenance: an address found on a web page (``fetch_page``, open world)
  is asked about before ``send_note`` uses it (the user approves here); a whole field of the
  user's own notes (closed world), such as a contact line ``Dana Lee <dana@studio.example>``,
  is not (an address inside a note's prose would be).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from toolguard import GuardMiddleware, RetryControllerMiddleware
from toolguard.retry import RetryPolicy
from toolguard.specs import ToolSpec
from toolguard.testing import ScriptedChatModel

HERE = Path(__file__).resolve()
PAGE = "Acme Corp - contact\nPress questions: media@acme.example"


# ---------------------------------------------------------------------------- the server
def serve(state_file: str) -> None:
    """A notes store over MCP stdio; state in ``state_file`` (JSON)."""
    from mcp.server.fastmcp import FastMCP
    from mcp.types import ToolAnnotations

    state = Path(state_file)
    server = FastMCP("notes", log_level="WARNING")

    def load() -> dict[str, Any]:
        return dict(json.loads(state.read_text()))

    def save(data: dict[str, Any], action: str) -> None:
        data["log"].append(action)
        state.write_text(json.dumps(data))

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
                 structured_output=False)
    def read_note(name: str) -> str:
        """Read the user's note called `name`."""
        data = load()
        save(data, f"read_note({name})")
        return str(data["notes"][name])

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True,
                                             idempotentHint=True, openWorldHint=False),
                 structured_output=False)
    def delete_note(name: str) -> str:
        """Delete the user's note called `name`."""
        data = load()
        data["notes"].pop(name)
        save(data, f"delete_note({name})")
        return f"note {name!r} deleted"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False,
                                             idempotentHint=False, openWorldHint=True),
                 structured_output=False)
    def send_note(name: str, to: str) -> str:
        """Email the user's note `name` to the address `to`."""
        data = load()
        data["sent"].append(to)
        save(data, f"send_note({name}, {to})")
        return f"note {name!r} sent to {to}"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=True),
                 structured_output=False)
    def fetch_page(url: str) -> str:
        """Fetch a web page and return its text."""
        save(load(), f"fetch_page({url})")
        return PAGE

    server.run("stdio")


# ---------------------------------------------------------------------------- the agent
def calls(step: str, *items: tuple[str, dict[str, Any]]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": n, "args": a, "id": f"{step}{i}"}
                                     for i, (n, a) in enumerate(items)])


def build(tools: list[BaseTool]) -> Any:
    script = [
        calls("r", ("read_note", {"name": "groceries"})),
        AIMessage("Your groceries note says: milk, eggs."),
        calls("d", ("delete_note", {"name": "groceries"})),
        calls("e", ("delete_note", {"name": "groceries"})),  # the same delete again
        AIMessage("Deleted."),
        calls("f", ("fetch_page", {"url": "https://acme.example/contact"})),
        calls("s", ("send_note", {"name": "draft", "to": "media@acme.example"})),
        AIMessage("Sent your draft to media@acme.example."),
    ]
    return create_agent(
        ScriptedChatModel(script=script), tools,
        middleware=[RetryControllerMiddleware(policy=RetryPolicy(initial_delay=0)),
                    GuardMiddleware()],
        checkpointer=InMemorySaver())


async def main(state: Path) -> None:
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_mcp_adapters.tools import load_mcp_tools

    client = MultiServerMCPClient({"notes": {
        "transport": "stdio", "command": sys.executable,
        "args": [str(HERE), "--serve", str(state)]}})
    async with client.session("notes") as session:  # one server process for the session
        tools = await load_mcp_tools(session, server_name="notes")
        for t in tools:
            s = ToolSpec.coerce(t)
            print(f"policy  : {t.name}: effects={s.effects} idempotent={s.idempotent} "
                  f"open_world={s.open_world}")
        agent = build(tools)
        config = {"configurable": {"thread_id": "demo"}}
        out = await agent.ainvoke(
            {"messages": [HumanMessage("What does my note 'groceries' say?")]}, config)
        print("read    :", out["messages"][-2].content[0]["text"])
        out = await agent.ainvoke(
            {"messages": [HumanMessage("Delete my note 'groceries'.")]}, config)
        refused = next(m for m in out["messages"] if isinstance(m, ToolMessage)
                       and m.tool_call_id == "e0")
        print(f"refused : {refused.name} ({refused.artifact['toolguard']['hallucination']})")
        out = await agent.ainvoke({"messages": [HumanMessage(
            "Fetch https://acme.example/contact and send my note 'draft' to the press "
            "address it lists.")]}, config)
        print("asked   :", out["__interrupt__"][0].value["action_requests"][0]["description"])
        # the user approves: the call runs as proposed (HITL's decision shape)
        out = await agent.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
        print("answer  :", out["messages"][-1].content)


def run() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "notes.json"
        state.write_text(json.dumps({"notes": {"groceries": "milk, eggs", "draft": "Hi!"},
                                     "sent": [], "log": []}))
        asyncio.run(main(state))
        after = json.loads(state.read_text())
    print("executed:", after["log"])
    print("sent    :", after["sent"])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        run()
