"""A candidate of --auto's search, what the search converts with, and how candidates rank."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from amp_convert.auto.localise import ValueStats
from amp_convert.core.dtypes import LowType
from amp_convert.options.convert import ConvertOptions
from amp_convert.reports.conversion import ConversionReport
from amp_convert.targets import Target
from amp_convert.validation.metrics import OutputResult, Thresholds


@dataclass(frozen=True)
class Settings:
    """What the search converts with and what it must meet."""

    options: ConvertOptions
    limits: Thresholds
    margin: float
    #: the runtime the search judges on (its kernels' held sums guard the ranges)
    runtime: Target

    @property
    def low(self) -> LowType:
        return self.options.low


@dataclass
class Candidate:
    """One converted candidate and what its session showed."""

    model: ir.Model
    conversion: ConversionReport
    stats: dict[str, ValueStats]
    outputs: list[OutputResult]

    @property
    def passed(self) -> bool:
        """Every output passes; one with nothing to compare (0 elements, not a tensor) neither
        passes nor blocks, but one output at least must have been compared."""
        return any(o.passed for o in self.outputs) and all(
            o.passed or o.status == "skipped" for o in self.outputs
        )

    @property
    def failing(self) -> list[str]:
        return [o.name for o in self.outputs if not o.passed and o.status != "skipped"]


def score(c: Candidate) -> tuple[float, float]:
    """Higher is better: fewer new NaN/Inf, then the worst output's cosine."""
    floats = [o for o in c.outputs if o.status != "skipped"]
    nonfinite = sum(o.nonfinite for o in floats)
    worst = min((o.cosine for o in floats if o.cosine is not None), default=1.0)
    return (-float(nonfinite), worst)


def worst_text(c: Candidate) -> str:
    nonfinite, cosine = score(c)
    return f"cosine {cosine:.6f}" + (f", {int(-nonfinite)} new NaN/Inf" if nonfinite else "")


def brief(o: OutputResult) -> dict[str, Any]:
    return {"cosine": o.cosine, "max_abs": o.max_abs, "nonfinite": o.nonfinite, "passed": o.passed}
