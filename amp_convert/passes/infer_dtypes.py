"""Pass 1: give every value a known element type.

ONNX shape inference runs on a copy of the graph stripped of weight data (a > 2 GB model cannot be
serialised for it otherwise); what it cannot type, a dtype-only propagation from the op schemas
fills in. A float value whose type stays unknown pins its nodes to their original precision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import onnx
import onnx_ir as ir

from amp_convert import proto_walk, schema
from amp_convert.passes.state import ConversionState

logger = logging.getLogger(__name__)
_R = TypeVar("_R")
_SMALL = 1024  # bytes of tensor data kept when stripping weights for the onnx C API
_DTYPE_BY_NAME = {schema.type_name(dt): dt for dt in ir.DataType if dt != ir.DataType.UNDEFINED}


def call_on_stripped(model: ir.Model, func: Callable[[onnx.ModelProto], _R]) -> _R:
    """Run an onnx C-API function on the model serialised without its large weights.

    Large initializers become typed graph inputs for the duration of the call; the model is left as
    it was, whatever happens.
    """
    graph = model.graph
    saved_inputs = list(graph.inputs)
    removed: list[ir.Value] = []
    for value in list(graph.initializers.values()):
        tensor = value.const_value
        if tensor is None or tensor.nbytes > _SMALL:
            if value.dtype is None and tensor is not None:
                value.dtype = tensor.dtype
            if value.shape is None and tensor is not None:
                value.shape = tensor.shape
            removed.append(value)
            graph.initializers.pop(value.name)
            if not value.is_graph_input():
                graph.inputs.append(value)
    try:
        proto = ir.serde.serialize_model(model)
        return func(proto)
    finally:
        graph.inputs.clear()
        graph.inputs.extend(saved_inputs)
        for value in removed:
            graph.initializers.add(value)


def _proto_value_types(graph: onnx.GraphProto, out: dict[str, onnx.TypeProto]) -> None:
    for g in proto_walk.graphs(graph):
        for vi in (*g.input, *g.value_info, *g.output):
            if vi.type.WhichOneof("value") is not None:
                out.setdefault(vi.name, vi.type)


def first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def strict_check(proto: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX's checker plus strict type inference; raises on the first problem."""
    onnx.checker.check_model(proto, full_check=False)
    return onnx.shape_inference.infer_shapes(
        proto, check_type=True, strict_mode=True, data_prop=False
    )


def analyse(model: ir.Model) -> tuple[str | None, dict[str, onnx.TypeProto]]:
    """One look at the original through ONNX: (strict check error or None, inferred types).

    The strict check (checker + strict type inference) tells whether ONNX's own verification can
    be held against our result; its inference also types the values. Serialised once, stripped.
    """

    def look(proto: onnx.ModelProto) -> tuple[str | None, dict[str, onnx.TypeProto]]:
        error = None
        try:
            inferred = strict_check(proto)
        except Exception as e:  # onnx raises several error kinds
            error = first_line(e)
            try:
                inferred = onnx.shape_inference.infer_shapes(
                    proto, check_type=False, strict_mode=False, data_prop=False
                )
            except Exception as e2:  # inference is a help, never a requirement
                logger.info("onnx shape inference failed (%s); schema propagation only", e2)
                return error, {}
        types: dict[str, onnx.TypeProto] = {}
        _proto_value_types(inferred.graph, types)
        return error, types

    return call_on_stripped(model, look)


def _attr_dtype(node: ir.Node) -> ir.DataType | None:
    if node.op_type == "Cast" and "to" in node.attributes:
        return ir.DataType(node.attributes["to"].value)
    if "dtype" in node.attributes:
        return ir.DataType(node.attributes["dtype"].value)
    if node.op_type in ("ConstantOfShape", "Constant"):
        attr = node.attributes.get("value")
        if attr is not None and attr.type == ir.AttributeType.TENSOR:
            return attr.value.dtype
        return ir.DataType.FLOAT if node.op_type == "ConstantOfShape" else None
    return None


def _propagate(node: ir.Node, opset: int) -> None:
    sig = schema.signature(node.op_type, node.domain, opset)
    if sig is None and node.domain not in ("", "ai.onnx"):
        sig = schema.runtime_signature(node.op_type, node.domain, opset)
    if sig is None:
        return
    bound: dict[str, ir.DataType] = {}
    for i, value in enumerate(node.inputs):
        slot = sig.input_slot(i)
        if value is not None and value.dtype is not None and slot is not None and slot.is_type_var:
            bound.setdefault(slot.type_str, value.dtype)
    for i, value in enumerate(node.outputs):
        if value.dtype is not None or value.type is not None:
            continue
        slot = sig.output_slot(i)
        if slot is None or not all(t.startswith("tensor(") for t in slot.allowed):
            continue
        if not slot.is_type_var:
            dtype = _DTYPE_BY_NAME.get(slot.type_str)
        elif slot.type_str in bound and node.op_type not in ("Cast", "CastLike"):
            dtype = bound[slot.type_str]
        elif node.op_type == "CastLike" and len(node.inputs) > 1 and node.inputs[1] is not None:
            dtype = node.inputs[1].dtype
        else:
            dtype = _attr_dtype(node)
            if dtype is None and node.inputs and node.inputs[0] is not None and slot.is_type_var:
                # *Like ops without dtype take the input's type
                dtype = node.inputs[0].dtype if node.op_type.endswith("Like") else None
        if dtype is not None:
            value.dtype = dtype


class InferDtypesPass(ir.passes.InPlacePass):
    """Fill in missing element types (ONNX inference first, schema propagation second)."""

    def __init__(self, state: ConversionState, types: dict[str, onnx.TypeProto]) -> None:
        super().__init__()
        self.state = state
        self.types = types

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        for graph in model.graphs():
            for value in graph.initializers.values():
                if value.const_value is not None and value.dtype is None:
                    value.dtype = value.const_value.dtype
        missing = [
            v
            for node in model.graph.all_nodes()
            for v in node.outputs
            if v.dtype is None and v.type is None
        ]
        if missing:
            types = self.types
            for value in missing:
                if value.name in types:
                    try:
                        value.type = ir.serde.deserialize_type_proto_for_type(types[value.name])
                    except Exception:  # an incomplete type: leave it unknown
                        continue
        opsets = model.opset_imports
        for node in model.graph.all_nodes():
            if any(v.dtype is None and v.type is None for v in node.outputs):
                domain = "" if node.domain == "ai.onnx" else node.domain
                _propagate(node, opsets.get(domain, 1))
        return ir.passes.PassResult(model, modified=bool(missing))
