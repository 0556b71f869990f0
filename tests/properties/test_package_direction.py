"""Packages depend one way: commands -> libraries -> vocabulary (DESIGN.md's layout).

tests/properties/test_import_graph.py forbids module cycles; this test forbids an import that
points *up* the layer list below, so that a cycle between packages (validation <-> auto,
reports <-> pages) cannot come back through modules that do not form a cycle themselves. Imports
under ``TYPE_CHECKING`` and inside functions count too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "amp_convert"

#: lowest first; a unit may import only from units of a lower layer (and from itself)
LAYERS: list[set[str]] = [
    {"errors", "_version"},
    {"core"},
    {"schema"},
    {"targets", "op_lists"},
    {"files"},
    {"reports"},
    {"cost"},
    {"options"},
    {"placement"},
    {"passes"},
    {"pipeline"},
    {"api"},
    {"ir_pass"},
    {"validation"},
    {"auto", "testing"},
    {"pages", "olive"},
    {"commands"},
    {"__init__"},
    {"startup"},
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def _unit(parts: tuple[str, ...]) -> str:
    """The layer unit of a module path inside the package: its subpackage or top-level module."""
    if not parts or parts == ("__init__",):
        return "__init__"
    return parts[0]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "amp_convert":
                found.update(f"amp_convert.{a.name}" for a in node.names)
            else:
                found.add(node.module)
    return {m for m in found if m == "amp_convert" or m.startswith("amp_convert.")}


def _target_unit(module: str) -> str:
    parts = tuple(module.split(".")[1:])
    if parts and not (PACKAGE / parts[0]).is_dir() and not (PACKAGE / f"{parts[0]}.py").exists():
        return "__init__"  # a name taken from the package's __init__ (e.g. __version__)
    return _unit(parts)


def test_every_unit_has_a_layer() -> None:
    units = {_unit(p.relative_to(PACKAGE).with_suffix("").parts) for p in PACKAGE.rglob("*.py")}
    assert units <= set(RANK), f"place these in LAYERS: {sorted(units - set(RANK))}"


@pytest.mark.integration
def test_imports_point_down_the_layers() -> None:
    upward: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        src = _unit(path.relative_to(PACKAGE).with_suffix("").parts)
        for module in sorted(_imports(path)):
            dst = _target_unit(module)
            if dst != src and RANK.get(dst, -1) >= RANK[src]:
                where = path.relative_to(PACKAGE.parent)
                upward.append(f"{where} ({src}) imports {module} ({dst})")
    assert not upward, "imports that point up the layers:\n" + "\n".join(upward)


def test_no_module_is_over_500_lines() -> None:
    """Small modules whose names say what they do: a module past 500 lines holds two things."""
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert not long, f"split these: {long}"
