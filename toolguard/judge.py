"""LLM judges: a prompt from ``prompts/``, any LangChain chat model, a closed label set.

Sync and async share :func:`build_messages` and :func:`parse_label`; only the model
call differs.  A judge never raises on a bad model answer: an answer with no valid
label is ``Unsure`` (the guard then lets the call through), and a model error is
reported in the result's ``reason``.  Graph control signals (``GraphBubbleUp``) are
re-raised.  Judge calls are internal (:func:`toolguard.internal.internal_config`): they never
appear in the user's ``stream_mode="messages"`` stream.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.errors import GraphBubbleUp
from pydantic import BaseModel, ConfigDict

from toolguard.context import message_text
from toolguard.errors import ConfigurationError
from toolguard.internal import internal_config
from toolguard.prompts import load_prompt


class JudgeResult(BaseModel):
    """A judge's label and why.

    Attributes:
        label: One of the judge's labels, or ``"Unsure"`` when none could be read.
        reason: The model's explanation, or the error that prevented judging.
        raw: The model's raw answer (cut to 2000 characters).
    """

    model_config = ConfigDict(frozen=True)

    label: str
    reason: str = ""
    raw: str = ""


class LLMJudge:
    """Ask a chat model to label something with a prompt from ``prompts/``.

    Args:
        model: Any LangChain chat model (``ChatOpenAI`` against vLLM or the local server...).
        prompt: Prompt name in ``prompts/`` (e.g. ``"check_tool_relevance"``).
        template: The prompt's text, when it is not one of the library's prompts (the
            harness's judges); ``prompt`` then only names it in traces.
        labels: The closed label set, most specific first (``"Not Hallucinated"`` before
            ``"Hallucinated"``) so substring matching picks the right one.
    """

    def __init__(self, model: BaseChatModel, *, prompt: str, labels: Sequence[str],
                 template: str | None = None) -> None:
        if not labels:
            raise ConfigurationError("labels must not be empty")
        self.model = model
        self.prompt_name = prompt
        self.template = load_prompt(prompt) if template is None else template
        self.labels = tuple(labels)

    def build_messages(self, **fields: Any) -> list[BaseMessage]:
        """The prompt filled with ``fields`` as one user message."""
        return [HumanMessage(self.template.format(**fields))]

    def judge(self, **fields: Any) -> JudgeResult:
        """Label synchronously."""
        try:
            answer = self.model.invoke(self.build_messages(**fields),
                                       internal_config(f"judge.{self.prompt_name}"))
        except GraphBubbleUp:
            raise
        except Exception as exc:  # a judge failure must not crash the user's graph
            return JudgeResult(label="Unsure", reason=f"judge model failed: {exc!r}"[:500])
        return parse_label(message_text(answer), self.labels)

    async def ajudge(self, **fields: Any) -> JudgeResult:
        """Label asynchronously."""
        try:
            answer = await self.model.ainvoke(self.build_messages(**fields),
                                              internal_config(f"judge.{self.prompt_name}"))
        except GraphBubbleUp:
            raise
        except Exception as exc:  # a judge failure must not crash the user's graph
            return JudgeResult(label="Unsure", reason=f"judge model failed: {exc!r}"[:500])
        return parse_label(message_text(answer), self.labels)


_JSON_OBJ = re.compile(r"\{.*\}", re.S)


def parse_label(text: str, labels: Sequence[str]) -> JudgeResult:
    """Read a label from a model answer.

    Tries a JSON object with a ``label`` (or ``answer``/``result``) key first, then the
    last line that names a label, matching case-insensitively; labels are tried in
    the order given.  No label found gives ``"Unsure"``.
    """
    raw = text[:2000]
    match = _JSON_OBJ.search(text)
    if match:
        try:
            obj = json.loads(match.group(0))
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            for key in ("label", "answer", "result", "judgement", "judgment"):
                value = obj.get(key)
                if isinstance(value, str):
                    found = _match_label(value, labels)
                    if found:
                        return JudgeResult(label=found, reason=str(obj.get("reason", "")), raw=raw)
    for line in reversed(text.strip().splitlines()):
        found = _match_label(line, labels)
        if found:
            return JudgeResult(label=found, reason=text.strip()[:500], raw=raw)
    return JudgeResult(label="Unsure", reason="no label in the judge's answer", raw=raw)


def _match_label(text: str, labels: Sequence[str]) -> str | None:
    low = text.casefold()
    for label in labels:
        if re.search(rf"(?<![a-z]){re.escape(label.casefold())}(?![a-z])", low):
            return label
    return None
