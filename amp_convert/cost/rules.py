"""Symbolic shape rules per op: the output shapes (and small integer data) of one node.

These complete ONNX's own inference where it loses a dim: data-dependent Reshape targets built
from Shape/Gather/Concat arithmetic, Concat of two symbolic lengths (`seq+past`), Slice/Range
ends from shapes, Where/Equal on shape vectors (Paddle, dynamo). A rule sees the inputs' shapes
(a tuple of dims, None when unknown) and, for small integer tensors, their values; it returns
one Fact per output, or None where it cannot say.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import onnx_ir as ir

from amp_convert.cost.symdim import Dim, add, ceildiv, floordiv, mul, prod, sub

Shape = tuple[Dim, ...]


@dataclass(frozen=True)
class Fact:
    """What is known of one value: its shape and, for a small integer tensor, its elements."""

    shape: Shape | None
    data: tuple[Dim, ...] | None = None


UNKNOWN = Fact(None)
Rule = Callable[[ir.Node, list[Fact]], list[Fact] | None]
RULES: dict[str, Rule] = {}


def rule(*ops: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn

    return register


def ints_attr(node: ir.Node, name: str, default: Sequence[int] | None = None) -> list[int] | None:
    attr = node.attributes.get(name)
    if attr is not None:
        return list(attr.value)
    return list(default) if default is not None else None


def int_attr(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return int(attr.value) if attr is not None else default


def axis_of(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def broadcast(shapes: Sequence[Shape | None]) -> Shape | None:
    """Numpy broadcasting of symbolic shapes; a symbolic dim wins over 1."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes if s is not None), default=0)
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if s is not None and len(s) - rank + i >= 0]
        big = [d for d in dims if d != 1]
        if not big:
            out.append(1)
        else:
            known = [d for d in big if d is not None]
            ints = [d for d in known if isinstance(d, int)]
            out.append(ints[0] if ints else (known[0] if known else None))
    return tuple(out)


def _elementwise(values: Callable[[Dim, Dim], Dim] | None) -> Rule:
    def apply(node: ir.Node, facts: list[Fact]) -> list[Fact]:
        shape = broadcast([f.shape for f in facts])
        data = None
        if values is not None and len(facts) == 2 and all(f.data is not None for f in facts):
            a, b = facts[0].data, facts[1].data
            assert a is not None and b is not None
            if len(a) == len(b) or len(a) == 1 or len(b) == 1:
                n = max(len(a), len(b))
                data = tuple(values(a[i % len(a)], b[i % len(b)]) for i in range(n))
        return [Fact(shape, data)]

    return apply


rule("Add")(_elementwise(add))
rule("Sub")(_elementwise(sub))
rule("Mul")(_elementwise(mul))
rule("Div")(_elementwise(floordiv))
rule(
    "Pow",
    "Max",
    "Min",
    "Mod",
    "PRelu",
    "And",
    "Or",
    "Xor",
    "Greater",
    "Less",
    "GreaterOrEqual",
    "LessOrEqual",
    "BitShift",
    "Sum",
    "Mean",
)(_elementwise(None))


def _eq(a: Dim, b: Dim) -> Dim:
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return int(a == b)
    return int(a == b) if a == b else None


rule("Equal")(_elementwise(_eq))


@rule(
    "Relu",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Exp",
    "Log",
    "Sqrt",
    "Neg",
    "Abs",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Not",
    "Identity",
    "Softmax",
    "LogSoftmax",
    "Gelu",
    "LeakyRelu",
    "Elu",
    "Selu",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Clip",
    "Sin",
    "Cos",
    "IsNaN",
    "IsInf",
    "Trilu",
    "CumSum",
    "LpNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "GroupNormalization",
    "BatchNormalization",
    "Dropout",
    "SimplifiedLayerNormalization",
    "SkipLayerNormalization",
    "Mish",
    "Celu",
    "ThresholdedRelu",
    "QuickGelu",
    "FastGelu",
    "BiasGelu",
    "MeanVarianceNormalization",
    "Shrink",
    "Hardmax",
    "RotaryEmbedding",
)
def _same(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    f = facts[0] if facts else UNKNOWN
    return [Fact(f.shape, f.data if node.op_type in ("Identity", "Neg", "Abs") else None)] * max(
        1, len(node.outputs)
    )


@rule("Cast", "CastLike")
def _cast(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    return [facts[0]]


@rule("Where")
def _where(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    shape = broadcast([f.shape for f in facts])
    c, x, y = facts
    data = None
    if c.data is not None and x.data is not None and y.data is not None:
        n = max(len(c.data), len(x.data), len(y.data))
        out = []
        for i in range(n):
            cond = c.data[i % len(c.data)]
            if not isinstance(cond, int):
                break
            out.append((x.data if cond else y.data)[i % len(x.data if cond else y.data)])
        else:
            data = tuple(out)
    return [Fact(shape, data)]


@rule("Shape")
def _shape(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s = facts[0].shape
    if s is None:
        return [UNKNOWN]
    rank = len(s)
    start = _clamp(int_attr(node, "start", 0), rank)
    end = _clamp(int_attr(node, "end", rank), rank)
    data = tuple(s[start:end])
    return [Fact((len(data),), data)]


def _clamp(i: int, n: int) -> int:
    i = i + n if i < 0 else i
    return min(max(i, 0), n)


@rule("Size")
def _size(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s = facts[0].shape
    return [Fact((), (prod(s),) if s is not None else None)]


@rule("Constant")
def _constant(node: ir.Node, facts: list[Fact]) -> list[Fact] | None:
    return None  # the Constant's own tensor answers (see shapes.py)


@rule("ConstantOfShape")
def _constant_of_shape(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    d = facts[0].data
    if d is None:
        return [UNKNOWN]
    attr = node.attributes.get("value")
    fill: Dim = None
    if attr is not None and attr.value.dtype.is_integer() and attr.value.size == 1:
        fill = int(attr.value.numpy().reshape(-1)[0])
    data = None
    if fill is not None and len(d) == 1 and isinstance(d[0], int) and d[0] <= 64:
        data = (fill,) * d[0]
    return [Fact(tuple(d), data)]


@rule("Gather")
def _gather(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    x, idx = facts[0], facts[1]
    if x.shape is None or idx.shape is None:
        return [UNKNOWN]
    axis = axis_of(int_attr(node, "axis", 0), len(x.shape))
    shape = (*x.shape[:axis], *idx.shape, *x.shape[axis + 1 :])
    data = None
    if x.data is not None and idx.data is not None and len(x.shape) == 1:
        n = len(x.data)
        if all(isinstance(i, int) and -n <= i < n for i in idx.data):
            data = tuple(x.data[i] for i in idx.data)  # type: ignore[index]
    return [Fact(shape, data)]


@rule("Concat")
def _concat(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    shapes = [f.shape for f in facts]
    if any(s is None for s in shapes) or not shapes:
        return [UNKNOWN]
    first = shapes[0]
    assert first is not None
    axis = axis_of(int_attr(node, "axis", 0), len(first))
    total: Dim = 0
    for s in shapes:
        assert s is not None
        total = add(total, s[axis])
    out = list(first)
    out[axis] = total
    for i in range(len(out)):  # another input may know a dim the first does not
        if i != axis and out[i] is None:
            out[i] = next((s[i] for s in shapes if s is not None and s[i] is not None), None)
    data = None
    if all(f.data is not None for f in facts):
        data = tuple(d for f in facts for d in f.data or ())
    return [Fact(tuple(out), data)]


@rule("Unsqueeze", "Squeeze")
def _squeeze(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    x = facts[0]
    axes: list[int] | None
    if len(facts) > 1:
        d = facts[1].data
        axes = [a for a in d if isinstance(a, int)] if d is not None else None
        if axes is not None and len(axes) != len(d or ()):
            axes = None
    else:
        axes = ints_attr(node, "axes")
    if x.shape is None:
        return [UNKNOWN]
    shape = list(x.shape)
    if node.op_type == "Unsqueeze":
        if axes is None:
            return [UNKNOWN]
        rank = len(shape) + len(axes)
        for a in sorted(axis_of(a, rank) for a in axes):
            shape.insert(a, 1)
    elif axes is None:
        shape = [d for d in shape if d != 1]
    else:
        drop = {axis_of(a, len(shape)) for a in axes}
        shape = [d for i, d in enumerate(shape) if i not in drop]
    data = x.data if x.data is not None and len(shape) <= 1 else None
    return [Fact(tuple(shape), data)]


@rule("Reshape")
def _reshape(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    x, target = facts[0], facts[1].data
    if target is None:
        n = facts[1].shape
        rank = n[0] if n is not None and len(n) == 1 else None
        return [Fact((None,) * rank if isinstance(rank, int) else None)]
    allowzero = int_attr(node, "allowzero", 0)
    out: list[Dim] = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero and x.shape is not None and i < len(x.shape):
            out.append(x.shape[i])
        else:
            out.append(d)
    if -1 in [d for d in out if isinstance(d, int)]:
        i = next(j for j, d in enumerate(out) if isinstance(d, int) and d == -1)
        known = prod([d for j, d in enumerate(out) if j != i])
        out[i] = floordiv(prod(list(x.shape)), known) if x.shape is not None else None
    data = x.data if x.data is not None and len(out) <= 1 else None
    return [Fact(tuple(out), data)]


@rule("Flatten")
def _flatten(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s = facts[0].shape
    if s is None:
        return [UNKNOWN]
    axis = axis_of(int_attr(node, "axis", 1), len(s))
    return [Fact((prod(list(s[:axis])), prod(list(s[axis:]))))]


@rule("Expand")
def _expand(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    target = facts[1].data
    if target is None:
        return [UNKNOWN]
    return [Fact(broadcast([facts[0].shape, tuple(target)]))]


@rule("Tile")
def _tile(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s, reps = facts[0].shape, facts[1].data
    if s is None or reps is None or len(reps) != len(s):
        return [UNKNOWN]
    return [Fact(tuple(mul(a, b) for a, b in zip(s, reps, strict=True)))]


@rule("Transpose")
def _transpose(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    s = facts[0].shape
    if s is None:
        return [UNKNOWN]
    perm = ints_attr(node, "perm") or list(reversed(range(len(s))))
    return [Fact(tuple(s[p] for p in perm))]


@rule("Slice")
def _slice(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    x = facts[0]
    if x.shape is None:
        return [UNKNOWN]
    starts, ends = facts[1].data, facts[2].data
    rank = len(x.shape)
    axes = facts[3].data if len(facts) > 3 and facts[3].data is not None else tuple(range(rank))
    steps = facts[4].data if len(facts) > 4 and facts[4].data is not None else (1,) * len(axes)
    if starts is None or ends is None:
        if len(facts) > 3 and facts[3].data is not None:
            out = list(x.shape)
            for a in axes:
                if isinstance(a, int):
                    out[axis_of(a, rank)] = None
            return [Fact(tuple(out))]
        return [Fact((None,) * rank)]
    out = list(x.shape)
    for start, end, a, step in zip(starts, ends, axes, steps, strict=False):
        if not isinstance(a, int):
            return [Fact((None,) * rank)]
        a = axis_of(a, rank)
        out[a] = _slice_len(out[a], start, end, step)
    data = None
    bounds = [v for v in (starts[:1] + ends[:1] + steps[:1]) if isinstance(v, int)]
    if x.data is not None and rank == 1 and len(bounds) == 3:
        data = tuple(x.data[slice(*bounds)])
    return [Fact(tuple(out), data)]


def _slice_len(n: Dim, start: Dim, end: Dim, step: Dim) -> Dim:
    if not isinstance(step, int) or step == 0:
        return None
    big = 1 << 62
    if isinstance(n, int) and isinstance(start, int) and isinstance(end, int):
        return len(range(*slice(start, end, step).indices(n)))
    if step != 1 or start is None or end is None or (isinstance(start, int) and start < 0):
        return None
    if isinstance(end, int) and end >= big // 2:  # to the end of the axis
        return sub(n, start) if n is not None else None
    if isinstance(end, int) and end < 0:
        return sub(add(n, end), start) if n is not None else None
    return sub(end, start)  # a symbolic window taken to lie inside the axis


@rule("Range")
def _range(node: ir.Node, facts: list[Fact]) -> list[Fact]:
    start, limit, delta = (f.data[0] if f.data else None for f in facts)
    if start is None or limit is None or not isinstance(delta, int) or delta == 0:
        return [Fact((None,))]
    n = ceildiv(sub(limit, start), delta) if delta > 0 else ceildiv(sub(start, limit), -delta)
    data = None
    if all(isinstance(v, int) for v in (start, limit)) and isinstance(n, int) and 0 <= n <= 64:
        data = tuple(range(start, limit, delta))  # type: ignore[arg-type]
    return [Fact((n,), data)]
