"""The guard as LangGraph nodes, for hand-built ``StateGraph`` s.

``create_agent`` users add :class:`~toolguard.GuardMiddleware` instead; these nodes are
thin adapters over the same engine (:class:`~toolguard.guard.Guard`) and the same step
planner (:func:`toolguard.steps.plan_step`), so both surfaces give the same verdicts and
the same answers.

Wiring (any ``StateGraph`` with a ``messages`` channel; :class:`GuardState` has the
counters and the pending-question channel)::

    guard = GuardNode(Guard(tools))
    builder.add_node("model", call_model)
    builder.add_node("guard", guard)
    builder.add_node("ask_user", AskUserNode())
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "guard" if needs_guard(s) else END, ["guard", END])
    builder.add_conditional_edges("guard", guard.route, ["ask_user", "tools", "model", END])
    builder.add_conditional_edges("ask_user", guard.route, ["tools", "model", END])
    builder.add_edge("tools", "model")

The guard node answers every call that is not allowed with exactly one ``ToolMessage``;
:meth:`GuardNode.route` sends only the unanswered (allowed) calls to the tool node, one
``Send`` each, so a refused call never reaches a tool.  ``ask_user`` verdicts are stored in
graph state (``pending_key``) and asked by :class:`AskUserNode` with an
:class:`~toolguard.protocol.AskUserRequest` interrupt when the graph has a checkpointer, so
a resume after a restart answers exactly what was asked; without one the turn ends with
the question (``response_metadata["toolguard"] == "ask_user"``).  ``change_tools`` ends
the turn with a message to the user.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph import END, MessagesState
from langgraph.types import Send
from typing_extensions import TypedDict

from toolguard.conversation import MARK_KEY, parse_args
from toolguard.guard import Guard
from toolguard.nodes._base import ToolguardNode
from toolguard.protocol import ask_user
from toolguard.state import (
    can_interrupt,
    close_dangling_calls,
    count_verdicts,
    merge_counters,
    messages_of,
)
from toolguard.steps import (
    DEFAULT_MAX_REFUSED_STEPS,
    AskMode,
    look_up_first,
    plan_step,
    refused_steps,
    validate_refusal_budget,
    with_unique_ids,
)
from toolguard.types import Verdict

__all__ = ["AskUserMode", "AskUserNode", "GuardCounters", "GuardNode", "GuardState",
           "needs_guard"]

AskUserMode = Literal["auto", "interrupt", "end"]


class GuardCounters(TypedDict, total=False):
    """Running totals kept in graph state (summed by :func:`toolguard.state.merge_counters`).

    Keys: ``checked`` (calls seen), ``allowed``, ``blocked``, ``asked_user``,
    ``change_tools``, and one per hallucination kind (``type``, ``timing``, ``format``,
    ``content``, or a registered kind) counting calls not allowed for that reason.
    """

    checked: int
    allowed: int
    blocked: int
    asked_user: int
    change_tools: int
    type: int
    timing: int
    format: int
    content: int


class GuardState(MessagesState):
    """``MessagesState`` plus toolguard's counters and pending questions.

    ``toolguard`` holds :class:`GuardCounters`; ``toolguard_pending`` the guard's
    ``ask_user`` step waiting on the user (see :class:`AskUserNode`);
    ``toolguard_controller`` the retry controller's totals (see
    :class:`~toolguard.nodes.RetryGateNode`); ``kg_grounding`` values a
    :class:`~toolguard.nodes.KGResolveNode` resolved.
    """

    toolguard: Annotated[dict[str, int], merge_counters]
    toolguard_pending: dict[str, Any] | None
    toolguard_controller: dict[str, Any]
    kg_grounding: list[str]


class GuardNode(ToolguardNode):
    """Drop-in LangGraph node running a :class:`~toolguard.guard.Guard` (sync and async).

    Args:
        guard: The guard to run.
        messages_key: The state key holding the messages.
        counters_key: State key for :class:`GuardCounters` (needs a reducer such as
            :func:`toolguard.state.merge_counters`, as in :class:`GuardState`), or ``None``.
        ask_user: ``"auto"`` asks through an interrupt when the graph has a checkpointer
            and otherwise ends the turn with the question; ``"interrupt"`` / ``"end"``
            force one way.
        tools_node: Name of the tool node :meth:`route` sends allowed calls to.
        model_node: Name of the model node :meth:`route` goes back to.
        pending_key: State key (last-value channel) where an ``ask_user`` step waits for
            :class:`AskUserNode` (``ask_node``), which interrupts: the verdicts live in graph
            state, so a resume after a restart answers exactly what was asked (an LLM judge
            is not asked again).  ``None`` (default): the guard node interrupts itself, and
            a resume re-runs its check (identical in deterministic mode).
        ask_node: Name of the :class:`AskUserNode`.
        grounding_key: State key of texts whose values count as grounded for the content
            detector (e.g. ``"kg_grounding"`` from a
            :class:`~toolguard.nodes.KGResolveNode`), or ``None``.
        max_refused_steps: The refusal budget, as in
            :class:`~toolguard.middleware.GuardMiddleware`; ``None``: none.
        look_up_first: Send a call with ungiven values back to the model once per turn
            before asking the user, as in :class:`~toolguard.middleware.GuardMiddleware`
            (:func:`toolguard.steps.look_up_first`).
        name: The node's name.

    Raises:
        toolguard.errors.ConfigurationError: An unknown ``ask_user`` mode, or
            ``max_refused_steps`` < 1.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        messages_key: str = "messages",
        counters_key: str | None = "toolguard",
        ask_user: AskUserMode = "auto",
        tools_node: str = "tools",
        model_node: str = "model",
        pending_key: str | None = None,
        ask_node: str = "ask_user",
        grounding_key: str | None = "kg_grounding",
        max_refused_steps: int | None = DEFAULT_MAX_REFUSED_STEPS,
        look_up_first: bool = False,
        name: str = "guard",
    ) -> None:
        super().__init__(name=name, messages_key=messages_key, ask_user=ask_user,
                         model_node=model_node)
        self.max_refused_steps = validate_refusal_budget(max_refused_steps)
        self.guard = guard
        self.counters_key = counters_key
        self.tools_node = tools_node
        self.pending_key = pending_key
        self.ask_node = ask_node
        self.grounding_key = grounding_key
        self.look_up_first = bool(look_up_first)

    # ------------------------------------------------------------------ node
    def _prepare(self, state: Any) -> tuple[list[BaseMessage], AIMessage | None]:
        """The messages to check (call ids made unique) and the rewritten message, if any."""
        messages = self._messages(state)
        last = messages[-1]
        if not isinstance(last, AIMessage) or not (last.tool_calls or last.invalid_tool_calls):
            return messages, None
        fixed = with_unique_ids(last)
        return ([*messages[:-1], fixed] if fixed is not None else messages), fixed

    def _grounding(self, state: Any) -> tuple[str, ...]:
        """Texts under ``grounding_key`` (a str or a list of values; others ignored)."""
        if self.grounding_key is None:
            return ()
        value = state.get(self.grounding_key) if isinstance(state, Mapping) else getattr(
            state, self.grounding_key, None)
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list | tuple):
            return tuple(str(v) for v in value if v is not None)
        return ()

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages, fixed = self._prepare(state)
        verdicts = self.guard.check(messages, extra_grounding=self._grounding(state)) \
            if isinstance(messages[-1], AIMessage) else []
        return self._update(messages, fixed, verdicts, config)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages, fixed = self._prepare(state)
        verdicts = await self.guard.acheck(messages, extra_grounding=self._grounding(state)) \
            if isinstance(messages[-1], AIMessage) else []
        return self._update(messages, fixed, verdicts, config)

    def _update(self, messages: list[BaseMessage], fixed: AIMessage | None,
                verdicts: list[Verdict], config: RunnableConfig) -> dict[str, Any]:
        """Shared by sync and async: answers for refused calls, a pending question, or the end."""
        if not verdicts:
            return {}
        last = messages[-1]
        assert isinstance(last, AIMessage)
        if self.look_up_first:
            verdicts = look_up_first(verdicts, messages[:-1], n_tools=len(self.guard.tools))
        mode: AskMode = "interrupt" if can_interrupt(self.ask_user, config) else "end"
        refused = refused_steps(messages[:-1])
        plan = plan_step(last, verdicts, ask=mode, refused_before=refused,
                         stop_after=self.max_refused_steps)
        update: dict[str, Any] = {}
        out: list[BaseMessage] = [fixed] if fixed is not None else []
        if plan.questions and self.pending_key is not None:  # AskUserNode interrupts
            update[self.pending_key] = {"message_id": last.id,
                                        "verdicts": [v.model_dump(mode="json") for v in verdicts]}
        else:
            if plan.questions:
                plan = plan_step(last, verdicts, ask=mode, answers=ask_user(plan.questions),
                                 refused_before=refused, stop_after=self.max_refused_steps)
            if plan.edited is not None:
                out = [plan.edited]
            out.extend(plan.messages)
        if out:
            update[self.messages_key] = out
        if self.counters_key is not None:
            update[self.counters_key] = count_verdicts(verdicts)
        return update

    # ------------------------------------------------------------------ routing
    def route(self, state: Any) -> list[Send] | str:
        """Conditional edge after the guard node (and after :class:`AskUserNode`).

        Returns:
            ``ask_node`` while an ``ask_user`` step waits in ``pending_key``; ``END`` if the
            turn ended with a message to the user; else one ``Send(tools_node, ...)`` per
            allowed (still unanswered) call; else ``model_node``.
        """
        messages = self._messages(state)
        if self.pending_key is not None:
            pending = state.get(self.pending_key) if isinstance(state, Mapping) else getattr(
                state, self.pending_key, None)
            if pending:
                return self.ask_node
        last = messages[-1]
        if isinstance(last, AIMessage) and (last.response_metadata or {}).get(MARK_KEY) in (
                "ask_user", "change_tools", "no_suitable_tool", "finish", "loop"):
            return END
        calls = _unanswered(messages)
        if not calls:
            return self.model_node
        # one call per Send, no state snapshot: ToolNode reads the graph state itself (the
        # payload create_agent sends; a snapshot per call made each step's writes O(N^2))
        return [Send(self.tools_node, [_parsed(call)]) for call in calls]


class AskUserNode(RunnableLambda[Any, dict[str, Any]]):
    """Asks the user about the step a :class:`GuardNode` left in ``pending_key``.

    It interrupts with an :class:`~toolguard.protocol.AskUserRequest`; on
    ``Command(resume=...)`` (a string, ``{tool_call_id: answer}`` or a ``HITLResponse``)
    the step is planned with the answers (:func:`toolguard.steps.plan_step`) and the
    pending step is cleared.  Route it with :meth:`GuardNode.route`.  It holds no judge, so
    re-running it on resume is cheap and cannot change what was asked.

    Args:
        pending_key: The state key the guard node writes the pending step to.
        messages_key: The state key holding the messages.
        name: The node's name.
    """

    def __init__(self, *, pending_key: str = "toolguard_pending",
                 messages_key: str = "messages", name: str = "ask_user") -> None:
        super().__init__(self._run, name=name)
        self.pending_key = pending_key
        self.messages_key = messages_key

    def _run(self, state: Any) -> dict[str, Any]:
        pending = state.get(self.pending_key) if isinstance(state, Mapping) else getattr(
            state, self.pending_key, None)
        if not pending:
            return {}
        messages = messages_of(state, self.messages_key)
        message = next((m for m in reversed(messages) if isinstance(m, AIMessage)
                        and m.id == pending.get("message_id")), None)
        if message is None:  # the step is gone (a new user message): drop the question
            return {self.pending_key: None}
        verdicts = [Verdict.model_validate(v) for v in pending.get("verdicts") or []]
        plan = plan_step(message, verdicts, ask="interrupt")
        plan = plan_step(message, verdicts, ask="interrupt", answers=ask_user(plan.questions))
        out: list[BaseMessage] = [plan.edited] if plan.edited is not None else []
        out.extend(plan.messages)
        return {self.messages_key: out, self.pending_key: None}


def needs_guard(state: Any, *, messages_key: str = "messages") -> bool:
    """Whether the last message is an ``AIMessage`` with tool calls, valid or not.

    Use it instead of ``tools_condition`` in front of the guard: a message with only
    ``invalid_tool_calls`` (malformed arguments) must reach the guard to be answered.
    """
    msgs = messages_of(state, messages_key)
    last = msgs[-1] if msgs else None
    return isinstance(last, AIMessage) and bool(last.tool_calls or last.invalid_tool_calls)


def dangling_update(state: Any, *, messages_key: str = "messages") -> dict[str, Any]:
    """Answers for calls left dangling by a new user message (for a node before the model).

    See :func:`toolguard.state.close_dangling_calls`.
    """
    fixed = close_dangling_calls(messages_of(state, messages_key))
    return {messages_key: fixed} if fixed else {}


def _parsed(call: Any) -> Any:
    """A tool call whose JSON-string arguments are parsed (the guard already checked them)."""
    if isinstance(call.get("args"), str):
        args, _ = parse_args(call["args"])
        return {**call, "args": args or {}}
    return call


def _unanswered(messages: Sequence[BaseMessage]) -> list[Any]:
    """Tool calls of the last ``AIMessage`` that no ``ToolMessage`` after it answers."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, AIMessage):
            answered = {t.tool_call_id for t in messages[i + 1:] if isinstance(t, ToolMessage)}
            return [tc for tc in m.tool_calls if tc.get("id") not in answered]
    return []
