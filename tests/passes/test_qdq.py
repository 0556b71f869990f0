"""QDQ models (ORT quantize_static's pattern): groups kept whole, --opset-upgrade, traffic warning.

AutoCast's figure the cast bounds compare with: it moves such a model to opset 19 with FP16 scales
and every float node low, so with FP32 I/O it adds exactly 2 Casts (one after the FP32 input, one
before the FP32 output). Ours may add at most AutoCast's + 2 = 4.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner

import amp_convert
from amp_convert.commands.cli import cli
from amp_convert.core.qdq_rules import scale_refusal
from amp_convert.errors import InputError
from models._graph import FLOAT, GraphBuilder
from models.qdq import qdq_cnn, qdq_encoder
from tests.helpers import FLOAT16, casts, one_line_error, run, value_types

AUTOCAST_CASTS = 2  # input and output Casts around an all-low opset-19 QDQ graph
QDQ = ("QuantizeLinear", "DequantizeLinear")
#: builder, the output's quantization step (its last Q's scale)
MODELS = {"qdq_cnn": (qdq_cnn, 8.0 / 255), "qdq_encoder": (qdq_encoder, 8.0 / 255)}


def _traffic(report: amp_convert.ConversionReport) -> float:
    return report.traffic["result"] / report.traffic["original"]


def _feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    (inp,) = model.graph.input
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    return {inp.name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _casts_inside_groups(model: onnx.ModelProto) -> list[str]:
    """Casts that sit between a DQ and the op it feeds, or between an op and its Q."""
    producer = {o: n for n in model.graph.node for o in n.output}
    bad = []
    for node in model.graph.node:
        if node.op_type != "Cast":
            continue
        src = producer.get(node.input[0])
        readers = [n for n in model.graph.node if node.output[0] in n.input]
        if src is not None and src.op_type == "DequantizeLinear":
            bad.append(f"{src.name} -> Cast")
        if any(r.op_type == "QuantizeLinear" for r in readers):
            bad.append(f"Cast -> {readers[0].name}")
    return bad


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(MODELS))
def test_opset_upgrade_lowers_the_groups_whole(name: str) -> None:
    build, step = MODELS[name]
    original = build()
    converted, report = amp_convert.convert(original, opset_upgrade=True, return_report=True)
    assert {o.domain: o.version for o in converted.opset_import}[""] == 19
    assert converted.ir_version >= 9
    assert casts(converted) - casts(original) <= AUTOCAST_CASTS + 2
    assert _traffic(report) <= 0.75
    assert _casts_inside_groups(converted) == []
    types = value_types(converted)
    scales = [n.input[1] for n in converted.graph.node if n.op_type in QDQ]
    low_scales = [s for s in scales if types.get(s) == FLOAT16]
    # FP32 scales only where FP32 is read without a Cast: the input's Q, a DQ before ReduceMean
    assert len(scales) - len(low_scales) <= 2, set(scales) - set(low_scales)
    float_low = [d for d in report.nodes if d.op_type not in QDQ and d.precision == "low"]
    float_fp32 = [d for d in report.nodes if d.op_type not in QDQ and d.precision == "fp32"]
    assert len(float_fp32) <= 1 and len(float_low) >= 10, float_fp32  # ReduceMean: deny list
    assert any(f.into == "to opset 19" for f in report.rewrites)
    for seed in range(3):
        feeds = _feeds(original, seed)
        # The reference is the QDQ graph's own float semantics: with its default optimisations
        # ORT CPU fuses it into int8 kernels whose requantisation depends on the host's ISA
        # (3 output steps off the float result on an AVX2-only EPYC, within 1 on others).
        (ref,), (got,) = run(original, feeds, optimize=False), run(converted, feeds)
        cosine = float((ref * got).sum() / np.linalg.norm(ref) / np.linalg.norm(got))
        assert cosine >= 0.999 and float(np.abs(ref - got).max()) <= 2 * step


@pytest.mark.parametrize("name", sorted(MODELS))
def test_below_opset_19_the_groups_stay_whole_and_say_why(name: str) -> None:
    original = MODELS[name][0]()
    converted, report = amp_convert.convert(original, return_report=True)
    assert casts(converted) == casts(original)
    assert _traffic(report) <= 1.0
    assert _casts_inside_groups(converted) == []
    (line,) = [w for w in report.warnings if "QuantizeLinear/DequantizeLinear" in w]
    assert "opset 17" in line and "--opset-upgrade" in line
    conv = next(d for d in report.nodes if d.op_type in ("Conv", "MatMul"))
    assert conv.precision == "fp32" and "DequantizeLinear" in conv.reason


def test_bf16_on_cuda_keeps_the_groups_fp32_naming_the_kernel_table() -> None:
    original = qdq_cnn()
    converted, report = amp_convert.convert(
        original, dtype="bf16", opset_upgrade=True, return_report=True
    )
    assert casts(converted) == casts(original) and _casts_inside_groups(converted) == []
    (line,) = [w for w in report.warnings if "QuantizeLinear/DequantizeLinear" in w]
    assert "no BF16 kernel in ORT CUDA" in line


def test_upgrade_moves_reduce_axes_to_an_input() -> None:
    converted = amp_convert.convert(qdq_encoder(), opset_upgrade=True)
    pool = next(n for n in converted.graph.node if n.op_type == "ReduceMean")
    assert not any(a.name == "axes" for a in pool.attribute) and len(pool.input) == 2
    onnx.checker.check_model(converted, full_check=True)


def test_upgrade_leaves_a_model_without_qdq_alone() -> None:
    g = GraphBuilder("plain")
    g.input("x", FLOAT, [2, 8])
    y = g.op("MatMul", ["x", g.weight("w", (8, 8))], "mm")
    g.op("ReduceMean", [y], "pool", outputs=["y"], axes=[1], keepdims=0)
    g.output("y", FLOAT, [2])
    converted = amp_convert.convert(g.model(opset=17), opset_upgrade=True)
    assert {o.domain: o.version for o in converted.opset_import}[""] == 17


def _qdq_below_13() -> onnx.ModelProto:
    model = qdq_cnn()
    for imp in model.opset_import:
        if imp.domain == "":
            imp.version = 12
    for node in model.graph.node:  # per-axis DQ needs 13: make every scale per tensor
        del node.attribute[:]
    return model


def _bn_with_training_outputs() -> onnx.ModelProto:
    g = GraphBuilder("bn_train")
    g.input("x", FLOAT, [1, 2, 4, 4])
    s = g.f32("s", 0.05)
    z = g.const("z", 128, np.uint8)
    q = g.op("QuantizeLinear", ["x", s, z], "q")
    dq = g.op("DequantizeLinear", [q, s, z], "dq")
    stats = [g.initializer(n, np.ones(2, np.float32)) for n in ("g", "b", "m", "v")]
    g.op("BatchNormalization", [dq, *stats], "bn", outputs=["y", "mean_out", "var_out"])
    g.output("y", FLOAT, [1, 2, 4, 4])
    return g.model(opset=13)


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (_qdq_below_13, "at opset 12"),
        (_bn_with_training_outputs, "BatchNormalization with training outputs"),
    ],
)
def test_unsafe_upgrade_is_refused_in_one_line(build, needle: str, tmp_path: Path) -> None:
    model = build()
    with pytest.raises(InputError, match=needle):
        amp_convert.convert(model, opset_upgrade=True)
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save_model(model, src)
    before = src.read_bytes()
    result = CliRunner().invoke(cli, [str(src), "-o", str(out), "--opset-upgrade"])
    one_line_error(result, needle, "--opset-upgrade")
    assert not out.exists() and src.read_bytes() == before


def _costly_island() -> onnx.ModelProto:
    """Exp -> MatMul -> Exp: the MatMul is forced low at O2 between two deny-list FP32 ops, so
    its two Casts move more bytes than its low I/O saves."""
    g = GraphBuilder("island")
    g.input("x", FLOAT, [64, 64])
    e = g.op("Exp", ["x"], "exp1")
    y = g.op("MatMul", [e, g.weight("w", (64, 8))], "mm")
    g.op("Exp", [y], "exp2", outputs=["y"])
    g.output("y", FLOAT, [64, 8])
    return g.model()


def test_more_bytes_than_the_original_is_a_warning_naming_why(tmp_path: Path) -> None:
    _, report = amp_convert.convert(_costly_island(), return_report=True)
    assert _traffic(report) > 1.0
    (line,) = [w for w in report.warnings if "moves more bytes" in w]
    assert "2 Cast(s)" in line and "deny list" in line
    src = tmp_path / "m.onnx"
    onnx.save_model(_costly_island(), src)
    result = CliRunner().invoke(cli, [str(src), "-o", str(tmp_path / "o.onnx")])
    assert result.exit_code == 0 and "warning: the result moves more bytes" in result.output


@pytest.mark.parametrize(
    ("scale", "refused"),
    [
        (1e-5, None),  # an int32 bias scale: subnormal in FP16, rounds by < 0.3%
        (0.02, None),
        (3e-6, "rounds by"),  # subnormal and coarse: > 2^-8 relative
        (1e-9, "flushes to zero"),
        (1e5, "overflows"),
    ],
)
def test_a_scale_is_judged_by_its_rounding(scale: float, refused: str | None) -> None:
    why = scale_refusal(np.array([scale, 0.01], np.float32), ir.DataType.FLOAT16)
    assert (why is None) if refused is None else (why is not None and refused in why)


@pytest.mark.integration
def test_a_scale_too_fine_for_fp16_keeps_its_whole_group_fp32() -> None:
    """The stem's bias scale made 1000x finer (its int32 values 1000x larger: the same bias)."""
    model = qdq_cnn()
    inits = {t.name: t for t in model.graph.initializer}
    for name, factor in (("stem.bias_scale", 1e-3), ("stem.bias_quantized", 1e3)):
        array = onnx.numpy_helper.to_array(inits[name])
        scaled = (array * factor).astype(array.dtype)
        inits[name].CopyFrom(onnx.numpy_helper.from_array(scaled, name))
    converted, report = amp_convert.convert(model, opset_upgrade=True, return_report=True)
    assert _casts_inside_groups(converted) == []
    stem = report.decision("stem")
    assert stem.precision == "fp32" and "QDQ group" in stem.reason
    assert report.decision("block0.conv1").precision == "low"
    assert casts(converted) - casts(model) <= AUTOCAST_CASTS + 2
    assert any(t.name == "stem.bias_scale" and t.action == "kept FP32" for t in report.tensors)
