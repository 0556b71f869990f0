"""Bounds: what a value CAN be, proven by a small interval analysis (lists say what an op MAY do).

A deny rule fears what an op may do to any input: a ReduceSum of n values can grow n times, Exp
overflows above 11.09. Many inputs cannot do that: a Softmax-weighted sum is a convex combination
of its values (|sum| <= max|v|), ``exp(x - max(x))`` lies in (0, 1]. `Bounds.of(value)` gives an
interval for a value from the ops that bound it (`bounds.txt`, one rule per op: Softmax and
Sigmoid in [0, 1], Tanh, Clip, Relu, constants, casts from small integer types, LayerNormalization
with constant scale and bias...) through elementwise ops and reductions, and three relations plain
intervals miss: ``x - ReduceMax(x) <= 0``, ``ReduceSum(p * v)`` with ``p`` a Softmax along the
summed axes (``<= max|v|``), ``a / ReduceSum(a)`` with ``a >= 0`` (in [0, 1]).

A value nothing bounds is taken as *a low-precision value*: within the low type's range
(``+-low_max``), since an op is judged by what it adds (a value already beyond the range overflowed
where it was made or cast). So a plain sum of n such values is bounded by ``n * low_max`` and
keeps its rule, while the convex combination stays within ``low_max`` and fits. Each answer
carries the reason it holds (the report gives it). Work is bounded: a query follows at most
``depth`` producers back, remembering every answer.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np
import onnx_ir as ir

from amp_convert.core import domains
from amp_convert.core.neighbours import constant_scalar
from amp_convert.core.precision import constant_tensor

RULES = (
    "range",
    "simplex",
    "copy",
    "mean",
    "union",
    "relu",
    "clip",
    "abs",
    "neg",
    "exp",
    "minmax",
    "arith",
    "sum",
    "cast",
    "layernorm",
)
#: integer types whose whole range fits any low type (a Cast from them is bounded)
_SMALL_INTS = {
    ir.DataType.BOOL: (0.0, 1.0),
    ir.DataType.INT8: (-128.0, 127.0),
    ir.DataType.UINT8: (0.0, 255.0),
    ir.DataType.INT16: (-32768.0, 32767.0),
    ir.DataType.UINT16: (0.0, 65535.0),
}
_COPIES = ("Reshape", "Expand", "Unsqueeze", "Squeeze", "Identity", "Flatten")


@dataclass(frozen=True)
class OpBound:
    """One line of bounds.txt: the rule for `op`, its arguments, and why it holds."""

    op: str
    rule: str
    args: tuple[float, ...]
    reason: str


@functools.cache
def load_rules() -> dict[str, OpBound]:
    """bounds.txt by op type (ai.onnx ops)."""
    text = resources.files("amp_convert.op_lists").joinpath("bounds.txt").read_text()
    rules: dict[str, OpBound] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        op, rule, *rest = line.split()
        if rule not in RULES:
            raise ValueError(f"bounds.txt: unknown rule {rule!r} for {op}")
        args: list[float] = []
        while rest and _is_number(rest[0]):
            args.append(float(rest.pop(0)))
        rules[op] = OpBound(op, rule, tuple(args), " ".join(rest))
    return rules


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Bound:
    """The interval a value lies in, and why (``assumed``: it rests on some input being a
    representable low-precision value, not on the op alone)."""

    lo: float
    hi: float
    why: str
    assumed: bool = False

    @property
    def magnitude(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    def fits(self, limit: float) -> bool:
        return self.magnitude <= limit


def _mul(a: float, b: float) -> float:
    if a == 0.0 or b == 0.0:
        return 0.0  # an interval endpoint of 0 times an unbounded one: 0, not NaN
    return a * b


class Bounds:
    """Interval bounds for the values of one model (see the module); memoised per value."""

    def __init__(self, opset: int, low_max: float, depth: int = 24) -> None:
        self.opset = opset
        self.low_max = low_max
        self.depth = depth
        self.rules = load_rules()
        self._memo: dict[int, Bound] = {}

    def unknown(self) -> Bound:
        return Bound(-self.low_max, self.low_max, "a low-precision value", assumed=True)

    def of(self, value: ir.Value | None, depth: int | None = None) -> Bound:
        """The value's bound (a low-precision value's range where nothing narrower is proven)."""
        if value is None:
            return self.unknown()
        found = self._memo.get(id(value))
        if found is not None:
            return found
        left = self.depth if depth is None else depth
        bound = self._compute(value, left) if left > 0 else self.unknown()
        self._memo[id(value)] = bound
        return bound

    def sum_of(self, node: ir.Node) -> Bound:
        """The bound of the sum a reduction node adds up (before any division by the count):
        what a kernel that holds the sum in the low type must hold."""
        src = node.inputs[0] if node.inputs else None
        if src is None:
            return self.unknown()
        x = self.of(src)
        count = _count(src, _reduce_axes(node, self.opset))
        if count is None:
            return Bound(-math.inf, math.inf, "a sum of an unknown number of values", x.assumed)
        return Bound(
            _mul(count, min(x.lo, 0.0)),
            _mul(count, max(x.hi, 0.0)),
            f"{count} values of {x.why}",
            x.assumed,
        )

    # -- one value ------------------------------------------------------------------------------
    def _compute(self, value: ir.Value, depth: int) -> Bound:
        tensor = constant_tensor(value)
        if tensor is not None and value.dtype is not None and value.dtype.is_floating_point():
            data = np.asarray(tensor.numpy(), dtype=np.float64)
            if data.size and np.all(np.isfinite(data)):
                return Bound(float(data.min()), float(data.max()), "a constant")
        node = value.producer()
        if node is None or not domains.is_default(node.domain):
            return self.unknown()
        rule = self.rules.get(node.op_type)
        if rule is None:
            return self.unknown()
        ins = [self.of(v, depth - 1) if v is not None else None for v in node.inputs]
        return self._apply(rule, node, value, ins, depth)

    def _apply(
        self, rule: OpBound, node: ir.Node, value: ir.Value, ins: list[Bound | None], depth: int
    ) -> Bound:
        first = ins[0] if ins and ins[0] is not None else self.unknown()
        kind, why = rule.rule, f"{node.op_type}: {rule.reason}"
        if kind == "range" or kind == "simplex":
            lo, hi = rule.args if rule.args else (0.0, 1.0)
            return Bound(lo, hi, why)
        if kind in ("copy", "mean"):
            return Bound(first.lo, first.hi, first.why, first.assumed)
        if kind == "union":
            known = [b for b in ins if b is not None]
            if not known:
                return self.unknown()
            return Bound(
                min(b.lo for b in known),
                max(b.hi for b in known),
                why,
                any(b.assumed for b in known),
            )
        if kind == "relu":
            return Bound(max(first.lo, 0.0), max(first.hi, 0.0), why, first.assumed)
        if kind == "abs":
            low = 0.0 if first.lo <= 0.0 <= first.hi else min(abs(first.lo), abs(first.hi))
            return Bound(low, first.magnitude, why, first.assumed)
        if kind == "neg":
            return Bound(-first.hi, -first.lo, why, first.assumed)
        if kind == "exp":
            return self._exp(node, first, why, depth)
        if kind == "clip":
            return self._clip(node, first, why)
        if kind == "minmax":
            known = [b for b in ins if b is not None]
            pick = max if node.op_type == "Max" else min
            return Bound(
                pick(b.lo for b in known),
                pick(b.hi for b in known),
                why,
                any(b.assumed for b in known),
            )
        if kind == "arith":
            return self._arith(node, ins, why, depth)
        if kind == "sum":
            return self._sum(node, first, why, depth)
        if kind == "cast":
            source = node.inputs[0].dtype if node.inputs[0] is not None else None
            if source in _SMALL_INTS:
                lo, hi = _SMALL_INTS[source]
                return Bound(lo, hi, f"Cast from {source.name}")
            if source is not None and source.is_floating_point():
                return first
            return self.unknown()
        if kind == "layernorm":
            return self._layernorm(node, why)
        return self.unknown()

    def _exp(self, node: ir.Node, x: Bound, why: str, depth: int) -> Bound:
        hi = math.inf if x.hi > 700 else math.exp(x.hi)
        lo = 0.0 if x.lo < -700 else math.exp(x.lo)
        return Bound(lo, hi, f"{why} of {x.why}", x.assumed)

    def _clip(self, node: ir.Node, x: Bound, why: str) -> Bound:
        lo, hi = x.lo, x.hi
        bounds: list[float | None]
        if self.opset < 11:
            found = [node.attributes.get(key) for key in ("min", "max")]
            bounds = [float(a.value) if a is not None else None for a in found]
        else:
            slots = [*node.inputs[1:3], None, None][:2]
            bounds = [constant_scalar(v) for v in slots]
        if bounds[0] is not None:
            lo, hi = max(lo, bounds[0]), max(hi, bounds[0])
        if bounds[1] is not None:
            lo, hi = min(lo, bounds[1]), min(hi, bounds[1])
        assumed = x.assumed and (bounds[0] is None or bounds[1] is None)
        return Bound(lo, hi, why, assumed)

    def _arith(self, node: ir.Node, ins: list[Bound | None], why: str, depth: int) -> Bound:
        a = ins[0] if ins[0] is not None else self.unknown()
        b = ins[1] if len(ins) > 1 and ins[1] is not None else self.unknown()
        assumed = a.assumed or b.assumed
        op = node.op_type
        if op == "Add":
            return Bound(a.lo + b.lo, a.hi + b.hi, why, assumed)
        if op == "Sub":
            if _reduce_max_of(node.inputs[1], node.inputs[0]):
                return Bound(a.lo - a.hi, 0.0, "x - ReduceMax(x) <= 0", a.assumed)
            return Bound(a.lo - b.hi, a.hi - b.lo, why, assumed)
        if op == "Div":
            if _normalised(node) and a.lo >= 0.0:
                return Bound(0.0, 1.0, "a / ReduceSum(a) of a >= 0")
            if b.lo <= 0.0 <= b.hi:
                return Bound(-math.inf, math.inf, "a divisor that may be 0", assumed)
            b = Bound(1.0 / b.hi, 1.0 / b.lo, b.why, b.assumed)
        products = [_mul(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
        return Bound(min(products), max(products), why, assumed)

    def _sum(self, node: ir.Node, x: Bound, why: str, depth: int) -> Bound:
        axes = _reduce_axes(node, self.opset)
        src = node.inputs[0]
        if src is None:
            return self.unknown()
        weighted = _softmax_weighted(src, axes)
        if weighted is not None:
            v = self.of(weighted, depth - 1)
            why = f"a Softmax-weighted sum: |sum| <= max|v| ({v.why})"
            return Bound(min(v.lo, 0.0), max(v.hi, 0.0), why, v.assumed)
        count = _count(src, axes)
        if count is None:
            return Bound(-math.inf, math.inf, "a sum of an unknown number of values", x.assumed)
        lo = _mul(count, x.lo) if x.lo < 0 else 0.0 if x.lo == 0 else x.lo
        return Bound(
            min(lo, _mul(count, x.lo)),
            _mul(count, x.hi),
            f"a sum of {count} values of {x.why}",
            x.assumed,
        )

    def _layernorm(self, node: ir.Node, why: str) -> Bound:
        scale = _array(node.inputs[1] if len(node.inputs) > 1 else None)
        bias = _array(node.inputs[2] if len(node.inputs) > 2 else None)
        if scale is None or (len(node.inputs) > 2 and node.inputs[2] is not None and bias is None):
            return self.unknown()
        n = scale.size
        peak = math.sqrt(max(n - 1, 1)) * float(np.abs(scale).max())
        shift = float(np.abs(bias).max()) if bias is not None and bias.size else 0.0
        return Bound(-peak - shift, peak + shift, f"{why} (n={n})")


def _array(value: ir.Value | None) -> np.ndarray | None:
    tensor = constant_tensor(value) if value is not None else None
    return None if tensor is None else np.asarray(tensor.numpy(), dtype=np.float64)


def _through_copies(value: ir.Value | None) -> ir.Node | None:
    """The producer of `value` behind reshapes, broadcasts and ``Max(-inf, .)`` (jax2tf's guard
    around a ReduceMax: the identity)."""
    node = value.producer() if value is not None else None
    while node is not None and domains.is_default(node.domain):
        if node.op_type in _COPIES:
            node = node.inputs[0].producer() if node.inputs[0] is not None else None
        elif node.op_type == "Max" and len(node.inputs) == 2:
            low = [v for v in node.inputs if constant_scalar(v) == -math.inf]
            rest = [v for v in node.inputs if constant_scalar(v) != -math.inf]
            if len(low) != 1 or len(rest) != 1 or rest[0] is None:
                return node
            node = rest[0].producer()
        else:
            return node
    return node


def _reduce_max_of(value: ir.Value | None, x: ir.Value | None) -> bool:
    node = _through_copies(value)
    return node is not None and node.op_type == "ReduceMax" and node.inputs[0] is x


def _normalised(div: ir.Node) -> bool:
    """Div(a, ReduceSum(a)) behind reshapes: each quotient in [0, 1] when a >= 0."""
    node = _through_copies(div.inputs[1])
    return node is not None and node.op_type == "ReduceSum" and node.inputs[0] is div.inputs[0]


def _reduce_axes(node: ir.Node, opset: int) -> list[int] | None:
    as_input = opset >= (13 if node.op_type == "ReduceSum" else 18)
    if as_input:
        data = _array(node.inputs[1]) if len(node.inputs) > 1 else None
        return None if data is None else [int(a) for a in data.reshape(-1)]
    attr = node.attributes.get("axes")
    return None if attr is None else [int(a) for a in attr.value]


def _rank(value: ir.Value) -> int | None:
    return None if value.shape is None else len(value.shape)


def _softmax_weighted(src: ir.Value, axes: list[int] | None) -> ir.Value | None:
    """For ``Mul(p, v)`` with ``p`` a Softmax (behind broadcasts) along exactly the summed axes,
    ``v``; else None."""
    mul = src.producer()
    if axes is None or mul is None or mul.op_type != "Mul" or len(mul.inputs) != 2:
        return None
    for p, v in (mul.inputs, mul.inputs[::-1]):
        soft = _through_copies(p)
        if soft is None or soft.op_type != "Softmax" or p is None:
            continue
        attr = soft.attributes.get("axis")
        axis = int(attr.value) if attr is not None else -1
        rank = _rank(src)
        if rank is not None and p.shape is not None and len(p.shape) == rank:
            same = sorted(a % rank for a in axes) == [axis % rank]
        else:
            same = axes == [axis]
        if same and soft.outputs[0] is p:  # the softmax's own axes, not reshaped away
            return v
    return None


def _count(src: ir.Value, axes: list[int] | None) -> int | None:
    """How many values each output of a reduction over `axes` sums (static dims only)."""
    shape = src.shape
    if shape is None:
        return None
    dims = [d if isinstance(d, int) else None for d in shape]
    picked = range(len(dims)) if not axes else [a % len(dims) for a in axes]
    sizes = [dims[a] for a in picked]
    if any(d is None for d in sizes):
        return None
    return int(np.prod(sizes))  # type: ignore[arg-type]
