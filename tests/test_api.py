"""The Python API's input kinds, file handling, external data, idempotence and bad input."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import amp_convert
from amp_convert import InputError, OptionError, OutputError
from models.big import write_big_model
from models.blocks import bert_encoder
from models.focused import ALL_FOCUSED
from models.inputs import sample_inputs
from tests.helpers import FLOAT16, casts, op_counts, rel_error, run


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "bert.onnx"
    onnx.save(bert_encoder(), path)
    return path


def test_model_proto_in_model_proto_out_input_untouched() -> None:
    model = bert_encoder()
    before = model.SerializeToString()
    out = amp_convert.convert(model, level="O2")
    assert isinstance(out, onnx.ModelProto)
    assert model.SerializeToString() == before
    assert any(t.data_type == FLOAT16 for t in out.graph.initializer)


def test_bytes_in_bytes_out() -> None:
    out = amp_convert.convert(bert_encoder().SerializeToString(), level="O1")
    assert isinstance(out, bytes)
    onnx.checker.check_model(onnx.load_model_from_string(out), full_check=True)


def test_ir_model_in_ir_model_out_input_untouched() -> None:
    model = ir.serde.deserialize_model(bert_encoder())
    dtypes = [v.dtype for v in model.graph.initializers.values()]
    out, report = amp_convert.convert(model, level="O2", return_report=True)
    assert isinstance(out, ir.Model) and out is not model
    assert [v.dtype for v in model.graph.initializers.values()] == dtypes
    assert report.nodes_low > 0


def test_path_in_ir_model_out(model_file: Path) -> None:
    out = amp_convert.convert(model_file, level="O2")
    assert isinstance(out, ir.Model)


def test_convert_file_default_name_and_report(model_file: Path) -> None:
    before = _digest(model_file)
    report = amp_convert.convert_file(model_file, level="O2")
    out = model_file.with_name("bert.fp16.onnx")
    assert out.exists()
    assert _digest(model_file) == before
    onnx.checker.check_model(str(out), full_check=True)
    assert report.size_after < report.size_before
    assert "casts inserted" in report.summary()
    bf = amp_convert.convert_file(model_file, dtype="bf16")
    assert model_file.with_name("bert.bf16.onnx").exists() and bf.dtype == "bf16"


def test_report_json_holds_every_node(model_file: Path, tmp_path: Path) -> None:
    # target none: the schema-only rules, where Softmax stays FP32 by the deny list
    report = amp_convert.convert_file(model_file, tmp_path / "o.onnx", level="O2", target="none")
    report.to_json(tmp_path / "r.json")
    import json

    data = json.loads((tmp_path / "r.json").read_text())
    assert data["schema_version"] == 1
    assert data["casts_inserted"] == report.casts_inserted
    assert len(data["nodes"]) == len(bert_encoder().graph.node)
    softmax = [n for n in data["nodes"] if n["op_type"] == "Softmax"]
    assert softmax and all(n["precision"] == "fp32" and "deny" in n["reason"] for n in softmax)


def test_external_data_streams_and_stays_external(tmp_path: Path) -> None:
    src = tmp_path / "big.onnx"
    write_big_model(src, target_bytes=6_000_000)
    data_files = sorted(tmp_path.glob("big.onnx*"))
    before = _digest(*data_files)
    dst = tmp_path / "out" / "big.fp16.onnx"
    dst.parent.mkdir()
    report = amp_convert.convert_file(src, dst, level="O2")
    assert _digest(*data_files) == before, "input model and its data are never modified"
    assert (dst.parent / "big.fp16.onnx.data").exists()
    proto = onnx.load(str(dst), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    onnx.checker.check_model(str(dst), full_check=True)
    original = onnx.load(str(src))
    feeds = sample_inputs(original, seed=0)
    ref, got = run(str(src), feeds)[0], run(str(dst), feeds)[0]
    assert rel_error(ref, got) < 1e-2
    assert report.size_after < 0.6 * report.size_before


def test_idempotent(model_file: Path, tmp_path: Path) -> None:
    first = tmp_path / "a.onnx"
    second = tmp_path / "b.onnx"
    amp_convert.convert_file(model_file, first, level="O2")
    report = amp_convert.convert_file(first, second, level="O2")
    assert report.already_converted
    a, b = onnx.load(first), onnx.load(second)
    assert a.graph == b.graph
    # even without our stamp, a second pass finds nothing left to change
    del a.metadata_props[:]
    again, report = amp_convert.convert(a, level="O2", return_report=True)
    assert not report.already_converted
    assert op_counts(again) == op_counts(a)
    assert casts(again) == casts(a)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"this is not a model at all \x00\xff" * 10, "not an ONNX model"),
    ],
)
def test_bad_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        amp_convert.convert_file(path, tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx").exists()


def test_truncated_file(model_file: Path, tmp_path: Path) -> None:
    data = model_file.read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(InputError, match="not an ONNX model"):
        amp_convert.convert_file(cut, tmp_path / "out.onnx")
    assert list(tmp_path.glob("out.onnx*")) == []


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        amp_convert.convert_file(tmp_path / "nope.onnx")


@pytest.mark.parametrize("field", ["ir_version", "opset"])
def test_unsupported_versions(tmp_path: Path, field: str) -> None:
    model = bert_encoder()
    if field == "ir_version":
        model.ir_version = onnx.IR_VERSION + 5
        match = "IR version"
    else:
        model.opset_import[0].version = onnx.defs.onnx_opset_version() + 5
        match = "opset"
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(InputError, match=match):
        amp_convert.convert_file(path, tmp_path / "out.onnx")


def test_output_rules(model_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.onnx"
    out.write_bytes(b"keep me")
    with pytest.raises(OutputError, match="exists"):
        amp_convert.convert_file(model_file, out)
    assert out.read_bytes() == b"keep me"
    amp_convert.convert_file(model_file, out, force=True)
    assert onnx.load(out).graph.node
    with pytest.raises(OutputError, match="overwrite the input"):
        amp_convert.convert_file(model_file, model_file, force=True)
    with pytest.raises(OutputError, match="does not exist"):
        amp_convert.convert_file(model_file, tmp_path / "no" / "dir" / "o.onnx")
    with pytest.raises(OutputError, match="is a file, not a folder"):
        amp_convert.convert_file(model_file, model_file / "o.onnx")


def test_failure_leaves_no_partial_output(model_file: Path, tmp_path: Path, monkeypatch) -> None:
    import amp_convert.files.io as io

    def broken_save(model, path, *a, **k):
        Path(path).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io.ir, "save", broken_save)
    out = tmp_path / "o.onnx"
    with pytest.raises(OutputError, match="No space left"):
        amp_convert.convert_file(model_file, out)
    assert list(tmp_path.iterdir()) == [model_file]


def test_verification_failure_is_reported_not_written(
    model_file: Path, tmp_path: Path, monkeypatch
) -> None:
    from amp_convert import pipeline

    original = pipeline.rewrite

    def corrupt(model, *args, **kwargs):  # simulate a converter bug: a Cast whose `to` disagrees
        result = original(model, *args, **kwargs)
        for node in model.graph.all_nodes():
            if node.op_type == "Cast":
                node.attributes["to"] = ir.AttrInt64("to", ir.DataType.DOUBLE)
                break
        return result

    monkeypatch.setattr(pipeline, "rewrite", corrupt)
    with pytest.raises(amp_convert.VerificationError, match=r"node '.*' \(Cast\)"):
        amp_convert.convert_file(model_file, tmp_path / "o.onnx")
    assert not (tmp_path / "o.onnx").exists()


def test_bad_options() -> None:
    model = bert_encoder()
    with pytest.raises(OptionError, match="unknown level"):
        amp_convert.convert(model, level="O7")
    with pytest.raises(OptionError, match="unknown dtype"):
        amp_convert.convert(model, dtype="fp8")
    with pytest.raises(OptionError, match="bad regular expression"):
        amp_convert.convert(model, exclude_nodes=["("])
    with pytest.raises(OptionError, match="both"):
        amp_convert.convert(model, fp32_ops="MatMul", fp16_ops="MatMul")
    with pytest.raises(OptionError, match="does not exist"):
        amp_convert.convert(model, op_lists="/nonexistent/lists.txt")


def test_interface_values_keep_names() -> None:
    model = ALL_FOCUSED["topk_model"]()
    out = amp_convert.convert(model, level="O2")
    assert [o.name for o in out.graph.output] == [o.name for o in model.graph.output]
    assert [i.name for i in out.graph.input] == [i.name for i in model.graph.input]
    feeds = sample_inputs(model)
    np.testing.assert_array_equal(run(model, feeds)[1], run(out, feeds)[1])


def _loop_shadowing_an_initializer() -> onnx.ModelProto:
    """A Loop body holding its own initializer `w`, named like the main graph's (the ONNX
    checker accepts it; ORT computes the body with the body's own)."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    inner = nh.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    body = h.make_graph(
        [h.make_node("MatMul", ["v", "w"], ["v2"]), h.make_node("Identity", ["cond"], ["c2"])],
        "body",
        [
            h.make_tensor_value_info("i", T.INT64, []),
            h.make_tensor_value_info("cond", T.BOOL, []),
            h.make_tensor_value_info("v", T.FLOAT, [1, 4]),
        ],
        [
            h.make_tensor_value_info("c2", T.BOOL, []),
            h.make_tensor_value_info("v2", T.FLOAT, [1, 4]),
        ],
        [inner],
    )
    graph = h.make_graph(
        [
            h.make_node("MatMul", ["x", "w"], ["z"]),
            h.make_node("Loop", ["n", "t", "z"], ["y"], body=body),
        ],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
        [
            h.make_tensor_value_info("y", T.FLOAT, [1, 4]),
            h.make_tensor_value_info("z", T.FLOAT, [1, 4]),
        ],
        [
            nh.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w"),
            nh.from_array(np.array(3, np.int64), "n"),
            nh.from_array(np.array(True), "t"),
        ],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_shadowing_subgraph_initializer_converts_to_what_ort_computes(tmp_path: Path) -> None:
    """convert(proto) renamed the body's `w` apart in the caller's proto too: the original then
    computed with the outer `w` (max difference 13 here) and only validate noticed."""
    model = _loop_shadowing_an_initializer()
    before = model.SerializeToString()
    x = {"x": np.ones((1, 4), np.float32)}
    expected = run(onnx.ModelProto.FromString(before), x)
    out = amp_convert.convert(model, level="O2")
    assert model.SerializeToString() == before  # the caller's proto, names included
    for got, want in zip(run(out, x), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    src, dst = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, src)
    amp_convert.convert_file(src, dst, level="O3")
    for got, want in zip(run(str(dst), x), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
