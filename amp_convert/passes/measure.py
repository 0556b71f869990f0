"""Steps 4 and 15, measure: the original's bytes per inference before any graph edit, and the
result's after the last one, with the Casts it holds.

The report's before/after ratio, the all-low bound, the Casts by the bytes they move and the
warning when the result moves more than the original come from here (cost/traffic.py's
estimate, sizes from cost/shapes.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from amp_convert.core.precision import NodeClass, Precision
from amp_convert.core.steps import StepResult
from amp_convert.cost.shapes import ShapeBook
from amp_convert.cost.traffic import cast_notes, excess_warning, model_traffic
from amp_convert.placement.plan import PrecisionPlan
from amp_convert.reports.conversion import CastNote


@dataclass(frozen=True)
class OriginalTraffic(StepResult):
    """The original's bytes per inference, and the same graph all in the low type."""

    original: int
    all_low: int


def measure_original(
    model: ir.Model,
    shapes: ShapeBook,
    low: ir.DataType,
    keep_io_types: bool,
    low_io: frozenset[str] = frozenset(),
) -> OriginalTraffic:
    """The traffic step: measured before any graph edit, for the report's before/after ratio."""
    return OriginalTraffic(
        model_traffic(model, shapes), model_traffic(model, shapes, low, keep_io_types, low_io)
    )


@dataclass(frozen=True)
class ResultTraffic(StepResult):
    """The result's bytes per inference beside the original's, the Casts it holds (the bytes each
    moves, largest first), the warning when it moves more than the original, and the input dims
    the figures assume."""

    original: int
    result: int
    all_low: int
    casts: tuple[CastNote, ...]
    excess: str | None
    dims: dict[str, int]
    estimated: int


def measure_result(
    model: ir.Model, shapes: ShapeBook, before: OriginalTraffic, plan: PrecisionPlan
) -> ResultTraffic:
    """The traffic step after the last edit: the converted graph against `before`."""
    casts = cast_notes(model, shapes)
    result = model_traffic(model, shapes)
    excess = excess_warning(before.original, result, casts, fp32_causes(plan))
    dims, estimated = dict(shapes.dims), shapes.estimated
    return ResultTraffic(
        before.original, result, before.all_low, tuple(casts), excess, dims, estimated
    )


def fp32_causes(plan: PrecisionPlan) -> list[str]:
    """For each float node kept FP32, who decided it (its first reason's source)."""
    causes = []
    for node in plan.nodes:
        p = plan.placement(node)
        if p is None or p.op_class == NodeClass.NONE or p.precision != Precision.FP32:
            continue
        if p.reasons:
            causes.append(p.reasons[0].source or p.reasons[0].kind.value)
    return causes
