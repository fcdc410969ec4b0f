"""toolguard's exceptions: one base class, specific subclasses.

Every error toolguard raises on purpose derives from :class:`ToolguardError`, so an
application can catch toolguard's errors apart from its own.  The subclasses also derive
from the built-in exception a caller would have caught before (``ValueError``,
``TypeError``, ``LookupError``), so ``except ValueError`` keeps working.

A guard never raises into the user's graph because of a tool call it checks: bad model
output becomes a verdict.  These errors are for the programmer: a bad option, input of no
supported shape, an interrupt answered with a value of the wrong shape.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfigurationError",
    "InputError",
    "KGError",
    "LoopDetectedError",
    "ToolSpecError",
    "ToolguardError",
    "at_least",
]


class ToolguardError(Exception):
    """Base class of every error toolguard raises on purpose."""


class ConfigurationError(ToolguardError, ValueError):
    """An option is unknown or out of its bounds; the message states the bound.

    Raised at construction (``max_retries must be >= 0``), never later.
    """


class ToolSpecError(ToolguardError, TypeError, ValueError):
    """A tool is of no supported form (LangChain tool, OpenAI function, BFCL or ToolBench doc).

    Both a ``TypeError`` (a value of the wrong kind) and a ``ValueError`` (a doc without a
    ``name``), as the two cases raised before.
    """


class InputError(ToolguardError, ValueError):
    """Input of the wrong shape: messages that are not messages, an empty conversation, ..."""


class KGError(ToolguardError, ValueError):
    """A knowledge-graph operation got bad input (a malformed triple, a missing user id)."""


class LoopDetectedError(ToolguardError, RuntimeError):
    """Raised by ``LoopGuardMiddleware(exit_behavior="error")`` when the agent keeps looping.

    Attributes:
        verdict: The loop guard's ``LoopVerdict`` (kind, signature, counts), or ``None``.
    """

    def __init__(self, message: str, *, verdict: Any = None) -> None:
        super().__init__(message)
        self.verdict = verdict


def at_least(name: str, value: object, bound: int) -> None:
    """Check an integer option.

    Raises:
        ConfigurationError: ``value`` is not an integer ``>= bound`` (the message states the
            bound and the value given).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < bound:
        raise ConfigurationError(f"{name} must be an integer >= {bound}, got {value!r}")
