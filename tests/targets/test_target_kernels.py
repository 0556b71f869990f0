"""With --target ort-cuda (default) every converted node has an ORT CUDA kernel in its
types; nodes without one keep FP32 with the table's reason, at every level, O3 included."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper, numpy_helper

import amp_convert
from amp_convert.targets import load_target, uncovered_nodes
from models.build import BUILDERS
from models.cnn import bn_fp16_overflow, mobilenet_cnn
from tests.helpers import FLOAT, FLOAT16, all_nodes, run, value_types
from tests.properties.test_backend_corpus import _case_id, _cases

LEVELS = ["O1", "O2", "O3"]


def _typed(model: onnx.ModelProto) -> ir.Model:
    return ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model))


def _float_inputs(model: onnx.ModelProto, node: onnx.NodeProto) -> set[int]:
    types = value_types(model)
    return {types[i] for i in node.input if i and types.get(i) in (FLOAT, FLOAT16)}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("opset", [11, 17])
def test_cnn_with_clip_and_batchnorm_is_covered(level: str, opset: int) -> None:
    model = mobilenet_cnn(opset=opset)
    out = amp_convert.convert(model, level=level)
    onnx.checker.check_model(out, full_check=True)
    assert uncovered_nodes(_typed(out), load_target("ort-cuda")) == []
    types = value_types(out)
    for node in all_nodes(out.graph):
        if node.op_type == "Clip" and opset < 12:
            assert types[node.input[0]] == FLOAT, "no FP16 Clip below opset 12 on ORT CUDA"
        if node.op_type == "BatchNormalization":
            assert len(_float_inputs(out, node)) == 1


@pytest.mark.parametrize("level", LEVELS)
def test_kept_batchnorm_never_mixes_float_types(level: str) -> None:
    """A BN that cannot be folded (its folded weight overflows FP16) stays one type throughout."""
    out, report = amp_convert.convert(bn_fp16_overflow(), level=level, return_report=True)
    bns = [n for n in all_nodes(out.graph) if n.op_type == "BatchNormalization"]
    assert bns and any(f.action == "kept" for f in report.folds)
    for node in bns:
        assert len(_float_inputs(out, node)) == 1, node.name
    assert uncovered_nodes(_typed(out), load_target("ort-cuda")) == []


def _clip11(bounds_as_inputs: bool = False) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")]
    inputs = [helper.make_tensor_value_info("x", FLOAT, [2, 4])]
    if bounds_as_inputs:
        inputs += [helper.make_tensor_value_info(n, FLOAT, []) for n in ("lo", "hi")]
    else:
        inits += [
            numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
            numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
        ]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Clip", ["m", "lo", "hi"], ["c"], name="clip"),
            helper.make_node("MatMul", ["c", "w"], ["y"], name="mm2"),
        ],
        "g",
        inputs,
        [helper.make_tensor_value_info("y", FLOAT, [2, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)


def test_clip11_with_runtime_bounds_keeps_fp32_with_the_tables_reason_even_at_o3() -> None:
    _out, report = amp_convert.convert(_clip11(True), level="O3", return_report=True)
    decision = report.decision("clip")
    assert decision.precision == "fp32"
    assert "no FP16 kernel in ORT CUDA for Clip-11" in decision.reason
    assert report.decision("mm").precision == "low"
    assert "ort-cuda" in report.target and "ONNX Runtime" in report.target


@pytest.mark.parametrize("level", LEVELS)
def test_clip11_with_constant_bounds_runs_low_as_min_max(level: str) -> None:
    original = _clip11()
    out, report = amp_convert.convert(original, level=level, return_report=True)
    onnx.checker.check_model(out, full_check=True)
    ops = [n.op_type for n in all_nodes(out.graph)]
    assert "Clip" not in ops and ops.count("Min") == ops.count("Max") == 1
    assert "runs as Min/Max" in report.decision("clip").reason
    assert report.casts_inserted == 2  # x in, y out
    x = {"x": np.linspace(-8, 8, 8, dtype=np.float32).reshape(2, 4)}
    ref = run(original, x)[0]
    np.testing.assert_allclose(run(out, x)[0], ref, atol=1e-2)


def test_target_none_follows_the_schema_only() -> None:
    _, report = amp_convert.convert(_clip11(), level="O3", target="none", return_report=True)
    assert report.decision("clip").precision == "low"
    assert report.target.startswith("none")


def _corpus() -> list[tuple[str, object]]:
    return [(f"models/{n}", b) for n, b in sorted(BUILDERS.items())] + [
        (f"backend/{_case_id(p)}", p) for p in _cases()
    ]


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_every_corpus_model_is_covered_by_the_kernel_table(level: str) -> None:
    """Every generated model and every onnx backend model: no low node lacks a CUDA kernel."""
    table = load_target("ort-cuda")
    problems, low_nodes = [], 0
    for name, src in _corpus():
        model = src() if callable(src) else onnx.load(src)  # type: ignore[operator]
        try:
            out = amp_convert.convert(model, level=level)
        except amp_convert.AmpConvertError:
            continue  # refusals are covered by the corpus tests
        typed = _typed(out)
        low_nodes += sum(
            1
            for node in typed.graph.all_nodes()
            if any(
                v is not None and v.dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
                for v in (*node.inputs, *node.outputs)
            )
        )
        problems += [f"{name}: {line}" for line in uncovered_nodes(typed, table)]
    assert low_nodes > 1000
    assert problems == []


@pytest.mark.parametrize("level", LEVELS)
def test_ort_cpu_target_keeps_low_only_what_ort_cpu_runs_low(level: str) -> None:
    """--target ort-cpu (the one TARGETS table the CLI offers) follows ORT's CPU kernel table."""
    model = mobilenet_cnn(opset=17)
    out, report = amp_convert.convert(model, level=level, target="ort-cpu", return_report=True)
    onnx.checker.check_model(out, full_check=True)
    assert report.target.startswith("ort-cpu (kernel table from ONNX Runtime ")
    assert uncovered_nodes(_typed(out), load_target("ort-cpu")) == []
    cuda = amp_convert.convert(model, level=level, return_report=True)[1]
    assert report.nodes_low < cuda.nodes_low  # the CPU provider has far fewer FP16 kernels
