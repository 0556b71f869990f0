"""A node's neighbourhood as pattern matchers read it: who reads a value, the other operand of a
binary node, a constant scalar. Local questions only: nothing here walks the graph."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from amp_convert.core.precision import constant_tensor, is_default_domain


def is_op(node: ir.Node | None, *ops: str) -> bool:
    """`node` is one of the default domain's `ops`."""
    return node is not None and node.op_type in ops and is_default_domain(node.domain)


def readers(value: ir.Value) -> list[ir.Node]:
    """The distinct nodes reading `value` (Mul(d, d) reads d twice)."""
    out: list[ir.Node] = []
    for use in value.uses():
        if not any(n is use.node for n in out):
            out.append(use.node)
    return out


def only_reader(value: ir.Value, *ops: str) -> ir.Node | None:
    """The one node reading `value`, when it is one of `ops` and `value` is not a graph output."""
    found = readers(value)
    if len(found) != 1 or value.is_graph_output() or not is_op(found[0], *ops):
        return None
    return found[0]


def other_input(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """The other input of a binary node that reads `value`."""
    ins = list(node.inputs)
    if len(ins) != 2 or value not in ins:
        return None
    return ins[1] if ins[0] is value else ins[0]


def constant_scalar(value: ir.Value | None) -> float | None:
    """The value of a one-element initializer or Constant, as a float."""
    tensor = constant_tensor(value) if value is not None else None
    if tensor is None or tensor.size != 1:
        return None
    return float(np.asarray(tensor.numpy()).reshape(-1)[0])
