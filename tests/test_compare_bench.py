"""bench/compare.py: the shared definitions (casts, FP32 nodes, error lines) and a smoke run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from bench import _compare_analyze as analyze

REPO = Path(__file__).resolve().parent.parent


def _vi(name: str, elem: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [2])


def _model_with_loop() -> onnx.ModelProto:
    """Main graph: Cast(x -> fp16) -> Relu (fp16) -> Loop whose body has an FP32 Add and a Cast."""
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["h_in"], ["h32"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["h32", "h32"], ["s"]),
            helper.make_node("Cast", ["s"], ["h_out"], to=TensorProto.FLOAT16),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [_vi("i", TensorProto.INT64), _vi("cond_in", TensorProto.BOOL), _vi("h_in", 10)],
        [_vi("cond_out", TensorProto.BOOL), _vi("h_out", 10)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
            helper.make_node("Relu", ["x16"], ["r"]),
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Loop", ["n", "c", "r"], ["y16"], body=body),
            helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
        ],
        "g",
        [_vi("x", TensorProto.FLOAT), _vi("n", TensorProto.INT64), _vi("c", TensorProto.BOOL)],
        [_vi("y", TensorProto.FLOAT)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_count_nodes_definitions() -> None:
    model = onnx.shape_inference.infer_shapes(_model_with_loop())
    counts = analyze.count_nodes(model.graph)
    assert counts["casts"] == 4  # two in the main graph, two in the Loop body
    # float nodes (Cast/Constant excluded): Relu (fp16), Shape (fp32 input), Loop (fp16),
    # body Add (fp32); Identity reads a bool and does not count
    assert counts["float_nodes"] == 4
    assert counts["fp32_nodes"] == 2  # Shape and the body's Add


def test_first_line_strips_ort_preamble() -> None:
    e = RuntimeError(
        "[ONNXRuntimeError] : 1 : FAIL : Load model from /tmp/x/model.onnx failed:/onnxruntime_src/"
        "onnxruntime/core/graph/graph.cc:1453 onnxruntime::Graph::Graph(const Model&, bool) "
        "[ONNXRuntimeError] : 1 : FAIL : Tensor element type mismatch. 10 != 1\nmore"
    )
    assert analyze.first_line(e) == (
        "RuntimeError: Load model failed: Tensor element type mismatch. 10 != 1"
    )


@pytest.mark.slow
def test_compare_smoke(tmp_path: Path) -> None:
    pytest.importorskip("onnxconverter_common")
    out = tmp_path / "r.json"
    md = tmp_path / "r.md"
    proc = subprocess.run(
        [sys.executable, "bench/compare.py", "--no-big", "--only", "generated/lstm_model$",
         "--repeat", "1", "--jobs", "1", "--json", str(out), "--markdown", str(md)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    raw = json.loads(out.read_text())
    (model,) = raw["models"]
    assert model["key"] == "generated/lstm_model"
    for conv in ("amp_O1", "amp_O2", "amp_O3", "occ"):
        check = model["checks"][conv]
        assert check["ort_error"] is None and check["checker_error"] is None
        assert isinstance(check["accuracy"]["max_rel"], float)
        assert model["median_s"][conv] > 0
    assert raw["targets"]["1"]["met"]
    assert "| converter |" in md.read_text()
