"""Bounded work on hostile input: sizes are checked before anything is allocated or loaded.

- ``check_inputs_budget``: the arrays a run will generate (shape x dtype, summed), before any is
  made: ``--dim batch=1000000000000`` is one clear line, not a MemoryError. Validation holds
  the inputs, both models' outputs and their copies, so the arrays themselves may take only a
  share of the budget (INPUT_SHARE).
- ``npz_members``: an ``.npz``'s members read from their headers (name, shape, dtype, bytes)
  without loading any; members the model does not take and members beyond the budget are
  refused before ``np.load`` reads a byte of them.

The budget is AMP_CONVERT_MEMORY_BUDGET (bytes, e.g. ``8e9``) when set, else half the machine's
memory.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from amp_convert.errors import ValidationError

#: share of the memory budget the generated or loaded input arrays themselves may take
INPUT_SHARE = 0.25
#: fallback when the machine's memory cannot be read
_DEFAULT_BUDGET = 8 << 30


def memory_budget() -> int:
    """Bytes a run may plan to hold: AMP_CONVERT_MEMORY_BUDGET, else half the physical memory."""
    text = os.environ.get("AMP_CONVERT_MEMORY_BUDGET")
    if text:
        try:
            value = float(text)
        except ValueError:
            raise ValidationError(
                f"AMP_CONVERT_MEMORY_BUDGET={text!r}: expected a number of bytes"
            ) from None
        if not math.isfinite(value) or value <= 0:
            raise ValidationError(f"AMP_CONVERT_MEMORY_BUDGET={text!r}: expected bytes > 0")
        return int(value)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return _DEFAULT_BUDGET


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover


def array_bytes(shape: Sequence[int], dtype: np.dtype | type) -> int:
    """Bytes of an array of `shape` and `dtype` (Python ints: no overflow)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def check_inputs_budget(arrays: Iterable[tuple[str, Sequence[int], np.dtype | type]]) -> None:
    """Refuse (one line) inputs whose total size exceeds INPUT_SHARE of the memory budget."""
    limit = int(memory_budget() * INPUT_SHARE)
    total = 0
    largest: tuple[str, tuple[int, ...], int] = ("", (), 0)
    for name, shape, dtype in arrays:
        size = array_bytes(shape, dtype)
        total += size
        if size >= largest[2]:
            largest = (name, tuple(int(d) for d in shape), size)
    if total > limit:
        name, shape, size = largest
        raise ValidationError(
            f"the inputs would take {_human(total)} (largest: {name!r} of shape "
            f"{list(shape)}, {_human(size)}), more than the {_human(limit)} allowed "
            f"({INPUT_SHARE:.0%} of the memory budget; set AMP_CONVERT_MEMORY_BUDGET or smaller "
            "--dim values)"
        )


@dataclass(frozen=True)
class NpzMember:
    """One array of an .npz, as its header describes it."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int


def npz_members(path: Path) -> list[NpzMember]:
    """The members of `path` from their headers, all together within the input budget.

    Nothing but the zip directory and the few bytes of each .npy header is read.
    """
    members: list[NpzMember] = []
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = info.filename.removesuffix(".npy")
                with archive.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    reader = {
                        (1, 0): np.lib.format.read_array_header_1_0,
                        (2, 0): np.lib.format.read_array_header_2_0,
                    }.get(version)
                    if reader is None:
                        raise ValueError(f"unsupported .npy version {version}")
                    shape, _, dtype = reader(f)
                if dtype.hasobject:
                    raise ValidationError(
                        f"inputs {path}: member {name!r} holds Python objects; refused"
                    )
                members.append(NpzMember(name, tuple(shape), dtype, array_bytes(shape, dtype)))
    except ValidationError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ValidationError(f"inputs {path}: not a readable .npz file ({e})") from None
    check_inputs_budget((m.name, m.shape, m.dtype) for m in members)
    return members
