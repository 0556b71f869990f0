"""verify alone: a model whose types break a schema is refused, naming the node."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from amp_convert.errors import VerificationError
from amp_convert.passes.verify import Verified, verify
from tests.graphs import model, node, tensor

F16 = onnx.TensorProto.FLOAT16


def _relu_cast() -> ir.Model:
    return model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Cast", ["r"], ["y"], name="cast", to=F16),
        ],
        [tensor("x", [3])],
        [tensor("y", [3], F16)],
    )


def test_a_correct_model_passes_both_layers() -> None:
    assert verify(_relu_cast(), original_passed_strict=True) == Verified(2, onnx_strict=True)
    assert verify(_relu_cast(), original_passed_strict=False) == Verified(2, onnx_strict=False)


def test_cast_output_disagreeing_with_to_is_a_converter_bug() -> None:
    m = _relu_cast()
    node(m, "cast").attributes["to"] = ir.AttrInt64("to", ir.DataType.DOUBLE)
    with pytest.raises(VerificationError, match=r"node 'cast' \(Cast\): output typed FLOAT16"):
        verify(m, original_passed_strict=False)


def test_type_variable_bound_twice() -> None:
    m = model(
        [helper.make_node("Add", ["a", "b"], ["y"], name="add")],
        [tensor("a", [3]), tensor("b", [3])],
        [tensor("y", [3])],
    )
    m.graph.inputs[1].dtype = ir.DataType.FLOAT16
    with pytest.raises(VerificationError) as err:
        verify(m, original_passed_strict=False)
    assert str(err.value) == (
        "converter bug, model not written: node 'add' (Add): input 1 ('b') is FLOAT16 but T is "
        "bound to FLOAT"
    )


def test_if_branches_must_match_the_node() -> None:
    branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"], name="inner")], "b", [], [tensor("t", [3])]
    )
    m = model(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch, else_branch=branch)],
        [tensor("x", [3]), tensor("c", [], onnx.TensorProto.BOOL)],
        [tensor("y", [3])],
    )
    verify(m, original_passed_strict=True)
    body = node(m, "if").attributes["then_branch"].value
    body.outputs[0].dtype = ir.DataType.FLOAT16
    with pytest.raises(VerificationError, match="output 0 is FLOAT, then_branch gives FLOAT16"):
        verify(m, original_passed_strict=False)


def test_onnx_strict_check_runs_only_for_strict_originals() -> None:
    """A model our own check accepts but ONNX's strict inference refuses (wrong output type)."""
    m = _relu_cast()
    m.graph.outputs[0].dtype = ir.DataType.FLOAT16
    relu_out = node(m, "relu").outputs[0]
    relu_out.shape = ir.Shape([4])  # disagrees with the inferred [3]
    assert verify(m, original_passed_strict=False).onnx_strict is False
    with pytest.raises(VerificationError, match="converter bug"):
        verify(m, original_passed_strict=True)
