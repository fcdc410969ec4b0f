"""Pre-check before the agent acts: proceed, ask the user, or say no tool fits.

The ICT paper ("Can Tool-Augmented LLMs Be Aware of Incomplete Conditions?") shows that
models call tools when the right tool is missing or the user has not given the information a
call needs.  RelyToolBench names the two right answers *TalkToUser* (``ask_user``) and
*ChangeTools* (``no_suitable_tool``).  :class:`Precheck` decides one of three labels for the
latest user request before the model acts.

``deterministic`` mode (no model), in order:

1. **Tool relevance.**  Stemmed content words (:func:`toolguard.text.content_stems`) minus
   generic verbs/nouns (:data:`GENERIC_TERMS`: "calculate", "information", "details", ...)
   are matched against each tool's name and description/parameter words.  A tool's overlap
   is ``(n, d)``: request words in its name, and in its name + description + parameters.
   No tool fits -> ``no_suitable_tool`` when the best tool has ``n == 0 and d <= max_desc_overlap``
   or ``n == 1 and d <= 1`` (one name word and nothing else).  Calibrated on RelyToolBench
   (Original vs Unmatched Tools) and BFCL (simple/multiple vs irrelevance).  Requests that
   are mostly non-Latin script share no words with English docs and always pass this step.
2. **Missing information.**  The request points at a value it does not give ("a certain
   film", "the tracking ID.", "from one location to another"; RelyToolBench's Missing
   Parameter subsets were built by cutting such values out of the query) and states no
   value at all (:func:`stated_values`: no quoted string, no token with a digit, no URL or
   email, no capitalised word foreign to the tool docs) -> ``ask_user``
   naming the required parameters of the best-fitting tool that look like user facts
   (ids, names, titles, places, ...) and whose names the request mentions.
3. Otherwise ``proceed``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, ConfigDict, Field

from toolguard.relevance import _tool_terms
from toolguard.specs import ToolSpec, to_specs
from toolguard.text import content_stems, split_identifier

PrecheckLabel = Literal["proceed", "ask_user", "no_suitable_tool"]
PrecheckMode = Literal["deterministic"]

GENERIC_TERMS: frozenset[str] = content_stems(
    "calculate calculation compute get retrieve fetch find information info details detail "
    "data provide list search result results request user name id number new set check "
    "current latest"
)
"""Stems too common in tool docs and requests to say anything about relevance."""

_VAGUE = re.compile(
    r"\b(?:a|an|the|some|this|that|my|our|their|his|her|its)\s+"
    r"(?:certain|specific|particular|given|specified|desired|chosen|selected|mentioned|"
    r"respective|corresponding|provided|relevant|appropriate)\b"
    r"|\b(?:one|a)\s+(?:location|place|city|country|address|airport|station)\s+to\s+another\b"
    r"|\b(?:that|this)\s+(?:film|movie|song|track|album|artist|user|product|company|city|"
    r"channel|player|team|book|show|series|account|location|place|item|video|game|"
    r"stock|coin|token|domain|website|url|address)\s*(?:[.,?!;]|$)"
    r"|\b(?:id|ids|identifier|number|code|reference|username|user\s+name|email|url|link|"
    r"key|token|symbol|isbn|zip\s*code|postcode|postal\s+code|coordinates|handle|hashtag|"
    r"title|keyword)\s*(?=[.,?!;]|$)",
    re.I | re.M,
)
"""Phrases that refer to a value without stating it (RelyToolBench Missing Parameter)."""

_FACT_PARAM = re.compile(
    r"(^|_)(id|ids|name|names|title|code|number|num|no|ref|reference|username|user|email|"
    r"url|link|domain|address|city|country|location|place|lat|lon|lng|latitude|longitude|"
    r"coordinates|symbol|ticker|isbn|zip|zipcode|postcode|phone|key|token|handle|channel|"
    r"account|artist|movie|film|song|track|album|team|player|product|company|date|from|to|"
    r"origin|destination|q|query|keyword|term)$",
    re.I,
)


_QUOTED = re.compile(r"""(?<![A-Za-z])['"‘“]([^'"’”]{1,80})['"’”]""")
_ID_TOKEN = re.compile(r"\b(?=\S*\d)[\w\-:.#/@]{2,}\b")
_URL_OR_EMAIL = re.compile(r"https?://|www\.|\S+@\S+\.\w+")
_PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z]+")


def stated_values(request: str, tools: Sequence[ToolSpec]) -> list[str]:
    """Values the request states.

    Quoted strings, tokens with digits, URLs/emails, and capitalised words (not
    sentence-initial) that are not words of the tools' docs.
    """
    found = [m.group(0) for rx in (_QUOTED, _ID_TOKEN, _URL_OR_EMAIL)
             for m in rx.finditer(request)]
    doc_words: set[str] = set()
    for t in tools:
        doc_words |= _tool_terms(t)[1]
    found += [w for w in _PROPER.findall(request) if not content_stems(w) <= doc_words]
    return found


class PrecheckDecision(BaseModel):
    """What the agent should do with the latest request.

    Attributes:
        decision: ``proceed`` (call tools), ``ask_user`` (a needed value is missing; see
            ``missing``) or ``no_suitable_tool`` (change tools / tell the user).
        reason: Why, in one line.
        missing: For ``ask_user``: names of the required parameters the user must give.
        scores: Per tool, its relevance score ``2 * n + d`` (see module docstring).
        tool: The best-fitting tool, if any.
    """

    model_config = ConfigDict(frozen=True)

    decision: PrecheckLabel
    reason: str = ""
    missing: list[str] = Field(default_factory=list)
    scores: dict[str, float] = Field(default_factory=dict)
    tool: str | None = None


def latest_request(messages: Sequence[AnyMessage | BaseMessage | dict[str, Any] | str]) -> str:
    """Text of the last user message (``HumanMessage``, ``{"role": "user"}`` dict or str)."""
    for m in reversed(list(messages)):
        if isinstance(m, str):
            return m
        if isinstance(m, HumanMessage):
            return m.text if isinstance(m.content, list) else str(m.content)
        if isinstance(m, dict) and m.get("role") in ("user", "human"):
            return str(m.get("content") or "")
    return ""


def _mostly_non_latin(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and sum(not c.isascii() for c in letters) > len(letters) / 2


class Precheck:
    """Decide ``proceed`` / ``ask_user`` / ``no_suitable_tool`` before the model acts.

    Args:
        tools: The tools the agent has (any form :meth:`ToolSpec.coerce` accepts).
        mode: ``"deterministic"`` (the only mode so far; see module docstring).
        max_desc_overlap: With no request word in any tool name, the most description
            words the best tool may share for ``no_suitable_tool`` (default 2).
        ask_user: Whether to run step 2 (missing information).

    Raises:
        ValueError: For an unknown mode or a negative ``max_desc_overlap``.
    """

    def __init__(
        self,
        tools: Sequence[Any],
        *,
        mode: PrecheckMode = "deterministic",
        max_desc_overlap: int = 2,
        ask_user: bool = True,
    ) -> None:
        if mode != "deterministic":
            raise ValueError(f"unknown pre-check mode {mode!r}; expected 'deterministic'")
        if max_desc_overlap < 0:
            raise ValueError("max_desc_overlap must be >= 0")
        self.tools: list[ToolSpec] = to_specs(tools)
        self.mode = mode
        self.max_desc_overlap = max_desc_overlap
        self.ask_user = ask_user

    def decide(
        self, messages: Sequence[AnyMessage | BaseMessage | dict[str, Any] | str]
    ) -> PrecheckDecision:
        """Decide for the latest user request in ``messages``."""
        return self._decide(latest_request(messages))

    async def adecide(
        self, messages: Sequence[AnyMessage | BaseMessage | dict[str, Any] | str]
    ) -> PrecheckDecision:
        """Async :meth:`decide` (deterministic: runs inline)."""
        return self._decide(latest_request(messages))

    # ---------------------------------------------------------------- deterministic
    def overlaps(self, request: str) -> dict[str, tuple[int, int]]:
        """Per tool, ``(name overlap, name + description overlap)`` of non-generic stems."""
        terms = content_stems(request) - GENERIC_TERMS
        out: dict[str, tuple[int, int]] = {}
        for t in self.tools:
            name, desc = _tool_terms(t)
            out[t.name] = (len(terms & (name - GENERIC_TERMS)), len(terms & (desc - GENERIC_TERMS)))
        return out

    def _decide(self, request: str) -> PrecheckDecision:
        if not self.tools:
            return PrecheckDecision(decision="no_suitable_tool", reason="no tools are available")
        ov = self.overlaps(request)
        scores = {k: float(2 * n + d) for k, (n, d) in ov.items()}
        best = max(self.tools, key=lambda t: scores[t.name])
        n, d = ov[best.name]
        if not _mostly_non_latin(request) and (
            (n == 0 and d <= self.max_desc_overlap) or (n == 1 and d <= 1)
        ):
            return PrecheckDecision(
                decision="no_suitable_tool", scores=scores, tool=best.name,
                reason=f"no tool fits the request (best {best.name!r}: {n} name and "
                f"{d} description words shared)",
            )
        if self.ask_user:
            m = _VAGUE.search(request)
            if m and not stated_values(request, self.tools):
                needy = [t for t in self.tools if t.required]
                target = max(needy, key=lambda t: scores[t.name]) if needy else best
                missing = self._missing_params(request, target)
                return PrecheckDecision(
                    decision="ask_user", scores=scores, tool=target.name, missing=missing,
                    reason=f"the request refers to a value it does not give: {m.group(0)!r}",
                )
        return PrecheckDecision(
            decision="proceed", scores=scores, tool=best.name,
            reason=f"{best.name!r} fits ({n} name and {d} description words shared)",
        )

    @staticmethod
    def _missing_params(request: str, tool: ToolSpec) -> list[str]:
        """Required parameters of ``tool`` that look like user facts; mentioned ones first."""
        terms = content_stems(request)
        facts = [p for p in tool.required
                 if _FACT_PARAM.search(split_identifier(p).replace(" ", "_"))]
        named = [p for p in facts if content_stems(p) & terms]
        return named or facts or list(tool.required)


__all__ = [
    "GENERIC_TERMS",
    "Precheck",
    "PrecheckDecision",
    "PrecheckLabel",
    "PrecheckMode",
    "latest_request",
    "stated_values",
]
