"""Emulate kernels that hold a sum in the low type (the Target's accumulation table:
targets/ort_cuda_accumulation.json for the runtime emulate mode reproduces).

ORT CUDA's ReduceMean writes the *sum* of the reduced values into its FP16 output and divides
afterwards: the result is Inf once that sum passes 65504 although the mean is small (measured on
an H100: a mean of 20 over 4096 values is Inf). Rounding only the output, as the emulator does for
every other node, cannot see that. For such a node the emulated copy computes

    count = Size(x) / Size(mean);  sum = mean * count
    mean' = Cast(Cast(sum, low), FLOAT) / count

and then rounds ``mean'`` like any low output: the sum is rounded (and saturates to Inf) where the
kernel holds it, then the division happens in the low type too.
"""

from __future__ import annotations

import onnx_ir as ir

from amp_convert.core.precision import FLOAT, UniqueNames
from amp_convert.targets import Target


def holds_sum(node: ir.Node, target: Target) -> bool:
    """Whether `node`'s kernel on `target` holds the sum of its reduced inputs in its output
    type."""
    return target.holds_input_sum(node.op_type, node.domain)


def held_sum_nodes(
    node: ir.Node, mean: ir.Value, low: ir.DataType, names: UniqueNames
) -> tuple[list[ir.Node], ir.Value]:
    """Nodes that turn `node`'s FP32 `mean` into the mean of a sum held in `low`, and their output.

    `mean` is the node's own output (already FLOAT in the copy); the caller rounds the returned
    value as it would have rounded `mean`.
    """
    x = node.inputs[0]
    assert x is not None
    base = str(mean.name)

    def value(suffix: str, dtype: ir.DataType = FLOAT) -> ir.Value:
        return ir.Value(name=names.take(f"{base}__emu_{suffix}"), type=ir.TensorType(dtype))

    def make(op: str, inputs: list[ir.Value], out: ir.Value, **attrs: int) -> ir.Node:
        attributes = [ir.AttrInt64(k, v) for k, v in attrs.items()]
        return ir.Node("", op, inputs, attributes, outputs=[out], name=names.take(f"{out.name}"))

    n_in, n_out = value("n_in", ir.DataType.INT64), value("n_out", ir.DataType.INT64)
    f_in, f_out = value("n_in_f"), value("n_out_f")
    count, total = value("count"), value("sum")
    held_low, held = value("sum_low", low), value("sum_held")
    out = value("held_mean")
    nodes = [
        make("Size", [x], n_in),
        make("Size", [mean], n_out),
        make("Cast", [n_in], f_in, to=FLOAT),
        make("Cast", [n_out], f_out, to=FLOAT),
        make("Div", [f_in, f_out], count),
        make("Mul", [mean, count], total),
        make("Cast", [total], held_low, to=low),
        make("Cast", [held_low], held, to=FLOAT),
        make("Div", [held, count], out),
    ]
    return nodes, out
