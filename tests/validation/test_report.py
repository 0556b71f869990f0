"""Metrics, thresholds, the report formats (JSON, JUnit, table) and assert_converted_close."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

import amp_convert
from models import validation_models as vm
from tests.graphs import pow_model

pytest.importorskip("onnxruntime")

from amp_convert.errors import ValidationError
from amp_convert.testing import assert_converted_close
from amp_convert.validation import REL_FLOOR, SCHEMA_VERSION, Thresholds, validate
from amp_convert.validation.metrics import compare_output

pytestmark = pytest.mark.integration


def _argmin_candidate():
    """multi_io candidate whose int64 'pred' output is deliberately wrong (ArgMin)."""
    ref, cand = vm.multi_io_pair()
    next(n for n in cand.graph.node if n.op_type == "ArgMax").op_type = "ArgMin"
    return ref, cand


# ------------------------------------------------------------------------------ metrics


def test_float_metrics() -> None:
    ref = np.array([[1.0, -2.0, 0.0, 4.0]], np.float32)
    cand = np.array([[1.1, -2.0, 1e-7, 3.0]], np.float32)
    o = compare_output("y", ref, cand, Thresholds())
    assert o.kind == "float" and o.status == "not_judged" and not o.passed and not o.failed
    assert o.max_abs == pytest.approx(1.0)
    assert o.mean_abs == pytest.approx((0.1 + 0 + 1e-7 + 1.0) / 4, rel=1e-5)
    assert o.max_rel == pytest.approx(max(0.1, 1e-7 / REL_FLOOR, 0.25), rel=1e-5)
    cos = float(np.dot(ref.ravel(), cand.ravel()) / np.linalg.norm(ref) / np.linalg.norm(cand))
    assert o.cosine == pytest.approx(cos, rel=1e-6)
    assert o.top1 == 1.0  # argmax is index 3 in both


def test_nonfinite_counting() -> None:
    ref = np.array([1.0, -np.inf, np.nan, 2.0, 3.0], np.float32)
    cand = np.array([1.0, -np.inf, np.nan, np.inf, np.nan], np.float32)
    o = compare_output("y", ref, cand, Thresholds())
    assert (o.reference_nan, o.reference_inf, o.candidate_nan, o.candidate_inf) == (1, 1, 2, 2)
    assert o.nonfinite == 2  # only the new inf and the new nan
    assert o.max_abs == math.inf
    # the two new non-finite values count as mismatches of the reference's RMS size (s^2 = 14/3)
    assert o.cosine == pytest.approx(1.0 / (1.0 + 2 * 14 / 3))
    assert o.cosine_finite == 1.0  # only position 0 is finite on both sides
    # new NaN/Inf fail with no threshold at all
    assert o.status == "fail" and "2 new NaN/Inf" in o.failures[0] and "default" in o.failures[0]
    ok = compare_output("y", ref, cand, Thresholds(atol=1.0, max_nan=2))
    assert ok.passed, ok.failures
    bad = compare_output("y", ref, cand, Thresholds(atol=1.0))  # max_nan defaults to 0
    assert not bad.passed and "2 new NaN/Inf" in bad.failures[0]
    same = compare_output("y", ref, ref.copy(), Thresholds(atol=0.0))
    assert same.passed and same.nonfinite == 0 and same.max_abs == 0.0


def test_tolerance_rule_is_elementwise() -> None:
    ref = np.array([100.0, 0.0], np.float32)
    cand = np.array([101.0, 0.5], np.float32)
    # |d| <= atol + rtol*|ref|: 1 <= 0.5 + 0.01*100 and 0.5 <= 0.5 + 0
    assert compare_output("y", ref, cand, Thresholds(atol=0.5, rtol=0.01)).passed
    o = compare_output("y", ref, cand, Thresholds(atol=0.4, rtol=0.01))
    assert not o.passed and "1 of 2 elements exceed" in o.failures[0] and "[1]" in o.failures[0]
    assert not compare_output("y", ref, cand, Thresholds(rtol=0.5)).passed  # 0.5 > 0.5*0
    c = compare_output("y", ref, cand, Thresholds(min_cosine=0.9999))
    assert c.passed and 0.9999 < c.cosine < 0.99999
    assert not compare_output("y", ref, cand, Thresholds(min_cosine=0.99999)).passed


def test_exact_outputs_and_shape_mismatch() -> None:
    ref = np.array([1, 2, 3], np.int64)
    o = compare_output("ids", ref, np.array([1, 5, 3], np.int64), Thresholds())
    assert o.kind == "exact" and o.mismatches == 1 and o.max_abs == 3
    assert o.status == "not_judged" and not o.failed
    o = compare_output("ids", ref, np.array([1, 5, 3], np.int64), Thresholds(atol=10))
    assert not o.passed and "1 of 3 elements differ" in o.failures[0]
    b = compare_output("m", np.array([True, False]), np.array([True, True]), Thresholds(atol=0))
    assert b.mismatches == 1 and not b.passed
    s = compare_output("y", np.zeros((2, 3)), np.zeros((3, 2)), Thresholds())
    assert not s.passed and "shape mismatch" in s.failures[0]


def test_thresholds_coerce_and_overrides() -> None:
    t = Thresholds.coerce({"atol": 1e-2, "per_output": {"b": {"atol": 0.5, "max_nan": 3}}})
    assert t.for_output("a") == Thresholds(atol=1e-2)
    assert t.for_output("b") == Thresholds(atol=0.5, max_nan=3)
    with pytest.raises(ValidationError, match="unknown key atl"):
        Thresholds.coerce({"atl": 1})
    with pytest.raises(ValidationError, match="max_nan must be a non-negative integer"):
        Thresholds.coerce({"max_nan": 1.5})


# ------------------------------------------------------------------------------ validate


def test_thresholds_pass_and_fail_per_output() -> None:
    ref, cand = vm.multi_io_pair()
    report = validate(ref, cand, provider="emulate", runs=0, report_only=True)
    # report only: nothing failed, but nothing was judged either, so it is not a pass
    assert report.verdict == "not_judged" and not report.passed and not report.failed
    assert not any(o.checked for o in report.outputs)
    logits = report.output("logits").max_abs
    assert 0 < logits < 0.1
    ok = validate(ref, cand, provider="emulate", runs=0, thresholds={"atol": 0.1})
    assert ok.passed and all(o.checked for o in ok.outputs)
    tight = {"atol": 0.1, "per_output": {"logits": {"atol": logits / 2}}}
    bad = validate(ref, cand, provider="emulate", runs=0, thresholds=tight)
    assert not bad.passed and bad.failed_outputs == ["logits"]
    with pytest.raises(ValidationError, match="unknown output 'logit'"):
        validate(ref, cand, provider="emulate", runs=0, thresholds={"per_output": {"logit": {}}})


def test_int64_output_compared_exactly() -> None:
    ref, cand = _argmin_candidate()
    report = validate(ref, cand, provider="emulate", runs=0, thresholds={"min_cosine": 0.99})
    pred = report.output("pred")
    assert pred.kind == "exact" and pred.mismatches > 0 and not pred.passed
    assert report.output("logits").passed and report.output("is_padding").passed
    assert report.failed_outputs == ["pred"]


def test_latency_and_speedup() -> None:
    ref, cand = vm.mlp_pair(TensorProto.FLOAT16)
    report = validate(ref, cand, provider="cpu", runs=5, warmup=1)
    r, c = report.reference_latency, report.candidate_latency
    assert r.runs == c.runs == 5
    assert 0 < r.min_ms <= r.median_ms <= r.p90_ms
    assert report.speedup == pytest.approx(r.median_ms / c.median_ms)
    assert validate(ref, cand, provider="cpu", runs=0).reference_latency is None


# ------------------------------------------------------------------------------ formats


def test_json_report(tmp_path: Path) -> None:
    ref, cand = vm.overflow_pair()
    report = validate(ref, cand, provider="emulate", runs=2, warmup=0, thresholds={"atol": 0.1})
    path = tmp_path / "r.json"
    report.to_json(path)
    d = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict {c}"))
    assert d["schema_version"] == SCHEMA_VERSION == 2
    assert d["passed"] is False and d["verdict"] == "fail"
    assert d["provider"] == {
        "requested": "emulate",
        "used": "emulate",
        "ort_providers": ["CPUExecutionProvider"],
        "onnxruntime_version": report.onnxruntime_version,
        "graph_optimizations": "default (the emulated candidate: disabled)",
        "options": {},  # CUDA provider options (--cuda-option): none off CUDA
    }
    assert d["inputs"]["dims"] == {"batch": 1} and d["inputs"]["shapes"] == {"x": [1, 8]}
    (y,) = d["outputs"]
    o = report.output("y")
    assert y["name"] == "y" and y["max_abs"] == "inf" and y["candidate_inf"] == o.candidate_inf
    assert y["mean_abs"] == "inf" and y["cosine"] == pytest.approx(o.cosine)
    assert y["thresholds"]["atol"] == 0.1 and y["passed"] is False and y["failures"]
    assert y["status"] == "fail" and y["nonfinite"] > 0
    assert y["cosine_finite"] == pytest.approx(o.cosine_finite) and o.cosine < o.cosine_finite
    lat = d["latency"]
    assert lat["runs"] == 2 and lat["speedup"] == pytest.approx(report.speedup)
    assert set(lat["reference"]) == {"median_ms", "p90_ms", "mean_ms", "min_ms", "runs"}
    assert d["emulation"]["rounding_points"] == {"float16": 5}
    assert any("emulate" in w for w in d["warnings"])


def test_junit_report(tmp_path: Path) -> None:
    ref, cand = _argmin_candidate()
    report = validate(ref, cand, provider="emulate", runs=0, thresholds={"atol": 0.1})
    path = tmp_path / "r.xml"
    report.to_junit(path)
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "1"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"logits", "pred", "is_padding"}
    failure = cases["pred"].find("failure")
    mismatches = report.output("pred").mismatches
    elements = report.output("pred").elements  # batch x the default sequence length
    assert f"{mismatches} of {elements} elements differ" in failure.get("message")
    assert cases["logits"].find("failure") is None
    assert "max_abs=" in cases["logits"].find("system-out").text


def test_table() -> None:
    ref, cand = vm.multi_io_pair()
    # logits are [batch, seq, vocab]: rank 3, so top-1 agreement is shown only when asked for
    report = validate(
        ref,
        cand,
        provider="cpu",
        runs=2,
        warmup=0,
        dims={"seq": 4},
        top1=["logits"],
        report_only=True,
    )
    table = report.format_table()
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["output", "dtype", "shape", "max_abs"]
    assert lines[1].startswith("logits") and "top1" in lines[1]
    assert lines[2].startswith("pred") and "exact: 0 diff" in lines[2]
    assert "speedup" in table and "provider: cpu" in table
    assert "dims: batch=1, seq=4" in table
    assert "warning: provider cpu: ONNX Runtime runs FP16 nodes in FP32" in table
    assert lines[-1].startswith("result: NOT JUDGED (--report-only: no thresholds")
    assert "PASS" not in table


# ------------------------------------------------------------------------------ testing helper


def test_assert_converted_close() -> None:
    ref, cand = vm.mlp_pair(TensorProto.FLOAT16)
    report = assert_converted_close(ref, cand, provider="emulate")
    assert report.passed and report.reference_latency is None
    over_ref, over_cand = vm.overflow_pair()
    with pytest.raises(AssertionError) as err:
        assert_converted_close(over_ref, over_cand, provider="emulate")
    msg = str(err.value)
    assert "output  dtype" in msg and "new NaN/Inf" in msg and "result: FAIL" in msg
    with pytest.raises(AssertionError, match="elements exceed atol"):
        assert_converted_close(ref, cand, provider="emulate", atol=1e-6, rtol=0)
    # per-output overrides through thresholds= win over the keyword defaults
    assert_converted_close(
        ref,
        cand,
        provider="emulate",
        atol=1e-6,
        rtol=0,
        thresholds={"per_output": {"y": {"atol": 1}}},
    )


# ------------------------------------------------------------------ non-finite honesty


def test_all_inf_candidate_is_never_cosine_1_or_pass(tmp_path: Path) -> None:
    """Every value overflows to inf; the reference is finite everywhere."""
    ref, cand = vm.overflow_pair()
    x = np.full((8, 8), 10.0, np.float32)  # (1000*10)^2 = 1e8 > 65504 everywhere
    report = validate(ref, cand, provider="emulate", inputs={"x": x}, runs=0)
    y = report.output("y")
    assert y.nonfinite == y.candidate_inf == 64 and y.reference_inf == 0
    assert y.cosine == 0.0 and y.cosine_finite is None  # no finite pair left to compare
    assert y.top1 == 0.0  # [8, 8] looks like logits; rows holding new inf never agree
    assert y.status == "fail" and not y.passed
    assert report.verdict == "fail" and not report.passed
    table = report.format_table()
    assert "PASS" not in table and "1.000000" not in table and "result: FAIL" in table
    path = tmp_path / "r.json"
    report.to_json(path)
    d = json.loads(path.read_text())
    assert d["passed"] is False and d["verdict"] == "fail"
    assert d["outputs"][0]["nonfinite"] == 64 and d["outputs"][0]["passed"] is False
    assert d["outputs"][0]["cosine"] == 0.0 and d["outputs"][0]["cosine_finite"] is None
    # an explicit allowance is the only way to let them through, and then it is a pass
    allowed = validate(
        ref, cand, provider="emulate", inputs={"x": x}, runs=0, thresholds={"max_nan": 64}
    )
    assert allowed.passed and allowed.output("y").cosine == 0.0


def test_cosine_counts_each_nonfinite_mismatch() -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(1000).astype(np.float32)
    cand = ref.copy()
    cand[:10] = np.inf  # 1% of positions
    o = compare_output("y", ref, cand, Thresholds(min_cosine=0.999))
    s2 = float(np.mean(ref.astype(np.float64) ** 2))
    rest = ref[10:].astype(np.float64)
    want = rest @ rest / (rest @ rest + 10 * s2)
    assert o.cosine == pytest.approx(want, rel=1e-9) and o.cosine < 0.995
    assert o.cosine_finite == pytest.approx(1.0)
    assert o.failures[0].startswith(f"cosine {o.cosine:.6f} < min_cosine 0.999")
    # identical non-finite values (a masked -inf logit in both) are agreement, not mismatch
    masked = ref.copy()
    masked[:10] = -np.inf
    same = compare_output("y", masked, masked.copy(), Thresholds())
    assert same.nonfinite == 0 and same.cosine == 1.0 and same.status == "not_judged"


# ------------------------------------------------------------------ top-1


def test_top1_only_for_class_logits_or_when_asked() -> None:
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((4, 10)).astype(np.float32)
    assert compare_output("p", logits, logits, Thresholds()).top1 == 1.0
    prob_map = rng.random((1, 1, 64, 64)).astype(np.float32)
    assert compare_output("m", prob_map, prob_map, Thresholds()).top1 is None
    tokens = rng.standard_normal((1, 4, 5)).astype(np.float32)
    assert compare_output("t", tokens, tokens, Thresholds()).top1 is None
    assert compare_output("t", tokens, tokens, Thresholds(), top1=True).top1 == 1.0
    one_class = rng.standard_normal((4, 1)).astype(np.float32)
    assert compare_output("s", one_class, one_class, Thresholds()).top1 is None
    assert compare_output("p", logits, logits, Thresholds(), top1=False).top1 is None


def test_top1_option_names_outputs() -> None:
    ref, cand = vm.multi_io_pair()
    plain = validate(ref, cand, provider="emulate", runs=0)
    assert plain.output("logits").top1 is None  # [batch, seq, vocab]: not class logits
    asked = validate(ref, cand, provider="emulate", runs=0, top1=["logits", "pred"])
    assert asked.output("logits").top1 is not None and asked.output("pred").top1 is None
    assert any(w.startswith("top1 not computed for pred") for w in asked.warnings)
    with pytest.raises(ValidationError, match="top1 for unknown output 'logit'"):
        validate(ref, cand, provider="emulate", runs=0, top1=["logit"])


# ---------------------------------------------------------------- validation odds and ends
def test_infinite_max_nan_is_a_validation_error() -> None:
    from amp_convert.errors import ValidationError
    from amp_convert.validation.metrics import Thresholds

    with pytest.raises(ValidationError, match="max_nan must be a number"):
        Thresholds.coerce({"max_nan": float("inf")})


def test_assert_converted_close_refuses_to_judge_nothing() -> None:
    from amp_convert.testing import assert_converted_close

    model = pow_model(2.0)
    with pytest.raises(ValueError, match="at least one threshold"):
        assert_converted_close(
            model, model, atol=None, rtol=None, min_cosine=None, max_nan=None, provider="emulate"
        )


def test_validate_function_does_not_hide_its_package() -> None:
    """`amp_convert.validate` is the function; the package is `amp_convert.validation`."""
    import importlib

    core = importlib.import_module("amp_convert.validation.core")
    assert amp_convert.validate is core.validate
    exec("import amp_convert.validation.core as c", {})  # the plain import statement works
