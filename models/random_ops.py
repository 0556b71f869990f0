"""One recipe per op family for the random fuzz graphs: emit the op, its interval, its error.

Each recipe picks its inputs from the scope, emits the node(s) and records each output with the
interval it lies in and its error bound: the inputs' errors times the op's Lipschitz constant on
that interval, plus one rounding of the output (``Scope.add``). A recipe that does not apply
raises ``Reject`` and ``build_ops`` falls back to a unary op. MENU lists them, simplest first.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from models.random_scope import (
    BOOL,
    FLOAT,
    FLOOR,
    INT64,
    MAX_DEPTH,
    TAME,
    UNIT,
    Reject,
    Scope,
    Val,
    broadcastable,
    hull,
    mul_interval,
    rounding,
    weight_error,
)

# -- recipes: each emits one op (plus what it needs) or raises Reject ----------------------------
_UNARY: dict[str, tuple[Callable[[float], float], float]] = {
    # op: (monotone map of an endpoint, Lipschitz constant)
    "Relu": (lambda t: max(t, 0.0), 1.0),
    "Sigmoid": (lambda t: 1.0 / (1.0 + math.exp(-t)), 0.25),
    "Tanh": (math.tanh, 1.0),
    "Neg": (lambda t: -t, 1.0),
    "Erf": (math.erf, 2.0 / math.sqrt(math.pi)),
    "Identity": (lambda t: t, 1.0),
    "Abs": (abs, 1.0),
}


def r_unary(s: Scope) -> None:
    x = s.pick()
    op = s.ch.choice(list(_UNARY))
    f, lip = _UNARY[op]
    (out,) = s.node(op, [x.name])
    if op == "Abs":
        lo, hi = (0.0 if x.lo <= 0 <= x.hi else min(abs(x.lo), abs(x.hi))), x.bound
    else:
        lo, hi = sorted((f(x.lo), f(x.hi)))
    s.add(out, x.shape, lo, hi, lip * x.err)


def r_exp_log(s: Scope) -> None:
    x = s.pick()
    op = s.ch.choice(["Exp", "Log", "Sqrt"])
    if op == "Exp":
        if x.hi > 4:
            x = s.scale(x, 4.0)
        (out,) = s.node("Exp", [x.name])
        s.add(out, x.shape, math.exp(x.lo), math.exp(x.hi), np.exp(x.hi + x.err) * x.err)
        return
    x = s.positive(x)
    (out,) = s.node(op, [x.name])
    low = x.lo - x.err  # the smallest the candidate's input can be (> 0.75 * lo)
    if op == "Log":
        s.add(out, x.shape, math.log(x.lo), math.log(x.hi), x.err / low)
    else:
        s.add(out, x.shape, math.sqrt(x.lo), math.sqrt(x.hi), x.err / (2 * np.sqrt(low)))


def r_pow(s: Scope) -> None:
    x = s.pick()
    p = s.ch.choice([2.0, 3.0, 0.5])
    if p == 0.5:
        x = s.positive(x)
    e = s.const(np.float32(p), exact=True)
    (out,) = s.node("Pow", [x.name, e.name])
    b = x.bound + x.err
    if p == 2.0:
        lo = 0.0 if x.lo <= 0 <= x.hi else min(x.lo**2, x.hi**2)
        s.add(out, x.shape, lo, x.bound**2, 2 * b * x.err)
    elif p == 3.0:
        s.add(out, x.shape, x.lo**3, x.hi**3, 3 * b**2 * x.err)
    else:
        s.add(out, x.shape, math.sqrt(x.lo), math.sqrt(x.hi), x.err / (2 * np.sqrt(x.lo - x.err)))


def r_clip(s: Scope) -> None:
    x = s.pick()
    lo_c = s.const(np.float32(-s.ch.integer(0, 8) / 4)) if s.ch.boolean() else None
    hi_c = s.const(np.float32(s.ch.integer(0, 8) / 4)) if s.ch.boolean() else None
    ins = [x.name, lo_c.name if lo_c else "", hi_c.name if hi_c else ""]
    while ins[-1] == "":
        ins.pop()
    (out,) = s.node("Clip", ins)
    lo, hi = x.lo, x.hi
    if lo_c is not None:
        lo, hi = max(lo, lo_c.lo), max(hi, lo_c.lo)
    if hi_c is not None:
        lo, hi = min(lo, hi_c.lo), min(hi, hi_c.lo)
    s.add(out, x.shape, lo, hi, x.err)


def r_binary(s: Scope) -> None:
    op = s.ch.choice(["Add", "Sub", "Mul", "Div", "Max", "Min"])
    a = s.pick()
    b = s.partner(a.shape, nonzero=op == "Div")
    first, second = (b, a) if op not in ("Div",) and s.ch.boolean() else (a, b)
    operands = [first, second]
    if op in ("Max", "Min") and s.ch.rarely():
        operands.append(s.partner(np.broadcast_shapes(a.shape, b.shape)))
    shapes = [v.shape for v in operands]
    if not broadcastable(*shapes):
        raise Reject
    shape = np.broadcast_shapes(*shapes)
    (out,) = s.node(op, [v.name for v in operands])
    x, y = first, second
    if op == "Add":
        s.add(out, shape, x.lo + y.lo, x.hi + y.hi, x.err + y.err)
    elif op == "Sub":
        s.add(out, shape, x.lo - y.hi, x.hi - y.lo, x.err + y.err)
    elif op == "Mul":
        lo, hi = mul_interval(x.lo, x.hi, y.lo, y.hi)
        err = x.bound * y.err + y.bound * x.err + x.err * y.err
        s.add(out, shape, lo, hi, err)
    elif op == "Div":
        m = min(abs(y.lo), abs(y.hi))  # y never straddles 0 and |y| >= 0.5
        if y.lo <= 0 <= y.hi or np.any(y.err >= m / 2):
            raise Reject
        lo, hi = mul_interval(x.lo, x.hi, *sorted((1 / y.lo, 1 / y.hi)))
        md = m - y.err
        s.add(out, shape, lo, hi, x.err / md + x.bound * y.err / (m * md))
    else:
        pick = max if op == "Max" else min
        lo = pick(v.lo for v in operands)
        hi = pick(v.hi for v in operands)
        s.add(out, shape, lo, hi, np.max([v.err for v in operands], axis=0))


def r_where(s: Scope) -> None:
    x = s.pick()
    y = s.partner(x.shape)
    shape = np.broadcast_shapes(x.shape, y.shape)
    r = s.ch.integer(0, len(shape))
    cshape = tuple(shape[len(shape) - r :])
    if s.ch.rarely():
        cond = s.const(s.gen.rng.integers(0, 2, cshape).astype(bool)).name
    else:
        cond = s.gen.bool_input(cshape)
    first, second = (x, y) if s.ch.boolean() else (y, x)
    (out,) = s.node("Where", [cond, first.name, second.name])
    s.add(out, shape, *hull(x, y), np.maximum(x.err, y.err))


def _weights(s: Scope, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    return (s.gen.rng.normal(0.0, 1.0, shape) / math.sqrt(max(fan_in, 1))).astype(np.float32)


def r_matmul(s: Scope) -> None:
    x = s.pick(lambda v: v.rank >= 1 and v.shape[-1] <= 64)
    k = x.shape[-1]
    if x.rank >= 2 and s.ch.rarely():  # activation @ activation: x @ x^T
        perm = list(range(x.rank))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        (t,) = s.node("Transpose", [x.name], perm=perm)
        xt = s.add(t, tuple(x.shape[p] for p in perm), x.lo, x.hi, x.err)
        (out,) = s.node("MatMul", [x.name, xt.name])
        b = k * x.bound * xt.bound
        s.add(out, (*x.shape[:-1], x.shape[-2]), -b, b, k * (x.bound * xt.err + xt.bound * x.err))
        return
    n = s.ch.integer(1, 6)
    w = _weights(s, (k, n), k)
    wv = s.const(w)
    (out,) = s.node("MatMul", [x.name, wv.name])
    col = np.abs(w).sum(axis=0).max()
    dcol = np.array([e.sum(axis=0).max() for e in weight_error(w)])
    b = x.bound * col
    s.add(out, (*x.shape[:-1], n), -b, b, col * x.err + x.bound * dcol)


def r_gemm(s: Scope) -> None:
    x = s.pick(lambda v: v.rank >= 1 and v.size <= 64)
    if x.rank != 2:
        (f,) = s.node("Flatten", [x.name], axis=1 if x.rank > 1 else 0)
        shape = (x.shape[0], x.size // x.shape[0]) if x.rank > 1 else (1, x.size)
        x = s.add(f, shape, x.lo, x.hi, x.err)
    trans_a, trans_b = s.ch.rarely(), s.ch.boolean()
    m, k = (x.shape[1], x.shape[0]) if trans_a else x.shape
    n = s.ch.integer(1, 6)
    w = _weights(s, (k, n), k)
    wv = s.const(w.T.copy() if trans_b else w)
    alpha = s.ch.choice([1.0, 0.5])
    beta = s.ch.choice([1.0, 0.5])
    ins = [x.name, wv.name]
    c = None
    if s.ch.boolean():
        cshape = s.ch.choice([(n,), (1, n), (m, 1), (m, n), ()])
        c = s.const(s.gen.rng.normal(0.0, 0.5, cshape))
        ins.append(c.name)
    attrs = {"alpha": alpha, "beta": beta, "transA": int(trans_a), "transB": int(trans_b)}
    (out,) = s.node("Gemm", ins, **attrs)
    col = np.abs(w).sum(axis=0).max()
    dcol = np.array([e.sum(axis=0).max() for e in weight_error(w)])
    b = alpha * x.bound * col + (beta * c.bound if c else 0.0)
    err = alpha * (col * x.err + x.bound * dcol) + (beta * c.err if c else 0.0)
    s.add(out, (m, n), -b, b, err)


def _spatial(s: Scope) -> Val:
    """A value of rank 4 (NCHW) or 3 (NCL), reshaped from a smaller one if need be."""
    x = s.pick(lambda v: v.rank <= 4)
    if x.rank >= 3:
        return x
    return s.as_rank(x, s.ch.choice([4, 3]))


def _out_dim(d: int, k: int, p0: int, p1: int, stride: int) -> int:
    return (d + p0 + p1 - k) // stride + 1


def r_conv(s: Scope) -> None:
    x = _spatial(s)
    c = x.shape[1]
    group = c if c > 1 and s.ch.rarely() else 1
    co = group * s.ch.integer(1, 2) if group > 1 else s.ch.integer(1, 4)
    kernel, pads, strides, out_sp = [], [0] * (2 * (x.rank - 2)), [], []
    for i, d in enumerate(x.shape[2:]):
        p = s.ch.integer(0, 1)
        k = s.ch.integer(1, min(3, d + 2 * p))
        st = s.ch.integer(1, 2)
        kernel.append(k)
        pads[i] = pads[i + x.rank - 2] = p
        strides.append(st)
        out_sp.append(_out_dim(d, k, p, p, st))
    fan_in = (c // group) * math.prod(kernel)
    w = _weights(s, (co, c // group, *kernel), fan_in)
    ins = [x.name, s.const(w).name]
    bias = s.const(s.gen.rng.normal(0.0, 0.5, (co,))) if s.ch.boolean() else None
    if bias is not None:
        ins.append(bias.name)
    (out,) = s.node("Conv", ins, kernel_shape=kernel, pads=pads, strides=strides, group=group)
    row = np.abs(w).reshape(co, -1).sum(axis=1).max()
    drow = np.array([e.reshape(co, -1).sum(axis=1).max() for e in weight_error(w)])
    b = x.bound * row + (bias.bound if bias else 0.0)
    err = row * x.err + x.bound * drow + (bias.err if bias else 0.0)
    s.add(out, (x.shape[0], co, *out_sp), -b, b, err)


def r_pool(s: Scope) -> None:
    x = _spatial(s)
    op = s.ch.choice(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
    if op.startswith("Global"):
        (out,) = s.node(op, [x.name])
        s.add(out, x.shape[:2] + (1,) * (x.rank - 2), x.lo, x.hi, x.err)
        return
    kernel, pads, strides, out_sp = [], [0] * (2 * (x.rank - 2)), [], []
    for i, d in enumerate(x.shape[2:]):
        k = s.ch.integer(1, min(3, d + 2))
        p = s.ch.integer(0, k - 1) if k > 1 else 0
        if d + 2 * p < k:
            p = k - 1
        st = s.ch.integer(1, 2)
        kernel.append(k)
        pads[i] = pads[i + x.rank - 2] = p
        strides.append(st)
        out_sp.append(_out_dim(d, k, p, p, st))
    attrs: dict[str, Any] = {"kernel_shape": kernel, "pads": pads, "strides": strides}
    lo, hi = x.lo, x.hi
    if op == "AveragePool":
        attrs["count_include_pad"] = s.ch.integer(0, 1)
        lo, hi = min(lo, 0.0), max(hi, 0.0)  # padded zeros may be averaged in
    (out,) = s.node(op, [x.name], **attrs)
    s.add(out, x.shape[:2] + tuple(out_sp), lo, hi, x.err)


def r_batchnorm(s: Scope) -> None:
    x = s.pick(lambda v: 2 <= v.rank <= 4)
    c = x.shape[1]
    rng = s.gen.rng
    stats = [
        rng.uniform(0.5, 1.5, c) * rng.choice([-1.0, 1.0], c),  # scale
        rng.normal(0, 0.5, c),  # bias
        rng.normal(0, 0.5, c),  # mean
        rng.uniform(0.5, 2.0, c),  # var
    ]
    stats = [a.astype(np.float32) for a in stats]
    ws = [s.const(a) for a in stats]
    (out,) = s.node("BatchNormalization", [x.name, *(w.name for w in ws)], epsilon=1e-5)
    g, bt, m, v = (a.astype(np.float64) for a in stats)
    a = np.abs(g) / np.sqrt(v + 1e-5)
    b = float((a * (x.bound + np.abs(m)) + np.abs(bt)).max())
    dg, db, dm, dv = (weight_error(a) for a in stats)
    err = a.max() * x.err
    for i in range(2):  # each rounded statistic, by its partial derivative
        err[i] += (
            ((x.bound + np.abs(m)) / np.sqrt(v) * dg[i]).max()
            + (a * dm[i]).max()
            + (a * (x.bound + np.abs(m)) * dv[i] / (2 * (v - dv[i]))).max()
            + db[i].max()
        )
    s.add(out, x.shape, -b, b, err)


def r_layernorm(s: Scope) -> None:
    if s.gen.opset < 17:
        raise Reject
    x = s.pick(lambda v: v.rank >= 1 and v.shape[-1] >= 2)
    n = x.shape[-1]
    # Condition the rows: add a ramp with standard deviation bound+1, so every row of the input
    # has a standard deviation >= 1 and normalising cannot amplify errors by more than ~2+sqrt(n).
    lin = np.linspace(-1.0, 1.0, n)
    ramp = s.const(lin * (x.bound + 1) / lin.std())
    (z,) = s.node("Add", [x.name, ramp.name])
    zv = s.add(z, x.shape, x.lo + ramp.lo, x.hi + ramp.hi, x.err + ramp.err)
    gamma = s.const(s.gen.rng.uniform(0.5, 1.5, n))
    ins = [zv.name, gamma.name]
    beta = s.const(s.gen.rng.normal(0, 0.5, n)) if s.ch.boolean() else None
    if beta is not None:
        ins.append(beta.name)
    (out,) = s.node("LayerNormalization", ins, axis=-1, epsilon=1e-5)
    zmax = math.sqrt(n - 1)  # |x_i - mean| / std <= sqrt(n-1)
    b = gamma.bound * zmax + (beta.bound if beta else 0.0)
    lip = gamma.bound * (2 + zmax) * 1.1  # first order, std >= 1, 10% margin for the 2nd order
    err = lip * zv.err + gamma.err * zmax + (beta.err if beta else 0.0)
    s.add(out, x.shape, -b, b, err)


def r_softmax(s: Scope) -> None:
    x = s.pick(lambda v: v.rank >= 1)
    axis = s.ch.integer(-x.rank, x.rank - 1)
    (out,) = s.node("Softmax", [x.name], axis=axis)
    s.add(out, x.shape, 0.0, 1.0, 2 * x.err)  # |d softmax| <= 2 max|dx|


def r_reduce(s: Scope) -> None:
    x = s.pick(lambda v: v.rank >= 1)
    op = s.ch.choice(["ReduceMean", "ReduceSum", "ReduceMax"])
    axes = sorted({s.ch.integer(0, x.rank - 1) for _ in range(s.ch.integer(1, x.rank))})
    n = math.prod(x.shape[a] for a in axes)
    if n > 64:
        raise Reject
    keep = s.ch.integer(0, 1)
    spelled = [a - x.rank if s.ch.boolean() else a for a in axes]
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    if not shape:
        raise Reject  # keep every value of rank >= 1
    if op == "ReduceSum" or s.gen.opset >= 18:
        (out,) = s.node(op, [x.name, s.ints(spelled)], keepdims=keep)
    else:
        (out,) = s.node(op, [x.name], axes=spelled, keepdims=keep)
    if op == "ReduceSum":
        s.add(out, shape, n * x.lo, n * x.hi, n * x.err)
    else:
        s.add(out, shape, x.lo, x.hi, x.err)


def _factor(s: Scope, size: int) -> tuple[int, ...]:
    dims = []
    rest = size
    for _ in range(s.ch.integer(0, 3)):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = s.ch.choice(divisors)
        dims.append(d)
        rest //= d
    return (*dims, rest)


def r_reshape(s: Scope) -> None:
    x = s.pick()
    op = s.ch.choice(["Reshape", "Flatten", "Transpose", "Unsqueeze", "Squeeze"])
    if op == "Reshape":
        shape = _factor(s, x.size)
        spelled = list(shape)
        if s.ch.boolean():
            spelled[s.ch.integer(0, len(shape) - 1)] = -1
        like = [v for v in s.visible() if v.elem == INT64 and v.value is not None]
        like = [v for v in like if v.value.ndim == 1 and math.prod(v.value) == x.size > 0]
        if like and s.ch.rarely():  # the shape of another value, computed by Shape
            sv = s.ch.choice(like)
            shape, shape_name = tuple(int(d) for d in sv.value), sv.name
        else:
            shape_name = s.ints(spelled)
        (out,) = s.node("Reshape", [x.name, shape_name])
    elif op == "Flatten":
        axis = s.ch.integer(-x.rank, x.rank) if x.rank else 0
        a = axis + x.rank if axis < 0 else axis
        shape = (math.prod(x.shape[:a]), math.prod(x.shape[a:]))
        (out,) = s.node("Flatten", [x.name], axis=axis)
    elif op == "Transpose":
        if x.rank < 2:
            raise Reject
        perm = list(range(x.rank))
        for i in range(x.rank - 1, 0, -1):
            j = s.ch.integer(0, i)
            perm[i], perm[j] = perm[j], perm[i]
        if s.ch.rarely():  # no perm: reverse
            perm = list(range(x.rank))[::-1]
            (out,) = s.node("Transpose", [x.name])
        else:
            (out,) = s.node("Transpose", [x.name], perm=perm)
        shape = tuple(x.shape[p] for p in perm)
    elif op == "Unsqueeze":
        k = s.ch.integer(1, 2)
        r = x.rank + k
        if r > 5:
            raise Reject
        axes = sorted({s.ch.integer(0, r - 1) for _ in range(k)})
        if len(axes) != k:
            raise Reject
        dims = iter(x.shape)
        shape = tuple(1 if i in axes else next(dims) for i in range(r))
        spelled = [a - r if s.ch.boolean() else a for a in axes]
        (out,) = s.node("Unsqueeze", [x.name, s.ints(spelled)])
    else:
        ones = [i for i, d in enumerate(x.shape) if d == 1]
        if not ones or x.rank < 2:
            raise Reject
        axes = sorted({s.ch.choice(ones) for _ in range(s.ch.integer(1, len(ones)))})
        if len(axes) == x.rank:
            axes = axes[1:]
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        if len(axes) == len(ones) and s.ch.rarely():
            (out,) = s.node("Squeeze", [x.name])
        else:
            (out,) = s.node("Squeeze", [x.name, s.ints(axes)])
    s.add(out, shape, x.lo, x.hi, x.err)


def r_concat_split(s: Scope) -> None:
    x = s.pick(lambda v: v.rank >= 1)
    if s.ch.boolean():  # Concat
        axis = s.ch.integer(0, x.rank - 1)

        def fits(v: Val) -> bool:
            return v.rank == x.rank and all(
                a == b for i, (a, b) in enumerate(zip(v.shape, x.shape, strict=True)) if i != axis
            )

        try:
            y = s.pick(fits)
        except Reject:
            shape = list(x.shape)
            shape[axis] = s.ch.integer(1, 3)
            y = s.const(s.gen.rng.normal(0, 1, shape))
        parts = [x, y] if s.ch.boolean() else [y, x]
        shape = list(x.shape)
        shape[axis] = x.shape[axis] + y.shape[axis]
        spelled = axis - x.rank if s.ch.boolean() else axis
        (out,) = s.node("Concat", [v.name for v in parts], axis=spelled)
        s.add(out, shape, *hull(x, y), np.maximum(x.err, y.err))
        return
    axes = [i for i, d in enumerate(x.shape) if d >= 2]
    if not axes:
        raise Reject
    axis = s.ch.choice(axes)
    d = x.shape[axis]
    n = s.ch.integer(2, min(3, d))
    if s.gen.opset >= 18 and d % n == 0 and s.ch.boolean():
        sizes = [d // n] * n
        outs = s.node("Split", [x.name], n_out=n, axis=axis, num_outputs=n)
    else:
        cuts = sorted({s.ch.integer(1, d - 1) for _ in range(n - 1)})
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, d], strict=True)]
        outs = s.node("Split", [x.name, s.ints(sizes)], n_out=len(sizes), axis=axis)
    for o, size in zip(outs, sizes, strict=True):
        shape = list(x.shape)
        shape[axis] = size
        s.add(o, shape, x.lo, x.hi, x.err)


def r_slice_gather(s: Scope) -> None:
    x = s.pick(lambda v: v.rank >= 1)
    if s.ch.boolean():  # Gather
        axis = s.ch.integer(-x.rank, x.rank - 1)
        d = x.shape[axis]
        ishape = tuple(s.ch.integer(1, 3) for _ in range(s.ch.integer(0, 2)))
        idx = s.gen.rng.integers(-d, d, ishape)
        a = axis % x.rank
        shape = x.shape[:a] + ishape + x.shape[a + 1 :]
        if not shape:
            raise Reject
        (out,) = s.node("Gather", [x.name, s.const(idx.astype(np.int64)).name], axis=axis)
        s.add(out, shape, x.lo, x.hi, x.err)
        return
    axes = sorted({s.ch.integer(0, x.rank - 1) for _ in range(s.ch.integer(1, x.rank))})
    starts, ends, steps, shape = [], [], [], list(x.shape)
    big = 2**63 - 1
    for a in axes:
        d = x.shape[a]
        step = s.ch.choice([1, 2, -1])
        start = s.ch.choice([s.ch.integer(-d, d), big if step < 0 else -big - 1])
        end = s.ch.choice([s.ch.integer(-d - 1, d + 1), -big - 1 if step < 0 else big])
        n = len(range(*slice(start, end, step).indices(d)))
        if n == 0:
            start, end, step = 0, d, 1
            n = d
        starts.append(start)
        ends.append(end)
        steps.append(step)
        shape[a] = n
    ins = [x.name, s.ints(starts), s.ints(ends)]
    if s.ch.boolean() or any(st != 1 for st in steps) or axes != list(range(len(axes))):
        ins.append(s.ints([a - x.rank if s.ch.boolean() else a for a in axes]))
        if s.ch.boolean() or any(st != 1 for st in steps):
            ins.append(s.ints(steps))
    (out,) = s.node("Slice", ins)
    s.add(out, shape, x.lo, x.hi, x.err)


def r_cast(s: Scope) -> None:
    kind = s.ch.choice(["float", "double", "like", "int", "half"])
    if kind == "int":  # an exact integer value (a computed shape) turned into floats
        iv = s.pick(lambda v: v.value is not None, elem=INT64)
        (out,) = s.node("Cast", [iv.name], to=FLOAT)
        lo, hi = float(iv.value.min()), float(iv.value.max())
        if hi > TAME:
            raise Reject
        s.add(out, iv.shape, lo, hi, np.zeros(2))
        return
    x = s.pick()
    if kind == "float":
        (out,) = s.node("Cast", [x.name], to=FLOAT)
        err = x.err
    elif kind == "double":
        (d,) = s.node("Cast", [x.name], to=TensorProto.DOUBLE)
        (out,) = s.node("Cast", [d], to=FLOAT)
        err = x.err
    elif kind == "like":
        if s.gen.opset < 15:
            raise Reject
        like = s.partner(()) if s.ch.boolean() else s.pick()
        (out,) = s.node("CastLike", [x.name, like.name])
        err = x.err
    else:  # the source model already rounds to FP16 here; a different input may round apart
        (h,) = s.node("Cast", [x.name], to=TensorProto.FLOAT16)
        (out,) = s.node("Cast", [h], to=FLOAT)
        err = x.err + 2 * UNIT[0] * (x.bound + x.err) + FLOOR[0]
    s.add(out, x.shape, x.lo, x.hi, err).no_capture = kind != "half"


def r_resize(s: Scope) -> None:
    x = s.pick(lambda v: v.rank <= 4)
    x = s.as_rank(x, 4)
    mode = s.ch.choice(["nearest", "linear"])
    sc = [s.ch.choice([1.0, 2.0, 0.5, 3.0]) for _ in range(2)]
    shape = x.shape[:2] + tuple(math.floor(d * f) for d, f in zip(x.shape[2:], sc, strict=True))
    if 0 in shape:
        raise Reject
    if s.ch.boolean():
        ins = [x.name, "", s.const(np.array([1.0, 1.0, *sc], np.float32), exact=True).name]
    else:
        ins = [x.name, "", "", s.ints(list(shape))]
    attrs: dict[str, Any] = {"mode": mode}
    if s.ch.boolean():
        attrs["coordinate_transformation_mode"] = s.ch.choice(
            ["asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel"]
        )
    (out,) = s.node("Resize", ins, **attrs)
    s.add(out, shape, x.lo, x.hi, x.err)  # nearest copies, linear takes convex combinations


def r_topk(s: Scope) -> None:
    x = s.pick(lambda v: v.rank >= 1)
    axis = s.ch.integer(-x.rank, x.rank - 1)
    k = s.ch.integer(1, x.shape[axis])
    largest = s.ch.integer(0, 1)
    # indices are discontinuous in the values (ties); only the sorted values are used
    vals, _ = s.node("TopK", [x.name, s.ints([k])], n_out=2, axis=axis, largest=largest)
    shape = list(x.shape)
    shape[axis] = k
    s.add(vals, shape, x.lo, x.hi, x.err)


def r_range(s: Scope) -> None:
    start = s.ch.integer(-8, 8) / 4
    delta = s.ch.choice([0.25, 0.5, 1.0, -0.5])
    n = s.ch.integer(1, 6)
    ins = [s.const(np.float32(v), exact=True).name for v in (start, start + n * delta, delta)]
    (out,) = s.node("Range", ins)
    ends = (start, start + (n - 1) * delta)
    s.add(out, (n,), min(ends), max(ends), np.zeros(2))


def r_pad(s: Scope) -> None:
    x = s.pick(lambda v: v.rank >= 1)
    mode = s.ch.choice(["constant", "edge", "reflect"])
    axes = sorted({s.ch.integer(0, x.rank - 1) for _ in range(s.ch.integer(1, 2))})
    begin, end = [0] * x.rank, [0] * x.rank
    for a in axes:
        most = 2 if mode != "reflect" else min(2, x.shape[a] - 1)
        begin[a], end[a] = s.ch.integer(0, most), s.ch.integer(0, most)
    shape = [d + b + e for d, b, e in zip(x.shape, begin, end, strict=True)]
    lo, hi = x.lo, x.hi
    ins = [x.name]
    value = None
    if mode == "constant" and s.ch.boolean():
        value = s.const(np.float32(s.ch.integer(-4, 4) / 4))
    if mode == "constant":
        c = value.lo if value is not None else 0.0
        lo, hi = min(lo, c), max(hi, c)
    if s.gen.opset >= 18 and s.ch.boolean():
        ins += [s.ints([begin[a] for a in axes] + [end[a] for a in axes])]
        ins += [value.name if value else "", s.ints(axes)]
    else:
        ins += [s.ints(begin + end)] + ([value.name] if value else [])
    (out,) = s.node("Pad", ins, mode=mode)
    s.add(out, shape, lo, hi, np.maximum(x.err, value.err) if value else x.err)


def r_expand_tile(s: Scope) -> None:
    x = s.pick(lambda v: v.rank >= 1)
    if s.ch.boolean():  # Expand
        target = [s.ch.integer(1, 3) if d == 1 else s.ch.choice([d, 1]) for d in x.shape]
        if s.ch.rarely():
            target = [s.ch.integer(1, 2), *target]
        shape = np.broadcast_shapes(x.shape, tuple(target))
        (out,) = s.node("Expand", [x.name, s.ints(target)])
    else:
        reps = [s.ch.integer(1, 2) for _ in x.shape]
        shape = tuple(d * r for d, r in zip(x.shape, reps, strict=True))
        (out,) = s.node("Tile", [x.name, s.ints(reps)])
    s.add(out, shape, x.lo, x.hi, x.err)


def r_shape(s: Scope) -> None:
    x = s.pick(lambda v: v.rank >= 1)
    attrs = {}
    dims = np.array(x.shape, np.int64)
    if s.gen.opset >= 15 and s.ch.rarely():
        start = s.ch.integer(0, x.rank - 1)
        attrs = {"start": start}
        dims = dims[start:]
    (shp,) = s.node("Shape", [x.name], **attrs)
    sv = s.add_int(shp, dims)
    if s.ch.boolean():  # a constant filled to that shape, as exporters build masks and zeros
        c = s.ch.integer(-4, 4) / 4
        value = helper.make_tensor("value", FLOAT, [1], [c])
        (out,) = s.node("ConstantOfShape", [sv.name], value=value)
        s.add(out, tuple(int(d) for d in dims), c, c, np.zeros(2))


def _branch_output(b: Scope, target: Val) -> Val:
    """The branch's last own value shaped like ``target``, or tanh(target) made in the branch."""
    for v in reversed(b.vals):
        if v.elem == FLOAT and v.shape == target.shape and v.name not in b.hidden:
            return v
    (t,) = b.node("Tanh", [target.name])
    return b.add(t, target.shape, math.tanh(target.lo), math.tanh(target.hi), target.err)


def build_ops(s: Scope, n: int) -> None:
    """Emit n recipes into scope s; a recipe that does not apply falls back to a unary op."""
    for _ in range(n):
        recipes = [r for r in MENU if r[1] <= s.gen.opset and (r[2] or s.depth < MAX_DEPTH)]
        fn = s.ch.choice(recipes)[0]
        mark = (len(s.nodes), len(s.inits), len(s.vals), set(s.hidden))
        try:
            fn(s)
        except Reject:
            del s.nodes[mark[0] :], s.inits[mark[1] :], s.vals[mark[2] :]
            s.hidden = mark[3]
            r_unary(s)


def _graph(b: Scope, name: str, inputs: list, outputs: list) -> onnx.GraphProto:
    return helper.make_graph(b.nodes, name, inputs, outputs, initializer=b.inits)


def r_if(s: Scope) -> None:
    target = s.pick()
    cond = s.gen.bool_input(())
    outs: list[Val] = []
    graphs = []
    for branch in ("then", "else"):
        b = Scope(s.gen, s)
        build_ops(b, s.ch.integer(1, 3))
        o = _branch_output(b, target)
        outs.append(o)
        vi = helper.make_tensor_value_info(o.name, FLOAT, o.shape)
        graphs.append(_graph(b, s.gen.fresh(branch), [], [vi]))
    (out,) = s.node("If", [cond], then_branch=graphs[0], else_branch=graphs[1])
    s.add(out, target.shape, *hull(*outs), np.maximum(outs[0].err, outs[1].err))


def r_loop(s: Scope) -> None:
    v0 = s.pick(lambda v: v.size <= 64)
    shape = v0.shape
    trips = s.ch.integer(1, 3)
    b = Scope(s.gen, s)
    it, cin, vin = (s.gen.fresh(p) for p in ("iter", "cond_in", "v_in"))
    # h: anything built from captured outer values and the iteration count, never from v_in
    if s.ch.boolean():
        (itf,) = b.node("Cast", [it], to=FLOAT)
        b.add(itf, (), 0.0, trips - 1.0, np.zeros(2))
    build_ops(b, s.ch.integer(0, 2))
    try:
        h = b.pick(
            lambda v: (
                v.rank <= len(shape)
                and broadcastable(v.shape, shape)
                and np.broadcast_shapes(v.shape, shape) == shape
            )
        )
    except Reject:
        h = b.const(s.gen.rng.normal(0, 1, shape))
    # v_out = f(a * v_in + h) with |a| * Lip(f) < 1: errors of v_in shrink each trip, so the bound
    # E = max(err(v0), r / (1 - |a| Lip(f))) holds for every trip (r: what one trip adds)
    a = s.ch.choice([0.5, -0.5, 0.25, -0.125])
    f = s.ch.choice(["Tanh", "Sigmoid"])
    frange, lip = ((-1.0, 1.0), 1.0) if f == "Tanh" else ((0.0, 1.0), 0.25)
    lo_in, hi_in = min(v0.lo, frange[0]), max(v0.hi, frange[1])
    mlo, mhi = sorted((a * lo_in, a * hi_in))
    slo, shi = mlo + h.lo, mhi + h.hi
    r = lip * (h.err + rounding(mlo, mhi) + rounding(slo, shi)) + rounding(*frange)
    e_in = np.maximum(v0.err, r / (1 - abs(a) * lip))
    (m,) = b.node("Mul", [vin, b.const(np.float32(a), exact=True).name])
    (sm,) = b.node("Add", [m, h.name])
    (vout,) = b.node(f, [sm])
    (cout,) = b.node("Identity", [cin])
    scan = s.ch.boolean()
    body_out = [
        helper.make_tensor_value_info(cout, BOOL, []),
        helper.make_tensor_value_info(vout, FLOAT, shape),
    ]
    if scan:
        (sc,) = b.node("Identity", [vout])
        body_out.append(helper.make_tensor_value_info(sc, FLOAT, shape))
    body_in = [
        helper.make_tensor_value_info(it, INT64, []),
        helper.make_tensor_value_info(cin, BOOL, []),
        helper.make_tensor_value_info(vin, FLOAT, shape),
    ]
    body = _graph(b, s.gen.fresh("body"), body_in, body_out)
    cond = s.const(np.array(True)).name if s.ch.boolean() else ""
    trip = s.const(np.array(trips, np.int64)).name
    outs = s.node("Loop", [trip, cond, v0.name], n_out=2 if scan else 1, body=body)
    flo, fhi = (math.tanh(slo), math.tanh(shi)) if f == "Tanh" else (_sig(slo), _sig(shi))
    s.add(outs[0], shape, flo, fhi, e_in)
    if scan:
        s.add(outs[1], (trips, *shape), flo, fhi, e_in)


def _sig(t: float) -> float:
    return 1.0 / (1.0 + math.exp(-t))


#: (recipe, first opset, allowed at any depth). Simplest first: hypothesis shrinks toward index 0.
MENU: list[tuple[Callable[[Scope], None], int, bool]] = [
    (r_unary, 13, True),
    (r_binary, 13, True),
    (r_reshape, 13, True),
    (r_matmul, 13, True),
    (r_gemm, 13, True),
    (r_conv, 13, True),
    (r_pool, 13, True),
    (r_softmax, 13, True),
    (r_reduce, 13, True),
    (r_exp_log, 13, True),
    (r_pow, 13, True),
    (r_clip, 13, True),
    (r_where, 13, True),
    (r_concat_split, 13, True),
    (r_slice_gather, 13, True),
    (r_cast, 13, True),
    (r_resize, 13, True),
    (r_topk, 13, True),
    (r_range, 13, True),
    (r_pad, 13, True),
    (r_expand_tile, 13, True),
    (r_shape, 13, True),
    (r_batchnorm, 13, True),
    (r_layernorm, 17, True),
    (r_if, 13, False),
    (r_loop, 13, False),
]
