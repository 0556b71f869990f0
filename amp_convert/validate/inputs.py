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

Dynamic dims: symbolic names take ``dims[name]``, else 1 for batch-like names (``batch``,
``batch_size``, ``N``, ``B``, ``bs``) and 16 for any other name; unnamed dynamic dims take
``dims["<input>[<axis>]"]``, else 1.
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
from amp_convert.validate.runtime import NP_DTYPES

INPUT_RANGE_KEY = "input_range:"
DEFAULT_INT_RANGE = (0, 100)
BATCH_DIM = 1
OTHER_DIM = 16
UNNAMED_DIM = 1
_BATCH_NAMES = {"n", "b", "bs", "batch", "batch_size", "batchsize", "nbatch"}

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


def resolve_shape(spec: InputSpec, dims: Mapping[str, int], used: dict[str, int]) -> list[int]:
    """Concrete shape for ``spec``; records which symbolic values were used."""
    shape: list[int] = []
    for axis, d in enumerate(spec.shape):
        if isinstance(d, int) and d >= 0:
            shape.append(d)
        elif isinstance(d, str) and d:
            value = dims.get(d, BATCH_DIM if is_batch_like(d) else OTHER_DIM)
            used[d] = value
            shape.append(value)
        else:
            key = f"{spec.name}[{axis}]"
            value = dims.get(key, UNNAMED_DIM)
            used[key] = value
            shape.append(value)
    return shape


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
    keys: set[str] = set()
    for spec in specs:
        for axis, d in enumerate(spec.shape):
            if isinstance(d, str) and d:
                keys.add(d)
            elif not (isinstance(d, int) and d >= 0):
                keys.add(f"{spec.name}[{axis}]")
    return keys


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
            if isinstance(want, str) and want and dims.setdefault(want, got) != got:
                raise ValidationError(
                    f"{where}: input {spec.name!r}: dim {want!r} is {got} on axis {axis} "
                    f"but {dims[want]} in an earlier input"
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
