"""infer_dtypes alone: element types from ONNX inference first, schema propagation second."""

from __future__ import annotations

import onnx
import onnx_ir as ir
from onnx import helper

from amp_convert.passes.infer_dtypes import DtypeResult, InferDtypesPass, infer_dtypes
from tests.graphs import model, tensor, value

F32, F16, I64 = ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.INT64


def _untyped() -> ir.Model:
    """Relu -> Cast(to fp16) -> Shape, and a custom op: no value_info at all."""
    return model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Cast", ["r"], ["c"], name="cast", to=onnx.TensorProto.FLOAT16),
            helper.make_node("Shape", ["c"], ["s"], name="shape"),
            helper.make_node("MyOp", ["x"], ["u"], name="custom", domain="my.domain"),
        ],
        [tensor("x", [2, 3])],
        [tensor("s", [2], onnx.TensorProto.INT64)],
        extra_opsets=[helper.make_opsetid("my.domain", 1)],
        typed=False,
    )


def test_schema_propagation_types_what_inference_did_not() -> None:
    m = _untyped()
    result = infer_dtypes(m, {})
    assert result == DtypeResult(from_schemas=2, unknown=("u",))  # s: typed as an output
    assert result.modified
    assert [value(m, n).dtype for n in ("r", "c", "u")] == [F32, F16, None]


def test_onnx_inference_comes_first() -> None:
    m = _untyped()
    r_type = helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [2, 3])
    result = infer_dtypes(m, {"r": r_type})
    assert (result.from_inference, result.from_schemas) == (1, 1)
    assert value(m, "r").type == ir.TensorType(F32)  # set from the inferred TypeProto


def test_second_run_changes_nothing() -> None:
    m = _untyped()
    infer_dtypes(m, {})
    again = infer_dtypes(m, {})
    assert again == DtypeResult(unknown=("u",)) and not again.modified
    assert not InferDtypesPass({})(m).modified  # the onnx-ir pass wrapper says the same


def test_like_ops_and_attributes() -> None:
    m = model(
        [
            helper.make_node("RandomNormalLike", ["x"], ["n"], name="rnl"),
            helper.make_node("EyeLike", ["x"], ["e"], name="eye", dtype=onnx.TensorProto.FLOAT16),
            helper.make_node("ConstantOfShape", ["shp"], ["z"], name="cos"),
            helper.make_node("CastLike", ["x", "h"], ["cl"], name="castlike"),
        ],
        [
            tensor("x", [3, 3]),
            tensor("shp", [2], onnx.TensorProto.INT64),
            tensor("h", [1], onnx.TensorProto.FLOAT16),
        ],
        [tensor("n", None), tensor("e", None), tensor("z", None), tensor("cl", None)],
        typed=False,
    )
    for out in m.graph.outputs:  # outputs declared without types
        out.type = None
    infer_dtypes(m, {})
    assert [value(m, n).dtype for n in ("n", "e", "z", "cl")] == [F32, F16, F32, F16]
