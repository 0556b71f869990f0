"""The placement cut: assign's draft plan as a flow network, solved by an exact minimum cut.

`CutGraph` holds what every cut reads (the draft plan with its `Draft` per node, the sizes, and
the control-flow boundaries it places LOW) and `place` puts the free nodes (INFER/CLEAR not
fixed by a hard rule) on the side of an s-t cut (source = LOW, sink = FP32) whose edge weights
are the bytes a Cast would move per inference for each value that would cross precisions
(cost/traffic.py's sizes), plus a weight-1 preference edge per node that breaks ties toward the
level's default. Control-flow boundaries are vertices too. The solver is placement/mincut.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import onnx_ir as ir

from amp_convert.core.precision import Precision, constant_tensor, is_float_tensor
from amp_convert.core.reasons import Reason, ReasonKind
from amp_convert.cost.traffic import LAUNCH_BYTES, ShapeBook
from amp_convert.placement.mincut import INF, FlowNetwork
from amp_convert.placement.plan import FP32, LOW, ClassInfo, PrecisionPlan

K = ReasonKind


@dataclass
class Draft:
    """assign's working copy of one node's placement (private, mutable; frozen on return)."""

    info: ClassInfo
    precision: Precision = FP32
    forced: bool = False  # decided by a hard rule; placement must not flip it
    notes: list[Reason] = field(default_factory=list)


@dataclass
class CutGraph:
    """What every placement cut reads: the draft plan, its drafts and sizes; and where it records
    the boundaries it places LOW (the set the draft plan reads them from)."""

    plan: PrecisionPlan
    drafts: dict[ir.Node, Draft]
    shapes: ShapeBook
    low_boundaries: set[int]

    def place(self, nodes: list[ir.Node], prefer_low: bool) -> None:
        """Place INFER/CLEAR nodes so the bytes moved per inference are minimal (an exact s-t
        min cut).

        Source side = LOW, sink side = FP32.
        - At O2 a movable node left FP32 pays the extra bytes its own data path moves at 4 bytes an
          element (a unary edge); at O1 nodes move only where that saves Casts.
        - A float value costs one Cast when a reader needs the other precision than its producer
          gives; two helper vertices per value make that a cut of the value's weight: the bytes the
          Cast moves (a read of one type, a write of the other, sized from shapes) plus a kernel
          launch's worth (LAUNCH_BYTES), with the number of Casts as the tie-break.
        - A constant is free to live in either precision, but readers that disagree on it cost a
          runtime Cast or a second stored copy of the whole weight, so its bytes pull them together.
        - A control-flow boundary (an If output and what its branches return, a Loop's carried
          state...) is a movable vertex too: one type on every side of it.
        - Nodes and Casts weigh as often as their graph runs: a Loop/Scan body per trip, an If
          branch half (ShapeBook.runs).
        - Forced nodes are tied to their side; each movable node has a weight-1 edge towards the
          level's preference (O2: LOW, O1: FP32), which only breaks ties between equal costs.
        """
        plan, drafts, shapes = self.plan, self.drafts, self.shapes
        net = FlowNetwork()
        src, sink = net.add_vertex(), net.add_vertex()
        vertex: dict[ir.Node, int] = {}
        movable = []
        for node in nodes:
            d = drafts[node]
            if not d.info.candidate:
                continue
            v = vertex[node] = net.add_vertex()
            if d.forced:
                net.add_edge(*((src, v) if d.precision == LOW else (v, sink)), INF)
            else:
                movable.append(node)
        bounds = plan.boundaries
        crossing = [net.add_vertex() for _ in bounds.items]  # a boundary moves like a node
        if not movable and not crossing:
            return
        values = float_values_of(drafts, nodes)
        seen = {id(v) for v in values}
        for i in range(len(crossing)):
            for value in bounds.values(i):
                if id(value) not in seen:
                    seen.add(id(value))
                    values.append(value)
        per_cast = len(movable) + 1  # one Cast outweighs every preference edge together
        per_byte = per_cast * (len(values) + 1)  # one byte outweighs every Cast count together
        low_bytes = plan.low.itemsize
        for node in movable:
            v = vertex[node]
            net.add_edge(*((src, v) if prefer_low else (v, sink)), 1)
            if not prefer_low:
                continue  # O1 moves a node to low precision only where that saves Casts
            # a node left FP32 reads and writes its data path at 4 bytes an element instead of 2
            info = drafts[node].info
            slots = (
                *(node.inputs[i] for i in info.low_inputs),
                *(node.outputs[i] for i in info.low_outputs),
            )
            elements = sum(
                shapes.elements(x) for x in slots if x is not None and is_float_tensor(x)
            )
            runs = shapes.runs(node.graph)  # a Loop/Scan body per trip, an If branch half
            net.add_edge(src, v, math.ceil(elements * (4 - low_bytes) * per_byte * runs))
        for (
            v
        ) in crossing:  # in a tie a boundary goes low: the branches' low results pass as they are
            net.add_edge(src, v, 1)

        def cast_weight(value: ir.Value) -> int:
            """A Cast of `value`, where it is defined: bytes, a launch, and the Cast count."""
            defined_by = bounds.by_defined.get(value)
            if defined_by is not None and value.producer() is bounds.items[defined_by].node:
                reads = bounds.items[defined_by].reads
                if reads and bounds.items[defined_by].node.op_type == "If":
                    # after the If it casts what the branch that ran returned
                    return sum(cast_weight(r) for r in reads)
            weight = (shapes.cast_bytes(value, plan.low) + LAUNCH_BYTES) * per_byte + per_cast
            return math.ceil(weight * shapes.runs(value.graph))  # a body per trip, a branch half

        for value in values:
            add_value(plan, net, value, (vertex, crossing), src, sink, cast_weight(value))
        net.max_flow(src, sink)
        low_side = net.source_side(src)
        self.low_boundaries.clear()
        self.low_boundaries.update(i for i, v in enumerate(crossing) if v in low_side)
        for node in movable:
            d = drafts[node]
            low = vertex[node] in low_side
            if low != (d.precision == LOW):
                detail = ("low precision" if low else "FP32") + " moves fewer bytes"
                d.notes.append(Reason(K.PLACEMENT, "", detail))
            d.precision = LOW if low else FP32


def add_value(
    plan: PrecisionPlan,
    net: FlowNetwork,
    value: ir.Value,
    vertices: tuple[dict[ir.Node, int], list[int]],
    src: int,
    sink: int,
    weight: int,
) -> None:
    vertex, crossing = vertices  # of the candidate nodes; of the control-flow boundaries
    bounds = plan.boundaries
    producer = value.producer()
    defined_by = bounds.by_defined.get(value)
    if defined_by is not None:  # an If/Loop/Scan output or a body input
        p = crossing[defined_by]
    elif constant_tensor(value) is not None:
        p = net.add_vertex()  # free: stored in whichever precision costs less
    elif producer is not None:
        placed = plan.nodes.get(producer)
        movable_out = placed is not None and value.index() in placed.info.low_outputs
        p = vertex.get(producer, sink) if movable_out else sink
    else:
        p = src if plan.home(value) == LOW else sink
    readers: set[int] = set()
    for use in value.uses():
        reader = plan.nodes.get(use.node)
        passed_to = bounds.by_slot.get((use.node, use.idx))
        if passed_to is not None:  # into a Loop/Scan body
            readers.add(crossing[passed_to])
        elif reader is None or use.idx in reader.info.any_inputs:
            continue
        elif use.idx in reader.info.low_inputs and use.node in vertex:
            readers.add(vertex[use.node])
        else:
            readers.add(sink)
    if value.is_graph_output():
        read_by = bounds.by_read.get(value) if value.graph is not plan.main_graph else None
        if read_by is not None:  # handed on by an If/Loop/Scan
            readers.add(crossing[read_by])
        else:
            readers.add(src if plan.interface(value) == LOW else sink)
    readers.discard(p)
    if not readers or (p in (src, sink) and readers <= {src, sink}):
        return
    if p != sink:  # p LOW and a reader FP32 → a Cast up
        a = net.add_vertex()
        net.add_edge(p, a, weight)
        for r in readers:
            net.add_edge(a, r, INF)
    if p != src:  # p FP32 and a reader LOW → a Cast down
        b = net.add_vertex()
        net.add_edge(b, p, weight)
        for r in readers:
            net.add_edge(r, b, INF)


def float_values_of(drafts: dict[ir.Node, Draft], nodes: list[ir.Node]) -> list[ir.Value]:
    """Float values read by candidate nodes or produced by them (graph inputs included)."""
    seen: set[int] = set()
    out: list[ir.Value] = []
    for node in nodes:
        info = drafts[node].info
        if not info.candidate:
            continue
        for v in (*(node.inputs[i] for i in info.low_inputs), *node.outputs):
            if v is not None and id(v) not in seen and is_float_tensor(v):
                seen.add(id(v))
                out.append(v)
    return out
