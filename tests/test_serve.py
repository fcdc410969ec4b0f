"""``toolguard serve``: the vllm command built per model family and for LoRA; the clear error
without vLLM.  vLLM itself needs a GPU and is not installed in CI: only the CPU-side behaviour
is tested (the command is run through a stand-in executable)."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolguard_evals import serve
from toolguard_evals.cli import app
from toolguard_evals.serve import (
    VLLMNotFoundError,
    build_command,
    lora_rank,
    tool_parser_for,
    vllm_launcher,
)

runner = CliRunner()


@pytest.mark.parametrize(("model", "parser"), [
    ("Qwen/Qwen2.5-7B-Instruct", "hermes"),
    ("Qwen/Qwen3-8B", "hermes"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json"),
    ("meta-llama/Meta-Llama-3.2-3B-Instruct", "llama3_json"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4_pythonic"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral"),
    ("NousResearch/Hermes-3-Llama-3.1-8B", "hermes"),
    ("ibm-granite/granite-3.1-8b-instruct", "granite"),
])
def test_tool_parser_per_family(model: str, parser: str) -> None:
    assert tool_parser_for(model) == parser


def test_tool_parser_from_config_of_a_local_folder(tmp_path: Path) -> None:
    folder = tmp_path / "my-finetune"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    assert tool_parser_for(str(folder)) == "hermes"
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="--tool-parser"):
        tool_parser_for(str(folder))


def test_command_enables_tool_calling() -> None:
    cmd = build_command("Qwen/Qwen2.5-7B-Instruct", port=8123)
    assert cmd == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--port", "8123",
                   "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    cmd = build_command("meta-llama/Llama-3.1-8B-Instruct", host="127.0.0.1",
                        served_model_name="llama", extra_args=["--max-model-len", "8192"])
    assert cmd[cmd.index("--tool-call-parser") + 1] == "llama3_json"
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--served-model-name") + 1] == "llama"
    assert cmd[-2:] == ["--max-model-len", "8192"]
    explicit = build_command("some/unknown-model", tool_parser="pythonic")
    assert explicit[explicit.index("--tool-call-parser") + 1] == "pythonic"


def test_command_with_lora(tmp_path: Path) -> None:
    adapter = tmp_path / "relign-lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 64, "lora_alpha": 16}))
    assert lora_rank(adapter) == 64
    cmd = build_command("Qwen/Qwen2.5-7B-Instruct", lora=adapter)
    i = cmd.index("--enable-lora")
    assert cmd[i + 1:i + 3] == ["--lora-modules", f"relign-lora={adapter}"]
    assert cmd[cmd.index("--max-lora-rank") + 1] == "64"  # above vLLM's default of 16
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8}))
    named = build_command("Qwen/Qwen2.5-7B-Instruct", lora=adapter, lora_name="relign")
    assert "relign=" + str(adapter) in named and "--max-lora-rank" not in named
    with pytest.raises(ValueError, match="not a folder"):
        build_command("Qwen/Qwen2.5-7B-Instruct", lora=tmp_path / "missing")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"model": ""}, "model must be"),
    ({"model": "Qwen/Qwen2.5-7B-Instruct", "port": 0}, "port must be"),
    ({"model": "acme/secret-model"}, "cannot tell the tool-call parser"),
])
def test_bad_input(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_command(**kwargs)  # type: ignore[arg-type]


@pytest.fixture
def no_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ``vllm`` on PATH and no importable ``vllm`` package."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else _find_spec(name, *a))


_find_spec = importlib.util.find_spec


@pytest.mark.usefixtures("no_vllm")
def test_clear_error_without_vllm() -> None:
    with pytest.raises(VLLMNotFoundError, match="pip install vllm"):
        vllm_launcher()
    result = runner.invoke(app, ["serve", "--model", "Qwen/Qwen2.5-7B-Instruct"])
    assert result.exit_code == 1
    assert "needs vLLM, which is not installed" in result.output
    assert "pip install vllm" in result.output and "NVIDIA GPU" in result.output


@pytest.mark.usefixtures("no_vllm")
def test_dry_run_prints_the_command_without_vllm(tmp_path: Path) -> None:
    adapter = tmp_path / "lora"
    adapter.mkdir()
    result = runner.invoke(app, ["serve", "--model", "mistralai/Mistral-7B-Instruct-v0.3",
                                 "--lora", str(adapter), "--port", "9000", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        "vllm serve mistralai/Mistral-7B-Instruct-v0.3 --port 9000 --enable-auto-tool-choice "
        f"--tool-call-parser mistral --enable-lora --lora-modules lora={adapter}")


def test_cli_bad_model_family_is_a_clear_error() -> None:
    result = runner.invoke(app, ["serve", "--model", "acme/secret-model", "--dry-run"])
    assert result.exit_code == 1
    assert "--tool-parser" in result.output


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell script stand-in")
def test_runs_vllm_found_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A stand-in ``vllm`` executable records its argv; its exit code is the command's."""
    record = tmp_path / "argv.txt"
    exe = tmp_path / "vllm"
    exe.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\nexit 3\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    assert vllm_launcher() == [str(exe)]
    result = runner.invoke(app, ["serve", "--model", "Qwen/Qwen2.5-7B-Instruct",
                                 "--port", "8001"])
    assert result.exit_code == 3
    assert record.read_text().split() == ["serve", "Qwen/Qwen2.5-7B-Instruct", "--port",
                                          "8001", "--enable-auto-tool-choice",
                                          "--tool-call-parser", "hermes"]
    assert serve.serve("Qwen/Qwen2.5-7B-Instruct") == 3
