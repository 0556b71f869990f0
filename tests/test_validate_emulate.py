"""The emulate provider rounds like FP16/BF16 hardware: overflow, BF16, control flow, attributes."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from models import validation_models as vm  # noqa: E402

ort = pytest.importorskip("onnxruntime")

from amp_convert.errors import ValidationError  # noqa: E402
from amp_convert.validate import build_emulated_model, validate  # noqa: E402


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
        helper.make_node("RandomUniformLike", ["x16"], ["r"], dtype=TensorProto.FLOAT16,
                         low=0.0, high=0.0),
        helper.make_node("Add", ["x16", "r"], ["y16"]),
        helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
    ]  # fmt: skip
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])],
    )  # fmt: skip
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
        "ref", *io, [vm._tensor("w", w)],
    )  # fmt: skip
    cand_g = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
            helper.make_node(op_type, ["x16", "w"], ["m"], domain=op_domain),
            helper.make_node("Relu", ["m"], ["r"]),
            helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT),
        ],
        "cand", *io, [vm._tensor("w", w, TensorProto.FLOAT16)],
    )  # fmt: skip
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
    from amp_convert.validate import runtime

    ref, cand = vm.mlp_pair(TensorProto.FLOAT16)
    before = cand.SerializeToString()
    small = validate(ref, cand, provider="emulate", runs=0).output("y")
    monkeypatch.setattr(runtime, "_PROTO_LIMIT", 0)
    for provider in ("emulate", "cpu"):
        big = validate(ref, cand, provider=provider, runs=1, warmup=0).output("y")
        assert big.max_abs > 0
    assert validate(ref, cand, provider="emulate", runs=0).output("y").max_abs == small.max_abs
    assert cand.SerializeToString() == before  # the caller's proto is not rewritten
