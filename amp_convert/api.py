"""The Python API: convert a model given as a path, bytes, onnx.ModelProto or onnx_ir.Model."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, overload

import onnx
import onnx_ir as ir

from amp_convert import io, output_rules, pipeline
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
    other_outputs: Mapping[str, str | os.PathLike] | None = None,
    **kwargs: Any,
) -> ConversionReport:
    """Convert the model file `src` and write `dst` (default: next to it, NAME.fp16.onnx).

    Weights stay memory-mapped and stream to the output; a model with external data (or one too
    big for a single protobuf) is written with its weights in DST.data next to it (DST.<8 hex>.data
    while a replaced DST still uses DST.data; see io.save_model). Options as in convert().

    Before any work, `dst`, its data file and `other_outputs` ({label: path} of the other files
    the caller will write, e.g. a report) are checked: none may be the input model or one of its
    external-data files, nor another of these outputs, and an existing file is replaced only
    with `force`. Raises an AmpConvertError subclass with one clear message on bad input.
    """
    options = make_options(**kwargs)
    start = time.perf_counter()
    if not isinstance(src, str | os.PathLike):
        raise InputError(f"convert_file: src must be a path, not {type(src).__name__}")
    src_path = Path(src)
    proto = io.read_model_file(src_path)
    dst_path = Path(dst) if dst is not None else io.default_output_path(src_path, options.dtype)
    inputs = output_rules.model_files(src_path, proto)
    outputs = [
        ("output", dst_path),
        ("output data file", output_rules.data_file_name(dst_path)),
        *((label, Path(p)) for label, p in (other_outputs or {}).items()),
    ]
    output_rules.check_outputs(outputs, [inputs], force)
    model = io.model_from_file(proto, src_path)
    del proto
    if external_data is None:
        external_data = io.uses_external_data(model) or None  # None: decide by size
    report = pipeline.run(model, options)
    data_path = io.save_model(model, dst_path, external=external_data, keep=inputs)
    report.seconds = time.perf_counter() - start
    report.size_before = io.files_size(inputs)
    report.size_after = io.files_size([dst_path] + ([data_path] if data_path else []))
    return report
