"""User-facing conversion options, declared once and validated once so passes can trust them.

`ConvertOptions` is the single declaration: each field's metadata carries its command-line flag and
help text. The CLI builds its options from it (`cli_spec`), the Python API takes the same names as
keywords (`make_options`), and the already-converted stamp covers every field (`stamp`).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from amp_convert import file_kinds
from amp_convert.dims import parse_dims
from amp_convert.dtypes import LOW_BY_OPTION, numpy_type
from amp_convert.errors import OptionError
from amp_convert.name_patterns import NamePattern, compile_pattern
from amp_convert.targets import TARGETS


class Level(str, enum.Enum):
    """How much of the model becomes low precision (MindSpore's O0-O3, mapped to ONNX)."""

    O0 = "O0"  # nothing changes: the model is re-saved, a control
    O1 = "O1"  # ALLOW ops low; INFER/CLEAR follow only where it saves casts
    O2 = "O2"  # everything low except DENY ops and what DENY reaches through INFER/CLEAR
    O3 = "O3"  # everything the target can run in low precision; built-in DENY is ignored


DTYPES = LOW_BY_OPTION
_DTYPE_ALIASES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16"}


def _option(default: Any, flags: tuple[str, ...], help: str, kind: str, **extra: Any) -> Any:
    """A ConvertOptions field whose metadata says how it appears on the command line."""
    meta = {"flags": flags, "help": help, "kind": kind, **extra}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ConvertOptions:
    """Everything that changes what the converter does (and nothing else)."""

    level: Level = _option(
        Level.O2,
        ("--level",),
        "O0 nothing, O1 allow-list ops only, O2 all but the deny list, O3 all the target can run "
        "low.",
        "choice",
        choices=tuple(lv.value for lv in Level),
    )
    dtype: str = _option(
        "fp16", ("--dtype",), "Low-precision type.", "choice", choices=tuple(DTYPES)
    )
    keep_io_types: bool = _option(
        True,
        ("--keep-io-types/--no-keep-io-types",),
        "Keep FP32 model inputs/outputs (casts at the boundary).",
        "switch",
    )
    low_io: tuple[str, ...] = _option(
        (),
        ("--low-io",),
        "Model inputs/outputs whose whole name matches REGEX become low precision even with "
        "--keep-io-types, e.g. 'past_key_values\\..*' (repeatable).",
        "multiple",
        metavar="REGEX",
    )
    fp32_ops: tuple[str, ...] = _option(
        (), ("--fp32-ops",), "Ops to keep FP32 (added to the deny list; repeatable).", "ops"
    )
    fp16_ops: tuple[str, ...] = _option(
        (),
        ("--fp16-ops",),
        "Ops to run in low precision (added to the allow list; repeatable).",
        "ops",
    )
    exclude_nodes: tuple[str, ...] = _option(
        (),
        ("--exclude-nodes",),
        "Keep nodes whose name matches REGEX in FP32 (repeatable).",
        "multiple",
        metavar="REGEX",
    )
    cast_optional_params: bool = _option(
        False,
        ("--cast-optional-params",),
        "Store weights low even where an FP32 reader then needs a runtime cast (MXNet style).",
        "flag",
    )
    op_lists: Path | None = _option(
        None,
        ("--op-lists",),
        "Op list file with [allow]/[infer]/[clear]/[deny]/[rules] sections.",
        "path",
    )
    dims: tuple[tuple[str, int], ...] = _option(
        (),
        ("--dim",),
        "NAME=VALUE for a symbolic dim: sizes the cast-cost estimate (and validation inputs).",
        "dims",
        metavar="NAME=VALUE",
    )
    target: str = _option(
        "ort-cuda",
        ("--target",),
        "Runtime the result is for: ort-cuda (ort-cpu) keeps low only what ONNX Runtime's CUDA "
        "(CPU) provider has low-precision kernels for; none follows the ONNX schemas only.",
        "choice",
        choices=tuple(TARGETS),
    )
    #: exact names of nodes kept FP32 (the API's typed pin set; ``--auto`` passes its pins here)
    pinned_nodes: frozenset[str] = field(default=frozenset(), metadata={"kind": "api"})
    exclude_patterns: tuple[NamePattern, ...] = field(
        default=(), compare=False, repr=False, metadata={"derived": True}
    )
    low_io_patterns: tuple[NamePattern, ...] = field(
        default=(), compare=False, repr=False, metadata={"derived": True}
    )

    @property
    def low_dtype(self) -> ir.DataType:
        return DTYPES[self.dtype]

    @property
    def dim_values(self) -> dict[str, int]:
        return dict(self.dims)

    def stamp(self) -> str:
        """Every option that changes the result, as JSON (an op list file by its content)."""
        data: dict[str, Any] = {}
        for f in user_fields():
            value = getattr(self, f.name)
            if f.name == "op_lists":
                value = _file_digest(value) if value is not None else None
            elif isinstance(value, enum.Enum):
                value = value.value
            elif isinstance(value, tuple):
                value = [list(v) if isinstance(v, tuple) else v for v in value]
            elif isinstance(value, frozenset):
                value = sorted(value)
            data[f.name] = value
        return json.dumps(data, sort_keys=True)


def user_fields() -> Iterator[Any]:
    """The fields a user sets (derived ones left out), in declaration order."""
    return (f for f in fields(ConvertOptions) if not f.metadata.get("derived"))


def option_names() -> tuple[str, ...]:
    return tuple(f.name for f in user_fields())


def cli_fields() -> Iterator[Any]:
    """The fields the command line shows (API-only ones such as ``pinned_nodes`` left out)."""
    return (f for f in user_fields() if f.metadata.get("kind") != "api")


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError as e:
        raise OptionError(f"cannot read op list file {path}: {e.strerror or e}") from None


def make_options(**kwargs: Any) -> ConvertOptions:
    """Check and normalise option values; bad values raise OptionError with one clear line."""
    unknown = set(kwargs) - set(option_names())
    if unknown:
        known = ", ".join(option_names())
        raise OptionError(f"unknown option(s) {', '.join(sorted(unknown))} (known: {known})")
    level = _level(kwargs.get("level", Level.O2))
    dtype = _dtype(kwargs.get("dtype", "fp16"))
    keep_io = kwargs.get("keep_io_types", True)
    if not isinstance(keep_io, bool | np.bool_):
        raise OptionError(f"keep_io_types must be True or False, not {keep_io!r}")
    fp32 = _split_ops("fp32_ops", kwargs.get("fp32_ops", ()))
    fp16 = _split_ops("fp16_ops", kwargs.get("fp16_ops", ()))
    both = set(fp32) & set(fp16)
    if both:
        raise OptionError(f"ops in both --fp32-ops and --fp16-ops: {', '.join(sorted(both))}")
    excludes = _strings("exclude_nodes", kwargs.get("exclude_nodes", ()))
    patterns = [compile_pattern(p) for p in excludes]  # refuses patterns that could hang
    low_io = _strings("low_io", kwargs.get("low_io", ()))
    low_io_patterns = [compile_pattern(p, "--low-io") for p in low_io]
    cast_optional = kwargs.get("cast_optional_params", False)
    if not isinstance(cast_optional, bool | np.bool_):
        raise OptionError(f"cast_optional_params must be True or False, not {cast_optional!r}")
    op_lists = kwargs.get("op_lists")
    if op_lists is not None:
        if not isinstance(op_lists, str | Path) or not str(op_lists):
            raise OptionError(f"op_lists must be a file path, not {op_lists!r}")
        if why := file_kinds.not_a_file(op_lists):
            raise OptionError(f"op list file {op_lists} {why}")
        op_lists = Path(op_lists)
    return ConvertOptions(
        level=level,
        dtype=dtype,
        keep_io_types=bool(keep_io),
        fp32_ops=fp32,
        fp16_ops=fp16,
        exclude_nodes=excludes,
        cast_optional_params=bool(cast_optional),
        op_lists=op_lists,
        dims=_dims(kwargs.get("dims", ())),
        target=_target(kwargs.get("target", "ort-cuda")),
        pinned_nodes=frozenset(_strings("pinned_nodes", kwargs.get("pinned_nodes", ()))),
        exclude_patterns=tuple(patterns),
        low_io=low_io,
        low_io_patterns=tuple(low_io_patterns),
    )


def _target(target: Any) -> str:
    if not isinstance(target, str) or target.lower() not in TARGETS:
        raise OptionError(f"unknown target {target!r} (choose {' or '.join(TARGETS)})")
    return target.lower()


def _level(level: Any) -> Level:
    if isinstance(level, Level):
        return level
    if not isinstance(level, str):
        raise OptionError(f"level must be one of O0, O1, O2, O3, not {level!r}")
    try:
        return Level(level.upper())
    except ValueError:
        raise OptionError(f"unknown level {level!r} (choose O0, O1, O2 or O3)") from None


def _dtype(dtype: Any) -> str:
    if not isinstance(dtype, str):
        try:
            np_type = np.dtype(dtype)
        except TypeError:
            np_type = None
        for name, low in DTYPES.items():
            if np_type == numpy_type(low):
                return name
        raise OptionError(f"dtype must be 'fp16' or 'bf16', not {dtype!r}")
    name = _DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
    if name not in DTYPES:
        raise OptionError(f"unknown dtype {dtype!r} (choose fp16 or bf16)")
    return name


def _strings(name: str, items: Any) -> tuple[str, ...]:
    if isinstance(items, str):
        return (items,)
    if not isinstance(items, Iterable) or isinstance(items, bytes | Mapping):
        raise OptionError(f"{name} must be a string or a list of strings, not {items!r}")
    out = tuple(items)
    bad = [x for x in out if not isinstance(x, str)]
    if bad:
        raise OptionError(f"{name} must be a string or a list of strings; got {bad[0]!r}")
    return out


def _split_ops(name: str, ops: Any) -> tuple[str, ...]:
    out: list[str] = []
    for item in _strings(name, ops):
        out.extend(p.strip() for p in item.split(",") if p.strip())
    return tuple(out)


def _dims(dims: Any) -> tuple[tuple[str, int], ...]:
    """{"batch": 8} / ("batch=8", ...) / (("batch", 8), ...) → (("batch", 8),) (one parser)."""
    return tuple(sorted(parse_dims(dims).items()))
