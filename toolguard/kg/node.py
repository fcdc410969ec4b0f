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
  over the graph's own ``store``) or a fixed :class:`KnowledgeGraph`.  The speaker (start
  entity) is ``configurable[speaker_key]``, else ``state[speaker_key]``, else the user id;
  a ``<speak>Speaker: NAME</speak>`` tag in the text wins.
- The latest ``HumanMessage`` is replaced (same id) by one with the sub-KG appended and
  ``additional_kwargs["toolguard_kg"]`` recording programs and triples, so the node never
  resolves a message twice.  Because the facts are now in the user's message, the guard's
  content detector counts the resolved values as grounded; they are also written to
  ``state[grounding_key]`` (a list of strings, e.g. for ``Guard.check(extra_grounding=)``).
- An unresolvable reference (unknown speaker, a relation the KG lacks) becomes
  ``ask_user`` as :class:`~toolguard.node.GuardNode` does it: with a checkpointer (or
  ``ask_user="interrupt"``) :func:`langgraph.types.interrupt` with a
  ``{"type": "toolguard.ask_user", "questions": [...]}`` payload naming the missing link,
  and the answer is appended to the request; without one the turn ends with an
  ``AIMessage`` question (``response_metadata={"toolguard": "ask_user"}``) and
  :meth:`KGResolveNode.route` goes to ``END``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph import END
from langgraph.types import interrupt

from toolguard.kg.graph import KnowledgeGraph, Triple
from toolguard.kg.resolver import DeterministicPathGenerator, Resolution
from toolguard.kg.store import KGStore
from toolguard.node import can_interrupt, validate_ask_user

KGAskMode = Literal["auto", "interrupt", "end"]
EXTRA_INFO = "The extra information for the query is"
"""KGETool's lead-in for the sub-KG appended to the query (FamilyTool data)."""



def format_sub_kg(triples: Sequence[Triple]) -> str:
    """``([Bob, mother, Alice], [Alice, prefer_city, city_0002])`` as in FamilyTool."""
    return "(" + ", ".join(f"[{h}, {r}, {t}]" for h, r, t in triples) + ")"


def grounding_of(resolution: Resolution) -> list[str]:
    """Strings the content detector may treat as grounded: entities and triples."""
    return [*resolution.entities, *(f"{h} {r} {t}" for h, r, t in resolution.triples)]


def question_for(missing: Sequence[str]) -> str:
    """The clarification question naming the missing links."""
    return ("I could not resolve part of your request from what I know about you: "
            + "; ".join(missing) + ". Could you tell me?")


class KGResolveNode(RunnableLambda[Any, dict[str, Any]]):
    """Resolves the latest user message against the user's KG (see the module docstring).

    Args:
        kg: A fixed knowledge graph shared by every user (mutually exclusive with
            ``store``).
        store: Per-user KGs; default: a :class:`KGStore` over the graph's ``store``.
        user_key: Key of the user id in ``configurable`` or state.
        speaker_key: Key of the speaker's entity name in ``configurable`` or state.
        messages_key: State key of the messages.
        grounding_key: State key (last-value channel) for the resolved values; None to
            not write it.
        ask_user: ``"auto"`` interrupts when the graph has a checkpointer, else ends the
            turn with a question; ``"interrupt"`` / ``"end"`` force one way.
        model_node: Where :meth:`route` goes when nothing needs the user.
        name: The node's name.
        **resolver_options: Keyword options of :class:`DeterministicPathGenerator`.

    Raises:
        ValueError: On both ``kg`` and ``store``, or an unknown ``ask_user``.
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
        **resolver_options: Any,
    ) -> None:
        if kg is not None and store is not None:
            raise ValueError("pass kg (one shared KG) or store (per-user KGs), not both")
        validate_ask_user(ask_user)
        DeterministicPathGenerator(KnowledgeGraph(), **resolver_options)  # validate eagerly
        super().__init__(self._run, afunc=self._arun, name=name)
        self.kg = kg
        self.kg_store = store
        self.user_key = user_key
        self.speaker_key = speaker_key
        self.messages_key = messages_key
        self.grounding_key = grounding_key
        self.ask_user = ask_user
        self.model_node = model_node
        self.resolver_options = resolver_options
        # one generator for a fixed kg=: its relation tables are cached per KG version, so
        # they are built once, not on every user message (store KGs are loaded per turn)
        self._fixed_generator = (DeterministicPathGenerator(kg, **resolver_options)
                                 if kg is not None else None)

    # ------------------------------------------------------------------ helpers
    def _get(self, state: Any, key: str) -> Any:
        return state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)

    def _target(self, state: Any) -> HumanMessage | None:
        msgs: list[AnyMessage] = list(self._get(state, self.messages_key) or [])
        if not msgs or not isinstance(msgs[-1], HumanMessage):
            return None
        last = msgs[-1]
        if "toolguard_kg" in (last.additional_kwargs or {}):
            return None  # already resolved
        return last

    def _ids(self, state: Any, config: RunnableConfig) -> tuple[str | None, str | None]:
        conf = config.get("configurable") or {}
        user = conf.get(self.user_key) or self._get(state, self.user_key)
        speaker = conf.get(self.speaker_key) or self._get(state, self.speaker_key) or user
        return (str(user) if user is not None else None,
                str(speaker) if speaker is not None else None)

    def _store(self) -> KGStore:
        if self.kg_store is not None:
            return self.kg_store
        from langgraph.config import get_store

        try:
            base = get_store()
        except RuntimeError as exc:  # pragma: no cover - outside a graph run
            raise ValueError("KGResolveNode: no kg, no store and no graph store") from exc
        if base is None:
            raise ValueError("KGResolveNode needs kg=, store= or a graph compiled with "
                             "store=")
        return KGStore(base)

    @staticmethod
    def _text(message: HumanMessage) -> str:
        if isinstance(message.content, str):
            return message.content
        return " ".join(p if isinstance(p, str) else str(p.get("text", ""))
                        for p in message.content if isinstance(p, str | dict))

    def _can_interrupt(self, config: RunnableConfig) -> bool:
        return can_interrupt(self.ask_user, config)

    # ------------------------------------------------------------------ node
    def _resolve(self, kg: KnowledgeGraph, message: HumanMessage,
                 speaker: str | None) -> Resolution:
        gen = (self._fixed_generator if kg is self.kg and self._fixed_generator is not None
               else DeterministicPathGenerator(kg, **self.resolver_options))
        return gen.resolve(self._text(message), speaker=speaker)

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        message = self._target(state)
        if message is None:
            return {}
        user, speaker = self._ids(state, config)
        if self.kg is not None:
            kg = self.kg
        elif user is None:
            kg = KnowledgeGraph()
        else:
            kg = self._store().load(user)
        return self._update(message, self._resolve(kg, message, speaker), config)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        message = self._target(state)
        if message is None:
            return {}
        user, speaker = self._ids(state, config)
        if self.kg is not None:
            kg = self.kg
        elif user is None:
            kg = KnowledgeGraph()
        else:
            kg = await self._store().aload(user)
        return self._update(message, self._resolve(kg, message, speaker), config)

    def _update(self, message: HumanMessage, res: Resolution,
                config: RunnableConfig) -> dict[str, Any]:
        """Shared by sync and async: the rewritten request, grounding, or a question."""
        if not res.triples and not res.missing:
            return {}
        record: dict[str, Any] = {"programs": res.programs,
                                  "triples": [list(t) for t in res.triples],
                                  "missing": res.missing}
        text = self._text(message)
        grounding = grounding_of(res)
        if res.missing:
            question = question_for(res.missing)
            if not self._can_interrupt(config):
                return {self.messages_key: [AIMessage(
                    question, response_metadata={"toolguard": "ask_user",
                                                 "toolguard_kg": record})]}
            answer = interrupt({"type": "toolguard.ask_user", "questions": [
                {"tool_call_id": None, "tool_name": None, "question": question,
                 "missing": list(res.missing)}]})
            answer_text = answer if isinstance(answer, str) else str(answer)
            record["answer"] = answer_text
            text = f"{text}\n(Asked: {question} The user answered: {answer_text})"
            grounding.append(answer_text)
        if res.triples:
            text = f"{text}  {EXTRA_INFO} {format_sub_kg(res.triples)}."
        new = HumanMessage(
            content=text, id=message.id, name=message.name,
            additional_kwargs={**(message.additional_kwargs or {}), "toolguard_kg": record},
            response_metadata=dict(message.response_metadata or {}),
        )
        update: dict[str, Any] = {self.messages_key: [new]}
        if self.grounding_key is not None:
            update[self.grounding_key] = grounding
        return update

    def route(self, state: Any) -> str:
        """Conditional edge: ``END`` after a clarification question, else ``model_node``."""
        msgs = self._get(state, self.messages_key) or []
        last = msgs[-1] if msgs else None
        if isinstance(last, AIMessage) and (last.response_metadata or {}).get(
                "toolguard") == "ask_user":
            return END
        return self.model_node


__all__ = ["EXTRA_INFO", "KGResolveNode", "format_sub_kg", "grounding_of", "question_for"]
