"""Prepare: the graph edits every conversion starts with, before anything is measured.

- IR < 4 lists every initializer as a graph input; ONNX Runtime cannot override them there
  (Graph::CanOverrideInitializer is IR >= 4), so they are constants: they become plain
  initializers (IR version 4) so they fold, convert and store low like any weight.
- Constant(value_float[s]=...) becomes Constant(value=tensor), so it converts like any tensor.
- Subgraph values whose names repeat elsewhere in the model (the branches of optimum's merged
  decoders) get fresh names: every later look-up by name (ONNX inference, shapes) finds one value.

The name registry every later step takes new names from is made here too, after the edits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from amp_convert.core import domains
from amp_convert.core.precision import UniqueNames
from amp_convert.placement.scoped_names import separate_scoped_names

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """What prepare changed, and the model-wide name registry for the steps that add nodes."""

    promoted: int  # initializers that left the graph inputs (IR < 4)
    constants: int  # Constant nodes whose value_float(s) became a tensor `value`
    names: UniqueNames  # shared service: every later step takes its new names from it
    renamed: int = 0  # subgraph values renamed apart (their names repeat elsewhere)

    @property
    def modified(self) -> bool:
        return bool(self.promoted or self.constants or self.renamed)


def prepare(model: ir.Model) -> Prepared:
    """Apply the preparatory edits in place and make the name registry."""
    promoted = promote_constant_inputs(model)
    constants = sum(
        normalise_constant(n)
        for n in model.graph.all_nodes()
        if n.op_type == "Constant" and domains.is_default(n.domain)
    )
    names = UniqueNames.of_model(model)
    renamed = separate_scoped_names(model, names)
    result = Prepared(promoted, constants, names, renamed)
    log.debug(
        "prepare: %d initializers promoted, %d constants normalised, %d subgraph values renamed",
        promoted, constants, renamed,
    )  # fmt: skip
    return result


def promote_constant_inputs(model: ir.Model) -> int:
    """IR < 4: initializers listed as graph inputs become plain initializers; how many moved."""
    if model.ir_version is None or model.ir_version >= 4:
        return 0
    graph = model.graph
    keep = [v for v in graph.inputs if not v.is_initializer()]
    moved = len(graph.inputs) - len(keep)
    if moved:
        graph.inputs.clear()
        graph.inputs.extend(keep)
    model.ir_version = 4
    return moved


def normalise_constant(node: ir.Node) -> bool:
    """Constant(value_float[s]=...) → Constant(value=tensor); whether it changed."""
    changed = False
    for key in ("value_float", "value_floats"):
        attr = node.attributes.get(key)
        if attr is not None:
            data = np.asarray(attr.value, dtype=np.float32)
            del node.attributes[key]
            node.attributes["value"] = ir.AttrTensor("value", ir.Tensor(data))
            changed = True
    return changed
