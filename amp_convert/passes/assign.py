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
import types
from collections.abc import Iterator
from dataclasses import dataclass, field

import onnx_ir as ir

from amp_convert.core import walk
from amp_convert.core.precision import NodeClass, constant_tensor, is_float_tensor
from amp_convert.core.qdq_rules import is_qdq, is_scale_slot, scale_refusal
from amp_convert.core.reasons import Reason, ReasonKind
from amp_convert.core.tensors import read, release
from amp_convert.core.weight_range import RangeStats, check_weight, float_attributes, weigh
from amp_convert.core.weight_scan import range_stats
from amp_convert.cost.traffic import ShapeBook
from amp_convert.options.convert import ConvertOptions
from amp_convert.placement.boundaries import find_boundaries
from amp_convert.placement.cut import CutGraph, Draft
from amp_convert.placement.plan import FP32, LOW, Classes, Placement, PrecisionPlan
from amp_convert.reports.conversion import TensorNote

log = logging.getLogger(__name__)

K = ReasonKind


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
    Control-flow boundaries are placed with the nodes (see placement/boundaries.py).
    """
    nodes = list(walk.all_nodes(model.graph))
    weights = _Weights()
    drafts = {node: Draft(classes[node]) for node in nodes}
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
            d.info.op_class == NodeClass.DENY and (level.obeys_deny_list or d.info.user)
        ):
            d.precision, d.forced = FP32, True
        elif level.lowers_everything or d.info.op_class == NodeClass.ALLOW:
            d.precision, d.forced = LOW, True
        else:
            d.precision = LOW if level.free_nodes_start_low else FP32
    cut = CutGraph(draft, drafts, shapes, low_boundaries)
    if level.places_free_nodes:
        _deny_reach(drafts, nodes)
        cut.place(nodes, prefer_low=level.free_nodes_start_low)
        # an FP32-accumulating reduction next to an FP32 neighbour keeps FP32 math with
        # explicit casts; pinning it can change the best placement of the rest, so re-cut
        while _pin_low_between_low(draft, drafts, nodes):
            cut.place(nodes, prefer_low=level.free_nodes_start_low)
    else:  # O3: every node is decided; only the control-flow boundaries are placed
        cut.place(nodes, prefer_low=True)
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
    plan: PrecisionPlan, drafts: dict[ir.Node, Draft], nodes: list[ir.Node], weights: _Weights
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
        for i, value, tensor in _float_weights(node, d):
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


def _float_weights(node: ir.Node, d: Draft) -> Iterator[tuple[int, ir.Value, ir.TensorProtocol]]:
    """(slot, value, tensor) of each constant float input a candidate node may read low."""
    if not d.info.candidate:
        return
    for i in sorted(d.info.low_inputs):
        value = node.inputs[i]
        tensor = constant_tensor(value) if value is not None else None
        if value is not None and tensor is not None and is_float_tensor(value):
            yield i, value, tensor


def _weight_stats(
    drafts: dict[ir.Node, Draft], nodes: list[ir.Node], low: ir.DataType
) -> dict[int, RangeStats]:
    """The range stats of every weight _range_limits may judge (by id of its value), read once
    and on every core (weight_scan); the verdicts are still made in _range_limits' order."""
    tensors: dict[int, ir.TensorProtocol] = {}
    for node in nodes:
        for i, value, tensor in _float_weights(node, drafts[node]):
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


def _whole_qdq_groups(drafts: dict[ir.Node, Draft], nodes: list[ir.Node]) -> None:
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


def _data_source(drafts: dict[ir.Node, Draft], value: ir.Value | None) -> ir.Value | None:
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
    plan: PrecisionPlan, drafts: dict[ir.Node, Draft], nodes: list[ir.Node]
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


def _deny_reach(drafts: dict[ir.Node, Draft], nodes: list[ir.Node]) -> None:
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
