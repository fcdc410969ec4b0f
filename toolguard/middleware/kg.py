"""Personal references through a per-user knowledge graph (FamilyTool / KGETool) as middleware.

Example:
    >>> from toolguard import KGResolveMiddleware
    >>> middleware = KGResolveMiddleware()   # KGs from the agent's store, one per user
    >>> # agent = create_agent(model, tools, middleware=[middleware], store=store)
    >>> # agent.invoke(inputs, {"configurable": {"user_id": "u42", "kg_speaker": "Bob"}})
"""

from __future__ import annotations

from typing import Any, Literal

from langchain.agents.middleware.types import hook_config
from langgraph.config import get_config
from langgraph.runtime import Runtime

from toolguard.conversation import message_text
from toolguard.errors import ConfigurationError, KGError
from toolguard.kg.cache import KGCache
from toolguard.kg.graph import KnowledgeGraph
from toolguard.kg.request import question_for, rewrite_request, speaker_and_user, unresolved_request
from toolguard.kg.resolver import DeterministicPathGenerator, Resolution
from toolguard.kg.store import KGStore
from toolguard.middleware._base import ToolguardMiddleware, ToolguardState
from toolguard.protocol import AskQuestion, ask_user, user_message
from toolguard.state import can_interrupt, emit, validate_ask_user

__all__ = ["KGResolveMiddleware"]


class KGResolveMiddleware(ToolguardMiddleware[ToolguardState]):
    """Resolve "my mom's favourite restaurant" before the agent acts (FamilyTool / KGETool).

    Once per user turn (``before_agent``) the latest ``HumanMessage`` is resolved against
    the user's knowledge graph by :class:`~toolguard.kg.resolver.DeterministicPathGenerator`
    (possessive and "of" chains, kinship synonyms, relation-name similarity) and rewritten
    with KGETool's "The extra information for the query is (...)" (same message id).  The
    resolved entities and triples go to ``state["kg_grounding"]``, where
    :class:`~toolguard.GuardMiddleware` counts them as grounded.

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
        kg: A fixed knowledge graph shared by every user (not with ``store``).
        store: Per-user KGs (a :class:`KGStore`); default: over the agent's store.
        user_key: Name of the user id in the context, ``configurable`` or state.
        speaker_key: Name of the speaker's entity in the context, ``configurable`` or state.
        ask_user: ``"auto"``, ``"interrupt"`` or ``"end"``.
        max_age_s: Seconds after which a user's graph is read again even when its version
            is unchanged (``None``: only on a change through ``KGStore``).
        **resolver_options: Keyword options of :class:`DeterministicPathGenerator`.

    Raises:
        toolguard.errors.ConfigurationError: ``kg`` and ``store`` together, an unknown
            ``ask_user`` mode, a negative ``max_age_s``, or an invalid resolver option.
    """

    state_schema = ToolguardState

    def __init__(
        self,
        *,
        kg: KnowledgeGraph | None = None,
        store: KGStore | None = None,
        user_key: str = "user_id",
        speaker_key: str = "kg_speaker",
        ask_user: Literal["auto", "interrupt", "end"] = "auto",
        max_age_s: float | None = 60.0,
        **resolver_options: Any,
    ) -> None:
        super().__init__()
        if kg is not None and store is not None:
            raise ConfigurationError("pass kg (one shared KG) or store (per-user KGs), not both")
        validate_ask_user(ask_user)
        # per-user graphs and resolvers by KG version (validates the options eagerly)
        self._cache = KGCache(max_age_s=max_age_s, **resolver_options)
        self._empty = DeterministicPathGenerator(KnowledgeGraph(), **resolver_options)
        self.kg = kg
        self.kg_store = store
        self.user_key = user_key
        self.speaker_key = speaker_key
        self.ask_user = ask_user
        self.resolver_options = resolver_options
        self._fixed = DeterministicPathGenerator(kg, **resolver_options) if kg is not None \
            else None

    def _ids(self, state: Any, runtime: Runtime[Any]) -> tuple[str | None, str | None]:
        configurable = (_config().get("configurable") or {})
        return speaker_and_user(runtime.context or {}, configurable, state,
                                user_key=self.user_key, speaker_key=self.speaker_key)

    def _store(self, runtime: Runtime[Any]) -> KGStore:
        if self.kg_store is not None:
            return self.kg_store
        if runtime.store is None:
            raise KGError("KGResolveMiddleware needs kg=, store= or an agent created with "
                          "store=")
        return KGStore(runtime.store)

    @hook_config(can_jump_to=["end"])
    def before_agent(self, state: ToolguardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Resolve the new request (see the class docstring)."""
        message = unresolved_request(state.get("messages") or [])
        if message is None:
            return None
        user, speaker = self._ids(state, runtime)
        gen = (self._fixed if self._fixed is not None
               else self._cache.resolver(self._store(runtime), user) if user is not None
               else self._empty)
        return self._update(message, gen.resolve(message_text(message), speaker=speaker),
                            runtime)

    @hook_config(can_jump_to=["end"])
    async def abefore_agent(self, state: ToolguardState,
                            runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`before_agent` (the store is read with ``aget``/``asearch``)."""
        message = unresolved_request(state.get("messages") or [])
        if message is None:
            return None
        user, speaker = self._ids(state, runtime)
        gen = (self._fixed if self._fixed is not None
               else await self._cache.aresolver(self._store(runtime), user) if user is not None
               else self._empty)
        return self._update(message, gen.resolve(message_text(message), speaker=speaker),
                            runtime)

    def _update(self, message: Any, res: Resolution,
                runtime: Runtime[Any]) -> dict[str, Any] | None:
        answer: str | None = None
        question: str | None = None
        if res.missing:
            question = question_for(res.missing)
            emit({"event": "kg_missing", "missing": list(res.missing)},
                 getattr(runtime, "stream_writer", None))
            if not can_interrupt(self.ask_user, _config()):
                return {"messages": [user_message(question, "ask_user", toolguard_kg={
                    "missing": list(res.missing), "programs": res.programs})],
                    "jump_to": "end"}
            (reply,) = ask_user([AskQuestion(tool_call_id=None, tool_name=None,
                                             question=question, missing=list(res.missing),
                                             source="kg")])
            answer = reply.text
        rewrite = rewrite_request(message, res, answer, question)
        if rewrite is None:
            return None
        return {"messages": [rewrite.message], "kg_grounding": rewrite.grounding}


def _config() -> Any:
    try:
        return get_config()
    except RuntimeError:  # pragma: no cover - outside a graph run
        return {}
