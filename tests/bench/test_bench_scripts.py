"""Every bench script is documented with its command, and one whose optional dependency is
missing says so in one line and exits 2 (never a traceback after minutes of work)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))
OPTIONAL = ("onnxruntime", "onnxconverter_common", "olive")
_IMPORT = re.compile(r"^\s*(?:import|from) (onnxruntime|onnxconverter_common|olive)\b", re.M)
_VALIDATES = re.compile(r"amp_convert\.validation|\bvalidate\(|\bauto_convert\(")
_BLOCKER = """
import os, sys
_blocked = [m for m in os.environ.get("BLOCK_MODULES", "").split(",") if m]
class _Block:
    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in _blocked):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Block())
"""


def _needed(script: Path) -> set[str]:
    """The optional modules a script uses: imported by it, or ONNX Runtime through validation."""
    text = script.read_text(encoding="utf-8")
    code = text.split('"""', 2)[-1] if text.lstrip().startswith('"""') else text  # no docstring
    used = set(_IMPORT.findall(code))
    if _VALIDATES.search(code):
        used.add("onnxruntime")
    return used


def _declared(script: Path) -> set[str]:
    calls = re.findall(r"\bneeds\(([^)]*)\)", script.read_text(encoding="utf-8"))
    return {m for call in calls for m in re.findall(r"\"(\w+)\"", call)}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_bench_is_in_the_bench_readme_with_its_command(script: Path) -> None:
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    command = rf"python3? (bench/{script.name}|-m bench\.{script.stem})\b"
    assert re.search(command, readme), f"bench/README.md has no command for {script.name}"
    assert re.search(rf"^#+ .*{re.escape(script.name)}", readme, re.M), f"no heading {script.name}"


def test_the_gpu_session_script_is_documented_too() -> None:
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    assert "bash bench/gpu_session.sh" in readme


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_optional_dependencies_are_declared(script: Path) -> None:
    """A script that uses ONNX Runtime, onnxconverter-common or Olive checks for it first."""
    missing = _needed(script) - _declared(script)
    assert not missing, f"{script.name} uses {sorted(missing)} without needs(...)"


@pytest.mark.slow
@pytest.mark.parametrize("script", [s for s in SCRIPTS if _declared(s)], ids=lambda p: p.name)
def test_a_missing_dependency_is_one_line_and_exit_2(script: Path, tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(_BLOCKER, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "BLOCK_MODULES": ",".join(OPTIONAL),
    }
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == "", done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{script.name}: needs " in lines[0] and "pip install" in lines[0], lines[0]
