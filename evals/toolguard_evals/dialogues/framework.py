"""Tools, executable backends and the dialogue builder shared by the domains.

- :class:`Param` / :class:`Tool`: a tool as an OpenAI function schema (JSON Schema draft
  2020-12 parameters) plus what suite B needs to know about it: each parameter's
  :data:`~toolguard_evals.dialogues.records.ValueKind`, the tool's effect (``read`` or
  ``write``) and its purpose group (tools of one group can stand in for each other; an
  ``irrelevant_tool`` case takes a tool of another group).
- :class:`Backend`: a deterministic in-memory service.  ``execute(name, args)`` runs the
  method ``do_<name>`` and returns ``(ok, JSON text)``; errors come back as
  ``{"error": ...}``.  Its state is seeded from a string, so a dialogue's calls replay to the
  same results.
- :class:`Builder`: what a scenario template writes a dialogue with.  ``user()`` opens a
  turn, ``call()`` validates a gold call against its schema, executes it and checks that
  every value is grounded (quoted in the conversation, or declared ``derived`` with the
  reason), ``say()`` ends the turn with the assistant's text.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from jsonschema import Draft202012Validator

from toolguard_evals.dialogues.records import (
    Dialogue,
    Effect,
    Label,
    Step,
    Turn,
    TurnKind,
    ValueKind,
)

T = TypeVar("T")


# ============================================================================ tools
@dataclass(frozen=True, slots=True)
class Param:
    """One parameter: its JSON Schema and its value kind.

    Attributes:
        type: JSON type (``string``, ``integer``, ``number``, ``boolean``, ``array``).
        description: What the value is.
        kind: Value kind (``None`` for settings chosen from a closed set, booleans).
        enum: Allowed values.
        items: JSON Schema of array items.
        minimum: Lower bound of a number.
        maximum: Upper bound of a number.
        fmt: JSON Schema ``format`` (``date``, ``email``, ``uri``, ``time``).
        default: Default value (optional parameters only).
    """

    type: str
    description: str
    kind: ValueKind | None = None
    enum: tuple[Any, ...] | None = None
    items: Mapping[str, Any] | None = None
    minimum: float | None = None
    maximum: float | None = None
    fmt: str | None = None
    default: Any = None

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of the parameter."""
        out: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.enum is not None:
            out["enum"] = list(self.enum)
        if self.items is not None:
            out["items"] = dict(self.items)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        if self.fmt is not None:
            out["format"] = self.fmt
        if self.default is not None:
            out["default"] = self.default
        return out


def text(description: str, kind: ValueKind | None = None, *, fmt: str | None = None,
         default: str | None = None) -> Param:
    """A string parameter."""
    return Param("string", description, kind, fmt=fmt, default=default)


def choice(description: str, *values: str, default: str | None = None) -> Param:
    """A string parameter with an ``enum``."""
    return Param("string", description, None, enum=values, default=default)


def integer(description: str, kind: ValueKind | None = "number", *,
            minimum: float | None = None, maximum: float | None = None,
            default: int | None = None) -> Param:
    """An integer parameter."""
    return Param("integer", description, kind, minimum=minimum, maximum=maximum,
                 default=default)


def number(description: str, kind: ValueKind | None = "amount", *,
           minimum: float | None = None, maximum: float | None = None) -> Param:
    """A number parameter."""
    return Param("number", description, kind, minimum=minimum, maximum=maximum)


def flag(description: str, default: bool | None = None) -> Param:
    """A boolean parameter."""
    return Param("boolean", description, None, default=default)


def strings(description: str, kind: ValueKind | None = None, *,
            fmt: str | None = None) -> Param:
    """An array-of-strings parameter."""
    items: dict[str, Any] = {"type": "string"}
    if fmt is not None:
        items["format"] = fmt
    return Param("array", description, kind, items=items)


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool of a domain.

    Attributes:
        name: Function name.
        description: What it does (shown to the model).
        params: Parameter name -> :class:`Param`.
        required: Required parameters.
        effect: ``read`` or ``write``.
        group: Purpose group (see module docstring).
    """

    name: str
    description: str
    params: Mapping[str, Param]
    required: tuple[str, ...]
    effect: Effect
    group: str

    def doc(self) -> dict[str, Any]:
        """The OpenAI function schema ``{name, description, parameters}``."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": {
                "type": "object",
                "properties": {k: p.schema() for k, p in self.params.items()},
                "required": list(self.required),
                "additionalProperties": False,
            },
        }

    def openai(self) -> dict[str, Any]:
        """The schema wrapped as ``{"type": "function", "function": ...}``."""
        return {"type": "function", "function": self.doc()}

    def errors(self, args: Mapping[str, Any]) -> list[str]:
        """Schema violations of ``args`` (empty when valid)."""
        return [e.message for e in _validator(json.dumps(self.doc(), sort_keys=True))
                .iter_errors(dict(args))]


@functools.lru_cache(maxsize=512)
def _validator(doc_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(doc_json)["parameters"])


def tool(name: str, description: str, effect: Effect, group: str,
         required: Sequence[str] = (), /, **params: Param) -> Tool:
    """Declare a tool (``required`` must name declared parameters).

    Raises:
        ValueError: If a required parameter is not declared.
    """
    unknown = [r for r in required if r not in params]
    if unknown:
        raise ValueError(f"{name}: required parameters {unknown} are not declared")
    return Tool(name, description, dict(params), tuple(required), effect, group)


# ============================================================================ backends
class ToolError(Exception):
    """A tool refused the call (the result is ``{"error": message}``)."""


class Backend:
    """A deterministic in-memory service; subclasses define ``setup`` and ``do_<tool>``.

    Args:
        seed: Seeds ``self.rng`` (state and new ids), so replays give the same results.
    """

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(f"{seed}:backend")
        self.s: dict[str, Any] = {}
        self._issued: set[str] = set()
        self.setup()

    def setup(self) -> None:
        """Fill ``self.s`` with the seeded state."""

    def execute(self, name: str, args: Mapping[str, Any]) -> tuple[bool, str]:
        """Run ``do_<name>(**args)``: ``(ok, result JSON text)``."""
        fn = getattr(self, f"do_{name}", None)
        if fn is None:
            return False, _dumps({"error": f"unknown tool {name!r}"})
        try:
            out = fn(**dict(args))
        except ToolError as exc:
            return False, _dumps({"error": str(exc)})
        except TypeError as exc:  # wrong keywords: the call does not fit the method
            return False, _dumps({"error": f"bad arguments: {exc}"})
        return True, _dumps(out)

    def state(self) -> str:
        """The state as canonical JSON (to tell whether a call changed it)."""
        return json.dumps(self.s, sort_keys=True, default=str)

    def clone(self) -> Backend:
        """A deep copy (state and random generator)."""
        return copy.deepcopy(self)

    def new_id(self, prefix: str, digits: int = 5) -> str:
        """A fresh id ``PREFIX-12345`` from the backend's generator, never issued before."""
        lo, hi = 10 ** (digits - 1), 10 ** digits
        return self.unique(lambda: f"{prefix}-{self.rng.randrange(lo, hi)}")

    def unique(self, make: Callable[[], str]) -> str:
        """Call ``make`` until it gives a value this backend has not issued yet."""
        while True:
            value = make()
            if value not in self._issued:
                self._issued.add(value)
                return value


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


# ============================================================================ domains
Scenario = Callable[["Builder"], None]
"""A scenario template: writes one or more turns with the builder."""


@dataclass(frozen=True, slots=True)
class Infeasible:
    """A request no tool of the domain can serve, in several wordings, and the reply."""

    texts: tuple[str, ...]
    reply: str


@dataclass(frozen=True, slots=True)
class Domain:
    """A domain: its tools, backend, scenario templates and infeasible requests.

    Attributes:
        name: Short name (``travel``), used in ids and ``dialogues:<name>`` categories.
        service: The service the assistant works for (system message).
        tools: Its tools (5-12).
        backend: Builds the backend from a seed string.
        scenarios: Name -> template.
        infeasible: Requests that no tool can serve.
        profile: Writes the user's profile into ``Builder.memory`` (and the system text).
    """

    name: str
    service: str
    tools: tuple[Tool, ...]
    backend: Callable[[str], Backend]
    scenarios: Mapping[str, Scenario]
    infeasible: tuple[Infeasible, ...]
    profile: Callable[[Builder], str] | None = None

    def tool(self, name: str) -> Tool:
        """The tool named ``name``.

        Raises:
            KeyError: If there is none.
        """
        for t in self.tools:
            if t.name == name:
                return t
        raise KeyError(f"{self.name} has no tool {name!r}")

    def docs(self) -> list[dict[str, Any]]:
        """The function docs of every tool, in order."""
        return [t.doc() for t in self.tools]

    def effects(self) -> dict[str, Effect]:
        """Tool name -> effect."""
        return {t.name: t.effect for t in self.tools}


# ============================================================================ builder
WEEKDAYS: Final = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS: Final = ("January", "February", "March", "April", "May", "June", "July", "August",
                 "September", "October", "November", "December")
_NUM = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")


def numbers_in(text: str) -> set[float]:
    """Every number written with digits in ``text`` (``1,250.5`` -> 1250.5)."""
    out: set[float] = set()
    for m in _NUM.finditer(text):
        try:
            out.add(float(m.group(0).replace(",", "")))
        except ValueError:
            continue
    return out


class GroundingError(ValueError):
    """A gold call uses a value the conversation does not give (a template bug)."""


@dataclass(slots=True)
class _OpenTurn:
    user: str
    label: Label
    kind: TurnKind
    missing: list[str]
    steps: list[Step] = field(default_factory=list)
    assistant: str = ""


class Builder:
    """Writes one dialogue: turns, gold calls (executed on the backend) and assistant text.

    Args:
        domain: The domain.
        dialogue_id: Id of the dialogue.
        seed: Corpus seed (recorded).
        key: Seed string of the dialogue (random choices and backend state).

    Attributes:
        rng: The dialogue's random generator.
        backend: The domain's backend, seeded with ``key``.
        today: The dialogue's date ("Today is ..." in the system message).
        memory: Facts scenarios share (session token, user profile, last results).
    """

    def __init__(self, domain: Domain, dialogue_id: str, *, seed: int, key: str) -> None:
        self.domain = domain
        self.id = dialogue_id
        self.seed = seed
        self.key = key
        self.rng = random.Random(key)
        self.backend = domain.backend(key)
        self.today = dt.date(2026, 1, 5) + dt.timedelta(days=self.rng.randrange(0, 300))
        self.memory: dict[str, Any] = {}
        self.scenarios: list[str] = []
        profile = domain.profile(self) if domain.profile is not None else ""
        self.system = (f"You are the assistant of {domain.service}. Today is "
                       f"{WEEKDAYS[self.today.weekday()]}, {self.today.isoformat()}."
                       + (f" {profile}" if profile else ""))
        self._turns: list[_OpenTurn] = []
        self._calls = 0

    # ------------------------------------------------------------------ choices
    def pick(self, *options: T) -> T:
        """One of ``options``, at random."""
        return options[self.rng.randrange(len(options))]

    def sample(self, items: Sequence[T], k: int) -> list[T]:
        """``k`` distinct items of ``items``, at random."""
        return self.rng.sample(list(items), k)

    def fresh(self, what: str, options: Sequence[T]) -> T:
        """One of ``options`` not yet used for ``what`` in this dialogue (any if all were)."""
        used = self.memory.setdefault(f"_used:{what}", [])
        left = [o for o in options if o not in used] or list(options)
        choice = left[self.rng.randrange(len(left))]
        used.append(choice)
        return choice

    def chance(self, p: float) -> bool:
        """``True`` with probability ``p``."""
        return self.rng.random() < p

    # ------------------------------------------------------------------ phrasing
    def date_phrase(self, day: dt.date, *, relative: bool = True) -> tuple[str, str | None]:
        """A way to say ``day``: ``(phrase, derived reason or None when ISO-verbatim)``."""
        delta = (day - self.today).days
        options: list[tuple[str, str | None]] = [
            (day.isoformat(), None),
            (f"{MONTHS[day.month - 1]} {day.day}", None),
            (f"{day.day} {MONTHS[day.month - 1]}", None),
        ]
        if relative and delta == 1:
            options.append(("tomorrow", None))
        if relative and 2 <= delta <= 6:
            options.append((f"this {WEEKDAYS[day.weekday()]}", None))
        phrase, _ = self.pick(*options)
        how = None if phrase == day.isoformat() else f"date: {phrase!r}, today {self.today}"
        return phrase, how

    def time_phrase(self, hhmm: str) -> tuple[str, str | None]:
        """``"14:30"`` said as ``14:30`` / ``2:30 pm`` / ``half past two in the afternoon``."""
        h, m = (int(x) for x in hhmm.split(":"))
        twelve = h % 12 or 12
        ampm = "am" if h < 12 else "pm"
        options = [hhmm, f"{twelve}:{m:02d} {ampm}" if m else f"{twelve} {ampm}"]
        if m in (0, 30) and h >= 12:
            options.append(f"{twelve}{'.30' if m else ''}{ampm}")
        phrase = self.pick(*options)
        return phrase, None if phrase == hhmm else f"time: {phrase!r}"

    # ------------------------------------------------------------------ turns
    def user(self, text: str, *, kind: TurnKind = "request", label: Label = "proceed",
             missing: Sequence[str] = ()) -> None:
        """Open a turn with the user's message.

        Raises:
            ValueError: If the previous turn is not consistent (see :meth:`finish`).
        """
        if self._turns:
            self._check(self._turns[-1])
        self._turns.append(_OpenTurn(text, label, kind, list(missing)))

    def say(self, text: str) -> None:
        """End the current turn with the assistant's text."""
        self._turns[-1].assistant = text

    def ask(self, text: str) -> None:
        """End the current turn with a question to the user (same as :meth:`say`)."""
        self.say(text)

    def call(self, name: str, args: Mapping[str, Any], *,
             derived: Mapping[str, str | None] | None = None, reuse: bool = False) -> Any:
        """Make a gold call of the current turn: validate, check grounding, execute.

        Args:
            name: Tool name.
            args: Arguments.
            derived: Argument -> why a value not quoted in the conversation follows from it
                (``None`` entries are ignored, so ``date_phrase`` output can be passed).
            reuse: If an identical call already ran with no write call since, make no call
                and return its result (an agent reuses a lookup it already has).

        Returns:
            The parsed JSON result.

        Raises:
            GroundingError: A value is neither in the conversation nor ``derived``.
            ValueError: The arguments break the schema, the call fails, or the turn is not
                a ``proceed`` turn.
        """
        turn = self._turns[-1]
        if turn.label != "proceed":
            raise ValueError(f"{self.id}: a {turn.label} turn makes no calls")
        if reuse:
            earlier = self._unchanged_result(name, args)
            if earlier is not None:
                return json.loads(earlier)
        t = self.domain.tool(name)
        errors = t.errors(args)
        if errors:
            raise ValueError(f"{self.id}: {name}{dict(args)} breaks its schema: {errors}")
        how = {k: v for k, v in (derived or {}).items() if v}
        self._check_grounding(t, args, how)
        self._check_not_a_repeat(name, args)
        ok, result = self.backend.execute(name, args)
        if not ok:
            raise ValueError(f"{self.id}: gold call {name}{dict(args)} failed: {result}")
        turn.steps.append(Step(call_id=f"call_{self._calls}", name=name, args=dict(args),
                               result=result, derived=how))
        self._calls += 1
        return json.loads(result)

    def infeasible(self) -> None:
        """A turn asking for something no tool of the domain can do."""
        item = self.pick(*self.domain.infeasible)
        self.user(self.pick(*item.texts), kind="infeasible", label="no_suitable_tool")
        self.say(item.reply)

    def texts(self) -> list[str]:
        """What values may be grounded in: system, user messages, tool results so far."""
        out = [self.system]
        for turn in self._turns:
            out.append(turn.user)
            out += [s.result for s in turn.steps]
        return out

    def finish(self) -> Dialogue:
        """The dialogue.

        Raises:
            ValueError: A turn is inconsistent (a ``proceed`` turn without calls, an abstain
                turn with calls, a turn without assistant text).
        """
        if not self._turns:
            raise ValueError(f"{self.id}: no turns")
        self._check(self._turns[-1])
        return Dialogue(
            id=self.id, domain=self.domain.name, scenarios=list(self.scenarios),
            seed=self.seed, backend_seed=self.key, system=self.system,
            turns=[Turn(user=t.user, label=t.label, kind=t.kind, steps=list(t.steps),
                        assistant=t.assistant, missing=list(t.missing)) for t in self._turns],
        )

    @property
    def last_user(self) -> str:
        """The user's message of the current turn."""
        return self._turns[-1].user if self._turns else ""

    def set_missing(self, missing: Sequence[str]) -> None:
        """Change the current turn's missing values (``ask_user`` turns)."""
        self._turns[-1].missing = list(missing)

    def preview(self, name: str, args: Mapping[str, Any]) -> Any:
        """What a call would return, run on a copy of the backend (nothing is recorded).

        Raises:
            ValueError: If the call fails.
        """
        ok, result = self.backend.clone().execute(name, args)
        if not ok:
            raise ValueError(f"{self.id}: preview {name}{dict(args)} failed: {result}")
        return json.loads(result)

    # ------------------------------------------------------------------ checks
    def _unchanged_result(self, name: str, args: Mapping[str, Any]) -> str | None:
        """The result of an identical earlier call with no write call since, else ``None``."""
        key = json.dumps(dict(args), sort_keys=True)
        for step in reversed([s for turn in self._turns for s in turn.steps]):
            if step.name == name and json.dumps(step.args, sort_keys=True) == key:
                return step.result
            if self.domain.tool(step.name).effect == "write":
                return None
        return None

    def _check_not_a_repeat(self, name: str, args: Mapping[str, Any]) -> None:
        """A gold call never repeats an identical call with no write call in between."""
        if self._unchanged_result(name, args) is not None:
            raise ValueError(f"{self.id}: gold call {name}{dict(args)} repeats an earlier "
                             "identical call with nothing changed in between")

    def _check(self, turn: _OpenTurn) -> None:
        if turn.label == "proceed" and not turn.steps:
            raise ValueError(f"{self.id}: proceed turn without calls: {turn.user!r}")
        if turn.label == "ask_user" and not turn.missing:
            raise ValueError(f"{self.id}: ask_user turn names no missing value: {turn.user!r}")
        if not turn.assistant:
            raise ValueError(f"{self.id}: turn without assistant text: {turn.user!r}")

    def _check_grounding(self, t: Tool, args: Mapping[str, Any], how: Mapping[str, str]) -> None:
        texts = self.texts()
        folded = "\n".join(texts).casefold()
        nums = numbers_in("\n".join(texts))
        for key, value in args.items():
            if key in how:
                continue
            p = t.params[key]
            if p.enum is not None or isinstance(value, bool) or value == p.default:
                continue
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, str) and v.casefold() not in folded:
                    raise GroundingError(f"{self.id}: {t.name}.{key}={v!r} is not in the "
                                         "conversation; declare how it is derived")
                if isinstance(v, int | float) and not isinstance(v, bool) and float(v) not in nums:
                    raise GroundingError(f"{self.id}: {t.name}.{key}={v!r} is not in the "
                                         "conversation; declare how it is derived")


__all__ = ["Backend", "Builder", "Domain", "GroundingError", "Infeasible", "Param", "Scenario",
           "Tool", "ToolError", "choice", "flag", "integer", "number", "numbers_in", "strings",
           "text", "tool"]
