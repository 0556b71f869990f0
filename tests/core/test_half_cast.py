"""half_cast.to_float16 gives numpy's float16 bits for every kind of float32.

bench/half_cast_check.py runs all 2**32 patterns; here, the ones where rounding can go wrong.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from amp_convert.core import half_cast, tensors


def numpy_bits(values: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return values.astype(np.float16).view(np.uint16)


def our_bits(values: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return half_cast.to_float16(values, np.empty(values.size, np.float16)).view(np.uint16)


def hard_values() -> np.ndarray:
    """Every float16 value, the float32 halfway between each pair of neighbours (the ties) and
    one float32 step either side of it, the overflow edge, subnormals, zeros, inf and NaN."""
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.sort(every[np.isfinite(every)].astype(np.float32))
    finite = np.unique(finite)
    ties = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    up = np.nextafter(ties, np.float32(np.inf))
    down = np.nextafter(ties, np.float32(-np.inf))
    edges = np.array(
        [
            65504,
            65519.996,
            65520,
            65536,
            3.4e38,
            2.0**-14,
            2.0**-24,
            2.0**-25,
            2.0**-26,
            1e-45,
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            -np.nan,
        ],
        np.float32,
    )
    nan_payloads = np.array([0x7F800001, 0xFFC00001, 0x7FFFFFFF], np.uint32).view(np.float32)
    return np.concatenate([finite, ties, up, down, edges, -edges, nan_payloads])


def test_hard_values_round_as_numpy_does() -> None:
    values = hard_values()
    assert values.size > 250_000
    np.testing.assert_array_equal(our_bits(values), numpy_bits(values))


@pytest.mark.integration
def test_every_pattern_of_two_exponent_ranges() -> None:
    """All 2**23 mantissas of an FP16-subnormal exponent and of a normal one, both signs."""
    for exponent in (0x33, 0x70):  # 2**-76 .. (flush) and 2**-15 (subnormal/normal edge)
        bits = (np.uint32(exponent) << 23) | np.arange(1 << 23, dtype=np.uint32)
        for sign in (0, 0x80000000):
            values = (bits | np.uint32(sign)).view(np.float32)
            np.testing.assert_array_equal(our_bits(values), numpy_bits(values))


@pytest.mark.parametrize("piece", [1, 7, 64])
def test_pieces_and_their_edges(monkeypatch: pytest.MonkeyPatch, piece: int) -> None:
    """Pieces of any size, an inf in one piece only (numpy's cast there, ours elsewhere)."""
    monkeypatch.setattr(half_cast, "PIECE", piece)
    rng = np.random.default_rng(piece)
    values = (rng.standard_normal(1000) * rng.choice([1e-6, 0.02, 100.0], 1000)).astype(np.float32)
    values[500] = 1e6  # rounds to inf: that piece goes to numpy
    values[10] = 0.0
    np.testing.assert_array_equal(our_bits(values), numpy_bits(values))


def test_a_low_copy_streams_the_same_bytes_as_its_whole_copy() -> None:
    """The save's chunks (half_cast) put together are the whole copy's astype bytes."""
    values = hard_values()
    low = tensors.LowCopy(ir.Tensor(values), ir.DataType.FLOAT16, saturate=False)
    out = bytearray(values.size * 2)
    with np.errstate(all="ignore"):
        streamed = low.chunk(0, values.size, None, out).tobytes()
        assert streamed == low.evaluate().tobytes()
