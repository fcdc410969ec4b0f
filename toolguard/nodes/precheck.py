"""The pre-check as LangGraph nodes, for hand-built ``StateGraph`` s.

``create_agent`` users add :class:`~toolguard.PrecheckMiddleware` instead; these nodes run
the same engine (:class:`~toolguard.precheck.Precheck`).  Wiring (any ``StateGraph`` with a
``messages`` channel, a last-value ``toolguard_precheck`` channel and, optionally, the
``toolguard`` counters; see :class:`PrecheckState`)::

    pre = PrecheckNode(Precheck(tools))
    builder.add_node("precheck", pre)
    builder.add_node("precheck_ask", PrecheckAskNode())
    builder.add_edge(START, "precheck")
    builder.add_conditional_edges("precheck", pre.route, ["model", "precheck_ask", END])
    builder.add_edge("precheck_ask", "model")

Decisions (RelyToolBench's indecisive actions):

- ``proceed``: the model acts as usual.
- ``ask_user`` (TalkToUser): with a checkpointer the decision is stored in graph state and
  :class:`PrecheckAskNode` interrupts with an :class:`~toolguard.protocol.AskUserRequest`;
  on ``Command(resume=answer)`` the question and the answer join the conversation (an
  ``AIMessage`` and a ``HumanMessage``) and the model acts.  Without one the turn ends
  with the question as an ``AIMessage`` (``response_metadata["toolguard"] ==
  "ask_user"``); the user's next message is read together with the request it answers
  (the conversation's goal, :class:`~toolguard.conversation.Goal`).
- ``no_suitable_tool`` (ChangeTools): the turn ends with an ``AIMessage`` telling the user
  that no available tool can do it.

In both abstain cases the model is not called, so no tool call can be made.  Counters
``precheck_proceed`` / ``precheck_ask_user`` / ``precheck_no_suitable_tool`` are added to
``counters_key``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph import END

from toolguard.conversation import MARK_KEY
from toolguard.nodes._base import ToolguardNode
from toolguard.nodes.guard import AskUserMode, GuardState
from toolguard.precheck import Precheck, PrecheckDecision, abstain_message
from toolguard.protocol import AskQuestion, ask_user
from toolguard.state import can_interrupt, messages_of

__all__ = ["PrecheckAskNode", "PrecheckNode", "PrecheckState", "needs_precheck"]


class PrecheckState(GuardState):
    """:class:`~toolguard.nodes.GuardState` plus the pre-check's pending question.

    ``toolguard_precheck`` holds the ``ask_user`` decision waiting on the user (a
    :class:`~toolguard.precheck.PrecheckDecision` as JSON), or ``None``.
    """

    toolguard_precheck: dict[str, Any] | None


def needs_precheck(state: Any, *, messages_key: str = "messages") -> bool:
    """Whether the last message is a user message (a point to decide at)."""
    msgs = messages_of(state, messages_key)
    return bool(msgs) and isinstance(msgs[-1], HumanMessage)


class PrecheckNode(ToolguardNode):
    """Runs a :class:`~toolguard.precheck.Precheck` on the conversation (sync and async).

    Args:
        precheck: The configured pre-check.
        messages_key: The state key holding the messages.
        counters_key: State key of the guard counters (a reducer that adds, such as
            :func:`toolguard.state.merge_counters`), or ``None``.
        pending_key: Last-value state key for an ``ask_user`` decision waiting on the user.
        ask_user: ``"auto"`` interrupts when the graph has a checkpointer and otherwise
            ends the turn with the question; ``"interrupt"`` / ``"end"`` force one way.
        model_node: The node :meth:`route` goes to on ``proceed``.
        ask_node: The :class:`PrecheckAskNode` :meth:`route` goes to for a pending question.
        name: The node's name.

    Raises:
        toolguard.errors.ConfigurationError: An unknown ``ask_user`` mode.
    """

    def __init__(
        self,
        precheck: Precheck,
        *,
        messages_key: str = "messages",
        counters_key: str | None = "toolguard",
        pending_key: str = "toolguard_precheck",
        ask_user: AskUserMode = "auto",
        model_node: str = "model",
        ask_node: str = "precheck_ask",
        name: str = "precheck",
    ) -> None:
        super().__init__(name=name, messages_key=messages_key, ask_user=ask_user,
                         model_node=model_node)
        self.precheck = precheck
        self.counters_key = counters_key
        self.pending_key = pending_key
        self.ask_node = ask_node

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        msgs = self._messages(state)
        if not needs_precheck(state, messages_key=self.messages_key):
            return {}
        return self._update(self.precheck.decide(msgs), config)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        msgs = self._messages(state)
        if not needs_precheck(state, messages_key=self.messages_key):
            return {}
        return self._update(await self.precheck.adecide(msgs), config)

    def _update(self, decision: PrecheckDecision, config: RunnableConfig) -> dict[str, Any]:
        """Shared by sync and async: state update for one decision."""
        update: dict[str, Any] = {}
        if self.counters_key is not None:
            update[self.counters_key] = {f"precheck_{decision.decision}": 1}
        if decision.decision == "proceed":
            return update
        if decision.decision == "ask_user" and can_interrupt(self.ask_user, config):
            update[self.pending_key] = decision.model_dump(mode="json")
            return update
        update[self.messages_key] = [abstain_message(decision)]
        return update

    def route(self, state: Any) -> str:
        """Conditional edge after the node: ``ask_node``, ``END`` or ``model_node``."""
        pending = state.get(self.pending_key) if isinstance(state, Mapping) else getattr(
            state, self.pending_key, None)
        if pending:
            return self.ask_node
        msgs = messages_of(state, self.messages_key)
        last = msgs[-1] if msgs else None
        if isinstance(last, AIMessage) and (last.response_metadata or {}).get(MARK_KEY) in (
                "ask_user", "no_suitable_tool"):
            return END
        return self.model_node


class PrecheckAskNode(RunnableLambda[Any, dict[str, Any]]):
    """Interrupts for the ``ask_user`` decision a :class:`PrecheckNode` left in state.

    On resume the question (``AIMessage``) and the answer (``HumanMessage``) are appended
    and the pending decision is cleared; route on to the model.  It holds no model, so
    re-running it on resume is cheap and cannot change what was asked.

    Args:
        pending_key: The state key the pre-check node writes the decision to.
        messages_key: The state key holding the messages.
        name: The node's name.
    """

    def __init__(self, *, pending_key: str = "toolguard_precheck",
                 messages_key: str = "messages", name: str = "precheck_ask") -> None:
        super().__init__(self._run, name=name)
        self.pending_key = pending_key
        self.messages_key = messages_key

    def _run(self, state: Any) -> dict[str, Any]:
        pending = state.get(self.pending_key) if isinstance(state, Mapping) else getattr(
            state, self.pending_key, None)
        if not pending:
            return {}
        decision = PrecheckDecision.model_validate(pending)
        (answer,) = ask_user([AskQuestion(
            tool_call_id=None, tool_name=decision.tool, question=decision.message,
            missing=list(decision.missing), source="precheck")])
        return {self.messages_key: [abstain_message(decision), HumanMessage(answer.text)],
                self.pending_key: None}
