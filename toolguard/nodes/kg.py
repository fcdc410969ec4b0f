"""A LangGraph node that resolves KG references in the user's request before the model.

KGETool (FamilyTool paper) extracts a sub-KG for the request and appends it to the query
as ``The extra information for the query is ([Bob, mother, Alice], [Alice,
prefer_dinnertime, dinnertime_0002]).``; this node does the same inside any
``StateGraph`` with a ``messages`` channel::

    kg_node = KGResolveNode()                      # per-user KGs from the graph's store
    builder.add_node("kg", kg_node)
    builder.add_node("model", call_model)
    builder.add_edge(START, "kg")
    builder.add_conditional_edges("kg", kg_node.route, ["model", END])

- The user comes from the run's context (``context=`` of ``invoke``), else
  ``config["configurable"][user_key]``, else ``state[user_key]``; their KG from a
  :class:`~toolguard.kg.store.KGStore` (namespace per user; by default over the graph's
  own ``store``) or a fixed :class:`KnowledgeGraph`.  A user's graph and
  resolver are kept between turns by KG version (:class:`~toolguard.kg.cache.KGCache`:
  one store ``get`` per turn while nothing changed; changes through ``KGStore`` seen at
  the next turn, direct store writes within ``max_age_s`` seconds).  The speaker (start
  entity) is found the same way under ``speaker_key``, else it is the user id; a
  ``<speak>Speaker: NAME</speak>`` tag in the text wins.
- The latest ``HumanMessage`` is replaced (same id) by one with the sub-KG appended and
  ``additional_kwargs["toolguard_kg"]`` recording programs and triples, so the node never
  resolves a message twice.  Because the facts are now in the user's message, the guard's
  content detector counts the resolved values as grounded; they are also written to
  ``state[grounding_key]`` (a list of strings, e.g. for ``Guard.check(extra_grounding=)``).
- An unresolvable reference (unknown speaker, a relation the KG lacks) becomes
  ``ask_user``: with a checkpointer (or ``ask_user="interrupt"``) an
  :class:`~toolguard.protocol.AskUserRequest` interrupt naming the missing link, and the
  answer is appended to the request; without one the turn ends with an ``AIMessage``
  question (``response_metadata={"toolguard": "ask_user"}``) and
  :meth:`KGResolveNode.route` goes to ``END``.  A ``kg_missing`` custom stream event
  comes first.

``create_agent`` users add :class:`~toolguard.KGResolveMiddleware` instead; both run the
same turn (:class:`toolguard.kg.turn.KGTurnResolver`, whose module lists the state keys
and marks).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal, Unpack

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END

from toolguard.conversation import MARK_KEY
from toolguard.kg.plan import Plan, adrive, drive
from toolguard.kg.turn import GROUNDING_KEY, KGTurnOptions, KGTurnResolver
from toolguard.nodes._base import ToolguardNode
from toolguard.state import can_interrupt, emit, messages_of, validate_ask_user

__all__ = ["KGResolveNode"]

KGAskMode = Literal["auto", "interrupt", "end"]
RUNTIME_KEY = "__pregel_runtime"
"""``config["configurable"]`` key of the run's LangGraph ``Runtime`` (context, store,
stream writer; ``langgraph._internal._constants.CONFIG_KEY_RUNTIME``)."""


class KGResolveNode(ToolguardNode):
    """Resolves the latest user message against the user's KG (see the module docstring).

    Args:
        messages_key: State key of the messages.
        grounding_key: State key (last-value channel) for the resolved values; ``None`` to
            not write it.
        ask_user: ``"auto"`` interrupts when the graph has a checkpointer, else ends the
            turn with a question; ``"interrupt"`` / ``"end"`` force one way.
        model_node: Where :meth:`route` goes when nothing needs the user.
        name: The node's name.
        **options: The KG options (:class:`~toolguard.kg.turn.KGTurnOptions`; each is
            documented on :class:`~toolguard.kg.turn.KGTurnResolver`): ``kg``, ``store``,
            ``user_key``, ``speaker_key``, ``max_age_s`` and the resolver's (``min_score``,
            ``top_k``, ...).

    Raises:
        toolguard.errors.ConfigurationError: Both ``kg`` and ``store``, an unknown
            ``ask_user``, a negative ``max_age_s``, or an invalid resolver option.
    """

    def __init__(self, *, messages_key: str = "messages",
                 grounding_key: str | None = GROUNDING_KEY, ask_user: KGAskMode = "auto",
                 model_node: str = "model", name: str = "kg_resolve",
                 **options: Unpack[KGTurnOptions]) -> None:
        validate_ask_user(ask_user)
        resolver = KGTurnResolver(**options)  # options checked before the node is built
        super().__init__(name=name, messages_key=messages_key, ask_user=ask_user,
                         model_node=model_node)
        self.resolver = resolver
        self.grounding_key = grounding_key

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        return drive(self._turn(state, config))

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        return await adrive(self._turn(state, config))

    def _turn(self, state: Any, config: RunnableConfig) -> Plan[dict[str, Any]]:
        """The resolver's plan for this turn, its result as the state update."""
        configurable = config.get("configurable") or {}
        runtime = configurable.get(RUNTIME_KEY)
        update = yield from self.resolver.plan(
            messages_of(state, self.messages_key), state=state, configurable=configurable,
            runtime=runtime, ask="interrupt" if can_interrupt(self.ask_user, config) else "end",
            notify=None if runtime is None else partial(emit, writer=runtime.stream_writer))
        if update is None:
            return {}
        out: dict[str, Any] = {self.messages_key: [update.message]}
        if self.grounding_key is not None and update.grounding is not None:
            out[self.grounding_key] = update.grounding
        return out

    def route(self, state: Any) -> str:
        """Conditional edge: ``END`` after a clarification question, else ``model_node``."""
        msgs = messages_of(state, self.messages_key)
        last = msgs[-1] if msgs else None
        if isinstance(last, AIMessage) and (last.response_metadata or {}).get(
                MARK_KEY) == "ask_user":
            return END
        return self.model_node
