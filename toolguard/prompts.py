"""Prompt files, loaded by name.

Prompts live in the repository's ``prompts/`` folder (shipped inside the wheel as
``toolguard/_prompts``).  A file may start with an HTML comment naming its source;
it is stripped.  Placeholders are ``str.format`` fields.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_SEARCH = (_HERE / "_prompts", _HERE.parent / "prompts")
_COMMENT = re.compile(r"\A\s*<!--.*?-->\s*", re.S)


def prompt_dir() -> Path:
    """The folder prompts are read from.

    Raises:
        FileNotFoundError: If neither the installed nor the source folder exists.
    """
    for folder in _SEARCH:
        if folder.is_dir():
            return folder
    raise FileNotFoundError(f"no prompts folder found (looked in {', '.join(map(str, _SEARCH))})")


@lru_cache(maxsize=64)
def load_prompt(name: str, folder: Path | None = None) -> str:
    """Text of ``{folder}/{name}.md`` without its leading source comment.

    Args:
        name: The file's stem (``"structured_verification"``).
        folder: Where to look; default :func:`prompt_dir` (the library's prompts).  Other
            distributions (the eval harness) keep their prompts in their own folder.

    Raises:
        FileNotFoundError: If there is no such prompt; the message lists the known ones.
    """
    folder = prompt_dir() if folder is None else folder
    path = folder / f"{name}.md"
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.md"))
        raise FileNotFoundError(f"unknown prompt {name!r}; known prompts: {known}")
    return _COMMENT.sub("", path.read_text(encoding="utf-8"), count=1)
