"""Export stage: the tuned model's folders and how to serve them for ``--base-url`` evals.

After SFT and DPO the run holds, per stage, a PEFT ``adapter/`` and a ``merged/`` model
folder (weights + tokenizer with the tool-aware chat template and its
``response_template``).  :func:`export_manifest` writes ``export/manifest.json`` with the
paths and the serve commands:

- GPU: ``toolguard serve --model SFT_MERGED --lora DPO_ADAPTER --tool-parser hermes``
  (vLLM with the adapter; :func:`toolguard_evals.serve.build_command`), or the merged DPO
  folder alone.  ``hermes`` matches the Hermes / Qwen2.5 template; a base with its own
  tool template (Llama 3.1: ``llama3_json``) keeps its family's parser.
- CPU: ``transformers serve DPO_MERGED --port 8000`` (transformers' OpenAI-compatible
  server, ``transformers[serving]``); it reads tool calls back with the tokenizer's
  ``response_template``.

- llama.cpp (a run from a GGUF base): ``export/dpo.gguf`` is the base GGUF with the
  tensors SFT + DPO changed (:mod:`.gguf_export`); every eval takes it as ``--model
  export/dpo.gguf`` and serves it with the embedded ``llama-server``.

Then any eval runs against it, e.g. ``toolguard eval relytoolbench --base-url
http://127.0.0.1:8000/v1 --model DPO_MERGED --format native``.  :func:`check_serve` starts
``transformers serve`` on a free loopback port, asks one tool-calling chat completion and
stops it (the ``--serve-check`` option of the ``export`` stage).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from toolguard_evals.relign.training import StageResult

SERVE_START_TIMEOUT_S = 300.0


def serve_commands(*, base_model: str, sft: dict[str, str], dpo: dict[str, str],
                   tool_parser: str = "hermes", port: int = 8000) -> dict[str, str]:
    """The shell commands that serve the tuned model (see the module docstring)."""
    from toolguard_evals.serve import build_command

    cmds: dict[str, str] = {}
    if "adapter" in dpo:
        cmds["vllm_lora"] = shlex.join(["toolguard", "serve", "--model", sft["merged"], "--lora",
                                        dpo["adapter"], "--tool-parser", tool_parser,
                                        "--port", str(port)])
    cmds["vllm_merged"] = shlex.join(build_command(dpo["merged"], tool_parser=tool_parser,
                                                   port=port, launcher=("vllm",)))
    cmds["transformers_serve"] = shlex.join(["transformers", "serve", dpo["merged"],
                                             "--host", "127.0.0.1", "--port", str(port)])
    cmds["eval"] = shlex.join(["toolguard", "eval", "relytoolbench", "--base-url",
                               f"http://127.0.0.1:{port}/v1", "--model", dpo["merged"],
                               "--format", "native"])
    cmds["base_model"] = base_model
    return cmds


def export_manifest(out_dir: str | Path, *, base_model: str, sft: dict[str, str],
                    dpo: dict[str, str], serve_check: bool = False,
                    base_gguf: str | Path | None = None,
                    chat_template: str | None = None) -> StageResult:
    """Write ``manifest.json`` in ``out_dir``; optionally :func:`check_serve` the DPO model.

    With ``base_gguf`` (the run started from a GGUF), also ``sft.gguf`` and ``dpo.gguf``:
    the base file with the tensors training changed replaced
    (:func:`~toolguard_evals.relign.gguf_export.patch_gguf`), served by llama.cpp like the
    base; ``manifest["gguf"]`` holds each patch's report and ``commands["llama_eval"]``
    the evaluation on it.  ``chat_template`` (the template the run trained in, when it is
    not the base file's) is written into both files.

    Raises:
        GGUFExportError: A merged model does not fit ``base_gguf``.
    """
    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    commands = serve_commands(base_model=base_model, sft=sft, dpo=dpo)
    manifest: dict[str, Any] = {"base": base_model, "sft": sft, "dpo": dpo,
                                "commands": commands}
    if base_gguf is not None:
        from toolguard_evals.relign.gguf_export import patch_gguf

        manifest["gguf"] = {name: patch_gguf(base_gguf, stage["merged"], out / f"{name}.gguf",
                                             chat_template=chat_template)
                            for name, stage in (("sft", sft), ("dpo", dpo))}
        commands["llama_eval"] = shlex.join(
            ["toolguard", "eval", "relytoolbench", "--model", str(out / "dpo.gguf"),
             "--format", "native"])
    if serve_check:
        manifest["serve_check"] = check_serve(dpo["merged"])
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return StageResult(examples=0, steps=0, seconds=round(time.perf_counter() - started, 1),
                       extra=manifest)


def check_serve(model_dir: str, *, timeout: float = SERVE_START_TIMEOUT_S) -> dict[str, Any]:
    """Serve ``model_dir`` with ``transformers serve``, ask one tool call, stop the server.

    Returns:
        ``{"ok", "seconds", "tool_calls", "content"}`` (``ok``: the server answered).

    Raises:
        RuntimeError: The server exited or did not answer within ``timeout`` seconds (the
            message has its log tail).
    """
    from toolguard_evals.local_model import free_port

    port = free_port()
    exe = Path(sys.executable).with_name("transformers")
    cmd = [str(exe), "serve", model_dir, "--host", "127.0.0.1", "--port", str(port)]
    log = Path(model_dir).parent / "serve_check.log"
    started = time.perf_counter()
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    try:
        _wait_health(port, proc, timeout, log)
        body = {"model": model_dir, "max_tokens": 64, "temperature": 0,
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                "tools": [{"type": "function", "function": {
                    "name": "get_weather", "description": "Current weather of a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                   "required": ["city"]}}}]}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            answer = json.loads(resp.read())
        message = answer["choices"][0]["message"]
        return {"ok": True, "seconds": round(time.perf_counter() - started, 1),
                "command": shlex.join(cmd), "tool_calls": message.get("tool_calls"),
                "content": message.get("content")}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_health(port: int, proc: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"transformers serve exited with {proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(1.0)
    raise RuntimeError(f"transformers serve did not answer within {timeout} s:\n"
                       f"{log.read_text(errors='replace')[-2000:]}")
