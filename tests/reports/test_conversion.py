"""The conversion summary says why, where the user reads it (reports/conversion.py)."""

from __future__ import annotations

import onnx_ir as ir
from onnx import helper

import amp_convert
from models.blocks import resnet_cnn
from models.norm_exports import paddle_ln_after_transpose
from tests.graphs import model, tensor


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


def test_fp32_by_the_levels_own_rules_is_no_warning() -> None:
    """O1 keeps an Elu between FP32 I/O FP32 (two casts would cost more): the summary's FP32
    line says why; a warning is kept for limits the user can lift (the opset, the target)."""
    elu = model(
        [helper.make_node("Elu", ["x"], ["y"], name="elu")],
        [tensor("x", [1, 64])],
        [tensor("y", [1, 64])],
    )
    _, report = amp_convert.convert(ir.to_proto(elu), level="O1", return_report=True)
    assert report.nodes_fp32 == 1 and report.nodes_low == 0
    assert any("FP32 because:" in line for line in report.summary().splitlines())
    assert not [w for w in report.warnings if "stay FP32 under" in w]


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
