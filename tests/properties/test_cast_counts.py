"""Casts only where precision really changes: exact minimal counts on a transformer and a CNN block.

The counts are derived by hand from the op lists and the target's kernels (see each test), and
the assignment is an exact minimum cut, so any extra Cast is a regression.
"""

from __future__ import annotations

import onnx
import pytest

import amp_convert
from models.blocks import bert_encoder, resnet_cnn
from tests.helpers import casts


def _converted(model: onnx.ModelProto, level: str, **options):
    out, report = amp_convert.convert(model, level=level, return_report=True, **options)
    onnx.checker.check_model(out, full_check=True)
    return out, report


# BERT at opset 17. Default target (ort-cuda): LayerNormalization runs with low I/O and FP32
# statistics (stash_type), Softmax with low I/O between the low MatMuls (ORT's CUDA kernel
# accumulates in FP32), so only the interface needs casts: the pooler output and the
# last_hidden_state output (2). Target none: Softmax stays FP32 with a Cast on each side (2 per
# layer).
@pytest.mark.integration
@pytest.mark.parametrize("level", ["O1", "O2"])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize(("target", "per_layer"), [("ort-cuda", 0), ("none", 2)])
def test_transformer_block_minimal_casts(level: str, layers: int, target: str, per_layer: int):
    model = bert_encoder(layers=layers)
    out, report = _converted(model, level, target=target)
    assert report.casts_inserted == per_layer * layers + 2
    assert casts(out) == casts(model) + report.casts_inserted
    for d in report.nodes:
        if d.op_type in ("MatMul", "Gemm", "LayerNormalization"):
            assert d.precision == "low", d
        if d.op_type == "Softmax":
            assert d.precision == ("low" if target == "ort-cuda" else "fp32"), d
    stash = [n for n in out.graph.node if n.op_type == "LayerNormalization"]
    assert stash and all(
        next(a.i for a in n.attribute if a.name == "stash_type") == 1 for n in stash
    )
    if target == "ort-cuda":
        assert all("FP32 accumulation" in d.reason for d in report.nodes if d.op_type == "Softmax")


# ResNet-style with BatchNormalization in the graph: every BN follows a Conv and is folded into it
# offline (float64), so nothing is left to keep FP32 and only the interface needs casts:
# pixel_values in, logits out.
@pytest.mark.parametrize("level", ["O1", "O2"])
@pytest.mark.parametrize("blocks", [1, 2])
def test_cnn_block_minimal_casts(level: str, blocks: int) -> None:
    model = resnet_cnn(blocks=blocks)
    out, report = _converted(model, level)
    assert report.casts_inserted == 2
    assert not [n for n in out.graph.node if n.op_type == "BatchNormalization"]
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    assert [f.action for f in report.folds] == ["folded"] * len(bns)
    convs = [d for d in report.nodes if d.op_type == "Conv"]
    assert convs and all(d.precision == "low" for d in convs)


@pytest.mark.integration
def test_o3_needs_only_interface_casts() -> None:
    _, report = _converted(bert_encoder(layers=2), "O3")
    assert report.casts_inserted == 2  # the two FP32 outputs; int64 inputs need none
    _, report = _converted(resnet_cnn(blocks=2), "O3")
    assert report.casts_inserted == 2  # pixel_values in, logits out


@pytest.mark.integration
def test_o1_keeps_more_fp32_than_o2_at_equal_casts() -> None:
    model = bert_encoder(layers=2)
    o1 = _converted(model, "O1", target="none")[1]
    o2 = _converted(model, "O2", target="none")[1]
    assert o1.casts_inserted == o2.casts_inserted
    assert o1.nodes_low < o2.nodes_low
