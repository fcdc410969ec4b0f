"""The harness's prompt files (RelyToolBench's agent, simulator and judges; CRITICTOOL's).

:func:`load_prompt` reads ``{name}.md`` from this folder, then from the library's prompts.
"""

from __future__ import annotations

from pathlib import Path

from toolguard.prompts import load_prompt as _load

FOLDER = Path(__file__).resolve().parent


def load_prompt(name: str) -> str:
    """Text of the harness prompt ``name`` (or the library prompt of that name).

    Raises:
        FileNotFoundError: If neither folder has it.
    """
    if (FOLDER / f"{name}.md").is_file():
        return _load(name, FOLDER)
    return _load(name)
