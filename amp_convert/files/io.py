"""Load and save models without surprises.

Loading goes through onnx-ir so external data is memory-mapped, never read eagerly; malformed
files are refused with one line before onnx-ir sees them (proto_checks). Saving writes to
temporary files and renames them into place only when complete, so a failure never leaves a
half-written output or a graph paired with the wrong weights, and the input is never touched.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import google.protobuf.message
import onnx
import onnx_ir as ir

from amp_convert.core import domains, proto_walk, walk
from amp_convert.errors import InputError
from amp_convert.files import (
    data_file,
    file_kinds,
    graph_checks,
    load_repairs,
    pair_write,
    proto_checks,
    safe_write,
    text_fields,
)
from amp_convert.files.outputs import file_identity

MIN_OPSET = 1
# Above this many bytes of tensor data a single protobuf cannot hold the model (2 GiB hard limit):
# we then write the weights as external data next to the output.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000
# Writing external data, tensors of more bytes than this go to the data file (onnx-ir's default).
SIZE_THRESHOLD = 256
# External tensors up to this size are read into memory at load (see _inline_small_external).
INLINE_BYTES = 1024
ModelLike = str | os.PathLike | bytes | onnx.ModelProto | ir.Model


def _check_versions(model: ir.Model, where: str) -> None:
    if model.ir_version is not None and model.ir_version > onnx.IR_VERSION:
        raise InputError(
            f"{where}: IR version {model.ir_version} is newer than this onnx supports "
            f"({onnx.IR_VERSION}); upgrade onnx"
        )
    opset = domains.imported_opset(model.opset_imports)
    if opset is None:  # e.g. only ai.onnx.ml ops: ORT loads it, the pipeline has nothing to do
        return
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


#: key in ir.Model.meta of the repairs made at load (list of sentences for the report)
LOAD_NOTES = "amp_convert.load_notes"


def check_proto(proto: onnx.ModelProto, where: str) -> bool:
    """The checks a model passes before anything deserialises or changes it (one InputError
    line each); whether the graph holds nodes out of order (``load_repairs`` sorts them)."""
    _check_graph(proto, where)
    return proto_checks.check_references(proto, where)


def _check_graph(proto: onnx.ModelProto, where: str) -> None:
    if not proto.HasField("graph"):
        raise InputError(f"{where}: not an ONNX model (no graph)")
    text_fields.check_strings(proto, where)
    proto_checks.check_tensor_data(proto, where)
    graph_checks.check_dtype_attributes(proto, where)
    graph_checks.check_single_assignment(proto, where)


def check_model(model: ir.Model, where: str = "model") -> None:
    """``check_proto`` on an ir.Model given in memory (the onnx-ir pass): a model that fails
    is refused before the pass changes anything."""
    from amp_convert.files import onnx_checks

    onnx_checks.call_on_stripped(model, lambda proto: check_proto(proto, where))
    _check_versions(model, where)


def _from_proto(proto: onnx.ModelProto, where: str, path: Path | None = None) -> ir.Model:
    _check_graph(proto, where)
    if path is not None:
        proto_checks.check_external_data(proto, path)
    proto, notes = _repaired(proto, where)
    untyped_info = sum(
        1
        for g in proto_walk.graphs(proto.graph)
        for vi in g.value_info
        if vi.type.WhichOneof("value") is None
    )
    if untyped_info:  # onnx-ir leaves them out; ONNX's checker would refuse them
        notes.append(
            f"{untyped_info} value_info entr{'y' if untyped_info == 1 else 'ies'} without a type "
            "dropped (they say nothing; inference types those values)"
        )
    unsorted = proto_checks.check_references(proto, where)
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as e:  # onnx-ir raises several kinds on malformed graphs
        raise InputError(f"{where}: malformed ONNX model: {e}") from None
    if unsorted:
        notes.append(load_repairs.sort_nodes(model, where))
    if untyped := load_repairs.untyped_outputs(model):
        notes.append(load_repairs.type_outputs(model, untyped, where))
    shapeless = load_repairs.shapeless_outputs(model)
    if shapeless and (note := load_repairs.shape_outputs(model, shapeless)):
        notes.append(note)
    model.meta[LOAD_NOTES] = notes
    return model


def _repaired(proto: onnx.ModelProto, where: str) -> tuple[onnx.ModelProto, list[str]]:
    """Sparse initializers made dense, repeated node names made unique (on a copy), and why."""
    graphs = list(proto_walk.graphs(proto.graph))
    names = [n.name for g in graphs for n in g.node if n.name]
    if not any(g.sparse_initializer for g in graphs) and len(set(names)) == len(names):
        return proto, []
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)  # the caller's proto is never changed
    notes = []
    dense = graph_checks.densify_sparse_initializers(copy, where)
    if dense:
        notes.append(f"{dense} sparse initializer(s) stored as dense initializers")
    renamed = graph_checks.unique_node_names(copy)
    if renamed:
        notes.append(
            f"{renamed} repeated node name(s) made unique with a __N suffix (ONNX Runtime "
            "refuses a graph with two nodes of one name)"
        )
    return copy, notes


def read_model_file(path: Path) -> onnx.ModelProto:
    """Parse a model file without its external data; InputError when it is not a model."""
    if not str(path):
        raise InputError("empty model path")
    why = file_kinds.not_a_file(path)
    if why == "does not exist":
        raise InputError(f"{path}: no such file")
    if why is not None and "symlink" in why:
        raise InputError(f"{path} {why}")
    if not path.is_file():
        raise InputError(
            f"{path}: not a file" + ("" if path.is_dir() else " (a FIFO, device or socket)")
        )
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file, not an ONNX model")
    try:
        return onnx.load(str(path), load_external_data=False)
    except (google.protobuf.message.DecodeError, ValueError, RuntimeError, OSError):
        raise InputError(
            f"{path}: not an ONNX model (protobuf decode failed; truncated or another format?)"
        ) from None


def model_from_file(proto: onnx.ModelProto, path: Path) -> ir.Model:
    """The ir.Model of a parsed model file, external data checked and memory-mapped."""
    model = _from_proto(proto, str(path), path)
    ir.external_data.set_base_dir(model.graph, str(path.parent.resolve()))
    _inline_small_external(model)
    _check_versions(model, str(path))
    return model


def load_model(src: ModelLike) -> ir.Model:
    """Any accepted input kind → a fresh ir.Model the caller may change (the source stays)."""
    if isinstance(src, ir.Model):
        model = src.clone()
        where = "model"
    elif isinstance(src, onnx.ModelProto):
        where = "model"
        model = _from_proto(src, where)
        # the model's tensors wrap the caller's TensorProtos, and renaming an initializer
        # renames the proto it wraps (onnx-ir): remember the names to give them back
        model.meta[BORROWED_NAMES] = [
            (t, t.name) for g in proto_walk.graphs(src.graph) for t in g.initializer
        ]
    elif isinstance(src, bytes | bytearray | memoryview):
        where = "bytes"
        try:
            proto = onnx.load_model_from_string(bytes(src))
        except (google.protobuf.message.DecodeError, ValueError, RuntimeError):
            raise InputError("bytes: not an ONNX model (protobuf decode failed)") from None
        model = _from_proto(proto, where)
    elif isinstance(src, str | os.PathLike):
        path = Path(src)
        return model_from_file(read_model_file(path), path)
    else:
        raise InputError(f"cannot convert an object of type {type(src).__name__}")
    _check_versions(model, where)
    return model


#: key in ir.Model.meta of (TensorProto, name) of a caller's proto the model wraps
BORROWED_NAMES = "amp_convert.borrowed_names"


def give_back(model: ir.Model) -> None:
    """Put back the initializer names of the caller's proto `model` was loaded from (a
    subgraph initializer renamed apart renamed the caller's tensor too; ``load_model``). Call
    once the model is serialised or no longer used."""
    for tensor, name in model.meta.get(BORROWED_NAMES, ()):
        tensor.name = name


def same_kind(source: object, result: ir.Model) -> object:
    """`result` as the kind of model `source` was given as (a path gives the ir.Model)."""
    if isinstance(source, onnx.ModelProto):
        return ir.serde.serialize_model(result)
    if isinstance(source, bytes | bytearray | memoryview):
        return ir.serde.serialize_model(result).SerializeToString()
    return result


def _inline_small_external(model: ir.Model) -> None:
    """Read external tensors of at most INLINE_BYTES into memory (a few KiB in all).

    Why: checks on the weight-stripped model keep such tensors, and ONNX's checker resolves
    external data against the working directory, not the model's folder; in memory they are
    found wherever the command runs. They are below the size that goes external on save anyway.
    """
    small = [
        (value, tensor)
        for graph in walk.graphs(model)
        for value in graph.initializers.values()
        if isinstance(tensor := value.const_value, ir.ExternalTensor)
        and tensor.nbytes <= INLINE_BYTES
    ]
    if not small:
        return
    loaded = ir.external_data.convert_tensors_from_external([t for _, t in small])
    for (value, old), tensor in zip(small, loaded, strict=True):
        value.const_value = tensor
        old.release()


def uses_external_data(model: ir.Model) -> bool:
    return any(
        isinstance(v.const_value, ir.ExternalTensor)
        for g in walk.graphs(model)
        for v in g.initializers.values()
    )


def tensor_bytes(model: ir.Model) -> int:
    """Bytes of initializer data, computed from shapes (nothing is read)."""
    total = 0
    for graph in walk.graphs(model):
        for value in graph.initializers.values():
            if value.const_value is not None:
                total += value.const_value.nbytes
    return total


def _has_external_worthy_tensor(model: ir.Model) -> bool:
    return any(
        v.const_value is not None and v.const_value.nbytes > SIZE_THRESHOLD
        for g in walk.graphs(model)
        for v in g.initializers.values()
    )


@contextlib.contextmanager
def _weights_in_memory(model: ir.Model) -> Iterator[None]:
    """For an all-in-one save: external tensors are read in, and put back afterwards."""
    pairs = [
        (v, t)
        for g in walk.graphs(model)
        for v in g.initializers.values()
        if isinstance(t := v.const_value, ir.ExternalTensor)
    ]
    values = [v for v, _ in pairs]
    originals: list[ir.TensorProtocol] = [t for _, t in pairs]
    try:
        if values:
            for v, t in zip(
                values, ir.external_data.convert_tensors_from_external(originals), strict=True
            ):
                v.const_value = t
        yield
    finally:
        for v, t in zip(values, originals, strict=True):
            v.const_value = t


def save_model(
    model: ir.Model,
    dst: str | os.PathLike,
    *,
    external: bool | None = None,
    keep: Iterable[Path] = (),
    before_commit: pair_write.BeforeCommit | None = None,
    data_name: str | None = None,
) -> Path | None:
    """Write `model` to `dst` atomically; return the external-data file written, if any.

    `data_name`: the data file's name when it is free (a plain name in dst's folder: Olive's
    ``external_data_name``), instead of DST.data.

    `dst` is a path or a checked safe_write.Slot (output_rules.plan_outputs); everything is
    written in the folder the slot holds open, so a folder swapped meanwhile cannot redirect it.
    External (auto: the model had external data or is too big for one protobuf) puts tensors over
    SIZE_THRESHOLD bytes in a data file next to `dst`; with none that big, nothing goes external.
    The pair is committed so that a reader never sees a new graph with old weights or the
    reverse: the weights go to a data file name no one uses (OUT.data, or OUT.<8 hex>.data while
    the replaced output still uses OUT.data), the graph to a temporary file renamed onto `dst`
    last, and only then are the replaced output's own data files (our naming, not in `keep`: the
    input's files) removed. The commit holds a lock on the folder, so concurrent writers of one
    output each remove the data file of the pair they replaced: none is left orphaned. New files
    get 0666 & ~umask, replaced ones keep their mode. On any failure, SIGTERM included, the
    temporary files go and `dst` is left as it was. `before_commit` (bytes written) runs once
    the pair is written and before it is committed: what it raises leaves `dst` as it was.
    """
    if external is None:
        external = uses_external_data(model) or tensor_bytes(model) > EXTERNAL_DATA_THRESHOLD
    external = external and _has_external_worthy_tensor(model)
    with safe_write.adhoc_slot(dst) as slot, safe_write.sigterm_cleans_up():
        ids = {file_identity(Path(p)) for p in keep}
        written = _write_pair(model, slot, external, ids, before_commit, data_name)
    return slot.path.with_name(written) if written else None


def _write_pair(
    model: ir.Model,
    slot: safe_write.Slot,
    external: bool,
    inputs: set[tuple],
    before_commit: pair_write.BeforeCommit | None = None,
    data_name: str | None = None,
) -> str | None:
    """Write the data file and the graph and commit them as a pair (pair_write.PairWrite)."""

    def write(graph_path: str, data_tmp: str | None, data_name: str | None) -> None:
        if data_tmp is not None:
            # the weights go first, a chunk at a time on every core (data_file): the bytes
            # ir.save(external_data=...) would write, in a few chunks of memory, under a
            # temporary name the graph does not use (it names the final one)
            folder = os.path.dirname(graph_path)
            with data_file.externalized(
                model, folder, data_tmp, SIZE_THRESHOLD, slot.dir_fd, location=data_name
            ):
                ir.save(model, graph_path)
        else:
            with _weights_in_memory(model):
                ir.save(model, graph_path)

    return pair_write.write_pair(slot, external, inputs, write, before_commit, data_name)


def files_size(paths: Iterable[Path]) -> int:
    """Bytes on disk of the given files (each counted once; missing ones count 0)."""
    return sum(p.stat().st_size for p in {Path(os.path.realpath(p)) for p in paths} if p.is_file())
