"""Float attributes are weights (range-checked, saturated only as mask fills).

optimum's BART/T5/Marian decoders gave all-NaN logits: transformers' causal mask is
ConstantOfShape(value=float32 min) times a 0/1 triangle, and the fill was retyped to FP16 -inf
without a check (-inf * 0 = NaN). Now the attribute is judged like an initializer.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from models._graph import GraphBuilder
from models.seq2seq import FLT_MIN, causal_mask, seq2seq_decoder
from tests.helpers import FLOAT, all_nodes, run

ort = pytest.importorskip("onnxruntime")

from amp_convert.validation import validate  # noqa: E402

DIMS = {"batch_size": 2, "decoder_sequence_length": 6, "encoder_sequence_length": 5}


def _fills(model: onnx.ModelProto) -> list[np.ndarray]:
    """The value attribute of every ConstantOfShape whose fill is float32 min in the original."""
    out = []
    for node in all_nodes(model.graph):
        if node.op_type == "ConstantOfShape" and node.name.endswith("causal_mask/ConstantOfShape"):
            out.append(numpy_helper.to_array(next(a.t for a in node.attribute)))
    return out


@pytest.mark.integration
@pytest.mark.parametrize("merged", [False, True], ids=["main_graph", "in_if_branches"])
@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_causal_mask_fill_is_saturated_not_minus_inf(merged: bool, level: str) -> None:
    original = seq2seq_decoder(merged=merged)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's overflow warning was all it said
        converted, report = amp_convert.convert(original, return_report=True, level=level)
    onnx.checker.check_model(converted, full_check=True)
    fills = _fills(converted)
    assert len(fills) == (2 if merged else 1)
    for fill in fills:
        if fill.dtype == np.float16:
            assert float(fill.reshape(-1)[0]) == -65504.0
        else:  # kept FP32 at O1 (ConstantOfShape is not on the allow list): untouched
            assert fill.dtype == np.float32 and float(fill.reshape(-1)[0]) == FLT_MIN
    saturated = [t for t in report.tensors if t.action == "saturated"]
    low_fills = sum(f.dtype == np.float16 for f in fills)
    assert len(saturated) == low_fills
    assert all("mask fill" in t.detail and "+-65504" in t.detail for t in saturated)
    if level != "O1":
        assert low_fills == len(fills)
    result = validate(original, converted, provider="emulate", dims=DIMS, runs=0)
    logits = result.output("logits")
    assert logits.nonfinite == 0 and logits.candidate_inf == 0
    assert logits.cosine is not None and logits.cosine >= 0.999


def _fill_times_x(value: float, opset: int = 17) -> onnx.ModelProto:
    """y = Relu(ConstantOfShape(Shape(x), value) * x + x): the fill is data, not a mask."""
    fill = numpy_helper.from_array(np.array([value], np.float32), "value")
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["s"], name="shape"),
            helper.make_node("ConstantOfShape", ["s"], ["c"], name="cos", value=fill),
            helper.make_node("Mul", ["c", "x"], ["m"], name="mul"),
            helper.make_node("Add", ["m", "x"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("value", [1e6, 1e-8])
def test_a_fill_the_low_type_cannot_hold_keeps_its_node_fp32(value: float) -> None:
    """ConstantOfShape(1e6) * x became inf * x; ConstantOfShape(1e-8) * x became 0."""
    original = _fill_times_x(value)
    converted, report = amp_convert.convert(original, return_report=True, level="O3")
    decision = report.decision("cos")
    assert decision.precision == "fp32" and "attribute 'value'" in decision.reason
    (note,) = [t for t in report.tensors if t.name == "c"]
    assert note.action == "kept FP32" and "ConstantOfShape 'cos'" in note.detail
    (cos,) = [n for n in converted.graph.node if n.op_type == "ConstantOfShape"]
    assert cos.attribute[0].t.data_type == FLOAT
    x = np.linspace(-1e-3, 1e-3, 16, dtype=np.float32).reshape(2, 8)
    ref, got = run(original, {"x": x})[0], run(converted, {"x": x})[0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=1e-9)


def test_an_ordinary_fill_still_goes_low() -> None:
    converted, report = amp_convert.convert(_fill_times_x(0.5), return_report=True, level="O3")
    (cos,) = [n for n in converted.graph.node if n.op_type == "ConstantOfShape"]
    assert cos.attribute[0].t.data_type == TensorProto.FLOAT16
    assert report.decision("cos").precision == "low" and report.tensors == []


def _pad_then_pool(value: float) -> onnx.ModelProto:
    """Pad-2 (opset 10) with a float `value` attribute, then MaxPool: the -inf pad idiom."""
    graph = helper.make_graph(
        [
            helper.make_node(
                "Pad", ["x"], ["p"], name="pad", pads=[0, 0, 1, 1, 0, 0, 1, 1], value=value
            ),
            helper.make_node("MaxPool", ["p"], ["y"], name="pool", kernel_shape=[3, 3]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])


def test_a_pad_value_beyond_fp16_keeps_the_pad_fp32() -> None:
    """The kernel casts Pad's float attribute to the data type: -FLT_MAX would pad with -inf."""
    _converted, report = amp_convert.convert(
        _pad_then_pool(FLT_MIN), return_report=True, level="O3"
    )
    assert report.decision("pad").precision == "fp32"
    assert "exceeds FP16" in report.decision("pad").reason
    assert any(t.action == "kept FP32" and "Pad 'pad'" in t.detail for t in report.tensors)


def test_a_small_pad_value_rounds_like_the_output() -> None:
    """Pad only copies its value into its low output: 1e-6 rounds exactly as the output would."""
    _converted, report = amp_convert.convert(_pad_then_pool(1e-6), return_report=True, level="O3")
    assert report.decision("pad").precision == "low" and report.tensors == []


def _clip_attributes(hi: float) -> onnx.ModelProto:
    """Clip-6 with float attribute bounds (opset 10): ORT CUDA runs it low as Min/Max."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Clip", ["r"], ["c"], name="clip", min=0.0, max=hi),
            helper.make_node("Relu", ["c"], ["y"], name="relu_1"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])


def test_a_clip_bound_beyond_fp16_is_stored_saturated_with_a_note() -> None:
    original = _clip_attributes(float(np.finfo(np.float32).max))
    converted, report = amp_convert.convert(original, return_report=True, level="O3")
    ops = [n.op_type for n in converted.graph.node]
    assert "Min" in ops and "Clip" not in ops
    (note,) = [t for t in report.tensors if t.action == "saturated"]
    assert note.name == "clip/max" and "65504" in note.detail
    x = np.linspace(-5, 5, 16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_allclose(run(converted, {"x": x})[0], run(original, {"x": x})[0], rtol=1e-3)
    quiet = amp_convert.convert(_clip_attributes(6.0), return_report=True, level="O3")[1]
    assert quiet.tensors == []


@pytest.mark.integration
def test_an_fp32_fill_read_low_gets_a_saturated_low_copy_not_a_cast() -> None:
    """The user keeps the fill's ConstantOfShape FP32: a runtime Cast of float32 min to FP16 is
    -inf again, so its low readers read a saturated low ConstantOfShape instead."""
    original = seq2seq_decoder(merged=True)
    converted, report = amp_convert.convert(
        original, return_report=True, level="O2", exclude_nodes=["causal_mask/ConstantOfShape$"]
    )
    onnx.checker.check_model(converted, full_check=True)
    fills = [
        n
        for n in all_nodes(converted.graph)
        if n.op_type == "ConstantOfShape"
        and "causal_mask/ConstantOfShape" in n.name
        and not n.name.endswith("_1")
    ]
    assert [n.name.rsplit("/", 1)[-1] for n in fills] == ["ConstantOfShape_fp16"] * 2
    assert all(float(numpy_helper.to_array(n.attribute[0].t)[0]) == -65504.0 for n in fills)
    casts = [n for n in all_nodes(converted.graph) if n.op_type == "Cast"]
    assert not any("ConstantOfShape" in n.input[0] for n in casts)
    assert len([t for t in report.tensors if t.action == "saturated"]) == 2
    result = validate(original, converted, provider="emulate", dims=DIMS, runs=0)
    logits = result.output("logits")
    assert logits.nonfinite == 0 and logits.cosine is not None and logits.cosine >= 0.999


def _mask_in_loop_body() -> onnx.ModelProto:
    """Two Loop iterations of s = Softmax(s + causal_mask(ids)) * 4: the pattern in a Loop body."""
    b = GraphBuilder("mask_loop", 3)
    b.input("ids", TensorProto.INT64, [1, "seq"], value_range=(0, 8))
    b.input("scores", TensorProto.FLOAT, [1, "seq", "seq"])
    b.output("y", TensorProto.FLOAT, [1, "seq", "seq"])
    body = b.subgraph("body")
    body.input("i", TensorProto.INT64, [])
    body.input("cond", TensorProto.BOOL, [])
    body.input("s", TensorProto.FLOAT, None)
    mask = causal_mask(body, "ids", "body/causal_mask")
    a = body.op("Add", ["s", mask], "body/Add")
    p = body.op("Softmax", [a], "body/Softmax", axis=-1)
    body.op("Mul", [p, body.f32("body/four", 4.0)], "body/Mul", outputs=["s_out"])
    body.op("Identity", ["cond"], "body/cond", outputs=["cond_out"])
    body.outputs += [
        helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
        helper.make_tensor_value_info("s_out", TensorProto.FLOAT, None),
    ]
    b.op(
        "Loop",
        [b.i64("trips", 2), b.const("go", True, np.bool_), "scores"],
        "loop",
        outputs=["y"],
        body=body.graph(),
    )
    return b.model()


def test_the_mask_pattern_in_a_loop_body() -> None:
    original = _mask_in_loop_body()
    converted, report = amp_convert.convert(original, return_report=True, level="O3")
    onnx.checker.check_model(converted, full_check=True)
    (fill,) = [
        n for n in all_nodes(converted.graph) if n.name == "body/causal_mask/ConstantOfShape"
    ]
    assert float(numpy_helper.to_array(fill.attribute[0].t)[0]) == -65504.0
    assert [t.action for t in report.tensors] == ["saturated"]
    scores = np.random.default_rng(0).standard_normal((1, 5, 5)).astype(np.float32)
    feeds = {"ids": np.zeros((1, 5), np.int64), "scores": scores}
    ref, got = run(original, feeds)[0], run(converted, feeds)[0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, atol=5e-3)


@pytest.mark.integration
def test_causal_mask_fill_in_bf16_is_the_bf16_max() -> None:
    """float32 min rounds to -inf in BF16 too (its max is 3.39e38): saturated, said so."""
    original = seq2seq_decoder(opset=20)  # ConstantOfShape admits bfloat16 from opset 20
    converted, report = amp_convert.convert(original, return_report=True, level="O2", dtype="bf16")
    (node,) = [n for n in all_nodes(converted.graph) if n.name.endswith("mask/ConstantOfShape")]
    assert node.attribute[0].t.data_type == TensorProto.BFLOAT16
    value = numpy_helper.to_array(node.attribute[0].t).astype(np.float32).reshape(-1)[0]
    assert np.isfinite(value) and value < -3.3e38
    (note,) = [t for t in report.tensors if t.action == "saturated"]
    assert "mask fill" in note.detail
    result = validate(original, converted, provider="emulate", dims=DIMS, runs=0)
    logits = result.output("logits")
    assert logits.nonfinite == 0 and logits.cosine is not None and logits.cosine >= 0.99
