"""Infer dtypes: give every value a known element type.

ONNX shape inference runs on a copy of the graph stripped of weight data (a > 2 GB model cannot be
serialised for it otherwise); what it cannot type, a dtype-only propagation from the op schemas
fills in. A float value whose type stays unknown pins its nodes to their original precision.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from amp_convert import schema

_DTYPE_BY_NAME = {schema.type_name(dt): dt for dt in ir.DataType if dt != ir.DataType.UNDEFINED}


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

    def __init__(self, types: dict[str, onnx.TypeProto]) -> None:
        super().__init__()
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
