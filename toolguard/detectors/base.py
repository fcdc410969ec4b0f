"""The detector interface and the registry that makes a new detector one file.

A detector checks one proposed tool call and returns a :class:`~toolguard.types.Verdict`
or ``None``.  :class:`~toolguard.guard.Guard` builds detectors by name from
:data:`DETECTORS`; a detector registers itself with :func:`register_detector` in its own
module, which ``toolguard.detectors`` imports.  Adding a fifth kind is one file plus one
import line: its ``kind`` becomes a name ``Guard(detectors=[...])`` accepts, the
``Verdict.kind`` of its verdicts and a counter of the guard's state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from toolguard.context import CheckContext, ProposedCall
from toolguard.errors import ConfigurationError
from toolguard.types import Verdict

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from toolguard.relevance import RelevanceJudge

__all__ = ["DETECTORS", "Detector", "DetectorOptions", "register_detector"]


@dataclass(frozen=True, slots=True)
class DetectorOptions:
    """What :class:`~toolguard.guard.Guard` hands every detector it builds by name.

    Attributes:
        relevance: The relevance judge for existing tools (``None``: relevance is off).
        judge_model: A chat model for LLM judges, or ``None`` (deterministic).
        content_llm_mode: The content detector's LLM mode (``None``: its default).
        extra: Options for third-party detectors, by detector kind.
    """

    relevance: RelevanceJudge | None = None
    judge_model: BaseChatModel | None = None
    content_llm_mode: str | None = None
    extra: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class Detector(ABC):
    """Checks one proposed tool call; returns a :class:`~toolguard.types.Verdict` or ``None``.

    ``None`` means the detector found nothing.  Detectors run in order and the first
    verdict wins.  Deterministic detectors implement :meth:`check` only; detectors backed
    by an LLM judge override :meth:`acheck` too, sharing prompt building and parsing.

    Attributes:
        kind: The detector's name and the :attr:`~toolguard.types.Verdict.kind` of its
            verdicts: RelyToolBench's ``type``, ``timing``, ``format``, ``content`` (also
            their ``hallucination``), or any other registered kind (``provenance``).
    """

    kind: ClassVar[str]

    @classmethod
    def from_options(cls, options: DetectorOptions) -> Detector:
        """Build the detector for a :class:`~toolguard.guard.Guard`.

        The default passes ``options.extra[kind]`` as keyword options (third-party
        detectors); the built-in ones read the judge and model they need.
        """
        return cls(**dict(options.extra.get(cls.kind, {})))

    @abstractmethod
    def check(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        """Check ``call`` in ``ctx``; ``None`` if nothing is wrong."""

    async def acheck(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        """Async twin of :meth:`check` (deterministic detectors run inline)."""
        return self.check(call, ctx)


DETECTORS: dict[str, type[Detector]] = {}
"""Registered detector classes by ``kind``, in registration order."""

D = TypeVar("D", bound=type[Detector])


def register_detector(cls: D) -> D:
    """Class decorator: register a :class:`Detector` subclass under its ``kind``.

    Raises:
        toolguard.errors.ConfigurationError: ``kind`` is missing or already taken by
            another class.
    """
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str) or not kind:
        raise ConfigurationError(f"{cls.__name__} needs a non-empty string `kind`")
    other = DETECTORS.get(kind)
    if other is not None and other.__qualname__ != cls.__qualname__:
        raise ConfigurationError(f"detector kind {kind!r} is taken by {other.__name__}")
    DETECTORS[kind] = cls
    return cls
