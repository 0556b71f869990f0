"""assign alone: from hand-made Classes to a PrecisionPlan (precisions, reasons, range limits)."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from amp_convert.core.precision import NodeClass, Precision
from amp_convert.core.reasons import Reason, ReasonKind, render
from amp_convert.cost.traffic import ShapeBook
from amp_convert.options.convert import make_options
from amp_convert.passes.assign import assign
from amp_convert.placement.plan import ClassInfo, Placement, PrecisionPlan
from tests.graphs import model, node, proto_bytes, tensor, value, weight

K = ReasonKind
LOW, FP32, FREE = Precision.LOW, Precision.FP32, Precision.FREE
ALLOW, INFER, CLEAR, DENY = NodeClass.ALLOW, NodeClass.INFER, NodeClass.CLEAR, NodeClass.DENY


def _info(op_class: NodeClass, ins=(0,), outs=(0,), **kw) -> ClassInfo:
    reason = Reason(K.LIST, f"{op_class.value} list", "test")
    return ClassInfo(op_class, (reason,), frozenset(ins), frozenset(outs), **kw)


def _assign(m: ir.Model, classes: dict[str, ClassInfo], **options) -> PrecisionPlan:
    by_node = types.MappingProxyType({node(m, name): info for name, info in classes.items()})
    return assign(m, by_node, ShapeBook(m, {}), make_options(**options))


def _chain(w: np.ndarray | None = None) -> ir.Model:
    """x -> MatMul(w) -> Softmax -> Relu -> y, and x -> Relu ("side") -> z."""
    return model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Softmax", ["h"], ["p"], name="sm"),
            helper.make_node("Relu", ["p"], ["y"], name="relu"),
            helper.make_node("Relu", ["x"], ["z"], name="side"),
        ],
        [tensor("x", [2, 4])],
        [tensor("y", [2, 4]), tensor("z", [2, 4])],
        [weight("w", np.ones((4, 4)) if w is None else w)],
    )


CHAIN = {
    "mm": _info(ALLOW, ins=(0, 1)),
    "sm": _info(DENY),
    "relu": _info(INFER),
    "side": _info(INFER),
}


def _precisions(m: ir.Model, plan: PrecisionPlan) -> dict[str, Precision]:
    return {n.name: plan.nodes[n].precision for n in m.graph.all_nodes()}


def test_o2_deny_reaches_forward_and_placement_saves_casts() -> None:
    m = _chain()
    plan = _assign(m, CHAIN, level="O2")
    assert _precisions(m, plan) == {"mm": LOW, "sm": FP32, "relu": FP32, "side": FP32}
    relu = plan.nodes[node(m, "relu")]
    assert [r.kind for r in relu.reasons] == [K.LIST, K.DENY_REACH]
    assert render(relu.reasons) == "infer list: test; follows deny: reads 'p' from Softmax"
    side = plan.nodes[node(m, "side")]  # FP32 in, FP32 out: low would cost two casts
    assert [r.kind for r in side.reasons] == [K.LIST, K.PLACEMENT]
    assert side.reasons[-1].detail == "FP32 moves fewer bytes"


def test_o1_lowers_allow_only_and_o3_everything() -> None:
    m = _chain()
    assert _precisions(m, _assign(m, CHAIN, level="O1")) == {
        "mm": LOW,
        "sm": FP32,
        "relu": FP32,
        "side": FP32,
    }
    assert set(_precisions(m, _assign(m, CHAIN, level="O3")).values()) == {LOW}
    user_deny = dict(CHAIN, sm=_info(DENY, user=True))
    assert _precisions(m, _assign(m, user_deny, level="O3"))["sm"] == FP32


def test_o2_infer_between_low_neighbours_goes_low() -> None:
    m = model(
        [
            helper.make_node("MatMul", ["x", "w"], ["a"], name="mm1"),
            helper.make_node("Relu", ["a"], ["b"], name="relu"),
            helper.make_node("MatMul", ["b", "w"], ["y"], name="mm2"),
        ],
        [tensor("x", [2, 4])],
        [tensor("y", [2, 4])],
        [weight("w", np.ones((4, 4)))],
    )
    classes = {"mm1": _info(ALLOW, ins=(0, 1)), "relu": _info(INFER), "mm2": _info(ALLOW, (0, 1))}
    for level in ("O1", "O2"):
        plan = _assign(m, classes, level=level)
        assert set(_precisions(m, plan).values()) == {LOW}, level
    assert _assign(m, classes, level="O1").nodes[node(m, "relu")].reasons[-1] == Reason(
        K.PLACEMENT, "", "low precision moves fewer bytes"
    )


def test_weight_beyond_fp16_pins_its_reader_and_is_reported() -> None:
    m = _chain(np.full((4, 4), 1e5))
    plan = _assign(m, CHAIN, level="O2")
    mm = plan.nodes[node(m, "mm")]
    assert (mm.precision, mm.op_class) == (FP32, NodeClass.FIXED)
    assert [r.kind for r in mm.reasons] == [K.RANGE]
    assert mm.reasons[0].detail.startswith("input 'w' exceeds FP16")  # weight_range says why
    assert [(t.name, t.action) for t in plan.tensor_notes] == [("w", "kept FP32")]
    assert not plan.saturate
    bf16 = _assign(m, CHAIN, level="O2", dtype="bf16")  # 1e5 is well inside bfloat16's range
    assert bf16.nodes[node(m, "mm")].precision == LOW and not bf16.tensor_notes
    beyond = _chain(np.full((4, 4), 3.4e38))  # but not float32's max
    assert (
        _assign(beyond, CHAIN, level="O2", dtype="bf16").nodes[node(beyond, "mm")].precision == FP32
    )


def test_scalar_mask_fill_is_saturated_not_pinned() -> None:
    m = model(
        [helper.make_node("Where", ["cond", "x", "fill"], ["y"], name="where")],
        [tensor("cond", [2], onnx.TensorProto.BOOL), tensor("x", [2])],
        [tensor("y", [2])],
        [weight("fill", -3.4e38)],
    )
    plan = _assign(m, {"where": _info(ALLOW, ins=(1, 2))}, level="O2")
    assert plan.nodes[node(m, "where")].precision == LOW
    assert plan.saturate == {"fill"}
    assert plan.tensor_notes == ()  # rewrite reports it, where the low copy is stored


def test_huge_divisor_is_data_not_a_mask_fill() -> None:
    """A divisor of 1e9 was saturated to 65504 (15,000x off)."""
    m = model(
        [helper.make_node("Div", ["x", "d"], ["y"], name="div")],
        [tensor("x", [2])],
        [tensor("y", [2])],
        [weight("d", 1e9)],
    )
    plan = _assign(m, {"div": _info(ALLOW, ins=(0, 1))}, level="O2")
    assert plan.nodes[node(m, "div")].precision == FP32 and not plan.saturate


def test_low_between_low_next_to_fp32_keeps_fp32() -> None:
    """An FP32-accumulating Softmax between a low MatMul and the FP32 output keeps FP32 math."""
    m = model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Softmax", ["h"], ["y"], name="sm"),
        ],
        [tensor("x", [2, 4])],
        [tensor("y", [2, 4])],
        [weight("w", np.ones((4, 4)))],
    )
    classes = {"mm": _info(ALLOW, ins=(0, 1)), "sm": _info(INFER, low_between_low=True)}
    sm = _assign(m, classes, level="O2").nodes[node(m, "sm")]
    assert sm.precision == FP32
    assert sm.reasons[-1] == Reason(K.NEIGHBOUR, "", "FP32 next to an FP32 neighbour")
    io_low = _assign(m, classes, level="O2", keep_io_types=False)
    assert io_low.nodes[node(m, "sm")].precision == LOW  # low on both sides: low I/O


def test_the_plan_answers_rewrites_questions() -> None:
    m = _chain()
    plan = _assign(m, CHAIN, level="O2")
    assert plan.home(value(m, "h")) == LOW  # produced by the low MatMul
    assert plan.home(value(m, "w")) == FREE  # a weight: stored as its readers need
    assert plan.home(value(m, "x")) == FP32  # the interface keeps FP32
    assert plan.need(node(m, "sm"), 0) == FP32
    assert plan.needs(value(m, "x")) == {LOW, FP32}  # MatMul and the FP32 side Relu
    assert plan.is_low(node(m, "mm")) and not plan.is_low(node(m, "sm"))


def test_result_is_frozen_and_inputs_untouched() -> None:
    m = _chain()
    before = proto_bytes(m)
    classes = types.MappingProxyType({node(m, n): info for n, info in CHAIN.items()})
    snapshot = dict(classes)
    plan = assign(m, classes, ShapeBook(m, {}), make_options(level="O2"))
    assert proto_bytes(m) == before and dict(classes) == snapshot
    placement = plan.nodes[node(m, "mm")]
    assert isinstance(placement, Placement)
    with pytest.raises(dataclasses.FrozenInstanceError):
        placement.precision = FP32  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.nodes[node(m, "mm")] = placement  # type: ignore[index]
