"""What ONNX Runtime loads, amp-convert converts and validates.

onnxconverter-common's own test data, in code (models/ort_loads.py): nodes out of topological
order, an untyped If output, an ai.onnx.ml-only model. Each was refused (exit 2) while ORT loads
it; ORT's own FP16 converter output (its I/O Casts appended last) was refused by `validate`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert.commands.cli import cli
from models.ort_loads import one_hot_ml_only, tf2onnx_no_opt, untyped_if_output
from tests.graphs import if_branches_reading
from tests.helpers import FLOAT, FLOAT16, one_line_error, op_counts, rel_error, run, session


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def save(model: onnx.ModelProto, folder: Path, name: str = "m.onnx") -> Path:
    path = folder / name
    onnx.save(model, path)
    return path


def low_values(model: onnx.ModelProto) -> set[str]:
    inferred = onnx.shape_inference.infer_shapes(model)
    return {
        vi.name for vi in inferred.graph.value_info if vi.type.tensor_type.elem_type == FLOAT16
    } | {t.name for t in model.graph.initializer if t.data_type == FLOAT16}


def test_unsorted_tf2onnx_export_is_sorted_converted_and_says_so(tmp_path: Path) -> None:
    model = tf2onnx_no_opt()
    src = save(model, tmp_path)
    data = src.read_bytes()
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    (ref,) = run(str(src), {"input:0": x})  # ORT loads it as it is
    result = invoke(src, "-o", tmp_path / "o.onnx")
    assert result.exit_code == 0, result.output
    assert "not in topological order" in result.output and "sorted" in result.output
    out = onnx.load(tmp_path / "o.onnx")
    onnx.checker.check_model(out, full_check=True)  # sorted and type-correct
    assert op_counts(out)["MatMul"] == 2
    assert "dense/kernel:0" in low_values(out)  # the weights really went FP16
    (got,) = run(str(tmp_path / "o.onnx"), {"input:0": x})
    assert rel_error(ref, got) < 1e-2
    assert src.read_bytes() == data


def test_api_sorts_too_and_reports_the_note() -> None:
    out, report = amp_convert.convert(tf2onnx_no_opt(), return_report=True)
    assert any("not in topological order" in w for w in report.warnings)
    onnx.checker.check_model(out)


def test_untyped_if_output_is_typed_by_inference(tmp_path: Path) -> None:
    src = save(untyped_if_output(), tmp_path)
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    (ref,) = run(str(src), {"x": x})
    result = invoke(src, "-o", tmp_path / "o.onnx")
    assert result.exit_code == 0, result.output
    assert "1 graph output(s) without a type ('y') typed by ONNX's inference" in result.output
    assert "1 value_info entry without a type dropped" in result.output
    out = onnx.load(tmp_path / "o.onnx")
    onnx.checker.check_model(out, full_check=True)
    assert out.graph.output[0].type.tensor_type.elem_type == FLOAT  # I/O kept FP32
    assert "w" in low_values(out)
    (got,) = run(str(tmp_path / "o.onnx"), {"x": x})
    assert rel_error(ref, got) < 1e-2


def test_an_output_inference_cannot_type_is_refused_and_says_why(tmp_path: Path) -> None:
    """A custom op's untyped output: no one can tell its type, a conversion could change it."""
    graph = helper.make_graph(
        [helper.make_node("Mystery", ["x"], ["y"], name="mystery", domain="custom.ops")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [onnx.ValueInfoProto(name="y")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.ops", 1)]
    )
    src = save(model, tmp_path)
    line = one_line_error(
        invoke(src, "-o", tmp_path / "o.onnx"),
        "graph output 'y' has no type and ONNX's inference cannot give it one",
        "a converted model could change its type unseen",
    )
    assert line.startswith(f"amp-convert: error: {src}: ")
    assert not (tmp_path / "o.onnx").exists()


def test_ml_only_model_is_nothing_to_convert(tmp_path: Path) -> None:
    model = one_hot_ml_only()
    src = save(model, tmp_path)
    feeds = {"input": np.array([[1], [4], [0]], dtype=np.int64)}
    (ref,) = run(str(src), feeds)
    result = invoke(src, "-o", tmp_path / "o.onnx")
    assert result.exit_code == 0, result.output
    assert "nothing to convert: the model imports no ai.onnx opset (only ai.onnx.ml)" in (
        result.output
    )
    out = onnx.load(tmp_path / "o.onnx")
    assert out.graph.node == model.graph.node and out.graph.output == model.graph.output
    (got,) = run(str(tmp_path / "o.onnx"), feeds)
    np.testing.assert_array_equal(ref, got)


def test_model_without_float_nodes_says_nothing_to_convert(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "x"], ["a"], name="add"),
            helper.make_node("ArgMax", ["a"], ["y"], name="argmax", axis=1, keepdims=0),
        ],
        "ints",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
    )
    src = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path)
    result = invoke(src, "-o", tmp_path / "o.onnx")
    assert result.exit_code == 0, result.output
    assert "nothing to convert: no value of the model is a float" in result.output
    assert op_counts(onnx.load(tmp_path / "o.onnx"))["Cast"] == 0


def test_unsorted_subgraph_reference_is_sorted(tmp_path: Path) -> None:
    """An If branch reads a value its outer graph produces after the If: ORT sorts it."""
    then, other = if_branches_reading("late")
    graph = helper.make_graph(
        [
            helper.make_node(
                "If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other
            ),
            helper.make_node("Abs", ["x"], ["late"], name="abs"),
        ],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    src = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path)
    result = invoke(src, "-o", tmp_path / "o.onnx")
    assert result.exit_code == 0, result.output
    out = onnx.load(tmp_path / "o.onnx")
    assert [n.name for n in out.graph.node if n.name in ("abs", "branch")] == ["abs", "branch"]
    feeds = {"c": np.array(True), "x": np.array([-1, 2, -3, 4], np.float32)}
    np.testing.assert_allclose(run(str(tmp_path / "o.onnx"), feeds)[0], [1, 2, 3, 4])


def cycle_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "b"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["b"], name="relu"),
            helper.make_node("Neg", ["a"], ["y"], name="neg"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_cycle_is_refused_naming_a_node_on_it(tmp_path: Path) -> None:
    src = save(cycle_model(), tmp_path)
    line = one_line_error(
        invoke(src, "-o", tmp_path / "o.onnx"),
        f"{src}: the nodes form a cycle through node ",
        "ONNX Runtime refuses it too",
    )
    assert "'add' (Add)" in line or "'relu' (Relu)" in line
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.integration
def test_dangling_input_is_one_line_and_nothing_else_on_stderr(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Add", ["h", "nowhere"], ["y"], name="add"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        [w],
    )
    src = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "amp_convert.commands.cli",
            str(src),
            "-o",
            str(tmp_path / "o.onnx"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (
        f"amp-convert: error: {src}: node 'add' (Add) reads 'nowhere', which no node, graph "
        "input or initializer defines; the model is invalid\n"
    )


@pytest.mark.integration
def test_validate_accepts_ort_float16_converter_output(tmp_path: Path) -> None:
    """ORT's convert_float_to_float16(keep_io_types=True) appends its I/O Casts after the rest."""
    float16 = pytest.importorskip("onnxruntime.transformers.float16")
    model = tf2onnx_no_opt()
    sorted_model = onnx.ModelProto()
    sorted_model.CopyFrom(model)
    sorted_model.graph.node.reverse()  # the reference, in order
    ref = save(sorted_model, tmp_path, "ref.onnx")
    cand = float16.convert_float_to_float16(sorted_model, keep_io_types=True)
    names = [n.op_type for n in cand.graph.node]
    assert names[-2:] == ["Cast", "Cast"] and names[0] != "Cast"  # unsorted, as ORT writes it
    session(cand)  # ORT loads it
    cand_path = save(cand, tmp_path, "ort_fp16.onnx")
    data = cand_path.read_bytes()
    for provider in ("emulate", "cpu"):
        result = invoke("validate", ref, cand_path, "--provider", provider, "--min-cosine", "0.999")
        assert result.exit_code == 0, result.output
        assert "result: PASS" in result.output, result.output
    assert cand_path.read_bytes() == data
