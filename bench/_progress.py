"""One progress line on stderr, with the seconds since the bench started: a bench that runs for
more than 30 seconds says what it is doing (the figures go to stdout, unmixed)."""

from __future__ import annotations

import sys
import time

_START = time.perf_counter()


def progress(message: str) -> None:
    """``[  12.3 s] message`` on stderr, flushed."""
    print(f"[{time.perf_counter() - _START:7.1f} s] {message}", file=sys.stderr, flush=True)


class Every:
    """`progress` at most once per `seconds`: for loops of thousands of quick steps."""

    def __init__(self, seconds: float = 10.0) -> None:
        self.seconds = seconds
        self._last = time.perf_counter()

    def __call__(self, message: str) -> None:
        now = time.perf_counter()
        if now - self._last >= self.seconds:
            self._last = now
            progress(message)
