"""The RelyToolBench agent loop: the paper's ReAct text format or native tool calling.

One episode = one query.  The agent gets the system prompt of the paper's Appendix F
(``prompts/rtb_agent.md``: ToolBench's "You are AutoGPT" prompt with RelyToolBench's task
rules) and the query followed by ``"Begin!"``, then alternates model turns and tool
answers until it calls ``Finish`` or ``max_steps`` model turns are spent.

Formats:

- ``react``: the model writes ``Thought: ... Action: <name> Action Input: <JSON>``
  (ToolBench's ``react_parser`` format; :func:`parse_react` is a more forgiving version);
  tool answers come back as a user message ``Observation: <answer>``.
- ``native``: the tools (and ``Finish``) are sent as OpenAI tools; answers are
  ``ToolMessage`` s.  Several calls in one turn run in order.

``Finish`` takes ``return_type`` in ``give_answer`` / ``give_up_and_restart`` /
``give_up_and_change_tools`` / ``give_up_and_talk_to_user`` (the enum of the authors'
``rapidapi_multithread.py``; the spelling ``give_up_and_talkto_user`` is accepted too) and
``final_answer``; a ``Finish`` without a valid ``return_type``, or ``give_answer`` without
``final_answer``, is answered with the environment's error and the episode goes on, as in
``rapidapi_wrapper._step``.

With a :class:`toolguard.Guard` (the ``guarded_engine`` cross-check; the guarded agent
itself is :mod:`~toolguard_evals.relytoolbench.guarded`) every proposed call is checked
before it reaches the simulator: ``block`` verdicts become the tool answer, ``ask_user``
ends the episode as TalkToUser and ``change_tools`` as ChangeTools.

A model turn that contains no call is answered with a reminder of the format (one user
message) and counts as a step.  Observations are cut to 1024 characters (ToolBench's
``max_observation_length``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from pydantic import BaseModel, ConfigDict, Field

from toolguard.context import message_text
from toolguard.guard import Guard
from toolguard.middleware.indecisive import RETURN_TYPES as _TOOLGUARD_RETURN_TYPES
from toolguard.middleware.indecisive import finish_tool
from toolguard_evals.prompts import load_prompt
from toolguard_evals.relytoolbench.data import RtbCase

if TYPE_CHECKING:
    from toolguard_evals.relytoolbench.simulator import ApiSimulator

AgentFormat = Literal["react", "native"]
FORMATS: tuple[AgentFormat, ...] = get_args(AgentFormat)
ReturnType = Literal["give_answer", "give_up_and_restart", "give_up_and_change_tools",
                     "give_up_and_talk_to_user"]
RETURN_TYPES: tuple[ReturnType, ...] = get_args(ReturnType)
assert RETURN_TYPES == _TOOLGUARD_RETURN_TYPES  # one Finish, served and evaluated
EndReason = Literal["give_answer", "give_up_and_restart", "give_up_and_change_tools",
                    "give_up_and_talk_to_user", "guard_ask_user", "guard_change_tools",
                    "max_steps", "model_error"]
"""How an episode ended: a ``Finish`` return type, a guard verdict that ends the run
(``ask_user`` -> TalkToUser, ``change_tools`` -> ChangeTools), the step budget, or a model
request that timed out or was refused (e.g. the prompt exceeded the context window)."""
Indecisive = Literal["TalkToUser", "ChangeTools"]
INDECISIVE_END: dict[str, Indecisive] = {
    "give_up_and_talk_to_user": "TalkToUser",
    "guard_ask_user": "TalkToUser",
    "give_up_and_change_tools": "ChangeTools",
    "guard_change_tools": "ChangeTools",
}
MAX_OBSERVATION_CHARS = 1024
REACT_FORMAT = "Your output should follow this format:\nThought:\nAction:\nAction Input:\n"
REACT_NUDGE = ("Your reply had no action. Reply in the format\nThought: ...\nAction: "
               "<function name>\nAction Input: <JSON arguments>\nand call Finish at the end.")
NATIVE_NUDGE = "Continue: call a function, and call Finish at the end."


class Step(BaseModel):
    """One proposed action of an episode.

    Attributes:
        turn: Index of the model turn that proposed it (0-based).
        kind: ``call`` (a tool), ``finish`` (a ``Finish`` call) or ``no_action`` (the turn
            had no call).
        thought: The turn's text before the action (ReAct) or its content (native).
        action: The tool name as written by the model.
        action_input: The arguments as text (JSON for native calls).
        args: The parsed arguments, or ``None`` when they are not a JSON object.
        verdict: Guarded runs: ``{"action", "hallucination", "reason"}`` of the guard.
        executed: Whether the call reached the simulated API.
        observation: What the model was told (tool answer, guard feedback, error).
    """

    model_config = ConfigDict(frozen=True)

    turn: int
    kind: Literal["call", "finish", "no_action"]
    thought: str = ""
    action: str = ""
    action_input: str = ""
    args: dict[str, Any] | None = None
    verdict: dict[str, Any] | None = None
    executed: bool = False
    observation: str = ""


class Episode(BaseModel):
    """A finished episode (the cached generation output, JSON via ``model_dump``).

    Attributes:
        case_id / subset / group / query: From the
        :class:`~toolguard_evals.relytoolbench.data.RtbCase`.
        format: ``react`` or ``native``.
        guarded: Whether the guard checked the calls.
        steps: Every proposed action in order.
        end: See :data:`EndReason`.
        final_answer: ``Finish``'s ``final_answer`` ("" unless ``end == "give_answer"``).
        model_calls: Model requests made.
        error: The model error for ``end == "model_error"``.
    """

    model_config = ConfigDict(frozen=True)

    case_id: str
    subset: str
    group: str
    query: str
    format: AgentFormat
    guarded: bool
    steps: list[Step] = Field(default_factory=list)
    end: EndReason
    final_answer: str = ""
    model_calls: int = 0
    error: str | None = None

    @property
    def executed_calls(self) -> list[Step]:
        """Tool calls that reached the simulated API (``Finish`` excluded).

        The paper's ``total_tool_calling``.
        """
        return [s for s in self.steps if s.kind == "call" and s.executed]

    @property
    def blocked_calls(self) -> list[Step]:
        """Tool calls the guard kept from the API."""
        return [s for s in self.steps if s.kind == "call" and not s.executed]

    @property
    def indecisive(self) -> Indecisive | None:
        """TalkToUser / ChangeTools when the episode ended with an indecisive action."""
        return INDECISIVE_END.get(self.end)


# ---------------------------------------------------------------------------- prompts
def toolbench_function(case: RtbCase, name: str) -> dict[str, Any]:
    """The OpenAI function dict of one API.

    Described as ToolBench's ``api_json_to_openai_json`` does (``required`` and
    ``optional`` name lists).

    Raises:
        KeyError: ``name`` is not one of the case's APIs.
    """
    spec = case.spec(name)
    api = case.api(name)
    if spec is None or api is None:
        raise KeyError(name)
    tool = _standard_tool(str(api.get("tool_name", "")))
    desc = f'This is the subfunction for tool "{tool}", you can use this tool.'
    api_desc = str(api.get("api_description") or "").strip()
    if api_desc:
        desc += f'The description of this function is: "{api_desc[:256]}"'
    optional = [p for p in spec.properties if p not in spec.required]
    params = {"type": "object", "properties": spec.properties,
              "required": list(spec.required), "optional": optional}
    return {"name": name, "description": desc, "parameters": params}


def finish_function() -> dict[str, Any]:
    """``Finish`` as the authors' ``rapidapi_multithread.py`` defines it.

    The description is verbatim; it is :func:`toolguard.middleware.indecisive.finish_tool`,
    the one served to a Relign-tuned model.
    """
    return finish_tool()


def functions(case: RtbCase) -> list[dict[str, Any]]:
    """The case's APIs and ``Finish``, as OpenAI function dicts."""
    return [toolbench_function(case, s.name) for s in case.specs] + [finish_function()]


def system_prompt(case: RtbCase, fmt: AgentFormat) -> str:
    """The Appendix F system prompt for ``case`` in format ``fmt``."""
    tools: dict[str, list[str]] = {}
    for api in case.apis:
        tools.setdefault(_standard_tool(str(api.get("tool_name", ""))), []).append(
            str(api.get("api_name", "")))
    tool_list = "\n".join(f"{k}.{name}: {', '.join(apis)[:512] or 'None'}"
                          for k, (name, apis) in enumerate(tools.items(), 1))
    react = fmt == "react"
    listing = ("\nSpecifically, you have access to the following APIs: "
               + json.dumps(functions(case), ensure_ascii=False)) if react else ""
    return load_prompt("rtb_agent").format(
        format_instructions=" " + REACT_FORMAT if react else "",
        tool_list=tool_list, api_listing=listing).strip()


def user_prompt(case: RtbCase) -> str:
    """ToolBench's ``FORMAT_INSTRUCTIONS_USER_FUNCTION``: the query, then ``Begin!``."""
    return f"\n{case.query}\nBegin!\n"


def _standard_tool(name: str) -> str:
    text = re.sub(r"[^\u4e00-\u9fa5a-zA-Z0-9_]", "_", name)
    text = re.sub(r"_+", "_", text).lower().strip("_")
    return "get_" + text if text and text[0].isdigit() else text


# ---------------------------------------------------------------------------- parsing
class ReactAction(BaseModel):
    """A parsed ReAct turn."""

    model_config = ConfigDict(frozen=True)

    thought: str
    action: str
    action_input: str


_LABEL = r"[ \t*_]*[:：][ \t*_]*"
_ACTION = re.compile(rf"(?im)^[ \t*#>`-]*action(?![ \t]*input){_LABEL}")
_INPUT = re.compile(rf"(?im)[ \t*#>`-]*action[ \t_]*input{_LABEL}")
_THOUGHT = re.compile(rf"(?im)^[ \t*#>`-]*thought{_LABEL}")
_STOP = re.compile(r"(?im)^[ \t*#>`-]*(observation|thought|action)[ \t*_]*[:：]")


def parse_react(text: str) -> ReactAction | None:
    """Read ``Thought / Action / Action Input`` from a model turn, forgivingly.

    Accepted beyond ToolBench's ``react_parser``: any letter case, bold/markdown bullets
    before the labels, a full-width colon, a missing ``Thought:`` (the text before
    ``Action:`` is the thought), code fences, an action written ``Finish()`` or quoted, and
    text after the JSON input (cut at the end of the first balanced ``{...}``, or at the
    next ``Observation:``/``Thought:`` line).  Without an ``Action:`` line the turn has no
    action and ``None`` is returned; a missing ``Action Input:`` gives ``""``.
    """
    text = text.replace("\r\n", "\n")
    act = _ACTION.search(text)
    if act is None:
        return None
    head = text[:act.start()]
    th = _THOUGHT.search(head)
    thought = head[th.end():] if th else head
    rest = text[act.end():]
    inp = _INPUT.search(rest)
    if inp is not None:
        name_part, input_part = rest[:inp.start()], rest[inp.end():]
    else:
        name_part, input_part = rest, ""
        nl = rest.find("\n")
        if nl >= 0:
            name_part, input_part = rest[:nl], ""
    action = _clean_action(name_part)
    if not action:
        return None
    return ReactAction(thought=thought.strip(), action=action,
                       action_input=_clean_input(input_part))


def _clean_action(text: str) -> str:
    line = next((ln for ln in text.strip().splitlines() if ln.strip()), "")
    line = line.strip().strip("`*\"' ").strip()
    line = re.sub(r"\(.*\)$", "", line).strip()
    match = re.match(r"[\w.\-]+", line)
    return match.group(0) if match else ""


def _clean_input(text: str) -> str:
    text = text.strip()
    fence = re.match(r"```(?:json)?\s*(.*?)```", text, re.S)
    if fence:
        text = fence.group(1).strip()
    start = text.find("{")
    if start >= 0 and not text[:start].strip():
        end = _balanced_end(text, start)
        if end is not None:
            return text[start:end]
    stop = _STOP.search(text)
    return (text[:stop.start()] if stop else text).strip()


def _balanced_end(text: str, start: int) -> int | None:
    depth = 0
    in_str = False
    escape = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def parse_arguments(text: str) -> dict[str, Any] | None:
    """Arguments text -> dict as the simulator reads it.

    ``""`` is ``{}``, otherwise JSON (``strict=False``: raw newlines inside strings are
    accepted); ``None`` when it is not a JSON object.
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text, strict=False)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_finish(args_text: str) -> tuple[ReturnType | None, str | None]:
    """``Finish``'s ``(return_type, final_answer)``, as ``rapidapi_wrapper._step`` reads them.

    JSON first; otherwise the substring fallbacks of the original (``"return_type": "..."``
    and everything after ``"final_answer": "``).  An unknown return type gives ``None``;
    ``give_up_and_talkto_user`` (the issue's spelling) and ``talk_to_user`` variants map to
    ``give_up_and_talk_to_user``.
    """
    data = parse_arguments(args_text)
    rtype: str | None = None
    answer: str | None = None
    if data is not None:
        rtype = str(data["return_type"]) if "return_type" in data else None
        if "final_answer" in data and data["final_answer"] is not None:
            answer = str(data["final_answer"])
    else:
        m = re.search(r'"return_type"\s*:\s*"([^"]*)"', args_text)
        rtype = m.group(1) if m else None
        key = '"final_answer": "'
        if key in args_text:
            answer = args_text[args_text.find(key) + len(key):].rstrip().rstrip("}").rstrip()
            answer = answer[:-1] if answer.endswith('"') else answer
    return _return_type(rtype), answer


def _return_type(value: str | None) -> ReturnType | None:
    if value is None:
        return None
    norm = value.strip().lower().replace("-", "_").replace(" ", "_")
    if norm in RETURN_TYPES:
        return norm
    if "talk" in norm and "user" in norm:
        return "give_up_and_talk_to_user"
    if "change" in norm and "tool" in norm:
        return "give_up_and_change_tools"
    return None


# ---------------------------------------------------------------------------- the loop
async def run_episode(
    case: RtbCase,
    model: BaseChatModel,
    simulator: ApiSimulator,
    *,
    fmt: AgentFormat = "react",
    guard: Guard | None = None,
    max_steps: int = 6,
) -> Episode:
    """Run one episode.

    Args:
        case: The query.
        model: The agent's chat model.
        simulator: Answers the tool calls (StableToolBench-style LLM simulator).
        fmt: ``react`` or ``native``.
        guard: A :class:`~toolguard.Guard` over ``case.specs`` for a guarded run.
        max_steps: Model turns at most, >= 1.

    Returns:
        The :class:`Episode`.  A model request that times out or is refused (HTTP 4xx,
        e.g. a prompt longer than the context window) ends the episode with
        ``end="model_error"``.

    Raises:
        ValueError: ``max_steps`` < 1 or an unknown format.
        openai.APIConnectionError: The endpoint cannot be reached (not cached: the runner
            retries the case on the next run).
    """
    if max_steps < 1:
        raise ValueError("max_steps must be >= 1")
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    run = _Run(case, simulator, guard)
    messages: list[BaseMessage] = [SystemMessage(system_prompt(case, fmt)),
                                   HumanMessage(user_prompt(case))]
    bound: Any = model.bind_tools(functions(case)) if fmt == "native" else model
    for turn in range(max_steps):
        try:
            reply = await bound.ainvoke(messages)
        except (openai.APITimeoutError, openai.BadRequestError,
                openai.UnprocessableEntityError) as exc:
            run.model_calls += 1
            return run.episode(fmt, "model_error", error=f"{type(exc).__name__}: {exc}"[:500])
        run.model_calls += 1
        if not isinstance(reply, AIMessage):
            reply = AIMessage(message_text(reply))
        if fmt == "react":
            end = await run.react_turn(turn, reply, messages)
        else:
            end = await run.native_turn(turn, reply, messages)
        if end is not None:
            return run.episode(fmt, end)
    return run.episode(fmt, "max_steps")


class _Run:
    """The mutable state of one episode."""

    def __init__(self, case: RtbCase, simulator: ApiSimulator, guard: Guard | None) -> None:
        self.case = case
        self.simulator = simulator
        self.guard = guard
        self.steps: list[Step] = []
        self.final_answer = ""
        self.model_calls = 0
        # the conversation as the guard sees it: query, then every call and its answer
        self.history: list[BaseMessage] = [HumanMessage(case.query)]
        self._ids = 0

    def episode(self, fmt: AgentFormat, end: EndReason, *, error: str | None = None) -> Episode:
        return Episode(case_id=self.case.id, subset=self.case.subset, group=self.case.group,
                       query=self.case.query, format=fmt, guarded=self.guard is not None,
                       steps=self.steps, end=end, final_answer=self.final_answer,
                       model_calls=self.model_calls, error=error)

    async def react_turn(self, turn: int, reply: AIMessage,
                         messages: list[BaseMessage]) -> EndReason | None:
        text = message_text(reply)
        parsed = parse_react(text)
        messages.append(AIMessage(text))
        if parsed is None:
            self.steps.append(Step(turn=turn, kind="no_action", thought=text.strip()[:2000]))
            messages.append(HumanMessage(REACT_NUDGE))
            return None
        end, observation = await self.act(turn, parsed.thought, parsed.action,
                                          parsed.action_input)
        if end is None:
            messages.append(HumanMessage(f"Observation: {observation}"))
        return end

    async def native_turn(self, turn: int, reply: AIMessage,
                          messages: list[BaseMessage]) -> EndReason | None:
        calls: list[tuple[str, str, str]] = []  # (id, name, args text)
        for tc in reply.tool_calls:
            calls.append((tc.get("id") or self._new_id(), str(tc.get("name") or ""),
                          json.dumps(tc.get("args") or {}, ensure_ascii=False)))
        for itc in reply.invalid_tool_calls:
            calls.append((itc.get("id") or self._new_id(), str(itc.get("name") or ""),
                          str(itc.get("args") or "")))
        text = message_text(reply)
        if not calls:
            self.steps.append(Step(turn=turn, kind="no_action", thought=text.strip()[:2000]))
            messages += [AIMessage(text), HumanMessage(NATIVE_NUDGE)]
            return None
        # re-issue the turn with ids on every call, so each gets exactly one answer
        messages.append(AIMessage(text, tool_calls=[
            {"name": n, "args": parse_arguments(a) or {}, "id": i, "type": "tool_call"}
            for i, n, a in calls]))
        for call_id, name, args_text in calls:
            end, observation = await self.act(turn, text, name, args_text)
            if end is not None:
                return end
            messages.append(ToolMessage(observation, tool_call_id=call_id, name=name))
        return None

    async def act(self, turn: int, thought: str, name: str,
                  args_text: str) -> tuple[EndReason | None, str]:
        """Handle one proposed call: ``(end reason or None, observation)``."""
        thought = thought.strip()[:2000]
        args = parse_arguments(args_text)
        if name == "Finish":
            return self._finish(turn, thought, args_text, args)
        verdict: dict[str, Any] | None = None
        if self.guard is not None:
            call_msg = self._call_message(name, args_text, args)
            (v,) = await self.guard.acheck([*self.history, call_msg])
            verdict = {"action": v.action, "hallucination": v.hallucination,
                       "reason": v.reason[:1000]}
            if v.action in ("ask_user", "change_tools"):
                self.steps.append(Step(turn=turn, kind="call", thought=thought, action=name,
                                       action_input=args_text, args=args, verdict=verdict,
                                       observation=v.question or v.reason))
                return ("guard_ask_user" if v.action == "ask_user"
                        else "guard_change_tools"), ""
            if v.action == "block":
                observation = clip(v.feedback())
                self.steps.append(Step(turn=turn, kind="call", thought=thought, action=name,
                                       action_input=args_text, args=args, verdict=verdict,
                                       observation=observation))
                self.history += [call_msg, ToolMessage(observation, status="error",
                                                       tool_call_id=_last_id(call_msg))]
                return None, observation
            self.history.append(call_msg)
        observation = clip(await self.simulator.respond(self.case, name, args_text))
        self.steps.append(Step(turn=turn, kind="call", thought=thought, action=name,
                               action_input=args_text, args=args, verdict=verdict,
                               executed=True, observation=observation))
        if self.guard is not None:
            self.history.append(ToolMessage(observation, tool_call_id=_last_id(self.history[-1]),
                                            name=name))
        return None, observation

    def _finish(self, turn: int, thought: str, args_text: str,
                args: dict[str, Any] | None) -> tuple[EndReason | None, str]:
        rtype, answer = parse_finish(args_text)
        observation = ""
        if rtype is None:
            observation = '{error:"must have "return_type""}' if args is None or \
                "return_type" not in args else '{error:""return_type" is not a valid choice"}'
        elif rtype == "give_answer" and answer is None:
            observation = '{error:"must have "final_answer""}'
        self.steps.append(Step(turn=turn, kind="finish", thought=thought, action="Finish",
                               action_input=args_text, args=args, observation=observation))
        if observation:
            return None, observation
        if rtype == "give_answer":
            self.final_answer = answer or ""
        return rtype, ""

    def _call_message(self, name: str, args_text: str, args: dict[str, Any] | None) -> AIMessage:
        call_id = self._new_id()
        if args is not None:
            return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id,
                                              "type": "tool_call"}])
        return AIMessage("", invalid_tool_calls=[{
            "name": name, "args": args_text, "id": call_id, "error": "not a JSON object",
            "type": "invalid_tool_call"}])

    def _new_id(self) -> str:
        self._ids += 1
        return f"call_{self._ids}"


def _last_id(message: BaseMessage) -> str:
    if isinstance(message, AIMessage):
        calls: Sequence[Any] = message.tool_calls or message.invalid_tool_calls
        if calls:
            return str(calls[-1].get("id") or "")
    return ""


def clip(text: str) -> str:
    """An observation cut to :data:`MAX_OBSERVATION_CHARS` (ToolBench's limit)."""
    return text if len(text) <= MAX_OBSERVATION_CHARS else text[:MAX_OBSERVATION_CHARS] + "..."
