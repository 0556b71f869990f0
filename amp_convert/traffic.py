"""Bytes a GPU moves per inference, estimated from shapes: the GPU-free figure of speed.

Memory-bound inference scales with the bytes every node reads and writes (weights included), so
the converter places precision by them (a Cast costs a read of one type and a write of the other)
and every summary reports them for the original, the result and the same graph all in low
precision.

Shapes come from the model and ONNX shape inference. Symbolic dims take representative values:
batch-like names (batch, N, B, ...) 1, any other name or unknown dim 128, unless the user sets
them (`--dim NAME=VALUE`, the same option that sizes validation inputs). A value whose rank is
unknown counts as DEFAULT_ELEMENTS elements.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import onnx
import onnx_ir as ir

from amp_convert.precision import FLOAT, is_default_domain, is_float_tensor
from amp_convert.report import CastNote

BATCH_DIM = 1
OTHER_DIM = 128
DEFAULT_ELEMENTS = 128 * 128
#: what one more kernel launch costs, in bytes of memory traffic: a small kernel takes ~1-2 us of
#: GPU time, in which an H100 (3.35 TB/s) moves ~4 MB. Placement charges it per Cast, so small
#: tensors are placed for the fewest casts and large ones (a tied 150 MB embedding) for bytes.
LAUNCH_BYTES = 4 << 20
_BATCH_NAMES = re.compile(r"^(n|b|bs|batch.*|.*_batch|.*batch_size.*|num_images)$", re.IGNORECASE)


def representative_dim(name: str, dims: Mapping[str, int]) -> int:
    """The size a symbolic dim is taken to have for estimates."""
    if name in dims:
        return dims[name]
    return BATCH_DIM if _BATCH_NAMES.match(name) else OTHER_DIM


class ShapeBook:
    """Element counts of values, from their own shapes or from ONNX inference (by name)."""

    def __init__(self, inferred: Mapping[str, onnx.TypeProto], dims: Mapping[str, int]) -> None:
        self.dims = dict(dims)
        self._inferred: dict[str, tuple[int | str | None, ...]] = {}
        for name, tp in inferred.items():
            if tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.HasField("shape"):
                self._inferred[name] = tuple(
                    d.dim_value
                    if d.HasField("dim_value")
                    else (d.dim_param if d.HasField("dim_param") else None)
                    for d in tp.tensor_type.shape.dim
                )
        self._cache: dict[int, int] = {}

    def _dim(self, d: int | str | ir.SymbolicDim | None) -> int:
        if isinstance(d, int):
            return d
        name = d.value if isinstance(d, ir.SymbolicDim) else d
        return representative_dim(name, self.dims) if name else OTHER_DIM

    def elements(self, value: ir.Value) -> int:
        key = id(value)
        if key not in self._cache:
            self._cache[key] = self._elements(value)
        return self._cache[key]

    def _elements(self, value: ir.Value) -> int:
        tensor = value.const_value
        if tensor is not None:
            return tensor.size
        shape = value.shape
        dims: tuple | None = tuple(shape) if shape is not None else None
        if dims is None and value.name:
            dims = self._inferred.get(value.name)
        if dims is None:
            producer = value.producer()
            if producer is not None and producer.op_type == "Cast" and producer.inputs:
                source = producer.inputs[0]
                if source is not None:
                    return self.elements(source)
            return DEFAULT_ELEMENTS
        return math.prod(self._dim(d) for d in dims)

    def cast_bytes(self, value: ir.Value, low: ir.DataType) -> int:
        """What a Cast of `value` between FP32 and `low` moves: one read plus one write."""
        return int(self.elements(value) * (FLOAT.itemsize + low.itemsize))


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
    for node in model.graph.all_nodes():
        if node.op_type != "Cast" or not is_default_domain(node.domain) or not node.inputs:
            continue
        source = node.inputs[0]
        if source is None or source.dtype is None:
            continue
        to = ir.DataType(node.attributes["to"].value)
        moved = shapes.elements(source) * (_dtype_size(source.dtype) + _dtype_size(to))
        notes.append(CastNote(source.name or "", to.name, int(moved)))
    return sorted(notes, key=lambda n: -n.bytes)


def model_traffic(
    model: ir.Model,
    shapes: ShapeBook,
    low: ir.DataType | None = None,
    keep_io_types: bool = True,
) -> int:
    """Bytes every node reads and writes; with `low`, as if every FP32 tensor were `low`.

    The all-low figure (`low` given) includes the Casts an FP32 interface needs with
    `keep_io_types`: it is the best any placement can do for that interface. Constant nodes move
    nothing at run time (their tensor is read by their readers).
    """
    total = 0.0
    if low is not None and keep_io_types:
        graph = model.graph
        for value in (*graph.inputs, *graph.outputs):
            if is_float_tensor(value):
                total += shapes.elements(value) * (FLOAT.itemsize + low.itemsize)
    for node in model.graph.all_nodes():
        if node.op_type == "Constant":
            continue
        for value in (*node.inputs, *node.outputs):
            if value is None:
                continue
            size = _itemsize(value)
            if low is not None and is_float_tensor(value):
                size = low.itemsize
            total += shapes.elements(value) * size
    return int(total)


@dataclass(frozen=True)
class OriginalTraffic:
    """The original's bytes per inference, and the same graph all in the low type."""

    original: int
    all_low: int


def measure_original(
    model: ir.Model, shapes: ShapeBook, low: ir.DataType, keep_io_types: bool
) -> OriginalTraffic:
    """The traffic step: measured before any graph edit, for the report's before/after ratio."""
    return OriginalTraffic(
        model_traffic(model, shapes), model_traffic(model, shapes, low, keep_io_types)
    )
