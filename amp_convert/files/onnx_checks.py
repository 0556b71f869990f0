"""ONNX's own checks on an ir.Model, run on a copy serialised without its large weights.

A > 2 GB model cannot be serialised for the onnx C API, so large initializers become typed graph
inputs for the duration of a call. The converter uses this twice: once to look at the original
(strict check and type inference), once to verify the result.

ONNX Runtime registers a few ops in the ONNX domain that onnx does not define (onnxruntime-genai's
builder writes SimplifiedLayerNormalization there; ORT's optimizer writes LayerNormalization at
opsets before 17). onnx's checker would refuse them ("No Op registered..."), although ORT loads
them: in the copy handed to onnx they move to a domain of their own, which the checker leaves to
its runtime, like any contrib op. Our own checks type them from ORT's schema table (schema).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TypeVar

import onnx
import onnx_ir as ir

from amp_convert import schema
from amp_convert.core import domains, proto_walk

logger = logging.getLogger(__name__)
_R = TypeVar("_R")
_SMALL = 1024  # bytes of tensor data kept when stripping weights for the onnx C API
#: where ORT's own ONNX-domain ops wait while onnx looks at a model (never written out)
RUNTIME_OPS_DOMAIN = "amp_convert.ort_onnx_domain"


def hide_runtime_ops(proto: onnx.ModelProto) -> int:
    """Move ONNX-domain nodes only ORT defines to a domain of their own; how many moved."""
    opsets = {o.domain: o.version for o in proto.opset_import}
    version = domains.opset_version(opsets)
    moved = 0
    for graph in proto_walk.graphs(proto.graph):
        for node in graph.node:
            if domains.is_default(node.domain) and schema.runtime_schema(node.op_type, "", version):
                node.domain = RUNTIME_OPS_DOMAIN
                moved += 1
    if moved and RUNTIME_OPS_DOMAIN not in opsets:
        proto.opset_import.append(onnx.helper.make_opsetid(RUNTIME_OPS_DOMAIN, 1))
    return moved


#: id(model) -> its stripped copy, while a `serialised_once` block holds one
_held: dict[int, onnx.ModelProto] = {}


@contextlib.contextmanager
def serialised_once(model: ir.Model) -> Iterator[None]:
    """Inside the block (where nobody edits `model`) call_on_stripped serialises it once and
    hands every call a copy: serialising is Python work per node, copying the proto is not (the
    look at the original and the shape inference read the same graph)."""
    _held.pop(id(model), None)
    try:
        _held[id(model)] = onnx.ModelProto()  # empty: filled by the first call
        yield
    finally:
        _held.pop(id(model), None)


def call_on_stripped(model: ir.Model, func: Callable[[onnx.ModelProto], _R]) -> _R:
    """Run an onnx C-API function on the model serialised without its large weights.

    ONNX-domain ops only ORT defines are moved out of the ONNX domain in that copy
    (hide_runtime_ops). Inside `serialised_once(model)` the copy is made once.

    Large initializers, and every external one (the onnx checker would look for its file relative
    to the working directory), become typed graph inputs for the duration of the call; the model
    is left as it was, whatever happens.
    """
    held = _held.get(id(model))
    if held is not None and held.HasField("graph"):
        copy = onnx.ModelProto()
        copy.CopyFrom(held)
        return func(copy)
    proto = _stripped(model)
    if held is not None:
        held.CopyFrom(proto)
    return func(proto)


def _stripped(model: ir.Model) -> onnx.ModelProto:
    """The model serialised with its large and external weights as typed graph inputs."""
    graph = model.graph
    saved_inputs = list(graph.inputs)
    removed: list[ir.Value] = []
    for name, value in list(graph.initializers.items()):
        tensor = value.const_value
        if tensor is None or tensor.nbytes > _SMALL or isinstance(tensor, ir.ExternalTensor):
            if value.dtype is None and tensor is not None:
                value.dtype = tensor.dtype
            if value.shape is None and tensor is not None:
                value.shape = tensor.shape  # type: ignore[assignment]
            removed.append(value)
            graph.initializers.pop(name)
            if not value.is_graph_input():
                graph.inputs.append(value)
    try:
        proto = ir.serde.serialize_model(model)
        hide_runtime_ops(proto)
        return proto
    finally:
        graph.inputs.clear()
        graph.inputs.extend(saved_inputs)
        for value in removed:
            graph.initializers.add(value)


def proto_value_types(graph: onnx.GraphProto, out: dict[str, onnx.TypeProto]) -> None:
    for g in proto_walk.graphs(graph):
        for vi in (*g.input, *g.value_info, *g.output):
            if vi.type.WhichOneof("value") is not None:
                out.setdefault(vi.name, vi.type)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def one_line(error: BaseException) -> str:
    """The error's whole text on one line: onnx's checker breaks lines mid-sentence."""
    return " ".join(str(error).split()) or type(error).__name__


def strict_check(proto: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX's checker plus strict type inference; raises on the first problem."""
    onnx.checker.check_model(proto, full_check=False)
    return onnx.shape_inference.infer_shapes(
        proto, check_type=True, strict_mode=True, data_prop=False
    )
