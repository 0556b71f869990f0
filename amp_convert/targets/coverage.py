"""Which nodes of a converted model the target has no kernel for in their actual types.

This is the check behind "every converted node runs on the target's provider": a node with FP16 or
BF16 inputs/outputs that no kernel accepts is placed on the CPU by ONNX Runtime, with a copy each
way. Nodes without low-precision values are left out: they are the FP32 model's own business.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import onnx_ir as ir

from amp_convert.core import domains, walk
from amp_convert.core.dtypes import LOW_TYPES
from amp_convert.targets.kernel_table import KernelTable, dtype_name

LOW = LOW_TYPES


def _opset(model: ir.Model, node: ir.Node) -> int | None:
    if node.version is not None:
        return node.version
    return domains.imported_opset(model.opset_imports, node.domain)


def _types(values: object) -> list[ir.DataType | None]:
    return [v.dtype if v is not None else None for v in values]  # type: ignore[attr-defined]


def _fmt(dtypes: Sequence[ir.DataType | None]) -> str:
    return ", ".join("-" if d is None else dtype_name(d) for d in dtypes)


def low_precision_nodes(model: ir.Model) -> Iterator[tuple[ir.Node, int | None]]:
    """Every node, subgraphs included, with an FP16/BF16 input or output, and its opset."""
    for node in walk.all_nodes(model.graph):
        dtypes = _types(node.inputs) + _types(node.outputs)
        if any(d in LOW for d in dtypes):
            yield node, _opset(model, node)


@dataclass(frozen=True)
class Uncovered:
    """A low-precision node the target cannot run in its types, and why."""

    node: str
    op_type: str
    domain: str
    opset: int | None
    inputs: tuple[ir.DataType | None, ...]
    outputs: tuple[ir.DataType | None, ...]
    reason: str
    has_kernel: bool
    """False when the target has no kernel for the op at that opset in any type."""
    inlined: bool = False
    """True when ORT would expand the node's function body instead (body not checked)."""

    def __str__(self) -> str:
        op = domains.op_key(self.domain, self.op_type)
        return (
            f"{self.node or '<unnamed>'} {op}-{self.opset}: in ({_fmt(self.inputs)}) "
            f"out ({_fmt(self.outputs)}): {self.reason}"
        )


def find_uncovered(model: ir.Model, table: KernelTable) -> list[Uncovered]:
    """Every low-precision node (subgraphs included) that `table` does not accept."""
    found = []
    for node, opset in low_precision_nodes(model):
        ins, outs = tuple(_types(node.inputs)), tuple(_types(node.outputs))
        if opset is None:
            reason: str | None = f"no opset import for domain {node.domain!r}"
            has_kernel = False
        else:
            reason = table.accepts(node.op_type, node.domain, opset, ins, outs)
            has_kernel = reason is None or table.has_kernel(node.op_type, node.domain, opset)
        if reason is not None:
            inlined = opset is not None and table.inlined(
                node.op_type, node.domain, opset, ins, outs
            )
            found.append(
                Uncovered(
                    node.name or "",
                    node.op_type,
                    node.domain,
                    opset,
                    ins,
                    outs,
                    reason,
                    has_kernel,
                    inlined,
                )
            )
    return found


def uncovered_nodes(model: ir.Model, table: KernelTable) -> list[str]:
    """One line per low-precision node `table` does not accept: name, op-opset, types, reason."""
    return [str(u) for u in find_uncovered(model, table)]
