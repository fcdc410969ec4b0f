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

- The user comes from ``config["configurable"][user_key]`` (else ``state[user_key]``);
  their KG from a :class:`~toolguard.kg.store.KGStore` (namespace per user; by default
  over the graph's own ``store``) or a fixed :class:`KnowledgeGraph`.  A user's graph and
  resolver are kept between turns by KG version (:class:`~toolguard.kg.cache.KGCache`:
  one store ``get`` per turn while nothing changed; changes through ``KGStore`` seen at
  the next turn, direct store writes within ``max_age_s`` seconds).  The speaker (start
  entity) is ``configurable[speaker_key]``, else ``state[speaker_key]``, else the user id;
  a ``<speak>Speaker: NAME</speak>`` tag in the text wins.
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
  :meth:`KGResolveNode.route` goes to ``END``.

``create_agent`` users add :class:`~toolguard.KGResolveMiddleware` instead; both rewrite
the request with :func:`toolguard.kg.request.rewrite_request`.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph import END

from toolguard.conversation import MARK_KEY, message_text
from toolguard.errors import ConfigurationError, KGError
from toolguard.kg.cache import KGCache
from toolguard.kg.graph import KnowledgeGraph
from toolguard.kg.request import (
    question_for,
    rewrite_request,
    speaker_and_user,
    unresolved_request,
)
from toolguard.kg.resolver import DeterministicPathGenerator, Resolution
from toolguard.kg.store import KGStore
from toolguard.protocol import AskQuestion, ask_user, user_message
from toolguard.state import can_interrupt, messages_of, validate_ask_user

__all__ = ["KGResolveNode"]

KGAskMode = Literal["auto", "interrupt", "end"]


class KGResolveNode(RunnableLambda[Any, dict[str, Any]]):
    """Resolves the latest user message against the user's KG (see the module docstring).

    Args:
        kg: A fixed knowledge graph shared by every user (mutually exclusive with
            ``store``).
        store: Per-user KGs; default: a :class:`KGStore` over the graph's ``store``.
        user_key: Key of the user id in ``configurable`` or state.
        speaker_key: Key of the speaker's entity name in ``configurable`` or state.
        messages_key: State key of the messages.
        grounding_key: State key (last-value channel) for the resolved values; ``None`` to
            not write it.
        ask_user: ``"auto"`` interrupts when the graph has a checkpointer, else ends the
            turn with a question; ``"interrupt"`` / ``"end"`` force one way.
        model_node: Where :meth:`route` goes when nothing needs the user.
        name: The node's name.
        max_age_s: Seconds after which a user's graph is read again even when its version
            is unchanged (``None``: only on a change through ``KGStore``).
        **resolver_options: Keyword options of :class:`DeterministicPathGenerator`.

    Raises:
        toolguard.errors.ConfigurationError: Both ``kg`` and ``store``, an unknown
            ``ask_user``, a negative ``max_age_s``, or an invalid resolver option.
    """

    def __init__(
        self,
        *,
        kg: KnowledgeGraph | None = None,
        store: KGStore | None = None,
        user_key: str = "user_id",
        speaker_key: str = "kg_speaker",
        messages_key: str = "messages",
        grounding_key: str | None = "kg_grounding",
        ask_user: KGAskMode = "auto",
        model_node: str = "model",
        name: str = "kg_resolve",
        max_age_s: float | None = 60.0,
        **resolver_options: Any,
    ) -> None:
        if kg is not None and store is not None:
            raise ConfigurationError("pass kg (one shared KG) or store (per-user KGs), not both")
        validate_ask_user(ask_user)
        # per-user graphs and resolvers by KG version (validates the options eagerly)
        cache = KGCache(max_age_s=max_age_s, **resolver_options)
        super().__init__(self._run, afunc=self._arun, name=name)
        self._cache = cache
        self._empty = DeterministicPathGenerator(KnowledgeGraph(), **resolver_options)
        self.kg = kg
        self.kg_store = store
        self.user_key = user_key
        self.speaker_key = speaker_key
        self.messages_key = messages_key
        self.grounding_key = grounding_key
        self.ask_user = ask_user
        self.model_node = model_node
        self.resolver_options = resolver_options
        # one generator for a fixed kg=: its relation tables are cached per KG version
        self._fixed_generator = (DeterministicPathGenerator(kg, **resolver_options)
                                 if kg is not None else None)

    # ------------------------------------------------------------------ helpers
    def _ids(self, state: Any, config: RunnableConfig) -> tuple[str | None, str | None]:
        return speaker_and_user(config.get("configurable") or {}, state,
                                user_key=self.user_key, speaker_key=self.speaker_key)

    def _store(self) -> KGStore:
        if self.kg_store is not None:
            return self.kg_store
        from langgraph.config import get_store

        try:
            base = get_store()
        except RuntimeError as exc:  # pragma: no cover - outside a graph run
            raise KGError("KGResolveNode: no kg, no store and no graph store") from exc
        if base is None:
            raise KGError("KGResolveNode needs kg=, store= or a graph compiled with store=")
        return KGStore(base)

    # ------------------------------------------------------------------ node
    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        message = unresolved_request(messages_of(state, self.messages_key))
        if message is None:
            return {}
        user, speaker = self._ids(state, config)
        gen = (self._fixed_generator if self._fixed_generator is not None
               else self._cache.resolver(self._store(), user) if user is not None
               else self._empty)
        return self._update(message, gen.resolve(message_text(message), speaker=speaker),
                            config)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        message = unresolved_request(messages_of(state, self.messages_key))
        if message is None:
            return {}
        user, speaker = self._ids(state, config)
        gen = (self._fixed_generator if self._fixed_generator is not None
               else await self._cache.aresolver(self._store(), user) if user is not None
               else self._empty)
        return self._update(message, gen.resolve(message_text(message), speaker=speaker),
                            config)

    def _update(self, message: HumanMessage, res: Resolution,
                config: RunnableConfig) -> dict[str, Any]:
        """Shared by sync and async: the rewritten request, grounding, or a question."""
        answer: str | None = None
        question: str | None = None
        if res.missing:
            question = question_for(res.missing)
            if not can_interrupt(self.ask_user, config):
                return {self.messages_key: [user_message(question, "ask_user", toolguard_kg={
                    "programs": res.programs, "triples": [list(t) for t in res.triples],
                    "missing": res.missing})]}
            (reply,) = ask_user([AskQuestion(tool_call_id=None, tool_name=None,
                                             question=question, missing=list(res.missing),
                                             source="kg")])
            answer = reply.text
        rewrite = rewrite_request(message, res, answer, question)
        if rewrite is None:
            return {}
        update: dict[str, Any] = {self.messages_key: [rewrite.message]}
        if self.grounding_key is not None:
            update[self.grounding_key] = rewrite.grounding
        return update

    def route(self, state: Any) -> str:
        """Conditional edge: ``END`` after a clarification question, else ``model_node``."""
        msgs = messages_of(state, self.messages_key)
        last = msgs[-1] if msgs else None
        if isinstance(last, AIMessage) and (last.response_metadata or {}).get(
                MARK_KEY) == "ask_user":
            return END
        return self.model_node
