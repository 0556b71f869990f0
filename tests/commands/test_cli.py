"""Every CLI option, driven through click's runner: what it writes, prints and exits with."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from amp_convert import __version__
from amp_convert.commands.cli import cli
from models.blocks import bert_encoder
from models.focused import ALL_FOCUSED
from tests.helpers import FLOAT, FLOAT16, io_types, value_types

pytestmark = pytest.mark.integration


def invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def bert(tmp_path: Path) -> Path:
    path = tmp_path / "bert.onnx"
    onnx.save(bert_encoder(), path)
    return path


def report_of(tmp_path: Path, *args: str) -> dict:
    rpath = tmp_path / "report.json"
    result = invoke(*args, "--report", rpath, "--force")
    assert result.exit_code == 0, result.output
    return json.loads(rpath.read_text())


def precision_by_op(report: dict, op: str) -> set[str]:
    return {n["precision"] for n in report["nodes"] if n["op_type"] == op}


def test_default_command_writes_next_to_model(bert: Path) -> None:
    result = invoke(bert, "--level", "O2")
    assert result.exit_code == 0, result.output
    out = bert.with_name("bert.fp16.onnx")
    assert out.exists()
    onnx.checker.check_model(str(out), full_check=True)
    assert f"wrote {out}" in result.output
    for words in (
        "nodes FP16:",
        "nodes FP32:",
        "casts inserted:",
        "initializers converted:",
        "size:",
    ):
        assert words in result.output
    assert "LayerNormalization" in result.output  # kept-FP32 ops by type


def test_explicit_convert_subcommand_and_output(bert: Path, tmp_path: Path) -> None:
    result = invoke("convert", bert, "-o", tmp_path / "x.onnx", "--level", "o1")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "x.onnx").exists()


def test_levels_differ(bert: Path, tmp_path: Path) -> None:
    lows = []
    for level in ("O0", "O1", "O2", "O3"):
        # target none: with ort-cuda, O2 already equals O3 on this encoder
        data = report_of(
            tmp_path, bert, "--level", level, "--target", "none", "-o", tmp_path / "o.onnx"
        )
        assert data["level"] == level
        lows.append(data["nodes_low"])
    assert lows[0] == 0 and lows[0] < lows[1] < lows[2] < lows[3]


def test_dtype_bf16(bert: Path, tmp_path: Path) -> None:
    result = invoke(bert, "--dtype", "bf16")
    assert result.exit_code == 0, result.output
    out = onnx.load(bert.with_name("bert.bf16.onnx"))
    assert onnx.TensorProto.BFLOAT16 in {t.data_type for t in out.graph.initializer}
    assert "BF16" in result.output


def test_keep_io_types_flag(tmp_path: Path) -> None:
    src = tmp_path / "topk.onnx"
    onnx.save(ALL_FOCUSED["topk_model"](), src)
    invoke(src, "-o", tmp_path / "keep.onnx")
    invoke(src, "-o", tmp_path / "low.onnx", "--no-keep-io-types")
    assert io_types(onnx.load(tmp_path / "keep.onnx")) == ([FLOAT], [FLOAT, 7])
    assert io_types(onnx.load(tmp_path / "low.onnx")) == ([FLOAT16], [FLOAT16, 7])


def test_fp32_ops_and_fp16_ops(bert: Path, tmp_path: Path) -> None:
    data = report_of(tmp_path, bert, "--fp32-ops", "MatMul,Gemm", "-o", tmp_path / "a.onnx")
    assert precision_by_op(data, "MatMul") == {"fp32"}
    assert all("user" in n["reason"] for n in data["nodes"] if n["op_type"] == "MatMul")
    data = report_of(
        tmp_path,
        bert,
        "--fp16-ops",
        "Softmax",
        "--fp16-ops",
        "LayerNormalization",
        "-o",
        tmp_path / "b.onnx",
    )
    assert precision_by_op(data, "Softmax") == {"low"}
    assert precision_by_op(data, "LayerNormalization") == {"low"}


def test_exclude_nodes(bert: Path, tmp_path: Path) -> None:
    data = report_of(
        tmp_path,
        bert,
        "--exclude-nodes",
        r"layer0/.*MatMul",
        "--exclude-nodes",
        "^pooler/",
        "-o",
        tmp_path / "o.onnx",
    )
    for n in data["nodes"]:
        if ("layer0/" in n["name"] and n["op_type"] == "MatMul") or n["name"].startswith("pooler/"):
            assert n["precision"] != "low", n
    assert any(n["precision"] == "low" and "layer1/" in n["name"] for n in data["nodes"])


def test_cast_optional_params(tmp_path: Path) -> None:
    src = tmp_path / "shared.onnx"
    onnx.save(ALL_FOCUSED["shared_initializer"](), src)
    invoke(src, "-o", tmp_path / "a.onnx")
    invoke(src, "-o", tmp_path / "b.onnx", "--cast-optional-params")

    def weight_type(p: Path) -> int:
        return {t.name: t.data_type for t in onnx.load(p).graph.initializer}["shared/weight"]

    assert weight_type(tmp_path / "a.onnx") == FLOAT
    assert weight_type(tmp_path / "b.onnx") == FLOAT16


def test_op_lists_file(bert: Path, tmp_path: Path) -> None:
    lists = tmp_path / "lists.txt"
    lists.write_text(
        "# our team's lists\n[deny]\nErf   saw NaNs on our data\n[allow]\n-Gemm\n"
        "[rules]\nSoftmax @axis == -1 infer   last-axis softmax is fine for us\n"
    )
    data = report_of(tmp_path, bert, "--op-lists", lists, "-o", tmp_path / "o.onnx")
    assert precision_by_op(data, "Erf") == {"fp32"}
    erf = next(n for n in data["nodes"] if n["op_type"] == "Erf")
    assert "user" in erf["reason"]
    softmax = next(n for n in data["nodes"] if n["op_type"] == "Softmax")
    assert softmax["op_class"] == "infer" and "user rule" in softmax["reason"]
    gemm = next(n for n in data["nodes"] if n["op_type"] == "Gemm")
    assert gemm["op_class"] == "infer"  # removed from allow: unlisted now
    assert gemm["reason"].startswith("unlisted op")


def test_bad_op_lists_file(bert: Path, tmp_path: Path) -> None:
    lists = tmp_path / "lists.txt"
    lists.write_text("[sometimes]\nMatMul\n")
    result = invoke(bert, "--op-lists", lists)
    assert result.exit_code != 0
    assert "unknown section [sometimes]" in result.output
    assert not bert.with_name("bert.fp16.onnx").exists()


def test_force_quiet_verbose(bert: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.onnx"
    assert invoke(bert, "-o", out).exit_code == 0
    again = invoke(bert, "-o", out)
    assert again.exit_code != 0 and "exists (use --force" in again.output
    quiet = invoke(bert, "-o", out, "--force", "-q")
    assert quiet.exit_code == 0 and quiet.output == ""
    verbose = invoke(bert, "-o", out, "--force", "-v", "--target", "none")
    assert "Softmax" in verbose.output and "deny list" in verbose.output


def test_version_and_help() -> None:
    assert __version__ in invoke("--version").output
    text = invoke("--help").output
    assert "convert" in text and "validate" in text
    text = invoke("convert", "--help").output
    for option in (
        "--level",
        "--dtype",
        "--keep-io-types",
        "--fp32-ops",
        "--fp16-ops",
        "--exclude-nodes",
        "--cast-optional-params",
        "--op-lists",
        "--report",
        "--force",
        "--quiet",
        "--verbose",
        "--validate",
    ):
        assert option in text


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.write_text("hello"), "not an ONNX model"),
        (lambda p: p.write_bytes(b""), "empty file"),
    ],
)
def test_bad_input_one_line_nonzero(tmp_path: Path, make, message: str) -> None:
    path = tmp_path / "m.onnx"
    make(path)
    result = invoke(path)
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("amp-convert: error:")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["m.onnx"] if path.exists() else [])


def test_unknown_level_is_usage_error(bert: Path) -> None:
    result = invoke(bert, "--level", "O9")
    assert result.exit_code == 2
    # the levels as the help, the default and the docs spell them (click >= 8.2 case-folds them)
    assert "'O9' is not one of 'O0', 'O1', 'O2', 'O3'." in result.output


def test_choices_are_shown_and_taken_as_declared(bert: Path, tmp_path: Path) -> None:
    shown = invoke("convert", "--help").output
    assert "--level [O0|O1|O2|O3]" in shown and "--dtype [fp16|bf16]" in shown
    assert invoke(bert, "--level", "o1", "-o", tmp_path / "o.onnx", "-q").exit_code == 0


def test_convert_and_validate(bert: Path, tmp_path: Path) -> None:
    vreport = tmp_path / "v.json"
    result = invoke(
        bert,
        "-o",
        tmp_path / "o.onnx",
        "--validate",
        "--provider",
        "emulate",
        "--runs",
        "2",
        "--warmup",
        "1",
        "--min-cosine",
        "0.999",
        "--validation-report",
        vreport,
        "--junit",
        tmp_path / "v.xml",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(vreport.read_text())
    assert data["passed"] is True
    assert (tmp_path / "v.xml").read_text().count("<testcase") == 2
    failing = invoke(
        bert,
        "-o",
        tmp_path / "o.onnx",
        "--force",
        "--validate",
        "--provider",
        "emulate",
        "--runs",
        "0",
        "--atol",
        "1e-9",
        "--rtol",
        "0",
    )
    assert failing.exit_code == 1


def test_types_written_by_cli_match_report(bert: Path, tmp_path: Path) -> None:
    data = report_of(tmp_path, bert, "-o", tmp_path / "o.onnx")
    types = value_types(onnx.load(tmp_path / "o.onnx"))
    model = onnx.load(tmp_path / "o.onnx")
    by_name = {n.name: n for n in model.graph.node}
    for n in data["nodes"]:
        if n["op_type"] == "MatMul":
            out = by_name[n["name"]].output[0]
            assert types[out] == (FLOAT16 if n["precision"] == "low" else FLOAT)


def test_validate_catches_fp16_overflow_that_cpu_hides(tmp_path: Path) -> None:
    """End to end: a model whose FP16 intermediates overflow converts fine, but validation fails.

    ORT CPU computes FP16 nodes in FP32, so it passes; `emulate` rounds like a GPU and sees inf.
    """
    src = tmp_path / "overflow.onnx"
    onnx.save(ALL_FOCUSED["fp16_overflow"](), src)
    common = ("-o", tmp_path / "o.onnx", "--force", "--validate", "--runs", "0", "--max-nan", "0")
    on_cpu = invoke(src, *common, "--provider", "cpu")
    assert on_cpu.exit_code == 0, on_cpu.output
    assert "understated" in on_cpu.output
    emulated = invoke(src, *common, "--provider", "emulate")
    assert emulated.exit_code == 1, emulated.output
    assert "inf" in emulated.output
