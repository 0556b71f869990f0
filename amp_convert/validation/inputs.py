"""Inputs for validation: seeded random values from the input specs, or the user's own arrays.

Random values are dtype-aware so that models with ids and masks run as intended:

* floats: seeded standard normal;
* bool: all True;
* strings: short words drawn from a fixed list (text front ends: tokenisers, normalisers);
* integers: in a small valid range, chosen in this order:
  1. the model's ``input_range:<name>`` metadata (``"low,high"``, half-open; written by the
     test-model builders and honoured by anyone who sets it),
  2. names containing ``mask`` → all ones (float masks too); ``token_type`` / ``segment`` →
     all zeros; ``position`` → 0, 1, 2, ... along the last axis,
  3. a scalar whose name says it is a sample rate (``sr``, ``sample_rate``, ``sampling_rate``)
     takes a conventional rate (``SAMPLE_RATES``: 16000 first; ``input_search`` tries the others
     when the model cannot run on it),
  4. otherwise uniform in [0, 100), narrowed to [0, rows) when the input directly indexes a
     Gather on an initializer with fewer rows (an embedding table), so ids are always valid.

Dynamic dims (their names, defaults, expressions and the larger sizes tried) follow the rules of
``input_dims``; ``input_search`` finds the sizes the reference runs on.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from amp_convert.core import domains
from amp_convert.errors import ValidationError
from amp_convert.files.budget import check_inputs_budget, npz_members
from amp_convert.validation.input_dims import Dim, DimPlan, axis_key, is_static
from amp_convert.validation.runtime import NP_DTYPES

INPUT_RANGE_KEY = "input_range:"
DEFAULT_INT_RANGE = (0, 100)
#: the words random string inputs are drawn from
WORDS = ("monday", "Tuesday", "amp", "convert", "ONNX", "model", "half", "precision")
#: scalar inputs named like a sample rate, and the conventional rates, the most common first
SAMPLE_RATE_NAMES = re.compile(r"^(sr|fs|sample_?rate|sampling_?rate|audio_?sr)$", re.I)
SAMPLE_RATES = (16000, 8000, 22050, 44100, 48000)


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
    #: what a reader should know about these arrays (dims named alike that differ)
    notes: list[str] = field(default_factory=list)

    @property
    def shapes(self) -> dict[str, list[int]]:
        return {k: list(v.shape) for k, v in self.arrays.items()}

    @property
    def dtypes(self) -> dict[str, str]:
        return {k: str(v.dtype) for k, v in self.arrays.items()}


#: the longest ``input_range:`` value read (two int64 and a comma fit in 41 characters)
MAX_RANGE_TEXT = 64
_INT64 = np.iinfo(np.int64)


def _metadata_ranges(model: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    """``input_range:<name>`` metadata: untrusted text, so one that is not two int64 bounds
    (malformed, too long, beyond int64: 10**30 raised deep in NumPy) is ignored."""
    ranges: dict[str, tuple[int, int]] = {}
    for p in model.metadata_props:
        if p.key.startswith(INPUT_RANGE_KEY) and len(p.value) <= MAX_RANGE_TEXT:
            try:
                lo, hi = (int(v) for v in p.value.split(","))
            except ValueError:
                continue
            if _INT64.min <= lo < hi <= _INT64.max:
                ranges[p.key[len(INPUT_RANGE_KEY) :]] = (lo, hi)
    return ranges


def _gather_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """Input name → rows of the smallest initializer table it indexes through a Gather."""
    inits = {t.name: list(t.dims) for t in model.graph.initializer}
    inputs = {i.name for i in model.graph.input}
    bounds: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type != "Gather" or len(node.input) < 2 or not domains.is_default(node.domain):
            continue
        data, idx = node.input[0], node.input[1]
        if idx in inputs and data in inits:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            shape = inits[data]
            if shape and -len(shape) <= axis < len(shape) and shape[axis] > 0:
                bounds[idx] = min(bounds.get(idx, shape[axis]), shape[axis])
    return bounds


def _is_scalar(spec: InputSpec) -> bool:
    """One value whatever the dims: rank 0, or every axis static 1."""
    return all(d == 1 for d in spec.shape)


def rate_fits(spec: InputSpec, rate: int) -> bool:
    """Whether `spec`'s element type holds `rate` exactly (an int8 "sr" cannot hold 16000: it
    would wrap, and the run would say it used a rate it never fed)."""
    dtype = NP_DTYPES.get(spec.type_str)
    if dtype is None or dtype.kind not in "iuf":
        return False
    if dtype.kind == "f":  # float16 holds 16000 but rounds 22050 to 22048
        return bool(float(np.asarray(rate, np.float64).astype(dtype)) == rate)
    info = np.iinfo(dtype)
    return bool(info.min <= rate <= info.max)


def sample_rate_inputs(specs: list[InputSpec]) -> list[str]:
    """Integer or float scalar inputs named like a sample rate whose type holds a conventional
    rate (their value matters)."""
    return [
        s.name
        for s in specs
        if _is_scalar(s)
        and SAMPLE_RATE_NAMES.match(s.name)
        and any(rate_fits(s, r) for r in SAMPLE_RATES)
    ]


def sample_rate_choices(specs: list[InputSpec]) -> list[dict[str, int]]:
    """The values to try for the sample-rate inputs, the most common rate first: each input
    gets only rates its type holds (its first such rate in place of one it cannot)."""
    rates = {s.name: s for s in specs if s.name in set(sample_rate_inputs(specs))}
    choices: list[dict[str, int]] = []
    for rate in SAMPLE_RATES:
        choice = {
            n: rate if rate_fits(s, rate) else next(r for r in SAMPLE_RATES if rate_fits(s, r))
            for n, s in rates.items()
        }
        if choice not in choices:
            choices.append(choice)
    return choices or [{}]


def random_scalars(specs: list[InputSpec], model: onnx.ModelProto) -> list[str]:
    """Integer scalar inputs that get a random value (no range, no meaning known by name): the
    ones to name when the model cannot run, their value may be what it refuses."""
    ranges = _metadata_ranges(model)
    rates = set(sample_rate_inputs(specs))
    known = ("mask", "token_type", "segment", "position")
    return [
        s.name
        for s in specs
        if _is_scalar(s)
        and s.type_str.startswith("tensor(int")
        and s.name not in ranges
        and s.name not in rates
        and not any(k in s.name.lower() for k in known)
    ]


def random_inputs(
    specs: list[InputSpec],
    model: onnx.ModelProto,
    *,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    plan: DimPlan | None = None,
    scalars: Mapping[str, int | float] | None = None,
) -> Inputs:
    """Seeded random arrays for every spec (see the module docstring for the rules).

    ``dims`` sets free dynamic dims (the rest take their defaults, expression dims are computed);
    ``plan`` is ``DimPlan.of(specs, dims)`` when the caller already has it; ``scalars`` sets the
    value of scalar inputs (a sample rate), by default the first of ``SAMPLE_RATES`` their type
    holds for those named like a sample rate.
    """
    fixed: dict[str, int | float] = dict(sample_rate_choices(specs)[0])
    fixed.update(scalars or {})
    dims = dict(dims or {})
    plan = plan or DimPlan.of(specs, dims)
    plan.check_user(dims)
    values = {**plan.defaults, **dims}
    shapes = {spec.name: plan.shape(spec, values) for spec in specs}
    check_inputs_budget((s.name, shapes[s.name], s.dtype) for s in specs)  # before allocating
    rng = np.random.default_rng(seed)
    ranges = _metadata_ranges(model)
    bounds = _gather_bounds(model)
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        if spec.name in fixed:
            value = np.full(shapes[spec.name], fixed[spec.name]).astype(spec.dtype)
            arrays[spec.name] = value
            continue
        arrays[spec.name] = _values(spec, shapes[spec.name], rng, ranges, bounds)
    return Inputs(arrays, "random", values)


def _values(
    spec: InputSpec,
    shape: list[int],
    rng: np.random.Generator,
    ranges: Mapping[str, tuple[int, int]],
    bounds: Mapping[str, int],
) -> np.ndarray:
    dtype = spec.dtype
    lname = spec.name.lower()
    if dtype == np.bool_:
        return np.ones(shape, np.bool_)
    if dtype.kind == "O":  # tensor(string)
        return rng.choice(np.array(WORDS, dtype=object), size=shape)
    if np.issubdtype(dtype, np.integer) and spec.name in ranges:
        info = np.iinfo(dtype)  # the metadata's range within what the input's type holds
        lo, hi = max(ranges[spec.name][0], int(info.min)), min(ranges[spec.name][1], int(info.max))
        if lo < hi:
            return _drawn(shape, dtype, lambda n: rng.integers(lo, hi, size=n))
    if "mask" in lname:  # a float mask too (TF/Keras exports): noise in one gives NaN
        return np.ones(shape, dtype)
    if not np.issubdtype(dtype, np.integer):
        return _drawn(shape, dtype, lambda n: rng.standard_normal(n).astype(np.float32))
    if "token_type" in lname or "segment" in lname:
        return np.zeros(shape, dtype)
    if "position" in lname and shape:
        return np.ascontiguousarray(np.broadcast_to(np.arange(shape[-1], dtype=dtype), shape))
    lo, hi = DEFAULT_INT_RANGE
    hi = min(hi, bounds.get(spec.name, hi))
    return _drawn(shape, dtype, lambda n: rng.integers(lo, hi, size=n))


#: values drawn per step: the generator's float64/int64 draws never exceed this many at a time
DRAW_CHUNK = 1 << 20


def _drawn(shape: list[int], dtype: np.dtype, draw: Callable[[int], np.ndarray]) -> np.ndarray:
    """An array of `dtype` filled by `draw` a chunk at a time, so that generating an input costs
    its own size (plus one chunk of float64/int64 draws) instead of several times it; the values
    are the same as one draw of the whole size (the generator's stream is sequential)."""
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)
    for start in range(0, flat.size, DRAW_CHUNK):
        n = min(DRAW_CHUNK, flat.size - start)
        flat[start : start + n] = draw(n)
    return out  # a scalar stays rank 0


def load_inputs(
    source: str | os.PathLike | Mapping[str, np.ndarray], specs: list[InputSpec]
) -> Inputs:
    """User arrays (``.npz`` path or dict) checked as ONNX Runtime checks them, one clear error.

    Names, dtypes, ranks and static sizes must match. Symbolic dims are not required to agree
    across inputs (ORT does not require it, and exporters name axes inconsistently); where one
    name takes two sizes the first is recorded and ``Inputs.notes`` says so.
    """
    expected = [s.name for s in specs]
    arrays, label, where = _read_arrays(source, expected)
    _check_names(where, arrays, expected)
    dims: dict[str, int] = {}
    notes: list[str] = []
    for spec in specs:
        arr = arrays[spec.name] = _raw_as(spec, arrays[spec.name])
        _check_array(where, spec, arr)
        for axis, got in enumerate(arr.shape):
            key = axis_key(spec.name, spec.shape, axis)
            if key is None:
                continue
            first = dims.setdefault(key, got)
            if first != got:
                notes.append(
                    f"{where}: dim {key!r} is {got} in input {spec.name!r} (axis {axis}) but "
                    f"{first} in an earlier input; ONNX Runtime accepts that, the model decides"
                )
    return Inputs({s.name: arrays[s.name] for s in specs}, label, dims, notes)


def _check_names(where: str, arrays: Mapping[str, object], expected: list[str]) -> None:
    """Every model input given, nothing else (`arrays`: only their names are read)."""
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


def _read_arrays(
    source: str | os.PathLike | Mapping[str, np.ndarray], expected: list[str] | None = None
) -> tuple[dict[str, np.ndarray], str, str]:
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise ValidationError(f"inputs {path}: no such file")
        # sizes and names from the headers, before anything loads: a member the model does
        # not take is refused by name, never read (a 2 GiB one was loaded whole first)
        members = npz_members(path)
        if expected is not None:
            _check_names(f"inputs {path}", {m.name: None for m in members}, expected)
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except Exception as e:
            raise ValidationError(f"inputs {path}: not a readable .npz file ({e})") from None
        return arrays, f"npz:{path}", f"inputs {path}"
    if isinstance(source, Mapping):
        return {str(k): np.asarray(v) for k, v in source.items()}, "arrays", "inputs"
    raise ValidationError(
        f"inputs: expected a .npz path or a dict of arrays, got {type(source).__name__}"
    )


def _raw_as(spec: InputSpec, arr: np.ndarray) -> np.ndarray:
    """An array ``np.save`` stored as raw bytes (``|V2``: NumPy has no bfloat16 of its own, so
    ``--save-inputs`` and ``np.savez`` write ml_dtypes arrays so) read as the type the input
    wants, when the sizes match."""
    want = spec.dtype
    if arr.dtype.kind == "V" and want.kind == "V" and arr.dtype.itemsize == want.itemsize:
        return arr.view(want)
    return arr


def _check_array(where: str, spec: InputSpec, arr: np.ndarray) -> None:
    """What ORT checks of a feed: dtype, rank, and every static size."""
    strings = spec.dtype.kind == "O" and arr.dtype.kind in "UO"  # .npz holds text as unicode
    if arr.dtype != spec.dtype and not strings:
        raise ValidationError(
            f"{where}: input {spec.name!r}: expected dtype {spec.dtype}, got {arr.dtype}"
        )
    if len(arr.shape) != len(spec.shape):
        raise ValidationError(
            f"{where}: input {spec.name!r}: expected shape {spec.shape_str()} "
            f"(rank {len(spec.shape)}), got {tuple(arr.shape)}"
        )
    for axis, (want, got) in enumerate(zip(spec.shape, arr.shape, strict=True)):
        if is_static(want) and want != got:
            raise ValidationError(
                f"{where}: input {spec.name!r}: expected shape {spec.shape_str()}, "
                f"got {tuple(arr.shape)} (axis {axis} must be {want})"
            )
