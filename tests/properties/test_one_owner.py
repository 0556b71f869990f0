"""Decisions with one owner: a target's name and a low type's limits are written in one place.

A step or a validator that compared the target's name ("ort-cuda"), or wrote FP16's largest value
again, would drift from the registry (targets/registry.py) and the LowType objects (core/dtypes.py)
the day either changes. Docstrings may explain with the numbers; code may not hold them.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "amp_convert"
#: the runtime names, owned by targets/ (and shown by the command line's flag declarations)
TARGET_NAMES = {"ort-cuda", "ort-cpu"}
#: the low types' limits, owned by core/dtypes.py
LIMITS = {65504.0, 65520.0, 2.0**-14, 2.0**-24, 6.1e-05, 3.39e38, 3.3895e38}


def _constants(path: Path) -> list[tuple[int, object]]:
    """The constants of a module, its docstrings left out."""
    tree = ast.parse(path.read_text(), str(path))
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            docs.add(id(first.value))
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and id(n) not in docs
    ]


def _modules(*skip: str) -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] not in skip]


def test_no_target_name_outside_targets_and_the_command_line() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {value!r}"
        for path in _modules("targets", "commands")
        for line, value in _constants(path)
        if isinstance(value, str) and value in TARGET_NAMES
    ]
    assert not found, found


def test_no_low_type_limit_outside_core() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {value!r}"
        for path in _modules("core")
        for line, value in _constants(path)
        if isinstance(value, float) and value in LIMITS
    ]
    assert not found, found
