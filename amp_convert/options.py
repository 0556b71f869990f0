"""User-facing conversion options, validated once so passes can trust them."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path

import onnx_ir as ir

from amp_convert.errors import OptionError


class Level(str, enum.Enum):
    """How much of the model becomes low precision (MindSpore's O0-O3, mapped to ONNX)."""

    O0 = "O0"  # nothing changes: the model is re-saved, a control
    O1 = "O1"  # ALLOW ops low; INFER/CLEAR follow only where it saves casts
    O2 = "O2"  # everything low except DENY ops and what DENY reaches through INFER/CLEAR
    O3 = "O3"  # everything the schemas allow becomes low; built-in DENY is ignored


DTYPES = {"fp16": ir.DataType.FLOAT16, "bf16": ir.DataType.BFLOAT16}


@dataclass(frozen=True)
class ConvertOptions:
    """Everything that changes what the converter does."""

    level: Level = Level.O2
    dtype: str = "fp16"
    keep_io_types: bool = True
    fp32_ops: tuple[str, ...] = ()
    fp16_ops: tuple[str, ...] = ()
    exclude_nodes: tuple[str, ...] = ()
    cast_optional_params: bool = False
    op_lists: str | Path | None = None
    exclude_patterns: tuple[re.Pattern[str], ...] = field(default=(), compare=False, repr=False)

    @property
    def low_dtype(self) -> ir.DataType:
        return DTYPES[self.dtype]


def make_options(
    level: Level | str = Level.O2,
    dtype: str = "fp16",
    keep_io_types: bool = True,
    fp32_ops: str | tuple[str, ...] | list[str] = (),
    fp16_ops: str | tuple[str, ...] | list[str] = (),
    exclude_nodes: str | tuple[str, ...] | list[str] = (),
    cast_optional_params: bool = False,
    op_lists: str | Path | None = None,
) -> ConvertOptions:
    """Check and normalise option values; bad values raise OptionError with one clear line."""
    try:
        level = Level(level.upper() if isinstance(level, str) else level)
    except ValueError:
        raise OptionError(f"unknown level {level!r} (choose O0, O1, O2 or O3)") from None
    dtype = {"float16": "fp16", "bfloat16": "bf16"}.get(dtype.lower(), dtype.lower())
    if dtype not in DTYPES:
        raise OptionError(f"unknown dtype {dtype!r} (choose fp16 or bf16)")
    fp32 = _split_ops(fp32_ops)
    fp16 = _split_ops(fp16_ops)
    both = set(fp32) & set(fp16)
    if both:
        raise OptionError(f"ops in both --fp32-ops and --fp16-ops: {', '.join(sorted(both))}")
    excludes = (exclude_nodes,) if isinstance(exclude_nodes, str) else tuple(exclude_nodes)
    patterns = []
    for pattern in excludes:
        try:
            patterns.append(re.compile(pattern))
        except re.error as e:
            raise OptionError(f"--exclude-nodes {pattern!r}: bad regular expression: {e}") from None
    if op_lists is not None and not Path(op_lists).is_file():
        raise OptionError(f"op list file {op_lists} does not exist")
    return ConvertOptions(
        level=level,
        dtype=dtype,
        keep_io_types=keep_io_types,
        fp32_ops=fp32,
        fp16_ops=fp16,
        exclude_nodes=excludes,
        cast_optional_params=cast_optional_params,
        op_lists=op_lists,
        exclude_patterns=tuple(patterns),
    )


def _split_ops(ops: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    items = [ops] if isinstance(ops, str) else list(ops)
    out: list[str] = []
    for item in items:
        out.extend(p.strip() for p in item.split(",") if p.strip())
    return tuple(out)
