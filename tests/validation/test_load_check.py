"""Crash-proof verdicts: a model ORT cannot load at its defaults never gets a verdict.

The installed ONNX Runtime may not crash on the TorchScript encoder (it depends on the version
and the CPU), so the crash is also simulated: a child that really dies of SIGSEGV when it loads
the converted model at the default optimization level, as ORT 1.32 did.
"""

from __future__ import annotations

import signal
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

import amp_convert
from models.torchscript_encoder import attention_input_projection, encoder_conv_head

pytest.importorskip("onnxruntime")

from amp_convert.commands.validate import validate_command
from amp_convert.validation import LoadCrashError, load_check, validate

pytestmark = pytest.mark.integration

#: a child that segfaults loading any *.fp16.onnx at the default level unless one of the two
#: suspected optimizers is disabled, and otherwise behaves like the real child
SIMULATED_CRASH = (
    "import os, signal, sys\n"
    "if sys.argv[1] == 'default' and 'NchwcTransformer' not in sys.argv[3]:\n"
    "    for i, p in enumerate(sys.argv[4:]):\n"
    "        if p.endswith('.fp16.onnx'):\n"
    "            os.kill(os.getpid(), signal.SIGSEGV)\n"
    "        print(f'ok {i}', flush=True)\n"
    "    sys.exit(0)\n"
) + load_check.CHILD_CODE


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("encoder")
    src, dst = folder / "encoder.onnx", folder / "encoder.fp16.onnx"
    onnx.save(encoder_conv_head(), src)
    amp_convert.convert_file(src, dst, level="O2")
    return src, dst


def test_the_torchscript_encoder_is_exported_like_torch(encoder) -> None:
    model = onnx.load(encoder[0])
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("LayerNormalization") == 4 and ops.count("Softmax") == 2
    assert ops.count("Gemm") == 2  # out_proj on [T*B, C]
    # bmm(q, k.transpose(-2, -1)): the Transpose -> MatMul pair MatmulTransposeFusion fuses
    by_out = {o: n for n in model.graph.node for o in n.output}
    qk = [n for n in model.graph.node if n.name.endswith("MatMul_qk")]
    assert len(qk) == 2 and all(by_out[n.input[1]].op_type == "Transpose" for n in qk)
    assert ops[-3:] == ["Conv", "BatchNormalization", "Relu"]


def test_the_real_crash_is_judged_a_crash(tmp_path) -> None:
    """The pattern, for real: FP16 Transpose(1,0,2) into a MatMul with a 2-D weight.

    ORT 1.32 CPU on x86-64 segfaults loading it (microsoft/onnxruntime#28392); another ORT may
    load it, and then the verdict is an ordinary one. Either way never a crash of our own.
    """
    src, dst = tmp_path / "proj.onnx", tmp_path / "proj.fp16.onnx"
    onnx.save(attention_input_projection(), src)
    amp_convert.convert_file(src, dst, level="O2")
    assert load_check.run_child([str(src)]).ok  # the FP32 original always loads
    child = load_check.run_child([str(dst)])
    if child.signal is None:
        assert validate(src, dst, provider="cpu", thresholds={"min_cosine": 0.999}).passed
        return
    res = CliRunner().invoke(validate_command, [str(src), str(dst), "--min-cosine", "0.9", "-q"])
    assert res.exit_code == 2 and "PASS" not in res.output
    assert res.output.startswith(
        "amp-convert: error: ONNX Runtime (CPUExecutionProvider) crashes loading the converted "
        "model "
        f"({dst}) at its default optimizations ({child.signal}); it loads with "
    )
    extended = load_check.run_child([str(dst)], level="ORT_ENABLE_EXTENDED").ok
    assert ("it loads with ORT_ENABLE_EXTENDED" in res.output) == extended


@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_the_installed_ort_loads_the_converted_encoder_at_its_defaults(encoder, level, tmp_path):
    """The whole encoder holds the same pair but this ORT loads it (see the module above)."""
    out = tmp_path / f"encoder.{level}.onnx"
    amp_convert.convert_file(encoder[0], out, level=level)
    models = [load_check.ModelToCheck(str(out), "the converted model")]
    assert load_check.check_default_load(models) == []
    report = validate(encoder[0], out, provider="emulate", thresholds={"min_cosine": 0.999})
    assert report.passed, report.summary_line()


def test_a_crash_at_the_default_level_is_exit_2_never_pass(encoder, monkeypatch) -> None:
    monkeypatch.setattr(load_check, "CHILD_CODE", SIMULATED_CRASH)
    res = CliRunner().invoke(
        validate_command,
        [str(encoder[0]), str(encoder[1]), "--provider", "emulate", "--min-cosine", "0.9", "-q"],
    )
    assert res.exit_code == 2, res.output
    assert res.output == (
        "amp-convert: error: ONNX Runtime (CPUExecutionProvider) crashes loading the converted "
        "model "
        f"({encoder[1]}) at its default optimizations (SIGSEGV); it loads with ORT_ENABLE_EXTENDED "
        "or at ORT_ENABLE_ALL with NchwcTransformer disabled "
        "(InferenceSession(..., disabled_optimizers=[...]))\n"
    )
    assert "PASS" not in res.output
    with pytest.raises(LoadCrashError, match="crashes loading the converted model"):
        validate(encoder[0], encoder[1], provider="cpu")


def test_the_child_reports_the_signal_and_how_far_it_got(encoder, monkeypatch) -> None:
    monkeypatch.setattr(load_check, "CHILD_CODE", SIMULATED_CRASH)
    got = load_check.run_child([str(encoder[0]), str(encoder[1])])
    assert got == load_check.ChildResult(1, signal="SIGSEGV", code=-signal.SIGSEGV)
    assert load_check.run_child([str(encoder[0])]).ok


def test_a_load_error_at_the_defaults_is_exit_2(tmp_path) -> None:
    """A model ORT refuses (here: an op with no kernel anywhere) is an error, not a verdict."""
    src = tmp_path / "m.onnx"
    onnx.save(encoder_conv_head(layers=1), src)
    broken = onnx.load(src)
    broken.graph.node[-1].op_type = "NoSuchOp"
    broken.graph.node[-1].domain = "example.custom"
    broken.opset_import.append(onnx.helper.make_opsetid("example.custom", 1))
    bad = tmp_path / "bad.onnx"
    onnx.save(broken, bad)
    with pytest.raises(
        LoadCrashError,
        match=r"^ONNX Runtime cannot load the converted model .*"
        r"at its default session options: ",
    ):
        validate(src, bad, provider="emulate")
