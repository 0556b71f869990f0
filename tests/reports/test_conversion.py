"""The conversion summary says why, where the user reads it (reports/conversion.py)."""

from __future__ import annotations

import amp_convert
from models.blocks import resnet_cnn
from models.norm_exports import paddle_ln_after_transpose


def test_bf16_cnn_below_opset_22_says_why_and_what_would_help() -> None:
    """Conv has no bfloat16 schema before opset 22: most nodes stay FP32, and the summary says
    so, grouped by reason, with the opset that would lower them."""
    _, report = amp_convert.convert(resnet_cnn(), dtype="bf16", return_report=True)
    assert report.nodes_fp32 > report.nodes_low
    summary = report.summary()
    why = next(line for line in summary.splitlines() if line.strip().startswith("FP32 because:"))
    assert "the schema excludes the low type" in why
    warning = next(w for w in report.warnings if "stay FP32 under BF16" in w)
    assert "take bfloat16 only from opset 22" in warning and "--dtype fp16" in warning


def test_fp32_line_groups_by_reason_top_three() -> None:
    _, report = amp_convert.convert(resnet_cnn(), dtype="bf16", return_report=True)
    causes = report.fp32_causes()
    assert sum(causes.values()) == report.nodes_fp32
    line = next(ln for ln in report.summary().splitlines() if "FP32 because:" in ln)
    assert line.count(",") <= 3


def test_a_result_that_needs_onnx_runtime_says_so() -> None:
    """Hand LayerNorms at opset 12 run as ORT's LayerNormalization-1: the summary says the model
    now needs ONNX Runtime and names --target none for a portable one."""
    _, report = amp_convert.convert(paddle_ln_after_transpose(), return_report=True)
    (warning,) = [w for w in report.warnings if "needs ONNX Runtime" in w]
    assert "2 LayerNormalization at opset 12" in warning and "--target none" in warning
    _, portable = amp_convert.convert(
        paddle_ln_after_transpose(), target="none", return_report=True
    )
    assert not [w for w in portable.warnings if "needs ONNX Runtime" in w]
