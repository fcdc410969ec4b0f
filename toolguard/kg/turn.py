"""A user turn through the user's knowledge graph: the engine of the KG middleware and node.

:class:`KGTurnResolver` is what :class:`~toolguard.KGResolveMiddleware` and
:class:`~toolguard.nodes.KGResolveNode` share: the KG (one fixed graph, or per-user graphs
in a :class:`~toolguard.kg.store.KGStore` kept by :class:`~toolguard.kg.cache.KGCache`) and
the turn as one plan (:meth:`KGTurnResolver.plan`; its I/O steps and the sync / async
drivers are in :mod:`toolguard.kg.plan`):

1. The request: the last message, if it is a ``HumanMessage`` not resolved yet; else the
   turn writes nothing.
2. The user and the speaker: the run's context (``context=`` of ``invoke``; attributes or
   keys), else ``config["configurable"]``, else the state, under ``user_key`` /
   ``speaker_key``; the speaker defaults to the user id, and a ``<speak>Speaker:
   NAME</speak>`` tag in the text wins.
3. The resolver: over ``kg=``; else over the user's graph in ``store=`` or the graph's own
   store (one version ``get`` while the graph is unchanged); with no user id, over an
   empty graph (a personal reference then asks who the speaker is).
4. A reference the KG cannot resolve asks the user, naming the missing link: a
   ``kg_missing`` event, then an interrupt (``ask="interrupt"``; the answer is appended
   to the request) or a question that ends the turn (``ask="end"``).
5. The request rewritten with KGETool's "The extra information for the query is (...)".

What a turn writes, the same through the middleware and the node:

- ``state["messages"]`` (the node's ``messages_key``): the request replaced (same id) by
  the rewritten one, whose ``additional_kwargs["toolguard_kg"]`` is
  :func:`~toolguard.kg.request.kg_record` plus ``"answer"`` when the user was asked; a
  request carrying that key is never resolved again.  When the turn ends with a question:
  an ``AIMessage`` with ``response_metadata={"toolguard": "ask_user", "toolguard_kg":
  {"programs", "triples", "missing"}}``.
- ``state["kg_grounding"]`` (:data:`GROUNDING_KEY`; the node's ``grounding_key``): the
  resolved entities and triples as strings (and the user's answer), which the guard counts
  as grounded.  A last-value channel: each resolved request replaces it.
- Custom stream event ``{"toolguard": {"event": "kg_missing", "missing": [...]}}`` before
  a question.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime

from toolguard.conversation import message_text
from toolguard.errors import ConfigurationError, KGError
from toolguard.kg.cache import KGCache
from toolguard.kg.graph import KnowledgeGraph
from toolguard.kg.plan import AskUser, Notify, Plan
from toolguard.kg.request import (
    KG_KEY,
    kg_record,
    question_for,
    rewrite_request,
    speaker_and_user,
    unresolved_request,
)
from toolguard.kg.resolver import DeterministicPathGenerator, ResolverOptions
from toolguard.kg.store import KGStore
from toolguard.protocol import AskQuestion, user_message
from toolguard.steps import AskMode

__all__ = ["GROUNDING_KEY", "KGTurnOptions", "KGTurnResolver", "TurnUpdate"]

GROUNDING_KEY = "kg_grounding"
"""State key of the values a resolved request grounds (a list of strings)."""


class KGTurnOptions(ResolverOptions, total=False):
    """Keyword options of :class:`KGTurnResolver`, which the KG middleware and node take too.

    ``kg``, ``store``, ``user_key``, ``speaker_key`` and ``max_age_s`` (the resolver's
    ``Args`` say what each is) and the options of
    :class:`~toolguard.kg.resolver.DeterministicPathGenerator`
    (:class:`~toolguard.kg.resolver.ResolverOptions`).
    """

    kg: KnowledgeGraph | None
    store: KGStore | None
    user_key: str
    speaker_key: str
    max_age_s: float | None


@dataclass(frozen=True, slots=True)
class TurnUpdate:
    """What a turn adds to the graph state.

    Attributes:
        message: The rewritten request (same id as the original, so ``add_messages``
            replaces it) or, when the turn ends, the question (an ``AIMessage`` marked
            ``ask_user``).
        grounding: The values that count as grounded (for :data:`GROUNDING_KEY`); ``None``
            with a question.
    """

    message: BaseMessage
    grounding: list[str] | None = None

    @property
    def ends_turn(self) -> bool:
        """Whether the turn ends with the question in :attr:`message`."""
        return self.grounding is None


class KGTurnResolver:
    """Resolves the personal references of a new request (see the module docstring).

    Args:
        kg: A fixed knowledge graph shared by every user (not with ``store``).
        store: Per-user KGs; default: a :class:`KGStore` over the graph's store.
        user_key: Name of the user id in the context, ``configurable`` or state.
        speaker_key: Name of the speaker's entity in the context, ``configurable`` or
            state.
        max_age_s: Seconds after which a user's graph is read again even when its version
            is unchanged (``None``: only on a change through ``KGStore``).
        **resolver_options: Options of
            :class:`~toolguard.kg.resolver.DeterministicPathGenerator`.

    Raises:
        toolguard.errors.ConfigurationError: ``kg`` and ``store`` together, a negative
            ``max_age_s``, or an invalid resolver option.
    """

    def __init__(
        self,
        *,
        kg: KnowledgeGraph | None = None,
        store: KGStore | None = None,
        user_key: str = "user_id",
        speaker_key: str = "kg_speaker",
        max_age_s: float | None = 60.0,
        **resolver_options: Unpack[ResolverOptions],
    ) -> None:
        if kg is not None and store is not None:
            raise ConfigurationError("pass kg (one shared KG) or store (per-user KGs), not both")
        # per-user graphs and resolvers by KG version (validates the options eagerly)
        self.cache = KGCache(max_age_s=max_age_s, **resolver_options)
        self.kg = kg
        self.store = store
        self.user_key = user_key
        self.speaker_key = speaker_key
        self.resolver_options = resolver_options
        # one resolver for a fixed kg=: its relation tables are kept per KG version
        self._fixed = DeterministicPathGenerator(kg, **resolver_options) if kg is not None \
            else None
        self._empty = DeterministicPathGenerator(KnowledgeGraph(), **resolver_options)

    def plan(
        self,
        messages: Sequence[BaseMessage],
        *,
        state: Any,
        configurable: Mapping[str, Any],
        runtime: Runtime[Any] | None,
        ask: AskMode,
        notify: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> Plan[TurnUpdate | None]:
        """The turn as a plan; run it with :func:`~toolguard.kg.plan.drive` or ``adrive``.

        Args:
            messages: The conversation; only its last message is resolved.
            state: The graph state (read for ``user_key`` / ``speaker_key``).
            configurable: ``config["configurable"]`` of the run.
            runtime: The run's LangGraph runtime (its ``context`` and ``store``), if any.
            ask: ``"interrupt"`` to ask about a missing link in the graph, ``"end"`` to end
                the turn with the question.
            notify: Receives the ``kg_missing`` event (a stream writer); ``None``: not sent.

        Returns:
            ``None`` when there is nothing to write (no new request, nothing personal).

        Raises:
            toolguard.errors.KGError: No ``kg``, no ``store`` and no store in ``runtime``
                while a user id is known, or an invalid user id.
        """
        message = unresolved_request(messages)
        if message is None:
            return None
        context = runtime.context if runtime is not None else None
        user, speaker = speaker_and_user(context or {}, configurable, state,
                                         user_key=self.user_key, speaker_key=self.speaker_key)
        if self._fixed is not None:
            resolver = self._fixed
        elif user is not None:
            resolver = yield from self.cache.lookup(
                self._store(runtime.store if runtime is not None else None), user)
        else:
            resolver = self._empty
        res = resolver.resolve(message_text(message), speaker=speaker)
        answer: str | None = None
        question: str | None = None
        if res.missing:
            question = question_for(res.missing)
            if notify is not None:
                yield Notify(notify, {"event": "kg_missing", "missing": list(res.missing)})
            if ask == "end":
                return TurnUpdate(user_message(question, "ask_user", **{KG_KEY: kg_record(res)}))
            (reply,) = yield AskUser([AskQuestion(tool_call_id=None, tool_name=None,
                                                  question=question,
                                                  missing=list(res.missing), source="kg")])
            answer = reply.text
        rewrite = rewrite_request(message, res, answer, question)
        return None if rewrite is None else TurnUpdate(rewrite.message, rewrite.grounding)

    def _store(self, base: Any) -> KGStore:
        """``store=``, else a :class:`KGStore` over the graph's store ``base``."""
        if self.store is not None:
            return self.store
        if base is None:
            raise KGError("KG resolution needs kg=, store= or a graph store "
                          "(create_agent(..., store=...) or builder.compile(store=...))")
        return KGStore(base)
