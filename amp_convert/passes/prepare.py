"""Prepare: the graph edits every conversion starts with, before anything is measured.

- Initializers also listed as graph inputs (old exporters: torch 1.2-era models at opset 9 list
  every weight there) are weights unless the user says otherwise:
  - IR < 4: ONNX Runtime cannot override them (Graph::CanOverrideInitializer is IR >= 4), so they
    are constants: they become plain initializers (IR version 4);
  - IR >= 4: ORT could override them, but warns at load that this prevents constant folding and
    advises moving them out of the inputs (tools/python/remove_initializer_from_input.py): they
    leave the inputs too, so they fold, convert and store low like any weight, with a note;
  - with ``keep_overridable`` (``--keep-initializer-inputs``, IR >= 4) they stay overridable
    FP32 inputs: the placement casts each one its low readers read, and nothing folds them.
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

from amp_convert.core import domains, walk
from amp_convert.core.precision import UniqueNames
from amp_convert.core.steps import StepResult
from amp_convert.placement.scoped_names import separate_scoped_names
from amp_convert.reports.conversion import InitializerInputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared(StepResult):
    """What prepare changed, and the model-wide name registry for the steps that add nodes."""

    promoted: int  # initializers that left the graph inputs
    constants: int  # Constant nodes whose value_float(s) became a tensor `value`
    names: UniqueNames  # shared service: every later step takes its new names from it
    renamed: int = 0  # subgraph values renamed apart (their names repeat elsewhere)
    #: what became of initializers listed as graph inputs (None: the model has none)
    initializer_inputs: InitializerInputs | None = None

    @property
    def modified(self) -> bool:
        return bool(self.promoted or self.constants or self.renamed)


def prepare(model: ir.Model, keep_overridable: bool = False) -> Prepared:
    """Apply the preparatory edits in place and make the name registry; `keep_overridable`:
    initializers listed as graph inputs stay inputs (IR >= 4, where ORT can override them)."""
    listed = initializer_inputs(model, keep_overridable)
    promoted = 0 if listed is None or listed.case == "overridable" else listed.count
    if promoted or model.ir_version is None or model.ir_version < 4:
        # below IR 4 every initializer must be a graph input, and later steps add initializers
        promote_constant_inputs(model)
    constants = sum(
        normalise_constant(n)
        for n in walk.all_nodes(model.graph)
        if n.op_type == "Constant" and domains.is_default(n.domain)
    )
    names = UniqueNames.of_model(model)
    renamed = separate_scoped_names(model, names)
    result = Prepared(promoted, constants, names, renamed, listed)
    log.debug(
        "prepare: %d initializers promoted, %d constants normalised, %d subgraph values renamed",
        promoted,
        constants,
        renamed,
    )
    return result


def initializer_inputs(model: ir.Model, keep_overridable: bool) -> InitializerInputs | None:
    """Which case applies to the main graph's initializers listed as inputs, and how many there
    are; None when there are none."""
    count = sum(1 for v in model.graph.inputs if v.is_initializer())
    if not count:
        return None
    if model.ir_version is not None and model.ir_version < 4:
        detail = (
            f"IR version {model.ir_version} < 4: ONNX Runtime cannot override them, so they are "
            "constants; they left the inputs and the IR version is now 4"
        )
        return InitializerInputs(count, "constants", detail)
    if keep_overridable:
        detail = (
            "kept as overridable FP32 graph inputs (--keep-initializer-inputs): not folded, and "
            "a Cast each where a low node reads them"
        )
        return InitializerInputs(count, "overridable", detail)
    detail = (
        "treated as weights (converted, folded, stored low) and removed from the graph inputs, "
        "as ONNX Runtime's load warning advises; --keep-initializer-inputs keeps them overridable"
    )
    return InitializerInputs(count, "weights", detail)


def promote_constant_inputs(model: ir.Model) -> int:
    """Initializers listed as graph inputs become plain initializers (IR version >= 4, where an
    initializer need not be an input); how many moved."""
    graph = model.graph
    keep = [v for v in graph.inputs if not v.is_initializer()]
    moved = len(graph.inputs) - len(keep)
    if moved:
        graph.inputs.clear()
        graph.inputs.extend(keep)
    if model.ir_version is None or model.ir_version < 4:
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
