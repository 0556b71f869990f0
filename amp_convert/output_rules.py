"""Which paths a run may write: checked all together, before any work.

A run reads its input files (the model and every external-data file it references) and writes
its outputs (the model, its data file, reports). No output may be an input file, no two outputs
may be the same file, and an existing file is replaced only with --force. Paths are compared as
files (symlinks resolved, hard links by inode), not as strings.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import google.protobuf.message
import onnx

from amp_convert.errors import OutputError
from amp_convert.proto_checks import external_locations, resolve_location

#: labels whose path is never written under its own name by the rules here (only claimed)
CLAIM_ONLY = ("output data file",)


def data_file_name(dst: Path) -> Path:
    """The conventional external-data file of an output model: OUT.data next to it."""
    return dst.with_name(dst.name + ".data")


def model_files(path: Path, proto: onnx.ModelProto | None = None) -> list[Path]:
    """The model file and the external-data files it references (resolved paths).

    Without `proto` the file is parsed (weights not loaded); an unreadable file counts as just
    itself: whoever reads it later reports why it is bad.
    """
    if proto is None:
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except (google.protobuf.message.DecodeError, ValueError, RuntimeError, OSError):
            return [path]
    return [path, *(resolve_location(path, loc) for loc in sorted(external_locations(proto)))]


def _identity(path: Path) -> tuple:
    """What makes two paths the same file: (device, inode) when it exists, else the real path."""
    try:
        st = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return ("inode", st.st_dev, st.st_ino)


def check_outputs(
    outputs: Sequence[tuple[str, Path]], inputs: Iterable[Sequence[Path]], force: bool
) -> None:
    """Refuse (OutputError) any output that is an input, another output, or exists without force.

    `outputs` are (label, path) pairs, e.g. ("output", o.onnx), ("report", r.json); a label in
    CLAIM_ONLY only reserves the name (never an input or another output; it may exist).
    `inputs` are the files each input reads: model_files() of a model, [path] of another file.
    """
    input_ids: dict[tuple, tuple[Path, Path]] = {}  # identity -> (file, the input it belongs to)
    for files in inputs:
        for p in files:
            input_ids.setdefault(_identity(p), (p, files[0]))
    seen: dict[tuple, str] = {}
    for label, path in outputs:
        if not str(path):
            raise OutputError(f"{label}: empty path")
        ident = _identity(path)
        if ident in input_ids:
            what, owner = input_ids[ident]
            if what is owner:
                raise OutputError(f"{path}: {label} would overwrite the input {what}")
            raise OutputError(
                f"{path}: {label} would overwrite {what}, the external data of the input "
                f"model {owner}; choose another path"
            )
        if ident in seen:
            raise OutputError(f"{path}: {label} is also the {seen[ident]}; choose another path")
        seen[ident] = label
        if label in CLAIM_ONLY:
            continue
        if path.is_dir():
            raise OutputError(f"{path}: {label} is a directory")
        if path.exists() and not force:
            raise OutputError(f"{path}: {label} exists (use --force to overwrite)")
        parent = path.parent
        if not parent.is_dir():
            raise OutputError(f"{path}: cannot write {label}: folder {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise OutputError(f"{path}: cannot write {label}: folder {parent} is not writable")
