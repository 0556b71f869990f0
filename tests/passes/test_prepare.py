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


def _converted_face_detector(**options):
    import amp_convert
    from models.old_exports import torch12_face_detector

    original = torch12_face_detector()
    converted, report = amp_convert.convert(original, return_report=True, **options)
    return original, converted, report


def _outputs_close(original: onnx.ModelProto, converted: onnx.ModelProto) -> None:
    from tests.helpers import run

    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    feeds = {"input": x}
    for ref, got in zip(run(original, feeds), run(converted, feeds), strict=True):
        np.testing.assert_allclose(got, ref, atol=2e-2, rtol=2e-2)


def test_opset9_weights_listed_as_inputs_are_weights() -> None:
    """torch 1.2's export (opset 9, IR 4) lists every weight among the inputs: they are weights,
    converted, folded and stored low, and they leave the inputs with a note."""
    from tests.helpers import check_onnx, op_counts

    original, converted, report = _converted_face_detector()
    check_onnx(converted)
    assert [i.name for i in converted.graph.input] == ["input"]
    assert report.casts_inserted <= 5, report.summary()
    floats = {t.name for t in original.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    stored = {t.name: t.data_type for t in converted.graph.initializer}
    assert floats and all(
        stored.get(n, onnx.TensorProto.FLOAT16) == onnx.TensorProto.FLOAT16 for n in floats
    )  # a folded weight may be renamed
    assert {t.data_type for t in converted.graph.initializer} <= {
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.INT64,
    }
    assert [f.action for f in report.folds] == ["folded"] * 3
    assert op_counts(converted)["BatchNormalization"] == 0
    note = report.initializer_inputs
    listed = len(original.graph.input) - 1
    assert note is not None and (note.case, note.count) == ("weights", listed)
    assert "initializers listed as graph inputs: treated as weights" in report.summary()
    assert report.to_dict()["initializer_inputs"]["case"] == "weights"
    _outputs_close(original, converted)


def test_keep_initializer_inputs_keeps_them_overridable_fp32() -> None:
    """--keep-initializer-inputs: the weights stay FP32 graph inputs, one Cast each where read
    low, and the summary says which case applied."""
    original, converted, report = _converted_face_detector(keep_initializer_inputs=True)
    assert [i.name for i in converted.graph.input] == [i.name for i in original.graph.input]
    assert [i.type for i in converted.graph.input] == [i.type for i in original.graph.input]
    names = {i.name for i in original.graph.input[1:]}
    cast_reads = [n.input[0] for n in converted.graph.node if n.op_type == "Cast"]
    assert all(cast_reads.count(name) <= 1 for name in names)
    note = report.initializer_inputs
    assert note is not None and note.case == "overridable"
    assert "kept as overridable FP32 graph inputs" in report.summary()
    _outputs_close(original, converted)
