"""Assign: decide LOW or FP32 per node by level, then place INFER/CLEAR nodes for the fewest casts.

- O1: ALLOW nodes are LOW; INFER/CLEAR nodes go LOW only where that needs fewer casts.
- O2: everything LOW except DENY and what DENY reaches forward through INFER/CLEAR (like TF's
  auto mixed precision); INFER/CLEAR go back to FP32 where that needs fewer casts.
- O3: every node the schemas allow is LOW; built-in DENY is ignored (user rules are not).
Hard limits win at every level: weights the low type cannot hold (weight_range) keep their
readers FP32.
"""

from __future__ import annotations

import logging
import math
import types
from dataclasses import dataclass, field

import onnx_ir as ir

from amp_convert.core.precision import NodeClass, Precision, constant_tensor, is_float_tensor
from amp_convert.core.qdq_rules import is_qdq, is_scale_slot, scale_refusal
from amp_convert.core.reasons import Reason, ReasonKind
from amp_convert.core.tensors import read, release
from amp_convert.core.weight_range import RangeStats, check_weight, float_attributes, weigh
from amp_convert.core.weight_scan import range_stats
from amp_convert.cost.traffic import LAUNCH_BYTES, ShapeBook
from amp_convert.options.convert import ConvertOptions, Level
from amp_convert.placement.boundaries import find_boundaries
from amp_convert.placement.mincut import INF, FlowNetwork
from amp_convert.placement.plan import FP32, LOW, Classes, ClassInfo, Placement, PrecisionPlan
from amp_convert.reports.conversion import TensorNote

log = logging.getLogger(__name__)

K = ReasonKind


@dataclass
class _Draft:
    """assign's working copy of one node's placement (private, mutable; frozen on return)."""

    info: ClassInfo
    precision: Precision = FP32
    forced: bool = False  # decided by a hard rule; placement must not flip it
    notes: list[Reason] = field(default_factory=list)


@dataclass
class _Weights:
    """What the range check found in the weights: mask fills to saturate, lines for the report."""

    saturate: set[str] = field(default_factory=set)
    notes: list[TensorNote] = field(default_factory=list)


def assign(
    model: ir.Model,
    classes: Classes,
    shapes: ShapeBook,
    options: ConvertOptions,
    low_io: frozenset[str] = frozenset(),
) -> PrecisionPlan:
    """Every node's precision at `options.level` (hard limits first, then placement by bytes).

    `low_io`: main-graph inputs/outputs that are low whatever keep_io_types says (--low-io).
    Control-flow boundaries are placed with the nodes (see passes/boundaries.py).
    """
    nodes = list(model.graph.all_nodes())
    weights = _Weights()
    drafts = {node: _Draft(classes[node]) for node in nodes}
    low_boundaries: set[int] = set()  # filled by the cut
    draft = PrecisionPlan(
        drafts,
        model.graph,
        options.low_dtype,
        options.keep_io_types,
        boundaries=find_boundaries(model, options.low_dtype),
        low_boundaries=low_boundaries,
        low_io=low_io,
    )
    _range_limits(draft, drafts, nodes, weights)
    _whole_qdq_groups(drafts, nodes)
    level = options.level
    for node in nodes:
        d = drafts[node]
        if not d.info.candidate or (
            d.info.op_class == NodeClass.DENY and (level != Level.O3 or d.info.user)
        ):
            d.precision, d.forced = FP32, True
        elif level == Level.O3 or d.info.op_class == NodeClass.ALLOW:
            d.precision, d.forced = LOW, True
        else:
            d.precision = LOW if level == Level.O2 else FP32
    cut = _Cut(draft, drafts, shapes, low_boundaries)
    if level in (Level.O1, Level.O2):
        _deny_reach(drafts, nodes)
        _min_cut(cut, nodes, prefer_low=level == Level.O2)
        # an FP32-accumulating reduction next to an FP32 neighbour keeps FP32 math with
        # explicit casts; pinning it can change the best placement of the rest, so re-cut
        while _pin_low_between_low(draft, drafts, nodes):
            _min_cut(cut, nodes, prefer_low=level == Level.O2)
    else:  # O3: every node is decided; only the control-flow boundaries are placed
        _min_cut(cut, nodes, prefer_low=True)
    placements = {
        node: Placement(d.info, d.precision, (*d.info.reasons, *d.notes))
        for node, d in drafts.items()
    }
    if log.isEnabledFor(logging.DEBUG):
        for node, p in placements.items():
            if p.info.candidate:
                why = "; ".join(r.text() for r in p.reasons)
                log.debug("assign %s (%s): %s, %s", node.name, node.op_type, p.precision, why)
    return PrecisionPlan(
        nodes=types.MappingProxyType(placements),
        main_graph=model.graph,
        low=options.low_dtype,
        keep_io_types=options.keep_io_types,
        saturate=frozenset(weights.saturate),
        tensor_notes=tuple(weights.notes),
        boundaries=draft.boundaries,
        low_boundaries=frozenset(low_boundaries),
        low_io=low_io,
    )


def _range_limits(
    plan: PrecisionPlan, drafts: dict[ir.Node, _Draft], nodes: list[ir.Node], weights: _Weights
) -> None:
    """Readers of weights the low type cannot hold keep FP32: never clamp or flush silently.

    The checks (overflow, flush to zero, subnormal loss; a scalar mask fill is saturated
    instead) are weight_range's, for FP16 and BF16 alike; here each weight is judged once.
    """
    refused: dict[int, str | None] = {}  # value -> why it cannot be low (None: it can)
    stats = _weight_stats(drafts, nodes, plan.low)
    for node in nodes:
        d = drafts[node]
        # judged whatever the node's own class: an FP32 node's output may still reach low readers
        why = _attribute_refusal(weights, node, plan.low) if float_attributes(node) else None
        if why is not None:  # its output holds the value: the node and its readers keep FP32
            if d.info.candidate:
                d.info = d.info.pinned(Reason(K.RANGE, "range", why))
            out = node.outputs[0]
            for use in out.uses():
                reader = drafts.get(use.node)
                if (
                    reader is not None
                    and reader.info.candidate
                    and use.idx in reader.info.low_inputs
                ):
                    where = f"input {out.name!r}: {node.op_type} {node.name!r}'s {why}"
                    reader.info = reader.info.pinned(Reason(K.RANGE, "range", where))
        if not d.info.candidate:
            continue
        for i in sorted(d.info.low_inputs):
            value = node.inputs[i]
            tensor = constant_tensor(value) if value is not None else None
            if value is None or tensor is None or not is_float_tensor(value):
                continue
            if id(value) not in refused:
                if is_scale_slot(node, i):  # judged by its effect on what it scales
                    refused[id(value)] = _scale_refusal(weights, value, tensor, plan.low)
                else:
                    known = stats.get(id(value))
                    refused[id(value)] = _refusal(weights, value, tensor, plan.low, known)
            why = refused[id(value)]
            if why is not None:
                d.info = d.info.pinned(Reason(K.RANGE, "range", f"input {value.name!r} {why}"))
                break


def _weight_stats(
    drafts: dict[ir.Node, _Draft], nodes: list[ir.Node], low: ir.DataType
) -> dict[int, RangeStats]:
    """The range stats of every weight _range_limits may judge (by id of its value), read once
    and on every core (weight_scan); the verdicts are still made in _range_limits' order."""
    tensors: dict[int, ir.TensorProtocol] = {}
    for node in nodes:
        d = drafts[node]
        if not d.info.candidate:
            continue
        for i in sorted(d.info.low_inputs):
            value = node.inputs[i]
            tensor = constant_tensor(value) if value is not None else None
            if value is None or tensor is None or not is_float_tensor(value):
                continue
            if not is_scale_slot(node, i):
                tensors.setdefault(id(value), tensor)
    return dict(zip(tensors, range_stats(list(tensors.values()), low), strict=True))


def _refusal(
    weights: _Weights,
    value: ir.Value,
    tensor: ir.TensorProtocol,
    low: ir.DataType,
    stats: RangeStats | None = None,
) -> str | None:
    """Why `value` cannot be stored low (noted for the report), or None; a mask fill saturates.
    `stats`: its range stats when already gathered (_weight_stats)."""
    if stats is None:
        stats = range_stats([tensor], low)[0]
    verdict = weigh(stats, low, tensor.size, value.uses())
    name = value.name or ""
    if verdict.action == "saturate":
        weights.saturate.add(name)  # rewrite reports it where the low copy is stored
    elif verdict.action == "keep":
        weights.notes.append(
            TensorNote(name, "kept FP32", f"{verdict.detail}; its readers stay FP32")
        )
        return verdict.detail
    return None


def _whole_qdq_groups(drafts: dict[ir.Node, _Draft], nodes: list[ir.Node]) -> None:
    """A Q/DQ whose scale keeps FP32 keeps its whole DQ -> op -> Q group FP32 with it.

    A group is what ORT and TensorRT fuse: the DQs an op reads, the op, and the Qs it feeds
    (joined through shared DQs); a Cast anywhere inside it would split it (passes/qdq.py).
    """
    parent: dict[ir.Node, ir.Node] = {}

    def find(n: ir.Node) -> ir.Node:
        while parent.setdefault(n, n) is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for node in nodes:
        if not is_qdq(node):
            continue
        x = node.inputs[0] if node.inputs else None
        if node.op_type == "DequantizeLinear":
            linked = [u.node for u in node.outputs[0].uses()]
        else:
            linked = [p] if x is not None and (p := x.producer()) is not None else []
        for other in linked:
            if other in drafts:
                parent[find(node)] = find(other)
    culprits = {
        find(n): n
        for n in parent
        if is_qdq(n) and drafts[n].info.reasons and drafts[n].info.reasons[0].kind == K.RANGE
    }
    for node in parent:
        culprit = culprits.get(find(node))
        d = drafts[node]
        if culprit is None or node is culprit or not d.info.candidate or d.info.user:
            continue
        detail = (
            f"in the QDQ group of {culprit.name!r}, whose scale keeps FP32: a Cast inside the "
            "group would split the DQ -> op -> Q fusion"
        )
        d.info = d.info.pinned(Reason(K.QDQ, "QDQ group", detail))


def _scale_refusal(
    weights: _Weights, value: ir.Value, tensor: ir.TensorProtocol, low: ir.DataType
) -> str | None:
    """A Q/DQ scale: passes/qdq.py's rule (relative rounding error), noted where it refuses."""
    why = scale_refusal(read(tensor), low)
    release(tensor)
    if why is not None:
        detail = f"{why}; its readers stay FP32"
        weights.notes.append(TensorNote(value.name or "", "kept FP32", detail))
    return why


def _attribute_refusal(weights: _Weights, node: ir.Node, low: ir.DataType) -> str | None:
    """Why a float attribute of `node` (ConstantOfShape's fill, Pad's value) cannot be low, or
    None; judged like a weight read by the node's readers, a mask fill saturated (by rewrite,
    under the name of the node's output)."""
    out = node.outputs[0]
    for attr in float_attributes(node):
        verdict = check_weight(attr.values, low, out.uses(), attr.copied)
        name = out.name or ""
        if verdict.action == "saturate":
            weights.saturate.add(name)
        elif verdict.action == "keep":
            what = f"attribute {attr.name!r} of {node.op_type} {node.name!r}"
            note = f"{what} {verdict.detail}; the node stays FP32"
            weights.notes.append(TensorNote(name, "kept FP32", note))
            return f"attribute {attr.name!r} {verdict.detail}"
    return None


def _data_source(drafts: dict[ir.Node, _Draft], value: ir.Value | None) -> ir.Value | None:
    """The value a low CLEAR chain (Reshape, Transpose...) moves into `value`: an FP32 value
    reshaped in low precision is still an FP32 neighbour (its Cast loses what FP32 kept)."""
    for _ in range(64):
        producer = value.producer() if value is not None else None
        d = drafts.get(producer) if producer is not None else None
        if producer is None or d is None or d.info.op_class != NodeClass.CLEAR:
            return value
        if d.precision != LOW or not producer.inputs or 0 not in d.info.low_inputs:
            return value
        value = producer.inputs[0]
    return value


def _pin_low_between_low(
    plan: PrecisionPlan, drafts: dict[ir.Node, _Draft], nodes: list[ir.Node]
) -> bool:
    """Force FP32 the low_between_low nodes placed LOW next to an FP32 neighbour; any pinned?"""
    pinned = False
    for node in nodes:
        d = drafts[node]
        if not d.info.low_between_low or d.forced or d.precision != LOW:
            continue
        data = _data_source(drafts, node.inputs[0]) if node.inputs else None
        out = node.outputs[0]
        fp32_side = (data is not None and plan.home(data) != LOW) or any(
            plan.need(use.node, use.idx) == FP32 for use in out.uses()
        )
        if out.is_graph_output() and plan.interface(out) == FP32:
            fp32_side = True
        if fp32_side:
            d.precision, d.forced = FP32, True
            d.notes.append(Reason(K.NEIGHBOUR, "", "FP32 next to an FP32 neighbour"))
            pinned = True
    return pinned


def _deny_reach(drafts: dict[ir.Node, _Draft], nodes: list[ir.Node]) -> None:
    """DENY spreads forward through INFER/CLEAR nodes (their inputs are unsafe values)."""
    stack = [n for n in nodes if drafts[n].info.op_class == NodeClass.DENY]
    while stack:
        node = stack.pop()
        for out in node.outputs:
            if not is_float_tensor(out):
                continue
            for use in out.uses():
                d = drafts.get(use.node)
                if d is None or d.forced or not d.info.candidate:
                    continue
                if (
                    d.info.op_class in (NodeClass.INFER, NodeClass.CLEAR)
                    and use.idx in d.info.low_inputs
                ):
                    d.precision, d.forced = FP32, True
                    detail = f"reads {out.name!r} from {node.op_type}"
                    d.notes.append(Reason(K.DENY_REACH, "follows deny", detail))
                    stack.append(use.node)


@dataclass
class _Cut:
    """What every min cut reads: the draft plan, its nodes and sizes; and where it records the
    boundaries it places LOW."""

    plan: PrecisionPlan
    drafts: dict[ir.Node, _Draft]
    shapes: ShapeBook
    low_boundaries: set[int]


def _min_cut(cut: _Cut, nodes: list[ir.Node], prefer_low: bool) -> None:
    """Place INFER/CLEAR nodes so the bytes moved per inference are minimal (an exact s-t min cut).

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
    plan, drafts, shapes = cut.plan, cut.drafts, cut.shapes
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
    values = _float_values_of(drafts, nodes)
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
        elements = sum(shapes.elements(x) for x in slots if x is not None and is_float_tensor(x))
        runs = shapes.runs(node.graph)  # a Loop/Scan body per trip, an If branch half
        net.add_edge(src, v, math.ceil(elements * (4 - low_bytes) * per_byte * runs))
    for v in crossing:  # in a tie a boundary goes low: the branches' low results pass as they are
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
        _add_value(plan, net, value, (vertex, crossing), src, sink, cast_weight(value))
    net.max_flow(src, sink)
    low_side = net.source_side(src)
    cut.low_boundaries.clear()
    cut.low_boundaries.update(i for i, v in enumerate(crossing) if v in low_side)
    for node in movable:
        d = drafts[node]
        low = vertex[node] in low_side
        if low != (d.precision == LOW):
            detail = ("low precision" if low else "FP32") + " moves fewer bytes"
            d.notes.append(Reason(K.PLACEMENT, "", detail))
        d.precision = LOW if low else FP32


def _add_value(
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


def _float_values_of(drafts: dict[ir.Node, _Draft], nodes: list[ir.Node]) -> list[ir.Value]:
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
