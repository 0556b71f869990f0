"""A tiny progress helper on click (no tqdm): a bar on a terminal, silence everywhere else."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import click


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
            self._bar.label = label


@contextlib.contextmanager
def progress_bar(total: int, label: str, enabled: bool) -> Iterator[Progress]:
    """A Progress drawing on stderr when ``enabled`` (and there is something to count)."""
    if not enabled or total <= 0:
        yield Progress()
        return
    with click.progressbar(length=total, label=label, file=sys.stderr, show_eta=False) as bar:
        yield Progress(bar)
