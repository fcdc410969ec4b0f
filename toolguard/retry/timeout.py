"""Tool calls with a deadline: :func:`run_with_timeout` and :func:`arun_with_timeout`.

A call that runs past ``timeout_s`` seconds raises ``TimeoutError("tool call timed out
after N s")``, sync and async alike; a ``TimeoutError`` the tool raises itself keeps its
own message.  Python cannot stop a thread, so:

- a synchronous tool runs in its own daemon thread (in an async run, on its own event loop
  there); a timed-out one keeps running there, its result discarded, and nothing waits for
  it: neither the next call, nor ``asyncio.run`` shutting its executor down, nor the
  interpreter's exit;
- an async tool is cancelled (``asyncio.timeout``).

The thread runs with the caller's context variables, so LangGraph's config, stream writer
and interrupts work inside the tool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, Tool

__all__ = ["arun_with_timeout", "run_with_timeout", "sync_only", "timeout_text"]

Handler = Callable[[Any], Any]
"""``handler(request)``: runs the tool call (``ToolNode``'s ``execute``)."""
AsyncHandler = Callable[[Any], Awaitable[Any]]
"""``await handler(request)``: the async twin."""


def timeout_text(seconds: float) -> str:
    """The message of a call that ran past ``seconds`` (sync and async say the same)."""
    return f"tool call timed out after {seconds:g} s"


def run_with_timeout(handler: Handler, request: Any, timeout_s: float | None) -> Any:
    """``handler(request)``, abandoned after ``timeout_s`` seconds (``None``: no deadline).

    Raises:
        TimeoutError: The call ran past ``timeout_s`` (:func:`timeout_text`).
        BaseException: Whatever the handler raised.
    """
    if timeout_s is None:
        return handler(request)
    ctx = contextvars.copy_context()
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["result"] = ctx.run(handler, request)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="toolguard-tool", daemon=True).start()
    if not done.wait(timeout_s):
        raise TimeoutError(timeout_text(timeout_s))
    if "error" in box:
        raise box["error"]
    return box["result"]


async def arun_with_timeout(handler: AsyncHandler, request: Any, timeout_s: float | None,
                            tool: Any = None) -> Any:
    """``await handler(request)``, abandoned after ``timeout_s`` seconds (``None``: none).

    ``tool`` (the request's LangChain tool) decides how: a synchronous one
    (:func:`sync_only`) runs on its own loop in a daemon thread, an async one is cancelled.

    Raises:
        TimeoutError: The call ran past ``timeout_s`` (:func:`timeout_text`).
        BaseException: Whatever the handler raised.
    """
    if timeout_s is None:
        return await handler(request)
    if sync_only(tool):
        return await _in_thread(handler, request, timeout_s)
    return await _deadline(handler(request), timeout_s)


async def _deadline(awaitable: Awaitable[Any], seconds: float) -> Any:
    """``await awaitable``; ``TimeoutError`` naming ``seconds`` when it runs past it.

    A ``TimeoutError`` the awaitable raises itself is passed on as it is.
    """
    try:
        async with asyncio.timeout(seconds) as scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():
            raise TimeoutError(timeout_text(seconds)) from None
        raise


def sync_only(tool: Any) -> bool:
    """Whether ``tool`` is a LangChain tool without a coroutine (run in a thread when async).

    ``StructuredTool`` / ``Tool`` without ``coroutine``, or a ``BaseTool`` subclass that does
    not override ``_arun``.
    """
    if not isinstance(tool, BaseTool):
        return False
    if isinstance(tool, StructuredTool | Tool):
        return tool.coroutine is None
    return type(tool)._arun is BaseTool._arun


class _DaemonThreadExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each submitted function in its own daemon thread.

    The default executor of the event loop :func:`_in_thread` makes: a timed-out
    synchronous tool keeps running in a daemon thread, which neither the caller's
    ``asyncio.run`` (it shuts down *its* default executor, joining every worker) nor the
    interpreter's exit waits for.  (A ``ThreadPoolExecutor`` by type, as
    ``loop.set_default_executor`` requires; its pool is never used.)
    """

    def submit(self, fn: Callable[..., Any], /, *args: Any,
               **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the awaiting coroutine
                future.set_exception(exc)

        threading.Thread(target=run, name="toolguard-tool", daemon=True).start()
        return future


async def _in_thread(handler: AsyncHandler, request: Any, seconds: float) -> Any:
    """``await handler(request)`` for a synchronous tool, abandoned after ``seconds``.

    The async tool node runs a synchronous tool in the running loop's default executor;
    a hung tool would then keep that executor's worker busy and ``asyncio.run`` would wait
    for it when it shuts the executor down (seconds after the run answered the timeout).
    Here the handler runs on its own event loop in a daemon thread (the caller's context
    variables copied, as :func:`run_with_timeout` does), whose default executor makes daemon
    threads; the caller awaits the outcome for at most ``seconds``.
    """
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if outcome.done():
            return
        if error is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(result)

    def target() -> None:
        inner = asyncio.new_event_loop()
        inner.set_default_executor(_DaemonThreadExecutor())
        result: Any = None
        error: BaseException | None = None
        try:
            result = inner.run_until_complete(handler(request))
        except BaseException as exc:  # handed to the caller below
            error = exc
        finally:
            inner.close()
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=lambda: ctx.run(target), name="toolguard-tool",
                     daemon=True).start()
    return await _deadline(outcome, seconds)  # cancelled on timeout: a late outcome is dropped
