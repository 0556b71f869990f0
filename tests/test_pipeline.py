"""pipeline.run as a sequence: steps import no other step, each step and decision is logged."""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from pathlib import Path

import amp_convert
from models.blocks import bert_encoder

PASSES = Path(amp_convert.__file__).parent / "passes"
#: modules under passes/ that hold shared types or algorithms, not steps (boundaries: the
#: control-flow boundaries plan and assign share; scoped_names: the renaming prepare applies)
SHARED = {"plan", "mincut", "norm_match", "angles", "boundaries", "scoped_names"}


def test_no_step_imports_another_step() -> None:
    steps = {p.stem for p in PASSES.glob("*.py")} - SHARED - {"__init__"}
    for path in PASSES.glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = set()
        for stmt in ast.walk(tree):
            if isinstance(stmt, ast.ImportFrom) and stmt.module:
                parts = stmt.module.split(".")
                if parts[:2] == ["amp_convert", "passes"]:
                    imported |= {parts[2]} if len(parts) > 2 else {a.name for a in stmt.names}
        assert not (imported & steps), f"{path.name} imports the step(s) {imported & steps}"


def test_every_step_and_decision_is_logged(caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="amp_convert"):
        amp_convert.convert(bert_encoder(), level="O2")
    steps = [r.getMessage() for r in caplog.records if r.name == "amp_convert.pipeline"]
    names = [m.split(": ", 1)[1] for m in steps if " -> " not in m]
    assert names == [
        "prepare", "opset upgrade", "analyse", "infer dtypes", "measure", "fold BN", "hand norms",
        "global pool", "classify", "pin statistics", "QDQ groups", "assign", "rewrite", "cleanup",
        "verify",
    ]  # fmt: skip
    assert any(m.startswith("step 10: assign -> PrecisionPlan: ") for m in steps)
    decisions = [r.getMessage() for r in caplog.records if r.name == "amp_convert.passes.assign"]
    assert decisions and all(m.startswith("assign ") for m in decisions)


def test_cli_verbose_shows_the_steps(tmp_path: Path) -> None:
    """In a fresh process (pytest's own log handlers would swallow basicConfig here)."""
    src = tmp_path / "m.onnx"
    src.write_bytes(bert_encoder().SerializeToString())

    def convert(*flags: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "amp_convert.cli", str(src), "--force", *flags]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    verbose = convert("-o", str(tmp_path / "o.onnx"), "-v")
    assert verbose.returncode == 0, verbose.stderr
    assert "step 8: classify" in verbose.stderr and "step 13: verify ->" in verbose.stderr
    quiet = convert("-o", str(tmp_path / "q.onnx"))
    assert quiet.returncode == 0 and "step 8" not in quiet.stderr + quiet.stdout
