"""One sync and one async driver for toolguard's sans-IO plans.

A plan is a generator that yields steps and receives each step's result; a step does its
I/O in ``run()`` (sync) or ``await arun()`` (async).  Engines write the plan once; the
drivers below are the only sync/async pair (the ``Precheck._steps`` pattern, generalised).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol, TypeAlias, TypeVar

__all__ = ["Plan", "Step", "adrive", "drive"]

T = TypeVar("T")
R_co = TypeVar("R_co", covariant=True)


class Step(Protocol[R_co]):
    """A plan step: the I/O one engine needs (a store read, an interrupt, a tool run)."""

    def run(self) -> R_co:
        """Do it synchronously; the result goes back to the plan."""
        ...

    async def arun(self) -> R_co:
        """Do it asynchronously; the result goes back to the plan."""
        ...


Plan: TypeAlias = Generator[Step[Any], Any, T]
"""A plan returning ``T``: yields :class:`Step` s, receives their results."""


def drive(plan: Plan[T]) -> T:
    """Run ``plan`` with each step's sync API; its result.

    Raises:
        Exception: Whatever a step raises, unchanged (LangGraph's interrupts included).
    """
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            result: T = done.value
            return result
        reply = step.run()


async def adrive(plan: Plan[T]) -> T:
    """Async :func:`drive`: each step's ``await arun()``."""
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            result: T = done.value
            return result
        reply = await step.arun()
