"""What toolguard's LangGraph nodes share: the state keys, the ask mode, sync/async wiring."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda

from toolguard.errors import InputError
from toolguard.state import messages_of, validate_ask_user

__all__ = ["ToolguardNode"]


class ToolguardNode(RunnableLambda[Any, dict[str, Any]]):
    """A node that reads ``messages_key`` and may ask the user (``ask_user`` mode).

    Subclasses implement ``_run(state, config)`` and ``_arun(state, config)`` (both return
    the state update) and pass their own options on.

    Raises:
        toolguard.errors.ConfigurationError: An unknown ``ask_user`` mode.
    """

    def __init__(self, *, name: str, messages_key: str = "messages", ask_user: str = "auto",
                 model_node: str = "model") -> None:
        validate_ask_user(ask_user)
        run: Callable[[Any, RunnableConfig], dict[str, Any]] = self._run
        arun: Callable[[Any, RunnableConfig], Awaitable[dict[str, Any]]] = self._arun
        super().__init__(run, afunc=arun, name=name)
        self.messages_key = messages_key
        self.ask_user = ask_user
        self.model_node = model_node

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        raise NotImplementedError

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        raise NotImplementedError

    def _messages(self, state: Any) -> list[BaseMessage]:
        """The messages under ``messages_key``.

        Raises:
            toolguard.errors.InputError: There are none.
        """
        msgs = messages_of(state, self.messages_key)
        if not msgs:
            raise InputError(f"{type(self).__name__}: no messages under {self.messages_key!r}")
        return msgs
