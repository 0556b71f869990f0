"""The target kernel table: parsing ORT's OperatorKernels.md, answering accepts(), loading files."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from amp_convert.errors import AmpConvertError, TargetError
from amp_convert.targets import find_uncovered, formals, load_table, load_target, uncovered_nodes
from amp_convert.targets.kernel_table import table_from_data
from amp_convert.targets.opkernel_doc import parse_operator_kernels
from amp_convert.targets.table_format import validate_table

F, H, B = ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16
I32, I64 = ir.DataType.INT32, ir.DataType.INT64
ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "amp_convert" / "targets" / "ort_cuda_kernels.json"

SAMPLE = """\
## Supported Operators and Data Types

<a name="cpuexecutionprovider"/>

## Operators implemented by CPUExecutionProvider

| Op Name | Parameters | OpSet Version | Types Supported |
|---------|------------|---------------|-----------------|
|**Operator Domain:** *ai.onnx*||||
|Clip|*in* input:**T**<br> *out* output:**T**|6+|**T** = tensor(float)|

<a name="cudaexecutionprovider"/>

## Operators implemented by CUDAExecutionProvider

| Op Name | Parameters | OpSet Version | Types Supported |
|---------|------------|---------------|-----------------|
|**Operator Domain:** *ai.onnx*||||
{clip_row}
|||12|**T** = tensor(float), tensor(float16)|
|||[6, 11]|**T** = tensor(float)|
{seq_row}
| |
| |
|**Operator Domain:** *com.microsoft*||||
{gelu_row}
| |
| |

<a name="dmlexecutionprovider"/>

## Operators implemented by DmlExecutionProvider

| Op Name | Parameters | OpSet Version | Types Supported |
|---------|------------|---------------|-----------------|
|**Operator Domain:** *ai.onnx*||||
|Clip|*in* input:**T**<br> *out* output:**T**|6+|**T** = tensor(bfloat16)|
""".format(
    clip_row="|Clip|*in* input:**T**<br> *in* min:**T**<br> *in* max:**T**<br> *out* output:**T**"
    "<br><br>or<br><br>*in* input:**T**<br> *out* output:**T**"
    "|13+|**T** = tensor(double), tensor(float), tensor(float16)|",
    seq_row="|SequenceAt|*in* input_sequence:**S**<br> *in* position:**I**<br> *out* tensor:**T**"
    "|11+|**I** = tensor(int32), tensor(int64)<br/> **S** = seq(tensor(float)), "
    "seq(tensor(float16))<br/> **T** = tensor(float), tensor(float16)|",
    gelu_row="|FastGelu|*in* X:**T**<br> *in* bias:**T**<br> *out* Y:**T**"
    "|1+|**T** = tensor(float), tensor(float16)|",
)


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen", ROOT / "scripts" / "gen_ort_cuda_kernels.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- parsing the markdown -----------------------------------------------------------------------


def test_parse_sample_cuda_section_only() -> None:
    table = parse_operator_kernels(SAMPLE, "CUDAExecutionProvider")
    assert set(table) == {"ai.onnx", "com.microsoft"}
    clip = table["ai.onnx"]["Clip"]
    assert clip["params"] == [
        {
            "inputs": [["input", "T"], ["min", "T"], ["max", "T"]],
            "outputs": [["output", "T"]],
        },
        {"inputs": [["input", "T"]], "outputs": [["output", "T"]]},
    ]
    assert clip["kernels"] == [
        {"since": 13, "until": None, "types": {"T": ["double", "float", "float16"]}},
        {"since": 12, "until": 12, "types": {"T": ["float", "float16"]}},
        {"since": 6, "until": 11, "types": {"T": ["float"]}},
    ]
    seq_at = table["ai.onnx"]["SequenceAt"]["kernels"][0]["types"]
    assert seq_at == {
        "I": ["int32", "int64"],
        "S": ["seq(float)", "seq(float16)"],
        "T": ["float", "float16"],
    }
    assert table["com.microsoft"]["FastGelu"]["kernels"][0]["since"] == 1


def test_parse_errors_name_the_problem() -> None:
    with pytest.raises(TargetError, match=r"no '## Operators implemented by NoSuchEP' section"):
        parse_operator_kernels(SAMPLE, "NoSuchEP")
    bad = SAMPLE.replace("|||12|", "|||twelve|")
    with pytest.raises(TargetError) as e:
        parse_operator_kernels(bad, "CUDAExecutionProvider")
    line = bad.splitlines().index("|||twelve|**T** = tensor(float), tensor(float16)|") + 1
    assert str(e.value).startswith(
        f"line {line}: opset version 'twelve' is none of 'N+', '[A, B]', 'N':"
    )


def test_generator_writes_a_table_the_loader_reads(tmp_path: Path) -> None:
    gen = _generator()
    doc = tmp_path / "OperatorKernels.md"
    doc.write_text(SAMPLE)
    assert gen.main(["--doc", str(doc), "--ort-version", "9.9.9", "--out-dir", str(tmp_path)]) == 0
    table = load_table(tmp_path / "ort_cuda_kernels.json")
    assert (table.name, table.ort_version, table.fallback) == ("ort-cuda", "9.9.9", "ort-cpu")
    cpu = load_table(tmp_path / "ort_cpu_kernels.json")
    assert (cpu.name, cpu.fallback) == ("ort-cpu", None)
    assert cpu.accepts("Clip", "", 13, [F], [F]) is None
    assert cpu.accepts("Clip", "", 11, [H], [H]) == "no FP16 kernel in ORT CPU for Clip-11"
    assert table.accepts("Clip", "", 11, [H], [H]) == "no FP16 kernel in ORT CUDA for Clip-11"
    assert table.accepts("Clip", "", 12, [H], [H]) is None
    assert table.accepts("SequenceAt", "", 11, [H, I64], [H]) is None
    assert table.has_kernel("FastGelu", "com.microsoft", 1)
    assert not table.has_kernel("MatMul", "", 13)


def test_committed_tables_are_in_generator_format() -> None:
    gen = _generator()
    text = TABLE.read_text()
    data = json.loads(text)
    assert gen.dump_json(data) == text
    assert data["constraints"] == gen.EXTRA_CONSTRAINTS
    assert data["source"]["path"] == "docs/OperatorKernels.md"
    cpu_text = TABLE.with_name("ort_cpu_kernels.json").read_text()
    cpu = json.loads(cpu_text)
    assert gen.dump_json(cpu) == cpu_text
    assert (cpu["provider"], cpu["ort_version"]) == ("CPUExecutionProvider", data["ort_version"])


@pytest.mark.integration
@pytest.mark.parametrize("target", ["ort-cuda", "ort-cpu"])
def test_shipped_tables_validate_and_load_lazily_as_they_validate(target: str) -> None:
    """load_target reads a shipped table without validating it again (this test does) and
    builds an op's kernels at its first lookup: every op comes out as the validating load
    builds it."""
    from amp_convert.targets.kernel_table import _load_target

    path = TABLE.with_name(f"ort_{target.removeprefix('ort-')}_kernels.json")
    data = json.loads(path.read_text())
    validate_table(data, str(path))
    lazy, eager = _load_target(target), table_from_data(data, str(path))
    keys = [(d, op) for d, ops in data["kernels"].items() for op in ops]
    assert len(keys) > 100
    for domain, op in keys:
        assert lazy.entry(op, domain) == eager.entry(op, domain) is not None
    assert lazy.entry("NoSuchOp", "") is None
    assert repr(lazy) == repr(eager)


# --- accepts() on the committed ORT CUDA table ---------------------------------------------------
# --- accepts() on the committed ORT CUDA table ---------------------------------------------------


@pytest.fixture(scope="module")
def cuda():
    return load_target("ort-cuda")


def test_target_metadata(cuda) -> None:
    assert cuda.name == "ort-cuda"
    assert cuda.ort_version == json.loads(TABLE.read_text())["ort_version"]
    assert load_target("ort-cuda") is cuda
    assert load_target() is cuda


def test_clip_fp16_needs_opset_12(cuda) -> None:
    assert cuda.accepts("Clip", "", 11, [H, H, H], [H]) == "no FP16 kernel in ORT CUDA for Clip-11"
    assert cuda.accepts("Clip", "", 6, [H], [H]) == "no FP16 kernel in ORT CUDA for Clip-6"
    assert cuda.accepts("Clip", "", 11, [F, F, F], [F]) is None
    assert cuda.accepts("Clip", "", 13, [H, H, H], [H]) is None
    assert cuda.accepts("Clip", "", 13, [H, None, None], [H]) is None
    assert cuda.accepts("Clip", "", 11, [B], [B]) == "no BF16 kernel in ORT CUDA for Clip-11"


def test_batchnorm_needs_one_float_type(cuda) -> None:
    mixed = [H, F, F, F, F]
    want = (
        "ORT CUDA BatchNormalization-15 needs one float type for X, scale, B, input_mean, input_var"
    )
    assert cuda.accepts("BatchNormalization", "", 15, mixed, [H]) == want
    assert cuda.accepts("BatchNormalization", "", 15, [H, H, H, F, F], [H]).endswith(
        "needs one float type for X, scale, B, input_mean, input_var"
    )
    assert cuda.accepts("BatchNormalization", "", 15, [H] * 5, [H]) is None
    assert cuda.accepts("BatchNormalization", "", 15, [F] * 5, [F]) is None
    assert cuda.accepts("BatchNormalization", "", 14, [H, H, H, F, F], [H]) == (
        "ORT CUDA BatchNormalization-14 needs one float type for X, scale, B, input_mean, input_var"
    )
    # below 14 the schema itself binds all five to T
    assert cuda.accepts("BatchNormalization", "", 9, mixed, [H]) == (
        "the BatchNormalization-9 schema needs one type for X, scale, B, mean, var, Y (T), "
        "got float, float16"
    )


def test_common_fp16_ops(cuda) -> None:
    assert cuda.accepts("MatMul", "", 13, [H, H], [H]) is None
    assert cuda.accepts("Softmax", "", 13, [H], [H]) is None
    assert cuda.accepts("Softmax", "", 11, [H], [H]) is None
    assert cuda.accepts("Cast", "", 13, [H], [F]) is None
    assert cuda.accepts("Cast", "", 19, [F], [H]) is None
    assert (
        cuda.accepts("Range", "", 11, [H, H, H], [H]) == "no FP16 kernel in ORT CUDA for Range-11"
    )


def test_layer_normalization(cuda) -> None:
    # opset 17: X, Scale, B share T; Mean/InvStdDev (U) are float on CUDA
    assert cuda.accepts("LayerNormalization", "", 17, [H, H, H], [H, F, F]) is None
    assert cuda.accepts("LayerNormalization", "", 17, [H, H, H], [H, H, H]) == (
        "no FP16 kernel in ORT CUDA for LayerNormalization-17 (Mean, InvStdDev: U)"
    )
    # below 17, ORT's own LayerNormalization-1 takes FP16 X with FP32 Scale/B...
    assert cuda.accepts("LayerNormalization", "", 16, [H, F, F], [F]) is None
    # ...but not every pair the markdown's union suggests
    assert cuda.accepts("LayerNormalization", "", 16, [B, F, F], [F]) == (
        "ORT CUDA LayerNormalization-16 has no kernel for X bfloat16, Scale/B/Y float"
    )


def test_resize_roi_must_be_float(cuda) -> None:
    assert cuda.accepts("Resize", "", 13, [H, F, F, None], [H]) is None
    assert cuda.accepts("Resize", "", 13, [H, H, F, None], [H]) == (
        "ORT CUDA Resize-13 takes roi in float only, not float16"
    )
    assert cuda.accepts("Resize", "", 13, [H, None, H], [H]) == (
        "the Resize-13 schema takes float for scales, not float16"
    )


def test_mixed_combinations(cuda) -> None:
    assert cuda.accepts("RMSNormalization", "", 23, [H, F], [F]) is None
    # no kernel takes BF16 X with FP32 scale, so ORT would inline RMSNormalization's body
    assert cuda._reason("RMSNormalization", "", 23, [B, F], [F]) == (
        "ORT CUDA RMSNormalization-23 has no kernel for X bfloat16, scale/Y float"
    )
    assert cuda.inlined("RMSNormalization", "", 23, [B, F], [F])
    assert cuda.accepts("OneHot", "", 11, [I64, I64, H], [H]) is None
    assert cuda.accepts("OneHot", "", 11, [I32, I64, H], [H]) == (
        "ORT CUDA OneHot-11 has no kernel for indices int32, depth int64, values/output float16"
    )
    assert cuda.accepts("Pow", "", 15, [H, F], [H]) is None
    assert cuda.accepts("GridSample", "", 16, [H, H], [H]) == (
        "no FP16 kernel in ORT CUDA for GridSample-16 (X, Y: T1)"
    )


def test_no_kernel_at_all_vs_no_kernel_in_this_type(cuda) -> None:
    reason = "no ORT CUDA kernel for Sign-9 (it runs on the CPU)"
    assert cuda.accepts("Sign", "", 9, [F], [F]) == reason
    assert cuda.accepts("Sign", "", 9, [H], [H]) == reason
    assert not cuda.has_kernel("Sign", "", 9)
    assert cuda.accepts("Sign", "", 13, [H], [H]) is None
    assert cuda.has_kernel("Clip", "", 11)
    assert cuda.has_kernel("Clip", "ai.onnx", 11)
    assert not cuda.has_kernel("Clip", "", 5)
    # Constant becomes an initializer when ORT loads the model
    assert cuda.has_kernel("Constant", "", 13)
    assert cuda.accepts("Constant", "", 13, [], [H]) is None


def test_function_ops_nobody_claims_are_inlined(cuda) -> None:
    # no CUDA or CPU kernel: ORT expands the function body; accepts() says so, unchecked
    for op, opset in [("GroupNormalization", 21), ("Mish", 18)]:
        dtypes = [H, H, H] if op == "GroupNormalization" else [H]
        assert not cuda.has_kernel(op, "", opset)
        assert cuda.inlined(op, "", opset, dtypes, [H])
        assert cuda.accepts(op, "", opset, dtypes, [H]) == (
            f"no ORT CUDA or ort-cpu kernel takes {op}-{opset} in these types: "
            "ORT inlines its function body (not checked here)"
        )
    # Clip-13 has a CUDA kernel, not in BF16; its body is inlined (and then refused by ORT)
    assert cuda.inlined("Clip", "", 13, [B, B, B], [B])
    # the CPU provider has an FP32 Celu, so ORT places it there instead of inlining it
    assert not cuda.inlined("Celu", "", 12, [F], [F])
    assert cuda.accepts("Celu", "", 12, [F], [F]) == (
        "no ORT CUDA kernel for Celu-12 (it runs on the CPU)"
    )
    # a type the schema does not admit is never inlined (ORT refuses the model)
    assert not cuda.inlined("Celu", "", 12, [H], [H])
    # ops without a function body never are; nor are nodes a kernel takes
    assert not cuda.inlined("Clip", "", 11, [H], [H])
    assert not cuda.inlined("Clip", "", 13, [H, H, H], [H])


def test_contrib_ops(cuda) -> None:
    assert cuda.accepts("SkipLayerNormalization", "com.microsoft", 1, [H, H, H, H], [H]) is None
    assert cuda.accepts("FusedConv", "com.microsoft", 1, [H, H], [H]) == (
        "no FP16 kernel in ORT CUDA for FusedConv-1"
    )


@pytest.mark.integration
def test_ort_schemas_come_from_package_data_without_onnxruntime() -> None:
    # ORT's LayerNormalization-1 (ONNX domain, before 17) and the contrib ops are bound through
    # the generated schema table: the answers are the same with onnxruntime unimportable
    code = (
        "import sys; sys.modules['onnxruntime'] = None\n"
        "from onnx_ir import DataType as D\n"
        "from amp_convert.targets import load_target\n"
        "t = load_target('ort-cuda'); H, F, B = D.FLOAT16, D.FLOAT, D.BFLOAT16\n"
        "print(t.accepts('LayerNormalization', '', 16, [H, F, F], [F]))\n"
        "print(t.accepts('LayerNormalization', '', 16, [B, F, F], [F]))\n"
        "print(t.accepts('GroupQueryAttention', 'com.microsoft', 1, [F, F, F], [F]))\n"
        "print(t.accepts('FusedConv', 'com.microsoft', 1, [H, H], [H]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == [
        "None",
        "ORT CUDA LayerNormalization-16 has no kernel for X bfloat16, Scale/B/Y float",
        "no FP32 kernel in ORT CUDA for GroupQueryAttention-1 (query, key, value, cos_cache, "
        "sin_cache, attention_bias, head_sink, q_norm_weight, k_norm_weight, output, output_qk: T)",
        "no FP16 kernel in ORT CUDA for FusedConv-1",
    ]


def test_doc_params_bind_an_op_no_schema_knows() -> None:
    params = [{"inputs": [["X", "T"], ["scale", "tensor(float)"]], "outputs": [["Y", "T"]]}]
    sig = formals.doc_formals(params, {"T"}, 2)
    assert sig is not None and sig.source == "table"
    assert [s.name for s in sig.inputs] == ["X", "scale"]
    assert sig.input_slot(0).is_type_var and not sig.input_slot(1).is_type_var


def test_none_target_accepts_everything() -> None:
    none = load_target("none")
    assert none.name == "none" and none.ort_version is None
    assert not none.inlined("GroupNormalization", "", 21, [H], [H])
    assert none.accepts("Clip", "", 11, [H], [H]) is None
    assert none.accepts("GroupNormalization", "", 21, [H], [H]) is None
    assert none.has_kernel("Anything", "x.y", 1)


def test_unknown_target() -> None:
    with pytest.raises(TargetError) as e:
        load_target("ort-tensorrt")
    assert str(e.value) == (
        "unknown target 'ort-tensorrt': use one of ort-cuda, ort-cpu, none (a table file: "
        "load_table)"
    )


# --- malformed table files -----------------------------------------------------------------------


def _good() -> dict:
    return {
        "format": 1,
        "target": "t",
        "provider": "P",
        "ort_version": "1.0",
        "kernels": {
            "ai.onnx": {
                "Clip": {
                    "params": [],
                    "kernels": [{"since": 6, "until": None, "types": {"T": ["float"]}}],
                }
            }
        },
        "constraints": [
            {
                "op": "Clip",
                "domain": "ai.onnx",
                "since": 6,
                "until": None,
                "kind": "same_type",
                "type_params": ["T"],
                "reason": "r",
            }
        ],
    }


def _clip(d: dict) -> dict:
    return d["kernels"]["ai.onnx"]["Clip"]


MALFORMED = [
    (lambda d: d.update(format=2), "'format' must be 1, got 2"),
    (lambda d: d.pop("ort_version"), "'ort_version' must be a non-empty string, got None"),
    (lambda d: d.update(kernels={}), "'kernels' must be a non-empty object of domains"),
    (
        lambda d: _clip(d)["kernels"][0].update(since=0),
        "kernels['ai.onnx']['Clip']['kernels'][0]: 'since' must be a positive integer, got 0",
    ),
    (
        lambda d: _clip(d)["kernels"][0].update(since=9, until=7),
        "kernels['ai.onnx']['Clip']['kernels'][0]: 'until' 7 is before 'since' 9",
    ),
    (
        lambda d: _clip(d)["kernels"][0].update(types={"T": ["Float 16"]}),
        "kernels['ai.onnx']['Clip']['kernels'][0]['types']['T']: 'Float 16' is not a type name "
        "such as 'float16' or 'seq(float)'",
    ),
    (
        lambda d: _clip(d)["kernels"][0].update(types={"T": []}),
        "kernels['ai.onnx']['Clip']['kernels'][0]['types']['T']: must be a non-empty list of "
        "type names, got []",
    ),
    (lambda d: _clip(d).update(kernels=[]), "kernels['ai.onnx']['Clip']: 'kernels' is empty"),
    (
        lambda d: d.update(fallback="ort-gpu"),
        "'fallback' must be one of ort-cuda, ort-cpu, none or null, got 'ort-gpu'",
    ),
    (
        lambda d: d["constraints"][0].update(kind="sometimes"),
        "constraints[0]: 'kind' must be one of same_type, combinations, allowed_types",
    ),
    (
        lambda d: d["constraints"][0].update(reason=""),
        "constraints[0]: 'reason' must be a non-empty string, got ''",
    ),
    (
        lambda d: d["constraints"][0].update(kind="combinations", allowed=[["float", "float"]]),
        "constraints[0]['allowed'][0]: has 2 types for 1 type_params",
    ),
]


@pytest.mark.parametrize(("mutate", "message"), MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_table_is_rejected(tmp_path: Path, mutate, message: str) -> None:
    data = _good()
    table_from_data(data)  # the unmutated table is fine
    mutate(data)
    path = tmp_path / "table.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TargetError) as e:
        load_table(path)
    assert str(e.value) == f"{path}: {message}"
    assert isinstance(e.value, AmpConvertError)


def test_unreadable_table_files(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"format": 1,\n "target": }')
    with pytest.raises(TargetError) as e:
        load_table(path)
    assert str(e.value) == f"{path}: not valid JSON (line 2, column 12): Expecting value"
    with pytest.raises(TargetError, match=r"missing\.json: cannot read kernel table: "):
        load_table(tmp_path / "missing.json")
    with pytest.raises(TargetError, match="unknown target"):  # a path is no target name
        load_target(str(tmp_path / "missing.json"))
    path.write_text("[]")
    with pytest.raises(TargetError, match=r"a kernel table must be a JSON object$"):
        load_table(path)


# --- uncovered_nodes -----------------------------------------------------------------------------


def _clip_model(opset: int, low: int = TensorProto.FLOAT16) -> ir.Model:
    """x (FP32) -> Cast to FP16 -> Clip -> Cast back: what a converter emits around a Clip."""
    inits = []
    clip_inputs = ["h"]
    if opset >= 11:
        inits = [helper.make_tensor("lo", low, [], [0.0]), helper.make_tensor("hi", low, [], [6.0])]
        clip_inputs = ["h", "lo", "hi"]
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], name="to_low", to=low),
        helper.make_node("Clip", clip_inputs, ["c"], name="relu6"),
        helper.make_node("Cast", ["c"], ["y"], name="to_float", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        inits,
        value_info=[
            helper.make_tensor_value_info("h", low, [2, 3]),
            helper.make_tensor_value_info("c", low, [2, 3]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return ir.serde.deserialize_model(model)


def test_uncovered_nodes_flags_fp16_clip_11(cuda) -> None:
    assert uncovered_nodes(_clip_model(11), cuda) == [
        "relu6 Clip-11: in (float16, float16, float16) out (float16): "
        "no FP16 kernel in ORT CUDA for Clip-11"
    ]
    assert uncovered_nodes(_clip_model(11), load_target("none")) == []
    (found,) = find_uncovered(_clip_model(11), cuda)
    assert (found.node, found.op_type, found.opset, found.has_kernel) == ("relu6", "Clip", 11, True)
    assert found.inputs == (H, H, H) and found.outputs == (H,)


def test_uncovered_nodes_tells_missing_kernels_apart(cuda) -> None:
    graph = helper.make_graph(
        [helper.make_node("Sign", ["x"], ["y"], name="sign")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    (found,) = find_uncovered(ir.serde.deserialize_model(model), cuda)
    assert not found.has_kernel
    assert str(found) == (
        "sign Sign-9: in (float16) out (float16): "
        "no ORT CUDA kernel for Sign-9 (it runs on the CPU)"
    )


def test_uncovered_nodes_clean_with_clip_13(cuda) -> None:
    assert uncovered_nodes(_clip_model(13), cuda) == []
    (bf16,) = find_uncovered(_clip_model(13, TensorProto.BFLOAT16), cuda)
    assert (bf16.has_kernel, bf16.inlined) == (True, True)
    assert str(bf16) == (
        "relu6 Clip-13: in (bfloat16, bfloat16, bfloat16) out (bfloat16): no ORT CUDA or ort-cpu "
        "kernel takes Clip-13 in these types: ORT inlines its function body (not checked here)"
    )


def test_uncovered_nodes_looks_inside_subgraphs(cuda) -> None:
    inner = _clip_model(11).graph
    proto = ir.serde.serialize_graph(inner)
    branch = helper.make_graph(
        list(proto.node), "then", [], list(proto.output), list(proto.initializer)
    )
    branch.value_info.extend(proto.value_info)
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y2"], name="pass")],
        "else",
        [],
        [helper.make_tensor_value_info("y2", TensorProto.FLOAT, [2, 3])],
    )
    node = helper.make_node(
        "If", ["cond"], ["out"], name="branch", then_branch=branch, else_branch=other
    )
    graph = helper.make_graph(
        [node],
        "outer",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    onnx.checker.check_model(model)
    lines = uncovered_nodes(ir.serde.deserialize_model(model), cuda)
    assert lines == [
        "relu6 Clip-11: in (float16, float16, float16) out (float16): "
        "no FP16 kernel in ORT CUDA for Clip-11"
    ]
