"""Dense copies of sparse initializers and sparse Constant values, for the emulator.

onnx-ir drops sparse initializers and refuses sparse tensor attributes, but a candidate built by
another tool may carry them. ONNX Runtime densifies them at load anyway, so the emulator does the
same on a copy first. Models without sparse tensors (all the converter writes) are not copied.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from amp_convert.core import proto_walk


def has_sparse(model: onnx.ModelProto) -> bool:
    """Whether any graph holds a sparse initializer or a sparse tensor attribute."""
    return any(
        len(g.sparse_initializer) > 0
        or any(
            a.type in (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS)
            for node in g.node
            for a in node.attribute
        )
        for g in proto_walk.graphs(model.graph)
    )


def dense_tensor(sparse: onnx.SparseTensorProto) -> onnx.TensorProto:
    """The dense tensor a SparseTensorProto stands for (named like its values)."""
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dense = np.zeros(tuple(sparse.dims), dtype=values.dtype)
    if indices.ndim == 1:  # linearised indices
        dense.reshape(-1)[indices] = values
    else:  # [NNZ, rank] coordinates
        dense[tuple(indices.T)] = values
    return numpy_helper.from_array(dense, sparse.values.name)


def densified(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` itself when it has no sparse tensors, else a copy with dense ones in their place.

    A Constant's `sparse_value` becomes its `value` (same output); sparse initializers become
    initializers of the same name.
    """
    if not has_sparse(model):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for graph in proto_walk.graphs(out.graph):
        graph.initializer.extend(dense_tensor(s) for s in graph.sparse_initializer)
        del graph.sparse_initializer[:]
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.SPARSE_TENSOR:
                    attr.t.CopyFrom(dense_tensor(attr.sparse_tensor))
                    attr.ClearField("sparse_tensor")
                    attr.type = onnx.AttributeProto.TENSOR
                    if node.op_type == "Constant" and attr.name == "sparse_value":
                        attr.name = "value"
                elif attr.type == onnx.AttributeProto.SPARSE_TENSORS:
                    attr.tensors.extend(dense_tensor(s) for s in attr.sparse_tensors)
                    del attr.sparse_tensors[:]
                    attr.type = onnx.AttributeProto.TENSORS
    return out
