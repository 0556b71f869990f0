"""The Python API: convert a model given as a path, bytes, onnx.ModelProto or onnx_ir.Model."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, TypeVar, overload

import onnx
import onnx_ir as ir

from amp_convert import io, pipeline
from amp_convert.errors import InputError
from amp_convert.options import ConvertOptions, make_options
from amp_convert.report import ConversionReport

M = TypeVar("M", onnx.ModelProto, ir.Model, bytes)


def convert_ir(model: ir.Model, options: ConvertOptions) -> ConversionReport:
    """Convert an ir.Model in place (the building block of the other entry points)."""
    start = time.perf_counter()
    report = pipeline.run(model, options)
    report.seconds = time.perf_counter() - start
    return report


@overload
def convert(model: M, **kwargs: object) -> M: ...
@overload
def convert(model: str | os.PathLike, **kwargs: object) -> ir.Model: ...


def convert(model, *, return_report: bool = False, **options: Any):
    """Convert a model to mixed precision and return the same kind it was given.

    `model` may be an onnx.ModelProto, an onnx_ir.Model, serialized bytes, or a path (a path gives
    back an onnx_ir.Model with its weights still memory-mapped; use convert_file to write one).
    Options are ConvertOptions' fields as keywords: level, dtype, keep_io_types, fp32_ops,
    fp16_ops, exclude_nodes, cast_optional_params, op_lists, dims. The input is never modified.
    With return_report=True, returns (model, ConversionReport).
    """
    opts = make_options(**options)
    work = io.load_model(model)
    report = convert_ir(work, opts)
    result: object
    if isinstance(model, onnx.ModelProto):
        result = ir.serde.serialize_model(work)
    elif isinstance(model, bytes | bytearray | memoryview):
        result = ir.serde.serialize_model(work).SerializeToString()
    else:
        result = work
    return (result, report) if return_report else result


def convert_file(
    src: str | os.PathLike,
    dst: str | os.PathLike | None = None,
    *,
    force: bool = False,
    external_data: bool | None = None,
    **kwargs: Any,
) -> ConversionReport:
    """Convert the model file `src` and write `dst` (default: next to it, NAME.fp16.onnx).

    Weights stay memory-mapped and stream to the output; a model with external data (or one too
    big for a single protobuf) is written with its weights in DST.data next to it. Options as in
    convert(). Raises an AmpConvertError subclass with one clear message on bad input.
    """
    options = make_options(**kwargs)
    src_path = Path(src)
    dst_path = Path(dst) if dst is not None else io.default_output_path(src_path, options.dtype)
    if not src_path.exists():
        raise InputError(f"{src_path}: no such file")
    io.check_output_path(dst_path, force, src_path)
    start = time.perf_counter()
    model = io.load_model(src_path)
    src_external = io.uses_external_data(model)
    if external_data is None:
        external_data = src_external or None  # None: decide by size
    report = pipeline.run(model, options)
    io.save_model(model, dst_path, external=external_data)
    report.seconds = time.perf_counter() - start
    report.size_before = io.file_size(src_path, src_external)
    report.size_after = io.file_size(dst_path, dst_path.with_name(dst_path.name + ".data").exists())
    return report
