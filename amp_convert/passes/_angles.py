"""Angles from integer positions stay FP32: the rotary-embedding arithmetic torch exports in-graph.

Sin and Cos are periodic, so what matters is the absolute error of their argument. A rotary
embedding computes it as position x inverse frequency from integer position ids (Cast, then MatMul
or Mul with the frequencies). FP16 holds integers exactly only up to 2048, and near 30000 its
spacing is 16: the angle, and so the rotation, is noise. Measured with the emulating validator
(bench/rotary_positions.py): cosine 0.96 at position 4096 and 0.92 at 30000 when the path is
FP16, against 0.9999995 when it is FP32. Fused rotary ops (com.microsoft RotaryEmbedding,
GroupQueryAttention) read precomputed cos/sin caches and int64 positions, so they are not affected.

A helper of classify (not a step of its own): the nodes from an integer-to-float Cast through
data-moving and linear ops to a Sin or Cos, which classify pins to FP32 with this reason.
"""

from __future__ import annotations

import onnx_ir as ir

from amp_convert.core import domains, walk

#: ops an angle passes through on its way from the position ids to Sin/Cos
_PATH_OPS = frozenset(
    {
        "MatMul",
        "Mul",
        "Div",
        "Add",
        "Sub",
        "Neg",
        "Einsum",
        "Gemm",
        "Unsqueeze",
        "Squeeze",
        "Reshape",
        "Transpose",
        "Concat",
        "Expand",
        "Tile",
        "Gather",
        "Slice",
        "Identity",
        "Flatten",
        "Cast",
    }
)
DETAIL = (
    "angle computed from integer positions: FP16 holds integers exactly only to 2048 and Sin/Cos "
    "need the angle's absolute precision (position 30000 under FP16: cosine 0.92)"
)


def _is_int(value: ir.Value | None) -> bool:
    return value is not None and value.dtype is not None and value.dtype.is_integer()


def _is_float_cast_of_int(node: ir.Node) -> bool:
    return node.op_type == "Cast" and bool(node.inputs) and _is_int(node.inputs[0])


def angle_nodes(model: ir.Model) -> frozenset[ir.Node]:
    """Sin/Cos nodes whose argument comes from integer positions, and the nodes computing it."""
    memo: dict[ir.Node, bool] = {}

    def from_positions(node: ir.Node, depth: int) -> bool:
        """Whether `node` computes a float from integer positions (memoised, bounded depth)."""
        if node in memo:
            return memo[node]
        memo[node] = False  # cycles (never in a valid graph) and depth cuts stay False
        if depth > 64 or not domains.is_default(node.domain) or node.op_type not in _PATH_OPS:
            return False
        if _is_float_cast_of_int(node):
            memo[node] = True
            return True
        found = False
        for value in node.inputs:
            producer = value.producer() if value is not None else None
            if producer is not None and from_positions(producer, depth + 1):
                found = True
        memo[node] = found
        return found

    pinned: set[ir.Node] = set()
    for node in walk.all_nodes(model.graph):
        if node.op_type not in ("Sin", "Cos") or not domains.is_default(node.domain):
            continue
        source = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
        if source is not None and from_positions(source, 0):
            pinned.add(node)
    pinned.update(n for n, on_path in memo.items() if on_path)
    return frozenset(pinned)
