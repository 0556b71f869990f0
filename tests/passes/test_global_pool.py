"""Vision models: squeeze-excite and global pooling placed by what ORT CUDA accumulates in FP32.

The targets on models shaped like torch.onnx dynamo and TorchScript exports
(models/vision.py): O2 adds no more casts than onnxconverter-common + 2, estimated traffic at O2
within 1.10x O3's, emulated cosine >= 0.999, and both exports of a network get the same placement.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import amp_convert
from amp_convert.passes.global_pool import run_as_global_pool
from amp_convert.passes.infer_dtypes import infer_dtypes
from amp_convert.targets import build_target
from amp_convert.targets.accumulation import fp32_accumulating
from models.vision import ARCHS, PAIRS, se_cnn
from tests.helpers import casts, check_onnx, op_counts, run


def _convert(model: onnx.ModelProto, level: str = "O2", **kw):
    return amp_convert.convert(model, level=level, return_report=True, **kw)


def _placement(report) -> tuple[Counter, Counter]:
    """Op types by precision, with the two spellings of global pooling counted as one."""
    low, fp32 = Counter(), Counter()
    for d in report.nodes:
        op = "GlobalPool" if d.op_type in ("ReduceMean", "GlobalAveragePool") else d.op_type
        (low if d.precision == "low" or d.precision == "fp16" else fp32)[op] += 1
    return low, fp32


@pytest.mark.integration
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("style", ["dynamo", "torchscript"])
def test_o2_is_as_lean_as_all_low(arch: str, style: str) -> None:
    model = se_cnn(arch, style)
    interfaces = len(model.graph.input) + len(model.graph.output)
    out, report = _convert(model)
    check_onnx(out)  # torchscript's LayerNorms below opset 17 run as ORT's LayerNormalization-1
    # onnxconverter-common with keep_io_types adds one Cast per float interface: + 2 allowed
    assert casts(out) - casts(model) <= interfaces + 2, report.summary()
    _, o3 = _convert(model, "O3")
    assert report.traffic["result"] <= 1.10 * o3.traffic["result"]
    result = amp_convert.validate(model, out, provider="emulate", runs=0).outputs[0]
    assert result.cosine >= 0.999 and result.nonfinite == 0


@pytest.mark.integration
def test_against_onnxconverter_common() -> None:
    float16 = pytest.importorskip("onnxconverter_common.float16")
    for arch in ARCHS:
        for style in ("dynamo", "torchscript"):
            model = se_cnn(arch, style)
            occ = float16.convert_float_to_float16(
                onnx.load_from_string(model.SerializeToString()), keep_io_types=True
            )
            out = amp_convert.convert(model, level="O2")
            assert casts(out) <= casts(occ) + 2, (arch, style)


@pytest.mark.integration
@pytest.mark.parametrize("arch", ARCHS)
def test_dynamo_and_torchscript_exports_get_the_same_placement(arch: str) -> None:
    dynamo, torchscript = (build() for build in PAIRS[arch])
    placements = []
    for model in (dynamo, torchscript):
        out, report = _convert(model)
        low, fp32 = _placement(report)
        # BN: dynamo keeps it in the graph and we fold it; TorchScript exported it folded
        low.pop("BatchNormalization", None)
        placements.append((casts(out) - casts(model), low["GlobalPool"], dict(fp32)))
    assert placements[0] == placements[1]
    assert placements[0][2] == {}  # nothing stays FP32


def test_spatial_reduce_mean_runs_as_global_average_pool_on_ort_cuda() -> None:
    model = se_cnn("efficientnet", "dynamo")
    pools = op_counts(model)["ReduceMean"]
    out, report = _convert(model)
    assert op_counts(out)["ReduceMean"] == 0 and op_counts(out)["GlobalAveragePool"] == pools
    assert len([r for r in report.rewrites if r.into == "GlobalAveragePool"]) == pools
    assert "reduction_ops.cc" in report.rewrites[0].detail
    # the same values: the rewritten graph, still FP32, computes what the original computes
    m = ir.serde.deserialize_model(model)
    inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
    types = {vi.name: vi.type for vi in inferred}
    infer_dtypes(m, types)
    assert run_as_global_pool(m, types, build_target("none")).notes == ()  # others: untouched
    assert len(run_as_global_pool(m, types, build_target("ort-cuda")).notes) == pools
    rewritten = ir.serde.serialize_model(m)
    assert op_counts(rewritten)["GlobalAveragePool"] == pools
    rng = np.random.default_rng(0)
    feeds = {"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    np.testing.assert_allclose(run(rewritten, feeds)[0], run(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_target_none_keeps_todays_rule() -> None:
    model = se_cnn("efficientnet", "dynamo")
    out, report = _convert(model, target="none")
    assert op_counts(out)["ReduceMean"] == op_counts(model)["ReduceMean"]
    reduce = [d for d in report.nodes if d.op_type == "ReduceMean"]
    assert reduce and all(d.precision == "fp32" for d in reduce)
    assert report.rewrites == []


def test_the_accumulation_table_cites_the_kernels() -> None:
    table = fp32_accumulating("ort-cuda")
    assert set(table) == {"Softmax", "LogSoftmax", "InstanceNormalization"}
    assert "instance_norm.cc" in table["InstanceNormalization"]
    assert fp32_accumulating("none") == {} and fp32_accumulating("ort-cpu") == {}


def _reduce_model(op: str, axes: list[int]) -> onnx.ModelProto:
    """Conv -> op(axes) -> Mul(conv, ·): the reduction between low neighbours."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    ax = numpy_helper.from_array(np.array(axes, np.int64), "axes")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node(op, ["c", "axes"], ["r"], name="reduce", keepdims=1),
        helper.make_node("Mul", ["c", "r"], ["m"], name="mul"),
        helper.make_node("Conv", ["m", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    w2 = numpy_helper.from_array(rng.standard_normal((4, 8, 3, 3)).astype(np.float32), "w2")
    graph = helper.make_graph(
        nodes,
        "reduce",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w, ax, w2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


@pytest.mark.parametrize(
    ("op", "axes", "low"),
    [
        ("ReduceMean", [2, 3], True),  # global pooling: GlobalAveragePool
        ("ReduceMean", [1], False),  # a channel mean: fast path writes the FP16 sum
        ("ReduceSum", [2, 3], False),  # a sum can leave the range
        ("ReduceSumSquare", [2, 3], False),
        ("ReduceL2", [2, 3], False),
        ("ReduceMax", [2, 3], True),  # a selection
    ],
)
def test_reductions_between_low_neighbours(op: str, axes: list[int], low: bool) -> None:
    _, report = _convert(_reduce_model(op, axes))
    assert (report.decision("reduce").precision != "fp32") == low, report.decision("reduce")


@pytest.mark.parametrize("style", ["dynamo", "torchscript"])
def test_mean_without_keepdim_runs_as_global_pool_and_flatten(style: str) -> None:
    """``x.mean((2, 3))`` (keepdims=0) from both exporters: GlobalAveragePool then a Flatten to
    (N, C), all low; no cast but the input's and output's."""
    from models.vision import mean_pool_cnn

    original = mean_pool_cnn(style)
    converted, report = _convert(original)
    check_onnx(converted)
    ops = op_counts(converted)
    assert ops["GlobalAveragePool"] == 1 and ops["ReduceMean"] == 0 and ops["Flatten"] == 1
    assert casts(converted) - casts(original) <= 2, report.summary()
    assert report.nodes_fp32 == 0
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    ref, got = run(original, {"input": x})[0], run(converted, {"input": x})[0]
    assert got.shape == ref.shape == (2, 10)
    np.testing.assert_allclose(got, ref, atol=3e-2, rtol=3e-2)
    (mean,) = (n.output[0] for n in original.graph.node if n.op_type == "ReduceMean")
    assert report.value_map.carrier(mean) == mean  # the Flatten carries the mean, by its name
    assert "GlobalAveragePool + Flatten" in report.value_map.fate(mean).why
