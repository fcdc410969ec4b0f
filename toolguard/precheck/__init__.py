"""Pre-check before the agent acts: proceed, ask the user, or say no tool fits.

The ICT paper (Yang et al., "Can Tool-Augmented Large Language Models Be Aware of
Incomplete Conditions?", arXiv 2406.12307) shows that models call tools when the right
tool is missing or the user has not given the information a call needs.  RelyToolBench
(Xu et al., ICML 2025) names the two right answers *TalkToUser* (``ask_user``) and
*ChangeTools* (``no_suitable_tool``).  :class:`Precheck` decides one of the three labels of
:data:`PrecheckLabel` for the current user request before the model acts.

Modes (:data:`PrecheckMode`):

- ``deterministic`` (no model; see :mod:`toolguard.precheck.rules` for the rules):
  tool relevance by stemmed word overlap (and, with ``relevance="embedding"``,
  all-MiniLM-L6-v2 similarity), then grounding of the best tools' required parameters
  against the conversation.
- ``structured_verification``: the ICT paper's four-step prompt
  (``prompts/structured_verification.md``): (1) identify the user's goal, (2) enumerate the
  required information or functionalities, (3) check the available tools against them,
  (4) verify that the information is sufficient; the answer is a JSON object validated
  with pydantic (:class:`StructuredVerificationAnswer`).
- ``cot`` and ``zero_shot``: the paper's baselines (``prompts/precheck_cot.md``,
  ``prompts/precheck_zero_shot.md``; :class:`CotAnswer`, :class:`ZeroShotAnswer`).
- ``learned``: a trained verifier (:mod:`toolguard.verifier`; ``verifier=`` or the
  ``TOOLGUARD_VERIFIER`` environment variable, else :class:`~toolguard.errors.ConfigurationError`
  naming ``toolguard verifier train``).  ``no_suitable_tool`` when no tool's fit to the goal
  reaches ``fit_threshold``, except when the request continues a session the tools already
  serve: a follow-up (an answer, a confirmation, a reference to what came before:
  :attr:`~toolguard.conversation.Goal.follow_up`), whose request was judged when it opened,
  or a later user turn after a tool call that succeeded (when unsure, proceed); else
  ``ask_user`` naming each required parameter of the best tool whose slot-presence score is
  below ``slot_threshold``, unless a tool that fits about as well (within
  :data:`SLOT_TOOL_MARGIN`) has every required value (when unsure, proceed); else
  ``proceed``.  A failing scorer is handled as a failing LLM call (``fallback``).

LLM modes work with any LangChain chat model: the JSON is asked for in the prompt and
parsed here (no provider-native structured output, which the local llama.cpp server and
small models do not support well).  A malformed answer (no JSON object, invalid JSON, a
field missing or of the wrong type, a decision outside the label set) is sent back to the
model once with the validation error; if the second answer is malformed too, or the model
call raises, the ``fallback`` policy decides: ``"deterministic"`` (default: the
deterministic mode's decision) or ``"proceed"`` (never abstain on a failed check).  The
decision records ``attempts`` and ``fallback`` either way.  Graph control signals
(``GraphBubbleUp``) are re-raised.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import Generator, Sequence
from typing import Any, Literal, cast, get_args

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.errors import GraphBubbleUp
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from typing_extensions import TypedDict

from toolguard.conversation import (
    MARK_KEY,
    Conversation,
    ConversationReader,
    answers_toolguard,
    message_text,
    read_goal,
)
from toolguard.conversation import MessagesLike as _MessagesLike
from toolguard.conversation import as_messages as _as_messages
from toolguard.errors import ConfigurationError
from toolguard.internal import internal_config
from toolguard.precheck.rules import (
    DeterministicRules,
    MissingInfoPolicy,
    RelevanceBackend,
    stated_values,
)
from toolguard.prompts import load_prompt
from toolguard.specs import ToolSpec, to_specs
from toolguard.verifier import (
    FIT_THRESHOLD,
    SLOT_THRESHOLD,
    TOP_K,
    CrossEncoderLike,
    VerifierOption,
    candidates,
    check_top_k,
    goal_text,
    resolve_verifier,
    slot_context,
    slot_pair,
    tool_fit_pair,
    verifier_thresholds,
)

PrecheckLabel = Literal["proceed", "ask_user", "no_suitable_tool"]
"""``proceed`` (call tools), ``ask_user`` (TalkToUser: a needed value is missing) or
``no_suitable_tool`` (ChangeTools: no available tool can do it; tell the user)."""
PrecheckMode = Literal["deterministic", "structured_verification", "cot", "zero_shot", "learned"]
LLMMode = Literal["structured_verification", "cot", "zero_shot"]
FallbackPolicy = Literal["deterministic", "proceed"]
PRECHECK_MODES: tuple[PrecheckMode, ...] = get_args(PrecheckMode)
LLM_MODES: tuple[LLMMode, ...] = get_args(LLMMode)
PRECHECK_LABELS: tuple[PrecheckLabel, ...] = get_args(PrecheckLabel)
MAX_SLOT_TOOLS = 2
"""Learned mode: tools whose required values are checked at most (the best-fitting ones)."""
SLOT_TOOL_MARGIN = 0.1
"""Learned mode: a tool within this tool-fit score of the best one is checked for its
values too; if it has them all, the pre-check proceeds (the model picks between them)."""


RETRY_INSTRUCTION = (
    "Your answer could not be used: {error}\n"
    "Answer again with only the JSON object described above, with every field filled in "
    'and "decision" exactly one of "proceed", "ask_user", "no_suitable_tool".'
)
"""The one repair message sent after a malformed answer (``{error}``: the validation error)."""

_PROMPTS: dict[LLMMode, str] = {
    "structured_verification": "structured_verification",
    "cot": "precheck_cot",
    "zero_shot": "precheck_zero_shot",
}
_ALIASES: dict[str, PrecheckLabel] = {
    "proceed": "proceed", "ask_user": "ask_user", "no_suitable_tool": "no_suitable_tool",
    # RelyToolBench's action names
    "talktouser": "ask_user", "talk_to_user": "ask_user",
    "changetools": "no_suitable_tool", "change_tools": "no_suitable_tool",
}


# ---------------------------------------------------------------------------- records
class PrecheckDecision(BaseModel):
    """What the agent should do with the current request.

    Attributes:
        decision: See :data:`PrecheckLabel`.
        reason: Why, in one line (the model's reasoning in LLM modes, cut to 500 chars).
        missing: For ``ask_user``: the information the user must give (parameter names in
            deterministic mode, the model's words in LLM modes).
        tool: The best-fitting tool, if any (a name from the tool set).
        message: Text for the user: the question (``ask_user``), the explanation
            (``no_suitable_tool``), or ``""`` (``proceed``).
        mode: The mode that decided (``deterministic`` also when an LLM or the learned mode
            fell back).
        attempts: Model calls made (0 in deterministic mode, at most 2; in learned mode the
            scoring calls, tool fit and slot presence).
        fallback: Whether the LLM answer was unusable and ``fallback`` decided.
        scores: Deterministic mode: per tool, its relevance score (``2 * name words +
            description words`` shared with the request).  Learned mode: per scored tool
            its tool-fit score, and per checked parameter (``"tool.parameter"``) its
            slot-presence score, both in ``[0, 1]``.
        raw: The model's last raw answer (cut to 2000 characters).
        model_error: The exception of the model call (``repr``, cut to 500 characters)
            when an LLM mode could not reach its model and ``fallback`` decided; ``None``
            otherwise (a malformed answer is not a model error).
    """

    model_config = ConfigDict(frozen=True)

    decision: PrecheckLabel
    reason: str = ""
    missing: list[str] = Field(default_factory=list)
    tool: str | None = None
    message: str = ""
    mode: PrecheckMode = "deterministic"
    attempts: int = 0
    fallback: bool = False
    scores: dict[str, float] = Field(default_factory=dict)
    raw: str = ""
    model_error: str | None = None

    @property
    def abstain(self) -> bool:
        """``True`` for ``ask_user`` and ``no_suitable_tool`` (the ICT positive class)."""
        return self.decision != "proceed"


def _str_list(value: Any) -> Any:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        return [v if isinstance(v, str) else json.dumps(v) for v in value]
    return value


class _Answer(BaseModel):
    """Fields every LLM answer has (extra keys are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    decision: PrecheckLabel
    missing: list[str] = Field(default_factory=list)
    tool: str | None = None

    @field_validator("decision", mode="before")
    @classmethod
    def _label(cls, value: Any) -> Any:
        """Case and separators are forgiven; RelyToolBench's names map onto the labels."""
        if isinstance(value, str):
            key = re.sub(r"[\s\-]+", "_", value.strip().strip("'\"").casefold())
            return _ALIASES.get(key, value)
        return value

    @field_validator("missing", mode="before")
    @classmethod
    def _missing(cls, value: Any) -> Any:
        return _str_list(value)

    @field_validator("tool", mode="before")
    @classmethod
    def _tool(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().casefold() in ("", "none", "null", "n/a"):
            return None
        return value

    def reasoning(self) -> str:
        """The model's explanation (empty for zero-shot)."""
        return ""


class StructuredVerificationAnswer(_Answer):
    """The Structured Verification JSON (ICT paper, four steps).

    ``{"goal": str, "required": [str], "tool_check": str, "information_check": str,
    "decision": label, "missing": [str], "tool": str | null}``; ``ask_user`` must name what
    is missing.
    """

    goal: str = Field(min_length=1)
    required: list[str]
    tool_check: str = Field(min_length=1)
    information_check: str = Field(min_length=1)

    @field_validator("required", mode="before")
    @classmethod
    def _required(cls, value: Any) -> Any:
        return _str_list(value)

    def model_post_init(self, __context: Any) -> None:
        """``ask_user`` names the missing information (step 4)."""
        if self.decision == "ask_user" and not self.missing:
            raise ValueError("decision 'ask_user' needs a non-empty 'missing' list")

    def reasoning(self) -> str:
        """Goal, tool check and information check, joined."""
        return (f"goal: {self.goal}; tools: {self.tool_check}; "
                f"information: {self.information_check}")


class CotAnswer(_Answer):
    """The chain-of-thought baseline's JSON: ``{"reasoning": str, "decision", "missing"}``."""

    reasoning_text: str = Field(alias="reasoning", min_length=1)

    def reasoning(self) -> str:
        """The model's reasoning."""
        return self.reasoning_text


class ZeroShotAnswer(_Answer):
    """The zero-shot baseline's JSON: ``{"decision", "missing"}``."""


ANSWER_SCHEMAS: dict[LLMMode, type[_Answer]] = {
    "structured_verification": StructuredVerificationAnswer,
    "cot": CotAnswer,
    "zero_shot": ZeroShotAnswer,
}


# ---------------------------------------------------------------------------- messages
MessagesLike = _MessagesLike


def as_messages(messages: MessagesLike) -> list[BaseMessage]:
    """LangChain messages from messages, ``{"role", "content"}`` dicts, strings or tuples.

    Raises:
        toolguard.errors.InputError: An item is of no supported form (a ``ValueError``).
    """
    return _as_messages(messages)


def current_request(messages: MessagesLike) -> str:
    """What the user wants now: the conversation's goal text.

    The latest user message joined with the earlier ones it answers, confirms, corrects or
    refers to (:class:`toolguard.conversation.Goal`): "Book a table" + (a question) +
    "at Chez Paul, 8pm" is one request, and so is "Reset my password" + "my username is
    JaneSmith".
    """
    return read_goal(_as_messages(messages)).text


latest_request = current_request
"""Alias kept for the first cut's name."""


def context_texts(messages: MessagesLike) -> list[str]:
    """Texts a value may be grounded in: user and system messages, then tool results."""
    conv = Conversation.read(messages)
    return [*conv.texts_from("user", "system"), *conv.texts_from("tool")]


def render_tools(tools: Sequence[ToolSpec], *, max_chars: int = 12000) -> str:
    """The tool list for a prompt: name, description, parameters (required ones marked).

    Descriptions are cut to 300 characters and the whole list to ``max_chars``.
    """
    lines: list[str] = []
    for t in tools:
        lines.append(f"- {t.name}: {' '.join(t.description.split())[:300]}")
        req = set(t.required)
        for pname, schema in t.properties.items():
            s = schema if isinstance(schema, dict) else {}
            desc = " ".join(str(s.get("description") or "").split())[:150]
            flag = "required" if pname in req else "optional"
            lines.append(f"    {pname} ({s.get('type', 'any')}, {flag}): {desc}".rstrip(": "))
    text = "\n".join(lines) if lines else "(no tools available)"
    return text if len(text) <= max_chars else text[:max_chars] + "\n... (list cut)"


def render_conversation(messages: MessagesLike, *, max_chars: int = 8000) -> str:
    """The conversation for a prompt, one line per message (tool calls and results too).

    Keeps the end when longer than ``max_chars``.
    """
    lines: list[str] = []
    for m in as_messages(messages):
        text = " ".join(message_text(m).split())
        if isinstance(m, HumanMessage):
            lines.append(f"User: {text}")
        elif isinstance(m, SystemMessage):
            lines.append(f"System: {text}")
        elif isinstance(m, ToolMessage):
            lines.append(f"Tool result ({m.name or 'tool'}): {text[:600]}")
        elif isinstance(m, AIMessage):
            if text:
                lines.append(f"Assistant: {text}")
            for tc in m.tool_calls:
                lines.append(f"Assistant called {tc['name']}({json.dumps(tc['args'])[:400]})")
    text = "\n".join(lines)
    return text if len(text) <= max_chars else "... " + text[-max_chars:]


def prompt_messages(mode: LLMMode, tools: Sequence[ToolSpec],
                    messages: MessagesLike) -> list[BaseMessage]:
    """The prompt of an LLM mode, filled in, as one user message."""
    template = load_prompt(_PROMPTS[mode])
    return [HumanMessage(template.format(tools=render_tools(tools),
                                         conversation=render_conversation(messages)))]


def _json_objects(text: str) -> list[dict[str, Any]]:
    """JSON objects in ``text`` (code fences allowed), in order of appearance."""
    decoder = json.JSONDecoder()
    out: list[dict[str, Any]] = []
    pos = text.find("{")
    while pos != -1:
        try:
            obj, end = decoder.raw_decode(text, pos)
        except ValueError:
            pos = text.find("{", pos + 1)
            continue
        if isinstance(obj, dict):
            out.append(obj)
        pos = text.find("{", end)
    return out


def parse_answer(text: str, mode: LLMMode) -> _Answer:
    """Read and validate a model answer for ``mode``.

    The first JSON object in ``text`` that has a ``decision`` key (else the first object)
    is validated against :data:`ANSWER_SCHEMAS` ``[mode]``.  HTML-escaped JSON
    (``{&#34;decision&#34;: ...}``) is unescaped first.

    Raises:
        ValueError: With a message for the model: no JSON object, or what failed validation.
    """
    objects = _json_objects(text)
    if not objects and ("&#" in text or "&quot;" in text):
        # chat templates that HTML-escape the prompt (llama-cpp-python's
        # chatml-function-calling handler does) teach the model to answer escaped JSON
        objects = _json_objects(html.unescape(html.unescape(text)))
    if not objects:
        raise ValueError("the answer contains no JSON object")
    obj = next((o for o in objects if "decision" in o), objects[0])
    try:
        return ANSWER_SCHEMAS[mode].model_validate(obj)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}"
            for e in exc.errors(include_url=False))
        raise ValueError(problems) from None


def user_message(decision: PrecheckLabel, *, missing: Sequence[str] = (),
                 tool: str | None = None) -> str:
    """The text shown to the user for a decision (``""`` for ``proceed``)."""
    if decision == "ask_user":
        what = ", ".join(missing) if missing else "the details of your request"
        target = f" to use {tool}" if tool else ""
        return f"Before I go on, I need some information{target}: {what}. Could you provide it?"
    if decision == "no_suitable_tool":
        return ("None of my available tools can do this request, so I will not call any. "
                "Please provide a suitable tool or rephrase the request.")
    return ""


def _is_message_list(messages: MessagesLike) -> bool:
    """A non-empty sequence of LangChain messages (its ends checked, not every item)."""
    return bool(messages) and isinstance(messages[0], BaseMessage) and isinstance(
        messages[-1], BaseMessage)


def abstain_message(decision: PrecheckDecision) -> AIMessage:
    """The ``AIMessage`` that answers the user for an abstain decision (no tool calls).

    ``response_metadata["toolguard"]`` is the decision; ``["toolguard_precheck"]`` the
    whole :class:`PrecheckDecision`.
    """
    return AIMessage(decision.message or decision.reason,
                     response_metadata={MARK_KEY: decision.decision,
                                        "toolguard_precheck": decision.model_dump(mode="json")})


# ---------------------------------------------------------------------------- pre-check
class PrecheckOptions(TypedDict, total=False):
    """The keyword options of :class:`Precheck` that ``PrecheckMiddleware(**options)`` takes.

    All but ``ask_user`` (the middleware's own option of that name is its ask mode; pass a
    configured ``Precheck(..., ask_user=False)`` as ``precheck=`` to never ask).
    """

    mode: PrecheckMode
    model: BaseChatModel | None
    fallback: FallbackPolicy
    relevance: RelevanceBackend
    missing_info: MissingInfoPolicy
    max_desc_overlap: int
    verifier: VerifierOption
    fit_threshold: float | None
    slot_threshold: float | None
    top_k: int | None


def _ongoing(conv: Conversation) -> bool:
    """Whether the request continues a session the tools already serve.

    A follow-up (an answer, a confirmation, a reference to what came before), or a later
    user turn after a tool call that succeeded.  Both modes that judge tool fit skip
    ``no_suitable_tool`` then (:meth:`DeterministicRules.decide`, the learned mode).
    """
    return conv.goal.follow_up or (conv.user_turns > 1 and any(
        c.ok and not c.refused and c.answer is not None and conv.last_user is not None
        and c.answer < conv.last_user for c in conv.calls))


class Precheck:
    """Decide ``proceed`` / ``ask_user`` / ``no_suitable_tool`` before the model acts.

    Args:
        tools: The tools the agent has (any form :meth:`ToolSpec.coerce` accepts).
        mode: See :data:`PrecheckMode` and the module docstring.
        model: Chat model for the LLM modes (required for them, unused otherwise).  Any
            LangChain chat model; tools are not bound.
        fallback: What decides when an LLM answer is malformed twice or the model call
            fails: ``"deterministic"`` or ``"proceed"``.
        relevance: Deterministic tool relevance: ``"lexical"`` (default) or
            ``"embedding"`` (needs the ``embed`` extra; fails at construction without it).
        ask_user: Whether the deterministic mode may answer ``ask_user``.
        missing_info: Deterministic: when to ask (``"vague"``: a vague reference and no
            stated value; ``"unstated"``: also any request stating no value while a fitting
            tool has required parameters).  See :mod:`toolguard.precheck.rules`.
        max_desc_overlap: Deterministic: with no request word in any tool name, the most
            description words the best tool may share for ``no_suitable_tool``.
        verifier: Learned mode: a trained verifier folder, a hub id, or any cross-encoder
            with ``score(text_pairs) -> list[float]`` (LangChain's ``BaseCrossEncoder``);
            ``None``: the ``TOOLGUARD_VERIFIER`` environment variable
            (:func:`toolguard.verifier.resolve_verifier`).
        fit_threshold: Learned mode: tool-fit score in ``[0, 1]`` at which a tool serves the
            goal (default: the trained verifier's calibrated threshold, else
            :data:`toolguard.verifier.FIT_THRESHOLD`).
        slot_threshold: Learned mode: slot-presence score in ``[0, 1]`` at which a value
            counts as given (default: the trained verifier's calibrated threshold, else
            :data:`toolguard.verifier.SLOT_THRESHOLD`).
        top_k: Learned mode: tools scored per decision at most, the ones sharing most words
            with the goal (``None``: every tool; see :func:`toolguard.verifier.candidates`).

    Raises:
        toolguard.errors.ConfigurationError: For an unknown mode/fallback/relevance/missing_info,
            an LLM mode without a
            model, a negative ``max_desc_overlap``, ``mode="learned"`` without a trained
            verifier (the message names ``toolguard verifier train --size full --out DIR``),
            ``verifier`` in another mode, or a threshold outside ``[0, 1]``.
        toolguard.errors.ToolSpecError: If a tool is of no supported form.
        ImportError: ``relevance="embedding"`` without the ``embed`` extra; a verifier
            folder without the ``learned`` extra.
    """

    def __init__(
        self,
        tools: Sequence[Any],
        *,
        mode: PrecheckMode = "deterministic",
        model: BaseChatModel | None = None,
        fallback: FallbackPolicy = "deterministic",
        relevance: RelevanceBackend = "lexical",
        ask_user: bool = True,
        missing_info: MissingInfoPolicy = "vague",
        max_desc_overlap: int = 2,
        verifier: VerifierOption = None,
        fit_threshold: float | None = None,
        slot_threshold: float | None = None,
        top_k: int | None = TOP_K,
    ) -> None:
        if mode not in PRECHECK_MODES:
            raise ConfigurationError(f"unknown pre-check mode {mode!r}; expected one of "
                             f"{list(PRECHECK_MODES)}")
        if fallback not in ("deterministic", "proceed"):
            raise ConfigurationError(
                f"fallback must be 'deterministic' or 'proceed', got {fallback!r}")
        if mode in LLM_MODES and model is None:
            raise ConfigurationError(f"pre-check mode {mode!r} needs a chat model (model=...)")
        if max_desc_overlap < 0:
            raise ConfigurationError("max_desc_overlap must be >= 0")
        for label, value in (("fit_threshold", fit_threshold),
                             ("slot_threshold", slot_threshold)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise ConfigurationError(f"{label} must be in [0, 1], got {value}")
        check_top_k(top_k)
        if verifier is not None and mode != "learned":
            raise ConfigurationError(f"verifier= is used by mode='learned' only (mode is {mode!r})")
        self.verifier: CrossEncoderLike | None = (
            resolve_verifier(verifier) if mode == "learned" else None)
        calibrated = verifier_thresholds(self.verifier) if self.verifier is not None else {}
        self.fit_threshold: float = (fit_threshold if fit_threshold is not None
                                     else calibrated.get("fit_threshold", FIT_THRESHOLD))
        self.slot_threshold: float = (slot_threshold if slot_threshold is not None
                                      else calibrated.get("slot_threshold", SLOT_THRESHOLD))
        self.top_k = top_k
        self.tools: list[ToolSpec] = to_specs(tools)
        self.mode: PrecheckMode = mode
        self.model = model
        self.fallback: FallbackPolicy = fallback
        self.reader = ConversationReader()
        self.rules = DeterministicRules(self.tools, relevance=relevance, ask_user=ask_user,
                                        missing_info=missing_info,
                                        max_desc_overlap=max_desc_overlap)

    # ------------------------------------------------------------------ public
    def decide(self, messages: MessagesLike) -> PrecheckDecision:
        """Decide for the current user request in ``messages``.

        Raises:
            toolguard.errors.InputError: If ``messages`` cannot be read (see
                :func:`as_messages`).
        """
        if self.mode == "learned" and self.tools:
            learned = self._learned_steps(messages)
            try:
                pairs = next(learned)
                while True:
                    pairs = learned.send(self._score(pairs))
            except StopIteration as done:
                return cast(PrecheckDecision, done.value)
        steps = self._steps(messages)
        try:
            prompt = next(steps)
            while True:
                assert self.model is not None
                try:
                    reply: str | Exception = message_text(self.model.invoke(
                        prompt, internal_config(f"precheck.{self.mode}")))
                except GraphBubbleUp:
                    raise
                except Exception as exc:  # a failing judge must not crash the user's graph
                    reply = exc
                prompt = steps.send(reply)
        except StopIteration as done:
            return cast(PrecheckDecision, done.value)

    async def adecide(self, messages: MessagesLike) -> PrecheckDecision:
        """Async :meth:`decide` (the model is called with ``ainvoke``; a verifier in a thread)."""
        if self.mode == "learned" and self.tools:
            learned = self._learned_steps(messages)
            try:
                pairs = next(learned)
                while True:
                    pairs = learned.send(await asyncio.to_thread(self._score, pairs))
            except StopIteration as done:
                return cast(PrecheckDecision, done.value)
        steps = self._steps(messages)
        try:
            prompt = next(steps)
            while True:
                assert self.model is not None
                try:
                    reply: str | Exception = message_text(await self.model.ainvoke(
                        prompt, internal_config(f"precheck.{self.mode}")))
                except GraphBubbleUp:
                    raise
                except Exception as exc:  # a failing judge must not crash the user's graph
                    reply = exc
                prompt = steps.send(reply)
        except StopIteration as done:
            return cast(PrecheckDecision, done.value)

    # ------------------------------------------------------------------ shared helpers
    def _steps(
        self, messages: MessagesLike
    ) -> Generator[list[BaseMessage], str | Exception, PrecheckDecision]:
        """The decision as a dialogue: yields prompts, receives answers (or the model's error).

        Shared by :meth:`decide` and :meth:`adecide`, which only differ in how they call
        the model.  At most two prompts: the first and, after a malformed answer, one retry.
        """
        if self.mode not in LLM_MODES or not self.tools:
            return self._deterministic(messages)
        msgs = as_messages(messages)
        mode = self.mode
        prompt = prompt_messages(mode, self.tools, msgs)
        errors: list[str] = []
        raw = ""
        for attempt in (1, 2):
            reply = yield prompt
            if isinstance(reply, Exception):
                errors.append(f"model call failed: {reply!r}"[:300])
                return self._fallback(msgs, attempt, errors, raw).model_copy(
                    update={"model_error": repr(reply)[:500]})
            raw = reply
            try:
                answer = parse_answer(raw, mode)
            except ValueError as exc:
                errors.append(str(exc)[:300])
                retry = HumanMessage(RETRY_INSTRUCTION.format(error=str(exc)[:500]))
                prompt = [*prompt, AIMessage(raw[:4000]), retry]
                continue
            return self._from_answer(answer, attempt, raw)
        return self._fallback(msgs, 2, errors, raw)

    def _score(self, pairs: list[tuple[str, str]]) -> list[float] | Exception:
        """The verifier's scores for ``pairs``, or the exception it raised."""
        assert self.verifier is not None
        try:
            scores = [float(s) for s in self.verifier.score(pairs)]
        except GraphBubbleUp:
            raise
        except Exception as exc:  # a failing verifier must not crash the user's graph
            return exc
        if len(scores) != len(pairs):
            return ValueError(f"the verifier returned {len(scores)} scores for {len(pairs)} pairs")
        return scores

    def _learned_steps(
        self, messages: MessagesLike
    ) -> Generator[list[tuple[str, str]], list[float] | Exception, PrecheckDecision]:
        """Learned mode as a dialogue: yields text pairs, receives their scores.

        Shared by :meth:`decide` and :meth:`adecide`.  Two batches at most: tool fit for
        the candidate tools, then slot presence for the required parameters of the tools
        that fit best.
        """
        msgs = as_messages(messages)
        conv = self._read(msgs)
        goal = goal_text(conv)
        if not goal:
            return PrecheckDecision(decision="proceed", mode="learned",
                                    reason="no user request to check")
        pool = candidates(goal, self.tools, self.top_k)
        fit = yield [tool_fit_pair(goal, t) for t in pool]
        if isinstance(fit, Exception):
            return self._learned_failed(msgs, 1, fit)
        scores = {t.name: round(s, 4) for t, s in zip(pool, fit, strict=True)}
        ranked = sorted(zip(fit, range(len(pool)), pool, strict=True),
                        key=lambda x: (-x[0], x[1]))
        best_score, _, best = ranked[0]
        if best_score < self.fit_threshold and _ongoing(conv):
            return PrecheckDecision(  # the request was judged when it opened
                decision="proceed", tool=best.name, mode="learned", attempts=1, scores=scores,
                reason=f"a follow-up to an earlier request (best: {best.name} "
                f"{best_score:.2f} < {self.fit_threshold}); when unsure, proceed")
        if best_score < self.fit_threshold:
            decision: PrecheckLabel = "no_suitable_tool"
            return PrecheckDecision(
                decision=decision, mode="learned", attempts=1, scores=scores,
                reason=f"no tool fits the request (best: {best.name} {best_score:.2f} < "
                f"{self.fit_threshold})", message=user_message(decision))
        close = [t for s, _, t in ranked[:MAX_SLOT_TOOLS]
                 if s >= max(self.fit_threshold, best_score - SLOT_TOOL_MARGIN)]
        slots = [(t, p) for t in close for p in t.required if p in t.properties]
        if not slots:
            return PrecheckDecision(
                decision="proceed", tool=best.name, mode="learned", attempts=1, scores=scores,
                reason=f"{best.name} fits ({best_score:.2f}) and needs no value")
        context = slot_context(conv)
        present = yield [slot_pair(context, t, p) for t, p in slots]
        if isinstance(present, Exception):
            return self._learned_failed(msgs, 2, present)
        missing: dict[str, list[str]] = {t.name: [] for t in close}
        for (t, p), s in zip(slots, present, strict=True):
            scores[f"{t.name}.{p}"] = round(s, 4)
            if s < self.slot_threshold:
                missing[t.name].append(p)
        complete = next((t for t in close if not missing[t.name]), None)
        if complete is not None:
            return PrecheckDecision(
                decision="proceed", tool=complete.name, mode="learned", attempts=2,
                scores=scores, reason=f"{complete.name} fits "
                f"({scores[complete.name]:.2f}) and its required values are given")
        asked = missing[best.name]
        if answers_toolguard(conv.messages):
            return PrecheckDecision(  # never ask twice in a row: when unsure, proceed
                decision="proceed", tool=best.name, mode="learned", attempts=2, scores=scores,
                reason=f"the user just answered a question; proceeding (missing {asked})")
        decision = "ask_user"
        return PrecheckDecision(
            decision=decision, missing=asked, tool=best.name, mode="learned", attempts=2,
            scores=scores, message=user_message(decision, missing=asked, tool=best.name),
            reason=f"{best.name} fits ({best_score:.2f}) but no value is given for "
            f"{', '.join(asked)} (slot score < {self.slot_threshold})")

    def _learned_failed(self, msgs: MessagesLike, attempts: int,
                        error: Exception) -> PrecheckDecision:
        """The ``fallback`` decision after the verifier raised."""
        return self._fallback(msgs, attempts, [f"verifier failed: {error!r}"[:300]], "").model_copy(
            update={"model_error": repr(error)[:500]})

    def _read(self, msgs: MessagesLike) -> Conversation:
        return (self.reader.read(cast(list[BaseMessage], msgs)) if _is_message_list(msgs)
                else Conversation.read(msgs))

    def _from_answer(self, answer: _Answer, attempts: int, raw: str) -> PrecheckDecision:
        names = {t.name for t in self.tools}
        tool = answer.tool if answer.tool in names else None
        reason = answer.reasoning()[:500] or f"the model answered {answer.decision}"
        return PrecheckDecision(
            decision=answer.decision, reason=reason, missing=list(answer.missing), tool=tool,
            message=user_message(answer.decision, missing=answer.missing, tool=tool),
            mode=self.mode, attempts=attempts, raw=raw[:2000],
        )

    def _fallback(self, msgs: MessagesLike, attempts: int, errors: list[str],
                  raw: str) -> PrecheckDecision:
        why = f"{self.mode} answer unusable after {attempts} call(s): {' | '.join(errors)}"
        if self.fallback == "proceed":
            return PrecheckDecision(decision="proceed", reason=why[:500], mode=self.mode,
                                    attempts=attempts, fallback=True, raw=raw[:2000])
        det = self._deterministic(msgs)
        return det.model_copy(update={
            "reason": f"{why[:300]}; deterministic: {det.reason}"[:500],
            "attempts": attempts, "fallback": True, "raw": raw[:2000]})

    def _deterministic(self, msgs: MessagesLike) -> PrecheckDecision:
        conv = self._read(msgs)
        verdict = self.rules.decide(
            conv.goal.text, [*conv.texts_from("user", "system"), *conv.texts_from("tool")],
            ongoing=_ongoing(conv))
        if verdict.decision == "ask_user" and answers_toolguard(conv.messages):
            return PrecheckDecision(  # never ask twice in a row: when unsure, proceed
                decision="proceed", tool=verdict.tool, scores=verdict.scores,
                mode="deterministic",
                reason=f"the user just answered a question; proceeding ({verdict.reason})")
        return PrecheckDecision(
            decision=verdict.decision, reason=verdict.reason, missing=verdict.missing,
            tool=verdict.tool, scores=verdict.scores, mode="deterministic",
            message=user_message(verdict.decision, missing=verdict.missing, tool=verdict.tool),
        )


__all__ = [
    "ANSWER_SCHEMAS",
    "LLM_MODES",
    "MARK_KEY",
    "MAX_SLOT_TOOLS",
    "PRECHECK_LABELS",
    "PRECHECK_MODES",
    "RETRY_INSTRUCTION",
    "SLOT_TOOL_MARGIN",
    "CotAnswer",
    "FallbackPolicy",
    "LLMMode",
    "MissingInfoPolicy",
    "Precheck",
    "PrecheckDecision",
    "PrecheckLabel",
    "PrecheckMode",
    "RelevanceBackend",
    "StructuredVerificationAnswer",
    "ZeroShotAnswer",
    "abstain_message",
    "as_messages",
    "context_texts",
    "current_request",
    "latest_request",
    "parse_answer",
    "prompt_messages",
    "render_conversation",
    "render_tools",
    "stated_values",
    "user_message",
]
