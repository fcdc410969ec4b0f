"""A scripted tool-calling chat model, public so users can test their own guarded graphs.

:class:`ScriptedChatModel` replays a fixed list of ``AIMessage`` s (or functions of the
conversation that return one) and accepts ``bind_tools`` like a real tool-calling model.
It records every prompt it was given in ``calls``.

Give each step its own ``AIMessage`` object: LangChain assigns a message an id the first
time it passes through a model, so replaying the same object twice would reuse the id and
``add_messages`` would replace the earlier message instead of appending a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

Step = AIMessage | Callable[[list[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """Replays ``script`` one step per call; raises ``IndexError`` when it runs out.

    Attributes:
        script: ``AIMessage`` s, or callables mapping the prompt messages to one.
        calls: The prompts received, oldest first.
    """

    script: list[Any] = Field(default_factory=list)
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    position: int = 0

    @property
    def _llm_type(self) -> str:
        return "toolguard-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        """Tools are accepted and ignored: the script decides the calls."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.position >= len(self.script):
            raise IndexError(f"ScriptedChatModel: script exhausted after {self.position} calls")
        step = self.script[self.position]
        self.position += 1
        self.calls.append(list(messages))
        message = step(list(messages)) if callable(step) else step
        return ChatResult(generations=[ChatGeneration(message=message)])
