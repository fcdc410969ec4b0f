"""A Hugging Face causal LM as a LangChain chat model with tool calling, in process.

The Relign eval runs the base, SFT and DPO models through the same agent code as any
endpoint, without a server: messages rendered with the tokenizer's chat template (tools
included), greedy decoding, calls read back with
:func:`~toolguard_evals.relign.chat_format.parse_completion`.  Greedy answers are memoised
by prompt, and the key/value cache of the previous prompt's shared prefix is reused
(:class:`PromptCache`).  :class:`ServedChatModel` sends the same rendered prompts to an
OpenAI-compatible ``/v1/completions`` endpoint instead (llama.cpp serving the GGUF that
:mod:`~toolguard_evals.relign.gguf_export` wrote), so both backends see identical text.  To
serve a folder over HTTP for other clients, see :mod:`toolguard_evals.relign.export`.
"""

from __future__ import annotations

import inspect
import json
import threading
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import invalid_tool_call, tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

from toolguard.context import message_text
from toolguard_evals.relign.chat_format import parse_completion, render


class PromptCache:
    """The key/value cache of the last prompt, reused for the next prompt's shared prefix.

    :meth:`prefix` returns a cache covering all tokens of a prompt but its last one, running
    the model only on the tokens after the longest prefix shared with the previous prompt.
    The returned cache is this object's own: ``generate`` may append to it (the next call
    crops it back); copy it before changing its batch size.  Greedy decoding from a reused
    prefix equals decoding from scratch up to float rounding.

    Args:
        model: A causal LM (``transformers.PreTrainedModel``) whose cache is a
            ``DynamicCache`` that can be cropped (other cache types: nothing is reused).
        min_shared: Reuse only a shared prefix of at least this many tokens.
    """

    def __init__(self, model: Any, *, min_shared: int = 16) -> None:
        self.model = model
        self.min_shared = min_shared
        self._ids: list[int] = []
        self._cache: Any = None
        self.reused_tokens = 0
        self.computed_tokens = 0
        try:
            params = inspect.signature(model.forward).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        self._keeps_logits = "logits_to_keep" in params

    def prefix(self, ids: Any) -> Any:
        """A cache of ``ids[:, :-1]`` (``ids``: one prompt, shape ``(1, length)``)."""
        import torch

        target: list[int] = ids[0, :-1].tolist()
        shared = 0
        for a, b in zip(self._ids, target, strict=False):
            if a != b:
                break
            shared += 1
        cache = self._cache
        if cache is not None and shared >= self.min_shared:
            try:
                extra = int(cache.get_seq_length()) - shared
                if extra > 0:
                    cache.crop(-extra)
            except (AttributeError, RuntimeError, ValueError, NotImplementedError):
                cache, shared = None, 0
        else:
            cache, shared = None, 0
        # only the cache is wanted: skip the vocabulary projection of every prompt position
        # (1000 x 49k floats on SmolLM2) where the model allows it
        kwargs = {"logits_to_keep": 1} if self._keeps_logits else {}
        with torch.no_grad():
            if cache is None:
                cache = self.model(ids[:, :-1], use_cache=True, **kwargs).past_key_values
            elif shared < len(target):
                cache = self.model(ids[:, shared:-1], past_key_values=cache, use_cache=True,
                                   **kwargs).past_key_values
        self._ids, self._cache = target, cache
        self.reused_tokens += shared
        self.computed_tokens += len(target) - shared
        return cache


def to_hf_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages -> Hugging Face chat dicts (tool-call arguments as objects)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, SystemMessage):
            out.append({"role": "system", "content": message_text(m)})
        elif isinstance(m, HumanMessage):
            out.append({"role": "user", "content": message_text(m)})
        elif isinstance(m, AIMessage):
            calls = [{"type": "function", "function": {"name": c["name"], "arguments": c["args"]}}
                     for c in m.tool_calls]
            calls += [{"type": "function", "function": {"name": c.get("name") or "",
                                                        "arguments": c.get("args") or ""}}
                      for c in m.invalid_tool_calls]
            out.append({"role": "assistant", "content": message_text(m), "tool_calls": calls})
        elif isinstance(m, ToolMessage):
            out.append({"role": "tool", "content": message_text(m)})
        else:
            raise TypeError(f"unsupported message type {type(m).__name__}")
    return out


class HFChatModel(BaseChatModel):
    """Greedy chat completions from an in-process transformers model.

    Attributes:
        model: A causal LM (``transformers.PreTrainedModel``).
        tokenizer: Its tokenizer, whose chat template renders ``tools``.
        max_new_tokens: Tokens per answer at most, >= 1.
        prose_budget: Stop an answer that is not a call after this many tokens
            (:class:`~toolguard_evals.relign.chat_format.NoCallStop`); ``None``: never.
        name_: Shown in reports (``base`` / ``sft`` / ``dpo``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: Any
    tokenizer: Any
    max_new_tokens: int = Field(96, ge=1)
    prose_budget: int | None = Field(24, ge=1)
    name_: str = "hf"
    _memo: dict[str, str] = PrivateAttr(default_factory=dict)
    _prompts: PromptCache | None = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    generated: int = 0
    memo_hits: int = 0

    @property
    def _llm_type(self) -> str:
        return "relign-hf"

    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def complete(self, prompt: str) -> str:
        """The greedy completion of ``prompt`` text (memoised), up to the end-of-turn."""
        import torch
        from transformers import StoppingCriteriaList

        from toolguard_evals.relign.chat_format import NoCallStop
        from toolguard_evals.relign.pairs import cut_turn

        hit = self._memo.get(prompt)
        if hit is not None:
            self.memo_hits += 1
            return hit
        ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
        ids = ids.to(self.model.device)
        stop = (StoppingCriteriaList([NoCallStop(self.tokenizer, ids.shape[1],
                                                 self.prose_budget)])
                if self.prose_budget is not None else None)
        with self._lock, torch.no_grad():  # one generation at a time (shared prompt cache)
            if self._prompts is None:
                self._prompts = PromptCache(self.model)
            past = self._prompts.prefix(ids) if ids.shape[1] > 1 else None
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=self.max_new_tokens,
                                      pad_token_id=self.tokenizer.pad_token_id,
                                      stopping_criteria=stop, past_key_values=past)
        text = cut_turn(self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=False),
                        self.tokenizer.eos_token)
        self._memo[prompt] = text
        self.generated += 1
        return text

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        tools = kwargs.get("tools") or []
        prompt = render(self.tokenizer, to_hf_messages(messages), tools,
                        add_generation_prompt=True)
        return ChatResult(generations=[ChatGeneration(message=to_ai_message(
            self.complete(prompt)))])


class ServedChatModel(HFChatModel):
    """:class:`HFChatModel`'s prompts, completed by a server's raw ``/v1/completions``.

    The prompt is rendered here with the training tokenizer's chat template (tools
    included), so the server's own chat template plays no part; decoding is greedy
    (``temperature`` 0) and the answer is cut at the end-of-turn token.  ``model`` is unused
    (``None``); :attr:`prose_budget` does not apply (``max_new_tokens`` bounds every answer).

    Attributes:
        base_url: The endpoint's ``.../v1`` URL (e.g. ``LocalModelServer.base_url``).
        served_model: The ``model`` field of each request.
        timeout: Seconds per request.

    Raises:
        urllib.error.URLError: From :meth:`complete`, when the server cannot be reached.
    """

    base_url: str
    served_model: str
    timeout: float = Field(600.0, gt=0)

    @property
    def _llm_type(self) -> str:
        return "relign-served"

    def complete(self, prompt: str) -> str:
        """The greedy completion of ``prompt`` text (memoised), up to the end-of-turn."""
        from toolguard_evals.relign.pairs import cut_turn

        hit = self._memo.get(prompt)
        if hit is not None:
            self.memo_hits += 1
            return hit
        eos = self.tokenizer.eos_token
        body = {"model": self.served_model, "prompt": prompt, "max_tokens": self.max_new_tokens,
                "temperature": 0, "stop": [eos] if eos else []}
        request = urllib.request.Request(
            f"{self.base_url.rstrip('/')}/completions", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"})
        with self._lock, urllib.request.urlopen(request, timeout=self.timeout) as response:
            answer = json.loads(response.read())
        text = str(answer["choices"][0].get("text") or "")
        if eos and answer["choices"][0].get("finish_reason") == "stop" and eos not in text:
            text += eos  # the server drops the stop string; the transformers path keeps it
        text = cut_turn(text, eos)
        self._memo[prompt] = text
        self.generated += 1
        return text


def to_ai_message(text: str) -> AIMessage:
    """A completion as an ``AIMessage`` (calls with unreadable arguments are invalid calls)."""
    parsed = parse_completion(text)
    calls = [tool_call(name=c.name, args=c.arguments, id=f"call_{i}")
             for i, c in enumerate(parsed.calls) if c.arguments is not None]
    invalid = [invalid_tool_call(name=c.name, args=c.raw, id=f"call_{i}",
                                 error="arguments are not a JSON object")
               for i, c in enumerate(parsed.calls) if c.arguments is None]
    return AIMessage(content=parsed.content, tool_calls=calls, invalid_tool_calls=invalid,
                     response_metadata={"raw": json.dumps(text)[:2000]})
