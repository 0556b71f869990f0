"""Bounds instead of fear: deny rules ask what a value can be (op_lists/bounds.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

import amp_convert
from amp_convert.op_lists.bounds import Bounds, load_rules
from models.bounded import linear_attention
from tests.graphs import model, tensor, weight
from tests.helpers import casts, check_onnx, run


def test_softmax_weighted_sum_goes_low_with_the_bound_in_the_report() -> None:
    """MobileViTv2's ReduceSum(key * Softmax(query)) is a convex combination of the keys: low,
    with the bound it used; the block adds no cast but the interface's."""
    original = linear_attention()
    converted, report = amp_convert.convert(original, return_report=True)
    check_onnx(converted)
    assert casts(converted) - casts(original) <= 2, report.summary()
    sums = [n for n in report.nodes if n.op_type == "ReduceSum"]
    assert sums and all(n.precision == "low" for n in sums)
    assert all(n.reasons[0].kind.value == "bounded" for n in sums)
    assert all("Softmax-weighted sum: |sum| <= max|v|" in n.reason for n in sums)
    x = np.random.default_rng(0).standard_normal((1, 16, 4, 64)).astype(np.float32)
    ref, got = run(original, {"x": x})[0], run(converted, {"x": x})[0]
    np.testing.assert_allclose(got, ref, atol=3e-2, rtol=3e-2)


def _sum_model(weights: str) -> onnx.ModelProto:
    """x (1, 8, 4096) -> ReduceSum over the last axis of x * `weights`(x)."""
    nodes = [
        helper.make_node(weights, ["x"], ["w"], name="weights", axis=-1)
        if weights == "Softmax"
        else helper.make_node(weights, ["x"], ["w"], name="weights"),
        helper.make_node("Mul", ["x", "w"], ["xw"], name="mul"),
        helper.make_node("ReduceSum", ["xw", "axes"], ["y"], name="sum", keepdims=1),
    ]
    axes = onnx.numpy_helper.from_array(np.array([-1], np.int64), "axes")
    return model(nodes, [tensor("x", [1, 8, 4096])], [tensor("y", [1, 8, 1])], [axes], opset=18)


def test_an_unbounded_sum_keeps_the_deny_rule() -> None:
    """x * Sigmoid(x) summed over 4096 values can reach 4096 * 65504: the rule stands."""
    _, report = amp_convert.convert(_sum_model("Sigmoid"), return_report=True)
    plain = report.decision("sum")
    assert (plain.op_class, plain.precision) == ("deny", "fp32") and "deny list" in plain.reason
    _, weighted = amp_convert.convert(_sum_model("Softmax"), return_report=True)
    decided = weighted.decision("sum")
    assert decided.op_class == "infer" and decided.reasons[0].kind.value == "bounded"


def _bounds_of(nodes, inits, out: str, opset: int = 18) -> float:
    ir_model = model(nodes, [tensor("x", [2, 64])], [tensor(out, [2, 64])], inits, opset=opset)
    values = {v.name: v for n in ir_model.graph for v in n.outputs}
    return Bounds(opset, 65504.0).of(values[out]).magnitude


def test_interval_rules() -> None:
    mk = helper.make_node
    axes = onnx.numpy_helper.from_array(np.array([-1], np.int64), "axes")
    # exp(x - max(x)) <= 1 whatever x is
    shifted = [
        mk("ReduceMax", ["x"], ["m"], axes=[-1], keepdims=1),
        mk("Sub", ["x", "m"], ["d"]),
        mk("Exp", ["d"], ["e"]),
    ]
    assert _bounds_of(shifted, [], "e") == 1.0
    # Clip to [-6, 6] * 2 + 1
    clip = [
        mk("Clip", ["x", "lo", "hi"], ["c"]),
        mk("Mul", ["c", "two"], ["m2"]),
        mk("Add", ["m2", "one"], ["y"]),
    ]
    consts = [
        weight("lo", np.array(-6.0, np.float32)),
        weight("hi", np.array(6.0, np.float32)),
        weight("two", np.array(2.0, np.float32)),
        weight("one", np.array(1.0, np.float32)),
    ]
    assert _bounds_of(clip, consts, "y") == 13.0
    # Tanh summed over 64 values: 64
    tanh_sum = [mk("Tanh", ["x"], ["t"]), mk("ReduceSum", ["t", "axes"], ["s"], keepdims=1)]
    assert _bounds_of(tanh_sum, [axes], "s") == 64.0
    # an unknown value: a low-precision value's range
    assert _bounds_of([mk("Relu", ["x"], ["r"])], [], "r") == 65504.0
    assert {"Softmax", "Sigmoid", "Tanh", "Clip", "Cast", "LayerNormalization"} <= set(load_rules())
