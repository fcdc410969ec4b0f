"""LangChain tools for one demo episode, executing on its live BFCL environment.

Every BFCL doc becomes a ``StructuredTool`` whose ``metadata`` declares its effects
(:data:`WRITE_METHODS`, :data:`REPEATABLE_METHODS`); each execution is recorded as a
:class:`ToolExecution` (the oracles of :mod:`toolguard_evals.demo.scoring` read them), and a
:class:`~toolguard_evals.demo.fault_plan.FaultPlan` makes the first write tool fail.
"""

from __future__ import annotations

import contextvars
import copy
import json
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from langchain_core.messages import (
    ToolCall,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool

from toolguard.specs import Effects, gorilla_to_json_schema
from toolguard_evals import bfcl
from toolguard_evals.demo.fault_plan import FaultPlan
from toolguard_evals.faults import (
    FaultKind,
    InjectedFault,
)

FaultStyle = Literal["raise", "return"]

WRITE_METHODS: Final[Mapping[str, frozenset[str]]] = {
    "GorillaFileSystem": frozenset(
        {"cd", "cp", "echo", "mkdir", "mv", "rm", "rmdir", "touch"}),
    "MathAPI": frozenset(),
    "MessageAPI": frozenset({"add_contact", "delete_message", "message_login", "send_message"}),
    "TwitterAPI": frozenset({"authenticate_twitter", "comment", "follow_user", "mention",
                             "post_tweet", "retweet", "unfollow_user"}),
    "TicketAPI": frozenset({"close_ticket", "create_ticket", "edit_ticket", "logout",
                            "resolve_ticket", "ticket_login"}),
    "TradingBot": frozenset({"add_to_watchlist", "cancel_order", "fund_account", "place_order",
                             "remove_stock_from_watchlist", "trading_login", "trading_logout",
                             "withdraw_funds"}),
    "TravelAPI": frozenset({"authenticate_travel", "book_flight", "cancel_booking",
                            "purchase_insurance", "register_credit_card", "set_budget_limit"}),
    "VehicleControlAPI": frozenset({"activateParkingBrake", "adjustClimateControl",
                                    "fillFuelTank", "lockDoors", "pressBrakePedal",
                                    "releaseBrakePedal", "setCruiseControl", "setHeadlights",
                                    "set_navigation", "startEngine"}),
}
"""State-changing methods per BFCL environment class; every other method is read-only.

Found empirically (DATA.md §2b): replaying all 3422 gold calls of the three multi-turn
categories and comparing each instance's attributes before and after the call (``random.Random``
state left out), completed for methods never called by the gold by reading which ones assign
to ``self``.  ``cd`` changes only the private current directory, which later calls depend on.
"""

REPEATABLE_METHODS: Final = frozenset({"cd"})
"""Methods whose identical repeat is meaningful (``cd("..")`` twice; the only identical repeat
in BFCL's multi-turn gold is a ``cd``): declared ``repeatable`` to the guard and never a
timing hallucination for the oracle."""

_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "toolguard_demo_call_id", default=None)


def method_effects(class_name: str | None, method: str) -> Effects:
    """``"write"`` / ``"read"`` for a method of a known BFCL class, else ``"unknown"``."""
    writes = WRITE_METHODS.get(class_name or "")
    if writes is None:
        return "unknown"
    return "write" if method in writes else "read"


@dataclass(frozen=True, slots=True)
class ToolExecution:
    """One time a tool function was entered.

    Attributes:
        call_id: The tool call id (``None`` when invoked outside a tool call).
        name: Method name.
        args: Arguments as the model sent them.
        content: What the tool returned (or the injected fault's text).
        ok: The environment reported success.
        executed: The environment ran it (``False``: a fault was injected instead).
        changed: The environment's state (public and private attributes) differs after it.
        fault: The injected fault's kind, if any.
    """

    call_id: str | None
    name: str
    args: dict[str, Any]
    content: str
    ok: bool
    executed: bool
    changed: bool
    fault: FaultKind | None = None


def current_call_id() -> str | None:
    """The id of the tool call the running :class:`CallIdTool` was invoked with, if any."""
    return _CALL_ID.get()


class CallIdTool(StructuredTool):
    """A ``StructuredTool`` that tells its function the id of the tool call it runs.

    The function reads it with :func:`current_call_id`.
    """

    def invoke(
        self, input: str | dict[str, Any] | ToolCall, config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        token = _CALL_ID.set(_call_id_of(input))
        try:
            return super().invoke(input, config, **kwargs)
        finally:
            _CALL_ID.reset(token)

    async def ainvoke(
        self, input: str | dict[str, Any] | ToolCall, config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        token = _CALL_ID.set(_call_id_of(input))
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            _CALL_ID.reset(token)


def _call_id_of(value: Any) -> str | None:
    if isinstance(value, Mapping) and value.get("type") == "tool_call":
        cid = value.get("id")
        return str(cid) if cid is not None else None
    return None


def _snapshot(env: bfcl.BFCLEnvironment) -> dict[str, dict[str, Any]]:
    """All attributes per instance (deep copies) but ``random.Random`` generators."""
    return {
        cls: {k: copy.deepcopy(v) for k, v in vars(inst).items()
              if not isinstance(v, random.Random)}
        for cls, inst in env.instances.items()
    }


class EpisodeTools:
    """LangChain tools for one episode, executing on its live environment.

    Every BFCL doc becomes a ``StructuredTool`` with the doc's parameters as JSON Schema
    (:func:`~toolguard.specs.gorilla_to_json_schema`) and ``metadata`` ``{"effects":
    "read" | "write" | "unknown", "repeatable": bool}`` (see :data:`WRITE_METHODS`,
    :data:`REPEATABLE_METHODS`).  A tool runs ``env.call(name, args)`` and returns the
    JSON-serialised result (errors as BFCL's executor words them, never raised), and
    records a :class:`ToolExecution`.  Executions are serialised by a lock (``ToolNode``
    runs parallel calls in threads; the environments are not thread-safe).

    Args:
        episode: The episode.
        env: Its live environment.
        fault: A :class:`FaultPlan`, or ``None`` for no faults.
        fault_style: ``"raise"`` the fault's exception (``ToolNode`` or a controller turns
            it into a message), or ``"return"`` ``{"error": text}`` as the tool's result.
    """

    def __init__(
        self,
        episode: bfcl.MultiTurnEpisode,
        env: bfcl.BFCLEnvironment,
        *,
        fault: FaultPlan | None = None,
        fault_style: FaultStyle = "raise",
    ) -> None:
        if fault_style not in ("raise", "return"):
            raise ValueError(f"fault_style must be 'raise' or 'return', got {fault_style!r}")
        self.episode = episode
        self.env = env
        self.fault = fault
        self.fault_style = fault_style
        self.executions: list[ToolExecution] = []
        self._lock = threading.Lock()
        self._owners = env.methods
        self._fault_target: str | None = None
        self._fault_count = 0
        self.tools: dict[str, BaseTool] = {d["name"]: self._make(d) for d in episode.functions}

    def tools_at(self, turn: int) -> list[BaseTool]:
        """The tools the model may call at ``turn`` (held-out ``miss_func`` tools hidden)."""
        return [self.tools[d["name"]] for d in self.episode.tools_at(turn)]

    def effects(self, name: str) -> Effects:
        """:func:`method_effects` of the class that owns ``name``."""
        return method_effects(self._owners.get(name), name)

    def _make(self, doc: Mapping[str, Any]) -> BaseTool:
        name = str(doc["name"])
        schema = gorilla_to_json_schema(doc.get("parameters") or {})
        schema["type"] = "object"
        schema.setdefault("properties", {})

        def run(**kwargs: Any) -> str:
            return self._execute(name, kwargs)

        return CallIdTool.from_function(
            func=run, name=name, description=str(doc.get("description") or ""),
            args_schema=schema,
            metadata={"effects": self.effects(name), "repeatable": name in REPEATABLE_METHODS},
        )

    def _execute(self, name: str, args: dict[str, Any]) -> str:
        with self._lock:
            call_id = current_call_id()
            plan = self.fault if self._fails_now(name) else None
            if plan is not None and plan.kind != "ambiguous_timeout":
                error = plan.error()
                self.executions.append(ToolExecution(
                    call_id, name, dict(args), str(error), ok=False, executed=False,
                    changed=False, fault=plan.kind))
                return self._fail(error)
            before = _snapshot(self.env)
            result = self.env.call(name, args)
            changed = _snapshot(self.env) != before
            if plan is not None:  # ambiguous: the effect happened, the caller sees a timeout
                error = plan.error()
                self.executions.append(ToolExecution(
                    call_id, name, dict(args), str(error), ok=False, executed=True,
                    changed=changed, fault=plan.kind))
                return self._fail(error)
            self.executions.append(ToolExecution(
                call_id, name, dict(args), result.content, ok=result.ok, executed=True,
                changed=changed))
            return result.content

    def _fail(self, error: InjectedFault) -> str:
        if self.fault_style == "raise":
            raise error
        return json.dumps({"error": f"{type(error).__name__}: {error}"})

    def _fails_now(self, name: str) -> bool:
        """Whether this execution of ``name`` is one the fault plan makes fail."""
        plan = self.fault
        if plan is None or self.effects(name) != "write":
            return False
        if self._fault_target is None:
            self._fault_target = name
        if name != self._fault_target:
            return False
        if plan.failures is not None and self._fault_count >= plan.failures:
            return False
        self._fault_count += 1
        return True
