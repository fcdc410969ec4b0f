"""The guarded RelyToolBench agent: ``create_agent`` with toolguard's ``GuardMiddleware``.

The shipped path, not the engine: the agent is ``langchain.agents.create_agent`` over one
tool per API (answered by the :class:`~toolguard_evals.relytoolbench.simulator.ApiSimulator`)
with :class:`toolguard.GuardMiddleware` (deterministic detectors over the case's specs), so
every proposed call is checked, refused calls are answered by the middleware's error
``ToolMessage`` and an ``ask_user`` / ``change_tools`` verdict ends the run (TalkToUser /
ChangeTools).  The episode protocol is the same as the unguarded loop of
:mod:`~toolguard_evals.relytoolbench.agent`, supplied by two harness pieces:

- :class:`EpisodeModel`, the model under test behind the benchmark's format: the conversation
  is rendered as that loop renders it (ReAct: ``Observation:`` user messages; native: the
  case's OpenAI functions and ``Finish``), and the reply is read back into tool calls.
  ``Finish`` is the benchmark's end-of-episode action, not an API: it is kept out of the
  agent's tools (the guard never sees it, as in the paper's runner).
- :class:`EpisodeControl` (middleware): a reply without a call gets the format reminder, a
  valid ``Finish`` ends the run, an invalid one is answered with the environment's error,
  and at most ``max_steps`` model turns run.

The :class:`~toolguard_evals.relytoolbench.agent.Episode` is read back from the final
messages: the calls in order, toolguard's verdict from the mark on its ``ToolMessage``
(:func:`toolguard.conversation.toolguard_mark`).  Calls in one native turn run together
(``ToolNode``), where the unguarded loop stops at a ``Finish``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool
from langgraph.runtime import Runtime
from pydantic import ConfigDict

from toolguard import GuardMiddleware
from toolguard.conversation import message_text, toolguard_mark
from toolguard.guard import Guard
from toolguard_evals.relytoolbench.agent import (
    FORMATS,
    NATIVE_NUDGE,
    REACT_NUDGE,
    AgentFormat,
    EndReason,
    Episode,
    Step,
    clip,
    functions,
    parse_arguments,
    parse_finish,
    parse_react,
    system_prompt,
    toolbench_function,
    user_prompt,
)
from toolguard_evals.relytoolbench.data import RtbCase
from toolguard_evals.relytoolbench.simulator import ApiSimulator

_KEY = "rtb"
"""``additional_kwargs`` key of what :class:`EpisodeModel` read from a reply."""
_FINISH_ERROR = "rtb_finish_error"
_MODEL_ERRORS = (openai.APITimeoutError, openai.BadRequestError,
                 openai.UnprocessableEntityError)


@dataclass
class _Episode:
    """What the model adapter and the control middleware of one episode share."""

    case: RtbCase
    fmt: AgentFormat
    max_steps: int
    turns: int = 0
    error: str | None = None
    handled: set[str] = field(default_factory=set)
    raw_args: dict[tuple[str, str], str] = field(default_factory=dict)


# ---------------------------------------------------------------------------- the model
class EpisodeModel(BaseChatModel):
    """The model under test behind RelyToolBench's format (see the module docstring).

    Each reply is an ``AIMessage`` whose ``tool_calls`` are the API calls it makes (args
    that are not a JSON object: ``invalid_tool_calls``); ``additional_kwargs["rtb"]`` keeps
    the turn number, the thought, every action in order (``Finish`` too) with its raw
    arguments text, and a model error.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: Any
    episode: Any
    bound: Any = None

    @property
    def _llm_type(self) -> str:
        return "relytoolbench-episode"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """ReAct: the tools are listed in the system prompt; native: the case's functions."""
        ep: _Episode = self.episode
        if ep.fmt == "react":
            return self
        return self.model_copy(update={"bound": self.inner.bind_tools(functions(ep.case))})

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        raise NotImplementedError("the RelyToolBench agent runs async")

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        ep: _Episode = self.episode
        ep.turns += 1
        model = self.bound if self.bound is not None else self.inner
        try:
            reply = await model.ainvoke(render(messages, ep.fmt))
        except _MODEL_ERRORS as exc:
            ep.error = f"{type(exc).__name__}: {exc}"[:500]
            message = AIMessage("", additional_kwargs={_KEY: {"turn": ep.turns - 1,
                                                              "error": ep.error}})
            return ChatResult(generations=[ChatGeneration(message=message)])
        if not isinstance(reply, AIMessage):
            reply = AIMessage(message_text(reply))
        message = read_reply(reply, ep)
        return ChatResult(generations=[ChatGeneration(message=message)])


def render(messages: Sequence[BaseMessage], fmt: AgentFormat) -> list[BaseMessage]:
    """The agent's conversation as the unguarded loop shows it to the model."""
    out: list[BaseMessage] = []
    for m in messages:
        info = m.additional_kwargs.get(_KEY) if isinstance(m, AIMessage) else None
        if isinstance(m, SystemMessage):
            out.append(m)
        elif isinstance(m, AIMessage):
            if fmt == "react" or not info or not info.get("actions"):
                out.append(AIMessage(message_text(m)))
            else:  # every action of the turn, with the id its answer refers to
                out.append(AIMessage(message_text(m), tool_calls=[
                    {"name": a["name"], "args": parse_arguments(a["args_text"]) or {},
                     "id": a["id"], "type": "tool_call"} for a in info["actions"]]))
        elif isinstance(m, ToolMessage):
            out.append(HumanMessage(f"Observation: {message_text(m)}") if fmt == "react"
                       else ToolMessage(message_text(m), tool_call_id=m.tool_call_id,
                                        name=m.name))
        elif fmt == "native" and m.additional_kwargs.get(_FINISH_ERROR):
            out.append(ToolMessage(message_text(m),
                                   tool_call_id=str(m.additional_kwargs[_FINISH_ERROR]),
                                   name="Finish"))
        else:
            out.append(m)
    return out


def read_reply(reply: AIMessage, ep: _Episode) -> AIMessage:
    """The reply as the agent's ``AIMessage``: API calls as tool calls, ``Finish`` aside."""
    text = message_text(reply)
    turn = ep.turns - 1
    actions: list[dict[str, str]] = []  # {id, name, args_text} in order
    if ep.fmt == "react":
        parsed = parse_react(text)
        thought = parsed.thought if parsed is not None else text
        if parsed is not None:
            actions.append({"id": f"call_{turn}_0", "name": parsed.action,
                            "args_text": parsed.action_input})
    else:
        thought = text
        for tc in reply.tool_calls:
            actions.append({"name": str(tc.get("name") or ""),
                            "args_text": json.dumps(tc.get("args") or {},
                                                    ensure_ascii=False)})
        for itc in reply.invalid_tool_calls:
            actions.append({"name": str(itc.get("name") or ""),
                            "args_text": str(itc.get("args") or "")})
        for k, a in enumerate(actions):  # unique ids across the episode
            a["id"] = f"call_{turn}_{k}"
    calls: list[Any] = []
    invalid: list[Any] = []
    for a in actions:
        if a["name"] == "Finish":
            continue
        args = parse_arguments(a["args_text"])
        if args is None:
            invalid.append({"name": a["name"], "args": a["args_text"], "id": a["id"],
                            "error": "not a JSON object", "type": "invalid_tool_call"})
        else:
            calls.append({"name": a["name"], "args": args, "id": a["id"],
                          "type": "tool_call"})
            ep.raw_args[(a["name"], _canonical(args))] = a["args_text"]
    return AIMessage(text, tool_calls=calls, invalid_tool_calls=invalid,
                     additional_kwargs={_KEY: {"turn": turn, "thought": thought.strip()[:2000],
                                               "actions": actions}})


def _canonical(args: Mapping[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)


# ---------------------------------------------------------------------------- control
class EpisodeControl(AgentMiddleware[AgentState[Any], Any]):
    """Nudges, ``Finish`` and the step budget of one episode (see the module docstring)."""

    def __init__(self, episode: _Episode) -> None:
        super().__init__()
        self.episode = episode

    @hook_config(can_jump_to=["end", "model"])
    async def aafter_model(self, state: AgentState[Any],
                           runtime: Runtime[Any]) -> dict[str, Any] | None:
        """End on an error or a valid ``Finish``; nudge a reply without an action."""
        message = _last_turn(state["messages"])
        if message is None:
            return None
        info = message.additional_kwargs[_KEY]
        if info.get("error"):
            return {"jump_to": "end"}
        if message.tool_calls or message.invalid_tool_calls:
            return None  # the calls run first (guard, then tools)
        if not info.get("actions"):
            if self.episode.turns >= self.episode.max_steps:
                return {"jump_to": "end"}
            nudge = REACT_NUDGE if self.episode.fmt == "react" else NATIVE_NUDGE
            return {"messages": [HumanMessage(nudge)], "jump_to": "model"}
        return self._finish(info)

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: AgentState[Any],
                            runtime: Runtime[Any]) -> dict[str, Any] | None:
        """After the calls of a turn: its ``Finish``, then the step budget."""
        message = _last_turn(state["messages"])
        update = self._finish(message.additional_kwargs[_KEY]) if message is not None else None
        if update is not None and update["jump_to"] == "end":
            return update
        out = {"messages": update["messages"]} if update is not None else {}
        if self.episode.turns >= self.episode.max_steps:
            out["jump_to"] = "end"
        return out or None

    def _finish(self, info: Mapping[str, Any]) -> dict[str, Any] | None:
        finish = next((a for a in info.get("actions") or [] if a["name"] == "Finish"), None)
        if finish is None or finish["id"] in self.episode.handled:
            return None
        self.episode.handled.add(finish["id"])
        error = finish_error(finish["args_text"])
        if not error:
            return {"jump_to": "end"}
        if self.episode.fmt == "react":
            return {"messages": [HumanMessage(f"Observation: {error}")], "jump_to": "model"}
        return {"messages": [HumanMessage(error, additional_kwargs={_FINISH_ERROR:
                                                                    finish["id"]})],
                "jump_to": "model"}


def _last_turn(messages: Sequence[BaseMessage]) -> AIMessage | None:
    for m in reversed(messages):
        if isinstance(m, AIMessage) and _KEY in m.additional_kwargs:
            return m
    return None


def finish_error(args_text: str) -> str:
    """The environment's answer to an invalid ``Finish`` ("" when it is valid)."""
    args = parse_arguments(args_text)
    rtype, answer = parse_finish(args_text)
    if rtype is None:
        return ('{error:"must have "return_type""}' if args is None or "return_type" not in args
                else '{error:""return_type" is not a valid choice"}')
    if rtype == "give_answer" and answer is None:
        return '{error:"must have "final_answer""}'
    return ""


# ---------------------------------------------------------------------------- tools
def api_tools(case: RtbCase, simulator: ApiSimulator, episode: _Episode) -> list[StructuredTool]:
    """One tool per API of the case, answered by the simulator (observations clipped)."""
    def make(name: str) -> StructuredTool:
        fn = toolbench_function(case, name)

        async def call(**kwargs: Any) -> str:
            text = episode.raw_args.get((name, _canonical(kwargs)),
                                        json.dumps(kwargs, ensure_ascii=False))
            return clip(await simulator.respond(case, name, text))

        return StructuredTool(name=name, description=fn["description"],
                              args_schema=fn["parameters"], coroutine=call)

    return [make(s.name) for s in case.specs]


# ---------------------------------------------------------------------------- the episode
async def run_guarded_episode(case: RtbCase, model: BaseChatModel, simulator: ApiSimulator, *,
                              fmt: AgentFormat = "react", max_steps: int = 6,
                              guard: Guard | None = None) -> Episode:
    """Run one episode through ``create_agent`` + ``GuardMiddleware``.

    Args:
        case: The query.
        model: The agent's chat model.
        simulator: Answers the API calls.
        fmt: ``react`` or ``native``.
        max_steps: Model turns at most, >= 1.
        guard: The engine behind the middleware (default: ``Guard(case.specs)``, the
            deterministic detectors).

    Returns:
        The :class:`~toolguard_evals.relytoolbench.agent.Episode` (``guarded=True``).

    Raises:
        ValueError: ``max_steps`` < 1 or an unknown format.
        openai.APIConnectionError: The endpoint cannot be reached.
    """
    if max_steps < 1:
        raise ValueError("max_steps must be >= 1")
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    ep = _Episode(case=case, fmt=fmt, max_steps=max_steps)
    middleware: list[Any] = [EpisodeControl(ep),  # the guard last, as the README says
                             GuardMiddleware(guard=guard or Guard(case.specs), ask_user="end")]
    agent = create_agent(EpisodeModel(inner=model, episode=ep), api_tools(case, simulator, ep),
                         system_prompt=system_prompt(case, fmt), middleware=middleware)
    result = await agent.ainvoke({"messages": [HumanMessage(user_prompt(case))]},
                                 {"recursion_limit": 10 * max_steps + 20})
    return episode_of(case, fmt, list(result["messages"]), model_calls=ep.turns,
                      error=ep.error)


def episode_of(case: RtbCase, fmt: AgentFormat, messages: Sequence[BaseMessage], *,
               model_calls: int, error: str | None = None) -> Episode:
    """The :class:`~toolguard_evals.relytoolbench.agent.Episode` of a finished run."""
    answers = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    steps: list[Step] = []
    end: EndReason | None = "model_error" if error else None
    final_answer = ""
    for m in messages:
        info = m.additional_kwargs.get(_KEY) if isinstance(m, AIMessage) else None
        if not info or info.get("error"):
            continue
        turn, thought = int(info["turn"]), str(info.get("thought", ""))
        if not info.get("actions"):
            steps.append(Step(turn=turn, kind="no_action", thought=thought))
            continue
        for a in info["actions"]:
            args = parse_arguments(a["args_text"])
            if a["name"] == "Finish":
                problem = finish_error(a["args_text"])
                steps.append(Step(turn=turn, kind="finish", thought=thought, action="Finish",
                                  action_input=a["args_text"], args=args,
                                  observation=problem))
                if not problem and end is None:
                    rtype, answer = parse_finish(a["args_text"])
                    end = rtype
                    final_answer = answer or "" if rtype == "give_answer" else ""
                continue
            answer_msg = answers.get(a["id"])
            if answer_msg is None:
                continue  # the run ended before this call was answered
            mark = toolguard_mark(answer_msg)
            verdict: dict[str, Any] | None = {"action": "allow", "hallucination": None,
                                              "reason": ""}
            executed = mark is None
            if mark is not None and "action" in mark:
                verdict = {"action": mark["action"], "hallucination": mark.get("hallucination"),
                           "reason": str(mark.get("reason") or "")[:1000]}
                if mark["action"] in ("ask_user", "change_tools") and end is None:
                    end = "guard_ask_user" if mark["action"] == "ask_user" \
                        else "guard_change_tools"
            elif mark is not None:  # closed unrun: the turn ended first
                verdict = {"action": "not_run", "hallucination": None,
                           "reason": str(mark.get("closed") or "")}
            steps.append(Step(turn=turn, kind="call", thought=thought, action=a["name"],
                              action_input=a["args_text"], args=args, verdict=verdict,
                              executed=executed, observation=message_text(answer_msg)))
    return Episode(case_id=case.id, subset=case.subset, group=case.group, query=case.query,
                   format=fmt, guarded=True, steps=steps, end=end or "max_steps",
                   final_answer=final_answer, model_calls=model_calls, error=error)


__all__ = ["EpisodeControl", "EpisodeModel", "episode_of", "finish_error", "read_reply",
           "render", "run_guarded_episode"]
