"""amp-convert: FP32 ONNX models to mixed precision (FP16/BF16) that load, run fast, stay accurate.

Public API: convert, convert_file, validate, Level, ConvertOptions, the reports and the errors.
Names are imported on first use (PEP 562), so ``amp-convert --version`` and a conversion do not
pay for validation, ``--auto`` or onnxruntime they never call.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "convert": "amp_convert.api",
    "convert_file": "amp_convert.api",
    "convert_ir": "amp_convert.api",
    "AutoReport": "amp_convert.auto",
    "auto_convert": "amp_convert.auto",
    "AmpConvertError": "amp_convert.errors",
    "InputError": "amp_convert.errors",
    "OptionError": "amp_convert.errors",
    "OutputError": "amp_convert.errors",
    "ValidationError": "amp_convert.errors",
    "VerificationError": "amp_convert.errors",
    "ConvertOptions": "amp_convert.options",
    "Level": "amp_convert.options",
    "make_options": "amp_convert.options",
    "MixedPrecisionPass": "amp_convert.ir_pass",
    "ValidateOptions": "amp_convert.validation.options",
    "ConversionReport": "amp_convert.report",
    "NodeDecision": "amp_convert.report",
    "ValidationReport": "amp_convert.validation",
    "validate": "amp_convert.validation",
}

__all__ = [
    "AmpConvertError",
    "AutoReport",
    "ConversionReport",
    "ConvertOptions",
    "InputError",
    "Level",
    "MixedPrecisionPass",
    "NodeDecision",
    "OptionError",
    "OutputError",
    "ValidationError",
    "ValidateOptions",
    "ValidationReport",
    "VerificationError",
    "__version__",
    "auto_convert",
    "convert",
    "convert_file",
    "convert_ir",
    "make_options",
    "validate",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports on demand
    from amp_convert.api import convert, convert_file, convert_ir
    from amp_convert.auto import AutoReport, auto_convert
    from amp_convert.errors import (
        AmpConvertError,
        InputError,
        OptionError,
        OutputError,
        ValidationError,
        VerificationError,
    )
    from amp_convert.ir_pass import MixedPrecisionPass
    from amp_convert.options import ConvertOptions, Level, make_options
    from amp_convert.report import ConversionReport, NodeDecision
    from amp_convert.validation import ValidationReport, validate
    from amp_convert.validation.options import ValidateOptions


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'amp_convert' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
