"""BFCL v4 data: single-turn records with their gold calls, multi-turn episodes, environments.

The data ships in the ``bfcl-eval`` wheel (Apache-2.0, ``bfcl_eval/data/``) and is read by
path: nothing here imports the ``bfcl_eval`` runner, whose imports pull in every model
handler.  Only the multi-turn executor imports code from the wheel: the environment classes
(``bfcl_eval.eval_checker.multi_turn_eval.func_source_code.*``, stdlib plus ``mpmath``) and
the class -> module/doc-file tables in ``bfcl_eval.constants.executable_backend_config``.

Install with ``pip install --no-deps bfcl-eval==2026.3.23``; see ``docs/DATA.md`` §1 for the
formats.

Shapes:

- single-turn record (:func:`load_category`)::

      {"id": "simple_python_0",
       "question": [[{"role": "user", "content": "..."}], ...],   # turns of messages
       "function": [{"name", "description", "parameters": {"type": "dict", ...}}, ...],
       "ground_truth": [{"calculate_triangle_area": {"base": [10], "unit": ["units", ""]}}]}

  ``ground_truth`` lists, per gold call, each parameter's acceptable values; ``""`` means the
  parameter may be left out.  Irrelevance categories have ``ground_truth == []``.
- multi-turn gold: per turn, a list of Python call strings, e.g. ``"cd(folder='document')"``.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import importlib.util
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final, Literal, cast, get_args

from jsonschema import Draft202012Validator

from toolguard.specs import gorilla_to_json_schema

BFCL_REQUIREMENT: Final = "bfcl-eval==2026.3.23"
INSTALL_HINT: Final = f"pip install --no-deps {BFCL_REQUIREMENT}"

SingleTurnCategory = Literal[
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "irrelevance",
    "live_irrelevance",
]
"""Single-turn BFCL v4 categories :func:`load_category` reads."""

MultiTurnCategory = Literal["multi_turn_base", "multi_turn_miss_param", "multi_turn_miss_func"]
"""Multi-turn BFCL v4 categories :func:`load_multi_turn` reads."""

SINGLE_TURN_CATEGORIES: Final[tuple[SingleTurnCategory, ...]] = get_args(SingleTurnCategory)
MULTI_TURN_CATEGORIES: Final[tuple[MultiTurnCategory, ...]] = get_args(MultiTurnCategory)
RELEVANCE_CATEGORIES: Final = frozenset({"irrelevance", "live_irrelevance"})
"""Categories without a ``possible_answer`` file (the model should call nothing)."""

_BACKEND_CONFIG = "bfcl_eval.constants.executable_backend_config"
_MISSING: Final = object()


class BFCLNotInstalledError(ImportError):
    """``bfcl-eval`` is not installed (its data and environments are needed)."""

    def __init__(self, what: str = "the BFCL data") -> None:
        super().__init__(
            f"{what} needs the bfcl-eval package; install it with `{INSTALL_HINT}` "
            "(--no-deps: its own requirements pull in every model SDK)"
        )


# ---------------------------------------------------------------------------- locating data
@functools.cache
def package_dir() -> Path:
    """Directory of the installed ``bfcl_eval`` package (found without importing it).

    Raises:
        BFCLNotInstalledError: If ``bfcl_eval`` cannot be found.

    """
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BFCLNotInstalledError()
    return Path(next(iter(spec.submodule_search_locations)))


def data_dir() -> Path:
    """``bfcl_eval/data``: the question files, ``possible_answer/`` and ``multi_turn_func_doc/``.

    Raises:
        BFCLNotInstalledError: If the package or its data folder is missing.

    """
    path = package_dir() / "data"
    if not path.is_dir():
        raise BFCLNotInstalledError(f"the BFCL data folder ({path})")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Parse a JSON-lines file (BFCL's last line has no newline; blank lines are skipped)."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@functools.cache
def _load_file(name: str, answers: bool) -> tuple[dict[str, Any], ...]:
    folder = data_dir() / "possible_answer" if answers else data_dir()
    path = folder / f"BFCL_v4_{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"BFCL file {path} is missing; reinstall with `{INSTALL_HINT}`")
    return tuple(read_jsonl(path))


def _records(name: str, *, with_answers: bool) -> list[dict[str, Any]]:
    records = [copy.deepcopy(r) for r in _load_file(name, False)]
    if not with_answers:
        return records
    gold = {a["id"]: a["ground_truth"] for a in _load_file(name, True)}
    missing = [r["id"] for r in records if r["id"] not in gold]
    if missing:
        raise ValueError(f"BFCL {name}: {len(missing)} records have no gold, e.g. {missing[:3]}")
    for r in records:
        r["ground_truth"] = copy.deepcopy(gold[r["id"]])
    return records


# ---------------------------------------------------------------------------- single turn
def load_category(name: SingleTurnCategory, *, limit: int | None = None) -> list[dict[str, Any]]:
    """Load a single-turn category joined with its ``possible_answer`` gold by id.

    Args:
        name: One of :data:`SINGLE_TURN_CATEGORIES`.
        limit: Keep only the first ``limit`` records (file order).

    Returns:
        Records ``{"id", "question", "function", "ground_truth"}`` (see the module
        docstring); ``ground_truth`` is ``[]`` for the irrelevance categories.  Fresh
        copies: callers may mutate them.

    Raises:
        ValueError: For an unknown category or a record without gold.
        BFCLNotInstalledError: If ``bfcl-eval`` is not installed.

    """
    if name not in SINGLE_TURN_CATEGORIES:
        raise ValueError(f"unknown single-turn category {name!r}; expected one of "
                         f"{list(SINGLE_TURN_CATEGORIES)}")
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    records = _records(name, with_answers=name not in RELEVANCE_CATEGORIES)
    if name in RELEVANCE_CATEGORIES:
        for r in records:
            r["ground_truth"] = []
    return records if limit is None else records[:limit]


def first_acceptable(values: Any) -> Any:
    """Return one parameter's gold value: its first acceptable value that is not ``""``/``None``.

    ``""`` means the parameter may be left out (DATA.md §1, ``ast_checker``
    "missing_optional").  ``None`` is skipped too: in BFCL v4 it only occurs for optional
    parameters whose Python default is ``None`` (376 live parameters, all but one listed with
    ``""``), and a JSON ``null`` would break the parameter's declared type, whereas leaving
    it out is what a JSON tool call does.  Nested dicts are resolved recursively (their values
    are lists of acceptable values too); lists are kept, with any dicts inside them resolved.

    Returns:
        The value, or :data:`MISSING` when no acceptable value is left (the parameter is
        left out of the gold call).

    """
    if not isinstance(values, list):
        return _resolve(values)
    for v in values:
        if v is None or (isinstance(v, str) and v == ""):
            continue
        return _resolve(v)
    return _MISSING


MISSING: Final = _MISSING
"""Sentinel returned by :func:`first_acceptable` for a parameter with no value to give."""


def _resolve(value: Any) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, vals in value.items():
            resolved = first_acceptable(vals)
            if resolved is not _MISSING:
                out[key] = resolved
        return out
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    return value


def gold_calls(
    record: Mapping[str, Any], *, schema_aware: bool = True
) -> list[tuple[str, dict[str, Any]]]:
    """Return the gold tool calls of a single-turn record, one per ``ground_truth`` entry.

    Each parameter takes its first acceptable value that is not ``""`` or ``None`` (see
    :func:`first_acceptable`).  With ``schema_aware`` (the default) the first such value that
    also validates against the parameter's schema in the record's doc is preferred, and a
    parameter none of whose values validates is left out when ``""``/``None`` is acceptable:
    BFCL lists e.g. ``unit: ["", "N/A"]`` for an enum of ``["seconds", "milliseconds"]``
    or ``year: ["", "dontcare"]`` for an integer (64 parameters in 59 records of the five
    gold categories), which its Python checker tolerates but a JSON tool call should not
    send.  Parameters with no value left are left out.

    Returns:
        ``[(function_name, {param: value}), ...]`` in gold order; ``[]`` for irrelevance.

    Raises:
        ValueError: If a gold entry is not a one-key mapping.

    """
    docs = {d.get("name"): d for d in record.get("function") or [] if isinstance(d, Mapping)}
    out: list[tuple[str, dict[str, Any]]] = []
    for entry in record.get("ground_truth") or []:
        if not isinstance(entry, Mapping) or len(entry) != 1:
            raise ValueError(f"{record.get('id')}: gold entry is not {{name: params}}: {entry!r}")
        ((name, params),) = entry.items()
        props = _doc_properties(docs.get(name)) if schema_aware else {}
        args: dict[str, Any] = {}
        for param, values in (params or {}).items():
            value = _gold_value(values, props.get(param))
            if value is not _MISSING:
                args[param] = value
        out.append((str(name), args))
    return out


def _doc_properties(doc: Mapping[str, Any] | None) -> dict[str, Any]:
    if doc is None:
        return {}
    params = doc.get("parameters")
    props = params.get("properties") if isinstance(params, Mapping) else None
    return dict(props) if isinstance(props, Mapping) else {}


def _gold_value(values: Any, schema: Any) -> Any:
    if not isinstance(values, list) or not isinstance(schema, Mapping):
        return first_acceptable(values)
    candidates = [v for v in values if not (v is None or (isinstance(v, str) and v == ""))]
    for v in candidates:
        resolved = _resolve(v)
        if _fits(resolved, schema):
            return resolved
    if len(candidates) < len(values):  # "" or None listed: leaving it out is acceptable
        return _MISSING
    return _resolve(candidates[0]) if candidates else _MISSING


def _fits(value: Any, gorilla_schema: Mapping[str, Any]) -> bool:
    return bool(Draft202012Validator(gorilla_to_json_schema(gorilla_schema)).is_valid(value))


# ---------------------------------------------------------------------------- multi turn
@dataclass(frozen=True, slots=True)
class MultiTurnEpisode:
    """One BFCL multi-turn record with its gold and function docs.

    Attributes:
        id: e.g. ``"multi_turn_base_0"``.
        category: One of :data:`MULTI_TURN_CATEGORIES`.
        turns: The user turns, each a list of ``{"role", "content"}`` (``[]`` for the
            miss_func turn where held-out docs are added).
        gold: Per turn, the gold Python call strings (``[]`` where nothing should be called).
        initial_config: Class name -> scenario for ``_load_scenario``.
        involved_classes: Environment class names, e.g. ``["TwitterAPI", "GorillaFileSystem"]``.
        functions: The docs of all involved classes, in ``involved_classes`` order, as
            ``utils.populate_test_cases_with_predefined_functions`` builds them (held-out
            miss_func docs included; see :meth:`tools_at`).
        missed_function: miss_func only: turn index -> names held out before that turn.
        excluded_function: Names listed in the record (read by no BFCL code; kept for reference).

    """

    id: str
    category: str
    turns: list[list[dict[str, str]]]
    gold: list[list[str]]
    initial_config: dict[str, Any]
    involved_classes: list[str]
    functions: list[dict[str, Any]]
    missed_function: dict[int, list[str]]
    excluded_function: list[str]

    def tools_at(self, turn: int) -> list[dict[str, Any]]:
        """Return the docs the model sees at ``turn`` (miss_func docs appear from their turn on)."""
        hidden = {n for k, names in self.missed_function.items() if k > turn for n in names}
        return [d for d in self.functions if d["name"] not in hidden]


@functools.cache
def _backend_config() -> ModuleType:
    package_dir()  # clear error when bfcl-eval is absent
    try:
        return importlib.import_module(_BACKEND_CONFIG)
    except ModuleNotFoundError as exc:
        raise BFCLNotInstalledError(f"the BFCL environment tables ({_BACKEND_CONFIG})") from exc


def doc_file_mapping() -> dict[str, str]:
    """Map class name -> file in ``multi_turn_func_doc/`` (``MULTI_TURN_FUNC_DOC_FILE_MAPPING``)."""
    return dict(_backend_config().MULTI_TURN_FUNC_DOC_FILE_MAPPING)


def class_module_mapping() -> dict[str, str]:
    """Class name -> module of its environment (BFCL's ``CLASS_FILE_PATH_MAPPING``)."""
    return dict(_backend_config().CLASS_FILE_PATH_MAPPING)


def stateless_classes() -> frozenset[str]:
    """Classes that take no scenario (BFCL's ``STATELESS_CLASSES``: ``MathAPI``)."""
    return frozenset(_backend_config().STATELESS_CLASSES)


@functools.cache
def _class_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    mapping = doc_file_mapping()
    if class_name not in mapping:
        raise ValueError(f"unknown BFCL environment class {class_name!r}; "
                         f"expected one of {sorted(mapping)}")
    return tuple(read_jsonl(data_dir() / "multi_turn_func_doc" / mapping[class_name]))


def function_docs(classes: Sequence[str]) -> list[dict[str, Any]]:
    """Return the function docs of ``classes``, concatenated in order (fresh copies).

    Raises:
        ValueError: For an unknown class name.

    """
    return [copy.deepcopy(d) for c in classes for d in _class_docs(c)]


def load_multi_turn(
    category: MultiTurnCategory = "multi_turn_base", *, limit: int | None = None
) -> list[MultiTurnEpisode]:
    """Load a multi-turn category with its gold and function docs.

    Args:
        category: One of :data:`MULTI_TURN_CATEGORIES`.
        limit: Keep only the first ``limit`` episodes (file order).

    Raises:
        ValueError: For an unknown category, or an episode whose gold has another number
            of turns than its question.
        BFCLNotInstalledError: If ``bfcl-eval`` is not installed.

    """
    if category not in MULTI_TURN_CATEGORIES:
        raise ValueError(f"unknown multi-turn category {category!r}; expected one of "
                         f"{list(MULTI_TURN_CATEGORIES)}")
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    records = _records(category, with_answers=True)
    if limit is not None:
        records = records[:limit]
    out: list[MultiTurnEpisode] = []
    for r in records:
        if len(r["ground_truth"]) != len(r["question"]):
            raise ValueError(f"{r['id']}: {len(r['question'])} turns but "
                             f"{len(r['ground_truth'])} gold turns")
        out.append(
            MultiTurnEpisode(
                id=r["id"],
                category=category,
                turns=r["question"],
                gold=r["ground_truth"],
                initial_config=r.get("initial_config") or {},
                involved_classes=list(r["involved_classes"]),
                functions=function_docs(r["involved_classes"]),
                missed_function={int(k): list(v) for k, v in
                                 (r.get("missed_function") or {}).items()},
                excluded_function=list(r.get("excluded_function") or []),
            )
        )
    return out


# ---------------------------------------------------------------------------- executor
@dataclass(frozen=True, slots=True)
class ParsedCall:
    """A call string parsed with :mod:`ast`: ``sort('a.pdf')`` -> ``("sort", ("a.pdf",), {})``."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def parse_call(source: str) -> ParsedCall:
    """Parse a BFCL gold call string such as ``"cd(folder='document')"`` (no ``eval``).

    Raises:
        ValueError: If ``source`` is not a single call of a bare name with literal arguments.

    """
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not a call: {source!r} ({exc.msg})") from exc
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a call of a bare function name: {source!r}")
    try:
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise ValueError(f"**kwargs are not supported: {source!r}")
            kwargs[kw.arg] = ast.literal_eval(kw.value)
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"arguments of {source!r} are not literals: {exc}") from exc
    return ParsedCall(name=node.func.id, args=args, kwargs=kwargs)


@dataclass(frozen=True, slots=True)
class ExecResult:
    """One executed call.

    Attributes:
        name: Method name.
        args: Arguments by name (positional ones bound to their parameter names), i.e. the
            ``args`` of the equivalent LangChain tool call.
        content: The result as ``ToolMessage`` content: strings as returned, anything else
            ``json.dumps(result, default=str)``; exceptions as ``"Error during execution: ..."``
            (BFCL's ``execute_multi_turn_func_call`` wording).
        ok: ``False`` if the method raised or returned ``{"error": ...}``.

    """

    name: str
    args: dict[str, Any]
    content: str
    ok: bool


def environment_class(class_name: str) -> type[Any]:
    """Import a BFCL environment class, e.g. ``"GorillaFileSystem"``.

    Raises:
        ValueError: For an unknown class name.
        BFCLNotInstalledError: If its module cannot be imported (``mpmath`` for ``MathAPI``).

    """
    modules = class_module_mapping()
    if class_name not in modules:
        raise ValueError(f"unknown BFCL environment class {class_name!r}; "
                         f"expected one of {sorted(modules)}")
    try:
        module = importlib.import_module(modules[class_name])
    except ModuleNotFoundError as exc:
        raise BFCLNotInstalledError(
            f"the BFCL environment {class_name} (missing module {exc.name!r}; "
            "`pip install mpmath` for MathAPI)"
        ) from exc
    return cast(type[Any], getattr(module, class_name))


class BFCLEnvironment:
    """The instances of one multi-turn episode, callable by method name.

    Built as BFCL's ``execute_multi_turn_func_call`` builds them: one instance per involved
    class, ``_load_scenario(deepcopy(initial_config[cls]))`` except for stateless classes,
    public methods dispatched to the instance that defines them.

    Args:
        involved_classes: Class names, e.g. ``["GorillaFileSystem", "TwitterAPI"]``.
        initial_config: Class name -> scenario dict (missing classes get ``{}``).

    Raises:
        ValueError: For an unknown class name.

    """

    def __init__(
        self, involved_classes: Sequence[str], initial_config: Mapping[str, Any]
    ) -> None:
        stateless = stateless_classes()
        self.instances: dict[str, Any] = {}
        self._owner: dict[str, str] = {}
        for class_name in involved_classes:
            instance = environment_class(class_name)()
            if class_name not in stateless:
                instance._load_scenario(copy.deepcopy(dict(initial_config.get(class_name, {}))))
            self.instances[class_name] = instance
            for method_name, _ in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method_name.startswith("_"):
                    self._owner[method_name] = class_name  # later classes win, as in BFCL

    @classmethod
    def for_episode(cls, episode: MultiTurnEpisode) -> BFCLEnvironment:
        """Build a fresh environment in the episode's initial state."""
        return cls(episode.involved_classes, episode.initial_config)

    @property
    def methods(self) -> dict[str, str]:
        """Public method name -> class that owns it."""
        return dict(self._owner)

    def _method(self, name: str) -> Callable[..., Any] | None:
        owner = self._owner.get(name)
        if owner is None:
            return None
        return cast(Callable[..., Any], getattr(self.instances[owner], name))

    def bind(self, call: ParsedCall) -> dict[str, Any]:
        """Arguments of ``call`` by parameter name (positional ones named from the signature).

        Raises:
            ValueError: If the method is unknown or the arguments do not fit its signature.

        """
        method = self._method(call.name)
        if method is None:
            raise ValueError(f"no involved class has a method {call.name!r}")
        try:
            bound = inspect.signature(method).bind(*call.args, **call.kwargs)
        except TypeError as exc:
            raise ValueError(f"{call.name}: {exc}") from exc
        return dict(bound.arguments)

    def execute(self, call: str | ParsedCall) -> ExecResult:
        """Run a gold call string (or parsed call) on the instance that owns the method.

        Raises:
            ValueError: If the string does not parse (see :func:`parse_call`) or the method is
                unknown or gets the wrong arguments (gold calls should always fit).

        """
        parsed = parse_call(call) if isinstance(call, str) else call
        return self.call(parsed.name, self.bind(parsed))

    def call(self, name: str, args: Mapping[str, Any]) -> ExecResult:
        """Run ``name(**args)``, as a tool node would run a model's tool call.

        Unknown methods, bad arguments and exceptions raised by the environment become
        error results (``ok=False``), as in BFCL's executor; nothing is raised.
        """
        method = self._method(name)
        if method is None:
            return ExecResult(name, dict(args), f"Error during execution: name '{name}' is "
                              "not defined", ok=False)
        try:
            result = method(**args)
        except Exception as exc:  # the environment's failure is the tool's answer (as BFCL)
            return ExecResult(name, dict(args), f"Error during execution: {exc}", ok=False)
        return ExecResult(name, dict(args), _serialise(result), ok=not _is_error(result))

    def state(self) -> dict[str, dict[str, Any]]:
        """Public attributes per class (deep copies), as ``multi_turn_checker`` compares them."""
        return {
            cls: {k: copy.deepcopy(v) for k, v in vars(inst).items() if not k.startswith("_")}
            for cls, inst in self.instances.items()
        }

    def clone(self) -> BFCLEnvironment:
        """Return an independent deep copy (the original is left untouched)."""
        return copy.deepcopy(self)


def _serialise(result: Any) -> str:
    if isinstance(result, str):
        return result
    return json.dumps(result, default=str)


def _is_error(result: Any) -> bool:
    if isinstance(result, Mapping):
        return bool(result.get("error"))
    return isinstance(result, str) and result.startswith("Error")


def replay(
    episode: MultiTurnEpisode, env: BFCLEnvironment | None = None
) -> tuple[BFCLEnvironment, list[list[ExecResult]]]:
    """Execute an episode's gold calls turn by turn in a real environment.

    Args:
        episode: The episode.
        env: Environment to run in (default: a fresh one from :meth:`BFCLEnvironment.for_episode`).

    Returns:
        ``(env, results)`` with ``results[turn][i]`` the :class:`ExecResult` of
        ``episode.gold[turn][i]``; ``env`` is left in the final state.

    Raises:
        ValueError: If a gold call does not parse or fit its method (a data error).

    """
    env = env if env is not None else BFCLEnvironment.for_episode(episode)
    return env, [[env.execute(c) for c in turn] for turn in episode.gold]
