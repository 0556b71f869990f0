"""The element-type vocabulary: which types are "low", their numpy types, sizes, names and limits.

One place for every module (converter, validator, --auto) that speaks of FP16/BF16: the converter
and the emulating validator must agree on these, and copies of them drifted before. A low type is
a `LowType` object (`FP16`, `BF16`; `low_type_of` finds one by any of its spellings): its option
and display names, ONNX and numpy types and range limits travel together, and no module outside
``core/`` writes a limit such as 65504 again.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import onnx_ir as ir

FLOAT = ir.DataType.FLOAT
FLOAT16 = ir.DataType.FLOAT16
BFLOAT16 = ir.DataType.BFLOAT16
DOUBLE = ir.DataType.DOUBLE


@dataclass(frozen=True)
class LowType:
    """A low-precision float type: its names, its ONNX and numpy types, and what it can hold
    (largest finite value, smallest normal and subnormal, unit roundoff: half the spacing at 1,
    the largest relative error of a normal value)."""

    option: str  # the --dtype spelling: "fp16"
    name: str  # the reports' spelling: "FP16"
    onnx: ir.DataType
    numpy: np.dtype
    max: float
    min_normal: float
    min_subnormal: float
    roundoff: float

    @property
    def onnx_name(self) -> str:
        """The ONNX spelling: 'float16', 'bfloat16'."""
        return ir.DataType(self.onnx).name.lower()

    def __str__(self) -> str:
        return self.name


FP16 = LowType("fp16", "FP16", FLOAT16, np.dtype(np.float16), 65504.0, 2.0**-14, 2.0**-24, 2.0**-11)
BF16 = LowType(
    "bf16",
    "BF16",
    BFLOAT16,
    np.dtype(ml_dtypes.bfloat16),
    float(ml_dtypes.finfo(ml_dtypes.bfloat16).max),
    2.0**-126,
    2.0**-133,
    2.0**-8,
)
#: every low type, in the order the command line lists them
LOWS: tuple[LowType, ...] = (FP16, BF16)
#: the types the converter lowers FP32 to
LOW_TYPES: frozenset[ir.DataType] = frozenset(t.onnx for t in LOWS)
#: name suffixes for values and nodes the converter adds (``x_fp16``, ``x/cast_fp32``)
SUFFIX: dict[ir.DataType, str] = {FLOAT16: "fp16", BFLOAT16: "bf16", FLOAT: "fp32"}
NUMPY_TYPES: dict[ir.DataType, np.dtype] = {
    FLOAT16: np.dtype(np.float16),
    BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    FLOAT: np.dtype(np.float32),
    DOUBLE: np.dtype(np.float64),
}


def low_type_of(key: str | ir.DataType | LowType) -> LowType:
    """The LowType for 'fp16' / 'float16' / 'FP16' / FLOAT16 (and BF16 alike); KeyError else."""
    if isinstance(key, LowType):
        return key
    for t in LOWS:
        if key == t.onnx or (isinstance(key, str) and key.lower() in (t.option, t.onnx_name)):
            return t
    raise KeyError(key)


def numpy_type(dtype: ir.DataType) -> np.dtype:
    """The numpy dtype of an element type (bfloat16 through ml_dtypes)."""
    known = NUMPY_TYPES.get(dtype)
    return known if known is not None else ir.DataType(dtype).numpy()


def low_numpy_type(name: str) -> np.dtype:
    """'float16' / 'fp16' / 'bfloat16' / 'bf16' -> the numpy dtype of that low type."""
    return low_type_of(name).numpy


def low_type(name: str) -> ir.DataType:
    """'float16' / 'fp16' / 'bfloat16' / 'bf16' -> FLOAT16 / BFLOAT16 (KeyError otherwise)."""
    return low_type_of(name).onnx


def onnx_name(dtype: ir.DataType) -> str:
    """The ONNX spelling of an element type: FLOAT16 -> 'float16', FLOAT -> 'float'."""
    return ir.DataType(dtype).name.lower()


def type_str(dtype: ir.DataType) -> str:
    """The schema spelling of a tensor type: FLOAT16 -> 'tensor(float16)'."""
    return f"tensor({onnx_name(dtype)})"


def itemsize(dtype: ir.DataType | None) -> float:
    """Bytes per element; 0 for no type and for types without a fixed size (strings)."""
    try:
        return dtype.itemsize if dtype is not None else 0
    except (TypeError, ValueError):
        return 0


def is_low(dtype: ir.DataType | int | None) -> bool:
    """Whether an element type (or its TensorProto number) is one of the low types."""
    return dtype is not None and dtype in LOW_TYPES
