"""The library's import graph: no cycles, and records <- engines <- adapters.

Read from the source with ``ast`` (module-level imports only; imports under
``if TYPE_CHECKING:`` and inside functions are not edges).  A package's ``__init__`` that
re-exports its modules is an edge from the package to them; a module is never taken to
import its parent package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "toolguard"

ADAPTERS = ("toolguard.middleware", "toolguard.nodes", "toolguard.state")
"""LangGraph / LangChain adapters: the engines never import them."""
TOP = "toolguard"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    out: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If):
            if not _is_type_checking(node):
                todo.extend(node.body)
                todo.extend(node.orelse)
        elif isinstance(node, ast.Try):
            todo.extend([*node.body, *node.orelse, *node.finalbody,
                         *(s for h in node.handlers for s in h.body)])
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith(TOP))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if is_package else name.rsplit(".", 1)[0]
                for _ in range(node.level - 1):
                    package = package.rsplit(".", 1)[0]
                base = f"{package}.{base}" if base else package
            if not base.startswith(TOP):
                continue
            for alias in node.names:  # "from toolguard.detectors import content": a module
                sub = f"{base}.{alias.name}"
                out.add(sub if _exists(sub) else base)
    return out


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (ROOT / rel).with_suffix(".py").is_file() or (ROOT / rel / "__init__.py").is_file()


def import_graph() -> dict[str, set[str]]:
    """Module -> the toolguard modules it imports at module level."""
    graph: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = _module_level_imports(tree, name, path.name == "__init__.py")
        parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = {m for m in imports if m != name and m not in parents}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _is_adapter(module: str) -> bool:
    return any(module == a or module.startswith(a + ".") for a in ADAPTERS)


def test_the_import_graph_is_read() -> None:
    graph = import_graph()
    assert "toolguard.guard" in graph and "toolguard.detectors" in graph["toolguard.guard"]
    assert "toolguard.middleware.guard" in graph["toolguard.middleware"]


def test_no_import_cycle() -> None:
    assert _cycles(import_graph()) == []


def test_a_cycle_is_found() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", sorted(m for m in import_graph()
                                          if not _is_adapter(m) and m != TOP))
def test_engines_and_records_never_import_an_adapter(module: str) -> None:
    assert sorted(m for m in import_graph()[module] if _is_adapter(m)) == []
