"""pipeline.run as a sequence: steps import no other step, each step and decision is logged."""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from pathlib import Path

import pytest

import amp_convert
from models.blocks import bert_encoder
from tests.helpers import mypy_errors

PASSES = Path(amp_convert.__file__).parent / "passes"
#: passes/ holds the steps and nothing else: a step's own helpers are private modules (_name.py),
#: what several steps share lives in placement/, core/ or cost/
STEPS = {p.stem for p in PASSES.glob("*.py") if not p.stem.startswith("_")}


def test_passes_holds_only_steps() -> None:
    """Every public module of passes/ is a step pipeline.run calls."""
    source = Path(amp_convert.__file__).with_name("pipeline.py").read_text()
    called = {s for s in STEPS if f"from amp_convert.passes.{s} import" in source}
    assert called == STEPS, f"not steps: {sorted(STEPS - called)}"


@pytest.mark.integration
def test_no_step_imports_another_step() -> None:
    steps = STEPS
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
        "prepare",
        "opset upgrade",
        "analyse",
        "infer dtypes",
        "measure",
        "fold BN",
        "hand norms",
        "global pool",
        "classify",
        "pin statistics",
        "QDQ groups",
        "assign",
        "rewrite",
        "cleanup",
        "verify",
        "kernel limits",
        "measure result",
    ]
    assert any(m.startswith("step 10: assign -> PrecisionPlan: ") for m in steps)
    # every step is timed at -v: "step 8: classify -> 93 nodes classified (0.004 s)"
    done = [m for m in steps if " -> " in m]
    assert len(done) == len(names) and all(m.endswith(" s)") for m in done)
    decisions = [r.getMessage() for r in caplog.records if r.name == "amp_convert.passes.assign"]
    assert decisions and all(m.startswith("assign ") for m in decisions)


@pytest.mark.integration
def test_cli_verbose_shows_the_steps(tmp_path: Path) -> None:
    """In a fresh process (pytest's own log handlers would swallow basicConfig here)."""
    src = tmp_path / "m.onnx"
    src.write_bytes(bert_encoder().SerializeToString())

    def convert(*flags: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "amp_convert.commands.cli", str(src), "--force", *flags]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    verbose = convert("-o", str(tmp_path / "o.onnx"), "-v")
    assert verbose.returncode == 0, verbose.stderr
    assert "step 8: classify" in verbose.stderr and "step 13: verify ->" in verbose.stderr
    quiet = convert("-o", str(tmp_path / "q.onnx"))
    assert quiet.returncode == 0 and "step 8" not in quiet.stderr + quiet.stdout


def test_an_escaping_exception_names_its_step(monkeypatch, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from amp_convert import pipeline
    from amp_convert.commands.cli import cli

    def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(pipeline, "classify", broken)
    try:
        amp_convert.convert(bert_encoder())
    except RuntimeError as e:
        assert getattr(e, "__notes__", None) == ["in step 8: classify"]
    else:
        raise AssertionError("the broken step did not raise")
    src = tmp_path / "m.onnx"
    src.write_bytes(bert_encoder().SerializeToString())
    result = CliRunner().invoke(cli, [str(src), "-o", str(tmp_path / "o.onnx")])
    assert result.exit_code == 3 and not (tmp_path / "o.onnx").exists()
    assert result.output.strip() == (
        "amp-convert: internal error: RuntimeError: boom (in step 8: classify)"
    )


@pytest.mark.integration
def test_mypy_checks_the_arguments_of_a_step(tmp_path: Path) -> None:
    """StepRunner.run is typed with ParamSpec: two swapped arguments of step 10 are a type error."""
    errors = mypy_errors(
        "import onnx_ir as ir\n"
        "from amp_convert.options.convert import ConvertOptions\n"
        "from amp_convert.passes.assign import assign\n"
        "from amp_convert.placement.plan import Classes\n"
        "from amp_convert.core.steps import Edits, StepRunner\n"
        "from amp_convert.cost.traffic import ShapeBook\n"
        "def f(r: StepRunner, m: ir.Model, c: Classes, s: ShapeBook, o: ConvertOptions) -> None:\n"
        "    r.run(10, 'assign', Edits.NOTHING, assign, m, c, s, o, frozenset())\n"
        "    r.run(10, 'assign', Edits.NOTHING, assign, m, c, o, s, frozenset())\n",
        tmp_path,
    )
    assert errors and {line.split(":")[1] for line in errors} == {"9"}, errors


def test_the_json_report_keeps_structured_reasons_beside_the_text(tmp_path: Path) -> None:
    import json

    model = bert_encoder()
    first = next(n.name for n in model.graph.node if n.op_type == "MatMul")
    _, report = amp_convert.convert(model, level="O2", exclude_nodes=first, return_report=True)
    report.to_json(tmp_path / "r.json")
    nodes = {n["name"]: n for n in json.loads((tmp_path / "r.json").read_text())["nodes"]}
    pinned = nodes[first]
    assert pinned["reasons"][0] == {
        "kind": "user",
        "source": "user",
        "detail": f"--exclude-nodes {first}",
    }
    for node in nodes.values():  # the text is the structured reasons rendered, nothing else
        parts = [
            f"{r['source']}: {r['detail']}" if r["source"] else r["detail"] for r in node["reasons"]
        ]
        assert node["reason"] == "; ".join(parts) and node["reasons"]
    kinds = {r["kind"] for n in nodes.values() for r in n["reasons"]}
    assert {"user", "list", "no_float"} <= kinds
