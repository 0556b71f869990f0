"""ReduceMean over every spatial axis is a global average pool: run it as one.

torch.onnx's dynamo exporter writes ``adaptive_avg_pool2d(1)`` and ``x.mean((2, 3), keepdim=True)``
(global pooling, squeeze-excite blocks) as ``ReduceMean``; the TorchScript exporter writes the same
layer as ``GlobalAveragePool``. On ORT CUDA the two differ in FP16: GlobalAveragePool runs
cudnnPoolingForward, which writes the average (nn/pool.cc), while ReduceMean takes the fast
reduction path that writes the FP16 *sum* before dividing (reduction_ops.cc, ReduceComputeCore:
reduce_matrix_columns then UnaryDiv), which overflows once n*|mean| > 65504. Rewriting the node in
place (same node, same output value) gives both exports the same graph, so the same placement,
and the pooling kernel, safe in low precision between low neighbours. Only for a target that
wants it (``Rewrite.GLOBAL_POOL``: ORT CUDA); the others keep the ReduceMean and its range rule.

PyTorch's global pool ``x.mean((2, 3))`` (TorchScript and dynamo alike) drops the pooled axes
(``keepdims=0``): the node becomes GlobalAveragePool (output ``(N, C, 1, 1)``) followed by a
``Flatten(axis=1)`` that gives the ``(N, C)`` the readers read (one reshape, precision-neutral);
the ReduceMean's output value is then carried by the Flatten's (value map).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import onnx
import onnx_ir as ir

from amp_convert.core import domains, walk
from amp_convert.core.precision import FLOAT, UniqueNames, constant_tensor, is_default_domain
from amp_convert.core.steps import StepResult
from amp_convert.reports.conversion import FoldNote
from amp_convert.reports.value_map import Carried, ValueRecord
from amp_convert.targets import Rewrite, Target

DETAIL = (
    "cudnnPoolingForward writes the average (ORT nn/pool.cc); ReduceMean's fast path writes the "
    "FP16 sum before dividing (reduction_ops.cc ReduceComputeCore)"
)


def _rank(value: ir.Value, inferred: Mapping[str, onnx.TypeProto]) -> int | None:
    if value.shape is not None:
        return len(value.shape)
    tp = inferred.get(value.name or "")
    typed = tp is not None and tp.WhichOneof("value") == "tensor_type"
    if typed and tp.tensor_type.HasField("shape"):  # type: ignore[union-attr]
        return len(tp.tensor_type.shape.dim)  # type: ignore[union-attr]
    return None


def _axes(node: ir.Node, opset: int) -> list[int] | None:
    if opset >= 18:
        if len(node.inputs) < 2 or node.inputs[1] is None:
            return None
        tensor = constant_tensor(node.inputs[1])
        return None if tensor is None else [int(a) for a in tensor.numpy().reshape(-1)]
    attr = node.attributes.get("axes")
    return None if attr is None else [int(a) for a in attr.value]


def global_pool_reason(
    node: ir.Node, opset: int, inferred: Mapping[str, onnx.TypeProto]
) -> str | None:
    """Why `node` cannot run as GlobalAveragePool, or None when it can."""
    if node.op_type != "ReduceMean" or not is_default_domain(node.domain):
        return "not a ReduceMean"
    x = node.inputs[0]
    if x is None or x.dtype != FLOAT:
        return "input is not FP32"
    rank = _rank(x, inferred)
    if rank is None or rank < 3:
        return "rank unknown or below 3"
    axes = _axes(node, opset)
    if axes is None:
        return "axes not constant"
    if sorted(a % rank for a in axes) != list(range(2, rank)):
        return f"axes {axes} are not all spatial axes 2..{rank - 1}"
    return None


def _keeps_dims(node: ir.Node) -> bool:
    keep = node.attributes.get("keepdims")
    return keep is None or int(keep.value) != 0


@dataclass(frozen=True)
class PoolResult(StepResult):
    """The ReduceMeans now run as GlobalAveragePool (one report note each)."""

    notes: tuple[FoldNote, ...] = ()
    #: keepdims=0 pools: their output value carried by the Flatten after the pool (value map)
    values: tuple[ValueRecord, ...] = field(default=(), compare=False, repr=False)

    @property
    def modified(self) -> bool:
        return bool(self.notes)


def run_as_global_pool(
    model: ir.Model,
    inferred: Mapping[str, onnx.TypeProto],
    target: Target,
    names: UniqueNames | None = None,
) -> PoolResult:
    """Rewrite spatial-mean ReduceMeans as GlobalAveragePool in place, for a target that wants it.

    The node keeps its identity and name: only its op type, attributes and the axes input
    change. With keepdims (the default) it keeps its output value too, so every reader and the
    value map see the same value; with keepdims=0 a Flatten(axis=1) after it carries the value.
    """
    if not target.wants(Rewrite.GLOBAL_POOL):
        return PoolResult()
    opset = domains.opset_version(model.opset_imports)
    notes = []
    values: list[ValueRecord] = []
    for node in list(walk.all_nodes(model.graph)):
        if node.op_type != "ReduceMean" or global_pool_reason(node, opset, inferred) is not None:
            continue
        keeps = _keeps_dims(node)
        node.op_type = "GlobalAveragePool"
        for key in list(node.attributes):
            del node.attributes[key]
        node.resize_inputs(1)
        detail = DETAIL
        if not keeps:
            values.append(_flatten_after(node, names or UniqueNames.of_model(model)))
            detail += "; keepdims=0: a Flatten(axis=1) after the pool drops the pooled axes"
        notes.append(FoldNote(node.name or "", "ReduceMean run as", "GlobalAveragePool", detail))
    return PoolResult(tuple(notes), tuple(values))


def _flatten_after(pool: ir.Node, names: UniqueNames) -> ValueRecord:
    """Insert Flatten(axis=1) after `pool` for the readers of its output, which now carries the
    pooled (N, C, 1, ...) value; the Flatten's output takes over the old name and readers."""
    old = pool.outputs[0]
    graph = pool.graph
    assert graph is not None
    name = old.name or names.take(f"{pool.name or 'pool'}_out")
    old.name = names.take(f"{name}/pooled")
    flat = ir.Value(name=name, type=old.type, shape=old.shape)
    old.shape = None
    old.replace_all_uses_with(flat, replace_graph_outputs=True)
    flatten = ir.Node(
        "",
        "Flatten",
        [old],
        [ir.AttrInt64("axis", 1)],
        outputs=[flat],
        name=names.take(f"{pool.name or 'pool'}/Flatten"),
    )
    graph.insert_after(pool, flatten)
    why = f"ReduceMean {pool.name!r} (keepdims=0) run as GlobalAveragePool + Flatten"
    return Carried(old, flat, why)
