"""amp-convert: FP32 ONNX models to mixed precision (FP16/BF16) that load, run fast, stay accurate.

Public API: convert, convert_file, validate, Level, ConvertOptions, the reports and the errors.
"""

from __future__ import annotations

__version__ = "0.1.0"

from amp_convert.api import convert, convert_file, convert_ir  # noqa: E402
from amp_convert.auto import AutoReport, auto_convert  # noqa: E402
from amp_convert.errors import (  # noqa: E402
    AmpConvertError,
    InputError,
    OptionError,
    OutputError,
    ValidationError,
    VerificationError,
)
from amp_convert.options import ConvertOptions, Level, make_options  # noqa: E402
from amp_convert.report import ConversionReport, NodeDecision  # noqa: E402
from amp_convert.validation import ValidationReport, validate  # noqa: E402

__all__ = [
    "AmpConvertError",
    "AutoReport",
    "ConversionReport",
    "ConvertOptions",
    "InputError",
    "Level",
    "NodeDecision",
    "OptionError",
    "OutputError",
    "ValidationError",
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
