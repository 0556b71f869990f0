"""QDQ groups: keep DequantizeLinear -> op -> QuantizeLinear fusable.

ORT's QDQ fusion (onnxruntime/core/optimizer/qdq_transformer/selectors_actions/qdq_selectors.cc,
``NodeGroupSelector::CheckQDQNodes``) takes an op into a quantized kernel only when every input it
has comes straight from a DequantizeLinear and every output goes straight into QuantizeLinear
nodes (and is no graph output); TensorRT's explicit quantization fuses the same DQ -> op -> Q
shape. A Cast between the DQ and the op, or between the op and its Q, splits the group: the op then
runs unquantized, and the Cast moves bytes on top. So where the Q/DQ nodes themselves cannot go low
(their scale is ``tensor(float)`` before opset 19, or a user/range rule keeps them FP32), the ops
they feed or are fed by keep FP32 with them. At opset 19 (``--opset-upgrade``) the Q/DQ nodes take
low scales and the whole group goes low together: no Cast inside it.

Reads the graph only; returns the classes with those nodes pinned (frozen, like classify's).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from amp_convert.core import domains, walk
from amp_convert.core.qdq_rules import QDQ_OPS, TARGET_OPSET
from amp_convert.core.reasons import Reason, ReasonKind, render
from amp_convert.core.steps import StepResult
from amp_convert.placement.plan import Classes

_SPLIT = "a Cast between them would split the DQ -> op -> Q group ORT and TensorRT fuse"
_READS, _FEEDS = (
    f"reads an FP32 DequantizeLinear: {_SPLIT}",
    f"feeds an FP32 QuantizeLinear: {_SPLIT}",
)


@dataclass(frozen=True)
class QdqGroups(StepResult):
    """The classes with ops next to an FP32 Q/DQ pinned, and how many were pinned."""

    classes: Classes
    pinned: int = 0
    qdq_nodes: int = 0
    opset: int = 0
    #: why the first FP32 Q/DQ that pinned a neighbour is FP32 (its classify reason)
    cause: str = ""

    @property
    def below_19(self) -> bool:
        return self.opset < TARGET_OPSET


def keep_qdq_groups(model: ir.Model, classes: Classes) -> QdqGroups:
    """Pin FP32 the ops that read an FP32 DQ output or feed an FP32 Q input (user rules win)."""
    opset = domains.opset_version(model.opset_imports)
    out = dict(classes)
    pinned = qdq = 0
    cause = ""
    for node in walk.all_nodes(model.graph):
        if node.op_type not in QDQ_OPS or not domains.is_default(node.domain):
            continue
        qdq += 1
        info = classes[node]
        if node.op_type == "DequantizeLinear":
            if info.candidate and 0 in info.low_outputs:
                continue
            pairs = [(u.node, u.idx) for u in node.outputs[0].uses()]
            neighbours = [(n, out[n].low_inputs, i) for n, i in pairs if n in out]
        else:
            if info.candidate and 0 in info.low_inputs:
                continue
            x = node.inputs[0]
            producer = x.producer() if x is not None else None
            index = x.index() if x is not None else None
            if producer is None or producer not in out or index is None:
                continue
            neighbours = [(producer, out[producer].low_outputs, index)]
        for neighbour, slots, index in neighbours:
            current = out[neighbour]
            if not current.candidate or current.user or index not in slots:
                continue
            detail = _READS if node.op_type == "DequantizeLinear" else _FEEDS
            why = f"FP32 Q/DQ (opset {opset})" if opset < TARGET_OPSET else "FP32 Q/DQ"
            out[neighbour] = current.pinned(Reason(ReasonKind.QDQ, why, detail))
            pinned += 1
            cause = cause or render(info.reasons)
    return QdqGroups(Classes(out), pinned, qdq, opset, cause)
