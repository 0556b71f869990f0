"""amp-convert as an onnx-ir pass, for pipelines built on onnx-ir's PassManager.

Exporters (torch.onnx's dynamo path, ORT GenAI's builder) and the onnxscript optimizer compose
``onnx_ir.passes`` passes; ``MixedPrecisionPass`` lets the conversion sit among them::

    import onnx_ir as ir
    from amp_convert import MixedPrecisionPass

    passes = ir.passes.PassManager([MixedPrecisionPass(level="O2")])
    result = passes(ir.load("model.onnx"))

The conversion runs in place (``convert_ir``); the pass keeps the last ``ConversionReport`` as
``report``. ``modified`` is honest: False for O0 and for a model this conversion already produced
(a second run of the same pass), True otherwise. Options are ``ConvertOptions`` and/or its fields
as keywords (over it), checked when the pass is built: a misspelt option fails before any model
is touched. The model is checked as a file's would be at load (dtype attributes, references,
tensor data) before the pass changes anything: a bad model raises one ``InputError`` line and
is left as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx_ir as ir

from amp_convert.api import convert_ir
from amp_convert.files import io
from amp_convert.options.convert import ConvertKwargs, ConvertOptions, resolve
from amp_convert.reports.conversion import ConversionReport

if TYPE_CHECKING:
    from typing_extensions import Unpack


class MixedPrecisionPass(ir.passes.InPlacePass):
    """Convert the model to mixed precision in place; the report is kept in ``self.report``."""

    def __init__(
        self, options: ConvertOptions | None = None, **kwargs: Unpack[ConvertKwargs]
    ) -> None:
        super().__init__()
        self.options = resolve(options, kwargs)
        self.report: ConversionReport | None = None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        io.check_model(model)  # what the file entry points check at load, before any change
        report = convert_ir(model, self.options)
        self.report = report
        modified = not self.options.level.keeps_model and not report.already_converted
        return ir.passes.PassResult(model, modified)
