"""The package's import graph: no cycle, no private name imported from another module.

Built from the source with ast, imports inside functions included (a cycle held off by a
function-level import is still a cycle). An edge goes to the module named by the import: a
submodule (``from amp_convert import io``), or the package itself when a name is taken from its
``__init__`` (``from amp_convert.auto import auto_convert``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "amp_convert"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imports(modules: dict[str, Path]) -> dict[str, set[tuple[str, str]]]:
    """module -> {(imported module, name imported from it or "")}."""
    out: dict[str, set[tuple[str, str]]] = {}
    for module, path in modules.items():
        found: set[tuple[str, str]] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update((a.name, "") for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(module, node, path.name == "__init__.py")
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    found.add((sub, "") if sub in modules else (target, a.name))
        out[module] = {(m, n) for m, n in found if m.split(".")[0] == "amp_convert"}
    return out


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, imported in _imports(modules).items():
        graph[module].update(t for t, _ in imported if t in modules and t != module)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.integration
def test_import_graph_has_no_cycle() -> None:
    modules = _modules()
    assert len(modules) > 40  # the walk found the package
    assert _cycles(_edges(modules)) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.integration
def test_no_private_name_is_imported_from_another_module() -> None:
    modules = _modules()
    private = sorted(
        f"{module} imports {name} from {target}"
        for module, imported in _imports(modules).items()
        for target, name in imported
        if name.startswith("_") and not name.startswith("__") and target != module
    )
    assert private == []
