"""--low-io: chosen model inputs/outputs (a decoder's KV cache) low precision with keep_io_types."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import amp_convert
from amp_convert.commands.cli import cli
from models.decoders import decoder_model_merged, decoder_with_past
from models.inputs import sample_inputs
from tests.helpers import FLOAT, FLOAT16, all_nodes, session

pytest.importorskip("onnxruntime")
from amp_convert.testing import assert_converted_close

pytestmark = pytest.mark.integration

KV_IO = ["past_key_values\\..*", "present\\..*"]


def _types(values) -> dict[str, int]:
    return {v.name: v.type.tensor_type.elem_type for v in values}


def _kv(name: str) -> bool:
    return name.startswith(("past_key_values.", "present."))


def _touching(model: onnx.ModelProto, names: set[str]) -> list[str]:
    """Casts that read or write one of ``names``."""
    return [
        n.name
        for n in all_nodes(model.graph)
        if n.op_type == "Cast" and names & {*n.input, *n.output}
    ]


@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_with_past_kv_cache_low_and_never_cast(level: str) -> None:
    original = decoder_with_past()
    out, report = amp_convert.convert(original, level=level, low_io=KV_IO, return_report=True)
    ins, outs = _types(out.graph.input), _types(out.graph.output)
    kv = {n for n in [*ins, *outs] if _kv(n)}
    assert len(kv) == 8
    assert all({**ins, **outs}[n] == FLOAT16 for n in kv)
    assert _touching(out, kv) == []
    # everything else keeps its type: int64 ids/mask/positions, FP32 logits (one Cast)
    assert ins["input_ids"] == ins["attention_mask"] == onnx.TensorProto.INT64
    assert outs["logits"] == FLOAT
    assert report.casts_after - report.casts_before == 1
    assert report.low_io == sorted(kv)
    assert "except 8 FP16 (--low-io)" in report.summary()
    # the all-low estimate needs no cast for the KV I/O either; the result reaches it
    assert report.traffic["result"] <= report.traffic["all_low"] * 1.01
    session(out)
    feeds = sample_inputs(original, seed=0)
    assert_converted_close(original, out, provider="emulate", inputs=feeds)
    assert_converted_close(original, out, provider="cpu", inputs=feeds)


def test_keep_io_default_casts_every_kv_tensor() -> None:
    """The control: without --low-io the 8 KV tensors each take a Cast at the interface."""
    out, report = amp_convert.convert(decoder_with_past(), level="O2", return_report=True)
    assert report.casts_after - report.casts_before == 9
    kv = {v.name for v in [*out.graph.input, *out.graph.output] if _kv(v.name)}
    assert len(_touching(out, kv)) == 8


def test_merged_decoder_kv_cache_low() -> None:
    original = decoder_model_merged()
    out, report = amp_convert.convert(original, level="O2", low_io=KV_IO, return_report=True)
    kv = {v.name for v in [*out.graph.input, *out.graph.output] if _kv(v.name)}
    types = {**_types(out.graph.input), **_types(out.graph.output)}
    assert {types[n] for n in kv} == {FLOAT16} and types["logits"] == FLOAT
    assert report.casts_after - report.casts_before == 1  # logits, after the If
    assert _touching(out, kv) == []
    (node,) = [n for n in out.graph.node if n.op_type == "If"]
    for branch in (a.g for a in node.attribute):  # every If output crosses low, no Cast pair
        assert {o.type.tensor_type.elem_type for o in branch.output} == {FLOAT16}
    for use_cache in (True, False):
        feeds = sample_inputs(original, seed=0)
        feeds["use_cache_branch"] = np.array([use_cache])
        assert_converted_close(original, out, provider="emulate", inputs=feeds)


def test_low_io_selects_only_whole_names() -> None:
    out = amp_convert.convert(decoder_with_past(), level="O2", low_io="present.0.key")
    outs = _types(out.graph.output)
    assert outs["present.0.key"] == FLOAT16
    assert [n for n, t in outs.items() if t == FLOAT16] == ["present.0.key"]
    _, report = amp_convert.convert(
        decoder_with_past(), level="O2", low_io=["present"], return_report=True
    )
    assert report.warnings == ["--low-io 'present' matches no model input or output"]


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("past_key_values\\.(", "--low-io 'past_key_values\\\\.(': bad regular expression"),
        ("input_ids|present\\..*", "matches input 'input_ids' of type int64"),
    ],
)
def test_bad_low_io_is_one_line_and_exit_2(tmp_path: Path, pattern: str, message: str) -> None:
    src, dst = tmp_path / "decoder.onnx", tmp_path / "out.onnx"
    onnx.save(decoder_with_past(), src)
    before = src.read_bytes()
    result = CliRunner().invoke(cli, [str(src), "-o", str(dst), "--low-io", pattern])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.output
    assert not dst.exists() and src.read_bytes() == before


def test_cli_low_io_repeatable(tmp_path: Path) -> None:
    src, dst = tmp_path / "decoder.onnx", tmp_path / "out.onnx"
    onnx.save(decoder_with_past(), src)
    args = [str(src), "-o", str(dst), "--low-io", KV_IO[0], "--low-io", KV_IO[1]]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    out = onnx.load(dst)
    types = {**_types(out.graph.input), **_types(out.graph.output)}
    assert sorted(n for n, t in types.items() if t == FLOAT16) == sorted(n for n in types if _kv(n))
    result = CliRunner().invoke(cli, [str(src), "-o", str(dst), "--force", "--low-io", "kv"])
    assert result.exit_code == 0 and "--low-io 'kv' matches no model input or output" in (
        result.output
    )


def test_genai_llama_kv_cache_and_logits_low_add_no_cast() -> None:
    """ORT GenAI's builder layout (fused ops, `past_key_values.*` / `present.*`): with the KV cache
    and the logits named by --low-io, the interface needs no Cast at all."""
    from models.fused import genai_llama

    original = genai_llama()
    out, report = amp_convert.convert(
        original, level="O2", low_io=[*KV_IO, "logits"], return_report=True
    )
    assert report.casts_after == report.casts_before
    types = {**_types(out.graph.input), **_types(out.graph.output)}
    low = sorted(n for n in types if _kv(n) or n == "logits")
    assert len(low) == 9 and {types[n] for n in low} == {FLOAT16}
    assert report.low_io == low
