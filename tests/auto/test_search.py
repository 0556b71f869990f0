"""--auto: models where O3 fails come back meeting the thresholds with only the responsible nodes
kept FP32; a model O3 already handles comes back as O3 after two ORT sessions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner

import amp_convert
from amp_convert import convert
from amp_convert.auto import auto_convert
from amp_convert.auto.graph import name_nodes
from amp_convert.commands.cli import cli
from amp_convert.core.precision import Precision
from models import overflow as ov
from models.big import write_big_model
from models.blocks import loop_rnn
from tests.helpers import FLOAT16, SessionCounter, node_by_name

pytestmark = pytest.mark.integration

CASES = {
    "reduce_sum": (ov.reduce_sum_overflow, "normal", None),
    "matmul": (ov.matmul_overflow, "normal", None),
    "exp": (ov.exp_overflow, "normal", None),
    "variance_overflow": (ov.hand_variance, "wide", ov.VARIANCE_OVERFLOW),
    "variance_cancellation": (ov.hand_variance, "offset", ov.VARIANCE_CANCELLATION),
    "if_body": (ov.if_exp_overflow, "normal", ["then/Exp", "then/ReduceSum", "then/Div"]),
}
SOFTMAX_BODY = ["body/Exp", "body/ReduceSum", "body/Div"]


def _validate(reference, candidate, feeds) -> amp_convert.ValidationReport:
    return amp_convert.validate(
        reference,
        candidate,
        provider="emulate",
        inputs=feeds,
        runs=0,
        thresholds={"min_cosine": 0.999, "max_nan": 0},
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_pins_only_the_responsible_nodes(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    builder, kind, expected = CASES[case]
    model, responsible = builder()
    expected = expected or responsible
    feeds = ov.calibration(model, kind)
    assert not _validate(model, amp_convert.convert(model, level="O3"), feeds).passed  # O3 fails
    counter = SessionCounter(monkeypatch)
    result, report = auto_convert(model, inputs=feeds)
    assert report.passed
    assert sorted(p.name for p in report.pinned) == sorted(expected)
    assert report.sessions == counter.count <= 5
    check = _validate(model, result, feeds)
    assert check.passed, check.outputs
    for name in expected:  # the pinned nodes compute in FP32 ...
        node = node_by_name(result, name)
        assert not any(a.name == "to" and a.i == FLOAT16 for a in node.attribute)
    conv = report.conversion
    assert conv is not None
    for d in conv.nodes:  # ... and every other float node is low
        if d.name not in expected and d.precision != "n/a" and not d.graph:
            assert d.precision == "low", d


def test_evidence_names_range_and_introduced_error() -> None:
    model, _ = ov.hand_variance()
    _, wide = auto_convert(model, inputs=ov.calibration(model, "wide"))
    mul = next(p for p in wide.pinned if p.name == "var/Mul")
    assert mul.reason == "range" and mul.round == 0 and mul.max_abs > 65504 / 2
    assert "margin 2" in mul.evidence
    _, offset = auto_convert(model, inputs=ov.calibration(model, "offset"))
    sub = next(p for p in offset.pinned if p.name == "center/Sub")
    assert sub.reason == "error" and sub.round == 1 and sub.introduced_error > 0.1
    mean = next(p for p in offset.pinned if p.name == "mean/ReduceMean")
    assert mean.round == 2 and "via center/Sub" in mean.evidence
    assert offset.sessions == 4 and offset.rounds == 3


def test_model_that_passes_at_o3_comes_back_as_o3_in_two_sessions(monkeypatch) -> None:
    model, _ = ov.mlp_ok()
    counter = SessionCounter(monkeypatch)
    result, report = auto_convert(model, inputs=ov.calibration(model))
    assert report.passed and report.pinned == [] and report.rounds == 1
    assert report.sessions == counter.count == 2
    o3 = amp_convert.convert(model, level="O3")
    assert result.SerializeToString() == o3.SerializeToString()
    assert report.low_nodes == report.float_nodes > 0
    assert report.low_weight_percent == 100.0


def test_loop_model_is_searched_through_its_body() -> None:
    model = loop_rnn()
    _result, report = auto_convert(model)
    assert report.passed and report.sessions == 2
    loop = next(d for d in report.conversion.nodes if d.op_type == "MatMul" and d.graph)
    assert loop.precision == "low"  # a node inside the Loop body went low
    assert any(t.op_type == "Loop" for t in report.trace)


def test_if_body_nodes_are_pinned_one_by_one_and_the_rest_stays_low() -> None:
    model, _ = ov.if_exp_overflow()
    result, report = auto_convert(model, inputs=ov.calibration(model))
    assert report.passed and report.sessions == 3
    assert [p.name for p in report.pinned] == ["then/Exp", "then/ReduceSum", "then/Div"]
    for p in report.pinned:  # narrowed inside the taken branch, not the whole If
        assert p.inside == "branch/If" and p.round == 1 and p.body_nodes == 0
        assert "inside branch/If (then_branch taken in 1 of 1 sample(s))" in p.evidence
    exp = report.pinned[0]
    assert exp.reason == "range" and exp.max_abs > 65504 and "margin 2" in exp.evidence
    decisions = {d.name: d.precision for d in report.conversion.nodes}
    assert decisions["head/MatMul"] == "low" and decisions["else/Mul"] == "low"
    assert decisions["then/Exp"] == "fp32" and decisions["then/Div"] == "fp32"
    assert "then/Exp [Exp] in branch/If: range" in report.summary()
    assert _validate(model, result, ov.calibration(model)).passed


def test_if_branches_taken_per_sample_are_all_analysed() -> None:
    model, _ = ov.if_exp_overflow()
    other = {**ov.calibration(model, seed=1), "use_softmax": np.array(False)}
    _, report = auto_convert(model, inputs=[ov.calibration(model), other])
    assert report.passed and [p.name for p in report.pinned] == CASES["if_body"][2]
    note = "(else_branch taken in 1 of 2 sample(s), then_branch taken in 1 of 2 sample(s))"
    assert note in report.pinned[0].evidence


def test_if_body_falls_back_to_the_whole_body_and_says_why(monkeypatch) -> None:
    from amp_convert.auto import bodies

    def fail(*a, **k):
        raise NotImplementedError("no such op")

    monkeypatch.setattr(bodies.BodyJudge, "_run", fail)
    model, _ = ov.if_exp_overflow()
    _, report = auto_convert(model, inputs=ov.calibration(model))
    assert report.passed
    (pin,) = report.pinned
    assert pin.name == "branch/If" and pin.body_nodes == 4 and pin.reason == "error"
    assert pin.inside == "" and pin.evidence.endswith(
        "whole body pinned: onnx.reference cannot run the body (no such op)"
    )
    decisions = {d.name: d.precision for d in report.conversion.nodes}
    assert decisions["head/MatMul"] == "low" and decisions["else/Mul"] == "fp32"


def _softmax_loop(kind: str, steps: int = 6, batch: int = 4, features: int = 16, classes: int = 32):
    """x -> MatMul (low) -> a Loop or Scan whose body computes a max-free softmax per step
    (Exp overflows FP16 inside the body), accumulates it (Add) and emits it halved (Mul)."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(7)
    w = nh.from_array((3.0 * rng.standard_normal((features, classes))).astype(np.float32), "W")
    acc0 = nh.from_array(np.zeros((batch, classes), np.float32), "acc0")
    axes = nh.from_array(np.array([-1], np.int64), "body/axes")
    half = nh.from_array(np.array(0.5, np.float32), "body/half")
    softmax = [
        h.make_node("Exp", ["x_t"], ["e"], name="body/Exp"),
        h.make_node("ReduceSum", ["e", "body/axes"], ["s"], name="body/ReduceSum", keepdims=1),
        h.make_node("Div", ["e", "s"], ["p"], name="body/Div"),
        h.make_node("Add", ["acc_in", "p"], ["acc_out"], name="body/Add"),
        h.make_node("Mul", ["p", "body/half"], ["halved"], name="body/Mul"),
    ]
    fvi = h.make_tensor_value_info
    main = [h.make_node("MatMul", ["x", "W"], ["logits"], name="head/MatMul")]
    if kind == "loop":
        nodes = [
            h.make_node("Gather", ["logits", "it"], ["x_t"], name="body/Gather", axis=0),
            *softmax,
            h.make_node("Identity", ["cond_in"], ["cond_out"], name="body/cond"),
        ]
        body = h.make_graph(
            nodes,
            "loop_body",
            [fvi("it", T.INT64, []), fvi("cond_in", T.BOOL, []), fvi("acc_in", T.FLOAT, None)],
            [
                fvi("cond_out", T.BOOL, []),
                fvi("acc_out", T.FLOAT, None),
                fvi("halved", T.FLOAT, None),
            ],
            [axes, half],
        )
        main += [
            h.make_node("Shape", ["x"], ["shape"], name="trips/Shape"),
            h.make_node("Gather", ["shape", "idx0"], ["trips"], name="trips/Gather", axis=0),
            h.make_node(
                "Loop", ["trips", "", "acc0"], ["acc", "halves"], name="steps/Loop", body=body
            ),
        ]
        inits = [w, acc0, nh.from_array(np.array(0, np.int64), "idx0")]
    else:
        body = h.make_graph(
            softmax,
            "scan_body",
            [fvi("acc_in", T.FLOAT, None), fvi("x_t", T.FLOAT, None)],
            [fvi("acc_out", T.FLOAT, None), fvi("halved", T.FLOAT, None)],
            [axes, half],
        )
        main.append(
            h.make_node(
                "Scan",
                ["acc0", "logits"],
                ["acc", "halves"],
                name="steps/Scan",
                body=body,
                num_scan_inputs=1,
            )
        )
        inits = [w, acc0]
    graph = h.make_graph(
        main,
        f"softmax_{kind}",
        [fvi("x", T.FLOAT, [steps, batch, features])],
        [fvi("acc", T.FLOAT, [batch, classes]), fvi("halves", T.FLOAT, [steps, batch, classes])],
        inits,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    x = np.random.default_rng(0).standard_normal((steps, batch, features)).astype(np.float32)
    return model, {"x": x}


@pytest.mark.parametrize("kind", ["loop", "scan"])
def test_loop_and_scan_body_nodes_are_pinned_one_by_one(kind: str, monkeypatch) -> None:
    model, feeds = _softmax_loop(kind)
    assert not _validate(model, amp_convert.convert(model, level="O3"), feeds).passed
    counter = SessionCounter(monkeypatch)
    result, report = auto_convert(model, inputs=feeds)
    assert report.passed and report.sessions == counter.count == 3
    assert [p.name for p in report.pinned] == SOFTMAX_BODY
    parent = f"steps/{kind.title()}"
    for p in report.pinned:
        assert p.inside == parent and f"inside {parent} (6 iteration(s) over 1 sample(s))" in (
            p.evidence
        )
    decisions = {d.name: d.precision for d in report.conversion.nodes}
    assert decisions["head/MatMul"] == decisions["body/Add"] == decisions["body/Mul"] == "low"
    assert all(decisions[n] == "fp32" for n in SOFTMAX_BODY)
    assert _validate(model, result, feeds).passed


def test_several_samples_all_must_pass() -> None:
    model, _ = ov.exp_overflow()
    samples = [ov.calibration(model, seed=s) for s in range(3)]
    _, report = auto_convert(model, inputs=samples)
    assert report.samples == 3 and report.passed
    assert report.runs == 6  # one reference and one candidate run per sample (one batch each)


def test_unmeetable_thresholds_are_reported(monkeypatch) -> None:
    model, _ = ov.mlp_ok()
    _, report = auto_convert(model, inputs=ov.calibration(model), atol=0.0, rtol=0.0, max_rounds=2)
    assert not report.passed
    assert any("not met" in w or "cannot be met" in w for w in report.warnings)
    assert "NOT met" in report.summary()


def test_external_data_model(tmp_path) -> None:
    info = write_big_model(tmp_path / "big.onnx", target_bytes=12_000_000, width=256)
    result, report = auto_convert(info.path, inputs={"x": np.ones((2, 256), np.float32)})
    assert report.passed and report.sessions == 2
    assert report.low_weight_percent == 100.0
    out = tmp_path / "out.onnx"
    amp_convert.files.io.save_model(result, out, external=True)
    proto = onnx.load(str(out), load_external_data=False)
    assert proto.graph.initializer[0].data_type == FLOAT16
    assert proto.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL


def test_memory_budget_splits_fetches_into_batches() -> None:
    model, _ = ov.hand_variance()
    feeds = ov.calibration(model, "offset")
    _, small = auto_convert(model, inputs=feeds, memory_budget=4096)
    _, big = auto_convert(model, inputs=feeds)
    assert [p.name for p in small.pinned] == [p.name for p in big.pinned]
    assert small.runs > big.runs and small.sessions == big.sessions
    # over the budget the reference values are cached on disk, read back identical
    assert [t.first_error for t in small.trace] == [t.first_error for t in big.trace]


def test_large_weights_reach_ort_memory_mapped(tmp_path, monkeypatch) -> None:
    """No in-memory copy of the weights: the reference uses the model's own data file, the
    candidate is written to a temporary one, and ORT maps both without prepacked copies."""
    from amp_convert.auto import search as search_module
    from amp_convert.auto import sessions as sessions_module
    from amp_convert.auto import staging

    info = write_big_model(tmp_path / "big.onnx", target_bytes=12_000_000, width=256)
    monkeypatch.setattr(staging, "SPILL_BYTES", 1 << 20)
    staged: list[staging.Staged] = []

    def spy(model, label, **kw):
        staged.append(staging.stage(model, label, **kw))
        return staged[-1]

    monkeypatch.setattr(search_module, "stage", spy)
    monkeypatch.setattr(sessions_module, "stage", spy)
    options: list[tuple[str, bool]] = []
    real = ort.InferenceSession

    class Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, model, so, **k):
            options.append(
                (so.get_session_config_entry("session.disable_prepacking"), so.enable_cpu_mem_arena)
            )
            super().__init__(model, so, **k)

    monkeypatch.setattr(ort, "InferenceSession", Recording)
    _, report = auto_convert(info.path, inputs={"x": np.ones((2, 256), np.float32)})
    assert report.passed and report.sessions == 2 and len(staged) == 2
    ref, cand = staged
    assert ref.mapped and ref.source.base_dir == str(tmp_path.resolve())
    assert ref.proto.ByteSize() < 100_000  # the graph only: weights stay in big.onnx.data
    assert cand.mapped and cand.proto.ByteSize() < 100_000
    assert cand.proto.graph.initializer[0].data_type == FLOAT16
    assert not Path(cand.source.base_dir).exists()  # its temporary folder is gone
    assert options == [("1", False), ("1", True)]  # no prepacking; arena for the candidate only


def test_unnamed_nodes_get_unique_names_and_pins_are_exact_names() -> None:
    import onnx_ir as ir

    model, _ = ov.mlp_ok()
    for n in model.graph.node[:2]:
        n.name = ""
    work = ir.serde.deserialize_model(model)
    assert name_nodes(work) == 2
    names = [n.name for n in work.graph]
    assert len(set(names)) == len(names) and all(names)
    # pins are a typed set of exact names: "a.b" pins that node, not "aXb" (no regex)
    pinned = names[0]
    _, conv = convert(work, level="O3", pinned_nodes=frozenset({pinned}), return_report=True)
    assert conv.value_map.precision(pinned) == Precision.FP32
    assert all(
        conv.value_map.precision(n) == Precision.LOW
        for n in names[1:]
        if conv.value_map.precision(n) is not None
    )


def test_cli_auto_writes_model_report_and_html(tmp_path) -> None:
    model, _ = ov.exp_overflow()
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    np.savez(tmp_path / "a.npz", **ov.calibration(model, seed=0))
    np.savez(tmp_path / "b.npz", **ov.calibration(model, seed=1))
    args = [
        str(src),
        "--auto",
        "--inputs",
        str(tmp_path / "a.npz"),
        "--inputs",
        str(tmp_path / "b.npz"),
        "--provider",
        "emulate",
        "--report",
        str(tmp_path / "r.json"),
        "--html",
        str(tmp_path / "r.html"),
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "thresholds met" in res.output and "softmax/Exp [Exp]: range" in res.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["passed"] and data["samples"] == 2 and data["sessions"] == 2
    assert {p["name"] for p in data["pinned"]} == {
        "softmax/Exp",
        "softmax/ReduceSum",
        "softmax/Div",
    }
    assert data["level"] == "O3"
    assert (tmp_path / "m.fp16.onnx").exists()
    assert "<svg" in (tmp_path / "r.html").read_text()


def test_cli_auto_unmet_writes_nothing_unless_forced(tmp_path) -> None:
    model, _ = ov.mlp_ok()
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    base = [str(src), "--auto", "--provider", "emulate", "--atol", "0", "--no-keep-io-types"]
    res = CliRunner().invoke(cli, base)
    assert res.exit_code == 1
    assert "cannot be met" in res.output and not (tmp_path / "m.fp16.onnx").exists()
    res = CliRunner().invoke(cli, [*base, "--force-write"])
    assert res.exit_code == 1 and (tmp_path / "m.fp16.onnx").exists()


def test_cli_auto_rejects_cpu_provider(tmp_path) -> None:
    model, _ = ov.mlp_ok()
    onnx.save(model, tmp_path / "m.onnx")
    res = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), "--auto", "--provider", "cpu"])
    assert res.exit_code == 2 and "--auto needs --provider emulate or cuda" in res.output
