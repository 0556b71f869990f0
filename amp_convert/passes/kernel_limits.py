"""Name the low-precision nodes whose result depends on a kernel's held sum staying in range.

Why: ORT CUDA's ReduceMean writes the sum of the reduced values into its FP16 output and divides
afterwards (targets/ort_cuda_accumulation.json: Inf once the sum passes 65504, measured on an
H100). The converter cannot see the data, so the classify decision stays what the lists say
(ReduceMean is on the deny list: FP32 at O1/O2 unless it is a spatial mean run as
GlobalAveragePool; low at O3, by --fp16-ops or where --auto's range guard saw the sum in range).
A ReduceMean that ends up low is correct exactly when that limit holds for the user's data, so the
report names each one with the limit, over how many values it reduces when the shapes say, and
the kernel source; ``validate --provider emulate`` and ``--auto`` check it on data.

Read-only: one pass over the result's nodes after verify.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import onnx_ir as ir

from amp_convert.core import walk
from amp_convert.core.dtypes import LOW_TYPES, onnx_name
from amp_convert.core.precision import is_default_domain
from amp_convert.core.steps import StepResult
from amp_convert.cost.shapes import ShapeBook
from amp_convert.reports.conversion import LimitNote
from amp_convert.targets import Target


def _shape(value: ir.Value, shapes: ShapeBook) -> tuple[int | None, ...] | None:
    producer = value.producer()
    if producer is not None and producer.op_type == "Cast" and producer.inputs[0] is not None:
        value = producer.inputs[0]  # a Cast we inserted: the book knows its source
    return shapes.shape(value)


def _count(node: ir.Node, shapes: ShapeBook | None) -> int | None:
    """How many values each output element of the reduction sums, for the assumed dims."""
    x, y = node.inputs[0], node.outputs[0]
    if shapes is None or x is None:
        return None
    a, b = _shape(x, shapes), _shape(y, shapes)
    if a is None or b is None or None in a or None in b:
        return None
    n_in, n_out = math.prod(d or 0 for d in a), math.prod(d or 0 for d in b)
    return n_in // n_out if n_out else None


@dataclass(frozen=True)
class LimitNotes(StepResult):
    """The low nodes whose result depends on a kernel's held sum, one report note each."""

    notes: tuple[LimitNote, ...] = ()


def kernel_limits(model: ir.Model, target: Target, shapes: ShapeBook | None = None) -> LimitNotes:
    """Every low node of `model` whose kernel on `target` holds a sum in its low type."""
    out: list[LimitNote] = []
    for i, node in enumerate(walk.all_nodes(model.graph)):
        x = node.inputs[0] if node.inputs else None
        if x is None or x.dtype not in LOW_TYPES:
            continue
        domain = "" if is_default_domain(node.domain) else node.domain
        dtype = onnx_name(x.dtype)
        row = target.held_sum(node.op_type, domain, dtype)
        if row is None:
            continue
        name = node.name or f"{node.op_type}_{i}"
        out.append(
            LimitNote(
                name,
                node.op_type,
                dtype,
                _count(node, shapes),
                row.limit_text,
                row.source.split(":")[0],
            )
        )
    return LimitNotes(tuple(out))
