"""What every toolguard middleware shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Generic, NotRequired, TypeVar

from langchain.agents.middleware.internal_call_transformer import InternalCallTransformer
from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelResponse,
    OmitFromInput,
)
from langgraph.types import Command, TracePolicy, omit_payload

from toolguard.state import merge_counters

S = TypeVar("S", bound=AgentState[Any])


class ToolguardMiddleware(AgentMiddleware[S, Any, Any], Generic[S]):
    """Base of toolguard's middleware.

    Declares LangChain's ``InternalCallTransformer``, so the model calls toolguard makes
    itself (LLM judges, the pre-check, the KG generator; all tagged with
    :func:`toolguard.internal.internal_config`) stay out of the agent's message stream, and
    a ``trace_policy`` that keeps the conversation out of toolguard's own hook spans
    (``TracePolicy(process_inputs=omit_payload)``, as LangChain's ``ToolErrorMiddleware``
    and ``ModelRouterMiddleware`` do): a trace shows each toolguard hook and its timing,
    while the messages are recorded once, on the model-call span.  Set an instance's
    ``trace_policy`` to ``None`` (or another ``TracePolicy``) to trace its inputs.
    """

    transformers: Sequence[Any] = (InternalCallTransformer,)
    trace_policy: TracePolicy | None = TracePolicy(process_inputs=omit_payload)


class ToolguardState(AgentState[Any]):
    """State keys every toolguard middleware may write (shared, so schemas merge).

    - ``toolguard``: counters over the thread (the guard's ``checked``, ``allowed``,
      ``blocked``, ``asked_user``, ``change_tools`` and one per hallucination kind; the
      pre-check's ``precheck_proceed`` / ``precheck_ask_user`` /
      ``precheck_no_suitable_tool``; the loop guard's ``loop_nudges`` / ``loop_stops``);
      summed by :func:`~toolguard.state.merge_counters`; in the agent's output.
    - ``kg_grounding``: values :class:`~toolguard.KGResolveMiddleware` resolved for the
      current request; the guard counts them as grounded.
    """

    toolguard: NotRequired[Annotated[dict[str, int], OmitFromInput, merge_counters]]
    kg_grounding: NotRequired[Annotated[list[str], OmitFromInput]]


def with_update(response: Any, update: dict[str, Any]) -> ExtendedModelResponse[Any]:
    """A model-call result with ``update`` applied as state after the model node.

    ``response`` is what a ``wrap_model_call`` handler returned (``ModelResponse``,
    ``AIMessage`` or ``ExtendedModelResponse``); a command it already carries is kept and
    merged (``toolguard`` counters add up, other keys: ``update`` wins).
    """
    if isinstance(response, ExtendedModelResponse):
        inner, command = response.model_response, response.command
    elif isinstance(response, ModelResponse):
        inner, command = response, None
    else:
        inner, command = ModelResponse(result=[response]), None
    body = dict(command.update) if command is not None and isinstance(command.update, dict) \
        else {}
    merged = {**body, **update}
    if "toolguard" in body and "toolguard" in update:
        merged["toolguard"] = merge_counters(body["toolguard"], update["toolguard"])
    return ExtendedModelResponse(model_response=inner, command=Command(update=merged))
