"""The chat format Relign trains and evaluates in: RelyToolBench's native tool calling.

Every sample is what :mod:`toolguard_evals.relytoolbench.agent` sends in its ``native``
format: the system prompt of the paper's Appendix F (``prompts/rtb_agent.md``, no ReAct
instructions), the query followed by ``Begin!``, and the sample's tools plus ``Finish`` as
OpenAI tools.  The three targets of the paper's §3.2:

- a tool call (the gold call);
- ChangeTools: ``Finish(return_type="give_up_and_change_tools", final_answer=...)``;
- TalkToUser: ``Finish(return_type="give_up_and_talk_to_user", final_answer=<the question
  naming the missing parameters>)``.

Messages are Hugging Face chat dicts (``{"role", "content", "tool_calls"}``, arguments as
JSON objects), so TRL and any chat template read them.  A tokenizer whose chat template
does not render ``tools`` (SmolLM2's) gets :data:`HERMES_TEMPLATE`: ChatML with the tools in
the system turn and calls written ``<tool_call>{"name", "arguments"}</tool_call>``
(Qwen2.5's layout, which vLLM's ``hermes`` parser and ``transformers serve`` read back).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from toolguard_evals.prompts import load_prompt
from toolguard_evals.relytoolbench.agent import RETURN_TYPES, finish_function

Kind = Literal["original", "change_tools", "talk_to_user"]
"""What a synthesized sample asks for: the gold call, ChangeTools or TalkToUser."""
KINDS: Final[tuple[Kind, ...]] = ("original", "change_tools", "talk_to_user")
RETURN_TYPE: Final[dict[Kind, str]] = {"change_tools": "give_up_and_change_tools",
                                       "talk_to_user": "give_up_and_talk_to_user"}
CHANGE_TOOLS_ANSWER: Final = "None of these tools can do this; other tools are needed."

HERMES_TEMPLATE: Final = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query."
    "\\n\\nYou are provided with function signatures within <tools></tools> XML tags:"
    "\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call>"
    "<|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] in ('user', 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if message['content'] %}{{- message['content'] }}"
    "{%- if message['tool_calls'] %}{{- '\\n' }}{%- endif %}{%- endif %}"
    "{%- for tc in message['tool_calls'] or [] %}"
    "{%- if tc['function'] is defined %}{%- set tc = tc['function'] %}{%- endif %}"
    "{%- if not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + tc['name'] + '\", \"arguments\": ' }}"
    "{%- if tc['arguments'] is string %}{{- tc['arguments'] }}"
    "{%- else %}{{- tc['arguments'] | tojson }}{%- endif %}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML with tools, Qwen2.5's layout (Apache-2.0), written for Relign."""

HERMES_RESPONSE_TEMPLATE: Final[dict[str, Any]] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {"open_pattern": r"\s*<tool_call>", "close": "</tool_call>",
                       "repeats": True, "content": "json",
                       "transform": {"type": "function", "function": "{content}"}},
        "content": {"open_pattern": r"\s*", "close_pattern": r"\s*(?:<\|im_end\|>|$)",
                    "content": "text"},
    },
}
"""``tokenizer.response_template`` for :data:`HERMES_TEMPLATE`: how ``transformers serve``
turns the model's text back into OpenAI ``tool_calls`` (transformers' Qwen2 fallback,
without the reasoning field)."""

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCED = re.compile(r"```[A-Za-z]*\s*\n?(.*?)\n?\s*```", re.S)
_OPEN_FENCE = re.compile(r"```[A-Za-z]*[ \t]*\n(.*)", re.S)
"""A reply that opens with a code fence: cut before its closing fence, or with prose after it
(the objects at the start of the body are read; what follows them is not)."""
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
_CALL_HEAD = re.compile(r'\{\s*"name"\s*:\s*"([^"]*)"')


def openai_tool(function: Mapping[str, Any]) -> dict[str, Any]:
    """``{"type": "function", "function": ...}`` around a function dict (JSON-Schema params)."""
    return {"type": "function", "function": dict(function)}


def system_prompt(tool_names: Sequence[str]) -> str:
    """The Appendix F system prompt in the native format, with a numbered tool list.

    ``k.name: name`` per tool (RelyToolBench lists ``k.tool: api, api``; a BFCL function is
    its own tool).
    """
    tool_list = "\n".join(f"{k}.{name}: {name}" for k, name in enumerate(tool_names, 1))
    return load_prompt("rtb_agent").format(format_instructions="", tool_list=tool_list,
                                           api_listing="").strip()


def user_prompt(query: str) -> str:
    """ToolBench's user turn: the query, then ``Begin!`` (as the native agent sends it)."""
    return f"\n{query}\nBegin!\n"


def prompt_messages(query: str, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """System and user turns for ``query`` with ``functions`` (``Finish`` not included)."""
    return [{"role": "system", "content": system_prompt([str(f["name"]) for f in functions])},
            {"role": "user", "content": user_prompt(query)}]


def tools_with_finish(functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The OpenAI tools of a sample: its functions, then ``Finish``."""
    return [openai_tool(f) for f in functions] + [openai_tool(finish_function())]


def call_message(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """An assistant turn with one tool call (Hugging Face chat dict)."""
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function",
                            "function": {"name": name, "arguments": dict(arguments)}}]}


def finish_message(kind: Kind, answer: str) -> dict[str, Any]:
    """An assistant turn calling ``Finish`` with the indecisive return type of ``kind``.

    Raises:
        KeyError: ``kind`` is ``original`` (no indecisive action).
    """
    return call_message("Finish", {"return_type": RETURN_TYPE[kind], "final_answer": answer})


def talk_to_user_answer(missing: Sequence[str]) -> str:
    """TalkToUser's ``final_answer``: a question that names the missing parameters."""
    names = ", ".join(f"'{m}'" for m in missing)
    return f"Please tell me {names}: your request does not give it."


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """One tool call read from a completion.

    Attributes:
        name: The function name ("" when unreadable).
        arguments: The arguments object, or ``None`` when they are not a JSON object.
        raw: The text the call was read from.
    """

    name: str
    arguments: dict[str, Any] | None
    raw: str


@dataclass(frozen=True, slots=True)
class ParsedResponse:
    """A completion split into text and tool calls (:func:`parse_completion`)."""

    content: str
    calls: tuple[ParsedCall, ...] = field(default=())

    @property
    def finish(self) -> ParsedCall | None:
        """The first ``Finish`` call, if any."""
        return next((c for c in self.calls if c.name == "Finish"), None)

    @property
    def tool_calls(self) -> tuple[ParsedCall, ...]:
        """Calls of anything but ``Finish``."""
        return tuple(c for c in self.calls if c.name != "Finish")

    def return_type(self) -> str | None:
        """``Finish``'s ``return_type`` when it is one of RelyToolBench's, else ``None``."""
        fin = self.finish
        if fin is None or fin.arguments is None:
            return None
        value = fin.arguments.get("return_type")
        return value if isinstance(value, str) and value in RETURN_TYPES else None


def parse_completion(text: str) -> ParsedResponse:
    """Read the tool calls of a generated assistant turn.

    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes / Qwen2.5;
    an unclosed last block is read to the end); without any block, a bare JSON object with
    ``name`` and ``arguments`` or ``parameters`` (Llama 3.1's JSON tool calls; several in a
    row are several calls, a cut-off last one is dropped), also inside one fenced code block
    (```` ```json ````, as Qwen2.5-Coder writes calls).  A block that is not such JSON
    gives a call whose ``arguments`` is ``None`` and whose ``name`` is read with a regex
    when possible; so does a bare or fenced object that opens with ``{"name": "..."`` and
    does not parse (a missing brace, a cut at the token budget) when no call before it
    did.  A reply that opens with a code fence is read from the fence on even when the
    fence is not closed or prose follows it.  ``<|im_end|>`` and text after it are dropped.
    """
    text = text.split("<|im_end|>", 1)[0]
    blocks = _TOOL_CALL.findall(text)
    if not blocks:
        stripped = text.strip()
        fenced = _FENCED.fullmatch(stripped) or _OPEN_FENCE.fullmatch(stripped)
        body = fenced.group(1).strip() if fenced else stripped
        bare = _json_calls(body) if body.startswith("{") else ()
        if bare:
            return ParsedResponse(content="", calls=bare)
        broken = _broken_call(body)
        if broken is not None:
            return ParsedResponse(content="", calls=(broken,))
        return ParsedResponse(content=stripped)
    content = text[:text.find("<tool_call>")].strip()
    calls = []
    for block in blocks:
        call = _json_call(block)
        if call is None:
            m = _NAME.search(block)
            call = ParsedCall(name=m.group(1) if m else "", arguments=None, raw=block)
        calls.append(call)
    return ParsedResponse(content=content, calls=tuple(calls))


def _broken_call(body: str) -> ParsedCall | None:
    """An object that opens with ``"name"`` but does not parse, as an invalid call.

    The bare / fenced mirror of an unparsable ``<tool_call>`` block: a call object with a
    missing brace, or one cut at the token budget, is a call in a broken format, not text.
    """
    m = _CALL_HEAD.match(body)
    return ParsedCall(name=m.group(1), arguments=None, raw=body) if m else None


def _json_calls(text: str) -> tuple[ParsedCall, ...]:
    """Consecutive JSON call objects (one per line, as Qwen2.5 writes parallel calls).

    Reading stops at the first text that is not a call object (a cut-off last object);
    the calls before it count.
    """
    decoder = json.JSONDecoder(strict=False)
    calls: list[ParsedCall] = []
    at = 0
    while at < len(text):
        try:
            _, end = decoder.raw_decode(text, at)
        except ValueError:
            break
        call = _json_call(text[at:end])
        if call is None:
            break
        calls.append(call)
        at = end
        while at < len(text) and text[at].isspace():
            at += 1
    return tuple(calls)


def _json_call(text: str) -> ParsedCall | None:
    try:
        value = json.loads(text, strict=False)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args, strict=False)
        except ValueError:
            args = None
    return ParsedCall(name=value["name"], arguments=args if isinstance(args, dict) else None,
                      raw=text)


class NoCallStop:
    """A generation stopping criterion: end a completion that is not a tool call early.

    After ``budget`` new tokens, a completion with no ``<tool_call>`` that does not start
    with ``{`` or a code fence is stopped: whatever prose follows cannot become a call the
    evaluator counts (it only reads calls), so generating it costs time and changes no metric.

    Args:
        tokenizer: Decodes the new tokens.
        prompt_len: Tokens of the prompt (new tokens start there).
        budget: New tokens before the check, >= 1.
    """

    def __init__(self, tokenizer: Any, prompt_len: int, budget: int) -> None:
        if budget < 1:
            raise ValueError("budget must be >= 1")
        self.tokenizer = tokenizer
        self.prompt_len = prompt_len
        self.budget = budget

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        if input_ids.shape[1] - self.prompt_len < self.budget:
            return done
        for i, row in enumerate(input_ids):
            text = self.tokenizer.decode(row[self.prompt_len:], skip_special_tokens=False)
            if "<tool_call>" not in text and not text.lstrip().startswith(("{", "```")):
                done[i] = True
        return done


def renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template shows ``tools`` to the model.

    Renders a one-tool conversation and looks for the tool's name in the text; a template
    that ignores ``tools`` (SmolLM2's) gives ``False``, as does a tokenizer without one.
    """
    if not getattr(tokenizer, "chat_template", None):
        return False
    probe = openai_tool({"name": "relign_probe_tool", "description": "probe",
                         "parameters": {"type": "object", "properties": {}}})
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}],
                                             tools=[probe], tokenize=False,
                                             add_generation_prompt=True)
    except (ValueError, TypeError, KeyError):
        return False
    return "relign_probe_tool" in str(text)


def ensure_tool_template(tokenizer: Any) -> bool:
    """Give ``tokenizer`` :data:`HERMES_TEMPLATE` when its own template ignores tools.

    Also sets ``response_template`` (for ``transformers serve``).  Returns ``True`` when the
    template was replaced.

    Raises:
        ValueError: The vocabulary has no ``<|im_start|>`` / ``<|im_end|>`` tokens, so
            ChatML cannot be used (give the model a tool-aware chat template).
    """
    if renders_tools(tokenizer):
        return False
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" not in vocab or "<|im_end|>" not in vocab:
        raise ValueError("the tokenizer's chat template does not render tools and its "
                         "vocabulary has no ChatML tokens; use a model with a tool-aware "
                         "chat template")
    tokenizer.chat_template = HERMES_TEMPLATE
    tokenizer.response_template = HERMES_RESPONSE_TEMPLATE
    return True


def render(tokenizer: Any, messages: Sequence[Mapping[str, Any]],
           tools: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str:
    """The chat template's text for ``messages`` with ``tools``."""
    return str(tokenizer.apply_chat_template(list(messages), tools=list(tools), tokenize=False,
                                             add_generation_prompt=add_generation_prompt))


def prompt_and_completion(tokenizer: Any, messages: Sequence[Mapping[str, Any]],
                          tools: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """Split a conversation ending with an assistant turn into (prompt, completion) text.

    The prompt is everything before the last turn plus the generation prompt; the
    completion is the rest of the full rendering, up to and including the end-of-turn
    token (the tokenizer's EOS when the template ends turns with it).

    Raises:
        ValueError: The last message is not an assistant turn, or the template does not
            render the prompt as a prefix of the whole conversation.
    """
    if not messages or messages[-1].get("role") != "assistant":
        raise ValueError("the conversation must end with an assistant turn")
    prompt = render(tokenizer, messages[:-1], tools, add_generation_prompt=True)
    full = render(tokenizer, messages, tools, add_generation_prompt=False)
    if not full.startswith(prompt):
        raise ValueError("the chat template does not render the prompt as a prefix of the "
                         "conversation; prompt/completion splitting needs one that does")
    completion = full[len(prompt):]
    eos = getattr(tokenizer, "eos_token", None)
    if eos and eos in completion:
        completion = completion[:completion.rfind(eos) + len(eos)]
    return prompt, completion
