"""rewrite alone: a hand-made PrecisionPlan applied (types, inserted casts, weights, counts)."""

from __future__ import annotations

import types

import numpy as np
import onnx_ir as ir
from onnx import helper

from amp_convert.core.precision import NodeClass, Precision, UniqueNames
from amp_convert.passes.rewrite import RewriteResult, rewrite
from amp_convert.placement.plan import ClassInfo, LoweredAs, Placement, PrecisionPlan
from tests.graphs import clip_opset11, model, node, proto_bytes, tensor, value, weight

LOW, FP32 = Precision.LOW, Precision.FP32
F16, F32 = ir.DataType.FLOAT16, ir.DataType.FLOAT


def _plan(m: ir.Model, low: dict[str, tuple], fp32=(), keep_io_types=True, **info) -> PrecisionPlan:
    """LOW nodes by name -> (low input slots, low output slots); `fp32` names stay FP32."""
    nodes: dict[ir.Node, Placement] = {}
    for n in m.graph.all_nodes():
        ins, outs = low.get(n.name, ((0,), (0,)))
        ci = ClassInfo(NodeClass.INFER, (), frozenset(ins), frozenset(outs), **info.get(n.name, {}))
        precision = LOW if n.name in low else FP32
        assert n.name in low or n.name in fp32, n.name
        nodes[n] = Placement(ci, precision, ())
    return PrecisionPlan(types.MappingProxyType(nodes), m.graph, F16, keep_io_types)


def _casts(m: ir.Model) -> list[tuple[str, str, ir.DataType]]:
    return [
        (n.inputs[0].name, n.outputs[0].name, ir.DataType(n.attributes["to"].value))
        for n in m.graph.all_nodes()
        if n.op_type == "Cast"
    ]


def _matmul_relu() -> ir.Model:
    return model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Relu", ["h"], ["y"], name="relu"),
        ],
        [tensor("x", [2, 4])],
        [tensor("y", [2, 4])],
        [weight("w", np.arange(16).reshape(4, 4))],
    )


def test_low_node_gets_a_cast_in_low_weights_and_a_cast_out() -> None:
    m = _matmul_relu()
    result = rewrite(m, _plan(m, {"mm": ((0, 1), (0,))}, fp32=("relu",)), UniqueNames.of_model(m))
    assert result == RewriteResult(
        values_lowered=2, casts_inserted=2, initializers_converted=1, initializers_kept=0
    )
    assert result.modified
    assert _casts(m) == [("x", "x_fp16", F16), ("h", "h_fp32", F32)]
    assert value(m, "w").dtype == F16 and value(m, "w").const_value.dtype == F16
    np.testing.assert_array_equal(value(m, "w").const_value.numpy(), np.arange(16).reshape(4, 4))
    assert value(m, "h").dtype == F16 and value(m, "y").dtype == F32
    assert [v.name for v in node(m, "relu").inputs] == ["h_fp32"]


def test_one_shared_cast_per_value_and_type() -> None:
    m = model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="r1"),
            helper.make_node("Relu", ["x"], ["b"], name="r2"),
            helper.make_node("Add", ["a", "b"], ["y"], name="add"),
        ],
        [tensor("x", [3])],
        [tensor("y", [3])],
    )
    result = rewrite(
        m,
        _plan(m, {"r1": ((0,), (0,)), "r2": ((0,), (0,))}, fp32=("add",)),
        UniqueNames.of_model(m),
    )
    assert result.casts_inserted == 3  # x down once, a and b up
    assert _casts(m)[0] == ("x", "x_fp16", F16)
    assert [v.name for v in node(m, "r1").inputs] == [v.name for v in node(m, "r2").inputs]


def test_graph_output_keeps_its_name_and_type() -> None:
    m = model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [tensor("x", [3])],
        [tensor("y", [3])],
    )
    rewrite(m, _plan(m, {"relu": ((0,), (0,))}), UniqueNames.of_model(m))
    out = m.graph.outputs[0]
    assert (out.name, out.dtype) == ("y", F32)
    assert out.producer().op_type == "Cast" and out.producer().inputs[0].name == "y_fp16"


def test_shared_weight_is_stored_twice_never_cast_at_run_time() -> None:
    m = model(
        [
            helper.make_node("MatMul", ["x", "w"], ["a"], name="low"),
            helper.make_node("MatMul", ["x", "w"], ["b"], name="high"),
        ],
        [tensor("x", [2, 4])],
        [tensor("a", [2, 4]), tensor("b", [2, 4])],
        [weight("w", np.ones((4, 4)))],
    )
    plan = _plan(m, {"low": ((0, 1), (0,))}, fp32=("high",))
    result = rewrite(m, plan, UniqueNames.of_model(m))
    assert result.weight_copies == 1 and result.initializers_kept == 1
    assert {(v.name, v.dtype) for v in m.graph.initializers.values()} == {
        ("w", F32),
        ("w_fp16", F16),
    }
    assert all(c[0] != "w" for c in _casts(m))


def test_cast_optional_params_stores_one_low_copy_and_casts_it_up() -> None:
    """Weights over SMALL_CONSTANT elements: one FP16 copy, a runtime Cast for the FP32 reader."""
    m = model(
        [
            helper.make_node("MatMul", ["x", "w"], ["a"], name="low"),
            helper.make_node("MatMul", ["x", "w"], ["b"], name="high"),
        ],
        [tensor("x", [2, 16])],
        [tensor("a", [2, 16]), tensor("b", [2, 16])],
        [weight("w", np.ones((16, 16)))],
    )
    plan = _plan(m, {"low": ((0, 1), (0,))}, fp32=("high",))
    result = rewrite(m, plan, UniqueNames.of_model(m), cast_optional_params=True)
    assert value(m, "w").dtype == F16 and result.weight_copies == 0
    assert ("w", "w_fp32", F32) in _casts(m)


def test_dtype_attributes_follow_the_node() -> None:
    m = model(
        [
            helper.make_node("Cast", ["i"], ["c"], name="cast", to=1),
            helper.make_node("LayerNormalization", ["c", "s", "b"], ["y"], name="ln", axis=-1),
        ],
        [tensor("i", [2, 4], 7)],
        [tensor("y", [2, 4])],
        [weight("s", np.ones(4)), weight("b", np.zeros(4))],
    )
    plan = _plan(m, {"cast": ((), (0,)), "ln": ((0, 1, 2), (0,))})
    result = rewrite(m, plan, UniqueNames.of_model(m))
    assert node(m, "cast").attributes["to"].value == F16
    assert node(m, "ln").attributes["stash_type"].value == 1
    assert result.attributes_retargeted == 2


def test_low_clip_runs_as_min_max() -> None:
    m = clip_opset11()
    clip = node(m, "clip")
    plan = _plan(m, {"clip": ((0, 1, 2), (0,))}, clip={"lowered_as": LoweredAs.MIN_MAX})
    result = rewrite(m, plan, UniqueNames.of_model(m))
    ops = [n.op_type for n in m.graph]
    assert ops == ["Cast", "Min", "Max", "Cast"]
    new = [n for n in m.graph if n.op_type in ("Min", "Max")]
    assert dict(result.replaced) == dict.fromkeys(new, clip)
    assert new[-1].name == "clip"  # the report speaks of the node the user knows
    assert [v.name for v in new[0].inputs] == ["x_fp16", "hi"]


def test_an_all_fp32_plan_changes_nothing() -> None:
    m = _matmul_relu()
    before = proto_bytes(m)
    result = rewrite(m, _plan(m, {}, fp32=("mm", "relu")), UniqueNames.of_model(m))
    assert result == RewriteResult(initializers_kept=1) and not result.modified
    assert proto_bytes(m) == before
