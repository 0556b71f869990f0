"""User-facing conversion options, declared once and validated once so passes can trust them.

`ConvertOptions` is the single declaration: each field's metadata (options/declare.py) carries its
command-line flag, help text and Olive parameter, and ``__post_init__`` checks and normalises every
value (one OptionError line), so an object that exists is valid. The CLI builds its flags from it
and one object per command; every API entry point takes ``options=ConvertOptions(...)`` and/or the
fields as keywords (`ConvertKwargs`, a TypedDict: mypy and editors check the names; `from_kwargs`
/ `resolve` refuse unknown ones at run time), and the already-converted stamp covers every field
(`stamp`). ``resolve(..., auto=True)`` is the one place ``--auto``'s starting level is decided.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import onnx_ir as ir

from amp_convert.core.dtypes import LOWS, LowType, low_type_of
from amp_convert.cost.dims import Dims
from amp_convert.errors import OptionError
from amp_convert.files import file_kinds
from amp_convert.options import declare
from amp_convert.options.declare import check_names, option
from amp_convert.options.patterns import NamePattern, compile_pattern
from amp_convert.targets.registry import DEFAULT_TARGET
from amp_convert.targets.target import target_names

if TYPE_CHECKING:  # typing.Unpack is 3.11+; typing_extensions only for the type checker
    from typing_extensions import Unpack


class Level(str, enum.Enum):
    """How much of the model becomes low precision (MindSpore's O0-O3, mapped to ONNX)."""

    O0 = "O0"  # nothing changes: the model is re-saved, a control
    O1 = "O1"  # ALLOW ops low; INFER/CLEAR follow only where it saves casts
    O2 = "O2"  # everything low except DENY ops and what DENY reaches through INFER/CLEAR
    O3 = "O3"  # everything the target can run in low precision; built-in DENY is ignored

    # what each level means, asked by name where it matters (never re-derived from the names)
    @property
    def keeps_model(self) -> bool:
        """O0: nothing changes; the model is re-saved."""
        return self is Level.O0

    @property
    def obeys_deny_list(self) -> bool:
        """The built-in deny list keeps its ops FP32 (O3 ignores it; the user's always holds)."""
        return self is not Level.O3

    @property
    def lowers_everything(self) -> bool:
        """O3: every node the target can run low is low, none is left to placement."""
        return self is Level.O3

    @property
    def places_free_nodes(self) -> bool:
        """O1/O2: INFER/CLEAR nodes (and unfolded norms' statistics) are placed by the cut."""
        return self in (Level.O1, Level.O2)

    @property
    def free_nodes_start_low(self) -> bool:
        """O2: a free node starts low and the cut keeps it low on a tie (O1: FP32)."""
        return self is Level.O2


#: the level ``--auto`` (and auto_convert) starts from unless one is given (see `resolve`)
AUTO_LEVEL = Level.O3
_DTYPE_ALIASES = {"half": "fp16"}


class ConvertKwargs(TypedDict, total=False):
    """ConvertOptions' fields as an entry point's keywords, in the loose forms they accept.

    ``convert(m, levle="O2")`` is a mypy error here and an OptionError at run time.
    """

    level: Level | str
    dtype: str | type | np.dtype
    keep_io_types: bool
    low_io: str | Iterable[str]
    fp32_ops: str | Iterable[str]
    fp16_ops: str | Iterable[str]
    exclude_nodes: str | Iterable[str]
    cast_optional_params: bool
    op_lists: str | os.PathLike[str] | None
    dims: Mapping[str, int] | Iterable[str] | Iterable[tuple[str, int]]
    target: str
    opset_upgrade: bool
    keep_initializer_inputs: bool
    pinned_nodes: Iterable[str]


@dataclass(frozen=True)
class ConvertOptions:
    """Everything that changes what the converter does (and nothing else)."""

    level: Level = option(
        Level.O2,
        ("--level",),
        "O0 nothing, O1 allow-list ops only, O2 all but the deny list, O3 all the target can run "
        "low.",
        "choice",
        choices=tuple(lv.value for lv in Level),
        olive={"search": ("O1", "O2", "O3")},
    )
    dtype: str = option(
        "fp16",
        ("--dtype",),
        "Low-precision type.",
        "choice",
        choices=tuple(t.option for t in LOWS),
        olive={"search": tuple(t.option for t in LOWS)},
    )
    keep_io_types: bool = option(
        True,
        ("--keep-io-types/--no-keep-io-types",),
        "Keep FP32 model inputs/outputs (casts at the boundary).",
        "switch",
    )
    low_io: tuple[str, ...] = option(
        (),
        ("--low-io",),
        "Inputs/outputs whose whole name matches REGEX become low anyway, e.g. a KV cache "
        "(repeatable).",
        "multiple",
        metavar="REGEX",
    )
    fp32_ops: tuple[str, ...] = option(
        (), ("--fp32-ops",), "Ops to keep FP32 (added to the deny list; repeatable).", "ops"
    )
    fp16_ops: tuple[str, ...] = option(
        (),
        ("--fp16-ops",),
        "Ops to run in low precision (added to the allow list; repeatable).",
        "ops",
    )
    exclude_nodes: tuple[str, ...] = option(
        (),
        ("--exclude-nodes",),
        "Keep nodes whose name matches REGEX in FP32 (repeatable).",
        "multiple",
        metavar="REGEX",
    )
    cast_optional_params: bool = option(
        False,
        ("--cast-optional-params",),
        "Store weights low even where an FP32 reader then needs a runtime cast (MXNet style).",
        "flag",
    )
    op_lists: Path | None = option(
        None,
        ("--op-lists",),
        "Op list file with [allow]/[infer]/[clear]/[deny]/[rules] sections.",
        "path",
    )
    #: one --dim for both: the command line shows validation's declaration of it (same param)
    dims: Dims = option(
        Dims(),
        ("--dim",),
        "NAME=VALUE for a symbolic dim: sizes the cast-cost estimate (and validation inputs).",
        "dims",
        metavar="NAME=VALUE",
        param="dim",
    )
    target: str = option(
        DEFAULT_TARGET,
        ("--target",),
        "Runtime the result is for: ort-cuda or ort-cpu (that ONNX Runtime provider's kernels), "
        "none (schemas only).",
        "choice",
        choices=target_names(),
        olive={
            "default": None,
            "help": "ort-cuda, ort-cpu or none; default: from the accelerator's execution provider "
            "(CUDA -> ort-cuda, CPU -> ort-cpu).",
        },
    )
    opset_upgrade: bool = option(
        False,
        ("--opset-upgrade",),
        "Move a QDQ model at opset 13-18 to opset 19, where its Q/DQ groups can go low "
        "(refused where a meaning changes).",
        "flag",
    )
    keep_initializer_inputs: bool = option(
        False,
        ("--keep-initializer-inputs",),
        "Initializers also listed as graph inputs (old exporters) stay overridable FP32 inputs; "
        "by default they are weights.",
        "flag",
    )
    #: exact names of nodes kept FP32 (the API's typed pin set; ``--auto`` passes its pins here)
    pinned_nodes: frozenset[str] = field(default=frozenset(), metadata={"kind": "api"})
    exclude_patterns: tuple[NamePattern, ...] = field(
        default=(), init=False, compare=False, repr=False, metadata={"derived": True}
    )
    low_io_patterns: tuple[NamePattern, ...] = field(
        default=(), init=False, compare=False, repr=False, metadata={"derived": True}
    )

    def __post_init__(self) -> None:
        """Check and normalise every value once; bad values raise OptionError with one line.

        Values may come loose (``level="o2"``, ``exclude_nodes="attn"``, ``dims={"batch": 8}``,
        ``dtype=np.float16``); the fields then hold their one normal form, so a replace() or a
        second construction from them gives an equal object.
        """
        put = functools.partial(object.__setattr__, self)
        put("level", _level(self.level))
        put("dtype", _dtype(self.dtype))
        put("keep_io_types", _bool("keep_io_types", self.keep_io_types))
        put("fp32_ops", _split_ops("fp32_ops", self.fp32_ops))
        put("fp16_ops", _split_ops("fp16_ops", self.fp16_ops))
        both = set(self.fp32_ops) & set(self.fp16_ops)
        if both:
            raise OptionError(f"ops in both --fp32-ops and --fp16-ops: {', '.join(sorted(both))}")
        put("exclude_nodes", _strings("exclude_nodes", self.exclude_nodes))
        # refuses patterns that could hang
        put("exclude_patterns", tuple(compile_pattern(p) for p in self.exclude_nodes))
        put("low_io", _strings("low_io", self.low_io))
        put("low_io_patterns", tuple(compile_pattern(p, "--low-io") for p in self.low_io))
        put("cast_optional_params", _bool("cast_optional_params", self.cast_optional_params))
        put("opset_upgrade", _bool("opset_upgrade", self.opset_upgrade))
        keep_inputs = _bool("keep_initializer_inputs", self.keep_initializer_inputs)
        put("keep_initializer_inputs", keep_inputs)
        put("op_lists", _op_lists(self.op_lists))
        put("dims", _dims(self.dims))
        put("target", _target(self.target))
        put("pinned_nodes", frozenset(_strings("pinned_nodes", self.pinned_nodes)))

    @classmethod
    def from_kwargs(cls, **kwargs: Unpack[ConvertKwargs]) -> ConvertOptions:
        """The options from keywords (the API's spelling); an unknown name is an OptionError."""
        check_names(kwargs, option_names(), "option")
        return cls(**kwargs)  # type: ignore[arg-type]  # loose values, normalised by __post_init__

    def replace(self, **kwargs: Unpack[ConvertKwargs]) -> ConvertOptions:
        """These options with some changed (checked again, like the originals)."""
        check_names(kwargs, option_names(), "option")
        return dataclasses.replace(self, **kwargs)  # type: ignore[arg-type]

    @property
    def low(self) -> LowType:
        """The low type (names, numpy type, limits) ``dtype`` names."""
        return low_type_of(self.dtype)

    @property
    def low_dtype(self) -> ir.DataType:
        return self.low.onnx

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
            elif isinstance(value, Dims):
                value = [[k, v] for k, v in value.items()]
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
    return declare.user_fields(ConvertOptions)


def option_names() -> tuple[str, ...]:
    return declare.option_names(ConvertOptions)


def cli_fields() -> Iterator[Any]:
    """The fields the command line shows (API-only ones such as ``pinned_nodes`` left out)."""
    return declare.cli_fields(ConvertOptions)


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError as e:
        raise OptionError(f"cannot read op list file {path}: {e.strerror or e}") from None


def resolve(
    options: ConvertOptions | None, kwargs: Mapping[str, Any], *, auto: bool = False
) -> ConvertOptions:
    """An entry point's options: ``options`` (default ConvertOptions()) with ``kwargs`` over it.

    ``auto``: for ``--auto`` / auto_convert, whose default level is ``AUTO_LEVEL`` (O3): used when
    neither an options object nor a ``level`` keyword says otherwise.
    """
    if auto and options is None and "level" not in kwargs:
        kwargs = {**kwargs, "level": AUTO_LEVEL}
    if options is None:
        return ConvertOptions.from_kwargs(**kwargs)
    if not isinstance(options, ConvertOptions):
        raise OptionError(f"options must be a ConvertOptions, not {type(options).__name__}")
    return options.replace(**kwargs) if kwargs else options


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise OptionError(f"{name} must be True or False, not {value!r}")
    return bool(value)


def _op_lists(op_lists: Any) -> Path | None:
    if op_lists is None:
        return None
    if not isinstance(op_lists, str | Path) or not str(op_lists):
        raise OptionError(f"op_lists must be a file path, not {op_lists!r}")
    if why := file_kinds.not_a_file(op_lists):
        raise OptionError(f"op list file {op_lists} {why}")
    return Path(op_lists)


def _target(target: Any) -> str:
    names = target_names()
    if not isinstance(target, str) or target.lower() not in names:
        raise OptionError(f"unknown target {target!r} (choose {' or '.join(names)})")
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
        for low in LOWS:
            if np_type == low.numpy:
                return low.option
        raise OptionError(f"dtype must be 'fp16' or 'bf16', not {dtype!r}")
    try:
        return low_type_of(_DTYPE_ALIASES.get(dtype.lower(), dtype)).option
    except KeyError:
        raise OptionError(f"unknown dtype {dtype!r} (choose fp16 or bf16)") from None


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


def _dims(dims: Any) -> Dims:
    """{"batch": 8} / ("batch=8", ...) / (("batch", 8), ...) → Dims (the one parser)."""
    return Dims(dims)


def make_options(**kwargs: Unpack[ConvertKwargs]) -> ConvertOptions:
    """ConvertOptions.from_kwargs under its first name (kept for existing callers)."""
    return ConvertOptions.from_kwargs(**kwargs)
