"""Write files so that a reader sees the old file or the new one, never a half-written one.

* ``reserve``/``temp_beside``: claim a fresh name in the destination's folder (O_EXCL, so no
  other writer gets it) with mode 0666 & ~umask, as ``open()`` would create it (not mkstemp's
  0600).
* ``keep_mode``: a replaced file's permission bits carry over to its replacement.
* ``sigterm_cleans_up``: for the duration of a write, SIGTERM raises ``Terminated`` so the
  cleanup that runs on Ctrl-C (except/finally blocks) also runs on ``kill``; the signal is then
  delivered again to the handler that was there before (by default: the process ends).
* ``write_bytes``: the whole of the above for a small file (reports).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from amp_convert.errors import OutputError

_OPEN_FLAGS = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)


class Terminated(BaseException):
    """SIGTERM arrived during a write (a BaseException, like KeyboardInterrupt)."""


def reserve(path: Path) -> bool:
    """Create `path` empty if nobody has it yet (mode from the umask); False if it exists."""
    try:
        fd = os.open(path, _OPEN_FLAGS, 0o666)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def temp_beside(dst: Path, suffix: str = ".tmp") -> Path:
    """A fresh hidden file next to `dst` (same folder, so os.replace is atomic)."""
    while True:
        tmp = dst.with_name(f".{dst.name}.{secrets.token_hex(4)}{suffix}")
        if reserve(tmp):
            return tmp


def keep_mode(replaced: Path, new: Path) -> None:
    """Give `new` the permission bits of `replaced` when that exists (--force keeps modes)."""
    try:
        mode = stat.S_IMODE(os.stat(replaced).st_mode)
    except FileNotFoundError:
        return
    os.chmod(new, mode)


def unlink_quietly(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


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


def write_bytes(dst: str | os.PathLike, data: bytes) -> None:
    """Write a small file atomically: temp file in the same folder, then os.replace.

    A new file gets 0666 & ~umask, a replaced one keeps its mode. Raises OutputError.
    """
    dst = Path(dst)
    tmp = None
    with sigterm_cleans_up():
        try:
            tmp = temp_beside(dst)
            with open(tmp, "wb") as f:
                f.write(data)
            keep_mode(dst, tmp)
            os.replace(tmp, dst)
        except BaseException as e:
            unlink_quietly(tmp)
            if isinstance(e, OSError):
                raise OutputError(f"{dst}: cannot write: {e.strerror or e}") from None
            raise
