"""LLM relation-path generation with KGETool's instruction (FamilyTool).

The prompt is ``prompts/kg_search.md`` (FamilyTool ``pipeline/KG_extraction.py``
``get_rewrite_prompt``), with ``{relations}`` filled by ``- <relationship>NAME`` per KG
relation and the request appended as ``<intent>...</intent>``.  The model's answer is
kept verbatim: :func:`toolguard.kg.kg_search` parses its ``KG.search(...)`` calls, and an
answer without one is a *format error*, as FamilyTool's metrics count it.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from toolguard.errors import ConfigurationError
from toolguard.internal import internal_config
from toolguard.kg.graph import ExtractionMode, KnowledgeGraph, kg_search, parse_search_calls
from toolguard.prompts import load_prompt


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part if isinstance(part, str) else str(part.get("text", ""))
                   for part in content if isinstance(part, str | dict))


class LLMPathGenerator:
    """``KG.search`` programs written by any LangChain chat model.

    Args:
        model: A LangChain chat model (tool binding is not needed).
        kg: The knowledge graph whose relation names fill the prompt.
        prompt: Name of the prompt in ``prompts/`` (``{relations}`` placeholder).

    Raises:
        toolguard.errors.ConfigurationError: If the prompt has no ``{relations}`` placeholder.
    """

    def __init__(self, model: BaseChatModel, kg: KnowledgeGraph, *,
                 prompt: str = "kg_search") -> None:
        template = load_prompt(prompt)
        if "{relations}" not in template:
            raise ConfigurationError(f"prompt {prompt!r} has no {{relations}} placeholder")
        self.model = model
        self.kg = kg
        self.template = template

    def messages(self, query: str) -> list[BaseMessage]:
        """The prompt for one request (the KG's relations are read at call time)."""
        relations = "\n    ".join(f"- <relationship>{r}" for r in self.kg.relations)
        text = self.template.format(relations=relations)
        return [HumanMessage(f"{text}\n\n<intent>{query}</intent>\n")]

    def generate(self, query: str, **kwargs: Any) -> str:
        """The model's raw answer (``""`` for an empty one)."""
        config = kwargs.pop("config", None)
        reply = self.model.invoke(self.messages(query), internal_config("kg.generate", config),
                                  **kwargs)
        return _text(reply) if isinstance(reply, AIMessage | BaseMessage) else str(reply)

    async def agenerate(self, query: str, **kwargs: Any) -> str:
        """Async twin of :meth:`generate`."""
        config = kwargs.pop("config", None)
        reply = await self.model.ainvoke(self.messages(query),
                                         internal_config("kg.generate", config), **kwargs)
        return _text(reply) if isinstance(reply, AIMessage | BaseMessage) else str(reply)

    def extract(self, response: str, *, mode: ExtractionMode = "exact", k: int = 3) -> str:
        """FamilyTool's ``KG_search`` of a response (``""`` = format error)."""
        return kg_search(response, self.kg, mode=mode, k=k)

    @staticmethod
    def is_format_error(response: str) -> bool:
        """True when the response holds no ``KG.search(...)`` call."""
        return not parse_search_calls(response)
