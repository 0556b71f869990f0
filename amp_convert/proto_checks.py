"""Checks on an input ModelProto before onnx-ir reads it, so malformed files fail with one line.

onnx-ir (and numpy under it) raise bare ValueErrors deep inside a conversion for tensors whose
data is shorter than their dims, for external data outside the model's folder or shorter than
declared, and for node inputs that nothing defines. Everything here looks only at the
protobuf and file sizes: no tensor data is read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import onnx

from amp_convert import file_kinds, proto_walk, user_text
from amp_convert.errors import InputError

_T = onnx.TensorProto
# typed data field and values per element, for the types whose field count is fixed by the dims
_TYPED_FIELD: dict[int, tuple[str, int]] = {
    _T.FLOAT: ("float_data", 1),
    _T.COMPLEX64: ("float_data", 2),
    _T.DOUBLE: ("double_data", 1),
    _T.COMPLEX128: ("double_data", 2),
    _T.INT64: ("int64_data", 1),
    _T.UINT32: ("uint64_data", 1),
    _T.UINT64: ("uint64_data", 1),
    **{
        dt: ("int32_data", 1)
        for dt in (_T.INT32, _T.INT16, _T.INT8, _T.UINT16, _T.UINT8, _T.BOOL, _T.FLOAT16)
    },
    _T.BFLOAT16: ("int32_data", 1),
}


# packed types: bits per element (the numpy stand-ins take a whole byte)
_PACKED_BITS = {
    getattr(_T, name): bits
    for name, bits in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
    if hasattr(_T, name)
}


def _tensor_nbytes(tensor: onnx.TensorProto) -> int | None:
    """Bytes the dims need (packed types rounded up); None for strings / unknown types."""
    if tensor.data_type in (_T.STRING, _T.UNDEFINED):
        return None
    bits = _PACKED_BITS.get(tensor.data_type)
    if bits is None:
        try:
            bits = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize * 8
        except (KeyError, TypeError, ValueError):
            return None
    return math.ceil(math.prod(tensor.dims) * bits / 8)


def _tensors(graph: onnx.GraphProto) -> Iterator[tuple[str, onnx.TensorProto]]:
    """(description, tensor) for every initializer and tensor attribute, subgraphs included."""
    for g in proto_walk.graphs(graph):
        for t in g.initializer:
            yield f"initializer {t.name!r}", t
        for node in g.node:
            for attr in node.attribute:
                where = f"attribute {attr.name!r} of node {node.name or node.op_type!r}"
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield where, attr.t
                elif attr.type == onnx.AttributeProto.TENSORS:
                    yield from ((where, t) for t in attr.tensors)


def check_tensor_data(proto: onnx.ModelProto, where: str) -> None:
    """Refuse tensors whose in-file data does not match their dims (raw_data or typed fields)."""
    for what, t in _tensors(proto.graph):
        if t.data_type == _T.UNDEFINED or t.data_type not in _T.DataType.values():
            raise InputError(f"{where}: {what} has no valid element type ({t.data_type})")
        if t.data_location == _T.EXTERNAL:
            continue
        need = _tensor_nbytes(t)
        if t.HasField("raw_data"):
            if need is not None and len(t.raw_data) != need:
                raise InputError(
                    f"{where}: {what} holds {len(t.raw_data)} bytes of raw_data but its dims "
                    f"{list(t.dims)} need {need}; the file is corrupt"
                )
            continue
        entry = _TYPED_FIELD.get(t.data_type)
        if entry is None:
            continue
        field, per = entry
        count, want = len(getattr(t, field)), math.prod(t.dims) * per
        if count and count != want:
            raise InputError(
                f"{where}: {what} holds {count} values in {field} but its dims {list(t.dims)} "
                f"need {want}; the file is corrupt"
            )


#: the external-data keys ONNX Runtime reads (it refuses any other, onnx's "basepath" included)
_EXTERNAL_KEYS = frozenset({"location", "offset", "length", "checksum"})


def _external_entries(tensor: onnx.TensorProto) -> dict[str, str]:
    entries = {e.key: e.value for e in tensor.external_data}
    if any(not isinstance(x, str) for item in entries.items() for x in item):
        # protobuf hands back bytes for a string field that is not valid UTF-8
        raise InputError(f"tensor {tensor.name!r}: an external-data entry is not valid UTF-8")
    return entries


def external_locations(proto: onnx.ModelProto) -> set[str]:
    """The external-data locations the model's tensors name (as written, not resolved)."""
    return {
        loc
        for _, t in _tensors(proto.graph)
        if t.data_location == _T.EXTERNAL and (loc := _external_entries(t).get("location"))
    }


def resolve_location(model_path: Path, location: str) -> Path:
    """An external-data location as the file it names (relative to the model's folder)."""
    problem = user_text.text_problem(location)
    if problem is not None:
        raise InputError(
            f"{model_path}: external data location '{user_text.printable(location)}' {problem}"
        )
    return Path(os.path.realpath(model_path.parent / location))


def _check_containment(
    model_path: Path, folder: Path, what: str, location: str, path: Path
) -> None:
    """The data file must be inside the model's folder, as written and with symlinks followed."""
    written = Path(os.path.normpath(Path(os.path.abspath(model_path.parent)) / location))
    if os.path.isabs(location) or not written.is_relative_to(os.path.abspath(model_path.parent)):
        raise InputError(
            f"{model_path}: {what}: external data location {location!r} is outside the "
            f"model's folder {folder}; refused"
        )
    if not path.is_relative_to(folder):
        raise InputError(
            f"{model_path}: {what}: external data location {location!r} is a symlink to "
            f"{path}, outside the model's folder {folder}; refused"
        )


def check_external_data(proto: onnx.ModelProto, model_path: Path) -> None:
    """Every external reference stays in the model's folder, exists and is long enough.

    Sizes are compared, nothing is read: a truncated data file would otherwise fail (or map
    garbage) deep in the conversion.
    """
    folder = Path(os.path.realpath(model_path.parent))
    sizes: dict[Path, int] = {}
    for what, t in _tensors(proto.graph):
        if t.data_location != _T.EXTERNAL:
            continue
        entries = _external_entries(t)
        if unknown := sorted(set(entries) - _EXTERNAL_KEYS):
            raise InputError(
                f"{model_path}: {what}: unknown external-data key {unknown[0]!r} (ONNX Runtime "
                f"reads only {', '.join(sorted(_EXTERNAL_KEYS))} and refuses the model)"
            )
        location = entries.get("location", "")
        if not location:
            raise InputError(f"{model_path}: {what} is external but names no location")
        path = resolve_location(model_path, location)
        if path not in sizes:
            _check_containment(model_path, folder, what, location, path)
            if why := file_kinds.not_a_file(path):
                raise InputError(
                    f"{model_path}: external data file {location!r} of {what} "
                    + ("is missing" if why == "does not exist" else why)
                )
            st = path.stat()
            if st.st_nlink > 1:  # onnx-ir refuses these too (a hard link can escape the folder)
                raise InputError(
                    f"{model_path}: external data file {location!r} has {st.st_nlink} hard "
                    "links; refused (copy it to a file of its own)"
                )
            sizes[path] = st.st_size
            _check_readable(model_path, location, path)
        try:
            offset = int(entries.get("offset", "0"))
            length = int(entries["length"]) if "length" in entries else None
        except ValueError:
            raise InputError(f"{model_path}: {what}: bad external data offset/length") from None
        need = _tensor_nbytes(t)
        if length is not None and need is not None and length != need:
            raise InputError(
                f"{model_path}: {what}: external data length {length} but its dims "
                f"{list(t.dims)} need {need} bytes"
            )
        if offset < 0 or (length is not None and length < 0):
            raise InputError(
                f"{model_path}: {what}: negative external data offset/length ({offset}, "
                f"{length}); the file is corrupt"
            )
        end = offset + (length if length is not None else need or 0)
        if end > sizes[path]:
            raise InputError(
                f"{model_path}: {what}: external data file {location!r} holds {sizes[path]} "
                f"bytes, shorter than the {end} declared (offset {offset}); truncated?"
            )


def _check_readable(model_path: Path, location: str, path: Path) -> None:
    """The data file opens for reading (else onnx-ir fails later with an errno)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise InputError(
            f"{model_path}: cannot read external data file {location!r}: {e.strerror or e}"
        ) from None
    os.close(fd)


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return (
        f"node {node.name!r} ({node.op_type})" if node.name else f"node #{index} ({node.op_type})"
    )


def check_references(proto: onnx.ModelProto, where: str) -> bool:
    """Whether the nodes need sorting; InputError for a node input that nothing defines.

    One pass per graph with a stack of scopes: a subgraph sees the values its outer graphs
    defined before the node holding it. A value produced only by a later node means the graph
    is out of topological order: ONNX Runtime sorts such graphs itself, and so does the loader
    (io). A value no node, graph input or initializer of any enclosing scope defines is refused
    here, naming the node (onnx-ir would log a warning and invent an input for it).
    """
    return _check_refs(proto.graph, [], where)


def _check_refs(graph: onnx.GraphProto, outer: list[tuple[set, set]], where: str) -> bool:
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    produced = {out for node in graph.node for out in node.output if out}
    scopes = [*outer, (defined, produced)]
    unsorted = False
    for i, node in enumerate(graph.node):
        for name in node.input:
            if not name or name in defined or any(name in d for d, _ in outer):
                continue
            if not any(name in p for _, p in scopes):
                raise InputError(
                    f"{where}: {_node_label(node, i)} reads {name!r}, which no node, graph "
                    "input or initializer defines; the model is invalid"
                )
            unsorted = True
        if node.attribute:
            for sub in proto_walk.subgraphs(node):
                unsorted |= _check_refs(sub, scopes, where)
        defined.update(node.output)
    for out in graph.output:
        if out.name and not any(out.name in d or out.name in p for d, p in scopes):
            raise InputError(
                f"{where}: graph output {out.name!r} is defined by no node, graph input or "
                "initializer; the model is invalid"
            )
    return unsorted
