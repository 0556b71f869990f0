"""The building blocks of the random fuzz graphs: values with an interval and an error bound.

A ``Val`` is one value of the graph with its static shape, an interval that contains it and an
absolute error bound for FP16 and for BF16 (see models/random_graphs.py for the analysis). A
``Scope`` is one graph (main or a subgraph body) being built; ``Gen`` holds what is model-wide.
Every random decision goes through a ``Chooser`` so hypothesis can shrink a failing graph.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
BOOL = TensorProto.BOOL

#: Low types, in the order of every error array: index 0 FP16, index 1 BF16.
LOW_DTYPES = ("fp16", "bf16")
_LOW_NP = (np.float16, ml_dtypes.bfloat16)
#: Unit roundoff (round to nearest) of FP16 (11 significant bits) and BF16 (8).
UNIT = np.array([2.0**-11, 2.0**-8])
#: Absolute rounding error of a subnormal: half the spacing of FP16 subnormals; BF16 has FP32's
#: exponent range, so its subnormals are negligible here.
FLOOR = np.array([2.0**-25, 2.0**-133])
TAME = 16.0  # a value whose interval exceeds this is scaled back by a power of two
MAX_BOUND = 20000.0  # no value may reach this (FP16 overflows at 65504)
MAX_SIZE = 256  # elements per value: small graphs run fast
MAX_OPS = 10  # ops (recipes) in the main graph
MAX_DEPTH = 2  # If/Loop nesting
OPSETS = (13, 23)

T = TypeVar("T")


# -- choosers ------------------------------------------------------------------------------------
class Chooser:
    """Source of every random decision (integers in a closed range; smaller = simpler)."""

    def integer(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def choice(self, options: Sequence[T]) -> T:
        return options[self.integer(0, len(options) - 1)]

    def boolean(self) -> bool:
        return self.integer(0, 1) == 1

    def rarely(self) -> bool:
        """True one time in four (False when shrunk)."""
        return self.integer(0, 3) == 3


class RandomChooser(Chooser):
    """Seed-driven decisions: the same seed always gives the same graph."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)


class HypothesisChooser(Chooser):
    """Decisions drawn from hypothesis, so failing graphs shrink."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        from hypothesis import strategies as st

        self._draw = draw
        self._st = st

    def integer(self, lo: int, hi: int) -> int:
        return self._draw(self._st.integers(lo, hi))


# -- values and their error bounds ---------------------------------------------------------------
@dataclass
class Val:
    """A value of the graph: static shape, the interval it lies in, its error bound per low type."""

    name: str
    shape: tuple[int, ...]
    elem: int = FLOAT
    lo: float = 0.0
    hi: float = 0.0
    err: np.ndarray = field(default_factory=lambda: np.zeros(2))
    value: np.ndarray | None = None  # known content of int64 values (Shape outputs)
    no_capture: bool = False  # a subgraph may not read it (see Scope.visible)

    @property
    def bound(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)


def rounding(lo: float, hi: float) -> np.ndarray:
    """Error of rounding one value of [lo, hi] to FP16 / BF16."""
    return UNIT * max(abs(lo), abs(hi)) + FLOOR


def weight_error(arr: np.ndarray) -> list[np.ndarray]:
    """Exact per-element error of storing ``arr`` in FP16 and in BF16 (as the converter does)."""
    a = arr.astype(np.float64)
    return [np.abs(a - arr.astype(t).astype(np.float64)) for t in _LOW_NP]


class Reject(Exception):
    """A recipe does not apply here (or would build something unsafe); nothing is kept."""


# -- building ------------------------------------------------------------------------------------
class Gen:
    """Model-wide state: the chooser, weights' rng, opset, unique names, graph inputs, feeds."""

    def __init__(self, ch: Chooser, opset: int, seed: int) -> None:
        self.ch = ch
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self._count = 0
        self.inputs: list[onnx.ValueInfoProto] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.main = Scope(self)

    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def float_input(self, shape: tuple[int, ...]) -> Val:
        name = self.fresh("x")
        self.inputs.append(helper.make_tensor_value_info(name, FLOAT, shape))
        self.feeds[name] = self.rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        # rounded to the low type by the boundary Cast (or fed low without keep_io_types)
        val = Val(name, shape, FLOAT, -1.0, 1.0, rounding(-1.0, 1.0))
        self.main.vals.append(val)
        return val

    def bool_input(self, shape: tuple[int, ...]) -> str:
        """A bool graph input (Where/If conditions are never computed from rounded floats)."""
        name = self.fresh("c")
        self.inputs.append(helper.make_tensor_value_info(name, BOOL, shape))
        self.feeds[name] = self.rng.integers(0, 2, shape).astype(bool)
        return name


class Scope:
    """One graph (main or a subgraph body): its nodes, initializers and the values it made."""

    def __init__(self, gen: Gen, parent: Scope | None = None) -> None:
        self.gen = gen
        self.ch = gen.ch
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.vals: list[Val] = []  # values this scope computed, in order (pickable)
        self.hidden: set[str] = set()  # raw values replaced by their tamed copy

    # -- values ----------------------------------------------------------------------------------
    def visible(self) -> list[Val]:
        # ORT 1.23 drops lossless Cast chains (float->float, float->double->float) even with
        # optimisations off and then cannot find their result when a subgraph reads it
        # ("Missing Input", see the report of issue 9's fuzz): such values stay in their scope.
        outer = self.parent.visible() if self.parent is not None else []
        outer = [v for v in outer if not v.no_capture]
        return outer + [v for v in self.vals if v.name not in self.hidden]

    def pick(self, pred: Callable[[Val], bool] = lambda v: True, elem: int = FLOAT) -> Val:
        """A visible value (recent ones first, so graphs grow deep); Reject if none fits."""
        cands = [v for v in self.visible() if v.elem == elem and pred(v)]
        if not cands:
            raise Reject
        return cands[len(cands) - 1 - self.ch.integer(0, len(cands) - 1)]

    def node(self, op: str, inputs: Sequence[str], n_out: int = 1, **attrs: Any) -> list[str]:
        outs = [self.gen.fresh(op.lower()) for _ in range(n_out)]
        name = self.gen.fresh("n" + op)
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs

    def const(self, arr: np.ndarray | float | int | bool, *, exact: bool = False) -> Val:
        """An initializer (or, sometimes, a Constant node) holding ``arr``."""
        arr = np.asarray(arr)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
        name = self.gen.fresh("w")
        tensor = numpy_helper.from_array(arr, name)
        if self.ch.rarely():
            self.nodes.append(
                helper.make_node(
                    "Constant", [], [name], name=self.gen.fresh("nConstant"), value=tensor
                )
            )
        else:
            self.inits.append(tensor)
        elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
        if elem != FLOAT:
            return Val(name, arr.shape, elem, value=arr)
        lo, hi = (float(arr.min()), float(arr.max())) if arr.size else (0.0, 0.0)
        err = np.array([e.max() if e.size else 0.0 for e in weight_error(arr)])
        return Val(name, arr.shape, FLOAT, lo, hi, np.zeros(2) if exact else err)

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.array(values, np.int64)).name

    def add(self, name: str, shape: Sequence[int], lo: float, hi: float, err: np.ndarray) -> Val:
        """Record a computed float value (its rounding included); tame it if it grew past TAME."""
        shape = tuple(int(d) for d in shape)
        if math.prod(shape) > MAX_SIZE or math.prod(shape) == 0 or len(shape) > 5:
            raise Reject
        b = max(abs(lo), abs(hi))
        if not (b < MAX_BOUND) or not np.all(np.isfinite(err)):
            raise Reject
        val = Val(name, shape, FLOAT, float(lo), float(hi), err + rounding(lo, hi))
        self.vals.append(val)
        if b > TAME:
            self.hidden.add(name)
            val = self.scale(val, TAME)
        return val

    def add_int(self, name: str, value: np.ndarray) -> Val:
        val = Val(name, value.shape, INT64, value=value.astype(np.int64))
        self.vals.append(val)
        return val

    # -- small rewrites the recipes share ----------------------------------------------------------
    def scale(self, x: Val, limit: float) -> Val:
        """x * 2**-k with |x| <= limit afterwards (exact in every float type)."""
        k = max(1, math.ceil(math.log2(x.bound / limit)))
        c = 2.0**-k
        (out,) = self.node("Mul", [x.name, self.const(np.float32(c), exact=True).name])
        val = Val(out, x.shape, FLOAT, x.lo * c, x.hi * c, x.err * c + FLOOR)
        self.vals.append(val)
        return val

    def positive(self, x: Val, minimum: float = 0.25) -> Val:
        """x itself if it is surely >= minimum (errors included), else |x| + 1."""
        if x.lo >= minimum and x.err[1] < x.lo / 4:
            return x
        (a,) = self.node("Abs", [x.name])
        alo = 0.0 if x.lo <= 0 <= x.hi else min(abs(x.lo), abs(x.hi))
        av = self.add(a, x.shape, alo, x.bound, x.err)
        one = self.const(np.float32(1.0), exact=True)
        (s,) = self.node("Add", [av.name, one.name])
        return self.add(s, x.shape, av.lo + 1, av.hi + 1, av.err)

    def as_rank(self, x: Val, rank: int) -> Val:
        """x reshaped to ``rank`` dims by leading 1s (x if it already has that rank)."""
        if x.rank == rank:
            return x
        if x.rank > rank:
            raise Reject
        shape = (1,) * (rank - x.rank) + x.shape
        (out,) = self.node("Reshape", [x.name, self.ints(shape)])
        return self.add(out, shape, x.lo, x.hi, x.err)

    def partner(self, shape: tuple[int, ...], *, nonzero: bool = False) -> Val:
        """Second operand of a broadcasting op: a visible value or a constant."""
        if self.ch.boolean():
            try:
                b = self.pick(lambda v: broadcastable(v.shape, shape))
                return self.positive(b, 0.5) if nonzero else b
            except Reject:
                pass
        r = self.ch.integer(0, len(shape))
        cshape = tuple(d if self.ch.boolean() else 1 for d in shape[len(shape) - r :])
        if nonzero:
            sign = 1.0 if self.ch.boolean() else -1.0
            return self.const(sign * self.gen.rng.uniform(0.5, 2.0, cshape))
        return self.const(self.gen.rng.normal(0.0, 1.0, cshape))


def broadcastable(*shapes: tuple[int, ...]) -> bool:
    try:
        out = np.broadcast_shapes(*shapes)
    except ValueError:
        return False
    return math.prod(out) <= MAX_SIZE and len(out) <= 5


def hull(*vals: Val) -> tuple[float, float]:
    return min(v.lo for v in vals), max(v.hi for v in vals)


def mul_interval(alo: float, ahi: float, blo: float, bhi: float) -> tuple[float, float]:
    p = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
    return min(p), max(p)
