"""How a failed tool call is retried: :class:`RetryPolicy`, per-tool :class:`ToolPolicy`.

The options share LangChain's ``ToolRetryMiddleware`` names where they mean the same
(``max_retries``, ``initial_delay``, ``backoff_factor``, ``max_delay``, ``jitter``,
``on_failure``); see :class:`RetryPolicy` for how each maps.  The delay formula is written
once, in :meth:`RetryPolicy.delay`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

from toolguard.errors import ConfigurationError
from toolguard.specs import declared_traits

__all__ = ["JITTER_FRACTION", "OnFailure", "RetryPolicy", "ToolPolicy"]

OnFailure = Literal["skip", "finish"]
"""What happens when a call's retries are spent or its error is permanent (CRITICTOOL):

- ``skip``: the call is answered with an error ``ToolMessage`` telling the model to skip
  the step and continue with the remaining subtasks (LangChain's ``"continue"``, with
  CRITICTOOL's wording);
- ``finish``: the call is answered the same way, then the run stops and the user is told
  what failed and asked how to proceed (no LangChain equivalent: its ``"error"`` raises the
  tool's exception out of the graph).
"""

JITTER_FRACTION: Final = 0.25
"""With ``jitter=True`` each backoff is multiplied by a uniform factor in
``[1 - JITTER_FRACTION, 1 + JITTER_FRACTION]`` (±25 %, as LangChain)."""

_ON_FAILURE: Final = ("skip", "finish")
_LANGCHAIN_ON_FAILURE: Final = {
    "continue": "use 'skip' (the model is told and goes on)",
    "error": "use 'finish' (the run stops and the user is asked); toolguard never raises "
             "a tool's error into the graph",
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_retries(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"{name} must be >= 0 (an int), got {value!r}")


def _check_seconds(name: str, value: Any) -> None:
    if not _is_number(value) or not 0 <= value < math.inf:
        raise ConfigurationError(f"{name} must be >= 0 seconds (a finite number), got {value!r}")


def _check_timeout(name: str, value: Any) -> None:
    if value is not None and (not _is_number(value) or not 0 < value < math.inf):
        raise ConfigurationError(f"{name} must be > 0 seconds (a finite number) or None, "
                                 f"got {value!r}")


def _check_on_failure(value: Any, *, optional: bool) -> None:
    if (value is None and optional) or value in _ON_FAILURE:
        return
    hint = _LANGCHAIN_ON_FAILURE.get(value) if isinstance(value, str) else None
    raise ConfigurationError("on_failure must be 'skip' or 'finish'"
                             + (" or None" if optional else "") + f", got {value!r}"
                             + (f": {hint}" if hint else ""))


def _check_flag(name: str, value: Any, *, optional: bool) -> None:
    if not isinstance(value, bool) and not (optional and value is None):
        raise ConfigurationError(f"{name} must be True or False{' or None' if optional else ''}"
                                 f", got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPolicy:
    """Per-tool overrides of a :class:`RetryPolicy`; ``None`` keeps the policy's value.

    Attributes:
        max_retries: Retries of transient errors for this tool, >= 0 (``0``: this tool is
            never retried, like a tool left out of LangChain's ``tools=`` filter).
        on_failure: ``skip`` or ``finish`` when this tool's retries are spent
            (:data:`OnFailure`).
        idempotent: Safe to run twice, so an ambiguous failure (a timeout) is retried;
            wins over the tool's metadata and the policy's tool lists.
        timeout_s: Seconds before a call to this tool counts as timed out, > 0.

    Raises:
        toolguard.errors.ConfigurationError: A value out of its bounds (the message states
            the bound).
    """

    max_retries: int | None = None
    on_failure: OnFailure | None = None
    idempotent: bool | None = None
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_retries is not None:
            _check_retries("max_retries", self.max_retries)
        _check_on_failure(self.on_failure, optional=True)
        _check_flag("idempotent", self.idempotent, optional=True)
        _check_timeout("timeout_s", self.timeout_s)


_DEFAULT_TOOL: Final = ToolPolicy()


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """When and how a failed tool call is retried, and what happens when it cannot be.

    Only ``transient`` errors are retried (:func:`~toolguard.retry.classify_exception`);
    an *ambiguous* one (a timeout, a reset connection, a 5xx other than 503: the effect may
    have happened) only for an idempotent tool.  Retry number ``n + 1`` (``n`` retries made
    before it) waits :meth:`delay`::

        min(max_delay, initial_delay * backoff_factor**n) seconds, times U(0.75, 1.25)
        with jitter (capped at max_delay again), or the error's Retry-After when larger
        (capped at max_delay)

    so with the defaults 1, 2, 4 s (±25 %).

    Attributes:
        max_retries: Retries after the first attempt, >= 0 (CRITICTOOL's budget: 3).
            LangChain: same meaning (its default is 2).
        initial_delay: Seconds before the first retry, >= 0.  LangChain: same.
        backoff_factor: Multiplier per retry, >= 1 (``1``: a constant delay, LangChain's
            ``backoff_factor=0.0``).  LangChain: same formula.
        max_delay: Cap of one wait in seconds, >= 0.  LangChain: same, except that its
            jitter may exceed the cap; here no wait does.
        jitter: Multiply each backoff by a uniform factor in ``[0.75, 1.25]``
            (:data:`JITTER_FRACTION`).  LangChain: same.
        on_failure: ``skip`` or ``finish`` (:data:`OnFailure`) when retries are spent or
            the error is permanent.  LangChain's ``"continue"`` is ``skip``; its
            ``"error"`` (raise) and callables have no equivalent.
        timeout_s: Seconds before a call counts as timed out (``None``: no timeout), > 0;
            see :mod:`toolguard.retry.timeout`.  LangChain: none.
        idempotent_tools: Names of tools that are safe to run twice (an ambiguous failure
            is retried).  A tool is also idempotent when its ``metadata`` says so
            (:func:`~toolguard.specs.declared_traits`: ``{"idempotent": True}``,
            ``{"effects": "read"}``, or the MCP annotations ``idempotentHint`` /
            ``readOnlyHint``); ``tool_policies`` win over both.
        read_only_tools: Names of tools without side effects (also idempotent).
        tool_policies: Per-tool :class:`ToolPolicy` overrides, by tool name.  LangChain's
            ``tools=`` filter is ``ToolPolicy(max_retries=0)`` for the tools left out.

    LangChain's ``retry_on`` has no equivalent: which errors are retried is the
    classification table's (:mod:`toolguard.retry.classify`) and the tool's idempotence.

    Raises:
        toolguard.errors.ConfigurationError: A value out of its bounds (the message states
            the bound, e.g. ``max_retries must be >= 0``), ``jitter`` that is not a bool
            (toolguard 0.1 took seconds), an ``on_failure`` other than ``skip`` /
            ``finish`` (LangChain's values name their equivalent), or a ``tool_policies``
            value that is not a :class:`ToolPolicy`.
    """

    max_retries: int = 3
    initial_delay: float = 1.0
    backoff_factor: float = 2.0
    max_delay: float = 60.0
    jitter: bool = True
    on_failure: OnFailure = "skip"
    timeout_s: float | None = None
    idempotent_tools: Collection[str] = frozenset()
    read_only_tools: Collection[str] = frozenset()
    tool_policies: Mapping[str, ToolPolicy] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_retries("max_retries", self.max_retries)
        _check_seconds("initial_delay", self.initial_delay)
        _check_seconds("max_delay", self.max_delay)
        if not _is_number(self.backoff_factor) or not 1 <= self.backoff_factor < math.inf:
            raise ConfigurationError("backoff_factor must be >= 1 (1 for a constant delay), "
                                     f"got {self.backoff_factor!r}")
        if not isinstance(self.jitter, bool):
            raise ConfigurationError(
                f"jitter must be True or False (±25 % of each delay, as LangChain's "
                f"ToolRetryMiddleware), got {self.jitter!r}; toolguard 0.1's jitter in "
                "seconds is gone")
        _check_on_failure(self.on_failure, optional=False)
        _check_timeout("timeout_s", self.timeout_s)
        for name in ("idempotent_tools", "read_only_tools"):
            names = getattr(self, name)
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise ConfigurationError(f"{name} must be a collection of tool names")
            object.__setattr__(self, name, frozenset(names))
        policies = dict(self.tool_policies)
        bad = sorted(k for k, v in policies.items() if not isinstance(v, ToolPolicy))
        if bad:
            raise ConfigurationError(f"tool_policies values must be ToolPolicy objects "
                                     f"(not for {bad})")
        object.__setattr__(self, "tool_policies", MappingProxyType(policies))

    # ------------------------------------------------------------------ per tool
    def tool_policy(self, name: str) -> ToolPolicy:
        """The overrides of tool ``name`` (all ``None`` when it has none)."""
        return self.tool_policies.get(name, _DEFAULT_TOOL)

    def retries_for(self, name: str) -> int:
        """The retry budget of tool ``name``."""
        own = self.tool_policy(name).max_retries
        return self.max_retries if own is None else own

    def on_failure_for(self, name: str) -> OnFailure:
        """The skip/finish policy of tool ``name``."""
        return self.tool_policy(name).on_failure or self.on_failure

    def timeout_for(self, name: str) -> float | None:
        """Seconds before a call to tool ``name`` times out, or ``None``."""
        own = self.tool_policy(name).timeout_s
        return self.timeout_s if own is None else own

    def idempotent_for(self, name: str, tool: Any = None) -> bool:
        """Whether tool ``name`` is safe to run twice.

        Its :class:`ToolPolicy`, else ``idempotent_tools`` / ``read_only_tools``, else the
        ``metadata`` of ``tool`` (a LangChain tool, if given).
        """
        own = self.tool_policy(name).idempotent
        if own is not None:
            return own
        if name in self.idempotent_tools or name in self.read_only_tools:
            return True
        meta = getattr(tool, "metadata", None)  # toolguard's keys, else MCP annotations
        return bool(declared_traits(meta if isinstance(meta, Mapping) else None).get(
            "idempotent"))

    # ------------------------------------------------------------------ backoff
    def delay(self, n: int, *, retry_after: float | None = None) -> float:
        """Seconds to wait before the next retry, ``n`` retries made before it (0-based).

        ``min(max_delay, initial_delay * backoff_factor**n)``; with :attr:`jitter` times a
        uniform factor in ``[0.75, 1.25]`` (the module's global ``random``, so a seeded run
        repeats), capped at ``max_delay`` again; ``retry_after`` seconds (an error's
        ``Retry-After``) when larger, capped at ``max_delay`` too.
        """
        try:
            wait = min(self.max_delay, self.initial_delay * self.backoff_factor ** n)
        except OverflowError:  # a factor > 1 after very many retries
            wait = self.max_delay
        if self.jitter and wait > 0:
            factor = random.uniform(1 - JITTER_FRACTION, 1 + JITTER_FRACTION)  # not crypto
            wait = min(self.max_delay, wait * factor)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_delay))
        return wait
