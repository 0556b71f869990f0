"""Symbolic shape rules for layers: MatMul/Gemm, reductions, Split, Conv/Pool, Pad, Resize...

The data-movement and arithmetic rules live in shape_rules; these are registered in the same
table (importing this module registers them).
"""

from __future__ import annotations

import onnx_ir as ir

from amp_convert.cost.rules import UNKNOWN, Fact, axis_of, broadcast, int_attr, ints_attr, rule
from amp_convert.cost.symdim import Dim, add, ceildiv, floordiv, mul, sub


@rule("MatMul", "MatMulInteger", "FusedMatMul")
def _matmul(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    a, b = facts[0].shape, facts[1].shape
    if a is None or b is None:
        return [UNKNOWN]
    if len(a) == 1 and len(b) == 1:
        return [Fact(())]
    if len(b) == 1:
        return [Fact(a[:-1])]
    if len(a) == 1:
        return [Fact((*b[:-2], b[-1]))]
    batch = broadcast([a[:-2], b[:-2]])
    return [Fact((*(batch or ()), a[-2], b[-1]))]


@rule("Gemm")
def _gemm(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    a, b = facts[0].shape, facts[1].shape
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [UNKNOWN]
    m = a[1] if int_attr(node, "transA", 0) else a[0]
    n = b[0] if int_attr(node, "transB", 0) else b[1]
    return [Fact((m, n))]


def _reduce_axes(node: ir.Node, facts: list[Fact], rank: int) -> list[int] | None:
    if len(facts) > 1 and facts[1].shape is not None:
        d = facts[1].data
        if d is None or not all(isinstance(a, int) for a in d):
            return None
        return [axis_of(a, rank) for a in d]  # type: ignore[arg-type]
    axes = ints_attr(node, "axes")
    if axes is None:
        return [] if int_attr(node, "noop_with_empty_axes", 0) else list(range(rank))
    return [axis_of(a, rank) for a in axes]


@rule(
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ArgMax",
    "ArgMin",
)
def _reduce(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s = facts[0].shape
    if s is None:
        return [UNKNOWN]
    if node.op_type in ("ArgMax", "ArgMin"):
        axes: list[int] | None = [axis_of(int_attr(node, "axis", 0), len(s))]
    else:
        axes = _reduce_axes(node, facts, len(s))
    if axes is None:
        return [UNKNOWN]
    keep = int_attr(node, "keepdims", 1)
    out = (
        [1 if i in axes else d for i, d in enumerate(s)]
        if keep
        else [d for i, d in enumerate(s) if i not in axes]
    )
    return [Fact(tuple(out))]


@rule("Split")
def _split(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s = facts[0].shape
    n = len(node.outputs)
    if s is None:
        return [UNKNOWN] * n
    axis = axis_of(int_attr(node, "axis", 0), len(s))
    sizes = facts[1].data if len(facts) > 1 and facts[1].shape is not None else None
    if sizes is None:
        sizes_attr = ints_attr(node, "split")
        sizes = tuple(sizes_attr) if sizes_attr else None
    if sizes is None:
        part = ceildiv(s[axis], n)
        sizes = (part,) * (n - 1) + (sub(s[axis], mul(part, n - 1)),)
    return [Fact((*s[:axis], d, *s[axis + 1 :])) for d in sizes]


@rule("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "ConvInteger", "NhwcConv")
def _conv(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    x = facts[0].shape
    if x is None or len(x) < 3:
        return [UNKNOWN] * len(node.outputs)
    spatial = len(x) - 2
    w = facts[1].shape if len(facts) > 1 and node.op_type.startswith("Conv") else None
    kernel = ints_attr(node, "kernel_shape")
    if kernel is None and w is not None and all(isinstance(k, int) for k in w[2:]):
        kernel = [k for k in w[2:] if isinstance(k, int)]
    if kernel is None:
        return [UNKNOWN] * len(node.outputs)
    strides = ints_attr(node, "strides") or [1] * spatial
    dil = ints_attr(node, "dilations") or [1] * spatial
    pads = ints_attr(node, "pads") or [0] * (2 * spatial)
    auto = node.attributes.get("auto_pad")
    auto_pad = auto.value if auto is not None else "NOTSET"
    ceil = int_attr(node, "ceil_mode", 0)
    out_sp: list[Dim] = []
    for i in range(spatial):
        n, k = x[2 + i], (kernel[i] - 1) * dil[i] + 1
        if node.op_type == "ConvTranspose":
            op = ints_attr(node, "output_padding") or [0] * spatial
            d = add(mul(sub(n, 1), strides[i]), k + op[i] - pads[i] - pads[i + spatial])
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            d = ceildiv(n, strides[i])
        else:
            span = sub(add(n, pads[i] + pads[i + spatial]), k)
            d = add(ceildiv(span, strides[i]) if ceil else floordiv(span, strides[i]), 1)
        out_sp.append(d)
    if node.op_type.startswith("Conv") and w is not None:
        group = int_attr(node, "group", 1)
        ch = mul(w[1], group) if node.op_type == "ConvTranspose" else w[0]
    else:
        ch = x[1]
    return [Fact((x[0], ch, *out_sp))] * len(node.outputs)


@rule("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s = facts[0].shape
    return [Fact((*s[:2], *(1,) * (len(s) - 2)) if s is not None else None)]


@rule("Pad")
def _pad(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s = facts[0].shape
    pads = facts[1].data if len(facts) > 1 else ints_attr(node, "pads")
    if s is None or pads is None:
        return [UNKNOWN]
    rank = len(s)
    axes = list(range(rank))
    if len(facts) > 3 and facts[3].data is not None:
        axes = [axis_of(a, rank) for a in facts[3].data if isinstance(a, int)]
    out = list(s)
    half = len(pads) // 2
    for j, a in enumerate(axes[:half]):
        out[a] = add(add(out[a], pads[j]), pads[j + half])
    return [Fact(tuple(out))]


@rule("Resize", "Upsample")
def _resize(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s = facts[0].shape
    if s is None:
        return [UNKNOWN]
    sizes = facts[3].data if len(facts) > 3 and facts[3].shape is not None else None
    if sizes is not None and len(sizes) == len(s):
        return [Fact(tuple(sizes))]
    scales_fact = facts[2] if len(facts) > 2 else facts[1] if len(facts) > 1 else None
    scales = scales_fact.data if scales_fact is not None else None
    if scales is None or len(scales) != len(s):
        return [Fact((*s[:2], *(None,) * (len(s) - 2)))]
    return [Fact(tuple(mul(d, f) for d, f in zip(s, scales, strict=True)))]


@rule("Einsum")
def _einsum(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    eq = node.attributes.get("equation")
    if eq is None or "->" not in eq.value or "..." in eq.value:
        return [UNKNOWN]
    lhs, rhs = eq.value.replace(" ", "").split("->")
    sizes: dict[str, Dim] = {}
    for term, f in zip(lhs.split(","), facts, strict=False):
        if f.shape is None or len(f.shape) != len(term):
            return [UNKNOWN]
        for c, d in zip(term, f.shape, strict=True):
            if sizes.get(c) in (None, 1):
                sizes[c] = d
    return [Fact(tuple(sizes.get(c) for c in rhs))]


@rule("TopK")
def _topk(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s, k = facts[0].shape, facts[1].data if len(facts) > 1 else None
    if s is None:
        return [UNKNOWN, UNKNOWN]
    axis = axis_of(int_attr(node, "axis", -1), len(s))
    kk = k[0] if k else ints_attr(node, "k", None)
    out = list(s)
    out[axis] = kk if not isinstance(kk, list) else None
    return [Fact(tuple(out))] * 2


@rule("OneHot")
def _one_hot(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s, depth = facts[0].shape, facts[1].data
    if s is None:
        return [UNKNOWN]
    axis = int_attr(node, "axis", -1)
    out = list(s)
    d = depth[0] if depth else None
    out.insert(axis + len(s) + 1 if axis < 0 else axis, d)
    return [Fact(tuple(out))]


@rule("DepthToSpace", "SpaceToDepth")
def _depth_space(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s = facts[0].shape
    b = int_attr(node, "blocksize", 1)
    if s is None or len(s) != 4:
        return [UNKNOWN]
    n, c, h, w = s
    if node.op_type == "DepthToSpace":
        return [Fact((n, floordiv(c, b * b), mul(h, b), mul(w, b)))]
    return [Fact((n, mul(c, b * b), floordiv(h, b), floordiv(w, b)))]
