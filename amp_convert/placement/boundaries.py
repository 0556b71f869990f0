"""Control-flow boundaries: values that must share one element type across an If/Loop/Scan edge.

An If output has the type of the matching output of both branches; a Loop-carried value has one
type as the Loop's initial input, the body's input, the body's output and the Loop's final
output; a Scan's state, scanned inputs and scanned outputs likewise. Each such group is one
*boundary*. Placement decides it LOW or FP32 like a node (a vertex of the min cut), so an If whose
branches both end in low precision hands its output on low, with no Cast pair at the boundary,
and an RNN's carried state stays low from one iteration to the next.

A boundary is left at its original type when any of its values is not an FP32 tensor, or when a
subgraph output it reads is not computed inside that subgraph (a captured outer value or a body
input passed straight through): a Cast for such a value would have to live in the subgraph under
another name, which the rewrite does not do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import onnx_ir as ir

from amp_convert import schema
from amp_convert.core import domains, walk
from amp_convert.core.precision import is_float_tensor

Slot = tuple[ir.Node, int]


@dataclass(frozen=True)
class Boundary:
    """One type shared by the values around a control-flow node."""

    node: ir.Node
    label: str  # e.g. "output 2", "carried state 0": for the report
    reads: tuple[ir.Value, ...]  # subgraph outputs the node hands on
    slots: tuple[Slot, ...]  # the node's own inputs it passes into a body
    defines: tuple[ir.Value, ...]  # the node's outputs and the body inputs it fills


@dataclass(frozen=True)
class Boundaries:
    """Every eligible boundary of a model, with lookups by the value or slot it touches."""

    items: tuple[Boundary, ...] = ()
    by_defined: Mapping[ir.Value, int] = field(default_factory=dict)
    by_read: Mapping[ir.Value, int] = field(default_factory=dict)
    by_slot: Mapping[Slot, int] = field(default_factory=dict)

    def values(self, index: int) -> list[ir.Value]:
        """Every value of boundary ``index``: read, defined, and passed in through a slot."""
        b = self.items[index]
        passed = [node.inputs[i] for node, i in b.slots]
        return [v for v in (*b.reads, *b.defines, *passed) if v is not None]


def _body(node: ir.Node, attr: str) -> ir.Graph | None:
    a = node.attributes.get(attr)
    return a.value if a is not None and a.type == ir.AttributeType.GRAPH else None


def _if_boundaries(node: ir.Node) -> list[Boundary]:
    branches = [_body(node, "then_branch"), _body(node, "else_branch")]
    if None in branches:
        return []
    out = []
    for k, value in enumerate(node.outputs):
        reads = tuple(g.outputs[k] for g in branches if g is not None and k < len(g.outputs))
        out.append(Boundary(node, f"output {k}", reads, (), (value,)))
    return out


def _loop_boundaries(node: ir.Node) -> list[Boundary]:
    body = _body(node, "body")
    if body is None:
        return []
    carried = len(node.inputs) - 2
    out = []
    for j in range(carried):
        reads = (body.outputs[1 + j],)
        defines = (body.inputs[2 + j], node.outputs[j])
        out.append(Boundary(node, f"carried state {j}", reads, ((node, 2 + j),), defines))
    for k in range(carried, len(node.outputs)):
        reads = (body.outputs[1 + k],)
        out.append(Boundary(node, f"scan output {k - carried}", reads, (), (node.outputs[k],)))
    return out


def _scan_boundaries(node: ir.Node) -> list[Boundary]:
    body = _body(node, "body")
    attr = node.attributes.get("num_scan_inputs")
    if body is None or attr is None:
        return []
    scanned = int(attr.value)
    states = len(node.inputs) - scanned
    out = []
    for j in range(states):
        defines = (body.inputs[j], node.outputs[j])
        out.append(Boundary(node, f"state {j}", (body.outputs[j],), ((node, j),), defines))
    for m in range(scanned):
        i = states + m
        out.append(Boundary(node, f"scan input {m}", (), ((node, i),), (body.inputs[i],)))
    for k in range(states, len(node.outputs)):
        out.append(
            Boundary(node, f"scan output {k - states}", (body.outputs[k],), (), (node.outputs[k],))
        )
    return out


def _eligible(b: Boundary) -> bool:
    passed = [b.node.inputs[i] for _, i in b.slots]
    if not all(is_float_tensor(v) for v in (*b.reads, *b.defines, *passed)):
        return False
    bodies = [a.value for a in b.node.attributes.values() if a.type == ir.AttributeType.GRAPH]
    for value in b.reads:  # computed inside the subgraph that returns it
        producer = value.producer()
        if producer is None or not any(producer.graph is g for g in bodies):
            return False
    return True


def _admits(op_type: str, opset: int, low: ir.DataType) -> bool:
    """Whether the op's schema at ``opset`` lets its values be ``low`` (bfloat16 from opset 16)."""
    sig = schema.signature(op_type, "", opset)
    slot = sig.output_slot(0) if sig is not None else None
    return slot is not None and schema.type_name(low) in slot.allowed


def find_boundaries(model: ir.Model, low: ir.DataType) -> Boundaries:
    """The boundaries of every If/Loop/Scan in the model (subgraphs included) that may be low."""
    opset = domains.opset_version(model.opset_imports)
    admitted = {op: _admits(op, opset, low) for op in ("If", "Loop", "Scan")}
    admitted["Scan"] = admitted["Scan"] and opset >= 9  # Scan-8 has another signature
    found: list[Boundary] = []
    for node in walk.all_nodes(model.graph):
        if not domains.is_default(node.domain) or not admitted.get(node.op_type):
            continue
        if node.op_type == "If":
            found += _if_boundaries(node)
        elif node.op_type == "Loop":
            found += _loop_boundaries(node)
        elif node.op_type == "Scan":
            found += _scan_boundaries(node)
    candidates = [b for b in found if _eligible(b)]
    read_count: dict[ir.Value, int] = {}
    for b in candidates:  # a value returned twice would need two interface types: leave it
        for v in b.reads:
            read_count[v] = read_count.get(v, 0) + 1
    items = tuple(b for b in candidates if all(read_count[v] == 1 for v in b.reads))
    by_defined = {v: i for i, b in enumerate(items) for v in b.defines}
    by_read = {v: i for i, b in enumerate(items) for v in b.reads}
    by_slot = {s: i for i, b in enumerate(items) for s in b.slots}
    return Boundaries(items, by_defined, by_read, by_slot)
