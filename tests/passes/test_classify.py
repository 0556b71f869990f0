"""classify alone: each node's class, lowerable slots and structured reasons, graph untouched."""

from __future__ import annotations

import dataclasses

import pytest
from onnx import helper

from amp_convert.core.precision import NodeClass
from amp_convert.core.reasons import Reason, ReasonKind, render
from amp_convert.options.convert import make_options
from amp_convert.passes.classify import classify
from amp_convert.pipeline import build_lists
from amp_convert.placement.plan import ClassInfo, LoweredAs
from amp_convert.targets import build_target
from tests.graphs import F32, clip_opset11, model, node, proto_bytes, tensor, weight

K = ReasonKind


def _classify(m, target: str = "none", **options):
    opts = make_options(target=target, **options)
    return classify(m, opts, build_lists(opts), build_target(target))


def _attention_like():
    return model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Softmax", ["h"], ["p"], name="sm", axis=-1),
            helper.make_node("Relu", ["p"], ["r"], name="relu"),
            helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape"),
        ],
        [tensor("x", [2, 4])],
        [tensor("y", [8])],
        [weight("w", [[1.0] * 4] * 4), helper.make_tensor("shape", 7, [1], [8])],
    )


def test_classes_and_reasons_from_the_op_lists() -> None:
    m = _attention_like()
    classes = _classify(m)
    mm, sm, relu, reshape = (classes[node(m, n)] for n in ("mm", "sm", "relu", "reshape"))
    assert (mm.op_class, mm.low_inputs, mm.low_outputs) == (NodeClass.ALLOW, {0, 1}, {0})
    assert mm.reasons[0].kind == K.LIST and mm.reasons[0].source == "allow list"
    assert sm.op_class == NodeClass.DENY and sm.reasons[0].source == "deny list"
    assert not sm.low_between_low  # schemas only: no runtime to lean on
    assert relu.op_class in (NodeClass.INFER, NodeClass.CLEAR)
    assert reshape.op_class == NodeClass.CLEAR
    assert reshape.low_inputs == {0}  # the shape input is int64: never a float slot
    assert all(not info.user for info in classes.values())


def test_ort_cuda_softmax_is_low_between_low_neighbours() -> None:
    m = _attention_like()
    sm = _classify(m, target="ort-cuda")[node(m, "sm")]
    assert sm.op_class == NodeClass.INFER and sm.low_between_low
    assert [r.kind for r in sm.reasons] == [K.RUNTIME_SAFE]


def test_result_is_frozen_and_the_graph_untouched() -> None:
    m = _attention_like()
    before = proto_bytes(m)
    classes = _classify(m, target="ort-cuda")
    assert proto_bytes(m) == before
    with pytest.raises(TypeError):
        classes[node(m, "mm")] = ClassInfo(NodeClass.FIXED, ())  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        classes[node(m, "mm")].op_class = NodeClass.DENY  # type: ignore[misc]


def test_schema_limits_the_slots() -> None:
    """Resize's roi/scales keep FP32; a Range (no float16 in its schema) is FIXED, with why."""
    m = model(
        [
            helper.make_node("Resize", ["x", "roi", "scales"], ["y"], name="resize"),
            helper.make_node("Range", ["a", "b", "c"], ["r"], name="range"),
        ],
        [tensor("x", [1, 1, 2, 2]), tensor("a", []), tensor("b", []), tensor("c", [])],
        [tensor("y", [1, 1, 4, 4]), tensor("r", [None])],
        [weight("roi", []), weight("scales", [1, 1, 2, 2])],
    )
    classes = _classify(m)
    resize, rng = classes[node(m, "resize")], classes[node(m, "range")]
    assert resize.low_inputs == {0} and resize.low_outputs == {0}
    assert rng.op_class == NodeClass.FIXED and not rng.candidate
    assert rng.reasons == (Reason(K.SCHEMA, "schema", "T of Range excludes float16 at this opset"),)


def test_custom_op_and_control_flow_keep_their_precision() -> None:
    branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"], name="inner")], "b", [], [tensor("t", [2])]
    )
    m = model(
        [
            helper.make_node("MyOp", ["x"], ["c"], name="custom", domain="my.domain"),
            helper.make_node(
                "If", ["cond"], ["y"], name="if", then_branch=branch, else_branch=branch
            ),
        ],
        [tensor("x", [2]), tensor("cond", [], 9)],
        [tensor("c", [2]), tensor("y", [2])],
        extra_opsets=[helper.make_opsetid("my.domain", 1)],
    )
    classes = _classify(m)
    custom, if_ = classes[node(m, "custom")], classes[node(m, "if")]
    assert custom.op_class == NodeClass.FIXED
    assert custom.reasons[0].kind == K.CUSTOM_OP
    assert render(custom.reasons) == (
        "no schema for my.domain:MyOp: neither ONNX nor ONNX Runtime's contrib schemas define it "
        "(custom op); kept as it is"
    )
    assert if_.op_class == NodeClass.FIXED and if_.reasons[0].kind == K.CONTROL_FLOW
    inner = [n for n in classes if n.name == "inner"]
    assert len(inner) == 2 and all(classes[n].candidate for n in inner)  # both branches


def test_user_choices_are_marked_user() -> None:
    m = _attention_like()
    classes = _classify(m, exclude_nodes=["^mm$"], fp16_ops=["Softmax"])
    mm, sm = classes[node(m, "mm")], classes[node(m, "sm")]
    assert (mm.op_class, mm.user) == (NodeClass.FIXED, True)
    assert mm.reasons == (Reason(K.USER, "user", "--exclude-nodes ^mm$"),)
    assert (sm.op_class, sm.user) == (NodeClass.ALLOW, True)
    assert render(sm.reasons) == "user: --fp16-ops"


def test_target_without_a_low_kernel_pins_the_node() -> None:
    """ORT CUDA has no FP16 EyeLike: FIXED with the kernel table's reason."""
    m = model(
        [helper.make_node("EyeLike", ["x"], ["y"], name="eye")],
        [tensor("x", [3, 3])],
        [tensor("y", [3, 3])],
    )
    info = _classify(m, target="ort-cuda")[node(m, "eye")]
    assert info.op_class == NodeClass.FIXED
    assert info.reasons[0].kind == K.TARGET and info.reasons[0].source == "target ort-cuda"
    assert _classify(m)[node(m, "eye")].candidate  # the schema alone allows it


def test_clip_before_opset_12_is_lowered_as_min_max() -> None:
    m = clip_opset11()
    info = _classify(m, target="ort-cuda")[node(m, "clip")]
    assert info.lowered_as is LoweredAs.MIN_MAX and info.candidate
    assert info.reasons[-1].kind == K.LOWERED_AS
    assert _classify(m)[node(m, "clip")].lowered_as is None  # schemas only: Clip-11 is fine
    m13 = model(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="clip")],
        [tensor("x", [4])],
        [tensor("y", [4])],
        [weight("lo", 0.0), weight("hi", 6.0)],
        opset=13,
    )
    assert _classify(m13, target="ort-cuda")[node(m13, "clip")].lowered_as is None


def test_unknown_float_type_pins_the_node() -> None:
    """A float slot whose other binding is unknown cannot be lowered safely."""
    m = model(
        [helper.make_node("Add", ["x", "u"], ["y"], name="add")],
        [tensor("x", [2]), helper.make_value_info("u", helper.TypeProto())],
        [tensor("y", [2])],
    )
    info = _classify(m)[node(m, "add")]
    assert info.op_class == NodeClass.FIXED
    assert info.reasons == (Reason(K.SCHEMA, "", "type of T not fully known"),)
    assert F32  # the inputs above are FLOAT


def test_the_schema_reason_names_the_same_type_variable_every_run() -> None:
    """Gradient's T1 and T2 both exclude bfloat16: the reason names one, whatever the hash seed
    (the type variables were a set, so T1 or T2 came out by PYTHONHASHSEED)."""
    m = model(
        [
            helper.make_node("Add", ["a", "b"], ["c"], name="add"),
            helper.make_node(
                "Gradient",
                ["a", "b"],
                ["da", "db"],
                name="grad",
                domain="ai.onnx.preview.training",
                xs=["a", "b"],
                y="c",
            ),
        ],
        [tensor("a", [2]), tensor("b", [2])],
        [tensor("c", [2]), tensor("da", [2]), tensor("db", [2])],
        opset=12,
        extra_opsets=[helper.make_opsetid("ai.onnx.preview.training", 1)],
    )
    info = _classify(m, dtype="bf16")[node(m, "grad")]
    assert info.reasons == (
        Reason(K.SCHEMA, "schema", "T2 of Gradient excludes bfloat16 at this opset"),
    )


def _pow(exponent: float):
    return model(
        [helper.make_node("Pow", ["x", "e"], ["y"], name="pow")],
        [tensor("x", [2, 4])],
        [tensor("y", [2, 4])],
        [weight("e", exponent)],
        opset=17,
    )


@pytest.mark.parametrize("target", ["none", "ort-cuda"])
@pytest.mark.parametrize("low", ["fp16", "bf16"])
def test_an_exponent_the_low_type_holds_exactly_turns_low_with_its_pow(target, low) -> None:
    # One float type for the kernel: ORT CUDA's Pow with an FP32 exponent on FP16 data made
    # GPT-2 b8 s512 6% slower on an H200 (bench/gpu_deploy.py --pow16)
    m = _pow(3.0)
    info = _classify(m, target=target, dtype=low, level="O3")[node(m, "pow")]
    assert info.low_inputs == {0, 1} and info.low_outputs == {0}


def test_an_exponent_the_low_type_rounds_keeps_fp32() -> None:
    m = _pow(1.0 / 2.4)  # the sRGB gamma: 0.41666 is not an FP16 value
    info = _classify(m, target="ort-cuda", level="O3")[node(m, "pow")]
    assert info.low_inputs == {0} and info.low_outputs == {0}
