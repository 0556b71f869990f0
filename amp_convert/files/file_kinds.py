"""What a path that should be a regular file (or a folder) is instead, in words for one line.

"No such file" for a FIFO, a device or a folder sends the user looking for a missing file; the
messages name what is there.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "is a folder, not a file"),
    (stat.S_ISFIFO, "is a FIFO (named pipe), not a file"),
    (stat.S_ISCHR, "is a character device, not a file"),
    (stat.S_ISBLK, "is a block device, not a file"),
    (stat.S_ISSOCK, "is a socket, not a file"),
)


def not_a_file(path: str | os.PathLike) -> str | None:
    """Why `path` is not a regular file ("does not exist", "is a FIFO ..."); None when it is one."""
    try:
        mode = os.stat(path).st_mode
    except ValueError:  # a NUL: no file can have that name
        return "is not a usable path (it holds a NUL character)"
    except FileNotFoundError:
        return "is a broken symlink (to nothing)" if os.path.islink(path) else "does not exist"
    except UnicodeEncodeError:  # a lone surrogate no file system name can hold
        return "is not a usable path (not valid UTF-8)"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is a symlink loop (too many levels of symbolic links)"
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISREG(mode):
        return None
    return next((words for test, words in _KINDS if test(mode)), "is not a regular file")


def not_a_folder(path: str | os.PathLike) -> str | None:
    """Why `path` is not a folder ("does not exist", "is a file, not a folder"); None when it is."""
    if Path(path).is_dir():
        return None
    why = not_a_file(path)
    if why is None:
        return "is a file, not a folder"
    return why.replace("not a file", "not a folder")
