"""A Relign-tuned model's indecisive actions as toolguard's outcomes (``create_agent`` middleware).

Relign (Xu et al., ICML 2025, "Reducing Tool Hallucination via Reliability Alignment")
trains a model to end an attempt with RelyToolBench's ``Finish`` tool (ToolBench's, with
two indecisive return types): ``give_up_and_talk_to_user`` (TalkToUser: ask for what the
request lacks) and ``give_up_and_change_tools`` (ChangeTools: no offered tool can do it).
An agent built on such a model (``toolguard relign run`` serves one as a GGUF) needs
``Finish`` offered beside its own tools, and its calls turned into what the agent shows
the user; this middleware does both.

Example:
    >>> from toolguard import IndecisiveActionsMiddleware
    >>> middleware = IndecisiveActionsMiddleware()
    >>> # agent = create_agent(relign_model, tools, middleware=[GuardMiddleware(), middleware])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal, get_args

from langchain.agents.middleware.types import (
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool

from toolguard.conversation import message_text
from toolguard.middleware._base import ToolguardMiddleware, ToolguardState, with_update
from toolguard.protocol import user_message
from toolguard.state import emit

__all__ = ["FINISH", "FINISH_DESCRIPTION", "RETURN_TYPES", "IndecisiveActionsMiddleware",
           "ReturnType", "finish_tool", "resolve_finish"]

FINISH: Final = "Finish"
ReturnType = Literal["give_answer", "give_up_and_restart", "give_up_and_change_tools",
                     "give_up_and_talk_to_user"]
RETURN_TYPES: Final[tuple[str, ...]] = get_args(ReturnType)

FINISH_DESCRIPTION: Final = (
    "If you believe that you have obtained a result that can answer the task, please call "
    "this function to provide the final answer. Alternatively, if you recognize that you are "
    "unable to proceed with the task in the current state or current tools cannot satisfy the "
    "user's query or you need to ask the user questions to obtain certain essential "
    "information required to complete the task, call this function to restart or change "
    "tools or talk to user. Remember: you must ALWAYS call this function at the end of your "
    "attempt, and the only part that will be shown to the user is the final answer, so it "
    "should contain sufficient information."
)
"""``Finish``'s description in RelyToolBench (the authors' ``rapidapi_multithread.py``)."""

# return type -> (toolguard's mark, counter, the text when the model gave no final_answer)
_OUTCOMES: Final[dict[str, tuple[str, str, str]]] = {
    "give_up_and_talk_to_user": (
        "ask_user", "indecisive_talk_to_user",
        "I need more information to do this: could you tell me what is missing?"),
    "give_up_and_change_tools": (
        "no_suitable_tool", "indecisive_change_tools",
        "None of the tools I have can do this."),
}


def finish_tool() -> dict[str, Any]:
    """``Finish`` as RelyToolBench defines it.

    Returns:
        An OpenAI function dict: name, description, JSON Schema parameters
        ``return_type`` (one of :data:`RETURN_TYPES`, required) and ``final_answer``.
    """
    return {
        "name": FINISH,
        "description": FINISH_DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {
                "return_type": {"type": "string", "enum": list(RETURN_TYPES)},
                "final_answer": {
                    "type": "string",
                    "description": "The final answer you want to give the user. You should "
                    "have this field if \"return_type\"==\"give_answer\"",
                },
            },
            "required": ["return_type"],
        },
    }


class IndecisiveActionsMiddleware(ToolguardMiddleware[ToolguardState]):
    """Offer a Relign-tuned model ``Finish`` and turn its ``Finish`` into the turn's end.

    Each model call gets :func:`finish_tool` beside the agent's tools (not when a tool of
    the agent is itself named ``Finish``: then the call passes through untouched).  When
    the model's answer calls ``Finish`` and nothing else, the ``AIMessage`` is replaced
    (same id, no tool calls, so no ``ToolMessage`` is owed) by:

    - ``give_up_and_talk_to_user`` (TalkToUser): the model's question, marked ``ask_user``
      (``response_metadata["toolguard"]``), as :class:`~toolguard.PrecheckMiddleware`
      marks its own; the user's next message answers it;
    - ``give_up_and_change_tools`` (ChangeTools): its "cannot do", marked
      ``no_suitable_tool``;
    - ``give_answer``, ``give_up_and_restart``, an unknown or unreadable return type: the
      ``final_answer`` (else the message's own text) as a plain answer.

    ``Finish`` beside other tool calls is dropped and the other calls run (the model is
    called again after their results).  Counters ``indecisive_talk_to_user`` /
    ``indecisive_change_tools`` go into ``state["toolguard"]``.  Streaming: the rewrite
    happens when the model call returns, so a ``messages`` stream still shows the
    ``Finish`` call's chunks; the ``updates`` stream and the state carry the rewritten
    message.

    Put it last in ``middleware=[...]`` (innermost, next to the model: ``wrap_*`` hooks
    nest with the first outermost), after :class:`~toolguard.GuardMiddleware`, so the
    model's answer is rewritten before the guard reads it and the guard never sees
    ``Finish`` as a call to a tool the agent lacks.
    """

    state_schema = ToolguardState

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Any]
    ) -> Any:
        """Offer ``Finish``, call the model, rewrite a ``Finish`` answer."""
        if _has_own_finish(request.tools):
            return handler(request)
        return _rewrite(handler(_with_finish(request)))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[Any]]
    ) -> Any:
        """Async twin of :meth:`wrap_model_call`."""
        if _has_own_finish(request.tools):
            return await handler(request)
        return _rewrite(await handler(_with_finish(request)))


def _tool_name(tool: BaseTool | Mapping[str, Any]) -> str | None:
    if isinstance(tool, BaseTool):
        return tool.name
    fn = tool.get("function", tool)
    return fn.get("name") if isinstance(fn, Mapping) else None


def _has_own_finish(tools: list[BaseTool | dict[str, Any]]) -> bool:
    return any(_tool_name(t) == FINISH for t in tools)


def _with_finish(request: ModelRequest[Any]) -> ModelRequest[Any]:
    return request.override(tools=[*request.tools,
                                   {"type": "function", "function": finish_tool()}])


def resolve_finish(message: AIMessage) -> tuple[AIMessage, str | None]:
    """``message`` with its ``Finish`` handled as :class:`IndecisiveActionsMiddleware` does.

    Returns:
        ``(message, None)`` unchanged when it calls no ``Finish``; else the rewritten
        message (same id) and the counter it adds (``indecisive_talk_to_user`` /
        ``indecisive_change_tools``, or ``None``).
    """
    finishes = [c for c in message.tool_calls if c["name"] == FINISH]
    bad = [c for c in message.invalid_tool_calls if c.get("name") == FINISH]
    if not finishes and not bad:
        return message, None
    others = [c for c in message.tool_calls if c["name"] != FINISH]
    other_bad = [c for c in message.invalid_tool_calls if c.get("name") != FINISH]
    if others or other_bad:
        return message.model_copy(update={"tool_calls": others,
                                          "invalid_tool_calls": other_bad}), None
    args = finishes[0]["args"] if finishes else {}
    rtype = args.get("return_type")
    answer = args.get("final_answer")
    text = answer.strip() if isinstance(answer, str) else ""
    outcome = _OUTCOMES.get(rtype) if isinstance(rtype, str) else None
    counter = None
    if outcome is not None:
        mark, counter, default = outcome
        new = user_message(text or default, mark, finish=rtype)
        emit({"event": "indecisive_action", "return_type": rtype, "mark": mark})
    else:
        new = AIMessage(text or message_text(message),
                        response_metadata=dict(message.response_metadata or {}))
    new.id = message.id
    return new, counter


def _rewrite(response: Any) -> Any:
    """``response`` with its ``AIMessage``'s ``Finish`` handled (see the class docstring)."""
    if isinstance(response, ExtendedModelResponse):
        inner = response.model_response
    elif isinstance(response, ModelResponse):
        inner = response
    elif isinstance(response, AIMessage):
        inner = ModelResponse(result=[response])
    else:
        return response
    index = next((i for i in range(len(inner.result) - 1, -1, -1)
                  if isinstance(inner.result[i], AIMessage)), None)
    if index is None:
        return response
    message = inner.result[index]
    assert isinstance(message, AIMessage)
    new, counter = resolve_finish(message)
    if new is message:
        return response
    update: dict[str, Any] = {"toolguard": {counter: 1}} if counter else {}
    result = [*inner.result[:index], new, *inner.result[index + 1:]]
    rebuilt = ModelResponse(result=result, structured_response=inner.structured_response)
    if isinstance(response, ExtendedModelResponse):
        rebuilt_ext = ExtendedModelResponse(model_response=rebuilt, command=response.command)
        return with_update(rebuilt_ext, update) if update else rebuilt_ext
    return with_update(rebuilt, update) if update else rebuilt
