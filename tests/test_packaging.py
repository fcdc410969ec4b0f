"""Layering and packaging: the library stands alone, the wheel installs no generic names.

- ``toolguard`` (the library) never imports the harness (``toolguard_evals``, from
  ``evals/``), the prebuilt graphs (``toolguard_graphs``, from ``graphs/``) or the CLI's
  packages, so ``pip install toolguard-agents`` without extras is enough to guard an agent.
- Nothing imports ``evals`` or ``graphs`` by their folder names (two names for one module
  would give two module objects).
- The wheel holds ``toolguard``, ``toolguard_evals`` and ``toolguard_graphs`` (and the prompts
  as ``toolguard/_prompts``), never top-level ``evals`` / ``graphs``; every sub-package is
  listed in ``pyproject.toml``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"toolguard": "toolguard", "evals": "toolguard_evals", "graphs": "toolguard_graphs"}


def _imports(path: Path) -> set[str]:
    """Absolute module names imported by a file (relative imports are skipped)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def _python_files(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((ROOT / f).rglob("*.py"))]


def test_the_library_never_imports_the_harness_or_the_graphs() -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in _imports(p)
                                         if m.split(".")[0] in ("toolguard_evals",
                                                                "toolguard_graphs"))
        for p in _python_files("toolguard")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_importing_the_library_loads_no_cli_or_harness_package() -> None:
    code = ("import sys, toolguard, toolguard.middleware; "
            "print(__import__('json').dumps(sorted(m.split('.')[0] for m in sys.modules)))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], check=True,
                                           capture_output=True, text=True).stdout))
    # (rich comes with httpx, a dependency of langsmith: not ours to avoid)
    assert loaded & {"toolguard_evals", "toolguard_graphs", "typer", "langchain_openai",
                     "openai", "matplotlib", "llama_cpp", "torch"} == set()


def test_nothing_imports_the_folders_by_their_generic_names() -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in _imports(p)
                                         if m.split(".")[0] in ("evals", "graphs"))
        for p in _python_files("toolguard", "evals", "graphs", "tests", "examples")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_every_sub_package_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {**{v: k for k, v in FOLDERS.items()},
                                     "toolguard._prompts": "prompts"}
    on_disk = {
        ".".join([FOLDERS[folder], *init.parent.relative_to(ROOT / folder).parts])
        for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")
    }
    assert on_disk | {"toolguard._prompts"} == set(config["packages"])


def test_the_wheel_installs_no_generic_top_level_package(tmp_path: Path) -> None:
    pytest.importorskip("setuptools", minversion="77")
    # build from a copy of the tracked files: setuptools keeps stale files in build/
    src = tmp_path / "src"
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, tracked):
        path = ROOT / name
        if path.is_file() and not path.is_symlink():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes(path.read_bytes())
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(src)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("toolguard_agents-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"toolguard", "toolguard_evals", "toolguard_graphs"}
    assert "toolguard/_prompts/structured_verification.md" in names
    assert "toolguard/py.typed" in names
    assert "toolguard_evals/cli.py" in names and "toolguard_evals/local_model.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "toolguard = toolguard_evals.cli:app" in zipfile.ZipFile(wheel).read(
        entry_points).decode()
