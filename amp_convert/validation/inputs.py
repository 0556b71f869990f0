"""Inputs for validation: seeded random values from the input specs, or the user's own arrays.

Random values are dtype-aware so that models with ids and masks run as intended:

* floats: seeded standard normal;
* bool: all True;
* integers: in a small valid range, chosen in this order:
  1. the model's ``input_range:<name>`` metadata (``"low,high"``, half-open; written by the
     test-model builders and honoured by anyone who sets it),
  2. names containing ``mask`` → all ones; ``token_type`` / ``segment`` → all zeros;
     ``position`` → 0, 1, 2, ... along the last axis,
  3. otherwise uniform in [0, 100), narrowed to [0, rows) when the input directly indexes a
     Gather on an initializer with fewer rows (an embedding table), so ids are always valid.

Dynamic dims. A named dim (``dim_param``) is one value shared by every axis that names it; an
unnamed dim, or one whose name only says "unknown" (``?``, ``-1``, ``None`` or empty, as Paddle
and other exporters write), is its own value, keyed ``<input>[<axis>]``. Either takes
``dims[key]`` when given, else a default: 1 for batch-like names (``batch``, ``batch_size``,
``N``, ``B``, ``bs``) and for the first axis of an unnamed rank >= 2 input; 16 for any other name;
1 for other unnamed axes.

Larger defaults (``dims_attempts``): models often cannot run on those values (reflect padding
longer than the signal, H/W that must be multiples of 32, strided convolutions down to nothing).
When the reference fails on them, validation retries with every default dim not set by the user
taken one step further along its ladder: image H/W (axes 2-3 of a rank-4 NCHW input with 1-4
channels, axes 1-2 of NHWC, or names containing ``height``/``width``) go 224 → 640; other
non-batch dims go 64 → 256 → 1024 (all multiples of 32). Batch-like dims stay 1.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from amp_convert.errors import ValidationError
from amp_convert.validation.runtime import NP_DTYPES

INPUT_RANGE_KEY = "input_range:"
DEFAULT_INT_RANGE = (0, 100)
BATCH_DIM = 1
OTHER_DIM = 16
UNNAMED_DIM = 1
_BATCH_NAMES = {"n", "b", "bs", "batch", "batch_size", "batchsize", "nbatch"}
#: dim_param strings that exporters write for "unknown": each such axis is its own dim
UNKNOWN_DIM_NAMES = frozenset({"", "?", "-1", "none"})
IMAGE_LADDER = (224, 640)
SEQUENCE_LADDER = (64, 256, 1024)
_IMAGE_NAMES = ("height", "width")
_FLOAT_TYPES = ("tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)")

Dim = int | str | None


@dataclass
class InputSpec:
    """One model input as ORT reports it."""

    name: str
    type_str: str
    shape: list[Dim]

    @property
    def dtype(self) -> np.dtype:
        if self.type_str not in NP_DTYPES:
            raise ValidationError(
                f"input {self.name!r}: type {self.type_str} is not supported for validation"
            )
        return NP_DTYPES[self.type_str]

    def shape_str(self) -> str:
        return "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"


@dataclass
class Inputs:
    """The arrays fed to both models and how they were chosen (for the report)."""

    arrays: dict[str, np.ndarray]
    source: str  # "random" or "npz:<path>" or "arrays"
    dims: dict[str, int] = field(default_factory=dict)

    @property
    def shapes(self) -> dict[str, list[int]]:
        return {k: list(v.shape) for k, v in self.arrays.items()}

    @property
    def dtypes(self) -> dict[str, str]:
        return {k: str(v.dtype) for k, v in self.arrays.items()}


def is_batch_like(name: str) -> bool:
    """Symbolic dim names that conventionally mean the batch size."""
    low = name.lower()
    return low in _BATCH_NAMES or "batch" in low


def is_named(d: Dim) -> bool:
    """A dim_param that names a shared dim (not one of the "unknown" spellings)."""
    return isinstance(d, str) and d.strip().lower() not in UNKNOWN_DIM_NAMES


def dim_key(spec: InputSpec, axis: int) -> str | None:
    """The key a dynamic axis is set by (its name, or ``input[axis]``); None for a static axis."""
    d = spec.shape[axis]
    if isinstance(d, int) and d >= 0:
        return None
    if is_named(d):
        return str(d)
    return f"{spec.name}[{axis}]"


def _default_dim(spec: InputSpec, axis: int) -> int:
    d = spec.shape[axis]
    if is_named(d):
        return BATCH_DIM if is_batch_like(str(d)) else OTHER_DIM
    return BATCH_DIM if _unnamed_batch_axis(spec, axis) else UNNAMED_DIM


def _unnamed_batch_axis(spec: InputSpec, axis: int) -> bool:
    return axis == 0 and len(spec.shape) >= 2


def _is_image_axis(spec: InputSpec, axis: int) -> bool:
    """H or W of an image input: NCHW / NHWC with 1-4 static channels, or named so."""
    d = spec.shape[axis]
    if is_named(d) and any(n in str(d).lower() for n in _IMAGE_NAMES):
        return True
    if len(spec.shape) != 4 or spec.type_str not in _FLOAT_TYPES:
        return False
    channels = {1, 2, 3, 4}
    if axis in (2, 3) and spec.shape[1] in channels:
        return True
    return axis in (1, 2) and spec.shape[3] in channels


def resolve_shape(spec: InputSpec, dims: Mapping[str, int], used: dict[str, int]) -> list[int]:
    """Concrete shape for ``spec``; records which dynamic values were used."""
    shape: list[int] = []
    for axis, d in enumerate(spec.shape):
        key = dim_key(spec, axis)
        if key is None:
            shape.append(int(d))  # type: ignore[arg-type]
            continue
        value = dims.get(key, used.get(key, _default_dim(spec, axis)))
        used[key] = value
        shape.append(value)
    return shape


def dims_attempts(specs: list[InputSpec], dims: Mapping[str, int] | None = None) -> list[dict]:
    """The dims to try in order: the defaults, then each step of the ladders (see the module).

    User ``dims`` are kept in every attempt; the first attempt is exactly what ``random_inputs``
    would use without being told. Identical attempts are dropped.
    """
    dims = dict(dims or {})
    base: dict[str, int] = {}
    ladders: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        for axis in range(len(spec.shape)):
            key = dim_key(spec, axis)
            if key is None or key in dims:
                continue
            base.setdefault(key, _default_dim(spec, axis))
            named = is_named(spec.shape[axis])
            if (named and is_batch_like(str(spec.shape[axis]))) or (
                not named and _unnamed_batch_axis(spec, axis)
            ):
                ladders.setdefault(key, ())
            elif _is_image_axis(spec, axis):
                ladders[key] = IMAGE_LADDER  # image wins if any use of the key looks like one
            else:
                ladders.setdefault(key, SEQUENCE_LADDER)
    attempts = [{**base, **dims}]
    steps = max((len(v) for v in ladders.values()), default=0)
    for step in range(steps):
        grown = {k: (v[min(step, len(v) - 1)] if v else base[k]) for k, v in ladders.items()}
        attempt = {**base, **grown, **dims}
        if attempt not in attempts:
            attempts.append(attempt)
    return attempts


def _metadata_ranges(model: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    ranges: dict[str, tuple[int, int]] = {}
    for p in model.metadata_props:
        if p.key.startswith(INPUT_RANGE_KEY):
            try:
                lo, hi = (int(v) for v in p.value.split(","))
            except ValueError:
                continue
            if hi > lo:
                ranges[p.key[len(INPUT_RANGE_KEY) :]] = (lo, hi)
    return ranges


def _gather_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """Input name → rows of the smallest initializer table it indexes through a Gather."""
    inits = {t.name: list(t.dims) for t in model.graph.initializer}
    inputs = {i.name for i in model.graph.input}
    bounds: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type != "Gather" or len(node.input) < 2 or node.domain not in ("", "ai.onnx"):
            continue
        data, idx = node.input[0], node.input[1]
        if idx in inputs and data in inits:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            shape = inits[data]
            if shape and -len(shape) <= axis < len(shape) and shape[axis] > 0:
                bounds[idx] = min(bounds.get(idx, shape[axis]), shape[axis])
    return bounds


def random_inputs(
    specs: list[InputSpec],
    model: onnx.ModelProto,
    *,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
) -> Inputs:
    """Seeded random arrays for every spec (see the module docstring for the rules)."""
    dims = dict(dims or {})
    known = _dim_keys(specs)
    unknown = sorted(set(dims) - known)
    if unknown:
        offered = ", ".join(sorted(known)) or "none (all dims are static)"
        raise ValidationError(
            f"dim {', '.join(unknown)} matches no dynamic dimension of the model's inputs "
            f"(dynamic dims: {offered})"
        )
    for k, v in dims.items():
        if not isinstance(v, int | np.integer) or v < 0:
            raise ValidationError(f"dim {k}: expected a non-negative integer, got {v!r}")
    rng = np.random.default_rng(seed)
    ranges = _metadata_ranges(model)
    bounds = _gather_bounds(model)
    used: dict[str, int] = {}
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        shape = resolve_shape(spec, dims, used)
        dtype = spec.dtype
        lname = spec.name.lower()
        if dtype == np.bool_:
            arr = np.ones(shape, np.bool_)
        elif np.issubdtype(dtype, np.integer):
            if spec.name in ranges:
                lo, hi = ranges[spec.name]
                arr = rng.integers(lo, hi, size=shape)
            elif "mask" in lname:
                arr = np.ones(shape)
            elif "token_type" in lname or "segment" in lname:
                arr = np.zeros(shape)
            elif "position" in lname and shape:
                arr = np.broadcast_to(np.arange(shape[-1]), shape)
            else:
                lo, hi = DEFAULT_INT_RANGE
                hi = min(hi, bounds.get(spec.name, hi))
                arr = rng.integers(lo, hi, size=shape)
            arr = np.ascontiguousarray(arr.astype(dtype))
        else:
            arr = rng.standard_normal(shape).astype(np.float32).astype(dtype)
        arrays[spec.name] = arr
    return Inputs(arrays, "random", used)


def _dim_keys(specs: list[InputSpec]) -> set[str]:
    keys = (dim_key(spec, axis) for spec in specs for axis in range(len(spec.shape)))
    return {k for k in keys if k is not None}


def load_inputs(
    source: str | os.PathLike | Mapping[str, np.ndarray], specs: list[InputSpec]
) -> Inputs:
    """User arrays (``.npz`` path or dict) checked against the specs, one clear error if wrong."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise ValidationError(f"inputs {path}: no such file")
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except Exception as e:
            raise ValidationError(f"inputs {path}: not a readable .npz file ({e})") from None
        label = f"npz:{path}"
        where = f"inputs {path}"
    elif isinstance(source, Mapping):
        arrays = {str(k): np.asarray(v) for k, v in source.items()}
        label = "arrays"
        where = "inputs"
    else:
        raise ValidationError(
            f"inputs: expected a .npz path or a dict of arrays, got {type(source).__name__}"
        )
    expected = [s.name for s in specs]
    missing = [n for n in expected if n not in arrays]
    extra = sorted(set(arrays) - set(expected))
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(repr(n) for n in missing))
        if extra:
            parts.append("unexpected " + ", ".join(repr(n) for n in extra))
        raise ValidationError(
            f"{where}: {'; '.join(parts)} (model inputs: {', '.join(expected) or 'none'})"
        )
    dims: dict[str, int] = {}
    for spec in specs:
        arr = arrays[spec.name]
        if arr.dtype != spec.dtype:
            raise ValidationError(
                f"{where}: input {spec.name!r}: expected dtype {spec.dtype}, got {arr.dtype}"
            )
        if len(arr.shape) != len(spec.shape):
            raise ValidationError(
                f"{where}: input {spec.name!r}: expected shape {spec.shape_str()} "
                f"(rank {len(spec.shape)}), got {tuple(arr.shape)}"
            )
        for axis, (want, got) in enumerate(zip(spec.shape, arr.shape, strict=True)):
            if isinstance(want, int) and want >= 0 and want != got:
                raise ValidationError(
                    f"{where}: input {spec.name!r}: expected shape {spec.shape_str()}, "
                    f"got {tuple(arr.shape)} (axis {axis} must be {want})"
                )
            key = dim_key(spec, axis)
            if key is not None and dims.setdefault(key, got) != got:
                raise ValidationError(
                    f"{where}: input {spec.name!r}: dim {want!r} is {got} on axis {axis} "
                    f"but {dims[key]} in an earlier input"
                )
    return Inputs({s.name: arrays[s.name] for s in specs}, label, dims)


def parse_dims(items: list[str] | tuple[str, ...]) -> dict[str, int]:
    """``["batch=1", "seq=16"]`` → ``{"batch": 1, "seq": 16}``."""
    dims: dict[str, int] = {}
    for item in items:
        m = re.fullmatch(r"\s*(.+?)\s*=\s*(\d+)\s*", item)
        if not m:
            raise ValidationError(f"dim {item!r}: expected NAME=VALUE with a non-negative integer")
        dims[m.group(1)] = int(m.group(2))
    return dims
