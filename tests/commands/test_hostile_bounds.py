"""Hostile input, round 4: every crash ends as one line, every size is bounded, every word right.

Grouped by family like test_bad_input.py: signals in the first instants, text from the model
(names that are not UTF-8 or too long, dim_param expressions, control characters in progress
lines), memory, what a path is (symlink loops, broken symlinks), models ONNX Runtime loads that
the checker refuses, and warnings said once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert.commands.cli import cli
from tests.commands.test_bad_input import _SIGNAL_ON_IMPORT, child, saved

pytestmark = pytest.mark.integration

pytest.importorskip("onnxruntime")
F32 = TensorProto.FLOAT


def _model(inputs, outputs, nodes, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _mlp(dim: object = 1, name: str = "x") -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    return _model(
        [helper.make_tensor_value_info(name, F32, [dim, 8])],
        [helper.make_tensor_value_info("y", F32, [dim, 8])],
        [helper.make_node("MatMul", [name, "w"], ["y"], name="mm")],
        [numpy_helper.from_array(w, "w")],
    )


def one_line(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output, res.output
    last = res.output.strip().splitlines()[-1]
    for w in words:
        assert w in last, last


# ------------------------------------------------------------------ signals in the first instants


@pytest.mark.parametrize(
    "module", ["amp_convert._version", "amp_convert.startup", "amp_convert.commands.interrupts"]
)
def test_sigint_before_main_runs_is_130_and_one_line(tmp_path: Path, module: str) -> None:
    """Before main installed its handler: a traceback, then exit 1 or death by SIGINT."""
    src = saved(tmp_path / "m.onnx")
    done = child(_SIGNAL_ON_IMPORT, module, "SIGINT", src, "-o", tmp_path / "o.onnx")
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "amp-convert: interrupted"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


# ------------------------------------------------------------------ text from the model


def test_a_long_dim_param_expression_is_no_crash(tmp_path: Path) -> None:
    """5,000 terms: RecursionError in convert and validate (exit 3)."""
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_mlp("+".join(f"s{i}" for i in range(5_000))), src)
    res = CliRunner().invoke(cli, [str(src), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["validate", str(src), str(out), "--provider", "emulate"])
    assert res.exit_code in (0, 1) and "internal error" not in res.output, res.output


def test_an_input_name_over_64k_is_one_line(tmp_path: Path) -> None:
    """--save-inputs with an input name over 64 KiB crashed writing the .npz member."""
    src = tmp_path / "m.onnx"
    onnx.save(_mlp(name="n" * 70_000), src)
    res = CliRunner().invoke(
        cli,
        [
            "validate",
            str(src),
            str(src),
            "--provider",
            "emulate",
            "--save-inputs",
            str(tmp_path / "x.npz"),
        ],
    )
    one_line(res, "70000 characters long")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def _non_utf8(path: Path) -> Path:
    data = _mlp().SerializeToString().replace(b"mm", b"\xff\xfe")
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("extra", [(), ("--auto", "--provider", "emulate")])
def test_a_name_that_is_not_utf8_is_one_line_in_every_mode(tmp_path: Path, extra) -> None:
    """--auto on a non-UTF-8 node name: SerdeError, exit 3 (convert refused it cleanly)."""
    src = _non_utf8(tmp_path / "m.onnx")
    res = CliRunner().invoke(cli, [str(src), "-o", str(tmp_path / "o.onnx"), "-q", *extra])
    one_line(res, "not valid UTF-8", "\\xff\\xfe")


def test_model_text_never_reaches_the_progress_line_raw(tmp_path: Path) -> None:
    """A dim named with control characters was printed raw in 'running the candidate on ...
    dims' (click strips ESC sequences off a pipe, not BEL or SOH)."""
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_mlp("b\x07\x01"), src)
    amp_convert.convert_file(src, out)
    res = CliRunner().invoke(cli, ["validate", str(src), str(out), "--provider", "emulate"])
    assert res.exit_code in (0, 1), res.output
    assert "\x07" not in res.output and "\x01" not in res.output
    assert "b\\x07\\x01" in res.output


# ------------------------------------------------------------------ memory


def test_out_of_memory_is_one_line_exit_2(tmp_path: Path, monkeypatch) -> None:
    from amp_convert.validation import core

    def exhausted(*args, **kwargs):
        raise MemoryError

    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_mlp(), src)
    amp_convert.convert_file(src, out)
    monkeypatch.setattr(core, "compare_output", exhausted)
    res = CliRunner().invoke(cli, ["validate", str(src), str(out), "--provider", "emulate"])
    one_line(res, "out of memory")


def test_out_of_memory_past_the_validation_has_the_commands_prefix(
    tmp_path: Path, monkeypatch
) -> None:
    """A MemoryError that escapes the validation itself (not its own one-line ValidationError)
    printed a bare 'error: ...' where every other error line reads 'amp-convert: error: ...'."""
    from amp_convert.validation import core

    def exhausted(*args, **kwargs):
        raise MemoryError

    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_mlp(), src)
    amp_convert.convert_file(src, out)
    monkeypatch.setattr(core, "judge", exhausted)
    res = CliRunner().invoke(cli, ["validate", str(src), str(out), "--provider", "emulate"])
    one_line(res, "out of memory", "--dim")
    assert res.output.strip().splitlines()[-1].startswith("amp-convert: error: "), res.output


def test_comparing_two_outputs_holds_a_few_chunks_not_twenty_copies() -> None:
    """The comparison held ~20 times an output (float64 copies, masks, ratios): a 200 MB output
    cost 3.6 GB and validation ended in MemoryError under a limit."""
    from amp_convert.validation.metrics import Thresholds, compare_output

    rng = np.random.default_rng(0)
    ref = rng.standard_normal((64, 65_536)).astype(np.float32)  # 16 MiB
    cand = (ref + rng.standard_normal(ref.shape).astype(np.float32) * 1e-3).astype(np.float32)
    limits = Thresholds.coerce({"atol": 1e-2, "min_cosine": 0.99})
    tracemalloc.start()
    result = compare_output("y", ref, cand, limits, top1=True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.passed and result.top1 == 1.0
    assert peak < ref.nbytes / 2, f"{peak / ref.nbytes:.1f}x the output"


# ------------------------------------------------------------------ what a path is


@pytest.fixture
def links(tmp_path: Path) -> Path:
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    (tmp_path / "dangling").symlink_to("nothing")
    saved(tmp_path / "m.onnx")
    return tmp_path


@pytest.mark.parametrize("name, words", [("loop1", "symlink loop"), ("dangling", "broken symlink")])
def test_symlink_loops_and_broken_symlinks_are_named(links: Path, name: str, words: str) -> None:
    """They were "no such file", "File ... does not exist" or, for an output, "appeared
    during the run"."""
    m, path = str(links / "m.onnx"), str(links / name)
    for args in (
        [path],
        ["validate", m, path],
        ["validate", m, m, "--inputs", path],
        [m, "-o", path],
        [m, "--op-lists", path],
    ):
        res = CliRunner().invoke(cli, args)
        one_line(res, words)
    assert os.path.islink(links / "dangling") and not (links / "nothing").exists()


def test_non_utf8_text_names_the_byte_and_its_line(tmp_path: Path) -> None:
    """It said "(byte 7)": the offset, read as the byte's value."""
    src = saved(tmp_path / "m.onnx")
    lists = tmp_path / "lists.txt"
    lists.write_bytes(b"[deny]\nSoftmax keep\n\xff\xfe x\n")
    res = CliRunner().invoke(cli, [str(src), "--op-lists", str(lists), "-q"])
    one_line(res, "not UTF-8 text", "byte 0xff on line 3")


# ------------------------------------------------------------------ models ORT loads


def test_a_graph_output_without_a_shape_field_converts(tmp_path: Path) -> None:
    """ORT loads it; it was refused ("Field 'shape' of 'type' is required but missing")."""
    model = _mlp()
    model.graph.output[0].type.tensor_type.ClearField("shape")
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, src)
    report = amp_convert.convert_file(src, out, level="O2")
    assert any("without a shape" in w for w in report.warnings)
    onnx.checker.check_model(str(out), full_check=True)
    converted = onnx.load(str(out))
    assert [d.dim_value for d in converted.graph.output[0].type.tensor_type.shape.dim] == [1, 8]


# ------------------------------------------------------------------ warnings said once


def test_a_posix_class_warning_is_said_once_naming_the_option(tmp_path: Path) -> None:
    """'[[:alpha:]]' printed Python's "Possible nested set" twice, naming no option."""
    src = saved(tmp_path / "m.onnx")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv[0] = 'amp-convert'\nfrom amp_convert.startup import main; main()",
            str(src),
            "-o",
            str(tmp_path / "o.onnx"),
            "--exclude-nodes",
            "[[:alpha:]]",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 0, done.stderr
    said = [ln for ln in done.stderr.splitlines() if "nested set" in ln]
    assert len(said) <= 1 and all("--exclude-nodes" in ln for ln in said), done.stderr
