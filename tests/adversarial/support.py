"""What the adversarial suite shares: the three surfaces, recording tools, history checks.

Every scenario runs on each surface toolguard offers, sync and async:

- ``agent``: ``toolguard_graphs.create_guarded_agent`` (``create_agent`` + toolguard's
  middleware stack);
- ``middleware``: LangChain's own ``create_agent`` with ``RetryControllerMiddleware`` and
  ``GuardMiddleware`` added by hand;
- ``graph``: ``toolguard_graphs.create_guarded_graph`` (the hand-built node graph).

Tools are real LangChain tools that record every execution (:class:`Effects`), so "a
refused call never ran" and "an effect happened once" are read from what ran, not from the
messages.  :func:`assert_valid_history` is the provider's rule, stricter than
``conftest.assert_every_call_answered_once``: every call is answered exactly once, by a
``ToolMessage`` that comes before any other message, with ids matched by position (some
providers reuse ``call_0`` every step).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Literal

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool

from toolguard import GuardMiddleware, RetryControllerMiddleware
from toolguard.retry import RetryController, RetryPolicy
from toolguard.testing import ScriptedChatModel
from toolguard_graphs import create_guarded_agent, create_guarded_graph

Surface = Literal["agent", "middleware", "graph"]
SURFACES: tuple[Surface, ...] = ("agent", "middleware", "graph")
MODES = ("sync", "async")


def no_sleep(seconds: float) -> None:
    """Backoff sleeps are skipped (the suite never waits for a backoff)."""


async def no_asleep(seconds: float) -> None:
    """Async twin of :func:`no_sleep`."""


CONTROLLER_OPTIONS = ("max_tool_calls", "max_consecutive_failures", "state_key")
"""Options of the RetryController itself; every other option is a RetryPolicy field."""


def controller(**options: Any) -> RetryController:
    """A :class:`RetryController` that does not sleep between retries.

    ``options``: :class:`RetryPolicy` fields and the controller's own caps.
    """
    caps = {k: options.pop(k) for k in CONTROLLER_OPTIONS if k in options}
    return RetryController(RetryPolicy(**options), sleep=no_sleep, asleep=no_asleep, **caps)


def build(surface: Surface, script: Sequence[Any], tools: Sequence[BaseTool], *,
          ctl: RetryController | None = None, checkpointer: Any = None,
          **guard_options: Any) -> tuple[Any, ScriptedChatModel]:
    """The graph of ``surface`` over ``tools`` and a scripted model."""
    model = ScriptedChatModel(script=list(script))
    ctl = ctl or controller()
    if surface == "agent":
        graph = create_guarded_agent(model, tools, controller=ctl, checkpointer=checkpointer,
                                     **guard_options)
    elif surface == "middleware":
        graph = create_agent(model, list(tools), checkpointer=checkpointer, middleware=[
            RetryControllerMiddleware(controller=ctl), GuardMiddleware(**guard_options)])
    else:
        graph = create_guarded_graph(model, tools, controller=ctl, checkpointer=checkpointer,
                                     **guard_options)
    return graph, model


def invoke(graph: Any, value: Any, config: Any = None, mode: str = "sync") -> dict[str, Any]:
    """``graph.invoke`` or ``asyncio.run(graph.ainvoke(...))``."""
    if mode == "async":
        return asyncio.run(graph.ainvoke(value, config))  # type: ignore[no-any-return]
    return graph.invoke(value, config)  # type: ignore[no-any-return]


def ask(text: str) -> dict[str, list[BaseMessage]]:
    return {"messages": [HumanMessage(text)]}


def thread(name: str = "t") -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def calls(*items: tuple[str, dict[str, Any], str]) -> AIMessage:
    """An ``AIMessage`` with the calls ``(name, args, id)``."""
    return AIMessage("", tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"}
                                     for n, a, i in items])


class Effects:
    """Real tools that record every execution in :attr:`log` (``(tool, argument)``).

    ``get_weather`` / ``get_time`` are reads; ``send_message``, ``charge_card`` and
    ``book_table`` are writes.  ``charge_card`` raises what :attr:`charge_errors` holds
    (one per attempt, after or before the charge as :attr:`charge_commits` says).
    """

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        self.charge_errors: list[BaseException] = []
        self.charge_commits = True

    def ran(self, name: str) -> list[Any]:
        return [arg for tool, arg in self.log if tool == name]

    def tools(self) -> list[BaseTool]:
        def get_weather(city: str) -> str:
            self.log.append(("get_weather", city))
            return f"sunny, 21 C in {city}"

        def get_time(city: str) -> str:
            self.log.append(("get_time", city))
            return f"12:00 in {city}"

        def send_message(to: str, body: str = "") -> str:
            self.log.append(("send_message", to))
            return f"sent to {to}"

        def charge_card(amount: int) -> str:
            error = self.charge_errors.pop(0) if self.charge_errors else None
            if error is not None and not self.charge_commits:
                raise error
            self.log.append(("charge_card", amount))
            if error is not None:
                raise error  # the charge went through, then the answer was lost
            return f"charged {amount} EUR"

        def book_table(restaurant: str, city: str) -> str:
            self.log.append(("book_table", restaurant))
            return f"booked {restaurant} in {city}"

        specs: list[tuple[Callable[..., str], str, str]] = [
            (get_weather, "Get the current weather for a city.", "read"),
            (get_time, "Get the current local time in a city.", "read"),
            (send_message, "Send a message to an address.", "write"),
            (charge_card, "Charge the user's card an amount in euros.", "write"),
            (book_table, "Book a table at a restaurant in a city.", "write"),
        ]
        out: list[BaseTool] = []
        for fn, description, effects in specs:
            tool = StructuredTool.from_function(func=fn, description=description)
            tool.metadata = {"effects": effects}
            out.append(tool)
        return out


def assert_valid_history(messages: Sequence[BaseMessage]) -> None:
    """The history a provider accepts (see the module docstring).

    After an ``AIMessage`` with calls, only ``ToolMessage`` s come until each of its calls
    has exactly one answer; a ``ToolMessage`` answers an open call of the latest
    ``AIMessage`` with calls (never an older one, never twice).
    """
    open_ids: set[str] = set()
    for pos, m in enumerate(messages):
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in open_ids, (
                f"message {pos}: answer to {m.tool_call_id!r}, which is not an open call of "
                f"the latest step (unknown, or answered already)")
            open_ids.discard(m.tool_call_id)
            continue
        assert not open_ids, f"message {pos} ({m.type}) comes before answers to {open_ids}"
        if isinstance(m, AIMessage):
            ids = [str(c.get("id")) for c in [*m.tool_calls, *m.invalid_tool_calls]]
            assert len(ids) == len(set(ids)), f"message {pos}: duplicate call ids {ids}"
            open_ids = set(ids)
    assert not open_ids, f"unanswered calls at the end: {open_ids}"


def tool_answers(messages: Sequence[BaseMessage]) -> dict[str, list[ToolMessage]]:
    """``ToolMessage`` s grouped by the call id they answer."""
    out: dict[str, list[ToolMessage]] = {}
    for m in messages:
        if isinstance(m, ToolMessage):
            out.setdefault(m.tool_call_id, []).append(m)
    return out


def only_answer(messages: Sequence[BaseMessage], call_id: str) -> ToolMessage:
    (answer,) = tool_answers(messages)[call_id]
    return answer
