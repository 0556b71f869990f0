"""Checks and repairs on an input ModelProto's graph structure, before onnx-ir reads it.

What onnx-ir or a later pass would trip over with an unclear message (or an internal error)
is refused here with one line naming the node or value, or repaired where the repair is
unambiguous and the result is what the user meant:
- a dtype attribute (Cast's ``to``, ``dtype`` of generators) that is no ONNX element type;
- a value produced twice in one graph (ONNX graphs are single-assignment);
- sparse initializers become dense ones (ONNX Runtime and onnx-ir's passes read dense tensors);
- duplicate node names get a suffix (ONNX Runtime refuses a graph with two nodes of one name).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from amp_convert.core import proto_walk
from amp_convert.errors import InputError

_T = onnx.TensorProto
#: attributes that hold an element type, on default-domain nodes
_DTYPE_ATTRIBUTES = ("to", "dtype")
#: a sparse initializer is densified only up to this many bytes
MAX_DENSE_BYTES = 1 << 31


def _label(node: onnx.NodeProto) -> str:
    return f"node {node.name!r} ({node.op_type})" if node.name else f"a {node.op_type} node"


def check_dtype_attributes(proto: onnx.ModelProto, where: str) -> None:
    """Refuse a default-domain node whose element-type attribute names no ONNX type."""
    valid = set(_T.DataType.values()) - {_T.UNDEFINED}
    for graph in proto_walk.graphs(proto.graph):
        for node in graph.node:
            if node.domain not in ("", "ai.onnx"):
                continue
            for attr in node.attribute:
                if (
                    attr.name in _DTYPE_ATTRIBUTES
                    and attr.type == onnx.AttributeProto.INT
                    and attr.i not in valid
                ):
                    raise InputError(
                        f"{where}: {_label(node)} has {attr.name}={attr.i}, which is no ONNX "
                        "element type"
                    )


def check_single_assignment(proto: onnx.ModelProto, where: str) -> None:
    """Refuse a graph where two nodes (or a node and an input/initializer) define one value."""
    for graph in proto_walk.graphs(proto.graph):
        defined: dict[str, str] = {}
        for v in graph.input:
            defined.setdefault(v.name, "a graph input")
        for t in graph.initializer:
            defined.setdefault(t.name, "an initializer")
        for node in graph.node:
            for out in node.output:
                if not out:
                    continue
                if out in defined:
                    raise InputError(
                        f"{where}: value {out!r} is defined twice (by {defined[out]} and by "
                        f"{_label(node)}); an ONNX graph defines each value once"
                    )
                defined[out] = _label(node)


def densify_sparse_initializers(proto: onnx.ModelProto, where: str) -> int:
    """Turn every sparse initializer into a dense one (in place); returns how many."""
    count = 0
    for graph in proto_walk.graphs(proto.graph):
        for sparse in graph.sparse_initializer:
            graph.initializer.append(_dense(sparse, where))
            count += 1
        del graph.sparse_initializer[:]
    return count


def _dense(sparse: onnx.SparseTensorProto, where: str) -> onnx.TensorProto:
    name = sparse.values.name
    dims = [int(d) for d in sparse.dims]
    try:
        values = onnx.numpy_helper.to_array(sparse.values).reshape(-1)
        indices = onnx.numpy_helper.to_array(sparse.indices).astype(np.int64)
    except (ValueError, TypeError) as e:
        raise InputError(f"{where}: sparse initializer {name!r} is malformed: {e}") from None
    size = math.prod(dims)
    if size * values.dtype.itemsize > MAX_DENSE_BYTES:
        raise InputError(
            f"{where}: sparse initializer {name!r} would take {size * values.dtype.itemsize} "
            f"bytes dense; at most {MAX_DENSE_BYTES} are supported"
        )
    if indices.ndim == 2 and indices.shape[1] == len(dims) and len(dims) > 1:
        bad = (indices < 0) | (indices >= np.array(dims))
        if bad.any():
            raise InputError(f"{where}: sparse initializer {name!r} has indices out of range")
        flat = np.ravel_multi_index(tuple(indices.T), dims)
    else:
        flat = indices.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= size):
            raise InputError(f"{where}: sparse initializer {name!r} has indices out of range")
    if flat.size != values.size:
        raise InputError(
            f"{where}: sparse initializer {name!r} has {values.size} values for {flat.size} indices"
        )
    dense = np.zeros(size, values.dtype)
    dense[flat] = values
    return onnx.numpy_helper.from_array(dense.reshape(dims), name)


def unique_node_names(proto: onnx.ModelProto) -> int:
    """Give the second and later nodes of a repeated name a free ``NAME__k``; returns how many."""
    nodes = [n for g in proto_walk.graphs(proto.graph) for n in g.node]
    taken = {n.name for n in nodes if n.name}
    seen: set[str] = set()
    changed = 0
    for node in nodes:
        if not node.name:
            continue
        if node.name not in seen:
            seen.add(node.name)
            continue
        k, name = 1, f"{node.name}__1"
        while name in taken:
            k += 1
            name = f"{node.name}__{k}"
        node.name = name
        taken.add(name)
        seen.add(name)
        changed += 1
    return changed
