"""float32 -> float16 rounding, bit for bit numpy's, in vectorised integer steps.

numpy's float32 -> float16 cast converts one element at a time (`npy_floatbits_to_halfbits`;
numpy's x86-64 baseline has no F16C), about 2.3 GB/s of FP32 per core here, and raises the
underflow flag element by element for every FP16-subnormal result. On a big model it is the
largest CPU cost of the save. Here the same round-to-nearest-even is done with whole-array
integer ops on pieces that stay in the L2 cache (about 3.2 GB/s):

- a value whose magnitude is a normal FP16 after rounding: drop 13 mantissa bits with
  round-half-to-even (`+ 0xFFF + odd bit`), rebias the exponent (127 -> 15) in the same add;
  the sign rides along in bit 31 and is put back at bit 15;
- a value below the smallest normal FP16 (2**-14; zeros too): one float32 add of 0.5 leaves the
  value rounded to a multiple of 2**-24 (the FP16 subnormal spacing) in the low mantissa bits,
  by the FPU's own round-to-nearest-even;
- a piece holding anything that rounds past 65504 (inf), inf or NaN goes to numpy's cast.

`bench/half_cast_check.py` compares every one of the 2**32 float32 bit patterns with numpy's
cast; `tests/core/test_half_cast.py` checks the boundaries and ties.
"""

from __future__ import annotations

import numpy as np

#: elements per piece: four uint32/bool temporaries of this size fit in a core's L2
PIECE = 1 << 16
_ABS = np.uint32(0x7FFFFFFF)
#: |bits| from here up round to FP16 inf (65520 = 65504 + half a step), or are inf/NaN
_TO_INF = 0x477FF000
#: |bits| below this (2**-14) are FP16 subnormals or zero after rounding
_MIN_NORMAL = np.uint32(0x38800000)
#: adds (15 - 127) << 23 to the exponent, and 0xFFF, the round-half-up part, in one step
_REBIAS_ROUND = np.uint32(0xC8000FFF)
_HALF = np.float32(0.5)
_HALF_BITS = np.uint32(0x3F000000)


def to_float16(values: np.ndarray, out: np.ndarray) -> np.ndarray:
    """`values` (contiguous float32) rounded to float16 into `out` (float16, same size)."""
    bits = values.reshape(-1).view(np.uint32)
    result = out.reshape(-1).view(np.uint16)
    size = min(bits.size, PIECE)
    magnitude = np.empty(size, np.uint32)
    work = np.empty(size, np.uint32)
    small = np.empty(size, bool)
    for start in range(0, bits.size, PIECE):
        u = bits[start : start + PIECE]
        n = u.size
        h = result[start : start + n]
        a, t, m = magnitude[:n], work[:n], small[:n]
        np.bitwise_and(u, _ABS, out=a)
        if a.max() >= _TO_INF:
            np.copyto(h.view(np.float16), u.view(np.float32), casting="unsafe")
            continue
        np.right_shift(u, 13, out=t)
        np.bitwise_and(t, 1, out=t)  # the bit kept last: ties go to even
        np.add(t, u, out=t)
        np.add(t, _REBIAS_ROUND, out=t)  # no carry reaches the sign for normal results
        np.right_shift(t, 13, out=t)
        np.copyto(h, t, casting="unsafe")  # the low 16 bits: the magnitude (sign is bit 18)
        np.right_shift(u, 16, out=t)
        np.bitwise_and(t, 0x8000, out=t)
        np.bitwise_or(h, t, out=h, casting="unsafe")
        np.less(a, _MIN_NORMAL, out=m)
        if m.any():
            where = np.flatnonzero(m)
            rounded = (a[where].view(np.float32) + _HALF).view(np.uint32) - _HALF_BITS
            h[where] = rounded | ((u[where] >> 16) & 0x8000)
    return out
