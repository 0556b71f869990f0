"""Replace an output model and its external-data file as one pair: old pair or new, never mixed.

Why a state machine: a SIGINT or SIGTERM can land between any two statements. The old writer
kept one "committed" flag set after the graph's rename, so an interrupt landing between the two
ran the failure branch, which deleted the new data file under the new graph already in place.
Here each step is entered explicitly (``Step``), and what an interruption undoes depends on what
is on disk, not on a flag: the graph counts as in place when the output's inode is the one the
temporary graph was written to. The commit itself (lock held: remove the stale temporaries of
killed writers, read the old pair's data files, link the data file to its final name, rename the
graph, remove the old data) runs with SIGINT and SIGTERM held back
(``safe_write.signals_deferred``) and so does the clean-up, so neither is cut in half.

Nothing gets a final name before the commit: the graph and the weights are written under hidden
temporary names their writer holds locked (``stale``), so a writer killed outright (SIGKILL, the
OOM killer) leaves only temporaries, which the next writer of the output removes. The data file's
temporary name is removed last, after the old pair's data: while it is there, it marks a commit
that may have been cut short (``stale.remove_stale`` finishes or undoes it).

Every interruption point therefore leaves one of:

* before the rename: the old pair as it was, our temporary graph and data file removed;
* after it: the new pair complete, and the old pair's own data files removed.

``on_step`` is a hook the tests use to deliver a signal between the steps (never in production).
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Callable, Collection
from pathlib import Path

import google.protobuf.message
import onnx

from amp_convert.core import proto_walk
from amp_convert.files import proto_checks, safe_write, stale
from amp_convert.files.outputs import file_identity


class Step(enum.Enum):
    """The steps of a pair write, in order; the hook is called on entering each."""

    START = "start"
    RESERVED = "temporary graph and data file names reserved and locked"
    WRITTEN = "graph and data written under their temporary names"
    LOCKED = "folder locked, stale temporaries of killed writers removed"
    OLD_READ = "the replaced output's data files read"
    DATA_IN_PLACE = "data file linked under its final name"
    GRAPH_IN_PLACE = "graph renamed onto the output"
    OLD_DATA_REMOVED = "the replaced output's data files removed"
    DONE = "done (the data file's temporary name removed)"


#: called with each Step as it is entered (tests deliver signals from here)
on_step: Callable[[Step], None] | None = None

#: (graph temporary path, data file temporary name or None, the data file's final name or None)
#: -> writes both, the graph referring to the data file by its final name
Writer = Callable[[str, str | None, str | None], None]
#: called once the pair is written, before it is committed, with the bytes it holds on disk
BeforeCommit = Callable[[int], None]


def _ours(slot: safe_write.Slot) -> re.Pattern[str]:
    return re.compile(re.escape(slot.name) + r"(\.[0-9a-f]{8})?\.data")


def _output_proto(slot: safe_write.Slot) -> onnx.ModelProto | None:
    dst = slot.beside(slot.name)
    if not os.path.isfile(dst):
        return None
    try:
        return onnx.load(dst, load_external_data=False)
    except (google.protobuf.message.DecodeError, ValueError, RuntimeError, OSError):
        return None


def referenced(slot: safe_write.Slot) -> set[str]:
    """The data files the output in place references (none when there is none)."""
    proto = _output_proto(slot)
    return set() if proto is None else set(proto_checks.external_locations(proto))


def our_data_files(slot: safe_write.Slot) -> list[str]:
    """Data files the existing output references that follow our naming (OUT.data, OUT.<hex>.data).

    Only these are removed once a new pair is in place: a file the old model shared with other
    models under another name is never ours to delete. Names are looked up in the slot's folder.
    """
    ours = _ours(slot)
    try:
        names = os.listdir(slot.dir_fd)
    except OSError:
        return []
    if not any(ours.fullmatch(n) for n in names):
        return []
    return sorted(n for n in referenced(slot) if ours.fullmatch(n))


def unreferenced_data_files(slot: safe_write.Slot, inputs: Collection[tuple]) -> list[str]:
    """Data files of our naming the output in place does not reference (and no input is)."""
    ours = _ours(slot)
    try:
        names = os.listdir(slot.dir_fd)
    except OSError:
        return []
    used = referenced(slot)
    return sorted(
        n
        for n in names
        if ours.fullmatch(n) and n not in used and file_identity(Path(slot.beside(n))) not in inputs
    )


def data_file_name(slot: safe_write.Slot, token: str, preferred: str | None = None) -> str:
    """OUT.data (or `preferred`) when no file has that name, else OUT.<token>.data: a name no
    reader uses."""
    conventional, unique = stale.final_data_names(slot.name, token)
    wanted = preferred or conventional
    return unique if os.path.lexists(slot.beside(wanted)) else wanted


def _relocate(graph_path: str, old: str, new: str) -> None:
    """Point the temporary graph's external tensors from data file `old` to `new`."""
    proto = onnx.load(graph_path, load_external_data=False)
    for graph in proto_walk.graphs(proto.graph):
        for tensor in graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location" and entry.value == old:
                    entry.value = new
    with open(graph_path, "r+b") as f:
        data = proto.SerializeToString()
        f.write(data)
        f.truncate(len(data))


class PairWrite:
    """One pair write into a checked Slot; ``run`` does it, undoing what an interruption leaves."""

    def __init__(
        self,
        slot: safe_write.Slot,
        external: bool,
        inputs: Collection[tuple],
        before_commit: BeforeCommit | None = None,
        preferred: str | None = None,
    ) -> None:
        self.slot, self.external, self.inputs = slot, external, inputs
        self.before_commit = before_commit
        self.preferred = preferred
        self.step = Step.START
        self.token = stale.new_token()
        self.held = stale.Held()
        self.tmp: str | None = None
        self.data_tmp: str | None = None
        self.data_name: str | None = None
        self.data_linked = False
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
            self.tmp = self.held.create(slot.name, "tmp", slot.dir_fd, self.token)
            if self.external:
                self.data_tmp = self.held.create(slot.name, "data.tmp", slot.dir_fd, self.token)
                self.data_name = data_file_name(slot, self.token, self.preferred)
            self._enter(Step.RESERVED)
            write(slot.beside(self.tmp), self.data_tmp, self.data_name)
            safe_write.keep_mode(slot.beside(slot.name), slot.beside(self.tmp))
            st = os.stat(self.tmp, dir_fd=slot.dir_fd)
            self.graph_id = (st.st_dev, st.st_ino)
            self._enter(Step.WRITTEN)
            if self.before_commit is not None:  # e.g. stage the report: it fails before we commit
                data = os.stat(self.data_tmp, dir_fd=slot.dir_fd).st_size if self.data_tmp else 0
                self.before_commit(st.st_size + data)
            with safe_write.folder_lock(slot), safe_write.signals_deferred():
                self._commit()
        except BaseException as e:
            with safe_write.signals_deferred():
                self._recover()
                self.held.release()
                if isinstance(e, OSError) and self.graph_in_place():
                    return self.data_name  # written; only a clean-up step failed
            raise
        self.held.release()
        return self.data_name

    def _commit(self) -> None:
        slot = self.slot
        self._enter(Step.LOCKED)
        stale.remove_stale(
            slot.name,
            slot.dir_fd,
            lambda: referenced(slot),
            lambda: unreferenced_data_files(slot, self.inputs),
        )
        self.previous = our_data_files(slot)
        if self.data_tmp is not None:
            assert self.data_name is not None
            if self.previous:
                safe_write.keep_mode(slot.beside(self.previous[0]), slot.beside(self.data_tmp))
            if os.path.lexists(slot.beside(self.data_name)):  # taken since we chose it
                assert self.tmp is not None
                unique = stale.final_data_names(slot.name, self.token)[1]
                _relocate(slot.beside(self.tmp), self.data_name, unique)
                self.data_name = unique
        self._enter(Step.OLD_READ)
        if self.data_tmp is not None:
            self._link_data()
        self._enter(Step.DATA_IN_PLACE)
        assert self.tmp is not None
        safe_write.commit(slot, self.tmp)
        self._enter(Step.GRAPH_IN_PLACE)
        self._remove_old_data()
        self._enter(Step.OLD_DATA_REMOVED)
        safe_write.unlink_quietly(self.data_tmp, slot.dir_fd)
        self._enter(Step.DONE)

    def _link_data(self) -> None:
        """Give the data file its final name; its temporary name stays as the commit's mark."""
        fd = self.slot.dir_fd
        assert self.data_tmp is not None and self.data_name is not None
        try:
            os.link(
                self.data_tmp, self.data_name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False
            )
        except FileExistsError:
            raise
        except OSError:  # no hard links here: a rename (a kill just after it leaves an orphan)
            os.rename(self.data_tmp, self.data_name, src_dir_fd=fd, dst_dir_fd=fd)
            self.data_tmp = None
        self.data_linked = True

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
            safe_write.unlink_quietly(self.data_tmp, slot.dir_fd)
            return
        if self.data_linked:
            safe_write.unlink_quietly(self.data_name, slot.dir_fd)
        safe_write.unlink_quietly(self.tmp, slot.dir_fd)
        safe_write.unlink_quietly(self.data_tmp, slot.dir_fd)


def write_pair(
    slot: safe_write.Slot,
    external: bool,
    inputs: Collection[tuple],
    write: Writer,
    before_commit: BeforeCommit | None = None,
    data_name: str | None = None,
) -> str | None:
    """Write a model pair into `slot` (PairWrite); an OSError becomes one OutputError line.
    `data_name`: the data file's name when free (else OUT.<hex>.data)."""
    pair = PairWrite(slot, external, inputs, before_commit, data_name)
    try:
        return pair.run(write)
    except OSError as e:
        ours = {slot.name, pair.tmp, pair.data_tmp, pair.data_name}
        raise safe_write.write_error(slot, e, ours) from None
