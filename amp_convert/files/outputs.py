"""The output registry: which paths a run may write, checked all together before any work.

A run reads its input files (the model and every external-data file it references, an inputs
file, an op-list file) and writes its outputs (the model, its data file, reports, temporary
folders). ``plan_outputs`` checks every output at once and hands back an ``OutputPlan`` of
``Slot``s (safe_write), each holding its folder open: the writers (safe_write.write_bytes,
io.save_model) create and rename files only inside that folder. The rules:

* no output is an input file, no two outputs are the same file (files are compared, not strings:
  symlinks resolved, hard links by inode);
* an existing file is replaced only with --force, and only a regular file (never a FIFO, a
  device or a folder, nor a symlink to one);
* the path names a file: not empty, not ending in '/', a name short enough for a temporary
  sibling, in a folder that exists and is writable.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import google.protobuf.message
import onnx

from amp_convert.core import user_text
from amp_convert.errors import InputError, OutputError
from amp_convert.files import file_kinds
from amp_convert.files.proto_checks import external_locations, resolve_location
from amp_convert.files.safe_write import Slot, open_folder

#: labels whose path is never written under its own name by the rules here (only claimed)
CLAIM_ONLY = ("output data file",)
#: longest file name (bytes) a model output may have: its data file OUT.<8 hex>.data adds 14
MAX_MODEL_NAME_BYTES = 255 - 14
#: longest file name of any other output (temporary names are shortened to fit)
MAX_NAME_BYTES = 255
#: labels of outputs that may come with an external-data file
_MODEL_LABELS = ("output",)


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
            if not Path(path).is_file():
                return [path]
            proto = onnx.load(str(path), load_external_data=False)
        except (google.protobuf.message.DecodeError, ValueError, RuntimeError, OSError):
            return [path]
    return [path, *(resolve_location(path, loc) for loc in sorted(external_locations(proto)))]


def file_identity(path: Path) -> tuple:
    """What makes two paths the same file: (device, inode) when it exists, else the real path."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the path (refused by its own check)
        return ("path", os.fspath(path))
    return ("inode", st.st_dev, st.st_ino)


def _check_name(label: str, path: Path) -> None:
    text = os.fspath(path)
    if not text:
        raise OutputError(f"{label}: empty path")
    if problem := user_text.text_problem(text):  # the API's paths: the CLI checks argv itself
        raise OutputError(f"{label} '{user_text.printable(text)}': {problem}")
    if text.endswith(("/", os.sep)) or path.name in ("", ".", ".."):
        raise OutputError(f"{text}: {label} must name a file, not a folder")
    limit = MAX_MODEL_NAME_BYTES if label in _MODEL_LABELS else MAX_NAME_BYTES
    size = len(os.fsencode(path.name))
    if size > limit:
        why = " (its data file needs 14 more)" if label in _MODEL_LABELS else ""
        raise OutputError(
            f"{path.name[:40]}...: {label} file name is {size} bytes long; at most {limit}{why}"
        )


def _check_target(label: str, path: Path, force: bool) -> None:
    """An existing file: only with force, only a regular file; the folder exists, writable."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        st = None
        if os.path.islink(path):  # a broken symlink: the name is taken, by no regular file
            raise OutputError(
                f"{path}: {label} is a broken symlink (to nothing); only regular files are "
                "replaced (remove it or choose another path)"
            ) from None
    except OSError as e:
        kind = file_kinds.not_a_file(path)
        if kind is not None and "symlink" in kind:
            raise OutputError(f"{path}: {label} {kind}") from None
        raise OutputError(f"{path}: cannot write {label}: {e.strerror or e}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{path}: {label} is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(
                f"{path}: {label} is not a regular file (a FIFO, device or socket); only "
                "regular files are replaced"
            )
        if not force:
            raise OutputError(f"{path}: {label} exists (use --force to overwrite)")
    parent = path.parent
    if why := file_kinds.not_a_folder(parent):
        raise OutputError(f"{path}: cannot write {label}: folder {parent} {why}")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{path}: cannot write {label}: folder {parent} is not writable")


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
            input_ids.setdefault(file_identity(p), (p, files[0]))
    seen: dict[tuple, str] = {}
    for label, path in outputs:
        _check_name(label, Path(path))
        ident = file_identity(path)
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
        if label not in CLAIM_ONLY:
            _check_target(label, Path(path), force)


class OutputPlan:
    """The checked outputs of one run, by label; each Slot holds its folder open until close()."""

    def __init__(self, slots: dict[str, Slot]) -> None:
        self._slots = slots

    def __getitem__(self, label: str) -> Slot:
        return self._slots[label]

    def get(self, label: str) -> Slot | None:
        return self._slots.get(label)

    def __iter__(self) -> Iterator[Slot]:
        return iter(self._slots.values())

    def close(self) -> None:
        for fd in {s.dir_fd for s in self._slots.values()}:
            os.close(fd)
        self._slots = {}

    def __enter__(self) -> OutputPlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def plan_outputs(
    outputs: Sequence[tuple[str, Path | None]], inputs: Iterable[Sequence[Path]], force: bool
) -> OutputPlan:
    """Check every output together (check_outputs) and open their folders: the run's plan.

    Outputs whose path is None are not written by this run and are left out.
    """
    given = [(label, Path(p)) for label, p in outputs if p is not None]
    check_outputs(given, inputs, force)
    folders: dict[tuple, int] = {}
    slots: dict[str, Slot] = {}
    try:
        for label, path in given:
            if label in CLAIM_ONLY:
                continue
            key = file_identity(path.parent)
            if key not in folders:
                folders[key] = open_folder(path)
            slots[label] = Slot(label, path, force, folders[key])
    except BaseException:
        for fd in folders.values():
            os.close(fd)
        raise
    return OutputPlan(slots)


def planned_inputs_file(
    stack: contextlib.ExitStack,
    path: str | os.PathLike | None,
    models: Iterable[object],
    inputs: object,
    force: bool,
) -> Slot | None:
    """An API's ``save_inputs`` through the registry, as the command line's ``--save-inputs``:
    never one of the `models` given as paths (nor their data) or an `inputs` file, an existing
    file only with `force`. A Slot a command planned already is returned as it is."""
    if path is None or isinstance(path, Slot):
        return path
    read = [model_files(Path(m)) for m in models if isinstance(m, str | os.PathLike)]
    files = inputs if isinstance(inputs, list | tuple) else [inputs]
    read += [[Path(f)] for f in files if isinstance(f, str | os.PathLike)]
    plan = stack.enter_context(plan_outputs([("inputs file", Path(path))], read, force))
    return plan["inputs file"]


def default_output_path(src: str | os.PathLike, dtype: str) -> Path:
    """model.onnx → model.fp16.onnx (model.bf16.onnx for bf16), next to the input."""
    path = Path(src)
    if not path.name:
        raise InputError(f"{str(src)!r}: not a model file")
    stem = path.name[: -len(".onnx")] if path.name.endswith(".onnx") else path.name
    return path.with_name(f"{stem}.{dtype}.onnx")
