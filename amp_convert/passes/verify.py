"""Verify: the pipeline's postcondition; a failure is a converter bug, never a written model.

Two layers: our own O(nodes) check of every node against its schema (each type variable binds one
admitted type, fixed slots have their type, Cast outputs match `to`, control-flow bodies match
their node), naming the node; then, when the original model passed it, ONNX's checker with strict
type inference on the weight-stripped graph.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import onnx_ir as ir

from amp_convert import schema
from amp_convert.core import domains, walk
from amp_convert.core.steps import StepResult
from amp_convert.errors import VerificationError
from amp_convert.files.onnx_checks import call_on_stripped, first_line, strict_check

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verified(StepResult):
    """What verify checked: nodes against their schemas, and whether ONNX's strict check ran."""

    nodes_checked: int
    onnx_strict: bool


def _label(node: ir.Node) -> str:
    return f"node {node.name or '<unnamed>'!r} ({node.op_type})"


def _check_node(node: ir.Node, opset: int) -> str | None:
    if node.op_type == "Cast" and domains.is_default(node.domain):
        out = node.outputs[0]
        if out.dtype is not None and out.dtype != node.attributes["to"].value:
            to = ir.DataType(node.attributes["to"].value).name
            return f"{_label(node)}: output typed {out.dtype.name} but casts to {to}"
        return None
    sig = schema.signature(node.op_type, node.domain, opset)
    if sig is None:
        return None
    bound: dict[str, ir.DataType] = {}
    for kind, values, slot_at in (
        ("input", node.inputs, sig.input_slot),
        ("output", node.outputs, sig.output_slot),
    ):
        for i, value in enumerate(values):
            slot = slot_at(i)
            if value is None or slot is None or value.dtype is None:
                continue
            if value.type is not None and not isinstance(value.type, ir.TensorType):
                continue
            name = schema.type_name(value.dtype)
            if not slot.homogeneous:
                continue
            if slot.is_type_var and bound.get(slot.type_str, value.dtype) != value.dtype:
                return (
                    f"{_label(node)}: {kind} {i} ({value.name!r}) is {value.dtype.name} but "
                    f"{slot.type_str} is bound to {bound[slot.type_str].name}"
                )
            if name not in slot.allowed:
                return f"{_label(node)}: {kind} {i} ({value.name!r}) is {name}, not admitted"
            if slot.is_type_var:
                bound.setdefault(slot.type_str, value.dtype)
    return _check_bodies(node)


def _check_bodies(node: ir.Node) -> str | None:
    if node.op_type == "If":
        for attr in ("then_branch", "else_branch"):
            body = node.attributes[attr].value
            for i, (out, inner) in enumerate(zip(node.outputs, body.outputs, strict=False)):
                if out.dtype is not None and inner.dtype is not None and out.dtype != inner.dtype:
                    got = inner.dtype.name
                    return f"{_label(node)}: output {i} is {out.dtype.name}, {attr} gives {got}"
    elif node.op_type == "Loop":
        body = node.attributes["body"].value
        for i, (outer, inner) in enumerate(zip(node.inputs[2:], body.inputs[2:], strict=False)):
            if (
                outer is not None
                and outer.dtype is not None
                and inner.dtype is not None
                and outer.dtype != inner.dtype
            ):
                want = inner.dtype.name
                have = outer.dtype.name
                return f"{_label(node)}: loop-carried input {i} is {have}, body takes {want}"
    return None


def check_types(model: ir.Model) -> int:
    """Raise VerificationError on the first node whose types break its schema; nodes checked."""
    opsets = model.opset_imports
    checked = 0
    for node in walk.all_nodes(model.graph):
        problem = _check_node(node, domains.opset_version(opsets, node.domain))
        if problem:
            raise VerificationError(f"converter bug, model not written: {problem}")
        checked += 1
    return checked


def onnx_strict_check(model: ir.Model) -> str | None:
    """ONNX checker + strict type inference on the weight-stripped model; the error text or None."""

    try:
        call_on_stripped(model, strict_check)
    except Exception as e:  # onnx raises several error kinds
        return first_line(e)
    return None


def verify(model: ir.Model, original_passed_strict: bool) -> Verified:
    """Refuse to hand back a model that breaks the type rules (raises VerificationError).

    ONNX's strict check runs only when the original passed it (`original_passed_strict`).
    """
    checked = check_types(model)
    if original_passed_strict:
        problem = onnx_strict_check(model)
        if problem:
            raise VerificationError(f"converter bug, model not written: {problem}")
    result = Verified(checked, original_passed_strict)
    log.debug("verify: %s", result)
    return result
