"""Hand a model to ONNX Runtime without a second in-memory copy of its weights.

Why: a probe session needs the model with extra graph outputs, and serialising an ir.Model whose
weights are in memory (or lazily converted) copies every weight into the protobuf, then again into
the bytes ORT parses, then into ORT's own buffers. For a model with large weights the search
instead writes them once as external data (converted weights are computed one tensor at a time
while writing) and keeps only the weight-free graph in memory; ORT memory-maps the data file, so
the weights are read from the page cache, never copied into private memory (see ``lean_options``).
A model whose weights are already external data in one folder is passed as is.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_ir as ir

from amp_convert import io, safe_write
from amp_convert.validation.runtime import ModelSource

#: weights above this many bytes go to a temporary external-data file instead of the protobuf
SPILL_BYTES = 64 << 20


@dataclass
class Staged:
    """A model ready for probe sessions: the weight-free graph plus where its weights are."""

    source: ModelSource
    #: the weights are external data ORT can memory-map (no private copy)
    mapped: bool
    _tmp: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    @property
    def proto(self) -> onnx.ModelProto:
        return self.source.proto

    def close(self) -> None:
        """Delete the temporary folder, if one was written (after its sessions are closed)."""
        tmp, self._tmp = self._tmp, None
        if tmp is not None:
            tmp.cleanup()


def _external_dirs(model: ir.Model) -> tuple[set[str], int]:
    """Base folders of external tensors, and bytes of the tensors held in memory."""
    dirs: set[str] = set()
    in_memory = 0
    for graph in model.graphs():
        for value in graph.initializers.values():
            t = value.const_value
            if isinstance(t, ir.ExternalTensor):
                dirs.add(os.path.realpath(t.base_dir or "."))
            elif t is not None:
                in_memory += t.nbytes
    return dirs, in_memory


def stage(model: ir.Model, label: str, *, spill_bytes: int | None = None) -> Staged:
    """``model`` as a Staged source: external data reused or written, or a small protobuf."""
    spill_bytes = SPILL_BYTES if spill_bytes is None else spill_bytes
    dirs, in_memory = _external_dirs(model)
    if len(dirs) == 1 and in_memory <= spill_bytes:
        proto = ir.serde.serialize_model(model)  # external tensors stay references
        return Staged(ModelSource(label, b"", proto, dirs.pop()), mapped=True)
    if in_memory <= spill_bytes and not dirs:
        return Staged(ModelSource(label, b"", ir.serde.serialize_model(model), None), False)
    tmp = safe_write.temp_folder("amp-auto-")
    try:
        path = os.path.join(tmp.name, "model.onnx")
        with safe_write.temp_writes("amp-auto-"):
            io.save_model(model, path, external=True)
        proto = onnx.load(path, load_external_data=False)
    except BaseException:
        tmp.cleanup()
        raise
    return Staged(ModelSource(label, path, proto, tmp.name), mapped=True, _tmp=tmp)


def lean_options(mapped: bool, arena: bool = False) -> Callable[[Any], None]:
    """SessionOptions for probes: mapped weights stay mapped, activations optionally unpooled.

    Prepacking copies every constant MatMul/Conv weight into private memory (a second copy of the
    model); with memory-mapped weights it is disabled so the weights stay clean, shared pages of
    the data file. Without ``arena``, ORT's CPU arena does not keep the peak of every run for the
    session's life: each fetched batch is freed once read (the reference's single pass, or
    candidates whose activations exceed the budget); with it, repeated small runs are faster.
    """

    def configure(so: Any) -> None:
        so.enable_cpu_mem_arena = arena
        if mapped:
            so.add_session_config_entry("session.disable_prepacking", "1")

    return configure
