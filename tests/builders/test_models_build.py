"""The FP32 test-model builders produce valid, runnable, deterministic models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from models import build as build_mod
from models.big import write_big_model
from models.blocks import ALL_BLOCKS
from models.decoders import ALL_DECODERS
from models.focused import ALL_FOCUSED, if_outer_capture
from models.inputs import DEFAULT_DIMS, sample_inputs

ort = pytest.importorskip("onnxruntime")

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
ALL = {**ALL_BLOCKS, **ALL_FOCUSED, **ALL_DECODERS, **build_mod.SAMPLES}
#: Models whose If branches reuse names, as optimum's merged decoders do (unique per graph scope).
BRANCH_LOCAL_NAMES = {"decoder_model_merged"}


def _session(model: onnx.ModelProto | str) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    src = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)


def _graphs(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)


def _check_outputs(model: onnx.ModelProto, feeds: dict, outputs: list) -> None:
    dims = dict(DEFAULT_DIMS)
    for vi, value in zip(model.graph.output, outputs, strict=True):
        declared = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        assert value.dtype == declared, f"{vi.name}: {value.dtype} != {declared}"
        if value.dtype.kind == "f":
            assert np.isfinite(value).all(), f"{vi.name} has non-finite values"
        shape = vi.type.tensor_type.shape.dim
        assert len(shape) == value.ndim, vi.name
        for d, actual in zip(shape, value.shape, strict=True):
            if d.HasField("dim_value"):
                assert d.dim_value == actual, f"{vi.name}: {value.shape}"
            elif d.dim_param in dims:
                assert dims[d.dim_param] == actual, f"{vi.name}: {d.dim_param}={actual}"


EXPECTED_BLOCKS = [
    "bert_encoder",
    "gpt_decoder",
    "resnet_cnn",
    "yolo_head",
    "lstm_model",
    "loop_rnn",
    "scan_rnn",
]
EXPECTED_FOCUSED = [
    "resize_scales",
    "range_model",
    "topk_model",
    "nms_model",
    "if_outer_capture",
    "loop_outer_capture",
    "shared_initializer",
    "existing_cast_to_float",
    "random_normal_like",
    "constant_of_shape",
    "custom_domain",
    "out_of_range_weights",
    "quantized_model",
    "graph_input_initializers",
    "fp16_overflow",
    "multi_output_int",
]


def test_registry_names() -> None:
    assert list(ALL_BLOCKS) == EXPECTED_BLOCKS
    assert list(ALL_FOCUSED) == EXPECTED_FOCUSED
    assert list(ALL_DECODERS) == ["decoder_with_past", "decoder_model_merged"]
    assert set(ALL_DECODERS) <= set(build_mod.BUILDERS)


def _value_types(graph: onnx.GraphProto) -> dict[str, set[int]]:
    """Value name -> element types it has in ``graph`` (after shape inference)."""
    types: dict[str, set[int]] = {}
    for vi in [*graph.value_info, *graph.output]:
        types.setdefault(vi.name, set()).add(vi.type.tensor_type.elem_type)
    return types


def test_merged_decoder_branches_reuse_names_with_other_dtypes() -> None:
    merged = ALL_DECODERS["decoder_model_merged"]()
    model = onnx.shape_inference.infer_shapes(merged, strict_mode=True)
    (if_node,) = model.graph.node
    assert (if_node.op_type, list(if_node.input)) == ("If", ["use_cache_branch"])
    branches = {a.name: a.g for a in if_node.attribute}
    then_t, else_t = (_value_types(branches[k]) for k in ("then_branch", "else_branch"))
    assert then_t["t"] == {onnx.TensorProto.INT64} and else_t["t"] == {onnx.TensorProto.FLOAT}
    add = "/transformer/Add_output_0"
    assert then_t[add] == {onnx.TensorProto.INT64} and else_t[add] == {onnx.TensorProto.FLOAT}
    outs = [o.name for o in model.graph.output]
    assert [o.name for o in branches["then_branch"].output] == outs == list(if_node.output)
    assert not branches["then_branch"].initializer and len(model.graph.initializer) > 10


def _run_decoder(sess, feeds: dict, names: list[str]) -> dict[str, np.ndarray]:
    return dict(zip(names, sess.run(None, feeds), strict=True))


def test_decoders_agree_step_by_step() -> None:
    """Prefix without past + one step with past == the whole sequence without past."""
    with_past, merged = (ALL_DECODERS[n]() for n in ("decoder_with_past", "decoder_model_merged"))
    names = [o.name for o in merged.graph.output]
    assert names[1:] == [f"present.{i}.{kv}" for i in range(2) for kv in ("key", "value")]
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 64, (2, 6))
    pos, mask = np.tile(np.arange(6), (2, 1)), np.ones((2, 6), np.int64)
    empty = {
        f"past_key_values.{i}.{kv}": np.zeros((2, 4, 0, 8), np.float32)
        for i in range(2)
        for kv in ("key", "value")
    }
    sm, sp = _session(merged), _session(with_past)

    def merged_run(n: int) -> dict[str, np.ndarray]:
        feeds = {"input_ids": ids[:, :n], "attention_mask": mask[:, :n], "position_ids": pos[:, :n]}
        return _run_decoder(sm, {**feeds, **empty, "use_cache_branch": np.array([False])}, names)

    full, prefix = merged_run(6), merged_run(4)
    past = {k.replace("present", "past_key_values"): v for k, v in prefix.items() if k != "logits"}
    feeds = {"input_ids": ids[:, 4:], "attention_mask": mask, "position_ids": pos[:, 4:]}
    step = _run_decoder(sp, {**feeds, **past}, names)
    np.testing.assert_allclose(step["logits"], full["logits"][:, 4:], atol=1e-5)
    assert step["present.1.value"].shape == (2, 4, 6, 8)
    np.testing.assert_allclose(step["present.1.value"], full["present.1.value"], atol=1e-5)
    cached = _run_decoder(sm, {**feeds, **past, "use_cache_branch": np.array([True])}, names)
    for k, v in step.items():
        np.testing.assert_array_equal(cached[k], v)
    assert full["logits"].std() > 1.0  # top-1 margins well above FP16 rounding


@pytest.mark.parametrize("name", sorted(ALL))
def test_builder_valid_and_runs(name: str) -> None:
    model = ALL[name]()
    onnx.checker.check_model(model, full_check=True)
    if name == "graph_input_initializers":
        assert (model.ir_version, model.opset_import[0].version) == (3, 9)
        assert {t.name for t in model.graph.initializer} <= {i.name for i in model.graph.input}
    else:
        assert model.ir_version == 9
        assert {o.domain: o.version for o in model.opset_import}[""] == 17
    scopes = [g.node for g in _graphs(model.graph)]
    if name not in BRANCH_LOCAL_NAMES:
        scopes = [list(_all_nodes(model.graph))]
    for nodes in scopes:
        names = [n.name for n in nodes]
        assert all(names) and len(set(names)) == len(names), "node names unique, non-empty"
        produced = [o for n in nodes for o in n.output if o]
        assert len(set(produced)) == len(produced), "value names must be unique"
    assert model.doc_string, "the model says which trap it exercises"

    feeds = sample_inputs(model, seed=0)
    outputs = _session(model).run(None, feeds)
    _check_outputs(model, feeds, outputs)


@pytest.mark.parametrize("name", sorted(ALL))
def test_builder_deterministic(name: str) -> None:
    assert ALL[name]().SerializeToString() == ALL[name]().SerializeToString()


def test_if_outer_capture_both_branches() -> None:
    model = if_outer_capture()
    sess = _session(model)
    x = sample_inputs(model, seed=0)["x"]
    results = [sess.run(None, {"x": v})[0] for v in (np.abs(x), -np.abs(x))]
    for r in results:
        assert r.shape == (2, 4, 8) and np.isfinite(r).all()
    assert not np.allclose(results[0], -results[1])  # different branches, not just linear


def test_int_inputs_have_ranges() -> None:
    for name, builder in ALL.items():
        model = builder()
        ranges = {p.key for p in model.metadata_props}
        for vi in model.graph.input:
            if vi.type.tensor_type.elem_type == onnx.TensorProto.INT64:
                assert f"input_range:{vi.name}" in ranges, (name, vi.name)


@pytest.mark.parametrize("name", ["sample_bert", "sample_resnet"])
def test_committed_samples(name: str) -> None:
    path = MODELS_DIR / f"{name}.onnx"
    assert path.stat().st_size < 300_000
    assert path.read_bytes() == build_mod.SAMPLES[name]().SerializeToString(), (
        f"{path} is stale: python -m models.build models --only {name}"
    )
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(path)
    _check_outputs(model, {}, _session(str(path)).run(None, sample_inputs(model)))


def test_big_model_small_target(tmp_path: Path) -> None:
    info = write_big_model(tmp_path / "big.onnx", target_bytes=5_000_000, width=512)
    assert info.data_path == tmp_path / "big.onnx.data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data"]
    assert info.data_bytes >= 5_000_000 and info.data_path.stat().st_size == info.data_bytes
    assert info.path.stat().st_size < 50_000  # weights are not inline
    proto = onnx.load(str(info.path), load_external_data=False)
    assert len(proto.graph.initializer) == 2 * info.layers
    for t in proto.graph.initializer:
        assert t.data_location == onnx.TensorProto.EXTERNAL
        entries = {e.key: e.value for e in t.external_data}
        assert entries["location"] == "big.onnx.data"
        assert int(entries["offset"]) % 4096 == 0
    onnx.checker.check_model(str(info.path), full_check=True)
    x = np.random.default_rng(0).standard_normal((2, 512)).astype(np.float32)
    (y,) = _session(str(info.path)).run(None, {"x": x})
    assert y.shape == (2, 512) and np.isfinite(y).all()
    # the same seed gives the same data
    again = write_big_model(tmp_path / "again" / "big.onnx", target_bytes=5_000_000, width=512)
    assert again.data_path.read_bytes() == info.data_path.read_bytes()


def test_build_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(tmp_path), "--only", "topk_model", "sample_resnet", "big", "--big-bytes", "1000"]
    assert build_mod.main(argv) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["big.onnx", "big.onnx.data", "sample_resnet.onnx", "topk_model.onnx"]
    assert "peak RSS" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        build_mod.main([str(tmp_path), "--only", "no_such_model"])
