"""Reading weights without holding them: range scans in chunks, lazy low-precision copies.

A 2 GB model's weights are memory-mapped by onnx-ir; these helpers read them a chunk at a time and
drop the mapping afterwards, so peak memory stays near one chunk, and the low-precision copy of a
weight is only made when the save streams it to disk.
"""

from __future__ import annotations

import contextlib

import numpy as np
import onnx_ir as ir

from amp_convert.core.precision import low_array
from amp_convert.errors import InputError

_CHUNK = 1 << 22


def read(tensor: ir.TensorProtocol) -> np.ndarray:
    """The tensor's values; a data file that changed or vanished since load is an InputError."""
    try:
        return np.asarray(tensor.numpy())
    except (OSError, ValueError, BufferError) as e:
        what = getattr(tensor, "path", None) or "its data"
        raise InputError(
            f"weight {tensor.name!r}: cannot read {what} ({e}); was the external data file "
            "changed or truncated during the conversion?"
        ) from None


def max_abs_finite(tensor: ir.TensorProtocol) -> float:
    """Largest finite |value|, read in chunks so a memory-mapped weight is never copied whole.

    min/max per chunk need no temporary; only a chunk holding NaN/Inf is masked. A memory-mapped
    tensor is released afterwards so its pages do not stay resident.
    """
    best = _max_abs(read(tensor).reshape(-1))
    release(tensor)
    return best


def _max_abs(flat: np.ndarray) -> float:
    best = 0.0
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start : start + _CHUNK]
        lo, hi = float(chunk.min()), float(chunk.max())
        if not (np.isfinite(lo) and np.isfinite(hi)):
            finite = chunk[np.isfinite(chunk)]
            if not finite.size:
                continue
            lo, hi = float(finite.min()), float(finite.max())
        best = max(best, abs(lo), abs(hi))
    return best


def release(tensor: ir.TensorProtocol) -> None:
    """Drop the memory map of an external tensor (it is mapped again if read again)."""
    if isinstance(tensor, ir.ExternalTensor):
        # someone may still hold a view: then it stays mapped, which is only slower
        with contextlib.suppress(BufferError):
            tensor.release()


def to_low(
    tensor: ir.TensorProtocol, low: ir.DataType, lazy: bool = True, saturate: bool = False
) -> ir.TensorProtocol:
    """The tensor rounded to the low type; lazy so big weights stream at save time."""

    def convert() -> ir.Tensor:
        array = low_array(read(tensor), low, saturate)
        release(tensor)  # the converted copy is all the save needs
        return ir.Tensor(array, dtype=low, name=tensor.name)

    if not lazy:
        return convert()
    return ir.LazyTensor(convert, dtype=low, shape=ir.Shape(tensor.shape.numpy()), name=tensor.name)
