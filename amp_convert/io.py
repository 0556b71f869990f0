"""Load and save models without surprises.

Loading goes through onnx-ir so external data is memory-mapped, never read eagerly. Saving writes to
a temporary file and renames it into place only when complete, so a failure never leaves a
half-written output, and the input is never touched.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import google.protobuf.message
import onnx
import onnx_ir as ir

from amp_convert import proto_walk
from amp_convert.errors import InputError, OutputError

MIN_OPSET = 1
# Above this many bytes of tensor data a single protobuf cannot hold the model (2 GiB hard limit):
# we then write the weights as external data next to the output.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000
ModelLike = str | os.PathLike | bytes | onnx.ModelProto | ir.Model


def _check_versions(model: ir.Model, where: str) -> None:
    if model.ir_version is not None and model.ir_version > onnx.IR_VERSION:
        raise InputError(
            f"{where}: IR version {model.ir_version} is newer than this onnx supports "
            f"({onnx.IR_VERSION}); upgrade onnx"
        )
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if opset is None:
        raise InputError(f"{where}: the model imports no ai.onnx opset")
    newest = onnx.defs.onnx_opset_version()
    if opset > newest:
        raise InputError(
            f"{where}: opset {opset} is newer than this onnx supports ({newest}); upgrade onnx"
        )
    if opset < MIN_OPSET:
        raise InputError(
            f"{where}: opset {opset} is too old (amp-convert needs opset >= {MIN_OPSET}); "
            "upgrade it with onnx.version_converter first"
        )


def _from_proto(proto: onnx.ModelProto, where: str) -> ir.Model:
    if not proto.HasField("graph"):
        raise InputError(f"{where}: not an ONNX model (no graph)")
    try:
        return ir.serde.deserialize_model(proto)
    except Exception as e:  # onnx-ir raises several kinds on malformed graphs
        raise InputError(f"{where}: malformed ONNX model: {e}") from None


def load_model(src: ModelLike) -> ir.Model:
    """Any accepted input kind → a fresh ir.Model the caller may change (the source stays)."""
    if isinstance(src, ir.Model):
        model = src.clone()
        where = "model"
    elif isinstance(src, onnx.ModelProto):
        where = "model"
        model = _from_proto(src, where)
    elif isinstance(src, bytes | bytearray | memoryview):
        where = "bytes"
        try:
            proto = onnx.load_model_from_string(bytes(src))
        except (google.protobuf.message.DecodeError, ValueError, RuntimeError):
            raise InputError("bytes: not an ONNX model (protobuf decode failed)") from None
        model = _from_proto(proto, where)
    elif isinstance(src, str | os.PathLike):
        path = Path(src)
        where = str(path)
        if not path.exists():
            raise InputError(f"{path}: no such file")
        if not path.is_file():
            raise InputError(f"{path}: not a file")
        if path.stat().st_size == 0:
            raise InputError(f"{path}: empty file, not an ONNX model")
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except (google.protobuf.message.DecodeError, ValueError, RuntimeError, OSError):
            raise InputError(
                f"{path}: not an ONNX model (protobuf decode failed; truncated or another format?)"
            ) from None
        model = _from_proto(proto, where)
        ir.external_data.set_base_dir(model.graph, str(path.parent.resolve()))
        _check_external_files(model, path)
    else:
        raise InputError(f"cannot convert an object of type {type(src).__name__}")
    _check_versions(model, where)
    return model


def _check_external_files(model: ir.Model, path: Path) -> None:
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor) and not os.path.exists(tensor.path):
                raise InputError(
                    f"{path}: external data file {tensor.location!r} of tensor {value.name!r} "
                    "is missing"
                )


def uses_external_data(model: ir.Model) -> bool:
    return any(
        isinstance(v.const_value, ir.ExternalTensor)
        for g in model.graphs()
        for v in g.initializers.values()
    )


def tensor_bytes(model: ir.Model) -> int:
    """Bytes of initializer data, computed from shapes (nothing is read)."""
    total = 0
    for graph in model.graphs():
        for value in graph.initializers.values():
            if value.const_value is not None:
                total += value.const_value.nbytes
    return total


def default_output_path(src: str | os.PathLike, dtype: str) -> Path:
    """model.onnx → model.fp16.onnx (model.bf16.onnx for bf16), next to the input."""
    path = Path(src)
    stem = path.name[: -len(".onnx")] if path.name.endswith(".onnx") else path.name
    return path.with_name(f"{stem}.{dtype}.onnx")


def check_output_path(dst: Path, force: bool, src: Path | None = None) -> None:
    """Refuse before any work: existing output without force, unwritable folder, dst == src."""
    if src is not None and dst.resolve() == src.resolve():
        raise OutputError(f"{dst}: output would overwrite the input model; choose another -o")
    if dst.exists() and not force:
        raise OutputError(f"{dst}: output exists (use --force to overwrite)")
    if dst.is_dir():
        raise OutputError(f"{dst}: output is a directory")
    parent = dst.parent if str(dst.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{dst}: output folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{dst}: output folder {parent} is not writable")


def save_model(model: ir.Model, dst: str | os.PathLike, *, external: bool | None = None) -> None:
    """Write `model` to `dst` atomically; weights go to `dst.data` when external (auto by size)."""
    dst = Path(dst)
    if external is None:
        external = uses_external_data(model) or tensor_bytes(model) > EXTERNAL_DATA_THRESHOLD
    data_name = dst.name + ".data"
    data_path = dst.with_name(data_name)
    data_existed = data_path.exists()
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent or ".")
    os.close(fd)
    try:
        if external:
            # threads overlap the lazy FP32→low conversion of weights with the disk writes;
            # onnx-ir bounds the bytes in flight, so memory stays flat
            workers = min(4, os.cpu_count() or 1)
            ir.save(
                model,
                tmp,
                external_data=data_name,
                max_workers=workers,
                max_in_flight_bytes=256 << 20,
            )
        else:
            ir.save(model, tmp)
        os.replace(tmp, dst)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if external and not data_existed and data_path.exists():
            data_path.unlink()
        if isinstance(e, OSError):
            raise OutputError(f"{dst}: cannot write: {e.strerror or e}") from None
        raise


def file_size(path: str | os.PathLike, external: bool = True) -> int:
    """Size of a model file plus (when `external`) the external data files it references."""
    path = Path(path)
    total = path.stat().st_size
    if not external:
        return total
    proto = onnx.load(str(path), load_external_data=False)
    locations = set()
    for graph in proto_walk.graphs(proto.graph):
        for t in graph.initializer:
            for entry in t.external_data:
                if entry.key == "location":
                    locations.add(entry.value)
    for loc in locations:
        p = path.parent / loc
        if p.exists():
            total += p.stat().st_size
    return total
