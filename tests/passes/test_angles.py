"""Rotary angles computed in the graph from integer positions stay FP32 (passes/angles.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from amp_convert import convert
from amp_convert.passes._angles import angle_nodes
from amp_convert.validation import validate
from models.fused import in_graph_rotary
from tests.helpers import FLOAT16, value_types

ANGLE_PATH = {"cast", "unsqueeze", "matmul", "transpose", "concat", "cos", "sin"}


def test_the_angle_path_is_found() -> None:
    model = ir.serde.deserialize_model(in_graph_rotary())
    assert {n.name for n in angle_nodes(model)} == ANGLE_PATH


@pytest.mark.integration
@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_angles_stay_fp32_and_long_positions_stay_accurate(level: str) -> None:
    original = in_graph_rotary()
    converted, report = convert(original, level=level, return_report=True)
    for name in ANGLE_PATH:
        decision = report.decision(name)
        assert decision.precision == "fp32" and "integer positions" in decision.reason, decision
    rng = np.random.default_rng(0)
    for start in (4096, 30000):
        feeds = {
            "position_ids": np.arange(start, start + 8, dtype=np.int64)[None],
            "x": rng.standard_normal((1, 8, 16)).astype(np.float32),
        }
        result = validate(original, converted, provider="emulate", inputs=feeds, runs=1)
        assert result.outputs[0].cosine >= 0.9999, (start, result.outputs[0].cosine)


def test_sin_of_an_activation_still_goes_low() -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Sin", ["h"], ["s"], name="sin"),
        helper.make_node("MatMul", ["s", "w"], ["y"], name="matmul_2"),
    ]
    w = onnx.numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    converted, report = convert(model, level="O2", return_report=True)
    assert report.decision("sin").precision == "low"
    assert value_types(converted)["s"] == FLOAT16
