"""The element-type vocabulary: which types are "low", their numpy types, sizes and names.

One place for every module (converter, validator, --auto) that speaks of FP16/BF16: the converter
and the emulating validator must agree on these, and copies of them drifted before.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir

FLOAT = ir.DataType.FLOAT
FLOAT16 = ir.DataType.FLOAT16
BFLOAT16 = ir.DataType.BFLOAT16
DOUBLE = ir.DataType.DOUBLE
#: the types the converter lowers FP32 to
LOW_TYPES: frozenset[ir.DataType] = frozenset({FLOAT16, BFLOAT16})
#: the option spelling of each low type (``--dtype fp16``) and back
LOW_BY_OPTION: dict[str, ir.DataType] = {"fp16": FLOAT16, "bf16": BFLOAT16}
#: name suffixes for values and nodes the converter adds (``x_fp16``, ``x/cast_fp32``)
SUFFIX: dict[ir.DataType, str] = {FLOAT16: "fp16", BFLOAT16: "bf16", FLOAT: "fp32"}
NUMPY_TYPES: dict[ir.DataType, np.dtype] = {
    FLOAT16: np.dtype(np.float16),
    BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    FLOAT: np.dtype(np.float32),
    DOUBLE: np.dtype(np.float64),
}
FP16_MAX = 65504.0
#: smallest positive normal FP16 value; below it values lose bits (subnormals) or flush to zero
FP16_MIN_NORMAL = 6.103515625e-05


def numpy_type(dtype: ir.DataType) -> np.dtype:
    """The numpy dtype of an element type (bfloat16 through ml_dtypes)."""
    known = NUMPY_TYPES.get(dtype)
    return known if known is not None else ir.DataType(dtype).numpy()


def low_numpy_type(name: str) -> np.dtype:
    """'float16' / 'fp16' / 'bfloat16' / 'bf16' -> the numpy dtype of that low type."""
    return NUMPY_TYPES[low_type(name)]


def low_type(name: str) -> ir.DataType:
    """'float16' / 'fp16' / 'bfloat16' / 'bf16' -> FLOAT16 / BFLOAT16 (KeyError otherwise)."""
    key = name.lower()
    if key in LOW_BY_OPTION:
        return LOW_BY_OPTION[key]
    return {onnx_name(t): t for t in LOW_TYPES}[key]


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
