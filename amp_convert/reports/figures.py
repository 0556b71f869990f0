"""The figures every command and page gives about a model: one definition of each.

Why: the same converted model was described three ways (236 / 235 / 218 float nodes; "weights
FP16: 0.0% of 0.00 MB" from ``--auto`` where the validate page said 4.69 -> 2.34 MB) because each
report counted on its own. Here:

* **float nodes** (``NodeCounts``): the nodes of the model as it is (subgraphs included) that
  have a float output, low when any output is FP16/BF16, else FP32; Cast and Constant nodes are
  not counted (the conversion's boundaries, and weights, counted as weights);
* **weights** (``WeightFigures``): every initializer and every Constant node's tensor, in every
  graph (TorchScript and some converters hold their weights in Constant nodes), in bytes as
  stored, float weights split by precision;
* **Cast nodes**: a net change worded so that a negative number reads as what it is.

Both an onnx-ir model and a ModelProto (with the element types of its values) are read, by the
same rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from amp_convert.core import proto_walk, walk

_LOW = frozenset({int(onnx.TensorProto.FLOAT16), int(onnx.TensorProto.BFLOAT16)})
_FLOATS = frozenset({*_LOW, int(onnx.TensorProto.FLOAT), int(onnx.TensorProto.DOUBLE)})
_FP32 = frozenset({int(onnx.TensorProto.FLOAT), int(onnx.TensorProto.DOUBLE)})
_NOT_COUNTED = ("Cast", "Constant")

#: (op type, domain, element types of the outputs; None when unknown)
NodeFacts = tuple[str, str, list[int | None]]


@dataclass(frozen=True)
class NodeCounts:
    """Float nodes by precision, and per op type (low, FP32)."""

    low: int = 0
    fp32: int = 0
    by_op: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.low + self.fp32


def count_nodes(nodes: Iterable[NodeFacts]) -> NodeCounts:
    """The float-node counts of ``nodes`` (see the module docstring for the rule)."""
    by_op: dict[str, tuple[int, int]] = {}
    for op_type, domain, out_types in nodes:
        if op_type in _NOT_COUNTED and domain in ("", "ai.onnx"):
            continue
        types = {t for t in out_types if t is not None}
        if types & _LOW:
            low, high = 1, 0
        elif types & _FP32:
            low, high = 0, 1
        else:
            continue  # no float data path
        a, b = by_op.get(op_type, (0, 0))
        by_op[op_type] = (a + low, b + high)
    return NodeCounts(
        sum(lo for lo, _ in by_op.values()), sum(hi for _, hi in by_op.values()), by_op
    )


def ir_nodes(model: ir.Model) -> Iterator[NodeFacts]:
    """Every node of an onnx-ir model with its outputs' element types."""
    for node in walk.all_nodes(model.graph):
        yield (
            node.op_type,
            node.domain,
            [int(v.dtype) if v.dtype is not None else None for v in node.outputs],
        )


def proto_nodes(proto: onnx.ModelProto, types: Mapping[str, int]) -> Iterator[NodeFacts]:
    """Every node of a ModelProto (bodies after their node) with ``types`` of its outputs."""
    for node in _all_nodes(proto.graph):
        yield node.op_type, node.domain, [types.get(v) for v in node.output if v]


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for sub in proto_walk.subgraphs(node):
            yield from _all_nodes(sub)


@dataclass(frozen=True)
class WeightFigures:
    """Weight bytes as stored: FP32 (and FP64) floats, FP16/BF16 floats, everything else."""

    fp32: int = 0
    low: int = 0
    other: int = 0

    @property
    def total(self) -> int:
        return self.fp32 + self.low + self.other

    @property
    def float_as_fp32(self) -> int:
        """Float weights counted in FP32 bytes (a low weight counts twice its size)."""
        return self.fp32 + 2 * self.low


def _weights(tensors: Iterable[tuple[int, int]]) -> WeightFigures:
    fp32 = low = other = 0
    for dtype, nbytes in tensors:
        if dtype in _LOW:
            low += nbytes
        elif dtype in _FLOATS:
            fp32 += nbytes
        else:
            other += nbytes
    return WeightFigures(fp32, low, other)


def ir_weights(model: ir.Model) -> WeightFigures:
    """Weights of an onnx-ir model: initializers and Constant tensors of every graph."""

    def tensors() -> Iterator[tuple[int, int]]:
        for graph in walk.graphs(model):
            for value in graph.initializers.values():
                t = value.const_value
                if t is not None:
                    yield int(t.dtype), _ir_nbytes(t)
            for node in graph:
                if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
                    continue
                attr = node.attributes.get("value")
                if attr is not None and attr.type == ir.AttributeType.TENSOR:
                    t = attr.value  # not as_tensor(): its runtime-Protocol check costs 0.2 ms
                    yield int(t.dtype), _ir_nbytes(t)

    return _weights(tensors())


def _ir_nbytes(t: ir.TensorProtocol) -> int:
    try:
        return int(t.nbytes)
    except Exception:  # a string tensor: no weight bytes to speak of
        return 0


def proto_weights(proto: onnx.ModelProto) -> WeightFigures:
    """Weights of a ModelProto: initializers and Constant tensors of every graph (external data
    counted by its declared shape, never read)."""

    def tensors() -> Iterator[tuple[int, int]]:
        for g in proto_walk.graphs(proto.graph):
            for t in g.initializer:
                yield t.data_type, _tensor_bytes(t)
            for node in g.node:
                if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
                    continue
                for attr in node.attribute:
                    if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                        yield attr.t.data_type, _tensor_bytes(attr.t)
                    elif attr.name == "sparse_value":
                        values = attr.sparse_tensor.values
                        yield values.data_type, _tensor_bytes(values)

    return _weights(tensors())


def _tensor_bytes(t: onnx.TensorProto) -> int:
    if t.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return 0
    try:
        size = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return 0
    return int(size * int(np.prod(t.dims, dtype=np.int64)))


def cast_change(before: int, after: int) -> str:
    """What follows ``casts inserted:``: ``2 (Cast nodes 0 -> 2)``, or for fewer casts than the
    original ``none: 4 fewer Cast nodes than the original (Cast nodes 6 -> 2)``, never ``-4``."""
    net = after - before
    if net >= 0:
        return f"{net} (Cast nodes {before} -> {after})"
    fewer = f"{-net} fewer Cast node{'s' if net != -1 else ''}"
    return f"none: {fewer} than the original (Cast nodes {before} -> {after})"


def bytes_text(n: float) -> str:
    """A byte count in the unit that suits it (e.g. '1.20 MB'): every command and page."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"
