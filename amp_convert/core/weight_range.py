"""Does a weight survive the low type? Judged by what rounding does to its readers (pure functions).

A weight stored in FP16 or BF16 changes in three ways:
- **overflow**: |v| beyond the type's largest finite value becomes inf (FP16 65504, BF16
  ~3.39e38). A hard rule: any finite value beyond max keeps the weight FP32 (never clamped).
- **flush to zero**: nonzeros of at most half the smallest subnormal become 0 (FP16 2**-25
  ~ 3e-8, BF16 2**-134);
- **subnormal loss**: nonzeros below the smallest normal (FP16 2**-14 ~ 6.1e-5, BF16 2**-126)
  keep fewer significant bits, down to one.
Flush and subnormal loss are judged by their *effect*, not by how many values they touch
(`judge`): a weight read as a factor (MatMul, Conv, Mul...) keeps FP32 only when what these
range losses take from it exceeds `unit roundoff` of its norm, the most any tensor of normal
values loses to rounding; a weight that is only *added* to a computed value (a bias) never keeps
FP32 for them (`is_addend`). Its readers then stay FP32 with the reason in the report.

One exception to overflow, the **mask fill**: a scalar of magnitude >= SENTINEL (float32's
lowest, -1e9) used only as the fill of a masked path (Where's branches, Min/Max bounds, an Add
whose other operand comes from a mask, a Mul by a 0/1 mask indicator such as Hugging Face's
`(1 - mask) * finfo.min` or transformers' `ConstantOfShape(finfo.min) * triu(ones)`) is a
"minus infinity", not data; it is stored saturated to the low type's max, still far beyond any
activation. As a divisor, or a multiplier of anything but a 0/1 indicator, it is data (1e9 / x
saturated to 65504 / x is 15,000x off), so the ordinary rules apply. A 0/1 indicator times the
fill is exactly 0 or the fill, so saturating it changes nothing but the size of "minus
infinity"; left as inf, `0 * -inf` is NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from amp_convert.core.dtypes import LowType, low_type_of

_CHUNK = 1 << 22
#: scan works a chunk of this many elements at a time and sums the chunks' stats in order:
#: scanning each chunk apart (on other threads) and summing them in order gives the same stats
SCAN_CHUNK = _CHUNK
#: a scalar constant this large, used as a mask fill, is a "minus infinity", not data
SENTINEL = 1e9


@dataclass(frozen=True)
class RangeStats:
    """One pass over a weight: its largest finite |value|, how its nonzeros fare, and the
    squared norms that say what the range losses take from it."""

    peak: float = 0.0
    nonzero: int = 0
    overflow: int = 0  # finite values beyond the low type's max
    flushed: int = 0  # nonzeros that become zero
    subnormal: int = 0  # nonzeros below the smallest normal (flushed ones included)
    sumsq: float = 0.0  # squared norm of the finite values
    loss_sq: float = 0.0  # squared rounding error of the values below the smallest normal
    flush_sq: float = 0.0  # the part of loss_sq from values that become zero

    def __add__(self, other: RangeStats) -> RangeStats:
        return RangeStats(
            max(self.peak, other.peak),
            self.nonzero + other.nonzero,
            self.overflow + other.overflow,
            self.flushed + other.flushed,
            self.subnormal + other.subnormal,
            self.sumsq + other.sumsq,
            self.loss_sq + other.loss_sq,
            self.flush_sq + other.flush_sq,
        )

    @property
    def range_loss(self) -> float:
        """What flush and subnormal rounding take from the weight, relative to its norm."""
        return math.sqrt(self.loss_sq / self.sumsq) if self.sumsq > 0 else 0.0


def scan(
    array: np.ndarray, limits: LowType, scratch: bool = False, work: np.ndarray | None = None
) -> RangeStats:
    """RangeStats of `array` against `limits`, a chunk at a time (no whole-size temporary).

    Only the values below the smallest normal are rounded here (usually none or a few): the
    others lose at most `roundoff` of themselves, whatever the weight. `scratch`: `array` is
    the caller's to overwrite (a read buffer), so its magnitudes are taken in place; else into
    `work` when given (a caller's float array of at least a chunk, or of `array`'s size).
    """
    flat = array.reshape(-1)
    total = RangeStats()
    mask = np.empty(min(flat.size, _CHUNK), dtype=bool)
    for start in range(0, flat.size, _CHUNK):
        part = flat[start : start + _CHUNK]
        out = part if scratch else None if work is None else work[: part.size]
        total = total + _scan_chunk(part, limits, out, mask[: part.size])
    return total


def _scan_chunk(
    part: np.ndarray, limits: LowType, out: np.ndarray | None, mask: np.ndarray
) -> RangeStats:
    """One chunk's stats, in as few passes as numpy allows: |values| (into `out` when given),
    their max (NaN or inf there is the only sign of a non-finite value: then they are masked
    out), one comparison with the smallest normal, the sum of squares; the few values below
    the smallest normal are then judged apart."""
    finite = np.abs(part, out=out)
    peak = float(finite.max()) if finite.size else 0.0
    if not math.isfinite(peak):  # NaN propagates through max; inf is the max
        finite = finite[np.isfinite(finite)]
        if not finite.size:
            return RangeStats()
        peak = float(finite.max())
        mask = mask[: finite.size]
    np.less(finite, limits.min_normal, out=mask)  # zeros and the values at risk: few
    below = finite[mask] if mask.any() else finite[:0]
    tiny = below[below > 0].astype(np.float64)
    rounded = tiny.astype(np.float32).astype(limits.numpy).astype(np.float64)
    flushed = tiny[rounded == 0]
    return RangeStats(
        peak=peak,
        nonzero=finite.size - (below.size - tiny.size),
        overflow=int(np.count_nonzero(finite > limits.max)) if peak > limits.max else 0,
        flushed=flushed.size,
        subnormal=tiny.size,
        # float32 sums suffice for a ratio compared with a threshold; a square beyond
        # float32 (BF16 weights above 1.8e19) makes the norm inf and the losses negligible
        sumsq=_sumsq(finite),
        loss_sq=float(np.dot(rounded - tiny, rounded - tiny)),
        flush_sq=float(np.dot(flushed, flushed)),
    )


def _sumsq(values: np.ndarray) -> float:
    """Sum of squares in float32 (inf, silently, past float32's range), in float64 when the
    float32 sum may have underflowed (a tensor of BF16-subnormal values: 1e-39 squared is 0)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        total = float(np.dot(values, values))
    if total < 1e-30:
        wide = values.astype(np.float64)
        total = float(np.dot(wide, wide))
    return total


@dataclass(frozen=True)
class Verdict:
    """Whether a weight may be stored low: "fits", "saturate" (a mask fill) or "keep"."""

    action: str
    detail: str = ""


def judge(
    stats: RangeStats, limits: LowType, size: int, mask_fill: bool, addend: bool = False
) -> Verdict:
    """The verdict for a weight of `size` elements with `stats`; `mask_fill`: see the module;
    `addend`: every reader adds the weight, unscaled, to a computed value (see `is_addend`).

    - Overflow keeps the weight FP32 (a hard rule), except a scalar mask fill, saturated.
    - An addend never keeps FP32 for flush or subnormal loss. Such a value is below the smallest
      normal, so storing it errs by at most half the smallest subnormal (FP16 2**-25 ~ 3e-8);
      the reader's low result is rounded to within half its own spacing, never finer than that
      same 2**-25, and 2**-11 ~ 4.9e-4 for a result of 1. A bias of 1e-5 added to O(1)
      activations errs by 3e-8 where the sum already errs by up to 4.9e-4: 1/16384 of it.
    - Any other reader (a factor: MatMul, Conv, Mul...) computes sum(w * x), whose error from
      the weight is sum(dw * x): relative to the result, about |dw| / |w| (norms). Every weight
      loses up to the roundoff u (FP16 2**-11 ~ 4.9e-4, BF16 2**-8 ~ 3.9e-3) of its norm to
      ordinary rounding; the weight keeps FP32 only when its range losses alone exceed that
      (at most doubling the error the low type brings to every weight). A conv weight of
      std 0.02 with a 3% tail flushed entirely loses sqrt(0.03) * 3e-8 / 0.02 ~ 2.6e-7 of its
      norm: it fits; a weight of values near 1e-8 loses all of it, one of values 1e-6..5e-5 about
      6e-4 (each value keeps 4 to 10 bits): both keep FP32.
    """
    low = limits.name
    if stats.overflow:
        if size == 1 and stats.peak >= SENTINEL and mask_fill:
            detail = f"mask fill of magnitude {stats.peak:.3g} stored as +-{limits.max:g}"
            return Verdict("saturate", detail)
        detail = f"exceeds {low}: max |value| {stats.peak:.4g} > {limits.max:g} (never clamped)"
        return Verdict("keep", detail)
    loss = stats.range_loss
    if addend or loss <= limits.roundoff:
        return Verdict("fits")
    share = stats.subnormal / stats.nonzero if stats.nonzero else 0.0
    if 2 * stats.flush_sq >= stats.loss_sq:
        share = stats.flushed / stats.nonzero if stats.nonzero else 0.0
        what = f"would flush to zero in {low}: {share:.1%} of its nonzero values are <= " + (
            f"{limits.min_subnormal / 2:.3g}"
        )
    else:
        what = f"loses precision in {low}: {share:.1%} of its nonzero values are below its " + (
            f"smallest normal {limits.min_normal:.3g}"
        )
    return Verdict(
        "keep",
        f"{what}, {loss:.3%} of its norm lost (ordinary rounding: at most {limits.roundoff:.3%})",
    )


def check_weight(
    array: np.ndarray, low: ir.DataType, uses: Iterable[tuple[ir.Node, int]], copied: bool = False
) -> Verdict:
    """The verdict for a weight (as float values) stored in `low`, read by `uses`; `copied`: a
    value its node copies into its low output (see FloatAttribute): only overflow counts."""
    return weigh(scan(array, low_type_of(low)), low, array.size, uses, copied)


def weigh(
    stats: RangeStats,
    low: ir.DataType,
    size: int,
    uses: Iterable[tuple[ir.Node, int]],
    copied: bool = False,
) -> Verdict:
    """check_weight's verdict from the weight's RangeStats, however they were gathered (one
    scan, or the scans of its SCAN_CHUNK-element chunks summed in order: the same stats)."""
    uses = list(uses)
    fill = bool(stats.overflow) and size == 1 and not copied and is_mask_fill(uses)
    return judge(stats, low_type_of(low), size, fill, addend=copied or is_addend(uses))


#: ops whose inputs may be a mask fill, and which of their inputs (None: any)
_FILL_SLOTS = {"Where": (1, 2), "Min": None, "Max": None, "Add": None, "Mul": None}
#: ops a mask passes through unchanged in meaning on its way to the fill
_MASK_CARRIERS = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Expand", "Transpose", "Not"}
_MASK_SOURCES = {
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Where",
    "IsNaN",
    "IsInf",
}


def is_mask_fill(uses: Iterable[tuple[ir.Node, int]]) -> bool:
    """True when every use is a fill: Where's branches, a Min/Max bound, an Add to a mask or a
    Mul by a 0/1 mask indicator.

    Div, a Mul by anything else and every other reader make the value data, never a fill.
    """
    uses = list(uses)
    if not uses:
        return False
    for node, idx in uses:
        slots = _FILL_SLOTS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if node.op_type not in _FILL_SLOTS or node.domain not in ("", "ai.onnx"):
            return False
        if slots is not None and idx not in slots:
            return False
        if node.op_type in ("Add", "Mul"):
            others = [v for i, v in enumerate(node.inputs) if i != idx and v is not None]
            test = _from_mask if node.op_type == "Add" else _indicator
            if not others or not all(test(v) for v in others):
                return False
    return True


#: ONNX ops that add an input, unscaled, to what they compute, and which input (None: any)
_ADDEND_SLOTS: dict[str, tuple[int, ...] | None] = {
    "Add": None,
    "Sub": None,
    "Conv": (2,),
    "ConvTranspose": (2,),
    "Gemm": (2,),
    "LayerNormalization": (2,),
    "InstanceNormalization": (2,),
    "GroupNormalization": (2,),
}


#: ops that move a weight's values unchanged (a bias reshaped to [1, C, 1, 1] before its Add)
_VALUE_MOVERS = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Expand", "Identity"}


def is_addend(uses: Iterable[tuple[ir.Node, int]], depth: int = 4) -> bool:
    """True when every reader adds the weight, unscaled, to a value computed at run time: an
    Add/Sub whose other operand is not a constant, a Conv/ConvTranspose/Gemm bias (Gemm with
    beta 1), a normalization's bias; through ops that only move its values (Reshape...).
    Its rounding then counts against the sum (see `judge`).
    """
    uses = list(uses)
    if not uses:
        return False
    for node, idx in uses:
        if node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type in _VALUE_MOVERS and idx == 0 and depth > 0:
            out = node.outputs[0]
            if out.is_graph_output() or not is_addend(out.uses(), depth - 1):
                return False
            continue
        if node.op_type not in _ADDEND_SLOTS:
            return False
        slots = _ADDEND_SLOTS[node.op_type]
        if slots is not None and idx not in slots:
            return False
        if node.op_type == "Gemm":
            beta = node.attributes.get("beta")
            if beta is not None and beta.value != 1.0:
                return False
        if node.op_type in ("Add", "Sub"):
            others = [v for i, v in enumerate(node.inputs) if i != idx]
            if not others or any(v is None or _is_constant(v) for v in others):
                return False
    return True


def _is_constant(value: ir.Value) -> bool:
    """An initializer, a Constant node's output or one of ConstantOfShape (known when built)."""
    if value.const_value is not None and not value.is_graph_input():
        return True
    producer = value.producer()
    return producer is not None and producer.op_type in ("Constant", "ConstantOfShape")


def _indicator(value: ir.Value) -> bool:
    """Whether `value` is a 0/1 mask indicator: a mask, `1 - mask` (Sub from a constant 1), or
    a triangle of ones (Trilu of ones: transformers' causal mask)."""
    producer = value.producer()
    if producer is not None and producer.op_type == "Trilu" and producer.inputs:
        ones = producer.inputs[0]
        return ones is not None and _is_one(ones)
    if producer is not None and producer.op_type == "Sub" and len(producer.inputs) == 2:
        one, rest = producer.inputs
        if one is not None and rest is not None and _is_one(one):
            return _from_mask(rest)
    return _from_mask(value)


def _is_one(value: ir.Value) -> bool:
    """A constant (initializer, Constant node, ConstantOfShape fill) whose every element is 1."""
    tensor = value.const_value
    if tensor is None:
        producer = value.producer()
        attr = producer.attributes.get("value") if producer is not None else None
        kinds = ("Constant", "ConstantOfShape")
        if producer is None or producer.op_type not in kinds or attr is None:
            return False
        tensor = attr.as_tensor()
    if tensor.size > 1024:
        return False
    return bool(np.all(np.asarray(tensor.numpy()) == 1))


def _from_mask(value: ir.Value, depth: int = 8) -> bool:
    """Whether `value` is computed from a boolean mask (through shape ops and casts)."""
    for _ in range(depth):
        if value.dtype == ir.DataType.BOOL:
            return True
        producer = value.producer()
        if producer is None:
            return "mask" in (value.name or "").lower()
        if producer.op_type in _MASK_SOURCES:
            return True
        if producer.op_type not in _MASK_CARRIERS or not producer.inputs:
            return False
        first = producer.inputs[0]
        if first is None:
            return False
        value = first
    return False


def saturation_detail(tensor: ir.TensorProtocol, low: ir.DataType) -> str:
    """The report's words for a mask fill stored saturated (a scalar: reading it is cheap)."""
    peak = float(np.max(np.abs(np.asarray(tensor.numpy(), dtype=np.float64))))
    return f"mask fill of magnitude {peak:.3g} stored as +-{low_type_of(low).max:g}"


def saturated(array: np.ndarray, dtype: ir.DataType) -> np.ndarray:
    """`array` clipped to the low type's finite range (for a reported mask fill only)."""
    limit = low_type_of(dtype).max
    return np.clip(array, -limit, limit)


@dataclass(frozen=True)
class FloatAttribute:
    """A float value a low node holds in an attribute. `copied`: the node only copies it into
    its output (Pad's value), so its rounding is the output's own and only overflow counts."""

    name: str
    values: np.ndarray
    copied: bool = False


def float_attributes(node: ir.Node) -> list[FloatAttribute]:
    """The float values a low node holds in attributes and computes in its low type.

    ConstantOfShape's `value` is stored in the node's output type by the rewrite and read like
    a weight; Pad's `value` (before opset 11) is cast to the data's type by the kernel. An FP32
    min left unchecked in either is -inf in FP16. A Constant's `value` is judged like an
    initializer (it is a constant tensor); Clip's bounds before opset 11 need no check: a low
    output clipped to a rounded bound is the rounded FP32 result, and a bound beyond the low
    range bounds nothing a finite low value can reach (the rewrite notes where it stores one
    saturated).
    """
    if node.domain not in ("", "ai.onnx"):
        return []
    attr = node.attributes.get("value")
    if attr is None:
        return []
    if node.op_type == "ConstantOfShape" and attr.type == ir.AttributeType.TENSOR:
        tensor = attr.as_tensor()
        if tensor.dtype != ir.DataType.FLOAT:
            return []
        return [FloatAttribute("value", np.asarray(tensor.numpy(), np.float32))]
    if node.op_type == "Pad" and attr.type == ir.AttributeType.FLOAT:
        return [FloatAttribute("value", np.array([attr.as_float()], np.float32), copied=True)]
    return []
