"""Contrib ops are first-class: ORT's schema table, fused graphs converted, loaded and emulated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from amp_convert import convert, schema
from amp_convert.commands.cli import cli
from amp_convert.errors import OptionError
from amp_convert.schema.contrib import TABLE_PATH, load_contrib_table, validate_table
from amp_convert.validation import validate
from models.fused import ALL_FUSED, genai_llama, ort_optimized_bert, step_feeds
from tests.helpers import FLOAT, FLOAT16, all_nodes, casts, session

pytestmark = pytest.mark.integration

INT32, INT64 = onnx.TensorProto.INT32, onnx.TensorProto.INT64
FUSED = ["fused_bert", "fused_gpt2_past", "genai_llama", "genai_llama_mha"]
#: ops ORT defines in the ONNX domain that the fused models use
ORT_ONNX_DOMAIN = {"SimplifiedLayerNormalization"}


def fused_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [
        n
        for n in all_nodes(model.graph)
        if n.domain == "com.microsoft"
        or n.op_type in ORT_ONNX_DOMAIN
        or (n.op_type == "LayerNormalization" and model.opset_import[0].version < 17)
    ]


def ort_types(model: onnx.ModelProto, names: list[str]) -> dict[str, str]:
    """The element types ONNX Runtime gives these values when it loads the model.

    The values become graph outputs with the types the converter declared; ORT checks them
    against its own inference from the contrib schemas, so a wrong declaration fails to load.
    """
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    declared = {vi.name: vi for vi in probe.graph.value_info}
    present = {o.name for o in probe.graph.output}
    for name in names:
        if name not in present:
            probe.graph.output.append(declared[name])
    sess = session(probe)
    sess.run(None, step_feeds(model))
    return {o.name: o.type for o in sess.get_outputs() if o.name in names}


@pytest.mark.parametrize("name", sorted(ALL_FUSED))
def test_fused_models_are_deterministic_and_run_in_ort(name: str) -> None:
    model = ALL_FUSED[name]()
    assert model.SerializeToString() == ALL_FUSED[name]().SerializeToString()
    outputs = session(model).run(None, step_feeds(model))
    assert all(np.isfinite(o).all() for o in outputs)


def test_table_is_package_data_with_its_ort_version() -> None:
    data = json.loads(TABLE_PATH.read_text())
    table = load_contrib_table()
    assert data["ort_version"] == table.ort_version == schema.table_version()
    assert "get_all_operator_schema" in data["source"]
    ms = table.ops("com.microsoft")
    assert {"Attention", "MultiHeadAttention", "GroupQueryAttention", "RotaryEmbedding"} <= ms
    assert {"EmbedLayerNormalization", "SkipSimplifiedLayerNormalization", "BiasGelu"} <= ms
    assert "SimplifiedLayerNormalization" in table.ops("")  # ORT's, in the ONNX domain
    assert "Conv" not in table.ops("")  # onnx's own ops are not repeated


def test_shipped_table_validates_and_loads_lazily_as_it_validates() -> None:
    """load_contrib_table builds an op's schemas at its first lookup, without validating the
    file again (this test does): every op comes out as validate_table builds it."""
    data = json.loads(TABLE_PATH.read_text())
    eager = validate_table(data, "shipped")
    lazy = load_contrib_table()
    assert len(eager.by_op) > 150
    for domain, op in eager.by_op:
        assert lazy.schemas(domain, op) == eager.schemas(domain, op)
    assert lazy.by_op == eager.by_op
    assert lazy.schemas("com.microsoft", "NoSuchOp") == ()


@pytest.mark.parametrize(
    ("op", "slot", "fixed"),
    [
        ("Attention", ("input", 3), "tensor(int32)"),  # mask_index
        ("Attention", ("input", 6), "tensor(int32)"),  # past_sequence_length
        ("EmbedLayerNormalization", ("output", 1), "tensor(int32)"),  # mask_index
        ("GroupQueryAttention", ("input", 5), "tensor(int32)"),  # seqlens_k
        ("GroupQueryAttention", ("input", 6), "tensor(int32)"),  # total_sequence_length
        ("GroupQueryAttention", ("input", 9), "tensor(int64)"),  # position_ids
        ("RotaryEmbedding", ("input", 1), "tensor(int64)"),  # position_ids
        ("MultiHeadAttention", ("input", 4), "tensor(int32)"),  # key_padding_mask
    ],
)
def test_fixed_integer_slots(op: str, slot: tuple[str, int], fixed: str) -> None:
    sig = schema.signature(op, "com.microsoft", 1)
    assert sig is not None and sig.source == schema.ORT_TABLE
    s = sig.input_slot(slot[1]) if slot[0] == "input" else sig.output_slot(slot[1])
    assert s is not None and s.allowed == {fixed}
    data = sig.output_slot(0)  # the data path admits the low types
    assert {"tensor(float16)", "tensor(float)"} <= data.allowed


def test_one_interface_over_onnx_and_ort_schemas() -> None:
    # onnx first; ORT's table only for what onnx lacks at that opset
    assert schema.signature("LayerNormalization", "", 17).source == schema.ONNX
    assert schema.signature("LayerNormalization", "", 14).source == schema.ORT_TABLE
    assert schema.signature("SimplifiedLayerNormalization", "ai.onnx", 21).source == "onnxruntime"
    assert schema.signature("NoSuchOp", "com.microsoft", 1) is None
    assert schema.has_attribute("LayerNormalization", "", 14, "stash_type")
    assert schema.has_attribute("SkipLayerNormalization", "com.microsoft", 1, "epsilon")
    sig = schema.signature("SkipSimplifiedLayerNormalization", "com.microsoft", 1)
    assert sig.names_of("U") == ["mean", "inv_std_var"]
    assert sig.output_slot(1).allowed == {"tensor(float)"}  # statistics stay FP32


def test_generator_reproduces_the_shipped_table() -> None:
    import onnxruntime

    from scripts.gen_ort_contrib_schemas import build_table, dump_json

    shipped = TABLE_PATH.read_text()
    if onnxruntime.__version__ != json.loads(shipped)["ort_version"]:
        pytest.skip(f"table is from another onnxruntime than {onnxruntime.__version__}")
    assert dump_json(build_table()) == shipped


@pytest.mark.parametrize("name", FUSED)
@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_fused_nodes_go_low_int_slots_untouched(name: str, level: str) -> None:
    original = ALL_FUSED[name]()
    converted, report = convert(original, level=level, return_report=True)
    assert not report.warnings, report.warnings  # the ONNX checker path accepted the model
    nodes = fused_nodes(converted)
    assert nodes
    for node in nodes:
        assert report.decision(node.name).precision == "low", report.decision(node.name)
    float_io = [
        v
        for v in (*original.graph.input, *original.graph.output)
        if v.type.tensor_type.elem_type == FLOAT
    ]
    # keep_io_types: one Cast per float graph input/output, nothing inside
    assert casts(converted) - casts(original) == len(float_io)
    types = ort_types(converted, [o for n in nodes for o in n.output if o])
    inferred = {vi.name: vi.type.tensor_type.elem_type for vi in converted.graph.value_info}
    for node in nodes:
        for out in filter(None, node.output):
            want = "tensor(int32)" if inferred.get(out) == INT32 else "tensor(float16)"
            assert types[out] == want, (node.name, out, types[out])
    for node in all_nodes(converted.graph):
        if node.op_type == "EmbedLayerNormalization":
            assert inferred[node.output[1]] == INT32  # mask_index
        if node.op_type == "GroupQueryAttention":
            assert {inferred.get(node.input[5]), inferred.get(node.input[6])} == {INT32}


@pytest.mark.parametrize("name", FUSED)
def test_fused_models_emulate_within_cosine(name: str) -> None:
    original = ALL_FUSED[name]()
    converted = convert(original, level="O2")
    report = validate(original, converted, provider="emulate", inputs=step_feeds(original), runs=1)
    for out in report.outputs:
        assert out.cosine >= 0.999, (out.name, out.cosine)
    assert sum(report.emulation["rounding_points"].values()) > 0


def test_genai_llama_without_keep_io_types_is_all_fp16() -> None:
    original = genai_llama()
    with pytest.raises(onnx.checker.ValidationError, match="SimplifiedLayerNormalization"):
        onnx.checker.check_model(original)  # what used to refuse the model
    converted, report = convert(original, keep_io_types=False, return_report=True)
    assert casts(converted) == casts(original)  # no Cast added anywhere
    for v in (*converted.graph.input, *converted.graph.output):
        if v.name.startswith(("past_key_values", "present", "logits")):
            assert v.type.tensor_type.elem_type == FLOAT16, v.name
    assert all(report.decision(n.name).precision == "low" for n in fused_nodes(converted))


def test_rotary_caches_fp16_at_long_positions() -> None:
    """Measured, not guessed: FP16 cos/sin caches rotate as well at position 8000 as at 0.

    Each cache entry is one rounded value in [-1, 1] (error <= 2^-12 whatever the position);
    position ids stay int64, so no position arithmetic happens in FP16.
    """
    original = genai_llama(attention="mha", max_positions=8192)
    converted = convert(original, level="O2")
    caches = {t.name: t.data_type for t in converted.graph.initializer if "cache" in t.name}
    assert caches == {"cos_cache": FLOAT16, "sin_cache": FLOAT16}
    cosines = {}
    for start in (0, 8000):
        feeds = step_feeds(original, start=start)
        report = validate(original, converted, provider="emulate", inputs=feeds, runs=1)
        cosines[start] = min(o.cosine for o in report.outputs)
    assert min(cosines.values()) >= 0.9999, cosines
    assert abs(cosines[8000] - cosines[0]) < 1e-4


def test_ort_optimizer_fuses_plain_bert_and_every_fused_node_goes_fp16() -> None:
    fused_model = ort_optimized_bert()
    fused = {n.op_type for n in fused_model.graph.node if n.domain == "com.microsoft"}
    assert {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization"} <= fused
    converted, report = convert(fused_model, level="O2", return_report=True)
    nodes = [n for n in converted.graph.node if n.domain == "com.microsoft"]
    assert all(report.decision(n.name).precision == "low" for n in nodes)
    types = ort_types(converted, [n.output[0] for n in nodes])
    assert set(types.values()) == {"tensor(float16)"}
    assert casts(converted) - casts(fused_model) == 1  # the one float output


def test_user_ops_with_a_domain() -> None:
    original = ALL_FUSED["fused_bert"]()
    _, report = convert(original, fp32_ops=["com.microsoft:Attention"], return_report=True)
    attention = [d for d in report.nodes if d.op_type == "Attention"]
    assert {d.precision for d in attention} == {"fp32"}
    assert all(d.reason.startswith("user") for d in attention)
    _, report = convert(
        original, level="O1", fp16_ops=["com.microsoft:BiasGelu"], return_report=True
    )
    assert {d.precision for d in report.nodes if d.op_type == "BiasGelu"} == {"low"}
    _, report = convert(
        original,
        fp32_ops=["Attention", "ai.onnx:Gemm"],
        return_report=True,
    )
    assert report.warnings == [
        "--fp32-ops Attention: no node of the model is Attention; ignored; did you mean "
        "com.microsoft:Attention?",
    ]  # ai.onnx:Gemm is the pooler's Gemm
    assert {d.precision for d in report.nodes if d.op_type == "Gemm"} == {"fp32"}
    # an op no schema knows is an error in the API as in the CLI, never a warning
    with pytest.raises(OptionError, match=r"com.microsoft:Atention.*did you mean 'Attention'"):
        convert(original, fp32_ops=["com.microsoft:Atention"])


def _with_unknowns() -> onnx.ModelProto:
    """fused_bert plus an Attention input no schema version has, and an op no table knows."""
    model = ALL_FUSED["fused_bert"]()
    attn = next(n for n in model.graph.node if n.op_type == "Attention")
    while len(attn.input) < 7:
        attn.input.append("")
    attn.input.append(attn.input[0])  # an 8th input: a newer Attention than the table's
    gelu = next(n for n in model.graph.node if n.op_type == "FastGelu")
    gelu.op_type = "FutureGelu"
    return model


def test_unknown_contrib_slot_or_op_kept_with_a_warning(tmp_path: Path) -> None:
    converted, report = convert(_with_unknowns(), return_report=True)
    attn = next(n for n in converted.graph.node if n.op_type == "Attention")
    future = next(n for n in converted.graph.node if n.op_type == "FutureGelu")
    assert report.decision(attn.name).precision == "fp32"
    assert "input 7 of com.microsoft:Attention" in report.decision(attn.name).reason
    assert report.decision(future.name).precision == "fp32"
    assert any("com.microsoft:Attention" in w and "kept as it is" in w for w in report.warnings)
    assert any("1 node(s) of com.microsoft:FutureGelu" in w for w in report.warnings)
    # the other fused nodes still go low
    others = [n for n in converted.graph.node if n.op_type == "SkipLayerNormalization"]
    assert {report.decision(n.name).precision for n in others} == {"low"}
    src, dst = tmp_path / "m.onnx", tmp_path / "m.fp16.onnx"
    onnx.save(_with_unknowns(), src)
    result = CliRunner().invoke(cli, [str(src), "-o", str(dst)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "FutureGelu" in result.output and dst.exists()


@pytest.mark.parametrize("keep_io", [True, False])
@pytest.mark.parametrize("name", FUSED)
def test_converted_fused_model_is_left_as_it_is(name: str, keep_io: bool) -> None:
    first = convert(ALL_FUSED[name](), keep_io_types=keep_io)
    _, report = convert(first, keep_io_types=keep_io, return_report=True)
    assert report.already_converted  # the stamp
    del first.metadata_props[:]  # without it, a second pass finds nothing to change
    again, report = convert(first, keep_io_types=keep_io, return_report=True)
    assert not report.already_converted and not report.warnings
    assert [(n.op_type, n.domain) for n in again.graph.node] == [
        (n.op_type, n.domain) for n in first.graph.node
    ]


def test_emulate_runs_ort_converter_output_with_omitted_optional_outputs() -> None:
    """ORT's converter types the omitted ('') outputs of SkipSimplifiedLayerNormalization; the
    emulated copy must leave them alone (it once gave them a Cast with no output)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    original = genai_llama()
    theirs = convert_float_to_float16(genai_llama(), keep_io_types=False)
    report = validate(original, theirs, provider="emulate", inputs=step_feeds(original), runs=1)
    assert min(o.cosine for o in report.outputs) >= 0.999
