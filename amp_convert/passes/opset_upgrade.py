"""Opset upgrade (``--opset-upgrade``): a QDQ model at opset 13-18 moves to opset 19.

Why: before opset 19 QuantizeLinear's and DequantizeLinear's scale is ``tensor(float)`` and a DQ's
output is FP32, so the float ops between a DQ and the next Q can only go low behind a Cast on each
side, which splits the DQ -> op -> Q groups ORT and TensorRT fuse (and costs more bytes than it
saves). Opset 19 lets the scale and the DQ output be float16/bfloat16.

What makes it safe: every default-domain node of the model (subgraphs included) is looked up at
the model's opset and at 19. A node whose op did not change keeps its meaning by definition. For an
op that changed, `_SAME` says why the change cannot alter this node (the new version only added
types, or attributes/inputs whose defaults are the old behaviour); `_EDITS` rewrite the few that
changed form (Reduce* axes moved from an attribute to an input at 18; RoiAlign-16's default
coordinate mode changed, so the old one is written out). Anything else (an op no rule covers,
a model below opset 13, model-local functions) is refused with one line naming it: the user's model
is never upgraded on a guess. The IR version rises to 9 where it is lower (opset 19's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx.defs
import onnx_ir as ir

from amp_convert.core import domains, walk
from amp_convert.core.precision import UniqueNames
from amp_convert.core.qdq_rules import TARGET_OPSET
from amp_convert.core.steps import StepResult
from amp_convert.errors import InputError

FIRST_OPSET = 13  # per-axis Q/DQ and the axes-as-input forms of Squeeze/Unsqueeze/Split/ReduceSum
TARGET_IR = 9  # the IR version that goes with opset 19 (onnx 1.14)

_BF16 = "added bfloat16 only"
_TYPES19 = "19 only added types (float8, string, optionals)"
#: op -> why every change between opset 13 and 19 leaves an existing node's meaning unchanged
_SAME: dict[str, str] = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Div"), "14 added integer and bfloat16 types"),
    "Relu": "14 added integer types",
    "Pow": "15 added bfloat16 exponents",
    "CumSum": "14 added float16 and bfloat16",
    **dict.fromkeys(("LeakyRelu", "PRelu", "Where", "GreaterOrEqual", "LessOrEqual"), _BF16),
    **dict.fromkeys(
        ("Cast", "CastLike"), "19 added float8 types and `saturate`, which acts on float8 only"
    ),
    **dict.fromkeys(("OptionalGetElement", "OptionalHasElement"), "18 also accepts plain tensors"),
    **dict.fromkeys(("Constant", "Identity", "Size", "Equal", "If", "Loop", "Scan"), _TYPES19),
    "Shape": "15 added start/end, whose defaults take the whole shape; 19 added types",
    "Reshape": "14 added allowzero, whose default 0 is the old meaning; 19 added types",
    "Pad": "18 added an optional axes input (default: every axis), 19 the wrap mode",
    "Resize": "18 added antialias, axes and keep_aspect_ratio_policy, 19 the "
    "half_pixel_symmetric mode; each default is the old behaviour",
    "AveragePool": "19 added dilations, default 1",
    "LpPool": "18 added ceil_mode (default 0) and dilations (default 1)",
    **dict.fromkeys(("GRU", "LSTM", "RNN"), "14 added layout, whose default 0 is the old one"),
    "ScatterElements": "16/18 added reduction kinds; the default none is the old meaning",
    "ScatterND": "16/18 added reduction kinds; the default none is the old meaning",
    "Split": "18 added num_outputs; the split input keeps its meaning",
    "QuantizeLinear": "19 added float16/bfloat16 scales and float8; saturate acts on float8 only",
    "DequantizeLinear": "19 added float16/bfloat16 scales and float8 inputs",
}
_REDUCE_18 = frozenset(
    f"Reduce{kind}"
    for kind in ("L1", "L2", "LogSum", "LogSumExp", "Max", "Mean", "Min", "Prod", "SumSquare")
)


@dataclass(frozen=True)
class UpgradeResult(StepResult):
    """What the upgrade did: the opsets, the IR versions and one line per edited node."""

    from_opset: int
    to_opset: int
    from_ir: int
    to_ir: int
    edits: tuple[str, ...] = ()

    @property
    def upgraded(self) -> bool:
        return self.to_opset != self.from_opset


def _since(op_type: str, opset: int) -> int | None:
    try:
        return int(onnx.defs.get_schema(op_type, opset, "").since_version)
    except onnx.defs.SchemaError:
        return None


def _batch_norm_problem(node: ir.Node, before: int) -> str | None:
    """BatchNormalization-9's optional training outputs changed meaning at 14."""
    if before < 14 and len([o for o in node.outputs if o.name]) > 1:
        return "BatchNormalization with training outputs (their meaning changed at opset 14)"
    return None


def _no_problem(node: ir.Node, before: int) -> str | None:
    return None


#: ops whose node needs a check or an edit to keep its meaning at 19
_CHECKS: dict[str, Callable[[ir.Node, int], str | None]] = {
    "BatchNormalization": _batch_norm_problem,
    "RoiAlign": _no_problem,
    **dict.fromkeys(_REDUCE_18, _no_problem),
}


def upgrade_opset(model: ir.Model, names: UniqueNames) -> UpgradeResult:
    """Move `model` to opset 19 in place where every node keeps its meaning; else InputError."""
    opsets = model.opset_imports
    old = domains.opset_version(opsets)
    ir_before = model.ir_version
    if old >= TARGET_OPSET:
        return UpgradeResult(old, old, ir_before, ir_before)
    if old < FIRST_OPSET:
        raise InputError(
            f"--opset-upgrade moves models at opset {FIRST_OPSET}-18 to {TARGET_OPSET}; this one "
            f"is at opset {old} (convert it to opset {FIRST_OPSET}+ first, e.g. with "
            "onnx.version_converter)"
        )
    if model.functions:
        raise InputError(
            "--opset-upgrade: the model has model-local functions, whose bodies it does not "
            "upgrade; convert without --opset-upgrade"
        )
    problems: list[str] = []
    edits: list[ir.Node] = []
    for node in walk.all_nodes(model.graph):
        if not domains.is_default(node.domain):
            continue
        before, after = _since(node.op_type, old), _since(node.op_type, TARGET_OPSET)
        if before is None or after is None:
            problems.append(f"{node.op_type} has no opset-{old} or opset-19 schema")
        elif before == after:
            continue
        elif node.op_type in _CHECKS:
            problem = _CHECKS[node.op_type](node, before)
            if problem is not None:
                problems.append(problem)
            elif node.op_type != "BatchNormalization":
                edits.append(node)
        elif node.op_type not in _SAME:
            problems.append(f"{node.op_type}-{before} changed at opset {after}")
    if problems:
        first = sorted(set(problems))
        more = f" (and {len(first) - 1} more)" if len(first) > 1 else ""
        raise InputError(
            f"--opset-upgrade: opset {old} -> {TARGET_OPSET} could change the model: "
            f"{first[0]}{more}; convert without --opset-upgrade"
        )
    done = tuple(_edit(node, names) for node in edits)
    for spelling in ("", "ai.onnx"):
        if spelling in opsets:
            opsets[spelling] = TARGET_OPSET
    if not any(s in opsets for s in ("", "ai.onnx")):
        opsets[""] = TARGET_OPSET
    model.ir_version = max(ir_before, TARGET_IR)
    return UpgradeResult(
        old, TARGET_OPSET, ir_before, model.ir_version, tuple(d for d in done if d)
    )


def _edit(node: ir.Node, names: UniqueNames) -> str:
    """The node rewritten in its opset-19 form with the same meaning; a line saying so."""
    label = node.name or node.op_type
    if node.op_type == "RoiAlign":
        if "coordinate_transformation_mode" in node.attributes:
            return ""
        node.attributes["coordinate_transformation_mode"] = ir.AttrString(
            "coordinate_transformation_mode", "output_half_pixel"
        )
        return f"{label}: RoiAlign's opset-10 coordinate mode written out (output_half_pixel)"
    axes = node.attributes.get("axes")
    if axes is None:  # no axes: every axis, at 13 as at 18
        return ""
    del node.attributes["axes"]
    graph = node.graph
    assert graph is not None
    value = ir.Value(
        name=names.take(f"{label}/axes"),
        type=ir.TensorType(ir.DataType.INT64),
        shape=ir.Shape([len(axes.as_ints())]),
        const_value=ir.tensor(np.asarray(axes.as_ints(), dtype=np.int64)),
    )
    graph.register_initializer(value)
    node.resize_inputs(2)
    node.replace_input_with(1, value)
    return f"{label}: {node.op_type}'s axes attribute became its axes input (opset 18)"
