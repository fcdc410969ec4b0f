"""The guarded CRITICTOOL system: ``create_agent`` with toolguard's middleware.

A record's last step (the call whose answer the model reacts to) is replayed through
``langchain.agents.create_agent`` with :class:`toolguard.RetryControllerMiddleware` and
:class:`toolguard.GuardMiddleware` (the guard last), over one tool per entry of the record's
tool list: the guard checks the call against the history, the controller runs it against
the record's environment (internal records: the recorded answer; external ones: an
environment that keeps failing with the record's error, as CriticTool's protocol assumes).
The answer the agent writes for the call is what the model under test then sees in place of
the recorded one; the model's generations follow CriticTool's protocol
(:func:`toolguard_evals.critictool.run.generate_case`).  A refused call's answer gets the
CRITICTOOL category its verdict maps to, as a reflecting agent would be told.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import StructuredTool

from toolguard import GuardMiddleware, RetryControllerMiddleware
from toolguard.conversation import message_text, toolguard_mark
from toolguard.guard import Guard
from toolguard.retry import CATEGORY_TEXT, RetryController, RetryPolicy, classify_result
from toolguard.testing import ScriptedChatModel
from toolguard.types import Verdict
from toolguard_evals.critictool.data import CriticToolRecord, Mode


def _tools(specs: Sequence[Any], answer: Any) -> list[StructuredTool]:
    """One tool per spec name; every call is answered by ``answer(name)``."""
    def make(spec: Any) -> StructuredTool:
        async def call(**_: Any) -> str:
            return str(answer(spec.name))

        return StructuredTool(name=spec.name, description=spec.description or spec.name,
                              args_schema=dict(spec.parameters), coroutine=call)

    seen: dict[str, Any] = {}
    for spec in specs:
        seen.setdefault(spec.name, spec)
    return [make(s) for s in seen.values()]


async def _replay(history: Sequence[BaseMessage], call: dict[str, Any], specs: Sequence[Any],
                  answer: Any, controller: RetryController) -> ToolMessage | None:
    """Run ``call`` after ``history`` through the agent; its answer (``None``: none)."""
    model = ScriptedChatModel(script=[AIMessage("", tool_calls=[call]), AIMessage("")])
    middleware: list[Any] = [RetryControllerMiddleware(controller),
                             GuardMiddleware(guard=Guard(list(specs)), ask_user="end")]
    agent = create_agent(model, _tools(specs, answer), middleware=middleware)
    state: Any = {"messages": list(history)}
    result = await agent.ainvoke(state)
    return next((m for m in result["messages"] if isinstance(m, ToolMessage)
                 and m.tool_call_id == call["id"]), None)


def verdict_category(v: Verdict) -> str | None:
    """The CRITICTOOL category (toolguard's controller names) a refusal maps to."""
    codes = {e.code for e in v.evidence}
    if v.hallucination == "type":
        return "tool_hallucination" if "unknown_tool" in codes else "tool_selection"
    if v.hallucination == "format":
        return ("parameter_key" if codes & {"missing_required", "unexpected_param"}
                else "parameter_value")
    if v.hallucination == "content":
        return "parameter_value"
    return None


async def agent_internal(record: CriticToolRecord, specs: Sequence[Any],
                         history: Sequence[BaseMessage],
                         ) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """The ``llm`` prompt of an internal record after the agent answered its last call.

    ``history`` is the record as a tool-calling conversation ending with the last call and
    its recorded answer.  Returns ``(prompt, info)`` as
    :func:`toolguard_evals.critictool.run.guard_internal` does.
    """
    prompt = record.prompt("llm")
    none = {"action": None, "hallucination": None, "category": None, "feedback": None}
    if len(history) < 2 or not isinstance(history[-1], ToolMessage) or not isinstance(
            history[-2], AIMessage) or not history[-2].tool_calls:
        return prompt, none
    original = history[-1]
    call = dict(history[-2].tool_calls[0])
    answered = await _replay(history[:-2], call, specs, lambda _name: message_text(original),
                             RetryController(sleep=lambda _s: None))
    if answered is None:  # pragma: no cover - the agent answers every call
        return prompt, none
    feedback = message_text(answered)
    mark = toolguard_mark(answered)
    if mark is not None and "action" in mark:
        verdict = Verdict.model_validate(mark)
        category = verdict_category(verdict)
        if category:
            feedback += f"\nError category: {CATEGORY_TEXT[category]}."
        action, hallucination = verdict.action, verdict.hallucination
    else:
        action, hallucination = "allow", None
        category = None if feedback == message_text(original) else classify_result(
            original).category
    prompt[-1] = {"role": prompt[-1]["role"], "content": feedback}
    return prompt, {"action": action, "hallucination": hallucination, "category": category,
                    "feedback": feedback}


async def agent_external(record: CriticToolRecord, mode: Mode, specs: Sequence[Any],
                         history: Sequence[BaseMessage], *, retry_limit: int,
                         ) -> tuple[list[dict[str, str]], int, str]:
    """The ``mode`` prompt of an external record after the agent ran its failed call.

    Returns ``(prompt, controller retries, the agent's answer)`` as
    :func:`toolguard_evals.critictool.run.guard_external` does.

    Raises:
        ValueError: If ``mode`` is not ``skip`` or ``finish``.
    """
    policy, prompt, gold0, error = record.external(mode)
    attempts = 0

    def failing(_name: str) -> str:
        nonlocal attempts
        attempts += 1
        return error

    read_only = {str(gold0["name"])} if record.meta.get("read_only") else set()
    controller = RetryController(
        RetryPolicy(max_retries=retry_limit, on_failure=policy, read_only_tools=read_only),
        sleep=lambda _s: None)
    call = {"name": gold0["name"], "args": gold0["args"] if isinstance(gold0["args"], dict)
            else {}, "id": "call_failed", "type": "tool_call"}
    answered = await _replay(history, call, specs, failing, controller)
    feedback = message_text(answered) if answered is not None else ""
    prompt[-1] = {"role": prompt[-1]["role"], "content": feedback}
    return prompt, max(attempts - 1, 0), feedback


__all__ = ["agent_external", "agent_internal", "verdict_category"]
