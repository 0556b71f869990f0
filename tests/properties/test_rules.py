"""One focused model per conversion rule: the output graph's types, casts and numbers."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import amp_convert
from models.blocks import bert_encoder, gpt_decoder, resnet_cnn
from models.focused import ALL_FOCUSED, out_of_range_weights
from models.inputs import sample_inputs
from tests.helpers import (
    FLOAT,
    FLOAT16,
    all_nodes,
    casts,
    io_types,
    node_by_name,
    op_counts,
    rel_error,
    run,
    value_types,
)

BFLOAT16 = onnx.TensorProto.BFLOAT16


def convert(model: onnx.ModelProto, **kw):
    out, report = amp_convert.convert(model, return_report=True, **kw)
    onnx.checker.check_model(out, full_check=True)
    return out, report


def input_types(model: onnx.ModelProto, node_name: str) -> list[int | None]:
    types = value_types(model)
    return [types.get(i) for i in node_by_name(model, node_name).input if i]


def output_types(model: onnx.ModelProto, node_name: str) -> list[int | None]:
    types = value_types(model)
    return [types.get(o) for o in node_by_name(model, node_name).output]


def assert_close(original: onnx.ModelProto, converted: onnx.ModelProto, tol: float = 1e-2):
    feeds = sample_inputs(original, seed=0)
    for ref, got in zip(run(original, feeds), run(converted, feeds), strict=True):
        if ref.dtype.kind == "f":
            assert got.dtype == ref.dtype
            assert rel_error(ref, got) <= tol
        else:
            np.testing.assert_array_equal(ref, got)


@pytest.mark.parametrize("name", sorted(ALL_FOCUSED))
@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_focused_models_load_and_match(name: str, level: str) -> None:
    if name == "random_normal_like":
        pytest.skip("random outputs: covered by its own type test below")
    original = ALL_FOCUSED[name]()
    converted, _ = convert(original, level=level)
    tol = 2e-2 if name == "fp16_overflow" else 1e-2  # x*1000 squared: 2 roundings of big values
    assert_close(original, converted, tol)


def test_resize_scales_stay_fp32() -> None:
    converted, _ = convert(ALL_FOCUSED["resize_scales"](), level="O2")
    x, scales = input_types(converted, "upsample/Resize")
    assert x == FLOAT16
    assert scales == FLOAT  # tensor(float)-only slot in the schema
    assert output_types(converted, "upsample/Resize") == [FLOAT16]


def test_range_stays_fp32_even_at_o3() -> None:
    converted, report = convert(ALL_FOCUSED["range_model"](), level="O3")
    assert input_types(converted, "range/Range") == [FLOAT, FLOAT, FLOAT]
    decision = report.decision("range/Range")
    assert decision.precision == "fp32"
    assert "schema" in decision.reason and "excludes float16" in decision.reason


def test_topk_k_untouched_values_low() -> None:
    converted, _ = convert(ALL_FOCUSED["topk_model"](), level="O2")
    types = value_types(converted)
    topk = node_by_name(converted, "topk/TopK")
    assert types[topk.input[0]] == FLOAT16
    assert types[topk.input[1]] == onnx.TensorProto.INT64
    assert io_types(converted)[1] == [FLOAT, onnx.TensorProto.INT64]


def test_nms_float_inputs_stay_fp32() -> None:
    converted, report = convert(ALL_FOCUSED["nms_model"](), level="O3")
    assert input_types(converted, "nms/NonMaxSuppression")[0:2] == [FLOAT, FLOAT]
    assert input_types(converted, "nms/NonMaxSuppression")[3:5] == [FLOAT, FLOAT]
    assert report.decision("nms/NonMaxSuppression").precision == "fp32"
    assert report.decision("scores/Sigmoid").precision == "low"


@pytest.mark.parametrize("name", ["if_outer_capture", "loop_outer_capture"])
def test_control_flow_bodies_converted_with_outer_captures(name: str) -> None:
    original = ALL_FOCUSED[name]()
    converted, report = convert(original, level="O2")
    body_low = [n for n in report.nodes if n.graph and n.precision == "low"]
    assert body_low, "nodes inside the bodies must be converted too"
    cf = [n for n in report.nodes if n.op_type in ("If", "Loop")]
    assert cf and all(n.precision == "fp32" for n in cf)
    names = [n.name for n in all_nodes(converted.graph) if n.name]
    assert len(names) == len(set(names)), "node names stay unique model-wide"
    assert_close(original, converted)
    # the outer MatMul output is low; readers inside the bodies get it via a shared cast or directly
    types = value_types(converted)
    assert types["enc/MatMul_out"] == FLOAT16


def test_shared_initializer_stored_in_both_precisions_never_cast_at_run_time() -> None:
    """No runtime Cast reads a weight; a reader in each precision gets its own copy."""
    original = ALL_FOCUSED["shared_initializer"]()
    converted, _ = convert(original, level="O2")
    inits = {t.name: t for t in converted.graph.initializer}
    assert inits["shared/weight"].data_type == FLOAT  # Softmax (FP32) reads the original
    copies = [t for n, t in inits.items() if n.startswith("shared/weight") and n != "shared/weight"]
    assert [t.data_type for t in copies] == [FLOAT16]
    assert node_by_name(converted, "direct/MatMul").input[1] == copies[0].name
    assert input_types(converted, "softmax/Softmax") == [FLOAT]
    cast_inputs = {n.input[0] for n in all_nodes(converted.graph) if n.op_type == "Cast"}
    assert not cast_inputs & set(inits)
    assert_close(original, converted)


def test_cast_optional_params_stores_shared_weight_low() -> None:
    converted, _ = convert(
        ALL_FOCUSED["shared_initializer"](), level="O2", cast_optional_params=True
    )
    inits = {t.name: t for t in converted.graph.initializer}
    assert inits["shared/weight"].data_type == FLOAT16
    assert input_types(converted, "softmax/Softmax") == [FLOAT]  # cast up for the FP32 reader


def test_existing_cast_to_float_retargeted_without_mismatch() -> None:
    original = ALL_FOCUSED["existing_cast_to_float"]()
    converted, _ = convert(original, level="O2")
    cast = node_by_name(converted, "ids/Cast")
    to = next(a.i for a in cast.attribute if a.name == "to")
    assert to == FLOAT16  # Cast(int64 -> FLOAT) on a low path now casts straight to FLOAT16
    assert_close(original, converted)


def test_random_like_ops_get_explicit_dtype() -> None:
    # target none: the schema rule alone (ORT CUDA has no FP16 EyeLike, see the next test)
    converted, _ = convert(ALL_FOCUSED["random_normal_like"](), level="O2", target="none")
    for name in (
        "noise/RandomNormalLike",
        "noise/RandomUniformLike",
        "eye/EyeLike",
        "dropout/Bernoulli",
    ):
        node = node_by_name(converted, name)
        dtype = next(a.i for a in node.attribute if a.name == "dtype")
        assert dtype == FLOAT16, name
        assert output_types(converted, name) == [FLOAT16]


def test_eye_like_without_fp16_cuda_kernel_stays_fp32() -> None:
    converted, report = convert(ALL_FOCUSED["random_normal_like"](), level="O2")
    assert output_types(converted, "eye/EyeLike") == [FLOAT]
    assert "no FP16 kernel in ORT CUDA for EyeLike-17" in report.decision("eye/EyeLike").reason
    eye = node_by_name(converted, "eye/EyeLike")
    assert all(a.i != FLOAT16 for a in eye.attribute if a.name == "dtype")


def test_constant_of_shape_and_constant_values_converted() -> None:
    converted, _ = convert(ALL_FOCUSED["constant_of_shape"](), level="O3")
    fill = next(n for n in all_nodes(converted.graph) if n.op_type == "ConstantOfShape")
    assert fill.attribute[0].t.data_type == FLOAT16
    const = node_by_name(converted, "proj/Constant")
    assert const.attribute[0].t.data_type == FLOAT16


def test_contrib_ops_go_low_through_their_ort_schemas() -> None:
    original = ALL_FOCUSED["custom_domain"]()
    converted, report = convert(original, level="O3")
    custom = [n for n in all_nodes(converted.graph) if n.domain == "com.microsoft"]
    assert {n.op_type for n in custom} == {"BiasGelu", "FusedMatMul"}
    types = value_types(converted)
    for node in custom:  # ORT's schema table binds their slots; ORT CUDA has FP16 kernels
        assert all(types[i] == FLOAT16 for i in (*node.input, *node.output) if i)
        assert report.decision(node.name).precision == "low"
    assert report.decision("fc3/MatMul").precision == "low"
    assert_close(original, converted)


def test_out_of_range_weights_folded_into_range_not_clamped() -> None:
    original = ALL_FOCUSED["out_of_range_weights"]()  # the BN scales the 1e5 column by ~1e-4
    converted, report = convert(original, level="O3")
    assert [(f.action, f.into) for f in report.folds] == [("folded", "big/MatMul")]
    assert report.decision("big/MatMul").precision == "low"
    for t in converted.graph.initializer:  # nothing saturated at FP16's max, nothing infinite
        values = numpy_helper.to_array(t).astype(np.float64)
        assert np.all(np.abs(values) < 65504), t.name
    assert_close(original, converted)


def test_out_of_range_weights_never_clamped() -> None:
    original = out_of_range_weights(foldable=False)  # nothing folds the 1e5 weight or 1e10 var
    converted, report = convert(original, level="O3")
    inits = {t.name: t.data_type for t in converted.graph.initializer}
    assert inits["big/weight"] == FLOAT
    assert report.decision("big/MatMul").precision == "fp32"
    assert "exceeds FP16" in report.decision("big/MatMul").reason
    noted = {t.name for t in report.tensors}
    assert "big/weight" in noted
    assert any(inits[n] == FLOAT for n in inits if "var" in n)  # BN running variance up to 1e10
    assert "big/weight" in report.summary()
    assert_close(original, converted)


def test_quantized_float_inputs_stay_fp32() -> None:
    converted, _ = convert(ALL_FOCUSED["quantized_model"](), level="O3")
    assert input_types(converted, "fc1/quant/DynamicQuantizeLinear") == [FLOAT]


def test_graph_inputs_repeating_initializers_ir3() -> None:
    original = ALL_FOCUSED["graph_input_initializers"]()
    assert original.ir_version == 3
    converted, report = convert(original, level="O2")
    # IR < 4: ONNX Runtime cannot override initializers listed as inputs, so they are constants;
    # the converter makes them plain initializers (stored low like any weight) under IR 4
    inits = {t.name for t in original.graph.initializer}
    feeds = [i for i in original.graph.input if i.name not in inits]
    assert [i.type for i in converted.graph.input] == [i.type for i in feeds]
    assert converted.ir_version == 4
    assert any("IR version < 4" in w for w in report.warnings)
    assert {t.data_type for t in converted.graph.initializer if t.name in inits} == {FLOAT16}
    assert_close(original, converted)


@pytest.mark.integration
def test_graph_output_also_read_by_other_nodes() -> None:
    original = bert_encoder()
    converted, _ = convert(original, level="O2")
    _ins, outs = io_types(converted)
    assert outs == [FLOAT, FLOAT]
    assert "last_hidden_state" in [o.name for o in converted.graph.output]
    assert_close(original, converted)


def test_no_keep_io_types_makes_interface_low() -> None:
    original = ALL_FOCUSED["topk_model"]()
    converted, _ = convert(original, level="O2", keep_io_types=False)
    ins, outs = io_types(converted)
    assert ins == [FLOAT16]
    assert outs == [FLOAT16, onnx.TensorProto.INT64]
    assert casts(converted) == 0


@pytest.mark.integration
def test_bf16_graph_types() -> None:
    original = bert_encoder()
    converted, _report = convert(original, level="O2", dtype="bf16")
    types = value_types(converted)
    matmul_outs = [n.output[0] for n in all_nodes(converted.graph) if n.op_type == "MatMul"]
    assert matmul_outs and all(types[o] == BFLOAT16 for o in matmul_outs)
    assert FLOAT16 not in types.values()
    assert io_types(converted)[1] == [FLOAT, FLOAT]
    # Conv has no bfloat16 type before opset 22: the schema keeps it FP32
    _cnn, cnn_report = convert(resnet_cnn(), level="O3", dtype="bf16")
    convs = [n for n in cnn_report.nodes if n.op_type == "Conv"]
    assert convs and all(n.precision == "fp32" and "excludes bfloat16" in n.reason for n in convs)


def test_o0_changes_nothing() -> None:
    original = bert_encoder()
    converted, report = convert(original, level="O0")
    assert op_counts(converted) == op_counts(original)
    assert value_types(converted) == value_types(original)
    assert report.casts_inserted == 0


@pytest.mark.integration
def test_levels_are_ordered() -> None:
    original = bert_encoder()
    low = [convert(original, level=lv)[1].nodes_low for lv in ("O1", "O2", "O3")]
    assert 0 < low[0] <= low[1] <= low[2]
    o3 = convert(original, level="O3")[1]
    assert o3.nodes_fp32 == 0 and o3.decision("encoder/layer0/attn/Softmax").precision == "low"


def test_scalar_sentinel_is_saturated_and_reported() -> None:
    """float32's min as a causal-mask fill is a sentinel: stored as -65504 (reported), no casts."""
    original = gpt_decoder()
    converted, report = convert(original, level="O3")
    notes = {t.name: t for t in report.tensors}
    sentinel = next(t for t in notes.values() if t.action == "saturated")
    assert "+-65504" in sentinel.detail and sentinel.name in report.summary()
    value = next(
        numpy_helper.to_array(t) for t in converted.graph.initializer if t.name == sentinel.name
    )
    assert value.dtype == np.float16 and float(value.reshape(-1)[0]) == -65504.0
    assert report.casts_inserted == 1  # only the FP32 logits output
    assert_close(original, converted)
