"""Recognise hand-written LayerNorm and RMSNorm subgraphs (exported decompositions).

Exporters write a LayerNorm they cannot (or do not) emit as one op as a chain:

    mean = ReduceMean(x)            d = Sub(x, mean)           sq = Pow(d, 2) | Mul(d, d)
    var  = ReduceMean(sq)           ve = Add(var, eps)
    inv-std: Sqrt(ve) then Div(d, s) | Mul(d, Reciprocal(s)) | Mul(d, Div(1, s));  or
             Mul(d, Pow(ve, -0.5))
    optional affine: Mul(y, gamma), Add(y, beta)

(TorchScript below opset 17, paddle2onnx, tf2onnx / jax2tf with Rsqrt written as Sqrt +
Reciprocal). An RMSNorm is the same without the mean: ``sq`` squares ``x`` itself and the
normalisation reads ``x``. `match_norm(node)` starts at the ReduceMean that computes the mean (or,
for RMSNorm, the mean of squares) and returns a `NormMatch`, or a `NoMatch` saying which node
broke the pattern and why (like onnxscript's MatchResult.fail), so a near miss is explainable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from amp_convert.core.neighbours import constant_scalar, is_op, only_reader, other_input, readers
from amp_convert.core.precision import constant_tensor


@dataclass(frozen=True)
class NoMatch:
    """Why a candidate is not a hand-written norm: the node where the pattern broke, and why."""

    node: str
    reason: str


@dataclass
class NormMatch:
    """One hand-written LayerNorm (``kind == "layer"``) or RMSNorm (``"rms"``)."""

    kind: str
    x: ir.Value
    axes: list[int]
    epsilon: float
    #: nodes that compute statistics (reduced size, or full size only to feed a reduction)
    stats: list[ir.Node]
    #: nodes of the normalised data path: the centring Sub (LayerNorm), the normalising Div/Mul
    data: list[ir.Node]
    normalised: ir.Value  # (x - mean) * inv_std, before the affine part
    gamma: ir.Node | None = None  # Mul by a constant scale
    beta: ir.Node | None = None  # Add of a constant bias
    notes: list[str] = field(default_factory=list)
    #: the constant scale multiplied into 1/std (flax's spelling; its Mul is in ``stats``)
    inner_scale: ir.Value | None = None

    @property
    def output(self) -> ir.Value:
        last = self.beta or self.gamma
        return last.outputs[0] if last is not None else self.normalised

    @property
    def nodes(self) -> list[ir.Node]:
        extra = [n for n in (self.gamma, self.beta) if n is not None]
        return [*self.stats, *self.data, *extra]


def reduce_axes(node: ir.Node, opset: int) -> list[int] | None:
    """A ReduceMean's constant axes (attribute below opset 18, input from 18), keepdims=1 only."""
    keep = node.attributes.get("keepdims")
    if keep is not None and int(keep.value) == 0:
        return None
    if opset >= 18:
        if len(node.inputs) < 2 or node.inputs[1] is None:
            return None
        tensor = constant_tensor(node.inputs[1])
        return None if tensor is None else [int(a) for a in np.asarray(tensor.numpy()).ravel()]
    attr = node.attributes.get("axes")
    return None if attr is None else [int(a) for a in attr.value]


def _square_of(node: ir.Node, value: ir.Value) -> bool:
    """Pow(value, 2) or Mul(value, value)."""
    if is_op(node, "Pow"):
        return node.inputs[0] is value and constant_scalar(node.inputs[1]) == 2.0
    return is_op(node, "Mul") and node.inputs[0] is value and node.inputs[1] is value


def _inv_std(ve: ir.Value, centred: ir.Value) -> tuple[list[ir.Node], ir.Node] | NoMatch:
    """From var + eps to the node that normalises `centred`: (stats nodes, normalising node)."""
    users = readers(ve)
    if len(users) != 1:
        return NoMatch(ve.name or "", "var + eps has several readers")
    first = users[0]
    if is_op(first, "Pow") and constant_scalar(first.inputs[1]) == -0.5:
        norm = only_reader(first.outputs[0], "Mul")
        if norm is None or other_input(norm, first.outputs[0]) is not centred:
            return NoMatch(
                first.name or "", "Pow(var + eps, -0.5) does not scale the centred value"
            )
        return [first], norm
    if not is_op(first, "Sqrt"):
        return NoMatch(first.name or "", f"{first.op_type} after var + eps (want Sqrt or Pow -0.5)")
    s = first.outputs[0]
    users = readers(s)
    if len(users) != 1:
        return NoMatch(first.name or "", "the standard deviation has several readers")
    nxt = users[0]
    if is_op(nxt, "Div") and nxt.inputs[0] is centred and nxt.inputs[1] is s:
        return [first], nxt
    inv: ir.Node | None = None
    one_over = is_op(nxt, "Div") and nxt.inputs[1] is s and constant_scalar(nxt.inputs[0]) == 1.0
    if is_op(nxt, "Reciprocal") or one_over:
        inv = nxt
    if inv is None:
        return NoMatch(nxt.name or "", f"{nxt.op_type} after Sqrt does not normalise")
    norm = only_reader(inv.outputs[0], "Mul")
    if norm is None or other_input(norm, inv.outputs[0]) is not centred:
        return NoMatch(
            inv.name or "", "1/std does not scale the centred value (TF batch-norm form)"
        )
    return [first, inv], norm


def _statistics(
    sq_node: ir.Node, opset: int, axes: list[int], centred: ir.Value
) -> tuple[ir.Node, ir.Node, float, list[ir.Node], ir.Node] | NoMatch:
    """From the square to the node that normalises `centred`, the part LayerNorm and RMSNorm
    share: (reduce node, add-eps node, eps, inverse-std nodes, normalising node)."""
    var = _variance(sq_node, opset, axes)
    if isinstance(var, NoMatch):
        return var
    red, add, eps = var
    tail = _inv_std(add.outputs[0], centred)
    if isinstance(tail, NoMatch):
        return tail
    inv_nodes, norm = tail
    return red, add, eps, inv_nodes, norm


def _variance(
    sq_node: ir.Node, opset: int, axes: list[int]
) -> tuple[ir.Node, ir.Node, float] | NoMatch:
    """ReduceMean(sq) -> Add(eps): (reduce node, add node, eps)."""
    red = only_reader(sq_node.outputs[0], "ReduceMean")
    if red is None:
        return NoMatch(sq_node.name or "", "the square is not only read by a ReduceMean")
    if reduce_axes(red, opset) != axes:
        return NoMatch(red.name or "", "the variance reduces other axes than the mean")
    add = only_reader(red.outputs[0], "Add")
    eps = constant_scalar(other_input(add, red.outputs[0])) if add is not None else None
    if add is None or eps is None or not 0.0 <= eps < 1.0:
        return NoMatch(red.name or "", "the variance is not followed by Add of a constant epsilon")
    return red, add, eps


def _affine(match: NormMatch) -> None:
    """Absorb a following Mul by a constant and Add of a constant (the affine part)."""

    def constant_operand(node: ir.Node | None, value: ir.Value) -> bool:
        other = other_input(node, value) if node is not None else None
        return other is not None and constant_tensor(other) is not None

    y = match.normalised
    mul = only_reader(y, "Mul")
    if mul is not None and constant_operand(mul, y):
        match.gamma = mul
        y = mul.outputs[0]
    add = only_reader(y, "Add")
    if add is not None and constant_operand(add, y):
        match.beta = add


def match_norm(mean_node: ir.Node, opset: int) -> NormMatch | NoMatch:
    """The hand-written LayerNorm or RMSNorm whose first ReduceMean is `mean_node`."""
    name = mean_node.name or ""
    if not is_op(mean_node, "ReduceMean"):
        return NoMatch(name, "not a ReduceMean")
    axes = reduce_axes(mean_node, opset)
    if axes is None:
        return NoMatch(name, "axes not constant, or keepdims=0")
    src = mean_node.inputs[0]
    if src is None:
        return NoMatch(name, "no input")
    producer = src.producer()
    if producer is not None and _square_of(producer, producer.inputs[0]):  # type: ignore[arg-type]
        result = _match_rms(mean_node, producer, axes, opset)
    else:
        result = _match_layer(mean_node, src, axes, opset)
    return result if isinstance(result, NoMatch) else closed(result)


def closed(match: NormMatch) -> NormMatch | NoMatch:
    """Only the norm's output may leave it: an intermediate read elsewhere (or a graph output)
    would vanish with a fold."""
    inside = {id(n) for n in match.nodes}
    for node in match.nodes:
        for value in node.outputs:
            if value is match.output:
                continue
            if value.is_graph_output() or any(id(u.node) not in inside for u in value.uses()):
                return NoMatch(node.name or "", f"{value.name!r} is also used outside the norm")
    return match


def _match_layer(
    mean_node: ir.Node, x: ir.Value, axes: list[int], opset: int
) -> NormMatch | NoMatch:
    mean = mean_node.outputs[0]
    subs = [
        n for n in readers(mean) if is_op(n, "Sub") and n.inputs[0] is x and n.inputs[1] is mean
    ]
    if len(subs) != 1 or len(readers(mean)) != 1:
        return NoMatch(mean_node.name or "", "the mean is not only read by one Sub(x, mean)")
    sub = subs[0]
    d = sub.outputs[0]
    squares = [n for n in readers(d) if _square_of(n, d)]
    if len(squares) != 1:
        return NoMatch(sub.name or "", "the centred value is not squared (Pow 2 or Mul d*d) once")
    found = _statistics(squares[0], opset, axes, d)
    if isinstance(found, NoMatch):
        return found
    red, add, eps, inv_nodes, norm = found
    others = [n for n in readers(d) if n is not squares[0] and n is not norm]
    if others:
        return NoMatch(sub.name or "", f"the centred value has other readers ({others[0].op_type})")
    stats = [mean_node, squares[0], red, add, *inv_nodes]
    match = NormMatch("layer", x, axes, eps, stats, [sub, norm], norm.outputs[0])
    _affine(match)
    return match


def _match_rms(red: ir.Node, sq: ir.Node, axes: list[int], opset: int) -> NormMatch | NoMatch:
    x = sq.inputs[0]
    assert x is not None
    if len(readers(sq.outputs[0])) != 1:
        return NoMatch(sq.name or "", "the square has other readers")
    found = _statistics(sq, opset, axes, x)
    if isinstance(found, NoMatch):
        return found
    red, add, eps, inv_nodes, norm = found
    match = NormMatch("rms", x, axes, eps, [sq, red, add, *inv_nodes], [norm], norm.outputs[0])
    _affine(match)
    return match


def find_norms(graph_nodes: list[ir.Node], opset: int) -> tuple[list[NormMatch], list[NoMatch]]:
    """Every hand-written norm among `graph_nodes`, and why each other ReduceMean is not one."""
    found: list[NormMatch] = []
    misses: list[NoMatch] = []
    taken: set[int] = set()
    for node in graph_nodes:
        if not is_op(node, "ReduceMean") or id(node) in taken:
            continue
        result = match_norm(node, opset)
        if isinstance(result, NoMatch):
            misses.append(result)
            continue
        if any(id(n) in taken for n in result.nodes):
            continue
        taken.update(id(n) for n in result.nodes)
        found.append(result)
    # a variance ReduceMean of a found norm is not a separate miss
    misses = [m for m in misses if not any(n.name == m.node for f in found for n in f.nodes)]
    return found, misses
