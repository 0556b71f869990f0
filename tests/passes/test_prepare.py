"""prepare alone: the IR < 4 initializer promotion, Constant normalisation and the name registry."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from amp_convert.passes.prepare import prepare
from tests.graphs import model, node, proto_bytes, tensor, weight


def test_ir3_initializers_listed_as_inputs_become_constants() -> None:
    m = model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [tensor("x", [2]), tensor("w", [2])],
        [tensor("y", [2])],
        [weight("w", [1.0, 2.0])],
        opset=9,
        ir_version=3,
    )
    prepared = prepare(m)
    assert (prepared.promoted, prepared.constants, prepared.modified) == (1, 0, True)
    assert [v.name for v in m.graph.inputs] == ["x"] and m.ir_version == 4
    assert "w" in m.graph.initializers


def test_constant_value_floats_become_a_tensor() -> None:
    m = model(
        [
            helper.make_node("Constant", [], ["c"], name="c", value_floats=[1.0, 2.0]),
            helper.make_node("Add", ["x", "c"], ["y"], name="add"),
        ],
        [tensor("x", [2])],
        [tensor("y", [2])],
    )
    prepared = prepare(m)
    assert (prepared.promoted, prepared.constants) == (0, 1)
    attr = node(m, "c").attributes
    assert list(attr) == ["value"] and attr["value"].value.dtype == ir.DataType.FLOAT
    np.testing.assert_array_equal(attr["value"].value.numpy(), [1.0, 2.0])


def test_nothing_to_prepare_changes_nothing_and_names_are_reserved() -> None:
    m = model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [tensor("x", [2])],
        [tensor("y", [2], onnx.TensorProto.FLOAT)],
    )
    before = proto_bytes(m)
    prepared = prepare(m)
    assert not prepared.modified and proto_bytes(m) == before
    assert all(name in prepared.names for name in ("x", "y", "relu"))
    assert prepared.names.take("relu") == "relu_1"
