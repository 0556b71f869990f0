"""Path options of the command line, each declared as an input or an output of the run.

Every click option or argument that takes a path uses ``OutputPath`` (a file the command writes,
with the label its errors use and the flags it needs) or ``InputPath`` (a file it reads), so the
output registry (output_rules.plan_outputs) sees every file of a run from the command's own
declaration: a new flag cannot skip the checks (tests/files/test_outputs.py enumerates them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from amp_convert.core.user_text import printable
from amp_convert.files import file_kinds
from amp_convert.files.outputs import model_files


class OutputPath(click.Path):
    """A file the command writes: `label` names it in errors; `needs` are flags it goes with."""

    def __init__(self, label: str, needs: Sequence[str] = ()) -> None:
        super().__init__(dir_okay=False, path_type=Path)
        self.label = label
        self.needs = tuple(needs)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        if not text:
            self.fail(f"{self.label}: empty path", param, ctx)
        if text.endswith("/"):
            self.fail(f"{text}: {self.label} must name a file, not a folder", param, ctx)
        return Path(text)


class InputPath(click.Path):
    """A file the command reads: a model (with its external data) or another file."""

    def __init__(self, model: bool = False, must_exist: bool = True, as_str: bool = False) -> None:
        super().__init__(exists=must_exist, dir_okay=False, path_type=None if as_str else Path)
        self.model = model

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """A symlink loop or a broken symlink said so, not click's "does not exist"."""
        if self.exists and isinstance(value, str) and value:
            why = file_kinds.not_a_file(value)
            if why is not None and "symlink" in why:
                self.fail(f"'{printable(value)}' {why}", param, ctx)
        return super().convert(value, param, ctx)


def output_params(command: click.Command) -> list[click.Parameter]:
    return [p for p in command.params if isinstance(p.type, OutputPath)]


def declared_outputs(ctx: click.Context) -> list[tuple[str, Path | None]]:
    """(label, path) of every output option of the running command (None when not given)."""
    out = []
    for p in output_params(ctx.command):
        value = ctx.params.get(p.name or "")
        assert isinstance(p.type, OutputPath)
        out.append((p.type.label, Path(value) if value is not None else None))
    return out


def declared_inputs(ctx: click.Context) -> list[list[Path]]:
    """The files each input option of the running command reads (a model: with its data)."""
    read: list[list[Path]] = []
    for p in ctx.command.params:
        if not isinstance(p.type, InputPath):
            continue
        value = ctx.params.get(p.name or "")
        values = value if isinstance(value, list | tuple) else [value]
        for v in values:
            if v is None or not str(v):
                continue
            read.append(model_files(Path(v)) if p.type.model else [Path(v)])
    return read


def check_needs(ctx: click.Context, given: Mapping[str, bool]) -> None:
    """Refuse an output option given without the flag it goes with (`given`: flag -> set)."""
    for p in output_params(ctx.command):
        assert isinstance(p.type, OutputPath)
        if ctx.params.get(p.name or "") is None:
            continue
        if p.type.needs and not any(given.get(flag) for flag in p.type.needs):
            flag = max(p.opts, key=len)
            raise click.UsageError(f"{flag} goes with {' or '.join(p.type.needs)}", ctx)
