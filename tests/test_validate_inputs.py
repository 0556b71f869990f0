"""Validation inputs: dtype-aware random values, dynamic dims, and checked user arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from models import validation_models as vm  # noqa: E402

pytest.importorskip("onnxruntime")

from amp_convert.errors import ValidationError  # noqa: E402
from amp_convert.validate import validate  # noqa: E402
from amp_convert.validate.inputs import (  # noqa: E402
    InputSpec,
    load_inputs,
    parse_dims,
    random_inputs,
)


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
    assert feeds.shapes == {"a": [1, 16, 1, 4], "b": [1, 16]}
    assert feeds.dims == {"batch_size": 1, "sequence": 16, "a[2]": 1, "N": 1}
    feeds = random_inputs(specs, ref, dims={"sequence": 3, "a[2]": 5, "N": 2})
    assert feeds.shapes == {"a": [1, 3, 5, 4], "b": [2, 3]}
    with pytest.raises(ValidationError, match=r"dim seq matches no dynamic dimension.*sequence"):
        random_inputs(specs, ref, dims={"seq": 3})


def test_parse_dims() -> None:
    assert parse_dims(["batch=2", " seq = 8 ", "x[1]=3"]) == {"batch": 2, "seq": 8, "x[1]": 3}
    with pytest.raises(ValidationError, match="NAME=VALUE"):
        parse_dims(["batch"])
    with pytest.raises(ValidationError, match="NAME=VALUE"):
        parse_dims(["batch=-1"])


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


def test_user_inputs_symbolic_dims_must_agree() -> None:
    specs = _token_specs()[:2]
    arrays = {
        "input_ids": np.zeros((1, 4), np.int64),
        "attention_mask": np.ones((1, 5), np.int64),
    }
    with pytest.raises(ValidationError, match="dim 'seq' is 5 on axis 1 but 4"):
        load_inputs(arrays, specs)
    arrays["attention_mask"] = np.ones((1, 4), np.int64)
    got = load_inputs(arrays, specs)
    assert got.dims == {"batch": 1, "seq": 4} and got.source == "arrays"


def test_npz_inputs_are_used(tmp_path: Path) -> None:
    ref, cand = vm.mlp_pair(TensorProto.FLOAT16)
    x = np.full((2, 16), 0.5, np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    report = validate(ref, cand, provider="emulate", inputs=tmp_path / "in.npz", runs=0)
    assert report.inputs_source.startswith("npz:")
    assert report.input_shapes == {"x": [2, 16]}
    (tmp_path / "bad.npz").write_text("not a zip")
    with pytest.raises(ValidationError, match="not a readable .npz"):
        validate(ref, cand, provider="emulate", inputs=tmp_path / "bad.npz", runs=0)


def test_string_inputs_are_refused() -> None:
    g = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"])], "g",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [1])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [1])],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    with pytest.raises(ValidationError, match=r"input 's': type tensor\(string\) is not supported"):
        validate(m, m, provider="cpu", runs=0)
