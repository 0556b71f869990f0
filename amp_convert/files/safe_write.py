"""Write files so that a reader sees the old file or the new one, never a half-written one.

Every file a command writes goes through here, as a ``Slot``: its path plus the folder opened
when the path was checked (``output_rules.plan_outputs``). Temporary files are created in that
folder and the final rename is made against it (``dir_fd``), so a folder swapped for a symlink
during the work cannot redirect the write; only a regular file (or nothing) is replaced; without
``force`` the file is linked into place (never replaced, even one that appeared meanwhile).

* ``reserve``: claim a fresh name in the destination's folder (O_EXCL, so no other writer gets
  it) with mode 0666 & ~umask, as ``open()`` would create it (not mkstemp's 0600); temporaries
  are named, locked and cleaned up by ``stale``.
* ``keep_mode``: a replaced file's permission bits carry over to its replacement.
* ``sigterm_cleans_up``: for the duration of a write, SIGTERM raises ``Terminated`` so the
  cleanup that runs on Ctrl-C (except/finally blocks) also runs on ``kill``; the signal is then
  delivered again to the handler that was there before (by default: the process ends).
* ``signals_deferred``: SIGINT and SIGTERM held back for a few statements that must not be cut
  in half (a commit, its clean-up), then delivered.
* ``write_error``: an OSError of a write as one line, blaming the output, or the input when the
  failing file is one the write was reading (replaced or removed by another process meanwhile).
* ``StagedFile``: a small file written under a temporary name now and renamed into place later
  (a report that must not fail after the model it describes was committed); ``output_set``
  commits several together, all or none.
* ``write_bytes``: the whole of the above for a small file (reports).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import stat
import tempfile
import threading
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from amp_convert.errors import AmpConvertError, InputError, OutputError
from amp_convert.files import stale

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

_OPEN_FLAGS = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
#: /proc/self/fd/N names the folder held open, so writes by path cannot be redirected either
_PROC_FD = os.path.isdir("/proc/self/fd")


#: every temporary folder a command makes, by name prefix (in the system's temporary folder);
#: each is removed when its owner closes it, on Ctrl-C and on SIGTERM (sigterm_cleans_up)
TEMP_FOLDERS = {
    "amp-auto-": "--auto: weights staged for ONNX Runtime (memory-mapped)",
    "amp-auto-ref-": "--auto: reference values kept on disk",
    "amp-validate-": "validate: a model too big for one protobuf, written for ONNX Runtime",
    "amp-loadcheck-": "the model a load-check child process opens",
}


def temp_folder(prefix: str) -> tempfile.TemporaryDirectory:
    """A fresh temporary folder of a declared kind (TEMP_FOLDERS), held by this run (stale); the
    folders killed runs left behind are removed first. OutputError if none can be made."""
    if prefix not in TEMP_FOLDERS:
        raise ValueError(f"undeclared temporary folder kind {prefix!r}")
    with temp_writes(prefix):
        stale.remove_stale_folders(tuple(TEMP_FOLDERS))  # of runs killed outright (SIGKILL)
        return stale.HeldFolder(prefix)


def temp_error(prefix: str, e: OSError) -> OutputError:
    """One line for a write into a temporary folder that failed (full, a file size limit)."""
    hint = "a file size limit: see ulimit -f" if e.errno == errno.EFBIG else "set TMPDIR to a "
    hint += "" if e.errno == errno.EFBIG else "folder with room"
    return OutputError(
        f"cannot write {TEMP_FOLDERS[prefix]} in the temporary folder "
        f"{tempfile.gettempdir()}: {describe_os_error(e)} ({hint})"
    )


@contextlib.contextmanager
def temp_writes(prefix: str) -> Iterator[None]:
    """Inside: an OSError (or a write's OutputError) becomes temp_error's one line.

    The same handling as the outputs': one line, exit 2; the caller removes the folder.
    """
    try:
        yield
    except OSError as e:
        raise temp_error(prefix, e) from None
    except OutputError as e:
        cause = e.__cause__ or e.__context__
        if isinstance(cause, OSError):
            raise temp_error(prefix, cause) from None
        raise OutputError(f"cannot write {TEMP_FOLDERS[prefix]}: {e}") from None


class Terminated(BaseException):
    """SIGTERM arrived during a write (a BaseException, like KeyboardInterrupt)."""


class Slot(os.PathLike):
    """One output file: its path, label, --force, and its folder opened at check time.

    A Slot is os.PathLike (its path), so report writers take it wherever they take a path.
    """

    def __init__(self, label: str, path: Path, force: bool, dir_fd: int) -> None:
        self.label, self.path, self.force, self.dir_fd = label, Path(path), force, dir_fd

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"Slot({self.label!r}, {str(self.path)!r})"

    @property
    def name(self) -> str:
        return self.path.name

    def beside(self, name: str) -> str:
        """A path for `name` in the held folder (through /proc/self/fd where there is one)."""
        if _PROC_FD:
            return f"/proc/self/fd/{self.dir_fd}/{name}"
        return str(self.path.with_name(name))


def open_folder(path: Path) -> int:
    """The folder of `path`, opened (OutputError when it cannot be)."""
    parent = path.parent
    try:
        return os.open(parent, _DIR_FLAGS)
    except OSError as e:
        raise OutputError(f"{path}: cannot open folder {parent}: {e.strerror or e}") from None


@contextlib.contextmanager
def adhoc_slot(dst: str | os.PathLike, label: str = "output") -> Iterator[Slot]:
    """A Slot for a path not planned by a command (API callers, temporary folders): force."""
    if isinstance(dst, Slot):
        yield dst
        return
    path = Path(dst)
    fd = open_folder(path)
    try:
        yield Slot(label, path, True, fd)
    finally:
        os.close(fd)


def reserve(path: Path | str, dir_fd: int | None = None) -> bool:
    """Create `path` empty if nobody has it yet (mode from the umask); False if it exists."""
    try:
        fd = os.open(path, _OPEN_FLAGS, 0o666, dir_fd=dir_fd)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def keep_mode(replaced: Path | str, new: Path | str) -> None:
    """Give `new` the permission bits of `replaced` when that exists (--force keeps modes)."""
    try:
        mode = stat.S_IMODE(os.stat(replaced).st_mode)
    except FileNotFoundError:
        return
    os.chmod(new, mode)


def unlink_quietly(path: Path | str | None, dir_fd: int | None = None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path, dir_fd=dir_fd)


@contextlib.contextmanager
def folder_lock(slot: Slot) -> Iterator[None]:
    """Hold the slot's folder exclusively (flock) while a writer commits its files there."""
    if fcntl is None:
        yield
        return
    fcntl.flock(slot.dir_fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(slot.dir_fd, fcntl.LOCK_UN)


def check_replaceable(slot: Slot) -> None:
    """Refuse, at commit time, a destination that is not a regular file (FIFO, device, folder)."""
    try:
        st = os.stat(slot.name, dir_fd=slot.dir_fd)
    except FileNotFoundError:
        return
    except OSError as e:
        raise OutputError(f"{slot.path}: cannot write {slot.label}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(
            f"{slot.path}: {slot.label} is not a regular file; only regular files are replaced"
        )


def commit(slot: Slot, tmp_name: str) -> None:
    """Rename the finished temporary `tmp_name` onto the slot, both in the held folder.

    Without force the file is hard-linked into place, which fails on an existing name: a file
    that appeared during the run is never replaced.
    """
    fd = slot.dir_fd
    check_replaceable(slot)
    if slot.force:
        os.replace(tmp_name, slot.name, src_dir_fd=fd, dst_dir_fd=fd)
        return
    try:
        os.link(tmp_name, slot.name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
    except FileExistsError:
        raise OutputError(
            f"{slot.path}: {slot.label} appeared during the run (use --force to overwrite)"
        ) from None
    except OSError:  # no hard links here (some filesystems): a rename that may not replace
        if os.path.lexists(slot.beside(slot.name)):
            raise OutputError(
                f"{slot.path}: {slot.label} appeared during the run (use --force to overwrite)"
            ) from None
        os.rename(tmp_name, slot.name, src_dir_fd=fd, dst_dir_fd=fd)
        return
    unlink_quietly(tmp_name, fd)


@contextlib.contextmanager
def sigterm_cleans_up() -> Iterator[None]:
    """Turn SIGTERM into ``Terminated`` inside the block, then re-deliver it once cleaned up.

    Only in the main thread (Python delivers signals there) and only where SIGTERM is not
    ignored. A second SIGTERM during the cleanup is held back until the block is left.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN or previous is None:
        yield
        return
    raised = False

    def handler(signum: int, frame: object) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Terminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except Terminated:
        signal.signal(signal.SIGTERM, previous)
        os.kill(os.getpid(), signal.SIGTERM)  # the previous handler decides (default: exit)
        raise OutputError("write interrupted by SIGTERM; nothing was written") from None
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back inside the block; deliver them (once each) on leaving it.

    For a few statements that must run whole (a rename and the state that records it). Only in
    the main thread (Python runs handlers there); an ignored signal stays ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: object) -> None:
        pending.append(signum)

    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler is signal.SIG_IGN or handler is None:
            continue
        previous[sig] = handler
        signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)  # to the handler restored above


#: numpy's words for a short write (ndarray.tofile): "1048576 requested and 524288 written"
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")


def describe_os_error(e: OSError) -> str:
    """An OSError's reason in words; a short write (no errno) says what it usually means."""
    short = _SHORT_WRITE.search(str(e))
    if short and not e.errno:
        wanted, done = short.groups()
        return (
            f"the disk is full or a file size limit was reached (only {done} of {wanted} "
            "bytes written)"
        )
    return e.strerror or str(e)


def write_error(slot: Slot, e: OSError, ours: Collection[str | None] = ()) -> AmpConvertError:
    """One line for an OSError raised while writing `slot`.

    `ours` are the names the write creates in the slot's folder; an error on another named file
    comes from reading (a lazily read weight of the input, replaced or removed by another
    process meanwhile) and blames that file, not the output.
    """
    name = e.filename
    if isinstance(name, str | bytes | os.PathLike) and os.fsdecode(name):
        path = os.fsdecode(name)
        ours_here = {n for n in ours if n} | {slot.name}
        held = f"/proc/self/fd/{slot.dir_fd}/" if _PROC_FD else None
        if os.path.basename(path) not in ours_here and not (held and path.startswith(held)):
            return InputError(
                f"{path}: cannot read: {describe_os_error(e)} (was it replaced or removed "
                "during the run?)"
            )
    return OutputError(f"{slot.path}: cannot write {slot.label}: {describe_os_error(e)}")


class StagedFile:
    """`data` written to a fresh temporary name in the slot's folder, committed or discarded later.

    Writing is what fails (a full disk, a size limit); the commit is a rename in a held folder.
    Staging a report before the model it describes is committed means a report that cannot be
    written fails the run while the old output is still in place. The temporary is held locked
    until it is committed or discarded (``stale``). Raises OutputError.
    """

    def __init__(self, slot: Slot, data: bytes) -> None:
        self.slot, self.tmp = slot, None
        self.held = stale.Held()
        self.committed_id: tuple[int, int] | None = None
        self.backup: str | None = None
        try:
            self.tmp = self.held.create(slot.name, "tmp", slot.dir_fd)
            with open(slot.beside(self.tmp), "wb") as f:
                f.write(data)
            keep_mode(slot.beside(slot.name), slot.beside(self.tmp))
        except BaseException as e:
            name = self.tmp
            self.discard()
            if isinstance(e, OSError):
                raise write_error(slot, e, (name,)) from None
            raise

    def commit(self, keep_backup: bool = False) -> None:
        """Rename the staged file onto its slot (once). With `keep_backup`, a file it replaces
        stays linked under a held temporary name until ``drop_backup`` or ``roll_back``."""
        if self.tmp is None:
            return
        slot = self.slot
        try:
            with folder_lock(slot), signals_deferred():
                stale.remove_stale(slot.name, slot.dir_fd, set, list)
                if keep_backup and slot.force:
                    self.backup = self._backup()
                commit(slot, self.tmp)
                st = os.stat(slot.name, dir_fd=slot.dir_fd, follow_symlinks=False)
                self.committed_id = (st.st_dev, st.st_ino)
                self.tmp = None
        except OSError as e:
            self.drop_backup()
            raise write_error(self.slot, e) from None
        except BaseException:
            self.drop_backup()
            raise
        finally:
            self.discard()

    def _backup(self) -> str | None:
        """Link the file about to be replaced to a held temporary name (None: there is none)."""
        slot = self.slot
        if not os.path.isfile(slot.beside(slot.name)):
            return None
        while True:
            name = stale.temp_name(slot.name, stale.new_token(), "bak")
            try:
                os.link(
                    slot.name,
                    name,
                    src_dir_fd=slot.dir_fd,
                    dst_dir_fd=slot.dir_fd,
                    follow_symlinks=False,
                )
            except FileExistsError:
                continue
            self.held.hold(os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=slot.dir_fd))
            return name

    def roll_back(self) -> None:
        """Undo ``commit``: the replaced file back in place, or the new one removed."""
        slot, backup = self.slot, self.backup
        with folder_lock(slot), signals_deferred():
            if backup is not None:
                os.replace(backup, slot.name, src_dir_fd=slot.dir_fd, dst_dir_fd=slot.dir_fd)
                self.backup = None
            elif self.committed_id is not None:
                try:
                    st = os.stat(slot.name, dir_fd=slot.dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    st = None
                if st is not None and (st.st_dev, st.st_ino) == self.committed_id:
                    unlink_quietly(slot.name, slot.dir_fd)
            self.committed_id = None
        self.held.release()

    def drop_backup(self) -> None:
        """The commit stands: the replaced file's backup goes."""
        backup, self.backup = self.backup, None
        unlink_quietly(backup, self.slot.dir_fd)
        self.held.release()

    def discard(self) -> None:
        """Remove the staged file if it was not committed (idempotent)."""
        tmp, self.tmp = self.tmp, None
        unlink_quietly(tmp, self.slot.dir_fd)
        if self.backup is None:
            self.held.release()


def write_bytes(dst: str | os.PathLike, data: bytes) -> None:
    """Write a small file atomically: temp file in the same folder, then a rename (dir_fd).

    A new file gets 0666 & ~umask, a replaced one keeps its mode. Raises OutputError.
    """
    with adhoc_slot(dst, "file") as slot, sigterm_cleans_up():
        StagedFile(slot, data).commit()
