"""Build the demo's cases: BFCL v4 multi-turn episodes, their gold state and gold script.

:func:`select_episodes` picks a deterministic mix (base, miss_param, miss_func) that small
models' contexts fit; :func:`episodes_by_id` loads named ones.  :func:`gold_state` is the
environment after BFCL's gold calls (the state-match oracle), :func:`gold_script` the
replies of a model that makes exactly the gold calls (a scripted smoke test).
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
)

from toolguard_evals import bfcl

MISS_FUNC_PROMPT: Final = (
    "I have updated some more functions you can choose from. What about now?"
)
"""User prompt of the turn where held-out ``miss_func`` docs are added
(BFCL's ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``)."""


DEFAULT_MIX: Final[tuple[bfcl.MultiTurnCategory, ...]] = (
    "multi_turn_base",
    "multi_turn_miss_param",
    "multi_turn_miss_func",
    "multi_turn_base",
)
"""Categories of episodes 1, 2, 3, 4, 5, ... (cycled): 4 episodes give 2 base,
1 miss_param, 1 miss_func."""


@functools.cache
def _class_importable(class_name: str) -> bool:
    try:
        bfcl.environment_class(class_name)
    except (ImportError, ValueError):  # memory / web-search classes need heavy packages
        return False
    return True


def episode_importable(episode: bfcl.MultiTurnEpisode) -> bool:
    """Whether every involved environment class imports here."""
    return all(_class_importable(c) for c in episode.involved_classes)


def doc_chars(episode: bfcl.MultiTurnEpisode) -> int:
    """Size of the episode's function docs as JSON (characters): a proxy for prompt size."""
    return len(json.dumps(episode.functions))


@functools.cache
def _episodes(category: bfcl.MultiTurnCategory) -> tuple[bfcl.MultiTurnEpisode, ...]:
    """A category's episodes, loaded once per process (shared: do not mutate them)."""
    return tuple(bfcl.load_multi_turn(category))


def _base_index(episode: bfcl.MultiTurnEpisode) -> int:
    return int(episode.id.rsplit("_", 1)[-1])


def select_episodes(
    n: int = 4,
    *,
    seed: int = 0,
    mix: Sequence[bfcl.MultiTurnCategory] = DEFAULT_MIX,
    max_classes: int = 1,
    max_doc_chars: int | None = 14_000,
) -> list[bfcl.MultiTurnEpisode]:
    """A deterministic mix of multi-turn episodes that small models' contexts fit.

    Episode ``i`` comes from ``mix[i % len(mix)]``.  Within a category, episodes whose
    classes all import, with at most ``max_classes`` involved classes and at most
    ``max_doc_chars`` characters of docs, are preferred (with the defaults: the
    ``TradingBot`` and ``GorillaFileSystem`` episodes, about 3-4k tokens of tools); they
    are sampled with ``random.Random(f"{seed}:{category}")``.  If too few qualify, the
    rest is filled with the smallest other ones.  No two picked episodes share a scenario
    (``multi_turn_miss_param_7`` is ``multi_turn_base_7`` with an argument removed).

    Args:
        n: Number of episodes (>= 1).
        seed: Sampling seed.
        mix: Category cycle.
        max_classes: Preferred maximum of involved classes.
        max_doc_chars: Preferred maximum of doc characters (``None``: no limit).

    Returns:
        The episodes, grouped by category in ``MULTI_TURN_CATEGORIES`` order, by id within.

    Raises:
        ValueError: For ``n < 1``, an empty or unknown ``mix``, or too few episodes.
        BFCLNotInstalledError: If ``bfcl-eval`` is not installed.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    if not mix or any(c not in bfcl.MULTI_TURN_CATEGORIES for c in mix):
        raise ValueError(f"mix must name categories among {list(bfcl.MULTI_TURN_CATEGORIES)}")
    wanted = Counter(mix[i % len(mix)] for i in range(n))
    used: set[int] = set()
    out: list[bfcl.MultiTurnEpisode] = []
    for category in bfcl.MULTI_TURN_CATEGORIES:
        k = wanted.get(category, 0)
        if not k:
            continue
        candidates = [e for e in _episodes(category) if episode_importable(e)]

        def preferred(e: bfcl.MultiTurnEpisode) -> bool:
            return len(e.involved_classes) <= max_classes and (
                max_doc_chars is None or doc_chars(e) <= max_doc_chars)

        rng = random.Random(f"{seed}:{category}")
        pool = [e for e in candidates if preferred(e) and _base_index(e) not in used]
        picked = rng.sample(pool, min(k, len(pool)))
        if len(picked) < k:
            rest = sorted((e for e in candidates if e not in picked
                           and _base_index(e) not in used),
                          key=lambda e: (len(e.involved_classes), doc_chars(e), e.id))
            picked += rest[: k - len(picked)]
        if len(picked) < k:
            raise ValueError(f"only {len(picked)} usable {category} episodes, {k} wanted")
        used.update(_base_index(e) for e in picked)
        out += sorted(picked, key=_base_index)
    return out


def episodes_by_id(ids: Sequence[str]) -> list[bfcl.MultiTurnEpisode]:
    """Load episodes by id, e.g. ``["multi_turn_base_100"]``.

    Raises:
        ValueError: For an id of no multi-turn category, or one not found.
    """
    out: list[bfcl.MultiTurnEpisode] = []
    for episode_id in ids:
        category = next((c for c in bfcl.MULTI_TURN_CATEGORIES
                         if re.fullmatch(rf"{c}_\d+", episode_id)), None)
        if category is None:
            raise ValueError(f"{episode_id!r} is not a multi-turn episode id")
        found = [e for e in _episodes(category) if e.id == episode_id]
        if not found:
            raise ValueError(f"no episode {episode_id!r}")
        out.append(found[0])
    return out


_GOLD_STATES: dict[str, dict[str, dict[str, Any]]] = {}


def gold_state(episode: bfcl.MultiTurnEpisode) -> dict[str, dict[str, Any]]:
    """Public state of every instance after BFCL's gold calls of all turns (cached per id)."""
    if episode.id not in _GOLD_STATES:
        env, _ = bfcl.replay(episode)
        _GOLD_STATES[episode.id] = env.state()
    return _GOLD_STATES[episode.id]


def gold_script(episode: bfcl.MultiTurnEpisode) -> list[AIMessage]:
    """Replies of a model that makes exactly the gold calls, for a ``ScriptedChatModel``.

    Per turn that the harness sends to the model: one ``AIMessage`` per gold call (gold
    calls depend on each other, so they are not sent in parallel), then a text answer.
    Turns with empty gold get only the text answer.

    Raises:
        ValueError: If a gold call does not parse or fit its method.
    """
    env = bfcl.BFCLEnvironment.for_episode(episode)
    out: list[AIMessage] = []
    for t, calls in enumerate(episode.gold):
        if not turn_messages(episode, t):
            continue
        for i, source in enumerate(calls):
            parsed = bfcl.parse_call(source)
            out.append(AIMessage("", tool_calls=[
                {"name": parsed.name, "args": env.bind(parsed), "id": f"gold_t{t}_{i}",
                 "type": "tool_call"}]))
        out.append(AIMessage(f"Done with turn {t}."))
    return out


def turn_messages(episode: bfcl.MultiTurnEpisode, turn: int) -> list[BaseMessage]:
    """The messages a turn appends (the ``miss_func`` prompt for a held-out turn)."""
    raw = episode.turns[turn]
    if not raw:
        return [HumanMessage(MISS_FUNC_PROMPT)] if turn in episode.missed_function else []
    roles: dict[str, type[BaseMessage]] = {"user": HumanMessage, "system": SystemMessage,
                                           "assistant": AIMessage}
    return [roles.get(m.get("role", "user"), HumanMessage)(m["content"]) for m in raw]
