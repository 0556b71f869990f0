"""Infer dtypes: give every value a known element type.

ONNX shape inference runs on a copy of the graph stripped of weight data (a > 2 GB model cannot be
serialised for it otherwise); what it cannot type, a dtype-only propagation from the op schemas
fills in. A float value whose type stays unknown pins its nodes to their original precision.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import onnx
import onnx_ir as ir

from amp_convert import schema
from amp_convert.core import domains, walk
from amp_convert.core.steps import StepResult

log = logging.getLogger(__name__)

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


def _propagate(node: ir.Node, opset: int) -> int:
    """Type the node's untyped outputs from its schema; how many got a type."""
    sig = schema.signature(node.op_type, node.domain, opset)
    if sig is None:
        return 0
    typed = 0
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
        dtype: ir.DataType | None
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
            typed += 1
    return typed


@dataclass(frozen=True)
class DtypeResult(StepResult):
    """How many values got their element type, and from where."""

    from_initializers: int = 0  # initializers typed from their tensor
    from_inference: int = 0  # node outputs typed by ONNX shape inference
    from_schemas: int = 0  # node outputs typed by the dtype-only schema propagation
    #: named node outputs still untyped (a float node among their readers keeps its precision)
    unknown: tuple[str, ...] = ()

    @property
    def modified(self) -> bool:
        return bool(self.from_initializers or self.from_inference or self.from_schemas)


def infer_dtypes(model: ir.Model, types: Mapping[str, onnx.TypeProto]) -> DtypeResult:
    """Fill in missing element types in place: from `types` (ONNX inference by value name, the
    pipeline's `analyse` result) first, from the op schemas second."""
    from_initializers = 0
    for graph in walk.graphs(model):
        for value in graph.initializers.values():
            if value.const_value is not None and value.dtype is None:
                value.dtype = value.const_value.dtype
                from_initializers += 1
    from_inference = 0
    for node in walk.all_nodes(model.graph):
        for value in node.outputs:
            if value.dtype is None and value.type is None and value.name and value.name in types:
                try:
                    value.type = ir.serde.deserialize_type_proto_for_type(types[value.name])
                except Exception:  # an incomplete type: leave it unknown
                    continue
                from_inference += 1
    from_schemas = 0
    opsets = model.opset_imports
    for node in walk.all_nodes(model.graph):
        if any(v.dtype is None and v.type is None for v in node.outputs):
            from_schemas += _propagate(node, domains.opset_version(opsets, node.domain))
    unknown = tuple(
        v.name
        for node in walk.all_nodes(model.graph)
        for v in node.outputs
        if v.dtype is None and v.type is None and v.name
    )
    result = DtypeResult(from_initializers, from_inference, from_schemas, unknown)
    log.debug("infer dtypes: %s", result)
    return result


class InferDtypesPass(ir.passes.InPlacePass):
    """`infer_dtypes` as an onnx-ir pass (the emulating validator runs it on its clone)."""

    def __init__(self, types: Mapping[str, onnx.TypeProto]) -> None:
        super().__init__()
        self.types = types

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=infer_dtypes(model, self.types).modified)
