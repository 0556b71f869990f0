"""Validation: run the original and the converted model on the same inputs and compare.

Per output: max abs / max rel / mean abs error, cosine similarity, NaN/Inf counts, top-1 agreement
for logits, exact comparison for integer/bool outputs; latency of both with the speedup; pass/fail
against thresholds so it can gate CI. Providers: ``cuda``, ``cpu`` and ``emulate`` (FP16/BF16
rounding reproduced on CPU). onnxruntime is imported only when validation runs.
"""

from __future__ import annotations

from amp_convert.validate.core import CPU_WARNING, EMULATE_WARNING, PROVIDERS, validate
from amp_convert.validate.emulate import EmulatedModel, build_emulated_model
from amp_convert.validate.metrics import REL_FLOOR, OutputResult, Thresholds
from amp_convert.validate.report import SCHEMA_VERSION, LatencyStats, ValidationReport

__all__ = [
    "CPU_WARNING",
    "EMULATE_WARNING",
    "PROVIDERS",
    "REL_FLOOR",
    "SCHEMA_VERSION",
    "EmulatedModel",
    "LatencyStats",
    "OutputResult",
    "Thresholds",
    "ValidationReport",
    "build_emulated_model",
    "validate",
]
