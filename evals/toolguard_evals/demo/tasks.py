"""The main job's tasks: BFCL v4 single-turn requests, each with BFCL's gold, for an agent.

Three kinds, decided by the data, never by toolguard:

- ``call``: a tool serves the request and the gold lists the calls (``live_simple``,
  ``live_multiple``, ``live_parallel``; any single-turn category can be asked for); BFCL's
  AST checker judges what ran.
- ``no_tool``: no offered tool fits (``irrelevance``, ``live_irrelevance``); the task passes
  when nothing runs (BFCL's relevance rule).
- ``ask``: a ``live_simple`` request with the value of one required parameter removed
  from its text (the ICT paper's utterance removal; DATA.md §2a: only values that occur
  once, as a whole word); the task passes when nothing runs, and asking is warranted.

The default mix uses only categories the project keeps for evaluation (the learned
verifier's evaluation split; ``live_parallel`` is in neither split): toolguard's rules and
models were built on others.

:func:`select_tasks` draws a seeded sample per category; every task keeps its BFCL record,
so scoring is recomputable offline from the trace.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from toolguard_evals import bfcl

__all__ = [
    "DEFAULT_TASK_MIX",
    "REMOVED_VALUE",
    "REMOVED_VALUE_SOURCE",
    "AgentTask",
    "TaskKind",
    "remove_required_value",
    "select_tasks",
    "tasks_by_id",
]

TaskKind = Literal["call", "no_tool", "ask"]
REMOVED_VALUE: Final = "removed_value"
"""Category name of the ``ask`` tasks (a required value removed from the request)."""
REMOVED_VALUE_SOURCE: Final = "live_simple"
"""The category ``ask`` tasks are made from."""

DEFAULT_TASK_MIX: Final[Mapping[str, int]] = {
    "live_simple": 14,
    "live_multiple": 10,
    "live_parallel": 6,
    "irrelevance": 8,
    "live_irrelevance": 8,
    REMOVED_VALUE: 8,
}
"""Tasks per category of the main job (54; see the CHANGELOG for its wall time)."""

_MAX_DOC_CHARS: Final = 2500
"""Records whose function docs exceed this (as JSON) are left out: small models' prompts."""


@dataclass(frozen=True)
class AgentTask:
    """One request for the agent, with BFCL's record as the gold.

    Attributes:
        id: ``"{bfcl id}"``, or ``"removed_value:{bfcl id}"``.
        category: The BFCL category, or ``"removed_value"``.
        kind: See :data:`TaskKind`.
        record: The BFCL record the task is judged by (``ground_truth`` ``[]`` for
            ``no_tool`` and ``ask``).
        source: For ``ask`` tasks, the unmodified record (its gold names the tool that fits).
        removed: For ``ask`` tasks, ``(parameter, the text removed)``.
    """

    id: str
    category: str
    kind: TaskKind
    record: Mapping[str, Any]
    source: Mapping[str, Any] | None = None
    removed: tuple[str, str] | None = None

    @property
    def functions(self) -> list[dict[str, Any]]:
        """The BFCL docs of the offered tools."""
        return [dict(f) for f in self.record.get("function") or []]

    def messages(self) -> list[BaseMessage]:
        """The request's messages (BFCL's one turn; live records carry system turns)."""
        roles: dict[str, type[BaseMessage]] = {"user": HumanMessage, "system": SystemMessage,
                                               "assistant": AIMessage}
        turn = (self.record.get("question") or [[]])[0]
        return [roles.get(m.get("role", "user"), HumanMessage)(m["content"]) for m in turn]


def _kind(category: str) -> TaskKind:
    if category == REMOVED_VALUE:
        return "ask"
    return "no_tool" if category in bfcl.RELEVANCE_CATEGORIES else "call"


def _small(record: Mapping[str, Any]) -> bool:
    return len(json.dumps(record.get("function") or [])) <= _MAX_DOC_CHARS and len(
        record.get("question") or []) == 1


def remove_required_value(record: Mapping[str, Any]) -> AgentTask | None:
    """An ``ask`` task from a one-call record with one user message: a required value taken out.

    The first required parameter (doc order) whose gold value is a string or number that
    occurs exactly once in the user turn, as a whole word (case-insensitive), is removed
    together with the spaces around it.

    Returns:
        The task, or ``None`` when no required value can be removed that way.
    """
    gold = record.get("ground_truth") or []
    if len(gold) != 1 or not isinstance(gold[0], Mapping):
        return None
    ((name, params),) = gold[0].items()
    doc = next((d for d in record.get("function") or [] if d.get("name") == name), None)
    if doc is None:
        return None
    required = list((doc.get("parameters") or {}).get("required") or [])
    turn = (record.get("question") or [[]])[0]
    users = [i for i, m in enumerate(turn) if m.get("role") == "user"]
    if len(users) != 1:
        return None
    text = str(turn[users[0]]["content"])
    for param in required:
        values = [v for v in (params or {}).get(param, []) if v not in ("", None)]
        if not values or "" in (params or {}).get(param, []):
            continue
        value = values[0]
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            continue
        shown = str(value)
        if len(shown) < 2 and not shown.isdigit():
            continue
        pattern = re.compile(rf"(?<!\w){re.escape(shown)}(?!\w)", re.IGNORECASE)
        if len(pattern.findall(text)) != 1:
            continue
        cut = re.sub(r"\s{2,}", " ", pattern.sub("", text)).strip()
        cut = re.sub(r"\s+([,.?!])", r"\1", cut)
        question = [list(turn)]
        question[0][users[0]] = {**turn[users[0]], "content": cut}
        new = {"id": f"{REMOVED_VALUE}:{record['id']}", "question": question,
               "function": record["function"], "ground_truth": []}
        return AgentTask(id=new["id"], category=REMOVED_VALUE, kind="ask", record=new,
                         source=record, removed=(param, shown))
    return None


def select_tasks(
    mix: Mapping[str, int] | None = None,
    *,
    seed: int = 0,
) -> list[AgentTask]:
    """A seeded sample of tasks per category.

    Args:
        mix: ``category -> count`` (BFCL single-turn categories and ``"removed_value"``);
            default :data:`DEFAULT_TASK_MIX`.
        seed: Sampling seed (``random.Random(f"{seed}:{category}")``).

    Returns:
        The tasks, grouped by category in ``mix`` order.  ``removed_value`` tasks come from
        :data:`REMOVED_VALUE_SOURCE` records that an earlier sample in ``mix`` did not take.

    Raises:
        ValueError: An unknown category, a negative count, or too few usable records.
        BFCLNotInstalledError: ``bfcl-eval`` is not installed.
    """
    mix = dict(DEFAULT_TASK_MIX if mix is None else mix)
    known = (*bfcl.SINGLE_TURN_CATEGORIES, REMOVED_VALUE)
    bad = [c for c in mix if c not in known]
    if bad or any(n < 0 for n in mix.values()):
        raise ValueError(f"mix: categories must be among {list(known)} with counts >= 0; "
                         f"got {dict(mix)}")
    used: set[str] = set()
    out: list[AgentTask] = []
    for category, n in mix.items():
        if n == 0:
            continue
        rng = random.Random(f"{seed}:{category}")
        if category == REMOVED_VALUE:
            pool = [r for r in bfcl.load_category(REMOVED_VALUE_SOURCE)
                    if _small(r) and r["id"] not in used]
            rng.shuffle(pool)
            picked = [t for t in (remove_required_value(r) for r in pool) if t is not None][:n]
        else:
            records = [r for r in bfcl.load_category(category)  # type: ignore[arg-type]
                       if _small(r)]
            chosen = rng.sample(records, min(n, len(records)))
            picked = [AgentTask(id=str(r["id"]), category=category, kind=_kind(category),
                                record=r) for r in chosen]
        if len(picked) < n:
            raise ValueError(f"only {len(picked)} usable {category} tasks, {n} wanted")
        used.update(t.id if t.source is None else str(t.source["id"]) for t in picked)
        out += sorted(picked, key=lambda t: t.id)
    return out


def tasks_by_id(ids: Sequence[str]) -> list[AgentTask]:
    """Tasks by id (``"simple_python_3"``, ``"removed_value:simple_python_3"``).

    Raises:
        ValueError: An id of no single-turn category, a record not found, or a record
            whose value cannot be removed.
    """
    out: list[AgentTask] = []
    for task_id in ids:
        base = task_id.split(":", 1)[1] if task_id.startswith(f"{REMOVED_VALUE}:") else task_id
        category = base.rsplit("_", 1)[0]
        if category not in bfcl.SINGLE_TURN_CATEGORIES:
            raise ValueError(f"{task_id!r} is not a BFCL single-turn id")
        record = next((r for r in bfcl.load_category(category) if r["id"] == base), None)
        if record is None:
            raise ValueError(f"no BFCL record {base!r}")
        if base != task_id:
            task = remove_required_value(record)
            if task is None:
                raise ValueError(f"{base!r} has no required value to remove")
            out.append(task)
        else:
            out.append(AgentTask(id=base, category=category, kind=_kind(category),
                                 record=record))
    return out
