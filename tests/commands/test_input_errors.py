"""Bad input and misused options end as one clear line and exit 2 (unclear or wrong messages
included), and repairs that are unambiguous are made and said.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert import pipeline
from amp_convert.commands.cli import cli
from amp_convert.files import proto_checks
from tests.helpers import one_line_error, run

ROOT = Path(__file__).resolve().parents[2]
W = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def model(nodes, *, inits=None, sparse=None, outputs=("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["batch", 64]) for o in outputs],
        [numpy_helper.from_array(W, "w")] if inits is None else inits,
        sparse_initializer=sparse,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def matmul() -> onnx.ModelProto:
    return model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")])


def save(proto: onnx.ModelProto, path: Path, external: bool = False) -> Path:
    if external:
        onnx.save_model(
            proto,
            path,
            save_as_external_data=True,
            location=path.name + ".data",
            size_threshold=0,
        )
    else:
        onnx.save(proto, path)
    return path


# ------------------------------------------------------------------ no exit 3


def test_cast_to_an_unknown_type_is_refused(tmp_path: Path) -> None:
    m = model(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
            helper.make_node("Cast", ["y"], ["z"], to=999, name="c"),
        ],
        outputs=("z",),
    )
    result = invoke(save(m, tmp_path / "m.onnx"), "-o", tmp_path / "o.onnx")
    one_line_error(result, "node 'c' (Cast) has to=999, which is no ONNX element type")


def test_op_list_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    lists = tmp_path / "lists.txt"
    lists.write_bytes(b"[deny]\n\xff\xfe Softmax x\n")
    result = invoke(save(matmul(), tmp_path / "m.onnx"), "--op-lists", lists)
    one_line_error(result, "is not UTF-8 text")


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("Pow \u00b2 > 2 deny x", "subject must be an input index"),
        ("Pow 1 > abc deny x", "the bounds of a rule are numbers"),
        ("Pow 1 between 5 1 deny x", "nonsense bounds 5 1"),
        ("Pow 1 > nan deny x", "nonsense bounds nan"),
    ],
)
def test_bad_rules_are_refused(tmp_path: Path, rule: str, message: str) -> None:
    lists = tmp_path / "lists.txt"
    lists.write_text(f"[rules]\n{rule}\n")
    result = invoke(save(matmul(), tmp_path / "m.onnx"), "--op-lists", lists)
    one_line_error(result, message)


def test_empty_output_path_is_refused(tmp_path: Path) -> None:
    one_line_error(invoke(save(matmul(), tmp_path / "m.onnx"), "-o", ""), "empty path")


def test_negative_external_data_offset_says_so(tmp_path: Path) -> None:
    src = save(matmul(), tmp_path / "m.onnx", external=True)
    proto = onnx.load(str(src), load_external_data=False)
    entries = proto.graph.initializer[0].external_data
    offset = next((e for e in entries if e.key == "offset"), None) or entries.add(key="offset")
    offset.value = "-16"
    onnx.save(proto, src)
    one_line_error(invoke(src, "-o", tmp_path / "o.onnx"), "negative external data offset")


def test_unreadable_external_data_file_says_why(tmp_path: Path, monkeypatch) -> None:
    """An unreadable data file was "SystemError : 13" (tests run as root: the open is denied)."""
    src = save(matmul(), tmp_path / "m.onnx", external=True)
    real_open = proto_checks.os.open

    def denied(path, flags, *a, **k):
        if str(path).endswith("m.onnx.data"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(proto_checks.os, "open", denied)
    result = invoke(src, "-o", tmp_path / "o.onnx")
    one_line_error(result, "cannot read external data file 'm.onnx.data': Permission denied")


def test_external_data_truncated_while_read(tmp_path: Path, monkeypatch) -> None:
    src = save(matmul(), tmp_path / "m.onnx", external=True)
    real_run = pipeline.run

    def truncate_then_run(m, options):
        os.truncate(tmp_path / "m.onnx.data", 10)
        return real_run(m, options)

    monkeypatch.setattr(pipeline, "run", truncate_then_run)
    result = invoke(src, "-o", tmp_path / "o.onnx")
    one_line_error(result, "weight 'w'", "truncated during the conversion")
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_special_file_as_input(tmp_path: Path, kind: str) -> None:
    """A FIFO or /dev/zero was "no such file" (and must not block reading)."""
    path = tmp_path / "fifo.onnx"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    result = invoke(path, "-o", tmp_path / "o.onnx")
    one_line_error(result, "not a file (a FIFO, device or socket)")


# ------------------------------------------------------------------ malformed graphs


def test_value_defined_twice_names_both_nodes(tmp_path: Path) -> None:
    """Was onnx-ir's "Error calling _deserialize_graph with: g"."""
    m = model(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
            helper.make_node("Relu", ["y"], ["y"], name="r"),
        ]
    )
    result = invoke(save(m, tmp_path / "m.onnx"), "-o", tmp_path / "o.onnx")
    one_line_error(
        result, "value 'y' is defined twice (by node 'mm' (MatMul) and by node 'r' (Relu))"
    )


def test_repeated_node_names_are_made_unique_and_the_output_loads(tmp_path: Path) -> None:
    m = model(
        [
            helper.make_node("MatMul", ["x", "w"], ["a"], name="n"),
            helper.make_node("Relu", ["a"], ["y"], name="n"),
        ]
    )
    out = tmp_path / "o.onnx"
    result = invoke(save(m, tmp_path / "m.onnx"), "-o", out)
    assert result.exit_code == 0, result.output
    assert "1 repeated node name(s) made unique" in result.output
    names = [n.name for n in onnx.load(str(out)).graph.node]
    assert len(names) == len(set(names)) and "n" in names and "n__1" in names
    x = np.ones((2, 64), np.float32)
    assert run(str(out), {"x": x})[0].shape == (2, 64)  # ONNX Runtime loads it


def test_sparse_initializer_model_is_accepted(tmp_path: Path) -> None:
    """A valid sparse_initializer model was refused as "not topologically sorted"."""
    values = numpy_helper.from_array(np.array([1.5, -2.0, 0.25], np.float32), "w")
    indices = numpy_helper.from_array(np.array([0, 65, 4095], np.int64), "i")
    sparse = helper.make_sparse_tensor(values, indices, [64, 64])
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], inits=[], sparse=[sparse])
    src = save(m, tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    result = invoke(src, "-o", out)
    assert result.exit_code == 0, result.output
    assert "1 sparse initializer(s) stored as dense initializers" in result.output
    x = np.arange(128, dtype=np.float32).reshape(2, 64) / 64
    dense = np.zeros(64 * 64, np.float32)
    dense[[0, 65, 4095]] = [1.5, -2.0, 0.25]
    np.testing.assert_allclose(
        run(str(out), {"x": x})[0], x @ dense.reshape(64, 64), rtol=1e-2, atol=1e-2
    )
    proto = onnx.load(str(src))
    amp_convert.convert(proto)
    assert len(proto.graph.sparse_initializer) == 1  # the caller's proto is never changed


@pytest.mark.parametrize("length", [246, 250, 255])
def test_long_output_names_get_a_clear_line(tmp_path: Path, length: int) -> None:
    """An output name of 246-255 characters failed on the temporary name."""
    src = save(matmul(), tmp_path / "m.onnx")
    name = "o" * (length - 5) + ".onnx"
    result = invoke(src, "-o", tmp_path / name)
    one_line_error(result, f"output file name is {length} bytes long; at most 241")
    report = tmp_path / ("r" * (length - 5) + ".json")
    result = invoke(src, "-o", tmp_path / "o.onnx", "--report", report)
    assert result.exit_code == 0, result.output
    assert report.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.onnx", "o.onnx", report.name])


def test_output_folder_path_is_refused(tmp_path: Path) -> None:
    """`-o dir/` wrote a file named `dir`."""
    src = save(matmul(), tmp_path / "m.onnx")
    one_line_error(invoke(src, "-o", f"{tmp_path}/dir/"), "must name a file, not a folder")
    assert not (tmp_path / "dir").exists()


# ------------------------------------------------------------------ options that did nothing


@pytest.mark.parametrize(
    "extra",
    [
        ["--atol", "1e-3"],
        ["--provider", "emulate"],
        ["--inputs", "{npz}"],
        ["--min-cosine", "1"],
        ["--junit", "{tmp}/j.xml"],
        ["--validation-report", "{tmp}/v.json"],
    ],
)
def test_validation_options_without_validate_are_refused(tmp_path: Path, extra) -> None:
    """A CI gate that checks nothing: they were ignored with exit 0."""
    npz = tmp_path / "in.npz"
    np.savez(npz, x=np.ones((1, 64), np.float32))
    src = save(matmul(), tmp_path / "m.onnx")
    args = [e.format(npz=npz, tmp=tmp_path) for e in extra]
    result = invoke(src, "-o", tmp_path / "o.onnx", *args)
    one_line_error(result, "goes with --validate")
    assert not (tmp_path / "o.onnx").exists()


def test_misspelt_command_gets_did_you_mean(tmp_path: Path) -> None:
    result = invoke("validat", tmp_path / "a.onnx", tmp_path / "b.onnx")
    one_line_error(result, "did you mean 'validate'")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--fp32-ops", "Softmx"], "did you mean 'Softmax'"),
        (["--fp16-ops", "NoSuchOp"], "--fp16-ops NoSuchOp: no ONNX or ONNX Runtime op"),
        (["--dim", "bach=4"], "the model has no dim named 'bach' (did you mean 'batch'?)"),
        (["--dim", "nope[0]=4"], "the model has no input named 'nope'"),
    ],
)
def test_unknown_ops_and_dims_are_refused(tmp_path: Path, extra, message) -> None:
    src = save(matmul(), tmp_path / "m.onnx")
    one_line_error(invoke(src, "-o", tmp_path / "o.onnx", *extra), message)
    ok = invoke(src, "-o", tmp_path / "o.onnx", "--dim", "batch=4", "--fp32-ops", "Softmax")
    assert ok.exit_code == 0, ok.output


def test_stale_stamp_is_not_already_converted(tmp_path: Path) -> None:
    """A stamp copied onto an FP32 model said "already converted" and changed nothing."""
    converted = amp_convert.convert(matmul())
    stale = matmul()
    stale.metadata_props.extend(converted.metadata_props)
    out, report = amp_convert.convert(stale, return_report=True)
    assert not report.already_converted
    assert any("stale stamp" in w for w in report.warnings)
    assert any(t.data_type == TensorProto.FLOAT16 for t in out.graph.initializer)
    _, again = amp_convert.convert(out, return_report=True)
    assert again.already_converted


def test_stamped_model_edited_afterwards_is_converted_again(tmp_path: Path) -> None:
    """An FP32 MatMul appended to a converted model (stamp kept) was "already converted"."""
    src = save(matmul(), tmp_path / "m.onnx")
    first = tmp_path / "m.fp16.onnx"
    assert invoke(src, "-o", first).exit_code == 0
    again = invoke(first, "-o", tmp_path / "again.onnx")
    assert again.exit_code == 0 and "already converted to FP16" in again.output  # unedited
    edited = onnx.load(first)
    w2 = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    edited.graph.initializer.append(numpy_helper.from_array(w2, "w2"))
    edited.graph.node.append(helper.make_node("MatMul", ["y", "w2"], ["z"], name="added"))
    edited.graph.output[0].name = "z"
    assert any(p.key == "amp_convert" for p in edited.metadata_props)  # the stamp is kept
    onnx.save(edited, tmp_path / "edited.onnx")
    result = invoke(tmp_path / "edited.onnx", "-o", tmp_path / "edited.fp16.onnx")
    assert result.exit_code == 0, result.output
    assert "already converted" not in result.output
    assert "its graph changed since it was written" in result.output
    out = onnx.load(tmp_path / "edited.fp16.onnx")
    types = {t.name: t.data_type for t in out.graph.initializer}
    assert types["w2"] == TensorProto.FLOAT16  # the added MatMul was converted
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    (ref,) = run(edited, {"x": x})
    (got,) = run(out, {"x": x})
    assert np.abs(got - ref).max() <= 2e-2 * np.abs(ref).max()
    _, report = amp_convert.convert(out, return_report=True)
    assert report.already_converted  # and the new output is recognised as converted


# ------------------------------------------------------------------ signals


_SLOW_CHILD = """
import signal, sys, time
# a child of a background job inherits SIGINT ignored: give it the interpreter's default
signal.signal(signal.SIGINT, signal.default_int_handler)
from amp_convert import pipeline
from amp_convert.commands.cli import main
real = pipeline.run
def slow(model, options):
    print("CONVERTING", flush=True)
    time.sleep(60)
    return real(model, options)
pipeline.run = slow
sys.argv = ["amp-convert", sys.argv[1], "-o", sys.argv[2]]
main()
"""


@pytest.mark.integration
def test_sigint_exits_130_not_the_thresholds_code(tmp_path: Path) -> None:
    """Ctrl-C exited 1, the code a CI gate reads as "thresholds not met"."""
    src = save(matmul(), tmp_path / "m.onnx", external=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_CHILD, str(src), str(tmp_path / "o.onnx")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout.readline() == "CONVERTING\n"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130, err
    assert err.strip() == "amp-convert: interrupted"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]
