"""The low types are objects: names, ONNX and numpy types and limits in one place (core/)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest

from amp_convert import ConvertOptions
from amp_convert.core.dtypes import BF16, FP16, LOW_TYPES, LOWS, low_type_of


def test_every_spelling_finds_its_low_type() -> None:
    for low in LOWS:
        for key in (low, low.option, low.option.upper(), low.onnx_name, low.onnx, low.name):
            assert low_type_of(key) is low
    with pytest.raises(KeyError):
        low_type_of("fp8")
    assert low_type_of(ir.DataType.FLOAT16) is FP16 and FP16.onnx_name == "float16"
    assert {FP16.onnx, BF16.onnx} == LOW_TYPES


def test_limits_are_the_number_formats_own() -> None:
    for low in LOWS:
        info = ml_dtypes.finfo(low.numpy)
        assert low.max == float(info.max)
        assert low.min_normal == float(info.smallest_normal)
        assert low.min_subnormal == float(info.smallest_subnormal)
        assert low.roundoff == float(info.eps) / 2
    assert (FP16.max, FP16.numpy) == (65504.0, np.dtype(np.float16))


def test_the_options_hand_the_low_type_down() -> None:
    assert ConvertOptions(dtype="bfloat16").low is BF16
    assert ConvertOptions(dtype=np.float16).low is FP16 and ConvertOptions().low_dtype == FP16.onnx
