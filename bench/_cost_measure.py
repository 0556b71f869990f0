"""Bytes one ORT run really moves, counted independently of the estimate; and the estimate.

Measured: every main-graph value is exposed as a graph output, one CPU run with graph
optimisations off, then per node (Constant nodes excepted, as in the estimate) the bytes of every
input and output it reads and writes, weights included. The estimate is amp_convert.cost.traffic's
for the same model and dims, as the converter makes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper


@dataclass(frozen=True)
class Estimate:
    bytes: int
    estimated_values: int
    dims: dict[str, int]


def estimate(path: str | Path, dims: Mapping[str, int]) -> Estimate:
    """The converter's FP32 traffic estimate of a model file for `dims` (others default)."""
    import onnx_ir as ir

    from amp_convert.cost.traffic import ShapeBook, model_traffic
    from amp_convert.passes.analyse import analyse
    from amp_convert.passes.infer_dtypes import InferDtypesPass

    model = ir.load(str(path))
    shapes = ShapeBook(model, dict(dims))
    InferDtypesPass(analyse(model)[1])(model)
    return Estimate(model_traffic(model, shapes), shapes.estimated, dict(shapes.dims))


def _elem_types(proto: onnx.ModelProto) -> dict[str, int]:
    """Element types of every value, contrib ops included (the converter's dtype inference)."""
    import onnx_ir as ir

    from amp_convert.passes.analyse import analyse
    from amp_convert.passes.infer_dtypes import InferDtypesPass

    model = ir.from_proto(proto)
    InferDtypesPass(analyse(model)[1])(model)
    return {
        v.name: int(v.dtype)
        for node in model.graph
        for v in node.outputs
        if v.name and isinstance(v.type, ir.TensorType)  # sequences stay unexposed
    }


def _init_bytes(t: onnx.TensorProto) -> int:
    if t.data_type == onnx.TensorProto.STRING:
        return 0
    size = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    return int(np.prod(t.dims, dtype=np.int64)) * size


def measured_bytes(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> tuple[int, int]:
    """(bytes read + written by the main graph's nodes in one ORT run, values not seen).

    A node with a subgraph (If, Loop, Scan) counts its own inputs and outputs only: the values
    inside a body cannot be exposed, so such a model's estimate (body per trip) reads higher.
    """
    import onnxruntime as ort

    ort.set_default_logger_severity(4)
    exposed = onnx.ModelProto()
    exposed.CopyFrom(proto)
    g = exposed.graph
    types = _elem_types(proto)
    have = {o.name for o in g.output}
    for node in g.node:
        for name in node.output:
            if name and name not in have and name in types:
                g.output.append(helper.make_tensor_value_info(name, types[name], None))
                have.add(name)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    sess = ort.InferenceSession(exposed.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    sizes: dict[str, int] = {t.name: _init_bytes(t) for t in g.initializer}
    sizes.update({k: int(v.nbytes) if v.dtype != object else 0 for k, v in feeds.items()})
    for name, arr in zip(names, sess.run(names, dict(feeds)), strict=True):
        numeric = isinstance(arr, np.ndarray) and arr.dtype != object  # strings: no fixed size
        sizes[name] = int(arr.nbytes) if numeric else 0
    total = unseen = 0
    for node in proto.graph.node:
        if node.op_type == "Constant":
            continue
        for name in (*node.input, *node.output):
            if not name:
                continue
            if name not in sizes:
                unseen += 1
                continue
            total += sizes[name]
    return total, unseen


_ORT_NAMES = {"float32": "float", "float64": "double", "float16": "float16"}


def feeds_for(proto: onnx.ModelProto, dims: Mapping[str, int], seed: int = 0) -> dict:
    """Seeded inputs with every dynamic dim set (validation's rules for integer ids)."""
    from amp_convert.cost.dims import parse_dim_expression
    from amp_convert.validation.inputs import InputSpec, random_inputs

    inits = {t.name for t in proto.graph.initializer}
    specs = []
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        kind = helper.tensor_dtype_to_np_dtype(t.elem_type).name
        type_str = f"tensor({_ORT_NAMES.get(kind, kind)})"
        shape = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim
        ]
        specs.append(InputSpec(vi.name, type_str, shape))
    free = {k: v for k, v in dims.items() if parse_dim_expression(k) is None}  # `a + b` follows
    return random_inputs(specs, proto, dims=free, seed=seed).arrays
