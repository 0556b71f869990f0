"""Replace an output model and its external-data file as one pair: old pair or new, never mixed.

Why a state machine: a SIGINT or SIGTERM can land between any two statements. The old writer
kept one "committed" flag set after the graph's rename, so an interrupt landing between the two
ran the failure branch, which deleted the new data file under the new graph already in place.
Here each step is entered explicitly (``Step``), and what an interruption undoes depends on what
is on disk, not on a flag: the graph counts as in place when the output's inode is the one the
temporary graph was written to. The commit itself (lock held: read the old pair's data files,
rename the graph, remove the old data) runs with SIGINT and SIGTERM held back
(``safe_write.signals_deferred``) and so does the clean-up, so neither is cut in half.

Every interruption point therefore leaves one of:

* before the rename: the old pair as it was, our temporary graph and fresh data file removed;
* after it: the new pair complete, and the old pair's own data files removed.

``on_step`` is a hook the tests use to deliver a signal between the steps (never in production).
"""

from __future__ import annotations

import enum
import os
import re
import secrets
from collections.abc import Callable, Collection
from pathlib import Path

import google.protobuf.message
import onnx

from amp_convert import proto_checks, safe_write
from amp_convert.output_rules import file_identity


class Step(enum.Enum):
    """The steps of a pair write, in order; the hook is called on entering each."""

    START = "start"
    RESERVED = "temporary graph and data file names reserved"
    WRITTEN = "graph and data written under their temporary names"
    LOCKED = "folder locked"
    OLD_READ = "the replaced output's data files read"
    GRAPH_IN_PLACE = "graph renamed onto the output"
    OLD_DATA_REMOVED = "the replaced output's data files removed"
    DONE = "done"


#: called with each Step as it is entered (tests deliver signals from here)
on_step: Callable[[Step], None] | None = None

#: (graph temporary name, data file name or None) -> writes both under those names
Writer = Callable[[str, str | None], None]
#: called once the pair is written, before it is committed, with the bytes it holds on disk
BeforeCommit = Callable[[int], None]


def our_data_files(slot: safe_write.Slot) -> list[str]:
    """Data files the existing output references that follow our naming (OUT.data, OUT.<hex>.data).

    Only these are removed once a new pair is in place: a file the old model shared with other
    models under another name is never ours to delete. Names are looked up in the slot's folder.
    """
    ours = re.compile(re.escape(slot.name) + r"(\.[0-9a-f]{8})?\.data")
    try:
        names = os.listdir(slot.dir_fd)
    except OSError:
        return []
    candidates = [n for n in names if ours.fullmatch(n)]
    dst = slot.beside(slot.name)
    if not candidates or not os.path.isfile(dst):
        return []
    try:
        proto = onnx.load(dst, load_external_data=False)
    except (google.protobuf.message.DecodeError, ValueError, RuntimeError, OSError):
        return []
    return sorted(n for n in proto_checks.external_locations(proto) if ours.fullmatch(n))


def reserve_data_file(slot: safe_write.Slot) -> str:
    """OUT.data when free, else OUT.<8 hex>.data: a name no reader of the old pair uses."""
    conventional = slot.name + ".data"
    if safe_write.reserve(conventional, slot.dir_fd):
        return conventional
    while True:
        name = f"{slot.name}.{secrets.token_hex(4)}.data"
        if safe_write.reserve(name, slot.dir_fd):
            return name


class PairWrite:
    """One pair write into a checked Slot; ``run`` does it, undoing what an interruption leaves."""

    def __init__(
        self,
        slot: safe_write.Slot,
        external: bool,
        inputs: Collection[tuple],
        before_commit: BeforeCommit | None = None,
    ) -> None:
        self.slot, self.external, self.inputs = slot, external, inputs
        self.before_commit = before_commit
        self.step = Step.START
        self.tmp: str | None = None
        self.data_name: str | None = None
        self.graph_id: tuple[int, int] | None = None
        self.previous: list[str] = []

    def _enter(self, step: Step) -> None:
        self.step = step
        if on_step is not None:
            on_step(step)

    def run(self, write: Writer) -> str | None:
        """Write, commit and return the data file's name (None: all in the graph)."""
        slot = self.slot
        try:
            self._enter(Step.START)
            self.tmp = safe_write.temp_name(slot)
            if self.external:
                self.data_name = reserve_data_file(slot)
            self._enter(Step.RESERVED)
            write(slot.beside(self.tmp), self.data_name)
            safe_write.keep_mode(slot.beside(slot.name), slot.beside(self.tmp))
            st = os.stat(self.tmp, dir_fd=slot.dir_fd)
            self.graph_id = (st.st_dev, st.st_ino)
            self._enter(Step.WRITTEN)
            if self.before_commit is not None:  # e.g. stage the report: it fails before we commit
                data = os.stat(self.data_name, dir_fd=slot.dir_fd).st_size if self.data_name else 0
                self.before_commit(st.st_size + data)
            with safe_write.folder_lock(slot), safe_write.signals_deferred():
                self._commit()
        except BaseException as e:
            with safe_write.signals_deferred():
                self._recover()
                if isinstance(e, OSError) and self.graph_in_place():
                    return self.data_name  # written; only a clean-up step failed
            raise
        return self.data_name

    def _commit(self) -> None:
        slot = self.slot
        self._enter(Step.LOCKED)
        self.previous = our_data_files(slot)
        if self.previous and self.data_name:
            safe_write.keep_mode(slot.beside(self.previous[0]), slot.beside(self.data_name))
        self._enter(Step.OLD_READ)
        assert self.tmp is not None
        safe_write.commit(slot, self.tmp)
        self._enter(Step.GRAPH_IN_PLACE)
        self._remove_old_data()
        self._enter(Step.OLD_DATA_REMOVED)
        self._enter(Step.DONE)

    def _remove_old_data(self) -> None:
        for old in self.previous:
            if (
                old != self.data_name
                and file_identity(Path(self.slot.beside(old))) not in self.inputs
            ):
                safe_write.unlink_quietly(old, self.slot.dir_fd)

    def graph_in_place(self) -> bool:
        """Whether the output is now our graph (same inode: the rename or link happened)."""
        if self.graph_id is None:
            return False
        try:
            st = os.stat(self.slot.name, dir_fd=self.slot.dir_fd, follow_symlinks=False)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.graph_id

    def _recover(self) -> None:
        """After an exception at any step: the old pair intact, or the new pair finished."""
        slot = self.slot
        if self.graph_in_place():
            self._remove_old_data()  # the old pair's data files are orphans now
            safe_write.unlink_quietly(self.tmp, slot.dir_fd)  # a link left by commit, if any
            return
        safe_write.unlink_quietly(self.tmp, slot.dir_fd)
        safe_write.unlink_quietly(self.data_name, slot.dir_fd)


def write_pair(
    slot: safe_write.Slot,
    external: bool,
    inputs: Collection[tuple],
    write: Writer,
    before_commit: BeforeCommit | None = None,
) -> str | None:
    """Write a model pair into `slot` (PairWrite); an OSError becomes one OutputError line."""
    pair = PairWrite(slot, external, inputs, before_commit)
    try:
        return pair.run(write)
    except OSError as e:
        ours = {slot.name, pair.tmp, pair.data_name}
        raise safe_write.write_error(slot, e, ours) from None
