"""The FP32 traffic estimate against the bytes an ORT run moves (the bounds), per family.

Measured independently: every value exposed as an output of one ORT CPU run, bytes read and
written per node, weights included (bench/_cost_measure.py). With every input dim set, the
estimate is within 0.67-1.5x; with the default dims (batch 1, image H/W 224, others 128), within
3x of the same measured run at batch 1, other dims at half their default.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

pytest.importorskip("onnxruntime")

from bench._cost_measure import estimate, feeds_for, measured_bytes
from models import exporters
from models.blocks import bert_encoder, gpt_decoder, resnet_cnn
from models.decoders import TOTAL, decoder_with_past

#: family -> (builder, measured dims, measured at the default-mode dims)
CASES: dict[str, tuple[Callable[[], onnx.ModelProto], dict[str, int], dict[str, int]]] = {
    "encoder (dynamo)": (exporters.dynamo_bert, {"s0": 3, "s1": 40}, {"s0": 1, "s1": 64}),
    "encoder (TorchScript)": (bert_encoder, {"batch": 2, "seq": 50}, {"batch": 1, "seq": 64}),
    "decoder (optimum GPT-2 with past)": (
        exporters.gpt2_past_decoder,
        {"batch_size": 2, "sequence_length": 7, "past_sequence_length": 33},
        {"batch_size": 1, "sequence_length": 64, "past_sequence_length": 64},
    ),
    "decoder (GPT-2, no past)": (gpt_decoder, {"batch": 2, "seq": 30}, {"batch": 1, "seq": 64}),
    "decoder (optimum with past)": (
        decoder_with_past,
        {"batch_size": 2, "sequence_length": 3, "past_sequence_length": 21, TOTAL: 24},
        {"batch_size": 1, "sequence_length": 64, "past_sequence_length": 64, TOTAL: 128},
    ),
    "ViT (batch only symbolic)": (exporters.torchscript_vit, {"batch_size": 4}, {"batch_size": 1}),
    "CNN (tf2onnx NHWC)": (exporters.tf2onnx_cnn, {"unk__612": 5}, {"unk__612": 1}),
    "CNN (ResNet, TorchScript)": (resnet_cnn, {"batch": 3}, {"batch": 1}),
    "OCR (paddle2onnx)": (
        exporters.paddle_ocr_rec,
        {"x[0]": 2, "x[3]": 200},
        {"x[0]": 1, "x[3]": 112},  # an image's width: default 224 (dim_defaults), measured at half
    ),
}


def _ratio(proto: onnx.ModelProto, path: Path, measured_dims: dict, estimate_dims: dict) -> float:
    measured, unseen = measured_bytes(proto, feeds_for(proto, measured_dims))
    assert unseen == 0 and measured > 0
    return estimate(path, estimate_dims).bytes / measured


@pytest.mark.integration
@pytest.mark.parametrize("family", list(CASES))
def test_estimate_within_bounds_of_measured(tmp_path: Path, family: str) -> None:
    build, dims, default_run = CASES[family]
    proto = build()
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path))
    with_dims = _ratio(proto, path, dims, dims)
    assert 0.67 <= with_dims <= 1.5, f"{family}: estimate/measured {with_dims:.3f} with --dim"
    default = _ratio(proto, path, default_run, {})
    assert 1 / 3 <= default <= 3, f"{family}: estimate/measured {default:.3f} with default dims"
    assert estimate(path, dims).estimated_values == 0  # every size came from a shape


def test_estimate_reports_the_dims_it_assumed(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(exporters.paddle_ocr_rec(), str(path))
    assert estimate(path, {}).dims == {"x[0]": 1, "x[3]": 224}  # an image's width
    assert estimate(path, {"x[3]": 320}).dims == {"x[0]": 1, "x[3]": 320}
