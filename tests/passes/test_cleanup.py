"""cleanup alone: redundant casts folded or removed, everything else untouched."""

from __future__ import annotations

import onnx
from onnx import helper

from amp_convert.passes.cleanup import CleanupPass, CleanupResult, cleanup, count_casts
from tests.graphs import model, node, proto_bytes, tensor

F32, F16, BF16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16


def test_widening_round_trip_and_identity_fold_away() -> None:
    """Cast(fp16→fp32)→Cast(fp32→fp16) reads the FP16 value; an identity Cast disappears."""
    m = model(
        [
            helper.make_node("Cast", ["x"], ["up"], to=F32, name="up"),
            helper.make_node("Cast", ["up"], ["down"], to=F16, name="down"),
            helper.make_node("Cast", ["down"], ["same"], to=F16, name="same"),
            helper.make_node("Relu", ["same"], ["y"], name="relu"),
        ],
        [tensor("x", [3], F16)],
        [tensor("y", [3], F16)],
    )
    result = cleanup(m)
    assert result == CleanupResult(rewired=1, bypassed=2, removed=3) and result.modified
    carried = {(r.old.name, r.new.name) for r in result.values}  # for the value map
    assert {("same", "x"), ("down", "x"), ("up", "x")} <= carried
    assert count_casts(m) == 0
    assert [v.name for v in node(m, "relu").inputs] == ["x"]


def test_narrowing_then_widening_is_kept() -> None:
    """fp32→fp16→fp32 rounds: not an identity, both casts stay."""
    m = model(
        [
            helper.make_node("Cast", ["x"], ["down"], to=F16, name="down"),
            helper.make_node("Cast", ["down"], ["up"], to=F32, name="up"),
            helper.make_node("Relu", ["up"], ["y"], name="relu"),
        ],
        [tensor("x", [3])],
        [tensor("y", [3])],
    )
    before = proto_bytes(m)
    assert cleanup(m) == CleanupResult() and proto_bytes(m) == before


def test_widening_from_bf16_into_fp16_reads_the_bf16_value() -> None:
    """bf16→fp32→fp16 becomes bf16→fp16 (widening is exact): one cast fewer, same values."""
    m = model(
        [
            helper.make_node("Cast", ["x"], ["up"], to=F32, name="up"),
            helper.make_node("Cast", ["up"], ["h"], to=F16, name="down"),
            helper.make_node("Relu", ["h"], ["y"], name="relu"),
        ],
        [tensor("x", [3], BF16)],
        [tensor("y", [3], F16)],
    )
    assert cleanup(m) == CleanupResult(rewired=1, removed=1)
    assert [v.name for v in node(m, "down").inputs] == ["x"]


def test_a_cast_that_is_a_graph_output_stays() -> None:
    m = model(
        [helper.make_node("Cast", ["x"], ["y"], to=F32, name="c")],
        [tensor("x", [3])],
        [tensor("y", [3])],
    )
    assert cleanup(m) == CleanupResult() and count_casts(m) == 1
    assert not CleanupPass()(m).modified


def test_casts_inside_subgraphs_are_cleaned_and_counted() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["same"], to=F32, name="identity"),
            helper.make_node("Relu", ["same"], ["t"], name="inner"),
        ],
        "b",
        [],
        [tensor("t", [3])],
    )
    m = model(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=body, else_branch=body)],
        [tensor("x", [3]), tensor("c", [], onnx.TensorProto.BOOL)],
        [tensor("y", [3])],
    )
    assert count_casts(m) == 2
    assert cleanup(m) == CleanupResult(bypassed=2, removed=2)
    assert count_casts(m) == 0
