"""Step 4, measure: the original's bytes per inference, before any graph edit.

The report's before/after ratio and the all-low bound come from here (cost/traffic.py's
estimate, sizes from cost/shapes.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from amp_convert.cost.shapes import ShapeBook
from amp_convert.cost.traffic import model_traffic


@dataclass(frozen=True)
class OriginalTraffic:
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
