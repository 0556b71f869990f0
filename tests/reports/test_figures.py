"""One set of figures: every command and page counts float nodes and weights by the same rules
(``amp_convert.reports.figures``), Constant-held weights included."""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from amp_convert.commands.cli import cli
from amp_convert.reports.figures import cast_change, count_nodes, proto_weights
from models.constant_weights import cnn_constant_weights, weights_in_constants
from models.norm_exports import llama_hand_rms
from models.overflow import mlp_ok

pytest.importorskip("onnxruntime")

FACT = re.compile(r"<tr><t[hd][^>]*>([^<]*)</t[hd]><td[^>]*>([^<]*)</td>")


def _facts(page: Path) -> dict[str, str]:
    return dict(FACT.findall(page.read_text()))


def _run(args: list[str]) -> str:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    return res.output


MODELS = {
    "mlp in Constants": lambda: weights_in_constants(mlp_ok(features=64, hidden=256)[0]),
    "cnn in Constants, BN folded": cnn_constant_weights,
    "hand RMSNorm decoder": lambda: llama_hand_rms(),
}


@pytest.mark.integration
@pytest.mark.parametrize("name", list(MODELS))
def test_weights_and_node_counts_agree_across_commands_and_pages(tmp_path, name) -> None:
    """convert's summary, --auto's summary and page, and the validate page: the same weights
    before and after (Constant tensors counted) and the same number of float nodes."""
    src = tmp_path / "m.onnx"
    onnx.save(MODELS[name](), src)
    out, auto = tmp_path / "m.fp16.onnx", tmp_path / "m.auto.onnx"
    summary = _run([str(src), "-o", str(out), "--level", "O3"])
    auto_out = _run(
        [
            str(src),
            "-o",
            str(auto),
            "--auto",
            "--provider",
            "emulate",
            "--html",
            str(tmp_path / "auto.html"),
        ]
    )
    _run(
        [
            "validate",
            str(src),
            str(auto),
            "--provider",
            "emulate",
            "-q",
            "--html",
            str(tmp_path / "val.html"),
        ]
    )
    before = proto_weights(onnx.load(src)).total
    assert before > 0
    want = proto_weights(onnx.load(auto))
    auto_page, val_page = _facts(tmp_path / "auto.html"), _facts(tmp_path / "val.html")
    from amp_convert.reports.figures import bytes_text

    b, a = bytes_text(before), bytes_text(want.total)
    assert f"weights {b} -> {a}" in auto_out
    assert auto_page["weights before"] == val_page["weights before"] == b
    assert auto_page["weights after"] == val_page["weights after"] == a
    assert "of 0.00 MB" not in auto_out
    # float nodes: --auto's summary, its page and the validate page (same converted file)
    m = re.search(r"nodes FP16: (\d+) of (\d+) float nodes", auto_out)
    assert m is not None
    low, total = int(m.group(1)), int(m.group(2))
    assert auto_page["float nodes low"].startswith(f"{low} / {total} ")
    assert val_page["float nodes low (converted model)"] == f"{low} / {total}"
    # and convert's summary counts its own result by the same rule
    nodes_low = int(re.search(r"nodes FP16: (\d+)", summary).group(1))  # type: ignore[union-attr]
    nodes_fp32 = int(re.search(r"nodes FP32: (\d+)", summary).group(1))  # type: ignore[union-attr]
    o3 = onnx.shape_inference.infer_shapes(onnx.load(out))
    types = {
        vi.name: vi.type.tensor_type.elem_type
        for vi in (*o3.graph.value_info, *o3.graph.output, *o3.graph.input)
    }
    from amp_convert.reports.figures import proto_nodes

    counts = count_nodes(proto_nodes(o3, types))
    assert (nodes_low, nodes_fp32) == (counts.low, counts.fp32)
    assert f"weights: {bytes_text(before)} -> " in summary


@pytest.mark.integration
def test_validate_before_writing_prints_no_size_of_an_unwritten_file(tmp_path) -> None:
    """`--validate` shows the summary before the model is written: no `size: … -> 0.00 KB`."""
    src = tmp_path / "m.onnx"
    onnx.save(mlp_ok()[0], src)
    out = _run(
        [
            str(src),
            "-o",
            str(tmp_path / "o.onnx"),
            "--validate",
            "--provider",
            "emulate",
            "--min-cosine",
            "0.99",
        ]
    )
    assert "size:" not in out and "0.00 KB" not in out
    plain = _run([str(src), "-o", str(tmp_path / "p.onnx")])
    assert re.search(r"size: [\d.]+ KB -> [\d.]+ KB", plain)  # a written file has its size


def test_fewer_casts_than_the_original_are_worded() -> None:
    assert cast_change(0, 2) == "2 (Cast nodes 0 -> 2)"
    assert cast_change(6, 2) == "none: 4 fewer Cast nodes than the original (Cast nodes 6 -> 2)"
    assert cast_change(3, 2) == "none: 1 fewer Cast node than the original (Cast nodes 3 -> 2)"
    assert "-" not in cast_change(6, 2).split("(")[0]


def test_constant_tensors_are_weights() -> None:
    plain = mlp_ok()[0]
    moved = weights_in_constants(plain)
    assert not moved.graph.initializer
    assert proto_weights(moved) == proto_weights(plain)
