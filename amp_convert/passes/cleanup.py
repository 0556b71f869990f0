"""Cleanup: drop the casts the rewrite made redundant, without touching the rest of the model.

- a Cast whose input already has the target type is an identity: its readers read the input;
- a Cast reading an exact widening Cast (FP16/BF16 → FP32) reads the low value directly
  (widening is lossless, so the composition is unchanged), which often makes it an identity;
- Casts left without readers are removed.
"""

from __future__ import annotations

import onnx_ir as ir

from amp_convert.precision import FLOAT, LOW_TYPES, is_default_domain


def _is_cast(node: ir.Node | None) -> bool:
    return node is not None and node.op_type == "Cast" and is_default_domain(node.domain)


def _target(node: ir.Node) -> ir.DataType:
    return ir.DataType(node.attributes["to"].value)


def count_casts(model: ir.Model) -> int:
    return sum(1 for n in model.graph.all_nodes() if _is_cast(n))


class CleanupPass(ir.passes.InPlacePass):
    """Fold and remove redundant Cast nodes (ours and the model's own)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for node in list(model.graph.all_nodes()):
            if not _is_cast(node) or node.inputs[0] is None:
                continue
            source = node.inputs[0]
            producer = source.producer()
            if (
                _is_cast(producer)
                and _target(producer) == FLOAT
                and producer.inputs[0] is not None
                and producer.inputs[0].dtype in LOW_TYPES
            ):
                source = producer.inputs[0]
                node.replace_input_with(0, source)
                modified = True
            out = node.outputs[0]
            if source.dtype == _target(node) and not out.is_graph_output():
                out.replace_all_uses_with(source)
                modified = True
        modified |= _remove_dead_casts(model)
        return ir.passes.PassResult(model, modified=modified)


def _remove_dead_casts(model: ir.Model) -> bool:
    removed = True
    any_removed = False
    while removed:
        removed = False
        for node in list(model.graph.all_nodes()):
            out = node.outputs[0] if node.outputs else None
            if _is_cast(node) and out is not None and not out.uses() and not out.is_graph_output():
                node.graph.remove(node, safe=True)
                removed = any_removed = True
    return any_removed
