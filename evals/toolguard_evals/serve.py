r"""Serve a model with vLLM's OpenAI-compatible server, tool calling enabled (``toolguard serve``).

The evals talk to any OpenAI-compatible endpoint (``--base-url``); the papers' numbers come
from models served with vLLM.  :func:`build_command` assembles::

    vllm serve MODEL --port PORT [--host HOST] --enable-auto-tool-choice \
        --tool-call-parser PARSER [--enable-lora --lora-modules NAME=PATH [--max-lora-rank R]]

``--enable-auto-tool-choice`` lets the model decide when to call tools (``tool_choice="auto"``,
what LangChain sends); ``--tool-call-parser`` turns the model's text into OpenAI ``tool_calls``
and depends on the model family (vLLM docs, "Tool Calling"): Qwen2.5/Qwen3 and Hermes use
``hermes``, Llama 3.1-3.3 ``llama3_json``, Llama 4 ``llama4_pythonic``, Mistral ``mistral``,
... (:data:`TOOL_PARSERS`; :func:`tool_parser_for` also reads ``config.json`` of a local model
folder).  A LoRA adapter is served under its folder name (``--lora-modules name=path``);
its rank is read from ``adapter_config.json`` and passed as ``--max-lora-rank`` when above
vLLM's default of 16.

vLLM needs Linux and an NVIDIA GPU; it is not a toolguard dependency.  :func:`vllm_launcher`
finds it (the ``vllm`` executable, else ``python -m vllm.entrypoints.cli.main``) and raises
:class:`VLLMNotFoundError`, whose message says what is missing and how to install it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

DEFAULT_PORT: Final = 8000
VLLM_DEFAULT_MAX_LORA_RANK: Final = 16
INSTALL_HINT: Final = (
    "install it on a Linux machine with an NVIDIA GPU (CUDA 12): "
    "`pip install 'toolguard-agents[gpu]'` (or `pip install vllm`) "
    "(see https://docs.vllm.ai/en/latest/getting_started/installation/)"
)

TOOL_PARSERS: Final[tuple[tuple[str, str], ...]] = (
    (r"qwen3[-_.]?coder", "qwen3_coder"),
    (r"qwen|qwq", "hermes"),
    (r"hermes", "hermes"),
    (r"llama[-_.]?4", "llama4_pythonic"),
    (r"llama[-_.]?3", "llama3_json"),
    (r"mistral|mixtral|ministral|codestral", "mistral"),
    (r"granite", "granite"),
    (r"internlm", "internlm"),
    (r"jamba", "jamba"),
    (r"xlam", "xlam"),
    (r"phi[-_.]?4[-_.]?mini", "phi4_mini_json"),
    (r"deepseek[-_.]?v3", "deepseek_v3"),
    (r"gpt[-_.]?oss", "openai"),
    (r"toolace", "pythonic"),
)
"""``(regex on the lower-cased model name, vLLM tool-call parser)``, first match wins."""

MODEL_TYPES: Final[dict[str, str]] = {
    "qwen2": "hermes", "qwen3": "hermes", "qwen2_moe": "hermes", "qwen3_moe": "hermes",
    "llama": "llama3_json", "llama4": "llama4_pythonic", "mistral": "mistral",
    "mixtral": "mistral", "granite": "granite", "internlm2": "internlm", "jamba": "jamba",
}
"""``config.json`` ``model_type`` -> parser, for local folders whose name says nothing."""


class VLLMNotFoundError(RuntimeError):
    """vLLM is not installed here (no ``vllm`` executable, ``import vllm`` fails)."""


def tool_parser_for(model: str) -> str:
    """The vLLM tool-call parser for a model id or local folder.

    Matched on the name first (:data:`TOOL_PARSERS`), then on ``model_type`` in the folder's
    ``config.json`` (:data:`MODEL_TYPES`).

    Raises:
        ValueError: If the family is not recognised (pass ``--tool-parser``).

    """
    name = model.lower()
    for pattern, parser in TOOL_PARSERS:
        if re.search(pattern, name):
            return parser
    config = Path(model) / "config.json"
    if config.is_file():
        try:
            model_type = str(json.loads(config.read_text(encoding="utf-8")).get("model_type", ""))
        except (ValueError, AttributeError):
            model_type = ""
        if model_type in MODEL_TYPES:
            return MODEL_TYPES[model_type]
    known = sorted({p for _, p in TOOL_PARSERS})
    raise ValueError(f"cannot tell the tool-call parser for model {model!r}; pass "
                     f"--tool-parser (one of vLLM's parsers, e.g. {', '.join(known)})")


def lora_rank(path: str | Path) -> int | None:
    """``r`` from the adapter's ``adapter_config.json`` (PEFT), or ``None`` if unreadable."""
    config = Path(path) / "adapter_config.json"
    try:
        rank = json.loads(config.read_text(encoding="utf-8")).get("r")
    except (OSError, ValueError, AttributeError):
        return None
    return rank if isinstance(rank, int) and rank > 0 else None


def vllm_launcher() -> list[str]:
    """The command prefix that runs vLLM's CLI.

    Raises:
        VLLMNotFoundError: If neither a ``vllm`` executable nor the ``vllm`` package exists.

    """
    exe = shutil.which("vllm")
    if exe:
        return [exe]
    if importlib.util.find_spec("vllm") is not None:
        return [sys.executable, "-m", "vllm.entrypoints.cli.main"]
    raise VLLMNotFoundError(
        "toolguard serve needs vLLM, which is not installed here (no `vllm` on PATH and "
        f"`import vllm` fails); {INSTALL_HINT}. Any OpenAI-compatible server works too: pass "
        "its URL to the evals with --base-url.")


def build_command(model: str, *, lora: str | Path | None = None, lora_name: str | None = None,
                  port: int = DEFAULT_PORT, host: str | None = None,
                  tool_parser: str | None = None, served_model_name: str | None = None,
                  extra_args: Sequence[str] = (),
                  launcher: Sequence[str] = ("vllm",)) -> list[str]:
    """The ``vllm serve`` command line (see the module docstring).

    Args:
        model: A Hugging Face id or a local folder.
        lora: A LoRA adapter folder (served as ``lora_name``).
        lora_name: The adapter's model id at the server; default the folder name.
        port: TCP port, 1-65535.
        host: Interface to bind (``--host``); default vLLM's (all interfaces).
        tool_parser: vLLM's ``--tool-call-parser``; default :func:`tool_parser_for`.
        served_model_name: ``--served-model-name`` (the id clients send); default vLLM's.
        extra_args: Appended as they are (e.g. ``["--max-model-len", "8192"]``).
        launcher: The command prefix (:func:`vllm_launcher`).

    Raises:
        ValueError: For an empty model, a port out of range, an unknown family without
            ``tool_parser``, or a LoRA path that is not a folder.

    """
    if not model:
        raise ValueError("model must be a Hugging Face id or a local folder")
    if not 1 <= port <= 65535:
        raise ValueError(f"port must be in 1..65535, got {port}")
    parser = tool_parser or tool_parser_for(model)
    cmd = [*launcher, "serve", model, "--port", str(port)]
    if host:
        cmd += ["--host", host]
    cmd += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    if served_model_name:
        cmd += ["--served-model-name", served_model_name]
    if lora is not None:
        adapter = Path(lora)
        if not adapter.is_dir():
            raise ValueError(f"LoRA adapter {adapter} is not a folder (expected a PEFT "
                             "adapter with adapter_config.json)")
        name = lora_name or adapter.resolve().name
        cmd += ["--enable-lora", "--lora-modules", f"{name}={adapter}"]
        rank = lora_rank(adapter)
        if rank is not None and rank > VLLM_DEFAULT_MAX_LORA_RANK:
            cmd += ["--max-lora-rank", str(rank)]
    return cmd + list(extra_args)


def serve(model: str, **kwargs: object) -> int:
    """Run ``vllm serve`` in the foreground until it exits; return its exit code.

    Args:
        model: See :func:`build_command`.
        **kwargs: :func:`build_command` options (not ``launcher``).

    Raises:
        VLLMNotFoundError: If vLLM is not installed.
        ValueError: See :func:`build_command`.

    """
    cmd = build_command(model, launcher=vllm_launcher(), **kwargs)  # type: ignore[arg-type]
    return subprocess.run(cmd, check=False).returncode
