"""Hand-written LayerNorm / RMSNorm: recognised, folded or given FP32 statistics, in numbers."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert.passes._norm_match import NoMatch, NormMatch, find_norms, match_norm
from models.vision import ocr_recogniser, torch_encoder_opset14
from tests.helpers import casts, check_onnx, op_counts, run

pytestmark = pytest.mark.integration

H = 16


def _norm_model(variant: str, opset: int = 14, rms: bool = False, eps: float = 1e-5):
    """x (2, 4, H) -> one hand-written norm in the `variant` spelling -> y."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(eps, np.float32), "eps"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(-0.5, np.float32), "m_half"),
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(H)).astype(np.float32), "gamma"),
        numpy_helper.from_array((0.1 * rng.standard_normal(H)).astype(np.float32), "beta"),
    ]
    red: dict = {"keepdims": 1}
    axes_in: list[str] = []
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
        axes_in = ["axes"]
    else:
        red["axes"] = [-1]
    mk = helper.make_node
    nodes = []
    centred = "x"
    if not rms:
        nodes += [
            mk("ReduceMean", ["x", *axes_in], ["mean"], name="mean", **red),
            mk("Sub", ["x", "mean"], ["d"], name="sub"),
        ]
        centred = "d"
    if variant == "mul_square":
        nodes.append(mk("Mul", [centred, centred], ["sq"], name="square"))
    else:
        nodes.append(mk("Pow", [centred, "two"], ["sq"], name="square"))
    nodes += [
        mk("ReduceMean", ["sq", *axes_in], ["var"], name="var", **red),
        mk("Add", ["var", "eps"], ["ve"], name="add_eps"),
    ]
    if variant == "pow_half":
        nodes += [
            mk("Pow", ["ve", "m_half"], ["inv"], name="rsqrt"),
            mk("Mul", [centred, "inv"], ["n"], name="normalise"),
        ]
    else:
        nodes.append(mk("Sqrt", ["ve"], ["s"], name="sqrt"))
        if variant == "reciprocal":
            nodes += [
                mk("Reciprocal", ["s"], ["inv"], name="recip"),
                mk("Mul", [centred, "inv"], ["n"], name="normalise"),
            ]
        elif variant == "one_over":
            nodes += [
                mk("Div", ["one", "s"], ["inv"], name="recip"),
                mk("Mul", ["inv", centred], ["n"], name="normalise"),
            ]
        else:
            nodes.append(mk("Div", [centred, "s"], ["n"], name="normalise"))
    nodes += [
        mk("Mul", ["n", "gamma"], ["g"], name="affine_mul"),
        mk("Add", ["g", "beta"], ["y"], name="affine_add"),
    ]
    graph = helper.make_graph(
        nodes,
        "norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, H])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _match(model: onnx.ModelProto):
    m = ir.serde.deserialize_model(model)
    opset = m.opset_imports[""]
    return find_norms(list(m.graph.all_nodes()), opset)


VARIANTS = ("div", "mul_square", "reciprocal", "one_over", "pow_half")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("rms", [False, True])
def test_every_spelling_is_recognised_with_its_affine_part(variant: str, rms: bool) -> None:
    found, misses = _match(_norm_model(variant, rms=rms, eps=1e-6))
    assert misses == [] and len(found) == 1
    match = found[0]
    assert match.kind == ("rms" if rms else "layer")
    assert match.axes == [-1] and match.epsilon == pytest.approx(1e-6)
    assert match.gamma is not None and match.beta is not None
    stats = {n.op_type for n in match.stats}
    assert "ReduceMean" in stats and "Sub" not in stats  # the centring is data, not statistics


def test_a_near_miss_says_where_and_why() -> None:
    model = _norm_model("div")
    # the centred value also feeds the output: the norm's intermediate is needed elsewhere
    model.graph.output.append(helper.make_tensor_value_info("d", TensorProto.FLOAT, None))
    found, misses = _match(model)
    assert misses == [NoMatch("sub", "'d' is also used outside the norm")]
    # what is left is still a norm: d / sqrt(mean(d^2) + eps) is an RMSNorm of d
    assert [(f.kind, f.x.name) for f in found] == [("rms", "d")]
    m = ir.serde.deserialize_model(_norm_model("div"))
    sub = next(n for n in m.graph if n.name == "sub")
    assert match_norm(sub, 14) == NoMatch("sub", "not a ReduceMean")


def test_mean_over_other_axes_than_the_variance_is_not_a_norm() -> None:
    model = _norm_model("div")
    var = next(n for n in model.graph.node if n.name == "var")
    var.attribute[0].CopyFrom(helper.make_attribute("axes", [-2]))
    m = ir.serde.deserialize_model(model)
    mean = next(n for n in m.graph if n.name == "mean")
    assert match_norm(mean, 14) == NoMatch("var", "the variance reduces other axes than the mean")
    found, _ = _match(model)
    assert [(f.kind, f.axes) for f in found] == [("rms", [-2])]  # an RMSNorm of d over axis -2


def _feeds(mean: float, std: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"x": (mean + std * rng.standard_normal((2, 4, H))).astype(np.float32)}


@pytest.mark.parametrize(
    ("opset", "target", "rms", "fused"),
    [
        (17, "ort-cuda", False, "LayerNormalization"),
        (18, "none", False, "LayerNormalization"),
        (14, "ort-cuda", False, "LayerNormalization"),  # ORT's ai.onnx LayerNormalization-1
        (14, "ort-cpu", False, "LayerNormalization"),
        (14, "ort-cuda", True, "SimplifiedLayerNormalization"),
        (18, "ort-cuda", True, "SimplifiedLayerNormalization"),
        (23, "ort-cuda", True, "RMSNormalization"),
    ],
)
def test_folds_into_the_fused_op_with_the_same_values(opset, target, rms, fused) -> None:
    model = _norm_model("reciprocal", opset=opset, rms=rms)
    out, report = amp_convert.convert(model, level="O2", target=target, return_report=True)
    counts = op_counts(out)
    assert counts[fused] == 1 and counts["ReduceMean"] == 0 and counts["Sqrt"] == 0
    check_onnx(out)
    assert [(r.action, r.into) for r in report.rewrites] == [
        (f"hand-written {'RMSNorm' if rms else 'LayerNorm'}", f"run as {fused}")
    ]
    if fused == "RMSNormalization":
        return  # onnxruntime's CPU provider has no RMSNormalization-23 kernel to compare with
    # the same math: the fused graph computed in FP32 matches the original
    fp32 = amp_convert.convert(model, level="O2", target=target)
    fp32 = _all_fp32(fp32)
    feeds = _feeds(3.0, 2.0)
    np.testing.assert_allclose(run(fp32, feeds)[0], run(model, feeds)[0], rtol=1e-4, atol=1e-4)


def _all_fp32(model: onnx.ModelProto) -> onnx.ModelProto:
    """The converted graph with every FP16 value and weight back in FP32 (its structure only)."""
    text = model.SerializeToString()
    m = onnx.load_from_string(text)
    for init in m.graph.initializer:
        if init.data_type == TensorProto.FLOAT16:
            arr = numpy_helper.to_array(init).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(arr, init.name))
    keep = [n for n in m.graph.node if n.op_type != "Cast"]
    renames = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "Cast"}
    for n in keep:
        for i, name in enumerate(n.input):
            while name in renames:
                name = renames[name]
            n.input[i] = name
    for o in m.graph.output:
        while o.name in renames:  # a Cast that produced a graph output: rename its input instead
            src = renames.pop(o.name)
            for n in keep:
                for i, name in enumerate(n.output):
                    if name == src:
                        n.output[i] = o.name
                for i, name in enumerate(n.input):
                    if name == src:
                        n.input[i] = o.name
    del m.graph.node[:]
    m.graph.node.extend(keep)
    del m.graph.value_info[:]
    return m


def test_without_a_fused_op_the_statistics_stay_fp32() -> None:
    """--target none below opset 17: no fold; ReduceMean/Pow/Sqrt FP32, the affine part low."""
    model = _norm_model("div", opset=14)
    out, report = amp_convert.convert(model, level="O2", target="none", return_report=True)
    prec = {d.name: d.precision for d in report.nodes}
    assert {prec[n] for n in ("mean", "square", "var", "add_eps", "sqrt")} == {"fp32"}
    assert "statistics of a hand-written LayerNorm" in report.decision("var").reason
    assert [r.into for r in report.rewrites] == ["statistics FP32"]
    onnx.checker.check_model(out, full_check=True)


@pytest.mark.parametrize("target", ["ort-cuda", "none"])
def test_large_mean_inputs_keep_fp32_error(target: str) -> None:
    """x ~ 500 +- 200: FP16 statistics overflow (d^2 > 65504); ours stay at FP32's error."""
    model = torch_encoder_opset14()
    rng = np.random.default_rng(0)
    x = (500 + 200 * rng.standard_normal((2, 16, 32))).astype(np.float32)
    out = amp_convert.convert(model, level="O2", target=target)
    result = amp_convert.validate(
        model, out, provider="emulate", inputs={"hidden_states": x}, runs=0
    ).outputs[0]
    assert result.nonfinite == 0 and result.cosine >= 0.99999
    # the same graph with FP16 statistics (the user forces them low) loses the output
    naive = amp_convert.convert(model, level="O3", target="none", fp16_ops=["ReduceMean", "Pow"])
    bad = amp_convert.validate(
        model, naive, provider="emulate", inputs={"hidden_states": x}, runs=0
    ).outputs[0]
    assert bad.cosine < 0.99 or bad.nonfinite > 0


@pytest.mark.parametrize("build", [ocr_recogniser, torch_encoder_opset14])
@pytest.mark.parametrize("target", ["ort-cuda", "none"])
def test_hand_norm_models_need_only_interface_casts_on_ort_cuda(build, target: str) -> None:
    model = build()
    interfaces = len(model.graph.input) + len(model.graph.output)
    out, report = amp_convert.convert(model, level="O2", target=target, return_report=True)
    check_onnx(out)
    added = casts(out) - casts(model)
    if target == "ort-cuda":
        assert added <= 2 * interfaces, report.summary()
        assert {r.into for r in report.rewrites} == {"run as LayerNormalization"}
        norms = [d for d in report.nodes if d.op_type == "LayerNormalization"]
        assert norms and all(d.precision == "low" for d in norms)
    else:  # no fused op: the statistics cost up to two Casts per norm (and a kept Softmax two)
        norms = len(report.rewrites)
        kept = sum(1 for d in report.nodes if d.op_type == "Softmax" and d.precision == "fp32")
        assert added <= 2 * interfaces + 2 * norms + 2 * kept, report.summary()


def test_matches_are_complete_norms() -> None:
    found, _ = _match(ocr_recogniser())
    assert len(found) == 5 and all(isinstance(f, NormMatch) for f in found)
    assert all(f.output.name.endswith("Add_1_out") for f in found)


def test_the_steps_alone() -> None:
    """rewrite_hand_norms edits the graph and says so; pin_norm_statistics pins only statistics."""
    from amp_convert.core.precision import UniqueNames
    from amp_convert.core.reasons import ReasonKind
    from amp_convert.op_lists import load_builtin
    from amp_convert.options.convert import Level, make_options
    from amp_convert.passes.analyse import analyse
    from amp_convert.passes.classify import classify
    from amp_convert.passes.hand_norms import pin_norm_statistics, rewrite_hand_norms
    from amp_convert.passes.infer_dtypes import infer_dtypes
    from amp_convert.targets import build_target

    m = ir.serde.deserialize_model(_norm_model("div", opset=14))
    _, types = analyse(m)
    infer_dtypes(m, types)
    result = rewrite_hand_norms(m, UniqueNames.of_model(m), types, build_target("none"))
    assert not result.modified and len(result.pinned) == 5
    options = make_options(level="O2", target="none")
    classes = classify(m, options, load_builtin(), build_target("none"))
    assert pin_norm_statistics(classes, result, Level.O3) is classes  # O3: all low
    pinned = pin_norm_statistics(classes, result, Level.O2)
    changed = {n.name for n in pinned if pinned[n] != classes[n]}
    assert changed == {"mean", "square", "var", "add_eps", "sqrt"}
    assert all(pinned[n].reasons[0].kind == ReasonKind.NORM_STATISTICS for n in result.pinned)
    folded = ir.serde.deserialize_model(_norm_model("div", opset=17))
    _, types = analyse(folded)
    infer_dtypes(folded, types)
    result = rewrite_hand_norms(folded, UniqueNames.of_model(folded), types, build_target("none"))
    assert result.modified and [n.op_type for n in folded.graph] == ["LayerNormalization"]


def test_auto_meets_a_folded_norm() -> None:
    """--auto on a hand-written LayerNorm: wide inputs pass at O3 already (FP32 statistics); an
    offset input loses precision in the value the fused norm reads, and --auto pins that one
    fused node (it carries the name of the norm's last node, norm/Div)."""
    import models.overflow as ov
    from amp_convert.auto import auto_convert

    model, _ = ov.hand_variance(normalise=True)
    limits = {"min_cosine": 0.999, "max_nan": 0}
    wide = ov.calibration(model, "wide")
    o3 = amp_convert.convert(model, level="O3")
    assert op_counts(o3)["LayerNormalization"] == 1
    assert amp_convert.validate(
        model, o3, provider="emulate", inputs=wide, runs=0, thresholds=limits
    ).passed
    offset = ov.calibration(model, "offset")
    result, report = auto_convert(model, inputs=offset)
    assert report.passed and [p.name for p in report.pinned] == ["norm/Div"]
    fused = next(n for n in result.graph.node if n.op_type == "LayerNormalization")
    assert fused.name == "norm/Div"
    assert amp_convert.validate(
        model, result, provider="emulate", inputs=offset, runs=0, thresholds=limits
    ).passed


def _folded_fp32(model: onnx.ModelProto) -> onnx.ModelProto:
    """The ort-cuda fold with every node kept FP32: the fold's own math, no rounding."""
    ops = {n.op_type for n in model.graph.node} | {
        "LayerNormalization",
        "SimplifiedLayerNormalization",
        "ConstantOfShape",
        "Shape",
    }
    return amp_convert.convert(model, level="O2", target="ort-cuda", fp32_ops=sorted(ops))


def test_hand_layer_norm_at_opset_14_costs_no_cast_on_ort_cuda() -> None:
    """Below opset 17 ORT still registers LayerNormalization in the ai.onnx domain (version 1,
    with stash_type; FP32 statistics in its CUDA kernel): each hand LayerNorm becomes one low node
    and the only casts are at the model's input and output."""
    model = torch_encoder_opset14()
    out, report = amp_convert.convert(model, level="O2", target="ort-cuda", return_report=True)
    check_onnx(out)
    assert casts(out) - casts(model) == 2  # hidden_states in, the output out: none at the norms
    norms = [d for d in report.nodes if d.op_type == "LayerNormalization"]
    assert len(norms) == 3 and all(d.precision == "low" for d in norms)
    fused = [n for n in out.graph.node if n.op_type == "LayerNormalization"]
    assert all(n.domain == "" for n in fused)
    assert all(a.i == 1 for n in fused for a in n.attribute if a.name == "stash_type")
    feeds = {"hidden_states": (3 + 2 * np.random.default_rng(0).standard_normal((2, 16, 32)))}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    np.testing.assert_allclose(
        run(_folded_fp32(model), feeds)[0], run(model, feeds)[0], rtol=1e-4, atol=1e-4
    )


def test_dynamo_group_norm1_is_placed_like_layer_norm() -> None:
    """timm MobileViTv2's GroupNorm(1, C) through dynamo: a LayerNorm over the last axis of a
    (N, 1, -1) reshape whose size is known at run time only. It folds (unit Scale from the
    shape), the per-channel affine stays after the reshape back: no cast beyond the interface."""
    from models.norm_exports import dynamo_group_norm1

    model = dynamo_group_norm1()
    out, report = amp_convert.convert(model, level="O2", target="ort-cuda", return_report=True)
    check_onnx(out)
    assert casts(out) - casts(model) <= 2, report.summary()
    norms = [d for d in report.nodes if d.op_type == "LayerNormalization"]
    assert len(norms) == 3 and all(d.precision == "low" for d in norms)
    assert op_counts(out)["ReduceMean"] == 0
    x = (3 + 2 * np.random.default_rng(0).standard_normal((2, 16, 8, 8))).astype(np.float32)
    folded = _folded_fp32(model)
    assert op_counts(folded)["LayerNormalization"] == 3
    np.testing.assert_allclose(
        run(folded, {"x": x})[0], run(model, {"x": x})[0], rtol=1e-4, atol=1e-4
    )
    result = amp_convert.validate(model, out, provider="emulate", inputs={"x": x}, runs=0)
    assert result.outputs[0].cosine >= 0.9999 and result.outputs[0].nonfinite == 0


def test_llama_hand_rms_norms_run_as_simplified_layer_norm() -> None:
    """14 layers, 29 hand RMSNorms at opset 17: each becomes ORT's ai.onnx
    SimplifiedLayerNormalization (FP32 statistics in the CUDA kernel) instead of 2 casts around
    FP32 statistics; the one cast left is the logits'. --target none keeps the statistics FP32."""
    from models.norm_exports import llama_hand_rms

    model = llama_hand_rms()
    out, report = amp_convert.convert(model, level="O2", target="ort-cuda", return_report=True)
    check_onnx(out)
    assert op_counts(out)["SimplifiedLayerNormalization"] == 29
    assert op_counts(out)["ReduceMean"] == 0 and casts(out) - casts(model) <= 1
    norms = [d for d in report.nodes if d.op_type == "SimplifiedLayerNormalization"]
    assert all(d.precision == "low" for d in norms)
    ids = {"input_ids": np.random.default_rng(0).integers(0, 128, (1, 16)).astype(np.int64)}
    folded = _folded_fp32(model)
    assert op_counts(folded)["SimplifiedLayerNormalization"] == 29
    np.testing.assert_allclose(run(folded, ids)[0], run(model, ids)[0], rtol=1e-4, atol=1e-4)
    result = amp_convert.validate(model, out, provider="emulate", inputs=ids, runs=0)
    assert result.outputs[0].cosine >= 0.999 and result.outputs[0].nonfinite == 0
    plain, none = amp_convert.convert(model, level="O2", target="none", return_report=True)
    assert op_counts(plain)["SimplifiedLayerNormalization"] == 0
    assert {r.into for r in none.rewrites} == {"statistics FP32"}


def test_paddle_layer_norm_at_opset_12_after_a_transpose() -> None:
    """paddle2onnx at opset 12 (PP-OCRv4's recogniser): inference loses the rank after the
    computed Reshape and the Transpose; the norm's size comes from its weights and each norm runs
    as ORT's LayerNormalization-1: no cast but the interface's, the old gamma/beta gone."""
    from models.norm_exports import paddle_ln_after_transpose

    original = paddle_ln_after_transpose()
    converted, report = amp_convert.convert(original, return_report=True)
    check_onnx(converted)
    ops = op_counts(converted)
    assert ops["LayerNormalization"] == 2 and ops["ReduceMean"] == 0
    assert casts(converted) - casts(original) == 2, report.summary()  # the input's and output's
    assert report.nodes_fp32 == 0 and report.initializers_kept == 0
    x = np.random.default_rng(0).standard_normal((2, 32, 1, 16)).astype(np.float32)
    ref, got = run(original, {"x": x})[0], run(converted, {"x": x})[0]
    np.testing.assert_allclose(got, ref, atol=3e-2, rtol=3e-2)


def test_moments_layer_norm_folds() -> None:
    """flax's LayerNorm through jax2tf/tf2onnx: the variance as E[x^2] - E[x]^2 from ReduceSums
    times 1/n, the scale inside 1/std: one LayerNormalization, no cast but the interface's."""
    from models.norm_exports import jax_moments_ln

    original = jax_moments_ln()
    converted, report = amp_convert.convert(original, return_report=True)
    check_onnx(converted)
    ops = op_counts(converted)
    assert ops["LayerNormalization"] == 1 and ops["ReduceSum"] == 0 and ops["Sub"] == 0
    assert casts(converted) - casts(original) == 2, report.summary()
    assert report.nodes_fp32 == 0
    x = 3 + np.random.default_rng(0).standard_normal((4, 48)).astype(np.float32)
    ref, got = run(original, {"x": x})[0], run(converted, {"x": x})[0]
    np.testing.assert_allclose(got, ref, atol=3e-2, rtol=3e-2)


def test_moments_layer_norm_with_a_wrong_factor_is_not_folded() -> None:
    """ReduceSum times a constant that is not 1/n is no mean: the norm is not folded."""
    from models.norm_exports import jax_moments_ln

    original = jax_moments_ln()
    for t in original.graph.initializer:
        if t.name == "const_fold_opt__5":
            t.CopyFrom(numpy_helper.from_array(np.array([1 / 32], np.float32), t.name))
    converted = amp_convert.convert(original)
    assert op_counts(converted)["LayerNormalization"] == 0
    x = 3 + np.random.default_rng(0).standard_normal((4, 48)).astype(np.float32)
    ref, got = run(original, {"x": x})[0], run(converted, {"x": x})[0]
    np.testing.assert_allclose(got, ref, atol=5e-2, rtol=5e-2)
