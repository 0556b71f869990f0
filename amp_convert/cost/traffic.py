"""Bytes a GPU moves per inference, estimated from shapes: the GPU-free figure of speed.

Memory-bound inference scales with the bytes every node reads and writes (weights included), so
the converter places precision by them (a Cast costs a read of one type and a write of the other)
and every summary reports them for the original, the result and the same graph all in low
precision.

Shapes come from cost/shapes.py: every value's size resolved from the input dims (the user's
`--dim`, else batch-like 1 and other input dims 128) by ONNX inference with data propagation,
symbolic rules and, for what stays unknown, the size of its producer's inputs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import onnx_ir as ir

from amp_convert.core import walk
from amp_convert.core.precision import FLOAT, is_default_domain, is_float_tensor
from amp_convert.cost.shapes import ShapeBook
from amp_convert.reports.conversion import CastNote

__all__ = [
    "LAUNCH_BYTES",
    "ShapeBook",
    "Traffic",
    "cast_notes",
    "excess_warning",
    "model_traffic",
]

#: what one more kernel launch costs, in bytes of memory traffic: a small kernel takes ~1-2 us of
#: GPU time, in which an H100 (3.35 TB/s) moves ~4 MB. Placement charges it per Cast, so small
#: tensors are placed for the fewest casts and large ones (a tied 150 MB embedding) for bytes.
LAUNCH_BYTES = 4 << 20


@dataclass(frozen=True)
class Traffic:
    """Bytes read and written per inference; `all_low` is the all-low estimate of the original."""

    original: int
    result: int
    all_low: int

    @property
    def ratio(self) -> float:
        return self.result / self.original if self.original else 1.0

    @property
    def all_low_ratio(self) -> float:
        return self.all_low / self.original if self.original else 1.0

    def summary(self) -> str:
        return f"traffic: 1.00 → {self.ratio:.2f} (all-low {self.all_low_ratio:.2f})"


def _dtype_size(dtype: ir.DataType | None) -> float:
    try:
        return dtype.itemsize if dtype is not None else 0
    except (TypeError, ValueError):  # string tensors and the like carry no fixed size
        return 0


def _itemsize(value: ir.Value) -> float:
    if value.type is not None and not isinstance(value.type, ir.TensorType):
        return 0
    return _dtype_size(value.dtype)


def cast_notes(model: ir.Model, shapes: ShapeBook) -> list[CastNote]:
    """Every Cast in `model` with the bytes it moves per inference, largest first."""
    notes = []
    for node in walk.all_nodes(model.graph):
        if node.op_type != "Cast" or not is_default_domain(node.domain) or not node.inputs:
            continue
        source = node.inputs[0]
        if source is None or source.dtype is None:
            continue
        to = ir.DataType(node.attributes["to"].value)
        moved = shapes.elements(source) * (_dtype_size(source.dtype) + _dtype_size(to))
        moved *= shapes.runs(node.graph)  # a Cast in a Loop body runs once per trip
        notes.append(CastNote(source.name or "", to.name, int(moved)))
    return sorted(notes, key=lambda n: -n.bytes)


def excess_warning(
    original: int, result: int, casts: Sequence[CastNote], fp32_causes: Sequence[str]
) -> str | None:
    """A warning naming why the result moves more bytes than the original, or None if it doesn't.

    A conversion exists to move fewer bytes; where the estimate says otherwise (Casts around ops
    kept FP32 that cost more than the low ops save) the user is told, with the Casts' share and
    the commonest reason nodes kept FP32 (`fp32_causes`: one entry per FP32 node).
    """
    if not original or result <= original:
        return None
    moved = sum(c.bytes for c in casts)
    line = (
        f"the result moves more bytes per inference than the original (traffic estimate "
        f"{result / original:.2f}x): {len(casts)} Cast(s) move {moved / 1e6:.2f} MB of them"
    )
    if casts:
        line += f" (largest: {casts[0].tensor} to {casts[0].to})"
    if fp32_causes:
        cause, n = Counter(fp32_causes).most_common(1)[0]
        line += f"; {n} node(s) kept FP32 by {cause}"
    return line


def model_traffic(
    model: ir.Model,
    shapes: ShapeBook,
    low: ir.DataType | None = None,
    keep_io_types: bool = True,
    low_io: frozenset[str] = frozenset(),
) -> int:
    """Bytes every node reads and writes; with `low`, as if every FP32 tensor were `low`.

    The all-low figure (`low` given) includes the Casts an FP32 interface needs with
    `keep_io_types` (those named in `low_io` excepted): the best any placement can do for that
    interface. Constant nodes move nothing at run time (their tensor is read by their readers). A
    Loop/Scan body counts once per trip, each If branch half.
    """
    total = 0.0
    if low is not None and keep_io_types:
        graph = model.graph
        for io_value in (*graph.inputs, *graph.outputs):
            if is_float_tensor(io_value) and io_value.name not in low_io:
                total += shapes.elements(io_value) * (FLOAT.itemsize + low.itemsize)
    for node in walk.all_nodes(model.graph):
        if node.op_type == "Constant":
            continue
        runs = shapes.runs(node.graph)  # a Loop body per trip, an If branch half
        for v in (*node.inputs, *node.outputs):
            if v is None:
                continue
            size = _itemsize(v)
            if low is not None and is_float_tensor(v):
                size = low.itemsize
            total += shapes.elements(v) * size * runs
    return int(total)
