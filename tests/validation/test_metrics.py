"""Verdicts that say what was compared (STRING and empty outputs, scale, thresholds).

A STRING output is compared exactly (never a traceback read as "accuracy failed"); an output
with nothing to compare is never a PASS; nonsense thresholds are refused; a scale change that
cosine cannot see is reported as a ratio of norms.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert.commands.cli import cli
from amp_convert.errors import ValidationError
from amp_convert.validation.metrics import Thresholds, compare_output
from tests.helpers import one_line_error

pytestmark = pytest.mark.integration

W = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def save(nodes, inputs, outputs, path: Path, inits=()) -> Path:
    graph = helper.make_graph(
        nodes, "g", inputs, outputs, [numpy_helper.from_array(W, "w"), *inits]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def fin(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def labels_model(path: Path) -> Path:
    """y = x @ w, and a STRING output s (class labels from a Constant)."""
    labels = helper.make_tensor("labels", TensorProto.STRING, [2], [b"cat", b"dog"])
    return save(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
            helper.make_node("Constant", [], ["l"], value=labels, name="k"),
            helper.make_node("Identity", ["l"], ["s"], name="id"),
        ],
        [fin("x", [1, 8])],
        [fin("y", [1, 8]), helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
        path,
    )


def scaled_model(path: Path, scale: float) -> Path:
    s = numpy_helper.from_array(np.array(scale, np.float32), "scale")
    return save(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Mul", ["m", "scale"], ["y"], name="mul"),
        ],
        [fin("x", [1, 8])],
        [fin("y", [1, 8])],
        path,
        [s],
    )


VALIDATE = ("--provider", "emulate", "--runs", "0")


# ------------------------------------------------------------------ STRING outputs


def test_validate_compares_a_string_output_exactly(tmp_path: Path) -> None:
    src = labels_model(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    amp_convert.convert_file(src, out)
    result = invoke("validate", src, out, *VALIDATE, "--atol", "1e-2")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("s "))
    assert "exact: 0 diff" in row and row.endswith("PASS")


def test_convert_validate_and_auto_handle_a_string_output(tmp_path: Path) -> None:
    src = labels_model(tmp_path / "m.onnx")
    result = invoke(src, "-o", tmp_path / "v.onnx", "--validate", *VALIDATE, "--atol", "1e-2")
    assert result.exit_code == 0, result.output
    assert "result: PASS" in result.output
    result = invoke(src, "--auto", "-o", tmp_path / "a.onnx", "--provider", "emulate")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "a.onnx").exists()


def test_string_outputs_that_differ_fail_exactly() -> None:
    res = compare_output(
        "s", np.array(["a", "b"], object), np.array(["a", "c"], object), Thresholds(atol=1.0)
    )
    assert res.kind == "exact" and res.mismatches == 1 and res.status == "fail"


# ------------------------------------------------------------------ nothing compared, no PASS


def test_empty_output_is_not_a_pass(tmp_path: Path) -> None:
    src = save(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [fin("x", [0, 8])],
        [fin("y", [0, 8])],
        tmp_path / "z.onnx",
    )
    out = tmp_path / "o.onnx"
    amp_convert.convert_file(src, out)
    result = invoke("validate", src, out, *VALIDATE, "--atol", "1e-2")
    assert result.exit_code == 0, result.output
    assert "result: PASS" not in result.output and "NOT JUDGED" in result.output
    assert "y: 0 elements, nothing compared" in result.output


def test_all_nan_reference_is_not_a_pass() -> None:
    ref = np.full((2, 3), np.nan, np.float32)
    res = compare_output("y", ref, ref.copy(), Thresholds(min_cosine=0.999))
    assert res.status == "skipped"


def test_auto_refuses_a_reference_with_nothing_to_compare(tmp_path: Path) -> None:
    """--auto said "thresholds met" on an all-NaN reference."""
    nan = numpy_helper.from_array(np.array(np.nan, np.float32), "nan")
    src = save(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Mul", ["m", "nan"], ["y"], name="mul"),
        ],
        [fin("x", [1, 8])],
        [fin("y", [1, 8])],
        tmp_path / "n.onnx",
        [nan],
    )
    result = invoke(src, "--auto", "-o", tmp_path / "a.onnx", "--provider", "emulate")
    assert "nothing to compare" in one_line_error(result)
    assert not (tmp_path / "a.onnx").exists()


# ------------------------------------------------------------------ thresholds


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--rtol", "inf", "finite"),
        ("--atol", "nan", "finite"),
        ("--min-cosine", "nan", "finite"),
        ("--min-cosine", "2", "at most 1"),
        ("--min-cosine", "y:1.5", "at most 1"),
    ],
)
def test_nonsense_thresholds_are_refused(tmp_path: Path, flag, value, message) -> None:
    src = scaled_model(tmp_path / "m.onnx", 1.0)
    line = one_line_error(invoke("validate", src, src, *VALIDATE, flag, value))
    assert message in line


@pytest.mark.parametrize(("key", "value"), [("rtol", float("inf")), ("min_cosine", 2.0)])
def test_api_refuses_nonsense_thresholds(key: str, value: float) -> None:
    with pytest.raises(ValidationError):
        Thresholds.coerce({key: value})


# ------------------------------------------------------------------ scale cosine cannot see


def test_a_scale_change_is_reported_as_a_ratio_of_norms(tmp_path: Path) -> None:
    ref = scaled_model(tmp_path / "r.onnx", 1.0)
    cand = scaled_model(tmp_path / "c.onnx", 15000.0)
    report_path = tmp_path / "v.json"
    result = invoke(
        "validate", ref, cand, *VALIDATE, "--min-cosine", "0.999", "--report", report_path
    )
    assert result.exit_code == 0, result.output  # cosine alone passes: it ignores scale
    assert "y: norms differ: ||candidate|| / ||reference|| = 1.5e+04" in result.output
    data = json.loads(report_path.read_text())
    assert data["outputs"][0]["norm_ratio"] == pytest.approx(15000.0, rel=1e-3)
    failed = invoke("validate", ref, cand, *VALIDATE, "--rtol", "0.01", "-q")
    assert failed.exit_code == 1 and "norms differ" in failed.output


def test_equal_norms_say_nothing(tmp_path: Path) -> None:
    ref = scaled_model(tmp_path / "r.onnx", 1.0)
    result = invoke("validate", ref, ref, *VALIDATE, "--min-cosine", "0.999")
    assert result.exit_code == 0 and "norms differ" not in result.output


# ------------------------------------------------ tolerances on an error statistic, mismatch share


def _pair_arrays(n: int = 1000, bad: int = 3, size: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    ref = rng.random(n).astype(np.float32)
    cand = ref + rng.normal(0, 1e-4, n).astype(np.float32)
    cand[:bad] += size  # a few elements far off, as a steep edge's pixels are
    return ref, cand


def test_max_mismatch_bounds_the_share_of_elements_past_the_elementwise_bound() -> None:
    from amp_convert.validation.metrics import Thresholds, compare_output

    ref, cand = _pair_arrays(bad=3)
    strict = compare_output("maps", ref, cand, Thresholds(atol=1e-2, rtol=1e-2))
    assert strict.failed and strict.mismatch_fraction == pytest.approx(0.003)
    loose = compare_output("maps", ref, cand, Thresholds(atol=1e-2, rtol=1e-2, max_mismatch=0.005))
    assert loose.passed
    over = compare_output("maps", ref, cand, Thresholds(atol=1e-2, rtol=1e-2, max_mismatch=0.002))
    assert over.failed and "more than max_mismatch 0.002" in over.failures[0]


@pytest.mark.parametrize(
    ("stat", "passes"),
    [("max", False), ("p99.9", False), ("p99", True), ("median", True), ("mean", True)],
)
def test_error_stat_checks_a_statistic_of_the_error(stat: str, passes: bool) -> None:
    """S(|cand - ref|) <= atol + rtol * S(|ref|): 3 elements of 1000 off by 0.05."""
    from amp_convert.validation.metrics import Thresholds, compare_output

    ref, cand = _pair_arrays(bad=3)
    r = compare_output("maps", ref, cand, Thresholds(atol=1e-2, error_stat=stat))
    assert r.passed is passes and r.error_stat_value is not None
    if not passes:
        assert r.failures[0].startswith(f"{stat} |error| ")


def test_error_stat_and_max_mismatch_need_a_tolerance_and_bad_names_are_refused() -> None:
    from amp_convert.errors import ValidationError
    from amp_convert.validation.metrics import Thresholds, compare_output

    ref, cand = _pair_arrays()
    r = compare_output("maps", ref, cand, Thresholds(min_cosine=0.9, error_stat="mean"))
    assert r.failed and "set --atol or --rtol too" in r.failures[0]
    with pytest.raises(ValidationError, match=r"p99 or p99\.9"):
        Thresholds.coerce({"error_stat": "p100"})
    with pytest.raises(ValidationError, match="fraction"):
        Thresholds.coerce({"max_mismatch": 2})
    per = Thresholds.coerce({"atol": 1e-2, "per_output": {"maps": {"error_stat": "p99"}}})
    assert per.for_output("maps").error_stat == "p99" and per.for_output("x").error_stat is None
