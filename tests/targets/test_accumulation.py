"""Accumulation as data: where ORT CUDA keeps each kernel's sums, and who follows the table.

The emulator, --auto's range guard and the conversion report all read
targets/ort_cuda_accumulation.json; the figures in it were measured on an H100 (ORT 1.31.1):
ReduceMean FP16 is Inf once the sum of the reduced values passes 65504, and
SkipSimplifiedLayerNormalization keeps FP32 statistics in both modes.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import amp_convert
import models.overflow as ov
from amp_convert.auto import auto_convert
from amp_convert.targets.accumulation import (
    accumulation_for,
    accumulation_rows,
    fp32_accumulating,
    held_sum_ops,
)
from amp_convert.validation.emulate import build_emulated_model

pytestmark = pytest.mark.integration

LIMITS = {"min_cosine": 0.999, "max_nan": 0}


def test_every_row_cites_a_kernel_source_and_its_evidence() -> None:
    rows = accumulation_rows("ort-cuda")
    ops = {(r.op, r.mode) for r in rows}
    for needed in [
        ("SkipSimplifiedLayerNormalization", "default"),
        ("SkipSimplifiedLayerNormalization", "strict"),
        ("SimplifiedLayerNormalization", "any"),
        ("ReduceMean", "any"),
        ("LayerNormalization", "any"),
        ("Softmax", "any"),
        ("MatMulNBits", "any"),
    ]:
        assert needed in ops
    assert all((".cc" in r.source or ".cu" in r.source) and r.evidence for r in rows)
    mean = accumulation_for("ort-cuda", "ReduceMean", "", "float16")
    assert mean is not None and mean.holds_sum and "65504" in mean.limit_text
    assert "reduction_ops.cc" in mean.source and "h4096" in mean.evidence
    for mode in ("default", "strict"):  # measured: FP32 statistics in both modes on ORT 1.31.1
        ssln = accumulation_for(
            "ort-cuda", "SkipSimplifiedLayerNormalization", "com.microsoft", mode=mode
        )
        assert ssln is not None and not ssln.holds_sum
    assert held_sum_ops("ort-cuda") == {("", "ReduceMean")}
    assert set(fp32_accumulating("ort-cuda")) == {"Softmax", "LogSoftmax", "InstanceNormalization"}
    assert accumulation_rows("none") == () and held_sum_ops("ort-cpu") == frozenset()


def test_emulate_fails_where_the_cuda_reduce_mean_overflows() -> None:
    """A mean of ~20 over 4096 values: its sum (~8e4) passes 65504 in the kernel's FP16 output.
    Half the input keeps the sum below it, and the emulated mean is as close as FP16 allows."""
    model, _ = ov.reduce_mean_sum_overflow()
    o3 = amp_convert.convert(model, level="O3")
    feeds = ov.calibration(model)
    emulated = build_emulated_model(o3)
    assert emulated.held_sums == ["mean/ReduceMean"]
    bad = amp_convert.validate(
        model, o3, provider="emulate", inputs=feeds, runs=0, thresholds=LIMITS
    )
    assert not bad.passed and bad.outputs[0].nonfinite > 0
    half = {"x": feeds["x"] * 0.5}
    ok = amp_convert.validate(model, o3, provider="emulate", inputs=half, runs=0, thresholds=LIMITS)
    assert ok.passed and ok.outputs[0].nonfinite == 0


def _ssln_model(hidden: int = 4096) -> onnx.ModelProto:
    """x + skip -> SkipSimplifiedLayerNormalization (com.microsoft) -> y, as GenAI Llamas have."""
    rng = np.random.default_rng(0)
    gamma = (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)
    node = helper.make_node(
        "SkipSimplifiedLayerNormalization",
        ["x", "skip", "gamma"],
        ["y"],
        name="norm",
        domain="com.microsoft",
        epsilon=1e-6,
    )
    shape = [1, 8, hidden]
    graph = helper.make_graph(
        [node],
        "ssln",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "skip")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(gamma, "gamma")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def test_emulate_passes_skip_simplified_layer_norm_as_cuda_does() -> None:
    """Values near 100 over 4096: the sum of squares is 4e7, the mean of squares 1e4. ORT 1.31.1
    CUDA gives cosine 1.000000 (FP32 statistics in both modes), and so does the emulation; the
    report names no limit for it."""
    model = _ssln_model()  # O3: alone between FP32 I/O, O2 would keep it FP32 to save bytes
    out, report = amp_convert.convert(model, level="O3", return_report=True)
    assert report.decision("norm").precision == "low"
    assert report.limits == []
    rng = np.random.default_rng(1)
    feeds = {
        "x": (100 + 10 * rng.standard_normal((1, 8, 4096))).astype(np.float32),
        "skip": (0.5 * rng.standard_normal((1, 8, 4096))).astype(np.float32),
    }
    assert build_emulated_model(out).held_sums == []
    result = amp_convert.validate(
        model, out, provider="emulate", inputs=feeds, runs=0, thresholds=LIMITS
    )
    assert result.passed and result.outputs[0].cosine >= 0.9999


def test_auto_keeps_the_reduce_mean_fp32_citing_the_kernel() -> None:
    model, responsible = ov.reduce_mean_sum_overflow()
    feeds = ov.calibration(model)
    result, report = auto_convert(model, inputs=feeds)
    assert report.passed and [p.name for p in report.pinned] == responsible
    pin = report.pinned[0]
    assert pin.reason == "range" and "ORT CUDA holds it in FP16" in pin.evidence
    check = amp_convert.validate(
        model, result, provider="emulate", inputs=feeds, runs=0, thresholds=LIMITS
    )
    assert check.passed


def test_the_report_names_a_low_reduce_mean_and_its_limit() -> None:
    model, _ = ov.reduce_mean_sum_overflow()
    _, o3 = amp_convert.convert(model, level="O3", return_report=True)
    [note] = o3.limits
    assert (note.node, note.op_type, note.dtype, note.count) == (
        "mean/ReduceMean",
        "ReduceMean",
        "float16",
        4096,
    )
    assert "reduction_ops.cc" in note.source
    assert "kernel limit: ReduceMean 'mean/ReduceMean'" in o3.summary()
    assert "|mean| <= 15.99" in o3.summary()
    assert o3.to_dict()["limits"][0]["count"] == 4096
    # O2 keeps it FP32 (deny list): nothing depends on the limit
    _, o2 = amp_convert.convert(model, level="O2", return_report=True)
    assert o2.decision("mean/ReduceMean").precision == "fp32" and o2.limits == []
    # ort-cpu has no accumulation table: no claim about its kernels
    _, cpu = amp_convert.convert(
        model, level="O3", target="ort-cpu", fp16_ops=["ReduceMean"], return_report=True
    )
    assert cpu.limits == []


def test_a_model_below_opset_7_is_emulated_without_the_held_sum_nodes() -> None:
    """ORT has no Div-6: the held-sum nodes would make the emulated copy unloadable (the onnx
    wheel's pytorch-operator ReduceMean models are opset 6); their outputs are rounded only."""
    import os

    import onnx.backend.test

    import amp_convert

    data = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "pytorch-operator")
    model = onnx.load(os.path.join(data, "test_operator_reduced_mean", "model.onnx"))
    assert model.opset_import[0].version == 6
    converted = amp_convert.convert(model, level="O3")
    limits = {"min_cosine": 0.999}
    report = amp_convert.validate(model, converted, provider="emulate", runs=0, thresholds=limits)
    assert report.verdict == "pass", report.result_line()


def test_the_emulator_and_the_range_guard_follow_the_runtime_target_they_are_given() -> None:
    """Validation and --auto take the Target of the runtime they judge for (runtime_target): the
    emulated ORT CUDA holds ReduceMean's sum in FP16; a runtime whose kernels hold none (ORT
    CPU's table has no such row) gets no held-sum emulation and no accumulator hit."""
    from amp_convert.auto.graph import graph_facts
    from amp_convert.auto.ranges import range_hits
    from amp_convert.core.dtypes import FP16
    from amp_convert.targets import build_target
    from amp_convert.validation.providers import runtime_target

    model, _ = ov.reduce_mean_sum_overflow()
    o3 = amp_convert.convert(model, level="O3")
    cuda, cpu = runtime_target("emulate"), build_target("ort-cpu")
    assert cuda is runtime_target("cuda") and cuda.name == amp_convert.ConvertOptions().target
    assert runtime_target("cpu") is cpu
    assert build_emulated_model(o3, target=cuda).held_sums == ["mean/ReduceMean"]
    assert build_emulated_model(o3, target=cpu).held_sums == []
    facts = graph_facts(model, ov.calibration(model))
    mean = facts.node("mean/ReduceMean")
    # a mean of 20 over 4096 values: a sum of ~8e4, every value itself small
    ref_max = {mean.inputs[0]: 40.0, mean.outputs[0]: 20.0}
    hits = range_hits(facts, ref_max, FP16, cuda, margin=1.0)
    assert [h.kind for h in hits.values()] == ["accumulator"]
    assert "ORT CUDA holds it in FP16" in next(iter(hits.values())).kernel
    assert range_hits(facts, ref_max, FP16, cpu, margin=1.0) == {}
