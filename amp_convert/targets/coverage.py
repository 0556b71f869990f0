"""Which nodes of a converted model the target has no kernel for in their actual types.

This is the check behind "every converted node runs on the target's provider": a node with FP16 or
BF16 inputs/outputs that no kernel accepts is placed on the CPU by ONNX Runtime, with a copy each
way. Nodes without low-precision values are left out: they are the FP32 model's own business.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from amp_convert.targets.kernel_table import KernelTable, dtype_name

LOW = frozenset({ir.DataType.FLOAT16, ir.DataType.BFLOAT16})


def _opset(model: ir.Model, node: ir.Node) -> int | None:
    if node.version is not None:
        return node.version
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    version = model.opset_imports.get(domain)
    if version is None and domain == "":
        version = model.opset_imports.get("ai.onnx")
    return version


def _types(values: object) -> list[ir.DataType | None]:
    return [v.dtype if v is not None else None for v in values]  # type: ignore[attr-defined]


def _fmt(dtypes: list[ir.DataType | None]) -> str:
    return ", ".join("-" if d is None else dtype_name(d) for d in dtypes)


def low_precision_nodes(model: ir.Model) -> Iterator[tuple[ir.Node, int | None]]:
    """Every node, subgraphs included, with an FP16/BF16 input or output, and its opset."""
    for node in model.graph.all_nodes():
        dtypes = _types(node.inputs) + _types(node.outputs)
        if any(d in LOW for d in dtypes):
            yield node, _opset(model, node)


def uncovered_nodes(model: ir.Model, table: KernelTable) -> list[str]:
    """One line per low-precision node `table` does not accept: name, op-opset, types, reason."""
    lines = []
    for node, opset in low_precision_nodes(model):
        ins, outs = _types(node.inputs), _types(node.outputs)
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"
        if opset is None:
            reason: str | None = f"no opset import for domain {node.domain!r}"
        else:
            reason = table.accepts(node.op_type, node.domain, opset, ins, outs)
        if reason is not None:
            lines.append(
                f"{node.name or '<unnamed>'} {op}-{opset}: in ({_fmt(ins)}) out ({_fmt(outs)}): "
                f"{reason}"
            )
    return lines
