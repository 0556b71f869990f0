"""amp-convert: FP32 ONNX models to mixed precision (FP16/BF16) that load, run fast, stay accurate.

Public API: convert, convert_file, validate, Level, ConvertOptions, the reports and the errors.
Names are imported on first use (PEP 562), so ``amp-convert --version`` and a conversion do not
pay for validation, ``--auto`` or onnxruntime they never call.
"""

from __future__ import annotations

import contextlib as _contextlib
import os as _os
import signal as _signal
import sys as _sys


def _interrupted(signum: int, frame: object) -> None:  # pragma: no cover - ends the process
    _os.write(2, b"amp-convert: interrupted\n")  # commands/interrupts.py's one line
    _os._exit(130)


# the console script imports this package first: Ctrl-C is one line and 130 from here on, not a
# traceback (commands/interrupts.py takes over in main); a library import changes nothing
if (
    _sys.argv
    and _os.path.basename(_sys.argv[0]).removesuffix(".exe") == "amp-convert"
    and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
):
    with _contextlib.suppress(ValueError):  # not the main thread: not ours to set
        _signal.signal(_signal.SIGINT, _interrupted)

import importlib  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from amp_convert._version import __version__  # noqa: E402

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
    "ConvertOptions": "amp_convert.options.convert",
    "Level": "amp_convert.options.convert",
    "make_options": "amp_convert.options.convert",
    "MixedPrecisionPass": "amp_convert.ir_pass",
    "ValidateOptions": "amp_convert.validation.options",
    "ConversionReport": "amp_convert.reports.conversion",
    "NodeDecision": "amp_convert.reports.conversion",
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
    "ValidateOptions",
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
    from amp_convert.options.convert import ConvertOptions, Level, make_options
    from amp_convert.reports.conversion import ConversionReport, NodeDecision
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
