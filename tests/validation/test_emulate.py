"""The emulate provider rounds like FP16/BF16 hardware: overflow, BF16, control flow, attributes."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import validation_models as vm

ort = pytest.importorskip("onnxruntime")

from amp_convert.errors import ValidationError  # noqa: E402
from amp_convert.validation import build_emulated_model, validate  # noqa: E402

pytestmark = pytest.mark.integration


def _tricky_values() -> np.ndarray:
    """Normal values over many decades, FP16 range edges, subnormals, ties, non-finite."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(4000) * 10.0 ** rng.integers(-9, 9, 4000)
    edges = [65504, 65519.9, 65520, -65520, 6e-8, 3e-8, 2.9e-8, 1e-8, 0.0, -0.0, 1 / 3]
    bf16_ties = ((rng.integers(0, 2**15, 200).astype(np.uint32) << 16) | 0x8000).view(np.float32)
    fp16_ties = np.float32(1.0) + np.arange(1, 100, dtype=np.float32) * np.float32(2**-11)
    special = [np.inf, -np.inf, np.nan, 3e38]
    parts = [x.astype(np.float32), np.array(edges + special, np.float32), bf16_ties, fp16_ties]
    return np.concatenate(parts).astype(np.float32)


def test_overflow_shows_in_emulate_not_in_cpu() -> None:
    """The reason emulate exists: (1000x)^2 overflows FP16 on a GPU; ORT CPU hides it."""
    ref, cand = vm.overflow_pair()
    emu = validate(ref, cand, provider="emulate", dims={"batch": 2}, runs=0)
    cpu = validate(ref, cand, provider="cpu", dims={"batch": 2}, runs=0)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    expected_inf = int(np.count_nonzero(np.abs(x) > 0.2559))  # (1000x)^2 > 65504
    assert expected_inf > 0
    e, c = emu.output("y"), cpu.output("y")
    assert e.candidate_inf == expected_inf and e.nonfinite == expected_inf
    assert e.max_abs == float("inf")
    assert c.candidate_inf == 0 and c.max_abs < 1e-2
    assert emu.provider == "emulate" and cpu.provider == "cpu"
    assert any("removes the casts" in w for w in cpu.warnings)
    # with thresholds, emulate fails the model and the CPU provider would have passed it
    limits = {"atol": 0.1, "rtol": 0.01}
    assert not validate(ref, cand, provider="emulate", thresholds=limits, runs=0).passed
    assert validate(ref, cand, provider="cpu", thresholds=limits, runs=0).passed


@pytest.mark.parametrize(
    ("low", "np_low"),
    [(TensorProto.FLOAT16, np.float16), (TensorProto.BFLOAT16, ml_dtypes.bfloat16)],
)
def test_rounding_is_bit_exact(low: int, np_low: type) -> None:
    """ORT keeps the Cast pair (no cast elimination) and rounds to nearest even like numpy."""
    ref, cand = vm.cast_pair(low)
    x = _tricky_values()
    emu = build_emulated_model(cand)
    for level in (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL,  # not used by validate; proves it is safe
    ):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        sess = ort.InferenceSession(
            emu.model.SerializeToString(), so, providers=["CPUExecutionProvider"]
        )
        (y,) = sess.run(None, {"x": x})
        with np.errstate(over="ignore", invalid="ignore"):
            want = x.astype(np_low).astype(np.float32)
        same = (y.view(np.uint32) == want.view(np.uint32)) | (np.isnan(y) & np.isnan(want))
        assert same.all(), x[~same][:5]
    report = validate(ref, cand, provider="emulate", inputs={"x": x}, runs=0)
    o = report.output("y")
    with np.errstate(over="ignore", invalid="ignore"):
        overflow = np.isfinite(x) & ~np.isfinite(x.astype(np_low).astype(np.float32))
    assert o.nonfinite == int(overflow.sum())
    if low == TensorProto.FLOAT16:
        assert o.nonfinite > 0  # 65520 and the large normals overflow FP16


def test_bf16_model_error_is_about_bf16_epsilon() -> None:
    ref, cand = vm.mlp_pair(TensorProto.BFLOAT16)
    report = validate(ref, cand, provider="emulate", runs=0)
    o = report.output("y")
    eps = 2.0**-8  # bf16: 8 significant bits
    assert o.mean_abs > 0
    assert o.max_abs < 16 * eps * 4  # a few roundings on values of magnitude ~4
    assert o.cosine > 0.9999
    assert report.emulation["rounding_points"].get("bfloat16", 0) >= 4
    assert report.emulation["upcast_initializers"] == 3
    # and the same model in FP16 has ~8x smaller error (10 vs 7 mantissa bits)
    fp16 = validate(*vm.mlp_pair(TensorProto.FLOAT16), provider="emulate", runs=0).output("y")
    assert fp16.mean_abs < o.mean_abs / 3


def test_bf16_on_cpu_provider_is_a_clear_error() -> None:
    ref, cand = vm.mlp_pair(TensorProto.BFLOAT16)
    with pytest.raises(ValidationError, match="emulate"):
        validate(ref, cand, provider="cpu", runs=0)


def test_if_body_is_emulated() -> None:
    ref, cand = vm.if_pair()
    x = np.array([0.1, 0.3, -2.0, 0.01], np.float32)
    report = validate(ref, cand, provider="emulate", inputs={"x": x, "c": np.array(True)}, runs=0)
    o = report.output("y")
    assert o.candidate_inf == 2  # |x| > 0.256 overflows inside the then-branch
    other = validate(ref, cand, provider="emulate", inputs={"x": x, "c": np.array(False)}, runs=0)
    assert other.output("y").candidate_inf == 0
    # the branch's three fp16 nodes are rounded inside the body
    emu = build_emulated_model(cand)
    if_node = next(n for n in emu.model.graph.node if n.op_type == "If")
    then = next(a.g for a in if_node.attribute if a.name == "then_branch")
    casts = [n for n in then.node if n.op_type == "Cast"]
    assert len(casts) == 8  # 4 nodes x (round + back)
    assert then.output[0].type.tensor_type.elem_type == TensorProto.FLOAT


def test_loop_body_is_emulated() -> None:
    ref, cand = vm.loop_pair()
    x = np.array([0.01, 0.05, 0.1, -1.0], np.float32)  # x * 30^4 overflows for |x| > 0.081
    report = validate(ref, cand, provider="emulate", inputs={"x": x}, runs=0)
    o = report.output("y")
    assert o.candidate_inf == 2
    emu = build_emulated_model(cand)
    loop = next(n for n in emu.model.graph.node if n.op_type == "Loop")
    body = next(a.g for a in loop.attribute if a.name == "body")
    assert all(
        vi.type.tensor_type.elem_type != TensorProto.FLOAT16 for vi in [*body.input, *body.output]
    )
    onnx.checker.check_model(emu.model, full_check=True)


def test_dtype_attributes_are_retargeted_and_exact() -> None:
    """ConstantOfShape/Constant values and EyeLike dtype: emulate equals real FP16 arithmetic."""
    ref, cand = vm.dtype_attributes_pair()
    x = np.random.default_rng(3).standard_normal((3, 3)).astype(np.float32)
    emu = build_emulated_model(cand)
    assert emu.retargeted_attributes == 3
    sess = ort.InferenceSession(emu.model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    h = np.float16
    want = ((x.astype(h) + h(0.1)) * h(0.3) + np.eye(3, dtype=h)).astype(np.float32)
    np.testing.assert_array_equal(y, want)
    report = validate(ref, cand, provider="emulate", inputs={"x": x}, runs=0)
    assert 0 < report.output("y").max_abs < 1e-2


@pytest.mark.parametrize("low", [TensorProto.FLOAT16, TensorProto.BFLOAT16])
def test_low_precision_graph_inputs_and_outputs(low: int) -> None:
    ref, cand = vm.low_io_pair(low)
    report = validate(ref, cand, provider="emulate", runs=0)
    name = "float16" if low == TensorProto.FLOAT16 else "bfloat16"
    assert report.emulation["low_precision_inputs"] == {"x": name}
    o = report.output("y")
    assert 0 < o.max_rel < (2**-10 if low == TensorProto.FLOAT16 else 2**-7) * 3
    if low == TensorProto.FLOAT16:  # ORT CPU has fp16 Mul; the candidate's fp16 I/O is fed/read
        cpu = validate(ref, cand, provider="cpu", runs=0).output("y")
        assert cpu.candidate_dtype == "float16" and cpu.max_rel < 2**-10 * 3


def test_emulate_leaves_candidate_untouched_and_valid() -> None:
    _, cand = vm.multi_io_pair()
    before = cand.SerializeToString()
    emu = build_emulated_model(cand)
    assert cand.SerializeToString() == before
    onnx.checker.check_model(emu.model, full_check=True)
    # nothing in low precision is left outside the rounding casts
    for node in emu.model.graph.node:
        if node.op_type != "Cast":
            assert not any(
                a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT16
                for a in node.attribute
            )


def test_external_data_candidate_by_path(tmp_path: Path) -> None:
    """FP16 weights stored as external data: the copy keeps the references, ORT finds them."""
    ref, cand = vm.mlp_pair(TensorProto.FLOAT16)
    ref_path, cand_path = tmp_path / "ref.onnx", tmp_path / "cand.onnx"
    onnx.save(ref, ref_path)
    in_memory = validate(ref, cand, provider="emulate", runs=0).output("y")
    onnx.save(cand, cand_path, save_as_external_data=True, location="cand.data", size_threshold=0)
    assert (tmp_path / "cand.data").exists()
    by_path = validate(ref_path, cand_path, provider="emulate", runs=0).output("y")
    assert by_path.max_abs == in_memory.max_abs > 0
    # onnx.save left `cand` pointing at the external file: in memory, that is a clear error
    with pytest.raises(ValidationError, match="pass its path"):
        validate(ref, cand, provider="emulate", runs=0)


def test_ir3_initializer_declared_as_input() -> None:
    """Old models list initializers among graph inputs; the renamed one must stay consistent."""
    ref, cand = vm.mlp_pair(TensorProto.FLOAT16)
    for m in (ref, cand):
        m.graph.input.extend(
            helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
            for t in m.graph.initializer
        )
    report = validate(ref, cand, provider="emulate", runs=0)
    assert list(report.input_shapes) == ["x"]
    assert report.output("y").max_abs > 0


def test_no_low_precision_is_reported() -> None:
    ref, _ = vm.mlp_pair()
    report = validate(ref, ref, provider="emulate", runs=0)
    assert report.output("y").max_abs == 0
    assert any("no FP16/BF16" in w for w in report.warnings)


def test_sequence_and_random_like_attributes() -> None:
    """RandomUniformLike ``dtype`` (FP16) is retargeted; a low-precision output stays rounded."""
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
        helper.make_node(
            "RandomUniformLike", ["x16"], ["r"], dtype=TensorProto.FLOAT16, low=0.0, high=0.0
        ),
        helper.make_node("Add", ["x16", "r"], ["y16"]),
        helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])],
    )
    cand = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    emu = build_emulated_model(cand)
    rnd = next(n for n in emu.model.graph.node if n.op_type == "RandomUniformLike")
    assert next(a.i for a in rnd.attribute if a.name == "dtype") == TensorProto.FLOAT
    x = np.array([1 / 3, 70000, 1, 2, 3], np.float32)
    sess = ort.InferenceSession(emu.model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))


def _contrib_pair(op_domain: str, op_type: str):
    """x → Cast fp16 → <op>(x16, w16) → Relu → Cast FLOAT; the reference uses MatMul in FP32."""
    w = np.random.default_rng(5).standard_normal((4, 4)).astype(np.float32)
    io = (
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    ref_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "ref",
        *io,
        [vm._tensor("w", w)],
    )
    cand_g = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
            helper.make_node(op_type, ["x16", "w"], ["m"], domain=op_domain),
            helper.make_node("Relu", ["m"], ["r"]),
            helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT),
        ],
        "cand",
        *io,
        [vm._tensor("w", w, TensorProto.FLOAT16)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(op_domain, 1)]
    return (
        helper.make_model(ref_g, opset_imports=opsets[:1], ir_version=9),
        helper.make_model(cand_g, opset_imports=opsets, ir_version=9),
    )


def test_contrib_op_types_come_from_ort_schemas() -> None:
    """ONNX inference does not know com.microsoft ops; ORT's registered schemas fill the gap."""
    ref, cand = _contrib_pair("com.microsoft", "FusedMatMul")
    emu = build_emulated_model(cand)
    assert emu.unknown_types == []
    assert emu.rounding_points == {"float16": 2}  # the first Cast and FusedMatMul (Relu is exact)
    report = validate(ref, cand, provider="emulate", runs=0)
    assert 0 < report.output("y").max_abs < 1e-2
    assert not any("unknown" in w for w in report.warnings)


def test_unknown_op_types_are_reported() -> None:
    _, cand = _contrib_pair("my.custom", "MyMatMul")
    emu = build_emulated_model(cand)
    assert emu.unknown_types == ["m", "r"]


def test_models_over_the_protobuf_limit_go_through_a_temporary_folder(monkeypatch) -> None:
    """Above 2 GiB a model cannot be handed to ORT as bytes; the same numbers come out."""
    from amp_convert.validation import runtime

    ref, cand = vm.mlp_pair(TensorProto.FLOAT16)
    before = cand.SerializeToString()
    small = validate(ref, cand, provider="emulate", runs=0).output("y")
    monkeypatch.setattr(runtime, "_PROTO_LIMIT", 0)
    for provider in ("emulate", "cpu"):
        big = validate(ref, cand, provider=provider, runs=1, warmup=0).output("y")
        assert big.max_abs > 0
    assert validate(ref, cand, provider="emulate", runs=0).output("y").max_abs == small.max_abs
    assert cand.SerializeToString() == before  # the caller's proto is not rewritten


# ---------------------------------------------------------------- what the target computes
def _emulated_run(cand: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    emu = build_emulated_model(cand)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = emu.model.SerializeToString()
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _norm_candidate(op: str, opset: int, shape: list[int], channels: int, **attrs):
    """x (FP32) → Cast FP16 → <op>(FP16 X/scale/bias, stash_type=1) → Cast FP32."""
    rng = np.random.default_rng(0)
    scale = (1 + 0.1 * rng.standard_normal(channels)).astype(np.float16)
    bias = (0.1 * rng.standard_normal(channels)).astype(np.float16)
    params = {"scale": scale} if op == "RMSNormalization" else {"scale": scale, "bias": bias}
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
        helper.make_node(op, ["x16", *params], ["y16"], stash_type=1, epsilon=1e-5, **attrs),
        helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
    ]
    g = helper.make_graph(
        nodes,
        "norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [vm._tensor(k, v, TensorProto.FLOAT16) for k, v in params.items()],
    )
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(g, opset_imports=opsets, ir_version={17: 8, 21: 10, 23: 11}[opset])
    return model, {k: v.astype(np.float64) for k, v in params.items()}


def _norm_numpy(op: str, x: np.ndarray, p: dict, acc, groups: int = 1) -> np.ndarray:
    """The op on `x` with its statistics accumulated by `acc` (float64, or FP16 step by step)."""
    if op == "GroupNormalization":
        rows = x.reshape(x.shape[0], groups, -1)
    else:
        rows = x.reshape(-1, x.shape[-1])
    if op == "RMSNormalization":
        normed = rows / np.sqrt(acc(rows * rows) + 1e-5)
    else:
        centred = rows - acc(rows)
        normed = centred / np.sqrt(acc(centred * centred) + 1e-5)
    normed = normed.reshape(x.shape)
    bshape = (1, -1, 1, 1) if op == "GroupNormalization" else (1, -1)
    y = normed * p["scale"].reshape(bshape)
    return y + p["bias"].reshape(bshape) if "bias" in p else y


def _mean64(rows: np.ndarray) -> np.ndarray:
    return rows.astype(np.float64).mean(axis=-1, keepdims=True)


def _mean16(rows: np.ndarray) -> np.ndarray:
    """A mean accumulated in FP16, one element at a time (what an FP16 kernel would do)."""
    rows = rows.astype(np.float16)
    with np.errstate(over="ignore"):  # RMSNorm's sum of squares overflows FP16: that is the point
        total = np.cumsum(rows, axis=-1, dtype=np.float16)[..., -1:]
    return (total / np.float16(rows.shape[-1])).astype(np.float16)


@pytest.mark.parametrize(
    ("op", "opset", "shape", "channels", "attrs"),
    [
        ("LayerNormalization", 17, [4, 2048], 2048, {"axis": -1}),
        ("GroupNormalization", 21, [2, 8, 32, 32], 8, {"num_groups": 4}),
        ("RMSNormalization", 23, [4, 2048], 2048, {"axis": -1}),
    ],
)
def test_stash_type_norms_keep_fp32_statistics(op, opset, shape, channels, attrs) -> None:
    """FP16 I/O with stash_type=1 is FP32 statistics on FP16-rounded inputs, one rounding.

    Inputs away from zero (mean 8, std 1, 2048 per group) make FP16 accumulation visibly wrong.
    """
    cand, params = _norm_candidate(op, opset, shape, channels, **attrs)
    x = (8 + np.random.default_rng(1).standard_normal(shape)).astype(np.float32)
    (y,) = _emulated_run(cand, {"x": x})
    x16 = x.astype(np.float16).astype(np.float64)
    groups = attrs.get("num_groups", 1)
    truth = _norm_numpy(op, x.astype(np.float64), params, _mean64, groups)
    fp32_stats = _norm_numpy(op, x16, params, _mean64, groups).astype(np.float16)
    fp16_stats = _norm_numpy(op, x16, params, _mean16, groups).astype(np.float16)
    # the emulated output is the FP32-statistics result (FP32 vs float64 math: rare 1-ulp ties)
    ulp = np.spacing(np.abs(fp32_stats)).astype(np.float64)
    assert np.all(np.abs(y - fp32_stats.astype(np.float64)) <= ulp)
    assert np.mean(y == fp32_stats.astype(np.float32)) > 0.99
    emulated_err = np.abs(y - truth).mean()
    model_err = np.abs(fp32_stats - truth).mean()
    assert emulated_err == pytest.approx(model_err, rel=0.01)
    # and none of FP16 accumulation's error
    with np.errstate(invalid="ignore"):
        assert not np.abs(fp16_stats - truth).mean() <= 5 * emulated_err  # NaN counts as worse


def _softmax_models() -> tuple[onnx.ModelProto, onnx.ModelProto, onnx.ModelProto]:
    """FP32 reference; FP16 MatMul → Softmax(FP16 I/O) → FP16 MatMul; the same with the Softmax
    wrapped in Cast→FP32 / Cast→FP16."""
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((64, 64)) / 2).astype(np.float32)
    w2 = (rng.standard_normal((64, 32)) / 8).astype(np.float32)
    io = (
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 32])],
    )
    f16 = TensorProto.FLOAT16

    def model(nodes, low: bool) -> onnx.ModelProto:
        dtype = f16 if low else TensorProto.FLOAT
        inits = [vm._tensor("w1", w1, dtype), vm._tensor("w2", w2, dtype)]
        return vm._model(helper.make_graph(nodes, "attention_like", *io, inits))

    ref = model(
        [
            helper.make_node("MatMul", ["x", "w1"], ["s"]),
            helper.make_node("Softmax", ["s"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "w2"], ["y"]),
        ],
        low=False,
    )
    head = [
        helper.make_node("Cast", ["x"], ["x16"], to=f16),
        helper.make_node("MatMul", ["x16", "w1"], ["s16"]),
    ]
    tail = [
        helper.make_node("MatMul", ["p16", "w2"], ["y16"]),
        helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
    ]
    low_io = model([*head, helper.make_node("Softmax", ["s16"], ["p16"], axis=-1), *tail], True)
    casts = [
        helper.make_node("Cast", ["s16"], ["s32"], to=TensorProto.FLOAT),
        helper.make_node("Softmax", ["s32"], ["p32"], axis=-1),
        helper.make_node("Cast", ["p32"], ["p16"], to=f16),
    ]
    wrapped = model([*head, *casts, *tail], True)
    return ref, low_io, wrapped


def test_softmax_with_low_io_equals_the_fp32_cast_variant() -> None:
    """ORT CUDA's Softmax accumulates in FP32 for FP16 I/O; emulate computes it that way,
    so the casts around a Softmax between FP16 MatMuls change nothing."""
    ref, low_io, wrapped = _softmax_models()
    x = np.random.default_rng(8).standard_normal((2, 16, 64)).astype(np.float32)
    a = validate(ref, low_io, provider="emulate", inputs={"x": x}, runs=0).output("y")
    b = validate(ref, wrapped, provider="emulate", inputs={"x": x}, runs=0).output("y")
    assert a.max_abs > 0 and a.mean_abs > 0
    for field_ in ("max_abs", "mean_abs", "max_rel"):
        assert getattr(a, field_) == pytest.approx(getattr(b, field_), rel=0.01), field_
    assert 1 - a.cosine == pytest.approx(1 - b.cosine, rel=0.01)
    # the two emulated graphs compute bit for bit the same numbers
    np.testing.assert_array_equal(
        _emulated_run(low_io, {"x": x})[0], _emulated_run(wrapped, {"x": x})[0]
    )


# ---------------------------------------------------------------- weights: never read, never lost
def test_external_weights_are_referenced_not_read(tmp_path: Path) -> None:
    """The copy is built without the data file: its initializers still point into it."""
    _, cand = vm.mlp_pair(TensorProto.FLOAT16)
    onnx.save(
        cand,
        tmp_path / "cand.onnx",
        save_as_external_data=True,
        location="cand.data",
        size_threshold=0,
    )
    graph_only = onnx.load(str(tmp_path / "cand.onnx"), load_external_data=False)
    before = graph_only.SerializeToString()
    (tmp_path / "cand.data").rename(tmp_path / "elsewhere.data")  # any read would fail
    emu = build_emulated_model(graph_only)
    assert graph_only.SerializeToString() == before  # names of the wrapped tensors put back
    inits = list(emu.model.graph.initializer)
    assert len(inits) == emu.upcast_initializers == 3
    for t in inits:
        assert t.name.endswith("__emu_low") and t.data_location == TensorProto.EXTERNAL
        assert {e.key: e.value for e in t.external_data}["location"] == "cand.data"
        assert not t.raw_data


def test_sparse_weights_are_densified_and_upcast() -> None:
    """A sparse FP16 initializer and a sparse Constant: onnx-ir has neither, ORT densifies both."""
    vals = np.array([1.5, 0.3333], np.float16)
    w = helper.make_sparse_tensor(
        numpy_helper.from_array(vals, "w"), numpy_helper.from_array(np.array([0, 3]), "wi"), [4]
    )
    c = helper.make_sparse_tensor(
        numpy_helper.from_array(vals[::-1].copy(), "c"),
        numpy_helper.from_array(np.array([[1], [2]]), "ci"),
        [4],
    )
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
        helper.make_node("Constant", [], ["c"], sparse_value=c),
        helper.make_node("Add", ["x16", "w"], ["a"]),
        helper.make_node("Add", ["a", "c"], ["b"]),
        helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT),
    ]
    g = helper.make_graph(
        nodes,
        "sparse",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        sparse_initializer=[w],
    )
    cand = vm._model(g)
    before = cand.SerializeToString()
    emu = build_emulated_model(cand)
    assert cand.SerializeToString() == before
    assert (emu.upcast_initializers, emu.retargeted_attributes) == (1, 1)
    assert emu.rounding_points == {"float16": 4}  # the Cast, the Constant, both Adds
    x = np.array([0.1, 0.2, 1 / 3, 1e-3], np.float32)
    (y,) = _emulated_run(cand, {"x": x})
    h = np.float16
    want = (x.astype(h) + np.array([1.5, 0, 0, 0.3333], h)) + np.array([0, 0.3333, 1.5, 0], h)
    np.testing.assert_array_equal(y, want.astype(np.float32))


def test_detector_rounds_each_low_value_once_and_nothing_else(tmp_path: Path) -> None:
    """The DBNet check, as a property: at O2 every FP16 value of the candidate is rounded
    exactly once, where it is produced (Conv, ConvTranspose, Resize, Add, Sigmoid, the casts to
    FP16); no value the candidate keeps in FP32 (BatchNormalization, its Relu) is rounded, and
    element moves (Concat) are not rounded again."""
    import amp_convert
    from amp_convert.validation.emulate import EXACT_OPS
    from models.detector import dbnet_detector

    onnx.save(dbnet_detector(), tmp_path / "det.onnx")
    amp_convert.convert_file(tmp_path / "det.onnx", tmp_path / "o2.onnx", level="O2")
    cand = onnx.load(str(tmp_path / "o2.onnx"))
    typed = onnx.shape_inference.infer_shapes(cand).graph
    low = {v.name for v in typed.value_info if v.type.tensor_type.elem_type == TensorProto.FLOAT16}
    low_outputs = {
        o for n in cand.graph.node if n.op_type not in EXACT_OPS for o in n.output if o in low
    }
    emu = build_emulated_model(cand)
    rounded = [
        n.name.removesuffix("__emu_up") for n in emu.model.graph.node if n.name.endswith("__emu_up")
    ]
    assert len(rounded) == len(set(rounded))  # once each
    init_names = {t.name for t in cand.graph.initializer}
    assert set(rounded) - init_names == low_outputs  # exactly the FP16 values, no FP32 one
    ops = {n.op_type for n in cand.graph.node for o in n.output if o in low_outputs}
    assert {"Conv", "ConvTranspose", "Resize", "Add", "Sigmoid", "Cast"} <= ops
    assert "BatchNormalization" not in ops
    concat = next(n for n in cand.graph.node if n.op_type == "Concat")
    assert concat.output[0] in low and concat.output[0] not in rounded
