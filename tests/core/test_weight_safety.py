"""No weight changes without a word in the report.

Weights whose nonzeros flush to zero or drown in subnormals keep their readers FP32; BF16 gets
the same range checks as FP16; a huge scalar is saturated only as a mask fill, never as a
divisor or a multiplier, and the report says exactly what was saturated.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert.core import weight_range
from amp_convert.core.dtypes import low_type_of
from tests.helpers import FLOAT, node_by_name, run

FLT_MAX = float(np.finfo(np.float32).max)


def convert(model: onnx.ModelProto, **kw):
    out, report = amp_convert.convert(model, return_report=True, **kw)
    onnx.checker.check_model(out, full_check=True)
    return out, report


def initializer(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in model.graph.initializer if t.name == name)


def matmul(weight: np.ndarray, width: int = 64) -> onnx.ModelProto:
    """x[1, width] @ w -> Relu -> y (the Relu gives the placement a low neighbour)."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Relu", ["m"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, weight.shape[1]])],
        [numpy_helper.from_array(weight.astype(np.float32), "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def scalar_op(op: str, value: float, *, mask: bool = False) -> onnx.ModelProto:
    """y = op(x, c) with a scalar constant c; with `mask`: y = Where(m, x, c) for a bool m."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])]
    if mask:
        inputs.append(helper.make_tensor_value_info("m", TensorProto.BOOL, [2, 8]))
        node = helper.make_node("Where", ["m", "x", "c"], ["z"], name="op")
    else:
        node = helper.make_node(op, ["x", "c"], ["z"], name="op")
    graph = helper.make_graph(
        [
            node,
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Add", ["z", "r"], ["y"], name="add"),
        ],
        "g",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [numpy_helper.from_array(np.array(value, np.float32), "c")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# ------------------------------------------------------------------ pure functions


@pytest.mark.parametrize(
    ("dtype", "value", "action"),
    [
        ("fp16", 65504.0, "fits"),
        ("fp16", 65505.0, "keep"),
        ("fp16", 1e-8, "keep"),  # flushes to zero
        ("fp16", 2.0**-25, "keep"),  # exactly half the smallest subnormal: rounds to 0
        ("fp16", 1e-6, "keep"),  # subnormal: a few significant bits
        ("fp16", 1e-4, "fits"),
        ("bf16", 3.3e38, "fits"),
        ("bf16", FLT_MAX, "keep"),
        ("bf16", 3e-41, "keep"),  # flushes
        ("bf16", 1e-39, "keep"),  # subnormal
        ("bf16", 1e-30, "fits"),
    ],
)
def test_judge_boundaries(dtype: str, value: float, action: str) -> None:
    low = low_type_of(dtype).onnx
    array = np.full((4, 4), value, np.float32)
    verdict = weight_range.check_weight(array, low, [])
    assert verdict.action == action, verdict


def test_a_few_tiny_values_do_not_pin_a_weight() -> None:
    """Judged by effect: flushing 2% of values of 1e-9 in a weight of std 0.02 takes
    ~1e-8 of its norm, 50,000x less than ordinary FP16 rounding; the old by-count rule (more
    than 1% flushed) kept it FP32. A weight whose tiny values carry its norm still keeps FP32."""
    low = low_type_of("fp16").onnx
    w = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 0.02
    w[:50] = 1e-9  # 0.5% flush
    assert weight_range.check_weight(w, low, []).action == "fits"
    w[:200] = 1e-9  # 2% flush: still nothing its reader could see
    assert weight_range.check_weight(w, low, []).action == "fits"
    w[200:] *= 1e-6  # the rest near 2e-8: most of them flush, the norm goes with them
    verdict = weight_range.check_weight(w, low, [])
    assert verdict.action == "keep" and "flush to zero in FP16" in verdict.detail


# ------------------------------------------------------------------ flush to zero


@pytest.mark.parametrize("level", ["O2", "O3"])
def test_weights_that_flush_to_zero_keep_their_readers_fp32(level: str) -> None:
    """FP16 weights of 1e-8 were stored as zeros: the output was 0 where FP32 gives 6.4e-7."""
    rng = np.random.default_rng(0)
    original = matmul(np.abs(rng.standard_normal((64, 64))) * 1e-8)
    converted, report = convert(original, level=level)
    assert initializer(converted, "w").data_type == FLOAT
    assert report.decision("mm").precision == "fp32"
    assert "flush to zero in FP16" in report.decision("mm").reason
    note = next(t for t in report.tensors if t.name == "w")
    assert note.action == "kept FP32" and "flush to zero" in note.detail
    assert "w" in report.summary()
    x = np.ones((1, 64), np.float32)
    ref, got = run(original, {"x": x})[0], run(converted, {"x": x})[0]
    assert ref.max() > 1e-7 and np.allclose(got, ref, rtol=1e-3, atol=0)


def test_weights_mostly_subnormal_keep_their_readers_fp32() -> None:
    rng = np.random.default_rng(1)
    original = matmul(rng.uniform(1e-6, 5e-5, (64, 64)))  # none flush, all subnormal
    converted, report = convert(original, level="O3")
    assert initializer(converted, "w").data_type == FLOAT
    assert "loses precision in FP16" in report.decision("mm").reason


def test_ordinary_weights_still_go_low() -> None:
    rng = np.random.default_rng(2)
    converted, report = convert(matmul(rng.standard_normal((64, 64)) * 0.05), level="O2")
    assert initializer(converted, "w").data_type == TensorProto.FLOAT16
    assert report.tensors == []


# ------------------------------------------------------------------ BF16 range


def test_bf16_weights_beyond_its_range_keep_their_readers_fp32() -> None:
    """With --dtype bf16 the range check was skipped: 3.4e38 weights became +-inf."""
    w = np.full((64, 64), 3.4e38, np.float32)
    w[::2] *= -1
    converted, report = convert(matmul(w), level="O3", dtype="bf16")
    assert initializer(converted, "w").data_type == FLOAT
    assert "exceeds BF16" in report.decision("mm").reason
    assert any(t.name == "w" and t.action == "kept FP32" for t in report.tensors)


def test_bf16_weights_that_flush_keep_their_readers_fp32() -> None:
    converted, report = convert(matmul(np.full((64, 64), 3e-41, np.float32)), dtype="bf16")
    assert initializer(converted, "w").data_type == FLOAT
    assert "flush to zero in BF16" in report.decision("mm").reason


def test_bf16_mask_fill_is_saturated_and_reported() -> None:
    """-FLT_MAX as a Where fill became -inf in BF16; now -BF16_MAX, with a note."""
    converted, report = convert(scalar_op("Where", -FLT_MAX, mask=True), level="O3", dtype="bf16")
    stored = initializer(converted, "c")
    assert stored.data_type == TensorProto.BFLOAT16
    value = numpy_helper.to_array(stored).view(ml_dtypes.bfloat16).astype(np.float32)
    assert np.isfinite(value).all() and float(value.reshape(-1)[0]) < -3e38
    (note,) = [t for t in report.tensors if t.name == "c"]
    assert note.action == "saturated" and "mask fill" in note.detail


# ------------------------------------------------------------------ sentinel rule


@pytest.mark.parametrize("level", ["O2", "O3"])
def test_a_huge_divisor_is_data_not_a_sentinel(level: str) -> None:
    """Div(x, 1e9) at O3 was saturated to 65504: the output 15,000x too large."""
    original = scalar_op("Div", 1e9)
    converted, report = convert(original, level=level)
    assert initializer(converted, "c").data_type == FLOAT
    assert float(numpy_helper.to_array(initializer(converted, "c"))) == 1e9
    assert report.decision("op").precision == "fp32"
    assert not [t for t in report.tensors if t.action == "saturated"]  # nothing was saturated
    x = np.full((2, 8), 3e4, np.float32)
    ref, got = run(original, {"x": x})[0], run(converted, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-3)


def test_a_huge_multiplier_is_data_not_a_sentinel() -> None:
    converted, report = convert(scalar_op("Mul", -FLT_MAX), level="O3")
    assert initializer(converted, "c").data_type == FLOAT
    assert not [t for t in report.tensors if t.action == "saturated"]
    assert "exceeds FP16" in report.decision("op").reason


def test_fp16_mask_fill_is_saturated_once_and_said_so() -> None:
    original = scalar_op("Where", -FLT_MAX, mask=True)
    converted, report = convert(original, level="O3")
    stored = numpy_helper.to_array(initializer(converted, "c"))
    assert stored.dtype == np.float16 and float(stored) == -65504.0
    notes = [t for t in report.tensors if t.action == "saturated"]
    assert [n.name for n in notes] == ["c"] and "+-65504" in notes[0].detail
    assert node_by_name(converted, "op").op_type == "Where"


def test_nothing_is_said_when_the_fill_stays_fp32() -> None:
    """At O2 the report said "saturated" although the value stayed FP32."""
    converted, report = convert(
        scalar_op("Where", -FLT_MAX, mask=True), level="O2", fp32_ops=["Where"]
    )
    assert initializer(converted, "c").data_type == FLOAT
    assert float(numpy_helper.to_array(initializer(converted, "c"))) == -FLT_MAX
    assert not [t for t in report.tensors if t.action == "saturated"]
    assert "saturat" not in report.summary()


def hf_mask_bias(fill: float, *, mask_dtype: int = TensorProto.INT64, one: float = 1.0):
    """Hugging Face's extended attention mask: (1 - Cast(mask)) * fill, added to the scores."""
    graph = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["attention_mask", "axes"], ["m1"], name="unsq"),
            helper.make_node("Cast", ["m1"], ["mf"], name="cast", to=TensorProto.FLOAT),
            helper.make_node("Sub", ["one", "mf"], ["inv"], name="sub"),
            helper.make_node("Mul", ["inv", "c"], ["bias"], name="op"),
            helper.make_node("MatMul", ["x", "xt"], ["s"], name="scores"),
            helper.make_node("Add", ["s", "bias"], ["sb"], name="add"),
            helper.make_node("Softmax", ["sb"], ["y"], name="softmax", axis=-1),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8]),
            helper.make_tensor_value_info("xt", TensorProto.FLOAT, [1, 8, 4]),
            helper.make_tensor_value_info("attention_mask", mask_dtype, [1, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4])],
        [
            numpy_helper.from_array(np.array([1], np.int64), "axes"),
            numpy_helper.from_array(np.array(one, np.float32), "one"),
            numpy_helper.from_array(np.array(fill, np.float32), "c"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_mask_indicator_times_the_fill_is_a_mask_fill() -> None:
    """(1 - mask) * finfo.min is 0 or "minus infinity": saturated, said so, no extra Cast."""
    original = hf_mask_bias(-FLT_MAX)
    converted, report = convert(original, level="O2")
    stored = numpy_helper.to_array(initializer(converted, "c"))
    assert stored.dtype == np.float16 and float(stored) == -65504.0
    assert report.decision("op").precision == "low"
    (note,) = [t for t in report.tensors if t.action == "saturated"]
    assert note.name == "c" and "mask fill" in note.detail
    assert sum(n.op_type == "Cast" for n in converted.graph.node) == 3 + 1  # I/O + the mask's
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((1, 4, 8), dtype=np.float32),
        "xt": rng.standard_normal((1, 8, 4), dtype=np.float32),
        "attention_mask": np.array([[1, 1, 1, 0]], np.int64),
    }
    ref, got = run(original, feeds)[0], run(converted, feeds)[0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, atol=2e-3)


@pytest.mark.parametrize("one", [2.0, 0.5])
def test_a_multiplier_that_is_not_a_0_1_indicator_is_data(one: float) -> None:
    """(k - mask) * fill with k != 1 is not 0-or-fill: the huge value stays data (FP32)."""
    converted, report = convert(hf_mask_bias(-FLT_MAX, one=one), level="O2")
    assert initializer(converted, "c").data_type == FLOAT
    assert not [t for t in report.tensors if t.action == "saturated"]
