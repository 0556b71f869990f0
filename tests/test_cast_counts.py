"""Casts only where precision really changes: exact minimal counts on a transformer and a CNN block.

The counts are derived by hand from the op lists (LayerNormalization, Softmax and
BatchNormalization stay FP32; the model interface stays FP32) and the assignment is an exact
minimum cut, so any extra Cast is a regression.
"""

from __future__ import annotations

import onnx
import pytest

import amp_convert
from models.blocks import bert_encoder, resnet_cnn
from tests.helpers import casts


def _converted(model: onnx.ModelProto, level: str):
    out, report = amp_convert.convert(model, level=level, return_report=True)
    onnx.checker.check_model(out, full_check=True)
    return out, report


# BERT, per encoder layer (6): LayerNorm → Q/K/V MatMuls (one shared Cast), attention scores →
# Softmax, Softmax → context MatMul, attention output → residual Add (which reads the FP32
# LayerNorm output, so stays FP32), LayerNorm → FFN MatMul, FFN output → residual Add.
# Once per model (2): pooler Gather → Gemm, and Gemm/Tanh → the FP32 `pooler_output`.
@pytest.mark.parametrize("level", ["O1", "O2"])
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_transformer_block_minimal_casts(level: str, layers: int) -> None:
    model = bert_encoder(layers=layers)
    out, report = _converted(model, level)
    assert report.casts_inserted == 6 * layers + 2
    assert casts(out) == casts(model) + report.casts_inserted
    # every MatMul/Gemm runs in FP16, every LayerNormalization and Softmax in FP32
    for d in report.nodes:
        if d.op_type in ("MatMul", "Gemm"):
            assert d.precision == "low", d
        if d.op_type in ("LayerNormalization", "Softmax"):
            assert d.precision == "fp32", d


# ResNet-style: pixel_values → stem Conv (1); each Conv (stem, two per block, and a downsample
# Conv when the width changes) feeds a BatchNormalization that stays FP32: one Cast per Conv;
# two BN→Relu(→Add) chains per block feed Convs (one Cast each, shared by a block's main and
# downsample Convs); Flatten → Gemm (1); logits back to FP32 (1).
@pytest.mark.parametrize("level", ["O1", "O2"])
@pytest.mark.parametrize("blocks", [1, 2])
def test_cnn_block_minimal_casts(level: str, blocks: int) -> None:
    model = resnet_cnn(blocks=blocks)
    _, report = _converted(model, level)
    convs = [d for d in report.nodes if d.op_type == "Conv"]
    assert report.casts_inserted == 1 + len(convs) + 2 * blocks + 1 + 1
    assert convs and all(d.precision == "low" for d in convs)


def test_o3_needs_only_interface_casts() -> None:
    _, report = _converted(bert_encoder(layers=2), "O3")
    assert report.casts_inserted == 2  # the two FP32 outputs; int64 inputs need none
    _, report = _converted(resnet_cnn(blocks=2), "O3")
    assert report.casts_inserted == 2  # pixel_values in, logits out


def test_o1_keeps_more_fp32_than_o2_at_equal_casts() -> None:
    model = bert_encoder(layers=2)
    o1 = _converted(model, "O1")[1]
    o2 = _converted(model, "O2")[1]
    assert o1.casts_inserted == o2.casts_inserted
    assert o1.nodes_low < o2.nodes_low
