"""Recognise LayerNorms written with the variance as ``E[x^2] - E[x]^2`` (flax/jax2tf, Keras 3's
``ops.moments``; tf2onnx writes the means as ``ReduceSum`` times ``1/n``):

    s1 = ReduceSum(x) * (1/n)   | ReduceMean(x)            (the mean)
    s2 = ReduceSum(x*x) * (1/n) | ReduceMean(x*x)          (the mean of squares)
    var = s2 - s1*s1, then optionally Max(var, 0) | Relu(var)
    each statistic optionally Reshape'd / Expand'ed back to the input's rank (keepdims=0 sums)
    inv = Reciprocal(Sqrt(var + eps)) | Pow(var + eps, -0.5), optionally * gamma (flax folds the
          scale into the inverse standard deviation)
    y = (x - mean) * inv  [+ beta]

A sum of squares minus a squared sum cancels catastrophically in low precision, which is why the
pieces are deny-listed; folded into LayerNormalization (stash_type=1) the statistics are FP32
and the graph gets one low node. `match_moments(node)` starts at the reduction of ``x`` and
returns a `NormMatch` (kind "layer"; its ``stats`` hold every statistics node, the scale Mul of
flax's inner gamma included, named by ``inner_scale``) or a `NoMatch` saying where it broke.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from amp_convert.core.neighbours import constant_scalar, is_op, only_reader, other_input, readers
from amp_convert.core.precision import constant_tensor
from amp_convert.passes._norm_match import NoMatch, NormMatch, closed

REDUCTIONS = ("ReduceSum", "ReduceMean")


def reduction_axes(node: ir.Node, opset: int) -> tuple[list[int], bool] | None:
    """(constant axes, keepdims) of a ReduceSum (axes an input from opset 13) or ReduceMean
    (from 18); None where the axes are not constant or absent (a reduction over everything)."""
    keep = node.attributes.get("keepdims")
    keepdims = keep is None or int(keep.value) != 0
    as_input = opset >= (13 if node.op_type == "ReduceSum" else 18)
    if as_input:
        if len(node.inputs) < 2 or node.inputs[1] is None:
            return None
        tensor = constant_tensor(node.inputs[1])
        if tensor is None:
            return None
        return [int(a) for a in np.asarray(tensor.numpy()).ravel()], keepdims
    attr = node.attributes.get("axes")
    return None if attr is None else ([int(a) for a in attr.value], keepdims)


def _mean_of(red: ir.Node, opset: int, axes: list[int], nodes: list[ir.Node]) -> ir.Value | None:
    """The mean a reduction computes: a ReduceMean's output, or a ReduceSum's times a constant
    (Mul by 1/n or Div by n); its nodes appended to `nodes`, the factor checked by the caller."""
    got = reduction_axes(red, opset)
    if got is None or sorted(got[0]) != sorted(axes):
        return None
    nodes.append(red)
    out = red.outputs[0]
    if red.op_type == "ReduceMean":
        return out
    scale = only_reader(out, "Mul", "Div")
    if scale is None:
        return None
    factor = constant_scalar(other_input(scale, out))
    if factor is None or (scale.op_type == "Div" and scale.inputs[0] is not out):
        return None
    nodes.append(scale)
    return scale.outputs[0]


def _scale_factor(node: ir.Node) -> float:
    """The factor a mean's scaling node applies (1 for a ReduceMean)."""
    if node.op_type == "ReduceMean":
        return 1.0
    first, second = node.inputs[0], node.inputs[1]
    value = (
        constant_scalar(second)
        if node.op_type == "Div"
        else (constant_scalar(second) or constant_scalar(first))
    )
    assert value is not None
    return 1.0 / value if node.op_type == "Div" else value


def _broadcast(value: ir.Value, nodes: list[ir.Node]) -> ir.Value:
    """Follow an optional Reshape then Expand (keepdims restored for the broadcast)."""
    for op in ("Reshape", "Expand"):
        nxt = only_reader(value, op)
        if nxt is not None and nxt.inputs[0] is value:
            nodes.append(nxt)
            value = nxt.outputs[0]
    return value


def _square(node: ir.Node, value: ir.Value) -> bool:
    if is_op(node, "Pow"):
        return node.inputs[0] is value and constant_scalar(node.inputs[1]) == 2.0
    return is_op(node, "Mul") and node.inputs[0] is value and node.inputs[1] is value


def match_moments(red1: ir.Node, opset: int, sizes: list[int] | None) -> NormMatch | NoMatch:
    """The E[x^2] - E[x]^2 LayerNorm whose mean reduction of x is `red1`. `sizes`: the static
    sizes of x along the reduced axes where known (to check ReduceSum's 1/n); without them the
    check is left to the fold, which knows the sizes from the weights (`NormMatch.notes` holds
    the factor as "mean_factor=...")."""
    name = red1.name or ""
    if not is_op(red1, *REDUCTIONS) or red1.inputs[0] is None:
        return NoMatch(name, "not a ReduceSum/ReduceMean of a value")
    got = reduction_axes(red1, opset)
    if got is None:
        return NoMatch(name, "axes not constant")
    axes, _ = got
    x = red1.inputs[0]
    stats: list[ir.Node] = []
    mean = _mean_of(red1, opset, axes, stats)
    if mean is None:
        return NoMatch(name, "the sum is not scaled to a mean by a constant")
    factor = _scale_factor(stats[-1])
    squares = [n for n in readers(x) if _square(n, x)]
    if len(squares) != 1:
        return NoMatch(name, "x is not squared (Mul x*x or Pow 2) once")
    sq = squares[0]
    red2 = only_reader(sq.outputs[0], red1.op_type)
    if red2 is None:
        return NoMatch(sq.name or "", "the square is not only reduced like x")
    stats.append(sq)
    mean2 = _mean_of(red2, opset, axes, stats)
    if mean2 is None or not math.isclose(_scale_factor(stats[-1]), factor, rel_tol=1e-6):
        return NoMatch(red2.name or "", "the mean of squares is not scaled like the mean")
    return _variance(red1, x, axes, mean, mean2, factor, stats, sizes)


def _variance(
    red1: ir.Node,
    x: ir.Value,
    axes: list[int],
    mean: ir.Value,
    mean2: ir.Value,
    factor: float,
    stats: list[ir.Node],
    sizes: list[int] | None,
) -> NormMatch | NoMatch:
    name = red1.name or ""
    if sizes is not None and not math.isclose(factor * math.prod(sizes), 1.0, rel_tol=1e-5):
        return NoMatch(name, f"the mean's factor {factor:.6g} is not 1/{math.prod(sizes)}")
    users = readers(mean)
    m2 = next((n for n in users if _square(n, mean)), None)
    sub = only_reader(mean2, "Sub")
    if (
        m2 is None
        or sub is None
        or sub.inputs[0] is not mean2
        or sub.inputs[1] is not m2.outputs[0]
    ):
        return NoMatch(name, "the variance is not E[x^2] - E[x]^2")
    stats += [m2, sub]
    var = sub.outputs[0]
    clamp = only_reader(var, "Max", "Relu")
    if clamp is not None and (
        clamp.op_type == "Relu" or constant_scalar(other_input(clamp, var)) == 0.0
    ):
        stats.append(clamp)
        var = clamp.outputs[0]
    var = _broadcast(var, stats)
    add = only_reader(var, "Add")
    eps = constant_scalar(other_input(add, var)) if add is not None else None
    if add is None or eps is None or not 0.0 <= eps < 1.0:
        return NoMatch(name, "the variance is not followed by Add of a constant epsilon")
    stats.append(add)
    inv = _inverse_std(add.outputs[0], stats)
    if inv is None:
        return NoMatch(add.name or "", "var + eps is not turned into 1/std")
    inner = only_reader(inv, "Mul")
    scale: ir.Value | None = None
    if inner is not None and constant_tensor(other_input(inner, inv)) is not None:  # type: ignore[arg-type]
        scale = other_input(inner, inv)
        stats.append(inner)
        inv = inner.outputs[0]
    others = [n for n in users if n is not m2]
    mean_nodes: list[ir.Node] = []
    centre: ir.Value | None = None
    if len(others) == 1 and is_op(others[0], "Reshape", "Expand") and others[0].inputs[0] is mean:
        mean_nodes.append(others[0])
        centre = _broadcast(others[0].outputs[0], mean_nodes)
    elif len(others) == 1:
        centre = mean
    sub_x = only_reader(centre, "Sub") if centre is not None else None
    if sub_x is None or sub_x.inputs[0] is not x or sub_x.inputs[1] is not centre:
        return NoMatch(name, "the mean is not subtracted from x once")
    stats += mean_nodes
    norm = only_reader(sub_x.outputs[0], "Mul")
    if norm is None or other_input(norm, sub_x.outputs[0]) is not inv:
        return NoMatch(sub_x.name or "", "the centred value is not scaled by 1/std")
    match = NormMatch("layer", x, axes, eps, [red1, *stats], [sub_x, norm], norm.outputs[0])
    match.inner_scale = scale
    beta = only_reader(norm.outputs[0], "Add")
    if beta is not None and constant_tensor(other_input(beta, norm.outputs[0])) is not None:  # type: ignore[arg-type]
        match.beta = beta
    match.notes.append(f"mean_factor={factor!r}")
    return match


def _inverse_std(ve: ir.Value, stats: list[ir.Node]) -> ir.Value | None:
    """Reciprocal(Sqrt(ve)) | Div(1, Sqrt(ve)) | Pow(ve, -0.5): its output, nodes to `stats`."""
    first = only_reader(ve, "Sqrt", "Pow")
    if first is None:
        return None
    if first.op_type == "Pow":
        if constant_scalar(first.inputs[1]) != -0.5:
            return None
        stats.append(first)
        return first.outputs[0]
    s = first.outputs[0]
    inv = only_reader(s, "Reciprocal", "Div")
    if inv is None:
        return None
    if inv.op_type == "Div" and (inv.inputs[1] is not s or constant_scalar(inv.inputs[0]) != 1.0):
        return None
    stats += [first, inv]
    return inv.outputs[0]


def find_moments(nodes: list[ir.Node], opset: int, taken: set[int]) -> list[NormMatch]:
    """Every E[x^2] - E[x]^2 LayerNorm among `nodes` that shares no node with `taken`."""
    found: list[NormMatch] = []
    for node in nodes:
        if not is_op(node, *REDUCTIONS) or id(node) in taken:
            continue
        result = match_moments(node, opset, None)
        if isinstance(result, NoMatch):
            continue
        result_closed = closed(result)
        if isinstance(result_closed, NoMatch) or any(id(n) in taken for n in result.nodes):
            continue
        taken.update(id(n) for n in result.nodes)
        found.append(result)
    return found
