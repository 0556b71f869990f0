"""Validation: run the original and the converted model on the same inputs and compare.

Per output: max abs / max rel / mean abs error, cosine similarity (non-finite mismatches count),
NaN/Inf counts, top-1 agreement for class logits, exact comparison for integer/bool outputs;
latency of both with the speedup; a verdict (pass / fail / not judged) against thresholds so it can
gate CI, where new NaN/Inf always fail. Providers: ``cuda``, ``cpu`` and ``emulate`` (FP16/BF16
rounding reproduced on CPU). onnxruntime is imported only when validation runs.
"""

from __future__ import annotations

from amp_convert.validation.core import validate
from amp_convert.validation.emulate import EmulatedModel, build_emulated_model
from amp_convert.validation.load_check import LoadCrashError
from amp_convert.validation.metrics import REL_FLOOR, OutputResult, Thresholds
from amp_convert.validation.report import SCHEMA_VERSION, LatencyStats, ValidationReport
from amp_convert.validation.sessions import CPU_WARNING, EMULATE_WARNING, PROVIDERS

__all__ = [
    "CPU_WARNING",
    "EMULATE_WARNING",
    "PROVIDERS",
    "REL_FLOOR",
    "SCHEMA_VERSION",
    "EmulatedModel",
    "LatencyStats",
    "LoadCrashError",
    "OutputResult",
    "Thresholds",
    "ValidationReport",
    "build_emulated_model",
    "validate",
]
