"""Personal references through a per-user knowledge graph (FamilyTool / KGETool) as middleware.

Example:
    >>> from toolguard import KGResolveMiddleware
    >>> middleware = KGResolveMiddleware()   # KGs from the agent's store, one per user
    >>> # agent = create_agent(model, tools, middleware=[middleware], store=store)
    >>> # agent.invoke(inputs, {"configurable": {"user_id": "u42", "kg_speaker": "Bob"}})
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal, Unpack

from langchain.agents.middleware.types import hook_config
from langgraph.config import get_config
from langgraph.runtime import Runtime

from toolguard.kg.plan import Plan, adrive, drive
from toolguard.kg.turn import GROUNDING_KEY, KGTurnOptions, KGTurnResolver
from toolguard.middleware._base import ToolguardMiddleware, ToolguardState
from toolguard.state import can_interrupt, emit, messages_of, validate_ask_user

__all__ = ["KGResolveMiddleware"]


class KGResolveMiddleware(ToolguardMiddleware[ToolguardState]):
    """Resolve "my mom's favourite restaurant" before the agent acts (FamilyTool / KGETool).

    Once per user turn (``before_agent``) the latest ``HumanMessage`` is resolved against
    the user's knowledge graph by :class:`~toolguard.kg.resolver.DeterministicPathGenerator`
    (possessive and "of" chains, kinship synonyms, relation-name similarity) and rewritten
    with KGETool's "The extra information for the query is (...)" (same message id).  The
    resolved entities and triples go to ``state["kg_grounding"]``, where
    :class:`~toolguard.GuardMiddleware` counts them as grounded.  The turn is
    :class:`~toolguard.kg.turn.KGTurnResolver` 's (shared with
    :class:`~toolguard.nodes.KGResolveNode`; its module lists the state keys and marks).

    - The KG: ``kg=`` (one graph for everyone), else the user's graph in a
      :class:`~toolguard.kg.store.KGStore` over ``store=`` or the agent's own store
      (``create_agent(..., store=...)``, read from ``runtime.store``).  Each user's graph
      and resolver are kept between turns (:class:`~toolguard.kg.cache.KGCache`): a turn
      costs one store ``get`` (the user's KG version) while nothing changed.  Triples
      added or removed through a :class:`~toolguard.kg.store.KGStore` (in any process)
      are seen at the next turn; triples written to the store directly, within
      ``max_age_s`` seconds.
    - The user and the speaker: the run's context (``context=`` of ``invoke``; attributes
      or keys ``user_key`` / ``speaker_key``), else ``config["configurable"]``, else the
      state; the speaker defaults to the user id; a ``<speak>Speaker: NAME</speak>`` tag
      in the text wins.
    - A reference the KG cannot resolve asks the user, naming the missing link: with a
      checkpointer an :class:`~toolguard.protocol.AskUserRequest` interrupt (the answer is
      appended to the request), else the turn ends with the question.

    Args:
        ask_user: ``"auto"`` interrupts when the run has a checkpointer, else ends the turn
            with the question; ``"interrupt"`` / ``"end"`` force one way.
        **options: The KG options (:class:`~toolguard.kg.turn.KGTurnOptions`; each is
            documented on :class:`~toolguard.kg.turn.KGTurnResolver`): ``kg``, ``store``,
            ``user_key``, ``speaker_key``, ``max_age_s`` and the resolver's (``min_score``,
            ``top_k``, ...).

    Raises:
        toolguard.errors.ConfigurationError: ``kg`` and ``store`` together, an unknown
            ``ask_user`` mode, a negative ``max_age_s``, or an invalid resolver option.
    """

    state_schema = ToolguardState

    def __init__(self, *, ask_user: Literal["auto", "interrupt", "end"] = "auto",
                 **options: Unpack[KGTurnOptions]) -> None:
        super().__init__()
        validate_ask_user(ask_user)
        self.resolver = KGTurnResolver(**options)
        self.ask_user = ask_user

    @hook_config(can_jump_to=["end"])
    def before_agent(self, state: ToolguardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Resolve the new request (see the class docstring)."""
        return drive(self._turn(state, runtime))

    @hook_config(can_jump_to=["end"])
    async def abefore_agent(self, state: ToolguardState,
                            runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async :meth:`before_agent` (the store is read with ``aget`` / ``asearch``)."""
        return await adrive(self._turn(state, runtime))

    def _turn(self, state: ToolguardState, runtime: Runtime[Any]) -> Plan[dict[str, Any] | None]:
        """The resolver's plan for this turn, its result as the state update."""
        config = _config()
        update = yield from self.resolver.plan(
            messages_of(state), state=state, configurable=config.get("configurable") or {},
            runtime=runtime, ask="interrupt" if can_interrupt(self.ask_user, config) else "end",
            notify=partial(emit, writer=getattr(runtime, "stream_writer", None)))
        if update is None:
            return None
        if update.ends_turn:
            return {"messages": [update.message], "jump_to": "end"}
        return {"messages": [update.message], GROUNDING_KEY: update.grounding}


def _config() -> Any:
    try:
        return get_config()
    except RuntimeError:  # pragma: no cover - outside a graph run
        return {}
