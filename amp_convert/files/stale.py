"""Temporary files of an output, held by their writer, and removed by the next one once stale.

Why: a writer killed by SIGKILL (or the OOM killer, or a power cut) runs no clean-up. Before,
such a kill left a full-size ``OUT.onnx.data`` under its final name that no later run removed:
k kills of an N GB conversion left k·N GB. Now every file a write makes before its commit has a
hidden temporary name that says whose it is and what it is::

    .OUT.<token>.tmp        the graph (or a report) being written
    .OUT.<token>.data.tmp   the weights being written; linked to its final name at commit
    .OUT.<token>.bak        a replaced file kept until the outputs it goes with are committed

and its writer holds an exclusive ``flock`` on it for as long as it lives. The kernel drops
that lock when the process dies, however it dies. The next writer of OUT, holding the folder's
lock (``safe_write.folder_lock``: commits are one at a time), removes every temporary of OUT
whose lock it can take: its writer is gone. A ``.data.tmp`` that still has a second link under a
final data name marks a commit that was cut short: if OUT references that name, the commit went
through and only the old pair's data files are left to remove; if not, the linked name goes too.

Temporary folders (``safe_write.temp_folder``) follow the same rule: each holds an owner file its
run keeps locked (``HeldFolder``), and a run making one removes those of killed runs first.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

#: the longest stem a temporary name keeps of its output's name: "." + stem + "." + 8 hex +
#: ".data.tmp" fits in 255 bytes
STEM_BYTES = 255 - 1 - 1 - 8 - len(".data.tmp")
KINDS = ("tmp", "data.tmp", "bak")
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_CREATE_FLAGS = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)


def stem(name: str) -> str:
    """The part of an output's name its temporaries keep (a byte budget; a cut character
    round-trips as the surrogate escapes os.fsdecode gives it)."""
    return os.fsdecode(os.fsencode(name)[:STEM_BYTES])


def temp_name(output: str, token: str, kind: str) -> str:
    return f".{stem(output)}.{token}.{kind}"


def pattern(output: str) -> re.Pattern[str]:
    """What the temporaries of `output` are named (see the module docstring)."""
    kinds = "|".join(re.escape(k) for k in KINDS)
    return re.compile(rf"\.{re.escape(stem(output))}\.(?P<token>[0-9a-f]{{8}})\.(?P<kind>{kinds})")


def new_token() -> str:
    """Eight random hex digits naming one run's temporary files (``os.urandom``, as
    ``secrets.token_hex`` reads it, without importing secrets' hmac and hashlib at start-up)."""
    return os.urandom(4).hex()


class Held:
    """Temporary files created and locked by this writer; ``release`` lets go of them all."""

    def __init__(self) -> None:
        self._fds: list[int] = []

    def create(self, output: str, kind: str, dir_fd: int, token: str | None = None) -> str:
        """A fresh temporary of `output` (mode from the umask), locked; its name."""
        while True:
            name = temp_name(output, token or new_token(), kind)
            try:
                fd = os.open(name, _CREATE_FLAGS, 0o666, dir_fd=dir_fd)
            except FileExistsError:
                if token is not None:
                    raise
                continue
            self.hold(fd)
            return name

    def hold(self, fd: int) -> None:
        """Keep `fd` open and its file locked until ``release`` (or the process ends)."""
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._fds.append(fd)

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def alive(name: str, dir_fd: int) -> bool:
    """Whether a live writer holds temporary `name` (its lock cannot be taken)."""
    if fcntl is None:  # pragma: no cover - no locks: never call anything stale
        return True
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)
    return False


def _inode(name: str, dir_fd: int) -> tuple[int, int] | None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def final_data_names(output: str, token: str) -> tuple[str, str]:
    """The names a write with `token` may give its data file: OUT.data, else OUT.<token>.data."""
    return (f"{output}.data", f"{output}.{token}.data")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with contextlib.suppress(FileNotFoundError):
        yield


def remove_stale(
    output: str,
    dir_fd: int,
    referenced: Callable[[], Collection[str]],
    orphans: Callable[[], Collection[str]],
) -> list[str]:
    """Remove the temporaries of `output` whose writers are gone; the names removed.

    Call with the folder's lock held. `referenced()`: the data files the output in place
    references; `orphans()`: data files of our naming it does not reference (to remove when a
    commit went through but was killed before removing the old pair's data).
    """
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return []
    ours = pattern(output)
    removed: list[str] = []
    for name in names:
        match = ours.fullmatch(name)
        if match is None or alive(name, dir_fd):
            continue
        if match["kind"] == "data.tmp":
            mine = _inode(name, dir_fd)
            for final in final_data_names(output, match["token"]):
                if mine is None or _inode(final, dir_fd) != mine:
                    continue
                if final in referenced():  # the commit went through: finish it
                    for orphan in orphans():
                        with _quiet():
                            os.unlink(orphan, dir_fd=dir_fd)
                            removed.append(orphan)
                else:
                    with _quiet():
                        os.unlink(final, dir_fd=dir_fd)
                        removed.append(final)
        with _quiet():
            os.unlink(name, dir_fd=dir_fd)
            removed.append(name)
    return removed


# -- temporary folders (TMPDIR) ---------------------------------------------------------------

#: the file a temporary folder's owner holds locked for as long as it lives
OWNER = ".amp-owner"


class HeldFolder(tempfile.TemporaryDirectory):
    """A temporary folder whose owner holds a lock on a file inside it: a later run tells the
    folder of a killed run (its lock free) from one in use (``remove_stale_folders``)."""

    def __init__(self, prefix: str) -> None:
        super().__init__(prefix=prefix)
        self._held = Held()
        # locked under another name first: an owner file seen unlocked always means a dead owner
        # (a concurrent run checking between the create and the lock took live folders away)
        claim = os.path.join(self.name, OWNER + ".claim")
        fd = os.open(claim, _CREATE_FLAGS, 0o600)
        self._held.hold(fd)
        os.rename(claim, os.path.join(self.name, OWNER))

    def cleanup(self) -> None:
        self._held.release()
        super().cleanup()


def remove_stale_folders(prefixes: tuple[str, ...]) -> list[str]:
    """Remove the temporary folders of killed runs (`prefixes`, in the system's temporary
    folder): those holding an owner file nobody holds locked. Folders without one (not ours, or
    an older version's) are left alone. The names removed."""
    root = tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(prefixes) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            fd = os.open(os.path.join(entry.path, OWNER), _READ_FLAGS)
        except OSError:
            continue
        try:
            if fcntl is None:  # pragma: no cover - no locks: nothing is known stale
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its owner is alive
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
        finally:
            os.close(fd)
    return removed
