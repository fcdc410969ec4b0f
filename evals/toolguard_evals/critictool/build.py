"""A CRITICTOOL-style set built from BFCL v4 ``multi_turn_base`` ground truth.

Records are in the official format (:mod:`toolguard_evals.critictool.data`), so the same
scorer and runner serve both.  Gold calls are replayed in BFCL's executable environments,
so every tool answer in a history is real; the tool list is CRITICTOOL's standardized
format with the tools the gold uses plus distractors (up to ``max_tools``).

- Internal records, one per ``error_type`` (``""``, ``tool_select_error``,
  ``tool_hallucination_error``, ``parameters_key_error``, ``parameters_value_error``) at a
  step drawn with ``random.Random(f"{seed}:{episode_id}:{kind}")``: the last assistant step
  is the gold call or a wrong one (:func:`build_from_bfcl` says how each is made), answered
  by executing it on a copy of the environment; ground truth the gold call.
- External records: a gold call answered by an injected error (``timeout``,
  ``rate_limit``, ``permission``); ground truth ``[that call, next step]``, run in skip and
  finish mode; ``meta["read_only"]`` from :func:`toolguard_evals.faults.prepare_episode`.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from toolguard_evals import bfcl
from toolguard_evals.critictool.data import (
    ERROR_TYPES,
    FINISH,
    CriticToolRecord,
    Split,
    system_prompt,
)
from toolguard_evals.faults import prepare_episode

EnvironmentError_ = Literal["timeout", "rate_limit", "permission"]
"""The injected environment errors of external records."""
ENVIRONMENT_ERRORS: Final[tuple[EnvironmentError_, ...]] = get_args(EnvironmentError_)
ERROR_TEXT: Final[dict[str, str]] = {
    "timeout": json.dumps({"error": "Request timed out: the tool did not respond within 30 "
                                    "seconds (timeout)."}),
    "rate_limit": json.dumps({"error": "HTTP 429 Too Many Requests: rate limit exceeded for "
                                       "this API key. Retry-After: 2"}),
    "permission": json.dumps({"error": "HTTP 403 Forbidden: permission denied for this "
                                       "operation."}),
}
"""The injected answers (BFCL environments answer errors as ``{"error": ...}``)."""
SOURCE: Final = "bfcl_v4:multi_turn_base"
_TYPE_NAMES: Final = {"tuple": "array"}
_DEFAULTS: Final[dict[str, Any]] = {"string": "default", "integer": 1, "float": 1.0,
                                    "boolean": True, "array": [], "dict": {}, "any": ""}
_PY_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,), "integer": (int,), "float": (float,), "boolean": (bool,),
    "array": (list,), "dict": (dict,), "any": (object,)}
_PREFIX = re.compile(r"^This tool belongs to .*?Tool description:\s*", re.S)


def critictool_tool(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A BFCL function doc in CRITICTOOL's standardized tool format (BFCL type names kept)."""
    params = doc.get("parameters") or {}
    props: Mapping[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])

    def entry(name: str) -> dict[str, Any]:
        spec = props[name] if isinstance(props[name], Mapping) else {}
        kind = str(spec.get("type", "string"))
        return {"name": name, "type": _TYPE_NAMES.get(kind, kind),
                "description": str(spec.get("description", ""))}

    return {
        "name": str(doc["name"]),
        "description": _PREFIX.sub("", str(doc.get("description", ""))),
        "required_parameters": [entry(n) for n in props if n in required],
        "optional_parameters": [entry(n) for n in props if n not in required],
    }


@dataclass(frozen=True, slots=True)
class _Step:
    turn: int
    name: str
    args: dict[str, Any]
    answer: str
    env_before: bfcl.BFCLEnvironment
    read_only: bool


def _step_text(name: str, args: Any) -> str:
    return json.dumps({"name": name, "args": args}, ensure_ascii=False)


class _Episode:
    """One replayed episode and the histories built on it."""

    def __init__(self, episode: bfcl.MultiTurnEpisode, *, seed: int, max_tools: int) -> None:
        self.episode = episode
        self.seed = seed
        prepared = prepare_episode(episode, seed=seed)
        env = bfcl.BFCLEnvironment.for_episode(episode)
        self.steps: list[_Step] = []
        for call in prepared.calls:
            before = env.clone()
            result = env.call(call.name, copy.deepcopy(call.args))
            self.steps.append(_Step(call.turn, call.name, dict(call.args), result.content,
                                    before, call.read_only))
        self.all_names = {d["name"] for d in episode.functions}
        used = {s.name for s in self.steps}
        rng = self.rng("tools")
        others = [d["name"] for d in episode.functions if d["name"] not in used]
        extra = set(rng.sample(others, min(len(others), max(0, max_tools - len(used)))))
        self.tools = [critictool_tool(d) for d in episode.functions
                      if d["name"] in used or d["name"] in extra]
        self.by_name = {t["name"]: t for t in self.tools}
        self.system = system_prompt(self.tools)

    def rng(self, kind: str) -> random.Random:
        return random.Random(f"{self.seed}:{self.episode.id}:{kind}")

    def next_step(self, k: int) -> dict[str, Any] | None:
        if k + 1 < len(self.steps) and self.steps[k + 1].turn == self.steps[k].turn:
            nxt = self.steps[k + 1]
            return {"name": nxt.name, "args": copy.deepcopy(nxt.args)}
        return None

    def history(self, k: int, last_call: str, last_answer: str) -> list[dict[str, str]]:
        """System, turns and steps before ``k``, then ``last_call`` answered by ``last_answer``."""
        msgs: list[dict[str, str]] = [{"role": "system", "content": self.system}]
        turn = -1

        def open_turns(upto: int) -> None:
            nonlocal turn
            while turn < upto:
                turn += 1
                for m in self.episode.turns[turn]:
                    msgs.append({"role": str(m.get("role", "user")),
                                 "content": str(m.get("content", ""))})

        for s in self.steps[:k]:
            open_turns(s.turn)
            msgs += [{"role": "assistant", "content": _step_text(s.name, s.args)},
                     {"role": "function", "content": s.answer}]
        open_turns(self.steps[k].turn)
        msgs += [{"role": "assistant", "content": last_call},
                 {"role": "function", "content": last_answer}]
        return msgs

    def meta(self, k: int, **extra: Any) -> dict[str, Any]:
        return {"source": SOURCE, "episode": self.episode.id, "step": k,
                "turn": self.steps[k].turn, "read_only": self.steps[k].read_only, **extra}

    # ------------------------------------------------------------------ records
    def clean(self) -> CriticToolRecord | None:
        k = self.rng("clean").randrange(len(self.steps))
        s = self.steps[k]
        gt = self.next_step(k) or {"name": FINISH, "args": "The request is done."}
        return CriticToolRecord(
            id=f"{self.episode.id}:clean", split="internal",
            query_prompt=tuple(self.history(k, _step_text(s.name, s.args), s.answer)),
            ground_truth=gt, error_type="", meta=self.meta(k))

    def internal(self, error_type: str) -> CriticToolRecord | None:
        rng = self.rng(error_type)
        order = list(range(len(self.steps)))
        rng.shuffle(order)
        for k in order:
            s = self.steps[k]
            wrong = _perturb(error_type, s, self, rng)
            if wrong is None:
                continue
            name, args = wrong
            answer = s.env_before.clone().call(name, copy.deepcopy(args)).content
            return CriticToolRecord(
                id=f"{self.episode.id}:{error_type}", split="internal",
                query_prompt=tuple(self.history(k, _step_text(name, args), answer)),
                ground_truth={"name": s.name, "args": copy.deepcopy(s.args)},
                error_type=error_type,
                meta=self.meta(k, wrong_call={"name": name, "args": args}))
        return None

    def external(self) -> CriticToolRecord:
        rng = self.rng("external")
        followed = [k for k in range(len(self.steps)) if self.next_step(k) is not None]
        k = rng.choice(followed or list(range(len(self.steps))))
        kind = rng.choice(ENVIRONMENT_ERRORS)
        s = self.steps[k]
        nxt = self.next_step(k) or {
            "name": FINISH, "args": f"I could not complete the request: {s.name} failed with "
                                    "an environment error."}
        return CriticToolRecord(
            id=f"{self.episode.id}:external:{kind}", split="external",
            query_prompt=tuple(self.history(k, _step_text(s.name, s.args), ERROR_TEXT[kind])),
            ground_truth=[{"name": s.name, "args": copy.deepcopy(s.args)}, nxt],
            meta=self.meta(k, environment_error=kind))


# ---------------------------------------------------------------------------- perturbations
def _filler(kind: str, gold_args: Mapping[str, Any]) -> Any:
    types = _PY_TYPES.get(kind, (str,))
    for v in gold_args.values():
        if isinstance(v, types) and not (kind == "integer" and isinstance(v, bool)):
            return copy.deepcopy(v)
    return copy.deepcopy(_DEFAULTS.get(kind, "default"))


def _perturb(error_type: str, s: _Step, ep: _Episode,
             rng: random.Random) -> tuple[str, dict[str, Any]] | None:
    """The wrong call of ``error_type`` at step ``s``, or ``None`` where it does not apply."""
    if error_type == "tool_select_error":
        return _wrong_tool(s, ep, rng)
    if error_type == "tool_hallucination_error":
        return _made_up_tool(s, ep, rng)
    if error_type == "parameters_key_error":
        return _wrong_key(s, ep, rng)
    if error_type == "parameters_value_error":
        return _wrong_value(s, ep, rng)
    raise ValueError(f"unknown error type {error_type!r}; expected one of {list(ERROR_TYPES)}")


def _wrong_tool(s: _Step, ep: _Episode, rng: random.Random) -> tuple[str, dict[str, Any]] | None:
    tiers: list[list[dict[str, Any]]] = [[], [], []]
    for t in ep.tools:
        if t["name"] == s.name:
            continue
        required = [p["name"] for p in t["required_parameters"]]
        tier = 0 if required and all(r in s.args for r in required) else (1 if not required else 2)
        tiers[tier].append(t)
    pool = next((tier for tier in tiers if tier), None)
    if pool is None:
        return None
    tool = rng.choice(pool)
    args: dict[str, Any] = {}
    for p in tool["required_parameters"]:
        args[p["name"]] = (copy.deepcopy(s.args[p["name"]]) if p["name"] in s.args
                           else _filler(p["type"], s.args))
    for p in tool["optional_parameters"]:
        if p["name"] in s.args:
            args[p["name"]] = copy.deepcopy(s.args[p["name"]])
    return tool["name"], args


def _made_up_tool(s: _Step, ep: _Episode,
                  rng: random.Random) -> tuple[str, dict[str, Any]] | None:
    n = s.name
    parts = n.split("_")
    candidates = [
        n.replace("get_", "fetch_", 1) if n.startswith("get_") else f"get_{n}",
        f"{n}_tool",
        parts[0] + "".join(p.title() for p in parts[1:]) if len(parts) > 1 else f"{n}_v2",
        f"execute_{n}",
    ]
    names = [c for c in dict.fromkeys(candidates) if c not in ep.all_names and c != n]
    return (rng.choice(names), copy.deepcopy(s.args)) if names else None


def _wrong_key(s: _Step, ep: _Episode, rng: random.Random) -> tuple[str, dict[str, Any]] | None:
    if not s.args:
        return None
    tool = ep.by_name[s.name]
    declared = {p["name"] for p in tool["required_parameters"] + tool["optional_parameters"]}
    required = [p["name"] for p in tool["required_parameters"] if p["name"] in s.args]
    key = rng.choice(sorted(s.args))
    if required and rng.random() < 0.5:
        drop = rng.choice(required)
        return s.name, {k: copy.deepcopy(v) for k, v in s.args.items() if k != drop}
    renames = [c for c in (f"{key}_name", f"{key}_value", f"new_{key}", f"{key}_id")
               if c not in declared]
    new = rng.choice(renames)
    return s.name, {(new if k == key else k): copy.deepcopy(v) for k, v in s.args.items()}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)


def _wrong_value(s: _Step, ep: _Episode,
                 rng: random.Random) -> tuple[str, dict[str, Any]] | None:
    if not s.args:
        return None
    key = rng.choice(sorted(s.args))
    v = s.args[key]
    new: Any
    if isinstance(v, bool):
        new = not v
    elif isinstance(v, int):
        new = v + 1
    elif isinstance(v, float):
        new = round(v + 1.0, 4)
    elif isinstance(v, str):
        pool = sorted({x for st in ep.steps for x in _strings(st.args) if x != v and x})
        new = rng.choice(pool) if pool else f"{v}_1"
    elif isinstance(v, list):
        new = copy.deepcopy(v[:-1]) if len(v) > 1 else (copy.deepcopy(v) * 2 if v else ["item"])
    elif isinstance(v, dict):
        new = {} if v else {"key": "value"}
    else:
        new = "none"
    if new == v:
        return None
    args = copy.deepcopy(s.args)
    args[key] = new
    return s.name, args


# ---------------------------------------------------------------------------- entry point
def build_from_bfcl(*, seed: int = 0, limit: int | None = None, max_tools: int = 12,
                    episodes: Sequence[bfcl.MultiTurnEpisode] | None = None,
                    ) -> dict[Split, list[CriticToolRecord]]:
    """Build the internal and external records from BFCL v4 ``multi_turn_base``.

    The last assistant step of an internal record, per ``error_type``:

    =============================  ===============================================================
    ``error_type``                 the last assistant step (step ``k``) of the history
    =============================  ===============================================================
    ``""``                         the gold call ``k`` and its real answer; ground truth: the next
                                   gold call of the turn, else ``FinishAction``
    ``tool_select_error``          another listed tool (one whose required args the gold args can
                                   fill, if any; else one without required args; else any, with
                                   placeholder values)
    ``tool_hallucination_error``   a tool name that no involved class has (``get_cd``, ``cd_tool``,
                                   ...), the gold args
    ``parameters_key_error``       one gold arg renamed (``folder`` -> ``folder_name``) or a
                                   required one dropped
    ``parameters_value_error``     one gold arg changed: a string -> another string of the
                                   episode's gold calls (else ``value_1``), a number + 1, a bool
                                   negated, a list shortened, a dict emptied
    =============================  ===============================================================

    An error record's wrong call is answered by executing it on a copy of the environment as
    it was before its step (errors as BFCL's executor writes them); its ground truth is the
    gold call.  An external record's step ``k`` is drawn among steps followed by another
    call of the same turn when there are any.

    Args:
        seed: Seed of every random choice (steps, perturbations, tools, error kinds).
        limit: Records per split (episodes are taken in file order until both splits have
            ``limit``; internal records come five per episode, in :data:`INTERNAL_KINDS` order).
        max_tools: Tools in each system prompt (gold tools are always listed); >= 1.
        episodes: Episodes to use instead of loading ``multi_turn_base``.

    Returns:
        ``{"internal": [...], "external": [...]}``.

    Raises:
        ValueError: For ``limit < 0`` or ``max_tools < 1``.
        toolguard_evals.bfcl.BFCLNotInstalledError: If ``bfcl-eval`` is not installed.

    """
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    if max_tools < 1:
        raise ValueError("max_tools must be >= 1")
    source = list(episodes) if episodes is not None else bfcl.load_multi_turn("multi_turn_base")
    out: dict[Split, list[CriticToolRecord]] = {"internal": [], "external": []}

    def full() -> bool:
        return limit is not None and all(len(v) >= limit for v in out.values())

    for episode in source:
        if full():
            break
        if not any(episode.gold):
            continue
        ep = _Episode(episode, seed=seed, max_tools=max_tools)
        if limit is None or len(out["internal"]) < limit:
            for kind in INTERNAL_KINDS:
                rec = ep.clean() if kind == "" else ep.internal(kind)
                if rec is not None:
                    out["internal"].append(rec)
        if limit is None or len(out["external"]) < limit:
            out["external"].append(ep.external())
    if limit is not None:
        out = {k: v[:limit] for k, v in out.items()}
    return out


INTERNAL_KINDS: Final[tuple[str, ...]] = ("", *ERROR_TYPES)
"""Internal record kinds per episode: error-free first, then the four error types."""
