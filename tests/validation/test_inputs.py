"""Validation inputs: dtype-aware random values, dynamic dims, and checked user arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from models import picky_inputs as picky
from models import validation_models as vm
from models.blocks import bert_encoder

pytest.importorskip("onnxruntime")

from amp_convert.cost.dims import parse_dims
from amp_convert.errors import OptionError, ValidationError
from amp_convert.validation import validate
from amp_convert.validation.input_dims import DimPlan
from amp_convert.validation.inputs import (
    InputSpec,
    load_inputs,
    random_inputs,
)

pytestmark = pytest.mark.integration


def dims_attempts(specs, dims=None):
    return DimPlan.of(specs, dims).attempts(dims)


def _token_specs() -> list[InputSpec]:
    return [
        InputSpec("input_ids", "tensor(int64)", ["batch", "seq"]),
        InputSpec("attention_mask", "tensor(int64)", ["batch", "seq"]),
        InputSpec("token_type_ids", "tensor(int64)", ["batch", "seq"]),
        InputSpec("use_bias", "tensor(bool)", []),
    ]


def test_random_inputs_are_dtype_aware() -> None:
    ref, _ = vm.multi_io_pair()
    feeds = random_inputs(_token_specs(), ref, dims={"seq": 64}, seed=0)
    a = feeds.arrays
    assert a["input_ids"].dtype == np.int64 and a["input_ids"].shape == (1, 64)
    # the ids index a 30-row embedding table through a Gather: they stay valid
    assert a["input_ids"].min() >= 0 and a["input_ids"].max() < 30
    assert len(np.unique(a["input_ids"])) > 5
    assert (a["attention_mask"] == 1).all()
    assert (a["token_type_ids"] == 0).all()
    assert a["use_bias"].dtype == np.bool_ and a["use_bias"].all()
    assert feeds.dims == {"batch": 1, "seq": 64}


def test_metadata_range_and_position_ids() -> None:
    ref, _ = vm.multi_io_pair()
    meta = ref.metadata_props.add()
    meta.key, meta.value = "input_range:input_ids", "5,7"
    specs = [
        InputSpec("input_ids", "tensor(int64)", [2, 10]),
        InputSpec("position_ids", "tensor(int32)", [2, 10]),
        InputSpec("x", "tensor(float)", [3]),
    ]
    feeds = random_inputs(specs, ref, seed=1).arrays
    assert set(np.unique(feeds["input_ids"])) <= {5, 6}
    assert (feeds["position_ids"] == np.arange(10)).all() and feeds[
        "position_ids"
    ].dtype == np.int32
    assert feeds["x"].dtype == np.float32
    again = random_inputs(specs, ref, seed=1).arrays
    np.testing.assert_array_equal(feeds["x"], again["x"])  # seeded


def test_default_and_user_dims() -> None:
    ref, _ = vm.multi_io_pair()
    specs = [
        InputSpec("a", "tensor(float)", ["batch_size", "sequence", None, 4]),
        InputSpec("b", "tensor(float)", ["N", "sequence"]),
    ]
    feeds = random_inputs(specs, ref)
    # one set of defaults with the cost estimate (dim_defaults): batches 1, any other dim 128
    assert feeds.shapes == {"a": [1, 128, 128, 4], "b": [1, 128]}
    assert feeds.dims == {"batch_size": 1, "sequence": 128, "a[2]": 128, "N": 1}
    feeds = random_inputs(specs, ref, dims={"sequence": 3, "a[2]": 5, "N": 2})
    assert feeds.shapes == {"a": [1, 3, 5, 4], "b": [2, 3]}
    with pytest.raises(OptionError, match=r"--dim seq: the model has no dim named 'seq'.*sequence"):
        random_inputs(specs, ref, dims={"seq": 3})


def test_parse_dims() -> None:
    assert parse_dims(["batch=2", " seq = 8 ", "x[1]=3"]) == {"batch": 2, "seq": 8, "x[1]": 3}
    assert parse_dims(["past=0"]) == {"past": 0}  # an empty KV cache is a real size
    with pytest.raises(OptionError, match="NAME=VALUE"):
        parse_dims(["batch"])
    with pytest.raises(OptionError, match="non-negative integer"):
        parse_dims(["batch=-1"])
    with pytest.raises(OptionError, match="given twice"):
        parse_dims(["batch=1", "batch=2"])


def test_validate_records_dims_and_runs_dynamic_shapes() -> None:
    ref, cand = vm.multi_io_pair()
    report = validate(ref, cand, provider="emulate", dims={"batch": 3, "seq": 5}, runs=0)
    assert report.dims == {"batch": 3, "seq": 5}
    assert report.input_shapes["input_ids"] == [3, 5]
    assert report.output("logits").shape == [3, 5, 5]
    assert report.output("pred").shape == [3, 5]


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"y": np.zeros((2, 16), np.float32)}, r"missing 'x'; unexpected 'y' \(model inputs: x\)"),
        ({"x": np.zeros((2, 8), np.float32)}, r"'x': expected shape \[2, 16\], got \(2, 8\)"),
        ({"x": np.zeros((16,), np.float32)}, r"'x': expected shape \[2, 16\] \(rank 2\)"),
        ({"x": np.zeros((2, 16), np.float64)}, r"'x': expected dtype float32, got float64"),
    ],
)
def test_user_inputs_are_checked(arrays: dict, message: str, tmp_path: Path) -> None:
    ref, cand = vm.mlp_pair()
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValidationError, match=message):
        validate(ref, cand, provider="emulate", inputs=path, runs=0)
    with pytest.raises(ValidationError, match=message):
        validate(ref, cand, provider="emulate", inputs=arrays, runs=0)


def test_user_inputs_with_a_dim_name_used_inconsistently_are_accepted() -> None:
    """ORT does not require a dim name to agree across inputs: a note, not an error."""
    specs = _token_specs()[:2]
    arrays = {
        "input_ids": np.zeros((1, 4), np.int64),
        "attention_mask": np.ones((1, 5), np.int64),
    }
    got = load_inputs(arrays, specs)
    assert got.dims == {"batch": 1, "seq": 4}
    (note,) = got.notes
    assert "dim 'seq' is 5 in input 'attention_mask' (axis 1) but 4 in an earlier input" in note
    arrays["attention_mask"] = np.ones((1, 4), np.int64)
    got = load_inputs(arrays, specs)
    assert got.dims == {"batch": 1, "seq": 4} and got.source == "arrays" and not got.notes


def test_npz_inputs_are_used(tmp_path: Path) -> None:
    ref, cand = vm.mlp_pair(TensorProto.FLOAT16)
    x = np.full((2, 16), 0.5, np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    report = validate(ref, cand, provider="emulate", inputs=tmp_path / "in.npz", runs=0)
    assert report.inputs_source.startswith("npz:")
    assert report.input_shapes == {"x": [2, 16]}
    (tmp_path / "bad.npz").write_text("not a zip")
    with pytest.raises(ValidationError, match=r"not a readable .npz"):
        validate(ref, cand, provider="emulate", inputs=tmp_path / "bad.npz", runs=0)


def test_string_inputs_are_generated_and_compared_exactly() -> None:
    """A model that converts is validated; text inputs get random words (was refused)."""
    g = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"])],
        "g",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [1])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [1])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    report = validate(m, m, provider="cpu", runs=0)
    (out,) = report.outputs
    assert out.name == "t" and not out.failed and out.mismatches == 0


# ------------------------------------------------------------------ unknown dims


@pytest.mark.parametrize("unknown", ["?", "-1", "None", "", None, -1])
def test_unknown_dim_names_are_independent(unknown) -> None:
    """Exporters write ?, -1, None or nothing for "unknown": each axis is its own dim."""
    spec = InputSpec("x", "tensor(float)", [unknown, 3, unknown, unknown])
    got = load_inputs({"x": np.zeros((1, 3, 48, 192), np.float32)}, [spec])
    assert got.dims == {"x[0]": 1, "x[2]": 48, "x[3]": 192}
    feeds = random_inputs([spec], vm.mlp_pair()[0], dims={"x[2]": 5, "x[3]": 7})
    assert feeds.shapes == {"x": [1, 3, 5, 7]}


def test_paddle_style_question_mark_dims_validate_with_user_inputs() -> None:
    """Every dynamic dim of both inputs is named '?', with unrelated sizes."""
    ref, cand = picky.paddle_style_pair()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 48, 192)).astype(np.float32)
    t = rng.standard_normal((2, 7)).astype(np.float32)
    report = validate(ref, cand, provider="emulate", inputs={"x": x, "t": t}, runs=0)
    assert report.input_shapes == {"x": [1, 3, 48, 192], "t": [2, 7]}
    assert report.dims == {"x[0]": 1, "x[2]": 48, "x[3]": 192, "t[0]": 2, "t[1]": 7}
    assert report.output("pooled").shape == [1, 3] and report.output("total").shape == [2]
    np.testing.assert_allclose(report.output("pooled").max_abs, 0, atol=1e-3)
    assert not report.failed
    # and with generated inputs each '?' axis is set on its own
    gen = validate(ref, cand, provider="emulate", runs=0, dims={"x[3]": 9, "t[1]": 4})
    assert gen.input_shapes == {"x": [1, 3, 224, 9], "t": [1, 4]}  # H of an image: 224


# ------------------------------------------------- defaults the reference cannot run on


def test_dims_attempts_grow_each_kind_of_dim_along_its_ladder() -> None:
    specs = [
        InputSpec("img", "tensor(float)", ["batch", 3, "height", "width"]),
        InputSpec("nchw", "tensor(float)", [None, 3, None, None]),
        InputSpec("nhwc", "tensor(float)", [1, "h_in", "w_in", 3]),
        InputSpec("ids", "tensor(int64)", ["batch", "seq"]),
        InputSpec("wave", "tensor(float)", [None]),
    ]
    attempts = dims_attempts(specs)
    assert attempts[0] == random_inputs(specs, vm.mlp_pair()[0]).dims  # first = the defaults
    col = {k: [a[k] for a in attempts] for k in attempts[0]}
    assert col["nchw[0]"] == [1, 1, 1, 1, 1]
    assert col["batch"] == [1, 1, 1, 1, 1]
    # H: 640, then text-line heights 48 and 32 with a wide W (320)
    assert col["height"] == col["nchw[2]"] == col["h_in"] == [224, 640, 48, 32, 32]  # never 1x1
    assert col["width"] == col["nchw[3]"] == col["w_in"] == [224, 640, 320, 320, 320]
    assert col["seq"] == [128, 256, 1024, 64, 16]  # longer first, then shorter
    assert col["wave[0]"] == [128, 256, 1024, 64, 16]  # rank 1: axis 0 is not a batch
    # user dims are never changed; nothing left to grow means one attempt
    fixed = dims_attempts(specs[3:4], {"seq": 8})
    assert fixed == [{"batch": 1, "seq": 8}]


@pytest.mark.parametrize(
    ("build", "dims"),
    [
        (lambda: picky.reflect_pad_pair(200), {"batch": 1, "samples": 256}),
        (lambda: picky.stride32_pair(block=64), {"height": 640, "width": 640}),
        (lambda: picky.stride32_pair((1, 3, None, None), 64), {"x[2]": 640, "x[3]": 640}),
    ],
)
def test_reference_that_fails_on_defaults_is_retried_with_larger_dims(build, dims) -> None:
    ref, cand = build()
    report = validate(ref, cand, provider="emulate", runs=0, thresholds={"atol": 1e-2})
    assert report.dims == dims and report.passed
    worked = ", ".join(f"{k}={v}" for k, v in dims.items())
    (note,) = [w for w in report.warnings if "default dims" in w]
    assert note.startswith("the reference cannot run on the default dims (")
    assert f"these dims worked: ({worked})" in note


def test_a_size_the_graph_implies_is_tried() -> None:
    """Reshape to a fixed [7, 13]: the only length that runs is its element count, 91."""
    ref, cand = picky.fixed_length_pair(91)
    report = validate(ref, cand, provider="emulate", runs=0)
    assert report.input_shapes == {"x": [1, 91]}
    assert any("these dims worked: (length=91)" in w for w in report.warnings)


def test_no_generated_dims_work_is_one_clear_error() -> None:
    """Every value tried is named, then the first error's cause, then the way out."""
    ref, cand = picky.fixed_length_pair(7 * 715)  # 5005: beyond the sizes the search tries
    with pytest.raises(ValidationError) as err:
        validate(ref, cand, provider="emulate", runs=0)
    assert str(err.value) == (
        "reference <ModelProto> cannot run on the generated inputs (6 attempts); values tried: "
        "length = 128/256/1024/64/16/715; the first, dims (length=128), failed with: Reshape: "
        "The input tensor cannot be reshaped to the requested shape. Input shape:{1,128}, "
        "requested shape:{7,715}; shapes tried: x[1, 128]; x[1, 256]; x[1, 1024]; x[1, 64]; "
        "x[1, 16]; x[1, 715]; set the dynamic dims with --dim NAME=VALUE (length) or give real "
        "inputs with --inputs FILE.npz"
    )
    report = validate(ref, cand, provider="emulate", runs=0, dims={"length": 5005})
    assert report.input_shapes == {"x": [1, 5005]}
    assert not any("default dims" in w for w in report.warnings)


def test_string_inputs_are_generated_and_validated(tmp_path) -> None:
    """A text front end (onnx's StringNormalizer model): random words in, strings compared."""
    import os
    import subprocess
    import sys

    import onnx as onnx_

    src = os.path.join(
        os.path.dirname(onnx_.__file__),
        "backend/test/data/simple/test_strnorm_model_nostopwords_nochangecase/model.onnx",
    )
    if not os.path.exists(src):
        pytest.skip("onnx wheel without its backend test data")
    out = tmp_path / "c.onnx"
    page = tmp_path / "p.html"
    cmd = [sys.executable, "-m", "amp_convert.commands.cli"]
    subprocess.run([*cmd, src, "-o", str(out), "-q"], check=True)
    run = subprocess.run(
        [*cmd, "validate", src, str(out), "--provider", "emulate", "--html", str(page), "-q"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert page.exists() and "Traceback" not in run.stderr
    from amp_convert.validation.inputs import InputSpec, random_inputs

    spec = InputSpec("x", "tensor(string)", [3])
    arrays = random_inputs([spec], onnx_.load(src), seed=0).arrays
    assert arrays["x"].dtype.kind == "O" and all(isinstance(w, str) for w in arrays["x"])


def test_total_sequence_length_follows_past_plus_sequence() -> None:
    """ORT GenAI's attention_mask is [batch, total_sequence_length]: past + sequence by name."""
    specs = [
        InputSpec("input_ids", "tensor(int64)", ["batch_size", "sequence_length"]),
        InputSpec("attention_mask", "tensor(int64)", ["batch_size", "total_sequence_length"]),
        InputSpec("past", "tensor(float)", ["batch_size", 2, "past_sequence_length", 8]),
    ]
    plan = DimPlan.of(specs)
    assert "total_sequence_length" not in plan.keys
    values = {"sequence_length": 3, "past_sequence_length": 5}
    assert plan.shape(specs[1], values) == [1, 8]
    # a user who sets it decides (an exporter may mean something else by it)
    given = DimPlan.of(specs, {"total_sequence_length": 4})
    assert given.shape(specs[1], {**values, "total_sequence_length": 4}) == [1, 4]


def test_genai_llama_with_multihead_attention_validates_on_default_inputs() -> None:
    import amp_convert
    from models import fused

    model = fused.genai_llama(attention="mha")
    report = validate(
        model,
        amp_convert.convert(model),
        provider="emulate",
        runs=0,
        thresholds={"min_cosine": 0.999},
    )
    assert report.passed
    assert report.input_shapes["attention_mask"][1] == (
        report.dims["past_sequence_length"] + report.dims["sequence_length"]
    )


def test_a_position_table_shorter_than_the_default_sequence_validates(tmp_path: Path) -> None:
    """README's sample BERT has 64 positions: the default sequence (128) and the longer steps
    index past its table; the shorter step runs, and the dims that worked are printed."""
    from click.testing import CliRunner

    import amp_convert
    from amp_convert.commands.cli import cli

    src, dst = tmp_path / "m.onnx", tmp_path / "m.fp16.onnx"
    onnx.save(bert_encoder(layers=1, hidden=32, heads=2, vocab=50, max_positions=64), src)
    amp_convert.convert_file(src, dst, level="O2")
    res = CliRunner().invoke(cli, ["validate", str(src), str(dst), "--min-cosine", "0.999"])
    assert res.exit_code == 0, res.output
    assert "seq=64" in res.output and "result: PASS" in res.output
