"""Trained weights judged by what rounding does to their readers, not by count.

Trained PaddleOCR models paid casts for biases of ~1e-5 ("100% of its nonzero values are below
its smallest normal") and for conv kernels with a small tail of flushing taps ("would flush to
zero: 2.9% of its nonzero values"), with no accuracy gained. Overflow stays a hard rule.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert.core import weight_range
from amp_convert.core.dtypes import low_type_of
from models.trained_weights import conv_tiny_tail, tiny_bias_linear
from tests.helpers import FLOAT, run

FP16 = low_type_of("fp16").onnx
LIMITS = low_type_of(FP16)


def _stored(model: onnx.ModelProto) -> dict[str, int]:
    return {t.name: t.data_type for t in model.graph.initializer}


@pytest.mark.parametrize("build", [tiny_bias_linear, conv_tiny_tail])
@pytest.mark.parametrize("level", ["O2", "O3"])
def test_trained_weights_that_cannot_matter_add_no_casts(build, level: str) -> None:
    original = build()
    converted, report = amp_convert.convert(original, return_report=True, level=level)
    onnx.checker.check_model(converted, full_check=True)
    assert report.tensors == []  # nothing kept FP32 for its range
    floats = {t.name for t in original.graph.initializer if t.data_type == FLOAT}
    assert {_stored(converted)[name] for name in floats} == {TensorProto.FLOAT16}
    assert report.casts_inserted == 2  # the model's input and output, nothing else
    assert report.nodes_fp32 == 0
    rng = np.random.default_rng(0)
    x = rng.standard_normal(
        [d.dim_value or 2 for d in original.graph.input[0].type.tensor_type.shape.dim]
    ).astype(np.float32)
    ref, got = run(original, {"x": x})[0], run(converted, {"x": x})[0]
    cosine = float(np.dot(ref.ravel(), got.ravel()) / np.linalg.norm(ref) / np.linalg.norm(got))
    assert cosine >= 0.9999


def test_an_addend_is_judged_against_what_it_is_added_to() -> None:
    """A bias of ~1e-5 errs by <= 2**-25 in FP16, no more than the low sum's own rounding."""
    bias = np.random.default_rng(3).standard_normal(64).astype(np.float32) * 1e-5
    stats = weight_range.scan(bias, LIMITS)
    assert stats.subnormal == stats.nonzero  # every value subnormal: the old rule kept it
    assert weight_range.judge(stats, LIMITS, bias.size, False, addend=True).action == "fits"
    as_factor = weight_range.judge(stats, LIMITS, bias.size, False)
    assert as_factor.action == "keep" and "loses precision in FP16" in as_factor.detail


def _graph_with(op: str, weight: np.ndarray, **attrs) -> tuple[onnx.ModelProto, str]:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])
    inputs = ["x", "w"] if op != "Gemm" else ["x", "k", "w"]
    inits = [numpy_helper.from_array(weight, "w")]
    if op == "Gemm":
        inits.append(numpy_helper.from_array(np.eye(64, dtype=np.float32), "k"))
    nodes = [
        helper.make_node(op, inputs, ["z"], name="op", **attrs),
        helper.make_node("Relu", ["z"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "w"


@pytest.mark.parametrize(
    ("op", "attrs", "addend"),
    [
        ("Add", {}, True),
        ("Sub", {}, True),
        ("Mul", {}, False),  # a factor: judged relative to itself
        ("Div", {}, False),
        ("Gemm", {}, True),  # C is added unscaled
        ("Gemm", {"beta": 1e4}, False),  # beta scales C's error 1e4 times
    ],
)
def test_which_readers_are_addends(op: str, attrs: dict, addend: bool) -> None:
    bias = np.full(64, 1e-6, np.float32)
    model, name = _graph_with(op, bias, **attrs)
    converted, report = amp_convert.convert(model, return_report=True, level="O3")
    kept = _stored(converted)[name] == FLOAT
    assert kept is not addend, report.decision("op").reason
    if kept:
        assert any(t.name == name and "loses precision" in t.detail for t in report.tensors)


def test_an_addend_to_a_constant_is_judged_as_a_tensor() -> None:
    """Constant + constant: nothing computed to compare with, so relative to the tensor."""
    low = low_type_of("fp16").onnx
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], name="add")],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [
            numpy_helper.from_array(np.full(4, 1e-6, np.float32), "a"),
            numpy_helper.from_array(np.ones(4, np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m = ir.from_proto(model)
    a = m.graph.initializers["a"]
    verdict = weight_range.check_weight(np.full(4, 1e-6, np.float32), low, a.uses())
    assert verdict.action == "keep"


def test_an_overflowing_addend_still_keeps_fp32() -> None:
    """Overflow is a hard rule whatever the reader."""
    model, name = _graph_with("Add", np.full(64, 1e5, np.float32))
    converted, report = amp_convert.convert(model, return_report=True, level="O3")
    assert _stored(converted)[name] == FLOAT
    assert "exceeds FP16" in report.decision("op").reason


def test_a_conv_tail_is_judged_by_its_share_of_the_norm() -> None:
    """3% of taps flushing in a kernel of std 0.05: ~1e-7 of its norm, far under 2**-11."""
    rng = np.random.default_rng(4)
    w = (rng.standard_normal(4096) * 0.05).astype(np.float32)
    w[:123] = 1e-8
    stats = weight_range.scan(w, LIMITS)
    assert stats.flushed == 123 and stats.range_loss < 1e-6
    assert weight_range.judge(stats, LIMITS, w.size, False).action == "fits"
    w[123:] = 2e-5  # the rest subnormal too: a fifth of each value's bits gone
    assert weight_range.judge(weight_range.scan(w, LIMITS), LIMITS, w.size, False).action == "keep"
