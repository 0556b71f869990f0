"""One input generator: expression dims, several samples, order-insensitive
outputs, and the defaults that keep a validation short."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import amp_convert
from amp_convert.cost.dims import parse_dim_expression
from models import validation_models as vm

pytest.importorskip("onnxruntime")

from amp_convert.commands.validate import validate_command
from amp_convert.errors import ValidationError
from amp_convert.validation import validate
from amp_convert.validation.input_dims import DimPlan
from amp_convert.validation.inputs import InputSpec, random_inputs

pytestmark = pytest.mark.integration

PROGRESS = "amp-convert validate: ["


# ------------------------------------------------------------------ dim expressions


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        (
            "past_sequence_length + sequence_length",
            {"past_sequence_length": 3, "sequence_length": 2},
            5,
        ),
        ("a * 2", {"a": 7}, 14),
        ("2*s0 + 1", {"s0": 4}, 9),
        ("(s0 - 1)//2 + 1", {"s0": 9}, 5),
        ("floor(s0/2)", {"s0": 9}, 4),
        ("ceil(s0/2)", {"s0": 9}, 5),
        ("max(1, s0 - 8)", {"s0": 4}, 1),
    ],
)
def test_dim_expressions_are_evaluated_without_eval(text, values, expected) -> None:
    expr = parse_dim_expression(text)
    assert expr is not None and expr.evaluate(values) == expected


@pytest.mark.parametrize(
    "text",
    [
        "batch",
        "seq_len",
        "16",
        "?",
        "__import__('os').system('true')",
        "a.b + 1",
        "[1, 2]",
        "x if y else z",
        "a ** 2",
        "lambda: 1",
        "",
    ],
)
def test_anything_else_is_a_plain_name(text) -> None:
    assert parse_dim_expression(text) is None


def test_expression_results_must_be_sizes() -> None:
    expr = parse_dim_expression("a - b")
    with pytest.raises(ValueError, match="negative size"):
        expr.evaluate({"a": 1, "b": 2})
    with pytest.raises(ValueError, match="not an integer"):
        parse_dim_expression("a / 2").evaluate({"a": 3})


def test_a_decoder_mask_sized_by_an_expression_runs_on_default_inputs() -> None:
    model = vm.kv_concat_model()
    cand = amp_convert.convert(model, level="O3")
    report = validate(model, cand, provider="emulate", thresholds={"min_cosine": 0.999})
    assert report.passed, report.summary_line()
    # the default dims (dim_defaults): batch 1, any other dim 128
    assert report.dims == {"batch_size": 1, "sequence_length": 128, "past_sequence_length": 128}
    assert report.input_shapes["attention_mask"] == [1, 256]
    assert not any("default dims" in w for w in report.warnings)  # no search was needed
    report = validate(model, cand, provider="emulate", dims={"past_sequence_length": 0})
    assert report.input_shapes["attention_mask"] == [1, 128]  # an empty cache: 0 + 128
    assert report.input_shapes["past"] == [1, 0, 4]


def test_an_expression_over_names_that_exist_nowhere_else_is_a_name() -> None:
    specs = [InputSpec("x", "tensor(float)", ["batch - size"])]
    plan = DimPlan.of(specs)
    assert plan.exprs == {} and plan.keys == {"batch - size"}
    # the same text becomes an expression when the user gives its names
    plan = DimPlan.of(specs, {"batch": 4, "size": 1})
    assert set(plan.exprs) == {"batch - size"}
    got = random_inputs(specs, vm.kv_concat_model(), dims={"batch": 4, "size": 1})
    assert got.shapes == {"x": [3]}


def test_inputs_ort_accepts_are_accepted_whatever_the_dim_names_say(tmp_path: Path) -> None:
    """The exporter named the mask's axis 'total_length': the real inputs still validate."""
    model = vm.kv_concat_model(mask_dim="total_length")
    cand = amp_convert.convert(model, level="O2")
    feeds = {
        "input_ids": np.array([[1, 2, 3]], np.int64),
        "past": np.zeros((1, 5, 4), np.float32),
        "attention_mask": np.ones((1, 8), np.int64),
    }
    report = validate(model, cand, provider="emulate", inputs=feeds, thresholds={"atol": 1e-2})
    assert report.passed and report.input_shapes["attention_mask"] == [1, 8]


# ------------------------------------------------------------------ several samples


def test_every_sample_is_judged_and_the_worst_is_reported(tmp_path: Path) -> None:
    ref, cand = vm.overflow_pair()
    calm, hot = tmp_path / "calm.npz", tmp_path / "hot.npz"
    np.savez(calm, x=np.full((2, 8), 0.1, np.float32))
    np.savez(hot, x=np.full((2, 8), 1.0, np.float32))  # (1000 x)^2 > 65504: inf in FP16
    report = validate(ref, cand, provider="emulate", inputs=[calm, hot], thresholds={"atol": 1e-2})
    assert report.failed and report.output("y").sample == 1
    assert [s["source"] for s in report.samples] == [f"npz:{calm}", f"npz:{hot}"]
    data = report.to_dict()
    assert data["outputs"][0]["sample"] == 1 and len(data["samples"]) == 2
    ok = validate(ref, cand, provider="emulate", inputs=[calm, calm], thresholds={"atol": 1e-2})
    assert ok.passed
    files = [str(a) for f in (calm, hot) for a in ("--inputs", f)]
    res = CliRunner().invoke(
        validate_command, [*_paths(tmp_path, ref, cand), *files, "--atol", "1e-2", "-q"]
    )
    assert res.exit_code == 1 and res.output.startswith("validation FAILED (emulate): y:")


def _paths(tmp_path: Path, ref: onnx.ModelProto, cand: onnx.ModelProto) -> list[str]:
    paths = [tmp_path / "ref.onnx", tmp_path / "cand.onnx"]
    for p, m in zip(paths, (ref, cand), strict=True):
        onnx.save(m, p)
    return [str(p) for p in paths]


# ------------------------------------------------------- order-insensitive outputs


def test_sorted_match_forgives_swapped_near_equal_scores() -> None:
    """Two near-equal scores swap places after TopK: by position it fails, sorted it passes."""
    from amp_convert.validation.metrics import Thresholds, compare_output

    ref = np.array([[0.9, 0.50001, 0.5, 0.1]], np.float32)
    cand = np.array([[0.9, 0.5, 0.50001, 0.1]], np.float32)
    limits = Thresholds(atol=1e-4)
    by_position = compare_output("scores", ref, cand, limits, top1=True)
    assert by_position.failed is False  # the values are close enough here...
    far = np.array([[0.9, 0.1, 0.5, 0.50001]], np.float32)
    assert compare_output("scores", ref, far, limits).failed  # ...but not when they move further
    got = compare_output("scores", ref, far, limits, match="sort")
    assert not got.failed and got.match == "sort" and got.max_abs < 1e-6 and got.top1 is None


def test_match_option_end_to_end(tmp_path: Path) -> None:
    ref, cand = vm.multi_io_pair()
    paths = _paths(tmp_path, ref, cand)
    args = [*paths, "--provider", "emulate", "--match", "logits:sort", "--atol", "1e-2"]
    res = CliRunner().invoke(validate_command, args)
    assert res.exit_code == 0, res.output
    assert "logits (sorted)" in res.output
    assert "compared after sorting along the last axis (order-insensitive): logits" in res.output
    res = CliRunner().invoke(validate_command, [*paths, "--match", "logits:shuffle"])
    assert res.exit_code == 2 and "expected NAME:MODE with MODE one of position, sort" in res.output
    with pytest.raises(ValidationError, match="match for unknown output 'nope'"):
        validate(ref, cand, provider="emulate", match={"nope": "sort"})


# --------------------------------------------------------------- defaults and progress


def test_no_timing_under_emulate_unless_asked(tmp_path: Path) -> None:
    ref, cand = vm.mlp_pair()
    report = validate(ref, cand, provider="emulate")
    assert report.runs == 0 and report.reference_latency is None
    assert "latency: not measured (--runs N" in report.summary()
    timed = validate(ref, cand, provider="emulate", runs=2, warmup=0)
    assert timed.runs == 2 and timed.speedup is not None


def test_a_progress_line_per_phase_and_q_silences_them(tmp_path: Path) -> None:
    ref, cand = vm.mlp_pair()
    paths = _paths(tmp_path, ref, cand)
    res = CliRunner().invoke(validate_command, [*paths, "--provider", "emulate"])
    assert res.exit_code == 0, res.output
    phases = [line for line in res.stderr.splitlines() if line.startswith(PROGRESS)]
    assert len(phases) == 5
    assert "default options (crash check)" in phases[0]
    assert "random inputs, dims (none)" in phases[3] and "result: PASS" in phases[4]
    quiet = CliRunner().invoke(validate_command, [*paths, "--provider", "emulate", "-q"])
    assert quiet.exit_code == 0 and quiet.output == ""
