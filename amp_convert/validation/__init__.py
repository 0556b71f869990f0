"""Validation: run the original and the converted model on the same inputs and compare.

Per output: max abs / max rel / mean abs error, cosine similarity (non-finite mismatches count),
NaN/Inf counts, top-1 agreement for class logits, exact comparison for integer/bool outputs;
latency of both with the speedup; a verdict (pass / fail / not judged) against thresholds so it can
gate CI, where new NaN/Inf always fail. Providers: ``cuda``, ``cpu`` and ``emulate`` (FP16/BF16
rounding reproduced on CPU). onnxruntime is imported only when validation runs, and the names
below on first use (PEP 562): the command line declares ``validate``'s options without loading it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "validate": "core",
    "EmulatedModel": "emulate",
    "build_emulated_model": "emulate",
    "LoadCrashError": "load_check",
    "REL_FLOOR": "metrics",
    "OutputResult": "metrics",
    "Thresholds": "metrics",
    "SCHEMA_VERSION": "report",
    "LatencyStats": "report",
    "ValidationReport": "report",
    "CPU_WARNING": "sessions",
    "EMULATE_WARNING": "sessions",
    "PROVIDERS": "sessions",
}

if TYPE_CHECKING:
    from amp_convert.validation.core import validate
    from amp_convert.validation.emulate import EmulatedModel, build_emulated_model
    from amp_convert.validation.load_check import LoadCrashError
    from amp_convert.validation.metrics import REL_FLOOR, OutputResult, Thresholds
    from amp_convert.validation.report import SCHEMA_VERSION, LatencyStats, ValidationReport
    from amp_convert.validation.sessions import CPU_WARNING, EMULATE_WARNING, PROVIDERS


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'amp_convert.validation' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"amp_convert.validation.{module}"), name)
    globals()[name] = value
    return value


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
