"""Seeded sample inputs for the test models (used by tests and handy for quick runs).

Symbolic dims take values from ``dims`` (defaults: batch=2, seq=8, anything else 4); a dim named
with a sum, as decoder exporters write (``past_sequence_length + sequence_length``), is the sum of
its terms. Integer
inputs draw from the ``input_range:<name>`` metadata the builders record (default [0, 2)), bools
are fair coin flips, floats are standard normal. Graph inputs that are also initializers (old IR
version 3 models) are left out so the stored weights are used.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper

from models._graph import INPUT_RANGE_KEY

DEFAULT_DIMS: dict[str, int] = {"batch": 2, "seq": 8}


def input_shape(vi: onnx.ValueInfoProto, dims: Mapping[str, int] | None = None) -> list[int]:
    """Concrete shape for a graph input, resolving symbolic dims through ``dims``."""
    resolved = {**DEFAULT_DIMS, **(dims or {})}
    shape = []
    for d in vi.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            shape.append(d.dim_value)
        elif d.dim_param in resolved:
            shape.append(resolved[d.dim_param])
        else:
            terms = [t.strip() for t in d.dim_param.split("+")]
            shape.append(sum(int(t) if t.isdigit() else resolved.get(t, 4) for t in terms))
    return shape


def sample_inputs(
    model: onnx.ModelProto, seed: int = 0, dims: Mapping[str, int] | None = None
) -> dict[str, np.ndarray]:
    """One feed dict for ``model``: seeded values of the declared dtypes and shapes."""
    rng = np.random.default_rng(seed)
    ranges = {
        p.key[len(INPUT_RANGE_KEY) :]: tuple(int(v) for v in p.value.split(","))
        for p in model.metadata_props
        if p.key.startswith(INPUT_RANGE_KEY)
    }
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = input_shape(vi, dims)
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if dtype == np.bool_:
            feeds[vi.name] = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            low, high = ranges.get(vi.name, (0, 2))
            feeds[vi.name] = rng.integers(low, high, size=shape).astype(dtype)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds
