"""The Python API: convert a model given as a path, bytes, onnx.ModelProto or onnx_ir.Model."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

import onnx
import onnx_ir as ir

from amp_convert import pipeline
from amp_convert.errors import InputError
from amp_convert.files import io
from amp_convert.files import outputs as output_rules
from amp_convert.options.convert import ConvertKwargs, ConvertOptions, resolve
from amp_convert.reports.conversion import ConversionReport

if TYPE_CHECKING:
    from typing_extensions import Unpack

M = TypeVar("M", onnx.ModelProto, ir.Model, bytes)


def convert_ir(model: ir.Model, options: ConvertOptions) -> ConversionReport:
    """Convert an ir.Model in place (the building block of the other entry points)."""
    start = time.perf_counter()
    report = pipeline.run(model, options)
    report.warnings[:0] = model.meta.get(io.LOAD_NOTES, [])
    report.seconds = time.perf_counter() - start
    return report


@overload
def convert(
    model: M,
    *,
    options: ConvertOptions | None = None,
    return_report: Literal[False] = False,
    **kwargs: Unpack[ConvertKwargs],
) -> M: ...
@overload
def convert(
    model: str | os.PathLike,
    *,
    options: ConvertOptions | None = None,
    return_report: Literal[False] = False,
    **kwargs: Unpack[ConvertKwargs],
) -> ir.Model: ...
@overload
def convert(
    model: M,
    *,
    options: ConvertOptions | None = None,
    return_report: Literal[True],
    **kwargs: Unpack[ConvertKwargs],
) -> tuple[M, ConversionReport]: ...
@overload
def convert(
    model: str | os.PathLike,
    *,
    options: ConvertOptions | None = None,
    return_report: Literal[True],
    **kwargs: Unpack[ConvertKwargs],
) -> tuple[ir.Model, ConversionReport]: ...


def convert(
    model: Any,
    *,
    options: ConvertOptions | None = None,
    return_report: bool = False,
    **kwargs: Unpack[ConvertKwargs],
) -> Any:
    """Convert a model to mixed precision and return the same kind it was given.

    `model` may be an onnx.ModelProto, an onnx_ir.Model, serialized bytes, or a path (a path gives
    back an onnx_ir.Model with its weights still memory-mapped; use convert_file to write one).
    Options: a ConvertOptions as `options`, and/or its fields as keywords (ConvertKwargs; they
    replace the object's values); an unknown name is an OptionError. The input is never
    modified. With return_report=True, returns (model, ConversionReport). An op name in
    fp32_ops/fp16_ops that no ONNX or ONNX Runtime op and no node of the model has raises
    OptionError.
    """
    opts = resolve(options, kwargs)
    work = io.load_model(model)
    try:
        report = convert_ir(work, opts)
        result = io.same_kind(model, work)
    finally:
        io.give_back(work)  # the caller's proto keeps its names
    return (result, report) if return_report else result


@dataclass
class FileConversion:
    """A file conversion whose outputs are checked and whose folders are held (`plan`)."""

    src: Path
    proto: onnx.ModelProto | None
    inputs: list[Path]
    plan: output_rules.OutputPlan
    options: ConvertOptions
    external_data: bool | None

    def run(
        self,
        gate: Callable[[ir.Model, ConversionReport, bool | None], bool] | None = None,
        before_commit: Callable[[ConversionReport], None] | None = None,
    ) -> ConversionReport:
        """Convert and write the model to plan["output"] (and its data file).

        ``gate(model, report, external)``, when given, sees the converted model before it is
        written and says whether to write it (``convert --validate``: not when it fails).
        ``before_commit(report)`` runs when the model is written but not yet in place (the report
        complete): a report staged there fails before the output is replaced, never after.
        """
        start = time.perf_counter()
        if self.proto is None:
            raise InputError(f"{self.src}: this conversion already ran")
        model = io.model_from_file(self.proto, self.src)
        self.proto = None
        external = self.external_data
        if external is None:
            external = io.uses_external_data(model) or None  # None: decide by size
        report = pipeline.run(model, self.options)
        report.warnings[:0] = model.meta.get(io.LOAD_NOTES, [])
        report.size_before = io.files_size(self.inputs)
        if gate is not None and not gate(model, report, external):
            report.seconds = time.perf_counter() - start
            return report
        out = self.plan["output"]

        def written(size: int) -> None:
            report.seconds = time.perf_counter() - start
            report.size_after = size
            if before_commit is not None:
                before_commit(report)

        io.save_model(model, out, external=external, keep=self.inputs, before_commit=written)
        return report


@contextlib.contextmanager
def open_file_conversion(
    src: str | os.PathLike,
    dst: str | os.PathLike | None = None,
    *,
    force: bool = False,
    external_data: bool | None = None,
    other_outputs: Mapping[str, str | os.PathLike | None] | None = None,
    extra_inputs: Sequence[Sequence[Path]] = (),
    options: ConvertOptions | None = None,
    **kwargs: Unpack[ConvertKwargs],
) -> Iterator[FileConversion]:
    """Check everything a file conversion reads and writes, then hand it over to run.

    The model, `dst` (default NAME.fp16.onnx next to it), its data file and `other_outputs`
    ({label: path} of the caller's other files, e.g. a report) go through one output check
    (output_rules.plan_outputs): no output is the input model, one of its external-data files or
    one of `extra_inputs`, nor another output; an existing file only with `force`, and only a
    regular file. The folders stay held until the block ends.
    """
    options = resolve(options, kwargs)
    if not isinstance(src, str | os.PathLike):
        raise InputError(f"convert_file: src must be a path, not {type(src).__name__}")
    src_path = Path(src)
    proto = io.read_model_file(src_path)
    dst_path = (
        Path(dst) if dst is not None else output_rules.default_output_path(src_path, options.dtype)
    )
    inputs = output_rules.model_files(src_path, proto)
    outputs = [
        ("output", dst_path),
        ("output data file", output_rules.data_file_name(dst_path)),
        *(
            (label, Path(p) if p is not None else None)
            for label, p in (other_outputs or {}).items()
        ),
    ]
    with output_rules.plan_outputs(outputs, [inputs, *extra_inputs], force) as plan:
        yield FileConversion(src_path, proto, inputs, plan, options, external_data)


def convert_file(
    src: str | os.PathLike,
    dst: str | os.PathLike | None = None,
    *,
    force: bool = False,
    external_data: bool | None = None,
    other_outputs: Mapping[str, str | os.PathLike] | None = None,
    options: ConvertOptions | None = None,
    **kwargs: Unpack[ConvertKwargs],
) -> ConversionReport:
    """Convert the model file `src` and write `dst` (default: next to it, NAME.fp16.onnx).

    Weights stay memory-mapped and stream to the output; a model with external data (or one too
    big for a single protobuf) is written with its weights in DST.data next to it (DST.<8 hex>.data
    while a replaced DST still uses DST.data; see io.save_model). Options as in convert()
    (`options` and/or keywords).

    Before any work, `dst`, its data file and `other_outputs` ({label: path} of the other files
    the caller will write, e.g. a report) are checked: none may be the input model or one of its
    external-data files, nor another of these outputs, and an existing file is replaced only
    with `force` (and only a regular file). Raises an AmpConvertError subclass with one clear
    message on bad input.
    """
    with open_file_conversion(
        src,
        dst,
        force=force,
        external_data=external_data,
        other_outputs=other_outputs,
        options=options,
        **kwargs,
    ) as conversion:
        return conversion.run()
