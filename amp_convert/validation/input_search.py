"""Samples to run the models on: the user's files, or random inputs at dims the reference runs on.

The one entry point for ``validate``, ``--auto``, the HTML probes and ``--decode-steps``, so they
share the defaults, the search for dims that run (``input_dims``), the ``--dim``/``--inputs``
hint when nothing runs, and the words that say which dims were used.

``run`` is the caller's way to run the reference on a feed dict; it raises ``RunError`` when ORT
cannot run it, and its result (the reference outputs, usually) comes back with each sample so the
reference never runs twice on the same arrays.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
import onnx

from amp_convert.errors import ValidationError
from amp_convert.validation.evidence import provenance_text, read_provenance
from amp_convert.validation.input_dims import Dim, DimPlan
from amp_convert.validation.inputs import (
    SAMPLE_RATES,
    Inputs,
    InputSpec,
    load_inputs,
    random_inputs,
    random_scalars,
    sample_rate_choices,
    sample_rate_inputs,
)
from amp_convert.validation.model_sizes import model_sizes
from amp_convert.validation.runtime import RunError
from amp_convert.validation.shape_screen import ShapeScreen

T = TypeVar("T")

#: what --auto says when it calibrates on random inputs (validate says "inputs: random")
RANDOM_CALIBRATION_WARNING = (
    "calibrating on random inputs (seed {seed}, dims {dims}): the search keeps FP32 what random "
    "data stresses, which may not be what real data stresses; give real inputs with --inputs "
    "FILE.npz (repeatable, one sample per file)"
)

InputSource = str | os.PathLike | Mapping[str, np.ndarray]


@dataclass
class Sample(Generic[T]):
    """One set of feeds and what ``run`` returned for it."""

    inputs: Inputs
    result: T


@dataclass
class Samples(Generic[T]):
    """The samples to judge on, whether they are random, and what the reader should know."""

    items: list[Sample[T]]
    random: bool
    warnings: list[str] = field(default_factory=list)
    #: where random inputs read back from files came from (``--save-inputs``' provenance)
    origin: str = ""
    #: that provenance itself, carried on when these inputs are saved again
    provenance: dict[str, Any] | None = None

    @property
    def first(self) -> Inputs:
        return self.items[0].inputs

    def inputs_only(self) -> Samples[None]:
        """These samples without what ``run`` returned: a verdict keeps the inputs it judged and
        where they came from, not the reference outputs."""
        same: Any = self
        kept = [Sample(s.inputs, None) for s in self.items]
        return dataclasses.replace(same, items=kept, warnings=list(self.warnings))

    def describe(self) -> str:
        """``random inputs (seed 0), dims (batch=1, seq=16)`` or ``2 input files: a.npz, ...``."""
        first = self.first
        if self.random and self.origin:
            return f"random inputs from {first.source} ({self.origin})"
        if self.random:
            return f"random inputs, dims {fmt_dims(first.dims)}"
        if len(self.items) == 1:
            return f"inputs {first.source}, dims {fmt_dims(first.dims)}"
        return f"{len(self.items)} samples: " + ", ".join(s.inputs.source for s in self.items)


def gather_samples(
    specs: list[InputSpec],
    model: onnx.ModelProto,
    run: Callable[[dict[str, np.ndarray]], T],
    *,
    inputs: InputSource | Sequence[InputSource] | None = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    what: str = "reference",
    reserve: int = 0,
) -> Samples[T]:
    """The user's samples (each checked and run), or random inputs found by ``find_runnable``.

    ``inputs``: None (random), one ``.npz`` path or dict of arrays, or a list of them (one sample
    each). ``dims`` apply to random inputs only (a warning says so otherwise). ``reserve``:
    positions a decoder's random inputs leave free (decode steps).
    """
    if inputs is None:
        feeds, result, warnings = find_runnable(
            specs, model, run, dims=dims, seed=seed, what=what, reserve=reserve
        )
        made = {"origin": "random", "seed": seed, "dims": dict(feeds.dims)}
        return Samples([Sample(feeds, result)], True, warnings, provenance=made)
    sources = _as_list(inputs)
    if not sources:
        raise ValidationError("inputs: an empty list (give at least one .npz file or dict)")
    notes: list[str] = []
    if dims:
        notes.append("dims are ignored when inputs are given (shapes come from the data)")
    items: list[Sample[T]] = []
    origins: list[dict[str, Any] | None] = []
    for source in sources:
        feeds = load_inputs(source, specs)
        notes.extend(feeds.notes)
        items.append(Sample(feeds, run(feeds.arrays)))
        origins.append(read_provenance(source) if isinstance(source, str | os.PathLike) else None)
    if origins and all(o is not None for o in origins):  # generated, then saved: still random
        first = origins[0]
        assert first is not None
        return Samples(items, True, notes, provenance_text(first), first)
    return Samples(items, False, notes)


def replay(samples: Samples[Any], run: Callable[[dict[str, np.ndarray]], T]) -> Samples[T]:
    """The same samples (inputs, provenance, warnings), each with `run`'s result: a second
    reader of a verdict's evidence (``validate --html``) runs on exactly what it judged."""
    items = [Sample(s.inputs, run(s.inputs.arrays)) for s in samples.items]
    return dataclasses.replace(samples, items=items, warnings=list(samples.warnings))


def _as_list(inputs: Any) -> list[InputSource]:
    if isinstance(inputs, str | os.PathLike | Mapping):
        return [inputs]
    return list(inputs)


def find_runnable(
    specs: list[InputSpec],
    model: onnx.ModelProto,
    run: Callable[[dict[str, np.ndarray]], T],
    *,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    what: str = "reference",
    reserve: int = 0,
) -> tuple[Inputs, T, list[str]]:
    """Random inputs ``run`` succeeds on: the default dims, else the next ones on the ladders.

    Stops at the first set of dims that runs and says which when it is not the first. Attempts
    after the first are screened by ONNX shape inference (``ShapeScreen``) when it explains the
    first failure, so sizes the graph refuses cost no run. One clear error naming the model, the
    values tried, the first error's cause and the way out (``--dim``, ``--inputs``) when none
    runs.
    """
    dims = dict(dims or {})
    plan = DimPlan.of(specs, dims, output_shapes(model), model_sizes(model), reserve)
    plan.check_user(dims)
    rates = sample_rate_inputs(specs)
    choices = sample_rate_choices(specs)
    tried: list[tuple[Inputs, str]] = []
    screen: ShapeScreen | None = None
    for scalars in choices:
        for i, attempt in enumerate(plan.attempts(dims)):
            feeds = random_inputs(specs, model, dims=attempt, seed=seed, plan=plan, scalars=scalars)
            if screen is not None and i > 0:
                refused = screen.refuses(feeds.arrays)
                if refused:
                    tried.append((feeds, f"shape inference: {refused}"))
                    continue
            try:
                result = run(feeds.arrays)
            except RunError as e:
                tried.append((feeds, ort_status(e.detail)))
                if screen is None and i == 0:
                    screen = ShapeScreen.explaining(model, feeds.arrays)
                continue
            return feeds, result, _found_warnings(tried, feeds, scalars)
    raise ValidationError(_nothing_ran(what, tried, plan, rates, specs, model))


def _nothing_ran(
    what: str,
    tried: list[tuple[Inputs, str]],
    plan: DimPlan,
    rates: list[str],
    specs: list[InputSpec],
    model: onnx.ModelProto,
) -> str:
    """The one error when no attempt runs: the values tried, the first error and the way out."""
    keys = sorted(plan.keys)
    values = ""
    if keys:
        seen = {k: list(dict.fromkeys(f.dims[k] for f, _ in tried if k in f.dims)) for k in keys}
        values = "; values tried: " + ", ".join(
            f"{k} = {'/'.join(map(str, v))}" for k, v in seen.items() if v
        )
    shapes = "; ".join(
        dict.fromkeys(
            ", ".join(f"{n}{list(a.shape)}" for n, a in f.arrays.items()) for f, _ in tried
        )
    )
    how = f"set the dynamic dims with --dim NAME=VALUE ({', '.join(keys)}) or " if keys else ""
    extra = ""
    if rates:
        extra = (
            f"; sample-rate input {', '.join(repr(r) for r in rates)} tried at "
            f"{', '.join(map(str, SAMPLE_RATES))}"
        )
    scalars_left = random_scalars(specs, model)
    if scalars_left:
        extra += (
            "; integer scalar input "
            + ", ".join(
                f"{n!r} took the random value {tried[0][0].arrays[n].reshape(-1)[0]}"
                for n in scalars_left
            )
            + " (its value may be what the model refuses)"
        )
    first = tried[0]
    return (
        f"{what} cannot run on the generated inputs ({len(tried)} attempts){values}; "
        f"the first, dims {fmt_dims(first[0].dims)}, failed with: {first[1]}; shapes tried: "
        f"{shapes}{extra}; {how}give real inputs with --inputs FILE.npz"
    )


def _found_warnings(
    tried: list[tuple[Inputs, str]], feeds: Inputs, scalars: Mapping[str, int]
) -> list[str]:
    warnings = []
    if tried:
        warnings.append(
            f"the reference cannot run on the default dims {fmt_dims(tried[0][0].dims)} "
            f"({tried[0][1]}); these dims worked: {fmt_dims(feeds.dims)} "
            "(set them with --dim to skip the search)"
        )
    if scalars:
        warnings.append(
            "sample-rate input "
            + ", ".join(f"{n!r} set to {v}" for n, v in scalars.items())
            + " (a conventional rate; give the real one with --inputs)"
        )
    return warnings


def output_shapes(model: onnx.ModelProto) -> dict[str, list[Dim]]:
    """The model's declared output shapes (a KV cache's head size is read from them)."""
    out: dict[str, list[Dim]] = {}
    for o in model.graph.output:
        t = o.type.tensor_type
        if not t.HasField("shape"):
            continue
        out[o.name] = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim
        ]
    return out


def ort_status(detail: str) -> str:
    """The node and its status message from ORT's run error, without the boilerplate."""
    node, sep, status = detail.partition(" Status Message: ")
    if not sep:
        return detail
    op = node.split("running ", 1)[-1].split(" node.", 1)[0] if "running " in node else ""
    status = status.split(" was false. ", 1)[-1]  # drop the source location of ORT's check
    return f"{op}: {status}" if op else status


def fmt_dims(dims: Mapping[str, int]) -> str:
    """``(batch=1, seq=16)``; ``(none)`` when the model has no dynamic dims."""
    return "(" + (", ".join(f"{k}={v}" for k, v in dims.items()) or "none") + ")"
