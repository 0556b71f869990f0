"""Bounded work on hostile input.

Generated inputs and npz members are sized from shapes and headers before anything is allocated
or loaded; --exclude-nodes patterns match in linear time (RE2), or are refused up front when the
backtracking fallback could explode.
"""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert.commands.cli import cli
from amp_convert.errors import OptionError, ValidationError
from amp_convert.files import budget
from amp_convert.options import patterns as name_patterns
from amp_convert.validation import inputs as validation_inputs
from tests.helpers import one_line_error

W = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
HOSTILE_NAME = "a" * 35  # (a+)+$ backtracks 2**35 ways on it in Python's re


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def save(path: Path, node_name: str = "mm", batch: object = "batch") -> Path:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name=node_name)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 16])],
        [numpy_helper.from_array(W, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


# ------------------------------------------------------------------ patterns


def test_catastrophic_pattern_finishes_on_a_hostile_name(tmp_path: Path) -> None:
    """--exclude-nodes '(a+)+$' on a 35-character node name never finished."""
    src = save(tmp_path / "m.onnx", node_name=HOSTILE_NAME + "b")
    start = time.perf_counter()
    result = invoke(src, "-o", tmp_path / "o.onnx", "--exclude-nodes", "(a+)+$")
    assert time.perf_counter() - start < 20
    if name_patterns.re2 is not None:
        assert result.exit_code == 0, result.output  # linear time: no match, converted
    else:
        one_line_error(result, "exponential time")


def test_linear_matcher_still_excludes_what_it_matches(tmp_path: Path) -> None:
    if name_patterns.re2 is None:
        pytest.skip("google-re2 not installed")
    src = save(tmp_path / "m.onnx", node_name=HOSTILE_NAME)
    _, report = amp_convert.convert(
        onnx.load(str(src)), return_report=True, exclude_nodes=["(a+)+$"]
    )
    assert report.decision(HOSTILE_NAME).precision == "fp32"
    with pytest.raises(OptionError, match="not supported by the linear-time matcher"):
        name_patterns.compile_pattern(r"(\w)\1")


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("(a+)+$", "exponential"),
        ("(a|ab)*c", "exponential"),
        ("(a?)*b", "exponential"),
        (r"(\w+)\1", "backreferences"),
        ("[a-z]*[a-z]*[a-z]*[a-z]*0", "more than 3 open-ended repeats"),
    ],
)
def test_fallback_refuses_patterns_that_could_hang(monkeypatch, pattern: str, why: str) -> None:
    monkeypatch.setattr(name_patterns, "re2", None)
    with pytest.raises(OptionError, match=why):
        name_patterns.compile_pattern(pattern)


@pytest.mark.parametrize(
    "pattern", [r"encoder/layer\.(0|1)/.*", ".*Softmax.*", "^mm$", r"\w+\.\w+", "(ab)+", "a{2,5}"]
)
def test_fallback_keeps_ordinary_patterns(monkeypatch, pattern: str) -> None:
    monkeypatch.setattr(name_patterns, "re2", None)
    assert name_patterns.compile_pattern(pattern).pattern == pattern


# ------------------------------------------------------------------ generated inputs


@pytest.mark.integration
def test_huge_dim_is_one_line_not_a_memory_error(tmp_path: Path) -> None:
    """--dim batch=1000000000000 was a MemoryError traceback."""
    src = save(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    amp_convert.convert_file(src, out)
    result = invoke(
        "validate", src, out, "--provider", "emulate", "--runs", "0", "--dim", "batch=1000000000000"
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "the inputs would take" in result.output and "more than" in result.output


def test_input_budget_is_checked_before_allocation(monkeypatch) -> None:
    monkeypatch.setenv("AMP_CONVERT_MEMORY_BUDGET", "4000")  # 1000 bytes of inputs allowed
    spec = validation_inputs.InputSpec("x", "tensor(float)", ["batch", 16])

    class NoAllocation:
        def __getattr__(self, name: str):
            raise AssertionError(f"rng.{name} called before the budget check")

    monkeypatch.setattr(validation_inputs.np.random, "default_rng", lambda *a: NoAllocation())
    with pytest.raises(ValidationError, match=r"the inputs would take 1.0 KiB"):
        validation_inputs.random_inputs([spec], onnx.ModelProto(), dims={"batch": 16})


def _npz_with_header_only(path: Path, shape: tuple[int, ...]) -> Path:
    """An .npz whose member 'big' declares `shape` (float64) in its header but holds no data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape}
    )
    with zipfile.ZipFile(path, "w") as archive:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.ones((1, 16), np.float32))
        archive.writestr("x.npy", buf.getvalue())
        archive.writestr("big.npy", b"\x93NUMPY" + bytes([1, 0]) + header.getvalue()[8:])
    return path


@pytest.mark.parametrize(
    ("type_str", "dtype", "name"),
    [
        ("tensor(float)", np.float32, "x"),
        ("tensor(float16)", np.float16, "x"),
        ("tensor(int64)", np.int64, "input_ids"),
        ("tensor(int8)", np.int8, "codes"),
    ],
)
def test_generated_inputs_are_the_one_draw_values_a_chunk_at_a_time(
    monkeypatch, type_str: str, dtype: type, name: str
) -> None:
    """Chunked drawing gives the values one draw of the whole size gives (the seed's meaning
    holds), across chunk boundaries that do not divide the size."""
    monkeypatch.setattr(validation_inputs, "DRAW_CHUNK", 1000)
    spec = validation_inputs.InputSpec(name, type_str, [3, 2501])
    got = validation_inputs.random_inputs([spec], onnx.ModelProto(), seed=7).arrays[name]
    rng = np.random.default_rng(7)
    if np.issubdtype(dtype, np.integer):
        lo, hi = validation_inputs.DEFAULT_INT_RANGE
        want = rng.integers(lo, hi, size=(3, 2501)).astype(dtype)
    else:
        want = rng.standard_normal((3, 2501)).astype(np.float32).astype(dtype)
    assert got.dtype == dtype and got.shape == (3, 2501)
    np.testing.assert_array_equal(got, want)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("type_str", "name"), [("tensor(int8)", "codes"), ("tensor(float16)", "x")]
)
def test_generated_inputs_cost_their_own_size(type_str: str, name: str) -> None:
    """Generating an input allocates the array and one chunk of draws, not several copies of it
    (an int8 input cost 9x its size, an FP16 one 6x: int64/float64 draws, then casts)."""
    import tracemalloc

    spec = validation_inputs.InputSpec(name, type_str, [8, 1024, 1024])
    tracemalloc.start()
    try:
        arrays = validation_inputs.random_inputs([spec], onnx.ModelProto()).arrays
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = arrays[name].nbytes
    chunk = validation_inputs.DRAW_CHUNK * 8  # one chunk of float64/int64 draws
    assert peak <= size + 3 * chunk, (peak / size, size)


def test_npz_members_are_sized_from_their_headers(tmp_path: Path, monkeypatch) -> None:
    """An npz with a 2 GiB extra member was loaded whole before being refused."""
    monkeypatch.setenv("AMP_CONVERT_MEMORY_BUDGET", str(4 << 30))  # 1 GiB of inputs
    npz = _npz_with_header_only(tmp_path / "in.npz", (2**28,))  # 2 GiB declared

    def no_load(*a, **k):
        raise AssertionError("np.load called before the sizes were checked")

    monkeypatch.setattr(validation_inputs.np, "load", no_load)
    spec = validation_inputs.InputSpec("x", "tensor(float)", [1, 16])
    with pytest.raises(ValidationError, match=r"'big' of shape \[268435456\], 2.0 GiB"):
        validation_inputs.load_inputs(npz, [spec])


@pytest.mark.integration
def test_validate_refuses_an_oversized_npz_in_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AMP_CONVERT_MEMORY_BUDGET", str(4 << 30))
    src = save(tmp_path / "m.onnx", batch=1)
    out = tmp_path / "o.onnx"
    amp_convert.convert_file(src, out)
    npz = _npz_with_header_only(tmp_path / "in.npz", (2**28,))
    result = invoke("validate", src, out, "--provider", "emulate", "--runs", "0", "--inputs", npz)
    assert result.exit_code == 2, result.output
    assert "the inputs would take" in result.output and "Traceback" not in result.output


def test_npz_header_reader_matches_numpy(tmp_path: Path) -> None:
    path = tmp_path / "a.npz"
    np.savez(path, a=np.zeros((3, 4), np.float16), b=np.arange(5))
    members = {m.name: m for m in budget.npz_members(path)}
    assert members["a"].shape == (3, 4) and members["a"].dtype == np.float16
    assert members["a"].nbytes == 24 and members["b"].nbytes == 5 * np.dtype(int).itemsize
