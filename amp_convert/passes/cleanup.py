"""Cleanup: drop the casts the rewrite made redundant, without touching the rest of the model.

- a Cast whose input already has the target type is an identity: its readers read the input;
- a Cast reading an exact widening Cast (FP16/BF16 → FP32) reads the low value directly
  (widening is lossless, so the composition is unchanged), which often makes it an identity;
- Casts left without readers are removed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import onnx_ir as ir

from amp_convert.core import domains, walk
from amp_convert.core.dtypes import FLOAT, LOW_TYPES
from amp_convert.core.steps import StepResult
from amp_convert.core.summaries import one_line
from amp_convert.reports.value_map import Carried, ValueRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CleanupResult(StepResult):
    """What cleanup changed: casts rewired past a widening cast, identities bypassed, removed."""

    rewired: int = 0  # casts that now read the low value behind a widening cast
    bypassed: int = 0  # identity casts whose readers now read the input
    removed: int = 0  # casts without readers, removed
    #: each bypassed or removed Cast's output is carried by its input (for the value map)
    values: tuple[ValueRecord, ...] = field(default=(), compare=False)

    @property
    def modified(self) -> bool:
        return bool(self.rewired or self.bypassed or self.removed)


def is_cast(node: ir.Node | None) -> bool:
    return node is not None and node.op_type == "Cast" and domains.is_default(node.domain)


def _target(node: ir.Node) -> ir.DataType:
    return ir.DataType(node.attributes["to"].value)


def count_casts(model: ir.Model) -> int:
    """Cast nodes in the model, subgraphs included."""
    return sum(1 for n in walk.all_nodes(model.graph) if is_cast(n))


def cleanup(model: ir.Model) -> CleanupResult:
    """Fold and remove redundant Cast nodes (ours and the model's own), in place."""
    rewired = bypassed = 0
    records: list[ValueRecord] = []
    for node in list(walk.all_nodes(model.graph)):
        if not is_cast(node) or node.inputs[0] is None:
            continue
        source = node.inputs[0]
        producer = source.producer()
        if (
            is_cast(producer)
            and producer is not None
            and _target(producer) == FLOAT
            and producer.inputs[0] is not None
            and producer.inputs[0].dtype in LOW_TYPES
        ):
            source = producer.inputs[0]
            node.replace_input_with(0, source)
            rewired += 1
        out = node.outputs[0]
        if source.dtype == _target(node) and not out.is_graph_output() and out.uses():
            out.replace_all_uses_with(source)
            records.append(Carried(out, source, "Cast to its own type dropped"))
            bypassed += 1
    removed = _remove_dead_casts(model, records)
    result = CleanupResult(rewired, bypassed, removed, tuple(records))
    log.debug("cleanup: %s", one_line(result))
    return result


def _remove_dead_casts(model: ir.Model, records: list[ValueRecord]) -> int:
    removed = total = 0
    while True:
        removed = 0
        for node in list(walk.all_nodes(model.graph)):
            out = node.outputs[0] if node.outputs else None
            if is_cast(node) and out is not None and not out.uses() and not out.is_graph_output():
                assert node.graph is not None
                if node.inputs[0] is not None:
                    why = f"Cast {node.name!r} without readers dropped"
                    records.append(Carried(out, node.inputs[0], why))
                node.graph.remove(node, safe=True)
                removed += 1
        total += removed
        if not removed:
            return total


class CleanupPass(ir.passes.InPlacePass):
    """`cleanup` as an onnx-ir pass (for use in other pass sequences)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=cleanup(model).modified)
