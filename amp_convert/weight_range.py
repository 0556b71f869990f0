"""Does a weight survive the low type? Range and precision checks as pure functions.

A weight stored in FP16 or BF16 must not change silently. Three ways it can:
- **overflow**: |v| beyond the type's largest finite value becomes inf (FP16 65504, BF16
  ~3.39e38; values in between round to the max or to inf, so anything beyond max is refused);
- **flush to zero**: nonzeros of at most half the smallest subnormal become 0 (FP16 2**-25
  ~ 3e-8, BF16 2**-134): a weight of 1e-8 in FP16 is all zeros, its output too;
- **subnormal loss**: nonzeros below the smallest normal (FP16 2**-14 ~ 6.1e-5, BF16 2**-126)
  keep fewer significant bits, down to one.
A weight fails when any finite value overflows, when more than FLUSH_SHARE of its nonzeros
flush to zero, or more than SUBNORMAL_SHARE of them land in the subnormal range; its readers
then stay FP32 with the reason in the report, like an overflowing weight.

One exception, the **mask fill**: a scalar of magnitude >= SENTINEL (float32's lowest, -1e9)
used only as the fill of a masked path (Where's branches, Min/Max bounds, an Add whose other
operand comes from a mask, a Mul by a 0/1 mask indicator such as Hugging Face's
`(1 - mask) * finfo.min`) is a "minus infinity", not data; it is stored saturated to the low
type's max, still far beyond any activation. As a divisor, or a multiplier of anything but a 0/1
indicator, it is data (1e9 / x saturated to 65504 / x is 15,000x off), so the ordinary rules
apply. A 0/1 indicator times the fill is exactly 0 or the fill, so saturating it changes nothing
but the size of "minus infinity".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import onnx_ir as ir

_CHUNK = 1 << 22
#: scan works a chunk of this many elements at a time and sums the chunks' stats in order:
#: scanning each chunk apart (on other threads) and summing them in order gives the same stats
SCAN_CHUNK = _CHUNK
#: share of a weight's nonzeros that may flush to zero in the low type
FLUSH_SHARE = 0.01
#: share of a weight's nonzeros that may fall below the low type's smallest normal
SUBNORMAL_SHARE = 0.10
#: a scalar constant this large, used as a mask fill, is a "minus infinity", not data
SENTINEL = 1e9


@dataclass(frozen=True)
class LowLimits:
    """What a low type can hold: largest finite, smallest normal, smallest subnormal."""

    name: str
    max: float
    min_normal: float
    min_subnormal: float


LIMITS = {
    ir.DataType.FLOAT16: LowLimits("FP16", 65504.0, 2.0**-14, 2.0**-24),
    ir.DataType.BFLOAT16: LowLimits(
        "BF16", float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 2.0**-126, 2.0**-133
    ),
}


@dataclass(frozen=True)
class RangeStats:
    """One pass over a weight: its largest finite |value| and how its nonzeros fare."""

    peak: float = 0.0
    nonzero: int = 0
    overflow: int = 0  # finite values beyond the low type's max
    flushed: int = 0  # nonzeros that become zero
    subnormal: int = 0  # nonzeros below the smallest normal (flushed ones included)

    def __add__(self, other: RangeStats) -> RangeStats:
        return RangeStats(
            max(self.peak, other.peak),
            self.nonzero + other.nonzero,
            self.overflow + other.overflow,
            self.flushed + other.flushed,
            self.subnormal + other.subnormal,
        )


def scan(array: np.ndarray, limits: LowLimits) -> RangeStats:
    """RangeStats of `array` against `limits`, a chunk at a time (no whole-size temporary)."""
    flat = array.reshape(-1)
    total = RangeStats()
    for start in range(0, flat.size, _CHUNK):
        chunk = np.abs(flat[start : start + _CHUNK])
        finite = chunk[np.isfinite(chunk)] if not np.all(np.isfinite(chunk)) else chunk
        if not finite.size:
            continue
        nonzero = finite > 0
        total = total + RangeStats(
            peak=float(finite.max()),
            nonzero=int(nonzero.sum()),
            overflow=int(np.sum(finite > limits.max)),
            flushed=int(np.sum(nonzero & (finite <= limits.min_subnormal / 2))),
            subnormal=int(np.sum(nonzero & (finite < limits.min_normal))),
        )
    return total


@dataclass(frozen=True)
class Verdict:
    """Whether a weight may be stored low: "fits", "saturate" (a mask fill) or "keep"."""

    action: str
    detail: str = ""


def judge(stats: RangeStats, limits: LowLimits, size: int, mask_fill: bool) -> Verdict:
    """The verdict for a weight of `size` elements with `stats`; `mask_fill`: see the module."""
    low = limits.name
    if stats.overflow:
        if size == 1 and stats.peak >= SENTINEL and mask_fill:
            detail = f"mask fill of magnitude {stats.peak:.3g} stored as +-{limits.max:g}"
            return Verdict("saturate", detail)
        detail = f"exceeds {low}: max |value| {stats.peak:.4g} > {limits.max:g} (never clamped)"
        return Verdict("keep", detail)
    losses = (
        (stats.flushed, FLUSH_SHARE, f"would flush to zero in {low}", "are <=",
         limits.min_subnormal / 2),
        (stats.subnormal, SUBNORMAL_SHARE, f"loses precision in {low}",
         "are below its smallest normal", limits.min_normal),
    )  # fmt: skip
    for count, allowed, what, where, bound in losses:
        share = count / stats.nonzero if stats.nonzero else 0.0
        if share > allowed:
            return Verdict("keep", f"{what}: {share:.1%} of its nonzero values {where} {bound:.3g}")
    return Verdict("fits")


def check_weight(
    array: np.ndarray, low: ir.DataType, uses: Iterable[tuple[ir.Node, int]]
) -> Verdict:
    """The verdict for a weight (as float values) stored in `low`, read by `uses`."""
    return weigh(scan(array, LIMITS[low]), low, array.size, uses)


def weigh(
    stats: RangeStats, low: ir.DataType, size: int, uses: Iterable[tuple[ir.Node, int]]
) -> Verdict:
    """check_weight's verdict from the weight's RangeStats, however they were gathered (one
    scan, or the scans of its SCAN_CHUNK-element chunks summed in order: the same stats)."""
    fill = bool(stats.overflow) and size == 1 and is_mask_fill(uses)
    return judge(stats, LIMITS[low], size, fill)


#: ops whose inputs may be a mask fill, and which of their inputs (None: any)
_FILL_SLOTS = {"Where": (1, 2), "Min": None, "Max": None, "Add": None, "Mul": None}
#: ops a mask passes through unchanged in meaning on its way to the fill
_MASK_CARRIERS = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Expand", "Transpose", "Not"}
_MASK_SOURCES = {
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where",
    "IsNaN", "IsInf",
}  # fmt: skip


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


def _indicator(value: ir.Value) -> bool:
    """Whether `value` is a 0/1 mask indicator: a mask, or `1 - mask` (Sub from a constant 1)."""
    producer = value.producer()
    if producer is not None and producer.op_type == "Sub" and len(producer.inputs) == 2:
        one, rest = producer.inputs
        if one is not None and rest is not None and _is_one(one):
            return _from_mask(rest)
    return _from_mask(value)


def _is_one(value: ir.Value) -> bool:
    """A constant (initializer or Constant node) whose every element is 1."""
    tensor = value.const_value
    if tensor is None:
        producer = value.producer()
        attr = producer.attributes.get("value") if producer is not None else None
        if producer is None or producer.op_type != "Constant" or attr is None:
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
    return f"mask fill of magnitude {peak:.3g} stored as +-{LIMITS[low].max:g}"


def saturated(array: np.ndarray, dtype: ir.DataType) -> np.ndarray:
    """`array` clipped to the low type's finite range (for a reported mask fill only)."""
    limit = LIMITS[dtype].max
    return np.clip(array, -limit, limit)
