"""Ctrl-C from the first line of the command to the last: one line and exit 130 (stdlib only).

Why two modes: while packages import, or once the command has finished (its verdict printed),
nothing of ours needs cleaning up, and a KeyboardInterrupt raised inside a third-party import can
come out as something else (Python 3.11 wraps it in a RuntimeError when it lands in a class's
``__set_name__``; a half-imported package can later fail as "not installed"). So there SIGINT
ends the process at once (``exit_at_once``). While the command works, SIGINT raises
KeyboardInterrupt (``raise_in_work``), so the writers' clean-up (temporary files, folders) runs;
the command line turns it into the same line and 130.

The end is part of "any moment": once the command has finished, the interpreter's own shutdown
puts SIGINT back to the default (the process would die by SIGINT, silently) before ONNX
Runtime's libraries tear down. So the console entry point ends the process itself, with the
command's exit code, from the last atexit handler (``finish``): SIGINT is ours to the end.

SIGTERM keeps its documented behaviour: the default (the process ends by SIGTERM) outside a
write, clean-up first inside one (safe_write.sigterm_cleans_up). An ignored SIGINT (a job started
in the background by a shell) stays ignored.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from typing import Any

EXIT_INTERRUPTED = 130
MESSAGE = "amp-convert: interrupted"


def _ours() -> bool:
    """Whether we may set SIGINT's handler: main thread, and SIGINT not ignored by the parent."""
    if threading.current_thread() is not threading.main_thread():
        return False
    return signal.getsignal(signal.SIGINT) is not signal.SIG_IGN


def say_interrupted() -> None:
    """The one line, written straight to stderr (after anything still buffered on stdout)."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(OSError):
        os.write(2, (MESSAGE + "\n").encode())


def _exit_now(signum: int, frame: Any) -> None:
    say_interrupted()
    os._exit(EXIT_INTERRUPTED)


def exit_at_once() -> None:
    """SIGINT ends the process now with the one line and 130 (nothing to clean up)."""
    if _ours():
        signal.signal(signal.SIGINT, _exit_now)


_exit_code: int | None = None


def end_at_exit() -> None:
    """Register ``finish`` first thing, so that it runs after every other atexit handler."""
    atexit.register(finish)


def end_with(code: object) -> None:
    """The code the process ends with in ``finish`` (a SystemExit's code)."""
    global _exit_code
    _exit_code = code if isinstance(code, int) else (0 if code is None else 1)


def finish() -> None:
    """Flush and end the process with the command's code, before the interpreter's shutdown
    resets SIGINT to its default. atexit runs handlers last-registered first, and this one is
    registered as the command starts: every clean-up registered later has run."""
    if _exit_code is None:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(_exit_code)


def raise_in_work() -> None:
    """SIGINT raises KeyboardInterrupt, so the clean-up of what is being written runs."""
    if _ours():
        signal.signal(signal.SIGINT, signal.default_int_handler)
