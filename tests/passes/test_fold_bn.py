"""fold_batch_norm: BN folded/decomposed offline in float64 matches the FP32 original.

Tolerance: the folded model differs from the original only by float32 rounding: one rounding of
each folded weight/bias (2**-24 relative) against the original's rounded rsqrt, scale and shift
(a few ulps each), accumulated over at most ~8 layers of dot products. We measure 1e-8..4e-7 of
the output scale; the bound is 1e-5 of it (max |ref|): ~170 float32 ulps of headroom, and still
50x below one FP16 rounding (2**-11 ~ 4.9e-4), so a fold that ran in low precision, dropped
epsilon on the dead channel or put the scale on the wrong axis fails it. ORT's graph optimisations
are off, so the original runs its own un-fused BatchNormalization.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper, numpy_helper

from amp_convert.core import proto_walk
from amp_convert.core.precision import UniqueNames
from amp_convert.passes.analyse import analyse
from amp_convert.passes.fold_bn import FoldBatchNormPass, FoldResult, fold_batch_norm
from amp_convert.reports.conversion import FoldNote
from models.cnn import ALL_CNN, bn_stats
from models.inputs import sample_inputs

ort = pytest.importorskip("onnxruntime")

RTOL_OF_SCALE = 1e-5


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _fold(
    proto: onnx.ModelProto, low: ir.DataType = ir.DataType.FLOAT16
) -> tuple[onnx.ModelProto, list[FoldNote]]:
    model = ir.serde.deserialize_model(proto)
    result = fold_batch_norm(model, low)
    return ir.serde.serialize_model(model), list(result.records)


def _nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for g in proto_walk.graphs(model.graph) for n in g.node]


def _ops(model: onnx.ModelProto) -> Counter[str]:
    return Counter(n.op_type for n in _nodes(model))


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {
        t.name: numpy_helper.to_array(t)
        for g in proto_walk.graphs(model.graph)
        for t in g.initializer
    }


def _assert_close(original: onnx.ModelProto, folded: onnx.ModelProto, feeds: dict) -> float:
    """Outputs match to float32 rounding; returns the worst error relative to output scale."""
    worst = 0.0
    ref_out = _session(original).run(None, feeds)
    new_out = _session(folded).run(None, feeds)
    for vi, ref, new in zip(original.graph.output, ref_out, new_out, strict=True):
        assert new.shape == ref.shape and new.dtype == ref.dtype == np.float32, vi.name
        scale = float(np.abs(ref).max())
        err = float(np.abs(new.astype(np.float64) - ref).max())
        assert err <= RTOL_OF_SCALE * scale, f"{vi.name}: max abs err {err:.3g}, scale {scale:.3g}"
        worst = max(worst, err / scale if scale else 0.0)
    return worst


# name: (nodes before, nodes after, actions in record order), nodes counted in all graphs
EXPECTED = {
    "mobilenet_cnn": (45, 38, ["folded"] * 7),
    "mobilenet_cnn_opset11": (45, 38, ["folded"] * 7),
    "resnet_bn_block": (11, 5, ["folded"] * 2),  # the 4 stat Constant nodes go with the BN
    "linear_bn": (8, 6, ["folded"] * 3),  # MatMul gains a bias Add
    "bn_after_add": (5, 7, ["decomposed"] * 2),
    "bn_fp16_overflow": (5, 4, ["kept", "folded"]),
    "bn_in_if_branch": (7, 7, ["decomposed", "folded"]),
    "bn_shared_weight": (9, 6, ["folded"] * 3),
    "bn_training_mode": (4, 3, ["kept", "folded"]),
}


def test_expected_covers_every_builder() -> None:
    assert set(EXPECTED) == set(ALL_CNN)


@pytest.mark.parametrize("name", sorted(ALL_CNN))
def test_builder_valid_deterministic(name: str) -> None:
    model = ALL_CNN[name]()
    onnx.checker.check_model(model, full_check=True)
    assert model.SerializeToString() == ALL_CNN[name]().SerializeToString()
    opset = {"mobilenet_cnn_opset11": 11, "resnet_bn_block": 15}.get(name, 17)
    assert {o.domain: o.version for o in model.opset_import}[""] == opset
    assert model.doc_string
    nodes = _nodes(model)
    assert len({n.name for n in nodes}) == len(nodes) and all(n.name for n in nodes)
    outs = _session(model).run(None, sample_inputs(model))
    assert all(np.isfinite(o).all() for o in outs)


@pytest.mark.parametrize("name", sorted(ALL_CNN))
def test_fold_matches_fp32_original(name: str) -> None:
    original = ALL_CNN[name]()
    folded, records = _fold(original)
    onnx.checker.check_model(folded, full_check=True)
    before, after, actions = EXPECTED[name]
    assert (len(_nodes(original)), len(_nodes(folded))) == (before, after)
    assert [r.action for r in records] == actions
    kept = [r.node for r in records if r.action == "kept"]
    assert sorted(n.name for n in _nodes(folded) if n.op_type == "BatchNormalization") == kept
    assert len(records) == _ops(original)["BatchNormalization"]
    feeds = sample_inputs(original)
    _assert_close(original, folded, feeds)
    if name == "bn_in_if_branch":  # both branches
        for sign in (1.0, -1.0):
            x = (sign * np.abs(feeds["x"])).astype(np.float32)
            _assert_close(original, folded, {"x": x})


@pytest.mark.parametrize("name", sorted(ALL_CNN))
def test_names_unique_model_wide(name: str) -> None:
    folded, _ = _fold(ALL_CNN[name]())
    nodes = _nodes(folded)
    node_names = [n.name for n in nodes]
    assert all(node_names) and len(set(node_names)) == len(node_names)
    produced = [o for n in nodes for o in n.output if o]
    inits = [t.name for g in proto_walk.graphs(folded.graph) for t in g.initializer]
    assert len(set(produced + inits)) == len(produced) + len(inits)


def test_mobilenet_records_and_layout() -> None:
    original = ALL_CNN["mobilenet_cnn"]()
    folded, records = _fold(original)
    assert [(r.node, r.into) for r in records] == [
        (f"p2o.BatchNormalization.{i}", f"p2o.Conv.{i}") for i in range(7)
    ]
    assert all("W*s on axis 0" in r.detail and "float64" in r.detail for r in records)
    per_block = {"Conv": 7, "Add": 7, "Clip": 7, "Mul": 7, "Div": 7}
    assert _ops(folded) == Counter({**per_block, "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1})
    inits = _inits(folded)
    assert not [n for n in inits if n.startswith("batch_norm_")], "dead BN statistics removed"
    # single-reader weights are rewritten in place (same name), biases added to the Conv
    for i in range(7):
        conv = next(n for n in folded.graph.node if n.name == f"p2o.Conv.{i}")
        assert list(conv.input[1:]) == [f"conv2d_{i}.w_0", f"p2o.Conv.{i}/bias_bn_folded"]
    old = _inits(original)
    for name in ("linear_0.w_0", "linear_0.b_0", "hardswish.three", "hardswish.six"):
        np.testing.assert_array_equal(inits[name], old[name])


def _reference_fold(model: onnx.ModelProto, conv: str, bn_prefix: str) -> tuple[np.ndarray, ...]:
    inits = {k: v.astype(np.float64) for k, v in _inits(model).items()}
    bn = next(n for n in model.graph.node if n.name == bn_prefix)
    scale, bias, mean, var = (inits[i] for i in bn.input[1:])
    eps = next(a.f for a in bn.attribute if a.name == "epsilon")
    s = scale / np.sqrt(var + np.float64(np.float32(eps)))
    return inits[conv] * s[:, None, None, None], bias - mean * s


def test_dead_channel_folded_in_float64() -> None:
    """The var=1e-8 stem channel: s ~ 316*scale comes from eps; the fold is exact float64."""
    original = ALL_CNN["mobilenet_cnn"]()
    folded, _ = _fold(original)
    w_ref, b_ref = _reference_fold(original, "conv2d_0.w_0", "p2o.BatchNormalization.0")
    inits = _inits(folded)
    np.testing.assert_array_equal(inits["conv2d_0.w_0"], w_ref.astype(np.float32))
    np.testing.assert_array_equal(inits["p2o.Conv.0/bias_bn_folded"], b_ref.astype(np.float32))
    var = _inits(original)["batch_norm_0.w_2"]
    dead = int(np.argmin(var))
    assert var[dead] == np.float32(1e-8)
    gain = np.abs(w_ref[dead]).max() / np.abs(_inits(original)["conv2d_0.w_0"][dead]).max()
    assert 150 < gain < 480  # scale in [0.5, 1.5] / sqrt(1e-5 + 1e-8)


def test_graph_output_keeps_its_name() -> None:
    folded, records = _fold(ALL_CNN["linear_bn"]())
    assert [o.name for o in folded.graph.output] == ["y"]
    producer = next(n for n in folded.graph.node if "y" in n.output)
    assert producer.op_type == "Add" and producer.input[0] == "fc3/MatMul_out"
    assert records[2].detail.startswith("W*s on axis 1, bias added by a new Add")
    gemm2 = next(n for n in folded.graph.node if n.name == "fc2/Gemm")
    attrs = {a.name: helper.get_attribute_value(a) for a in gemm2.attribute}
    assert attrs == {"alpha": 0.5, "beta": 1.0}  # beta*C folded into the new C
    assert len(gemm2.input) == 3


def test_shared_weight_gets_copies() -> None:
    original = ALL_CNN["bn_shared_weight"]()
    folded, records = _fold(original)
    by_name = {n.name: n for n in folded.graph.node}
    left, right, plain = (by_name[n].input[1] for n in ("left/Conv", "right/Conv", "plain/Conv"))
    assert plain == "shared/conv/weight"
    assert len({left, right, plain}) == 3
    inits, old = _inits(folded), _inits(original)
    np.testing.assert_array_equal(inits["shared/conv/weight"], old["shared/conv/weight"])
    assert not np.array_equal(inits[left], inits[right])
    up = by_name["up/ConvTranspose"]
    assert list(up.input[1:]) == ["up/weight", "up/bias"]  # sole reader: rewritten in place
    assert records[2] == FoldNote(
        "up/bn/BatchNormalization",
        "folded",
        "up/ConvTranspose",
        "W*s on axis 1, group 2, bias (b - mean)*s + B; s = scale/sqrt(var+eps) in float64",
    )


def test_bn_in_if_branches() -> None:
    folded, records = _fold(ALL_CNN["bn_in_if_branch"]())
    if_node = next(n for n in folded.graph.node if n.op_type == "If")
    branches = {a.name: a.g for a in if_node.attribute}
    assert [n.op_type for n in branches["then_branch"].node] == ["Conv"]
    assert [n.op_type for n in branches["else_branch"].node] == ["Mul", "Add"]
    shapes = {t.name: list(t.dims) for t in branches["else_branch"].initializer}
    assert shapes == {
        "else/bn/BatchNormalization/scale_bn_decomposed": [4, 1, 1],
        "else/bn/BatchNormalization/bias_bn_decomposed": [4, 1, 1],
    }
    # the outer weight (read only by the branch) is rewritten in place; the new bias lives there
    assert [t.name for t in branches["then_branch"].initializer] == [
        "then/conv/Conv/bias_bn_folded"
    ]
    conv_inputs = ["x", "branch/conv/weight", "then/conv/Conv/bias_bn_folded"]
    assert list(branches["then_branch"].node[0].input) == conv_inputs
    assert not [t for t in folded.graph.initializer if t.name.startswith(("then/", "else/"))]
    assert [r.node for r in records] == ["else/bn/BatchNormalization", "then/bn/BatchNormalization"]
    assert records[1].into == "then/conv/Conv"


def test_decomposed_constants_broadcast_over_axis_1() -> None:
    original = ALL_CNN["bn_after_add"]()
    folded, records = _fold(original)
    shapes = {t.name: list(t.dims) for t in folded.graph.initializer if "decomposed" in t.name}
    assert shapes == {
        "post_bn/BatchNormalization/scale_bn_decomposed": [8, 1, 1],
        "post_bn/BatchNormalization/bias_bn_decomposed": [8, 1, 1],
        "seq_bn/BatchNormalization/scale_bn_decomposed": [8, 1],
        "seq_bn/BatchNormalization/bias_bn_decomposed": [8, 1],
    }
    assert records[0].detail.endswith(
        "(its input comes from Add, not Conv/ConvTranspose/Gemm/MatMul)"
    )
    assert records[1].detail.endswith("(its input is a graph input or initializer)")
    assert [o.name for o in folded.graph.output] == ["y", "seq_y"]
    leftover = [t.name for t in folded.graph.initializer if "decomposed" not in t.name]
    assert not [n for n in leftover if n.startswith(("post_bn/", "seq_bn/"))]


def test_fp16_overflow_kept_with_reason_bf16_folds() -> None:
    original = ALL_CNN["bn_fp16_overflow"]()
    folded, records = _fold(original)
    assert records[0].action == "kept" and records[0].into == ""
    assert records[0].detail.startswith(
        "not folded into Conv 'conv0/Conv': folded weight would overflow float16: max |v| = "
    )
    bn = next(n for n in folded.graph.node if n.op_type == "BatchNormalization")
    assert list(bn.input) == ["conv0/Conv_out", "bn0/scale", "bn0/bias", "bn0/mean", "bn0/var"]
    np.testing.assert_array_equal(_inits(folded)["conv0/weight"], _inits(original)["conv0/weight"])
    # BF16 has float32's range: only overflow beyond float32 would stop it
    folded_bf16, records_bf16 = _fold(original, ir.DataType.BFLOAT16)
    assert [r.action for r in records_bf16] == ["folded", "folded"]
    assert not _ops(folded_bf16)["BatchNormalization"]
    _assert_close(original, folded_bf16, sample_inputs(original))


def _with_stats(model: onnx.ModelProto, prefix: str, **arrays: np.ndarray) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for t in model.graph.initializer:
        key = t.name.removeprefix(prefix)
        if t.name.startswith(prefix) and key in arrays:
            t.CopyFrom(numpy_helper.from_array(arrays[key].astype(np.float32), t.name))
    return model


def test_underflow_kept_fp16_only() -> None:
    """A BN scaled down to 1e-6 (a pruned layer) would store its conv weights as subnormals."""
    base = ALL_CNN["resnet_bn_block"]()
    model = _with_stats(base, "layer1/0/conv1/bn/", weight=np.full(8, 1e-6))
    _, records = _fold(model)
    assert records[0].action == "kept"
    assert "would underflow into float16 subnormals: 100.0% of its nonzero values" in (
        records[0].detail
    )
    assert records[1].action == "folded"
    _, records_bf16 = _fold(model, ir.DataType.BFLOAT16)
    assert [r.action for r in records_bf16] == ["folded", "folded"]


def test_underflow_rule_ignores_the_weights_own_subnormals() -> None:
    """Tiny weights already subnormal before the fold are not the fold's fault."""
    base = ALL_CNN["resnet_bn_block"]()
    w = numpy_helper.to_array(next(t for t in base.graph.initializer if "conv1/conv" in t.name))
    tiny = w * 1e-4  # ~all below 2**-14 already
    model = onnx.ModelProto.FromString(base.SerializeToString())
    for t in model.graph.initializer:
        if t.name == "layer1/0/conv1/conv/weight":
            t.CopyFrom(numpy_helper.from_array(tiny.astype(np.float32), t.name))
    _, records = _fold(model)
    assert [r.action for r in records] == ["folded", "folded"]


def _tiny_model(nodes, inits, inputs, outputs, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _stat_inits(prefix: str, channels: int, seed: int = 0) -> list[onnx.TensorProto]:
    arrays = bn_stats(np.random.default_rng(seed), channels)
    return [
        numpy_helper.from_array(a, f"{prefix}{n}")
        for n, a in zip(("scale", "bias", "mean", "var"), arrays, strict=True)
    ]


def test_matmul_rank3_is_decomposed_not_folded() -> None:
    """[B, 4, 8] @ [8, 4]: BN's channel axis 1 has 4 entries like the weight's columns, but is
    the sequence axis, so folding into the weight would be wrong."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    model = _tiny_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node(
                "BatchNormalization", ["h", "scale", "bias", "mean", "var"], ["y"], name="bn"
            ),
        ],
        [w, *_stat_inits("", 4)],
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4, 4])],
    )
    folded, records = _fold(model)
    assert records == [
        FoldNote(
            "bn",
            "decomposed",
            "",
            "Mul + Add with float64 constants of shape [4x1] (MatMul 'mm': output has rank 3; "
            "BN's channel axis 1 is not the weight's axis)",
        )
    ]
    np.testing.assert_array_equal(_inits(folded)["w"], numpy_helper.to_array(w))
    onnx.checker.check_model(folded, full_check=True)
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    _assert_close(model, folded, {"x": x})


def test_kept_cases() -> None:
    """Unknown rank, non-constant statistics, and training outputs at opset 9: left alone."""
    unknown = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)
    rank_model = _tiny_model(
        [
            helper.make_node("Add", ["x", "x"], ["a"], name="add"),
            helper.make_node(
                "BatchNormalization", ["a", "scale", "bias", "mean", "var"], ["y"], name="bn"
            ),
        ],
        _stat_inits("", 4),
        [unknown],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    folded, records = _fold(rank_model)
    assert records == [
        FoldNote(
            "bn",
            "kept",
            "",
            "not folded (its input comes from Add, not Conv/ConvTranspose/Gemm/MatMul); "
            "the rank of the input is unknown",
        )
    ]
    assert (
        folded.SerializeToString()
        == ir.serde.serialize_model(ir.serde.deserialize_model(rank_model)).SerializeToString()
    )

    x4 = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4, 3, 3])
    y4 = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4, 3, 3])
    stats = _stat_inits("", 4)
    dynamic = _tiny_model(
        [
            helper.make_node(
                "BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], name="bn"
            )
        ],
        stats[:2] + stats[3:],
        [x4, helper.make_tensor_value_info("mean", onnx.TensorProto.FLOAT, [4])],
        [y4],
    )
    _, records = _fold(dynamic)
    assert records == [
        FoldNote(
            "bn", "kept", "", "scale, B, mean or var is a graph input (can be fed at run time)"
        )
    ]
    computed = _tiny_model(
        [
            helper.make_node("Abs", ["var_raw"], ["var"], name="abs"),
            helper.make_node(
                "BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], name="bn"
            ),
        ],
        [*stats[:3], numpy_helper.from_array(numpy_helper.to_array(stats[3]), "var_raw")],
        [x4],
        [y4],
    )
    _, records = _fold(computed)
    assert records == [FoldNote("bn", "kept", "", "scale, B, mean and var are not all constant")]

    training9 = _tiny_model(
        [
            helper.make_node(
                "BatchNormalization",
                ["x", "scale", "bias", "mean", "var"],
                ["y", "m", "v", "sm", "sv"],
                name="bn",
            )
        ],
        stats,
        [x4],
        [y4, *(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [4]) for n in "mv")],
        opset=9,
    )
    folded, records = _fold(training9)
    assert records == [
        FoldNote(
            "bn", "kept", "", "training outputs (running/saved mean and variance) are requested"
        )
    ]
    assert _ops(folded) == Counter({"BatchNormalization": 1})


def test_training_mode_untouched() -> None:
    original = ALL_CNN["bn_training_mode"]()
    folded, records = _fold(original)
    assert records[0] == FoldNote(
        "train_bn/BatchNormalization",
        "kept",
        "",
        "training_mode=1 normalises with batch statistics",
    )
    train = next(n for n in folded.graph.node if n.op_type == "BatchNormalization")
    orig = next(n for n in original.graph.node if n.name == train.name)
    assert train.SerializeToString() == orig.SerializeToString()
    assert {"train_bn/scale", "train_bn/var"} <= set(_inits(folded))
    assert not [n for n in _inits(folded) if n.startswith("infer_bn/")]


def test_second_run_is_a_no_op() -> None:
    model = ir.serde.deserialize_model(ALL_CNN["mobilenet_cnn"]())
    assert fold_batch_norm(model).modified
    assert fold_batch_norm(model) == FoldResult(records=())


def test_as_an_onnx_ir_pass() -> None:
    """FoldBatchNormPass wraps the step for onnx-ir pass sequences; `modified` tells the truth."""
    model = ir.serde.deserialize_model(ALL_CNN["mobilenet_cnn"]())
    pass_ = FoldBatchNormPass()
    assert pass_(model).modified and {r.action for r in pass_.records} == {"folded"}
    assert not pass_(model).modified and pass_.records == ()


def test_producer_with_other_readers_is_decomposed() -> None:
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w")
    model = _tiny_model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
            helper.make_node(
                "BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"], name="bn"
            ),
            helper.make_node("Add", ["n", "c"], ["y"], name="skip"),
        ],
        [w, *_stat_inits("", 4)],
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4, 5, 5])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4, 5, 5])],
    )
    folded, records = _fold(model)
    assert records == [
        FoldNote(
            "bn",
            "decomposed",
            "",
            "Mul + Add with float64 constants of shape [4x1x1] (the output of Conv 'conv' has "
            "other readers)",
        )
    ]
    assert _ops(folded) == Counter({"Conv": 1, "Mul": 1, "Add": 2})
    _assert_close(model, folded, {"x": rng.standard_normal((2, 4, 5, 5)).astype(np.float32)})


def test_gemm_with_constant_node_bias_row() -> None:
    """C from a Constant node, shaped [1, N]: folded into a new initializer, the Constant goes."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((6, 4)).astype(np.float32), "w")
    c = numpy_helper.from_array(rng.standard_normal((1, 4)).astype(np.float32), "c_value")
    model = _tiny_model(
        [
            helper.make_node("Constant", [], ["c"], name="c_const", value=c),
            helper.make_node("Gemm", ["x", "w", "c"], ["g"], name="gemm", beta=0.5),
            helper.make_node(
                "BatchNormalization", ["g", "scale", "bias", "mean", "var"], ["y"], name="bn"
            ),
        ],
        [w, *_stat_inits("", 4)],
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])],
    )
    folded, records = _fold(model)
    assert [(r.action, r.into) for r in records] == [("folded", "gemm")]
    assert [n.op_type for n in folded.graph.node] == ["Gemm"]
    assert list(folded.graph.node[0].input) == ["x", "w", "gemm/bias_bn_folded"]
    assert {t.name: list(t.dims) for t in folded.graph.initializer} == {
        "w": [6, 4],
        "gemm/bias_bn_folded": [1, 4],
    }
    _assert_close(model, folded, {"x": rng.standard_normal((3, 6)).astype(np.float32)})


def test_pipeline_hooks_types_and_names() -> None:
    """The pipeline hands over its inferred types (no second inference) and its name registry."""
    model = ir.serde.deserialize_model(ALL_CNN["bn_after_add"]())
    _, types = analyse(model)
    names = UniqueNames.of_model(model)
    result = fold_batch_norm(model, ir.DataType.FLOAT16, types, names)
    assert [r.action for r in result.records] == ["decomposed", "decomposed"]
    assert "post_bn/BatchNormalization/Mul" in names
    assert names.take("post_bn/BatchNormalization/Mul") == "post_bn/BatchNormalization/Mul_1"


def test_a_tiny_underflowing_tail_is_judged_per_output_channel() -> None:
    """~5% of the folded kernel lands below 2**-14 (the old count rule kept the BN, FP32 with two
    casts); each output channel loses ~1e-6 of its norm to them: folded, no cast."""
    import amp_convert
    from models.trained_weights import bn_tiny_tail
    from tests.helpers import casts, run

    original = bn_tiny_tail()
    folded, records = _fold(original)
    assert [r.action for r in records] == ["folded"]
    kernel = next(t for t in folded.graph.initializer if t.name == "conv2d_0.w_0")
    values = np.abs(numpy_helper.to_array(kernel))
    assert np.mean(values[values > 0] < 2.0**-14) > 0.03  # the tail the count rule refused
    converted, report = amp_convert.convert(original, return_report=True)
    assert casts(converted) == 2 and report.nodes_fp32 == 0, report.summary()
    x = np.random.default_rng(0).standard_normal((1, 48, 8, 8)).astype(np.float32)
    ref, got = run(original, {"x": x})[0], run(converted, {"x": x})[0]
    cosine = float(np.dot(ref.ravel(), got.ravel()) / np.linalg.norm(ref) / np.linalg.norm(got))
    assert cosine >= 0.9999
