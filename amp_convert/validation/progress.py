"""Progress on stderr: one line per phase (``PhaseLog``), and a bar for timing runs on a terminal.

Phase lines are for anyone waiting on a long run, CI logs included; ``-q`` turns them off. The bar
only draws on a terminal (no tqdm: click's is enough).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import click

from amp_convert.core.user_text import printable


def progress_wanted() -> bool:
    """A bar only helps a person watching: both streams a TTY and not in CI."""
    if os.environ.get("CI"):
        return False
    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


class Progress:
    """Advance and relabel a click progress bar; does nothing without one."""

    def __init__(self, bar: Any = None) -> None:
        self._bar = bar

    def tick(self) -> None:
        if self._bar is not None:
            self._bar.update(1)

    def phase(self, label: str) -> None:
        if self._bar is not None:
            self._bar.label = printable(label)


@contextlib.contextmanager
def progress_bar(total: int, label: str, enabled: bool) -> Iterator[Progress]:
    """A Progress drawing on stderr when ``enabled`` (and there is something to count)."""
    if not enabled or total <= 0:
        yield Progress()
        return
    with click.progressbar(length=total, label=label, file=sys.stderr, show_eta=False) as bar:
        yield Progress(bar)


class PhaseLog:
    """Prints ``amp-convert <task>: [  1.2 s] <phase>`` lines on stderr; silent when disabled.

    ``--auto`` uses the same helper for its rounds so every command reports progress alike.
    """

    def __init__(self, enabled: bool, task: str = "validate") -> None:
        self.enabled = enabled
        self.task = task
        self._start = time.perf_counter()

    def phase(self, text: str) -> None:
        """One line for a phase that starts now (or a result worth seeing while waiting)."""
        if self.enabled:
            elapsed = time.perf_counter() - self._start
            # phases name values and files from the model: escaped, never raw on the terminal
            line = f"amp-convert {self.task}: [{elapsed:6.1f} s] {printable(text)}"
            click.echo(line, err=True)
