"""BatchNormalization as the converter reads it: in inference mode or not, its constant 1-D
statistics in float64, how they lay along a tensor's axis, the share of a result FP16 keeps only
as subnormals, which output channel each weight element feeds and what the low type's range takes
from each channel, and the clean-up of a weight a fold left unread.

Shared vocabulary of the steps that fold a normalisation offline (passes/fold_bn.py, and any
other fold of a norm with stored statistics): `Kept` carries why a BN stays as it is.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from amp_convert.core import domains, proto_walk
from amp_convert.core.dtypes import FP16, LowType
from amp_convert.core.precision import constant_tensor


class Kept(Exception):
    """A BN that must stay as it is; the message is the reason."""


def is_onnx(node: ir.Node | None, *op_types: str) -> bool:
    return node is not None and domains.is_default(node.domain) and node.op_type in op_types


def shaped(s: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """``s`` laid along ``axis`` of a rank-``rank`` tensor (ones elsewhere)."""
    shape = [1] * rank
    shape[axis] = s.size
    return s.reshape(shape)


def to_float32(values: np.ndarray) -> np.ndarray:
    """float64 → float32 as stored; beyond float32 becomes inf (the range check reports it)."""
    with np.errstate(over="ignore"):
        return values.astype(np.float32)


def subnormal_share(magnitude: np.ndarray) -> float:
    nonzero = magnitude > 0
    count = int(nonzero.sum())
    if count == 0:
        return 0.0
    return float(np.sum(nonzero & (magnitude < FP16.min_normal))) / count


def inferred_types(proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=False)
    except Exception:  # inference is a help, never a requirement
        return {}
    types: dict[str, onnx.TypeProto] = {}
    for g in proto_walk.graphs(inferred.graph):
        for vi in (*g.input, *g.value_info, *g.output):
            if vi.type.WhichOneof("value") is not None:
                types.setdefault(vi.name, vi.type)
    return types


def attr(node: ir.Node, name: str, default: float | int) -> float | int:
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def check_inference(bn: ir.Node, opset: int) -> None:
    """Raise Kept unless the BN normalises with its stored statistics (inference mode)."""
    if opset < 7:
        raise Kept(f"BatchNormalization-{opset} (is_test semantics) is not folded")
    if int(attr(bn, "training_mode", 0)):
        raise Kept("training_mode=1 normalises with batch statistics")
    if opset < 9 and not int(attr(bn, "spatial", 1)):
        raise Kept("spatial=0 (per-activation statistics) is not folded")
    extra = [v for v in bn.outputs[1:] if v is not None and v.name]
    if extra:
        raise Kept("training outputs (running/saved mean and variance) are requested")


def statistics(bn: ir.Node) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scale, B, mean, var as float64 [C] arrays, or raise Kept."""
    if len(bn.inputs) != 5 or any(v is None for v in bn.inputs):
        raise Kept("BatchNormalization needs X, scale, B, mean and var")
    stats = [v for v in bn.inputs[1:] if v is not None]
    if any(v.is_graph_input() for v in stats):
        raise Kept("scale, B, mean or var is a graph input (can be fed at run time)")
    tensors = [constant_tensor(v) for v in stats]
    if any(t is None for t in tensors):
        raise Kept("scale, B, mean and var are not all constant")
    arrays = [t.numpy().astype(np.float64) for t in tensors if t is not None]
    channels = arrays[0].size
    if any(a.ndim != 1 or a.size != channels for a in arrays):
        raise Kept("scale, B, mean and var are not all 1-D of one length")
    return arrays[0], arrays[1], arrays[2], arrays[3]


def drop_if_dead(value: ir.Value) -> None:
    """Remove an initializer or Constant node nobody reads any more."""
    if value.uses() or value.is_graph_output():
        return
    if value.is_initializer() and not value.is_graph_input():
        graph = value.graph
        if graph is not None and value.name is not None:
            graph.initializers.pop(value.name, None)
        return
    producer = value.producer()
    if is_onnx(producer, "Constant") and producer is not None and producer.graph is not None:
        producer.graph.remove(producer, safe=True)


def output_channels(
    op: str, shape: tuple[int, ...], group: int = 1, trans_b: bool = False
) -> np.ndarray:
    """For each element of a Conv/ConvTranspose/Gemm/MatMul weight of `shape`, the index of the
    output channel it feeds (the channel a BatchNormalization after it scales)."""
    index = np.indices(shape, dtype=np.int64)
    if op == "Conv":
        return index[0]
    if op == "ConvTranspose":  # W is [C_in, C_out/group, k...]
        per_group_in = shape[0] // group
        return (index[0] // per_group_in) * shape[1] + index[1]
    return index[0] if trans_b else index[1]


def channel_range_loss(
    values: np.ndarray, channel: np.ndarray, channels: int, limits: LowType
) -> np.ndarray:
    """Per output channel, what flush and subnormal rounding in the low type take from that
    channel's weights, relative to their norm (weight_range.RangeStats.range_loss per channel):
    the relative error they bring to that channel's output, beside the ordinary rounding of
    every normal value (at most ``limits.roundoff``)."""
    v = values.astype(np.float64).reshape(-1)
    c = channel.reshape(-1)
    tiny = (v != 0) & (np.abs(v) < limits.min_normal)
    rounded = v[tiny].astype(np.float32).astype(limits.numpy).astype(np.float64)
    loss = np.bincount(c[tiny], (rounded - v[tiny]) ** 2, minlength=channels)
    norm = np.bincount(c, v * v, minlength=channels)
    ratio = np.divide(loss, norm, out=np.zeros(channels), where=norm > 0)
    return np.sqrt(ratio)
