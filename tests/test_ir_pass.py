"""MixedPrecisionPass: amp-convert inside onnx-ir's PassManager, next to other passes."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common
import pytest

import amp_convert
from amp_convert import MixedPrecisionPass
from amp_convert.errors import OptionError
from models.blocks import bert_encoder


def _bert() -> ir.Model:
    proto = bert_encoder(layers=1, hidden=32, heads=2, vocab=50, max_positions=16)
    return ir.serde.deserialize_model(proto)


def _float16_nodes(model: ir.Model) -> int:
    return sum(
        any(out.dtype == ir.DataType.FLOAT16 for out in node.outputs)
        for node in model.graph.all_nodes()
    )


def test_in_a_pass_manager_with_another_pass() -> None:
    model = _bert()
    unused = ir.node("Identity", [model.graph.outputs[0]], num_outputs=1, name="unused_copy")
    model.graph.append(unused)
    convert = MixedPrecisionPass(level="O2")
    result = ir.passes.PassManager([common.RemoveUnusedNodesPass(), convert])(model)
    assert result.modified
    assert result.model is model
    assert "unused_copy" not in {n.name for n in model.graph}  # the other pass ran first
    assert _float16_nodes(model) > 20
    assert convert.report is not None and convert.report.level == "O2"
    onnx.checker.check_model(ir.serde.serialize_model(model), full_check=True)


def test_same_result_as_convert() -> None:
    via_pass = _bert()
    MixedPrecisionPass(level="O2")(via_pass)
    via_api = amp_convert.convert(_bert(), level="O2")
    assert [n.op_type for n in via_pass.graph] == [n.op_type for n in via_api.graph]
    assert [o.dtype for o in via_pass.graph.outputs] == [o.dtype for o in via_api.graph.outputs]


def test_modified_is_honest() -> None:
    model = _bert()
    convert = MixedPrecisionPass(level="O2")
    assert convert(model).modified
    assert not convert(model).modified  # already converted by these options: nothing to do
    assert convert.report is not None and convert.report.already_converted
    assert not MixedPrecisionPass(level="O0")(_bert()).modified


def test_options_object_or_keywords() -> None:
    options = amp_convert.ConvertOptions(level="O1", dtype="bf16")
    model = _bert()
    MixedPrecisionPass(options)(model)
    types = {out.dtype for node in model.graph for out in node.outputs}
    assert ir.DataType.BFLOAT16 in types and ir.DataType.FLOAT16 not in types
    assert MixedPrecisionPass(options, level="O2").options.level == "O2"  # keywords over it
    assert MixedPrecisionPass(options, level="O2").options.dtype == "bf16"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [({"levl": "O2"}, "unknown option(s) levl"), ({"level": "O9"}, "O9")],  # type: ignore[list-item]
)
def test_option_errors_are_one_line_at_construction(kwargs: dict, needle: str) -> None:
    with pytest.raises(OptionError) as info:
        MixedPrecisionPass(**kwargs)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_numerics_close_to_the_original() -> None:
    ort = pytest.importorskip("onnxruntime")
    proto = bert_encoder(layers=1, hidden=32, heads=2, vocab=50, max_positions=16)
    model = ir.serde.deserialize_model(proto)
    MixedPrecisionPass(level="O2")(model)
    feeds = {
        "input_ids": np.arange(8, dtype=np.int64).reshape(1, 8) % 50,
        "attention_mask": np.ones((1, 8), np.int64),
    }
    names = {i.name for i in proto.graph.input}
    feeds = {k: v for k, v in feeds.items() if k in names}
    ref = ort.InferenceSession(proto.SerializeToString()).run(None, feeds)[0]
    got = ort.InferenceSession(ir.serde.serialize_model(model).SerializeToString()).run(None, feeds)
    assert np.allclose(np.asarray(got[0], np.float32), ref, atol=2e-2)


def test_a_misspelt_op_is_an_option_error_in_the_pass_too() -> None:
    """The op-name check lives in the pipeline, so the pass refuses what convert refuses."""
    with pytest.raises(OptionError, match="Sofmax"):
        MixedPrecisionPass(level="O2", fp32_ops=["Sofmax"])(_bert())


def test_a_bad_model_is_refused_before_the_pass_changes_it() -> None:
    """Cast(to=999): a bare ValueError was raised after the model had been changed in place."""
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("Relu", ["x"], ["r"], name="relu"),
            onnx.helper.make_node("MatMul", ["r", "w"], ["m"], name="mm"),
            onnx.helper.make_node("Cast", ["m"], ["y"], name="cast", to=999),
        ],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
        [onnx.numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")],
    )
    model = ir.serde.deserialize_model(
        onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    )
    before = ir.serde.serialize_model(model).SerializeToString()
    with pytest.raises(amp_convert.InputError, match="to=999") as info:
        MixedPrecisionPass(level="O3")(model)
    assert "\n" not in str(info.value)
    assert ir.serde.serialize_model(model).SerializeToString() == before
