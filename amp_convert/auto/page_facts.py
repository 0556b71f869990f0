"""What the validate page reads from the converted file itself: precision by op type, weights,
node names and why a node is FP32.

Why: the page must describe the model the user will ship. Op types counted on the original's
graph list ops the conversion folded away (BatchNormalization "35 low" in a model with none
left), and weights held in Constant nodes are weights too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx

from amp_convert.core import proto_walk
from amp_convert.core.dtypes import LOW_TYPES
from amp_convert.reports.figures import count_nodes, proto_nodes, proto_weights
from amp_convert.reports.value_map import Fate, ValueMap

_LOW = {int(t) for t in LOW_TYPES}
_FLOAT = int(onnx.TensorProto.FLOAT)


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node, a node's body nodes right after it (onnx-ir's ``all_nodes`` order, which
    numbers the conversion report's nameless nodes)."""
    for node in graph.node:
        yield node
        for sub in proto_walk.subgraphs(node):
            yield from all_nodes(sub)


def node_names(proto: onnx.ModelProto) -> dict[str, str]:
    """Output value name -> the node's name as reports give it (``Op_<index>`` when nameless)."""
    out: dict[str, str] = {}
    for i, node in enumerate(all_nodes(proto.graph)):
        name = node.name or f"{node.op_type}_{i}"
        for value in node.output:
            if value:
                out.setdefault(value, name)
    return out


def precision_by_op(proto: onnx.ModelProto, types: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """op type -> (low, FP32) float nodes of the converted graph (``reports.figures``' rule: by
    the element types of their outputs; Casts and Constants are not counted)."""
    return count_nodes(proto_nodes(proto, types)).by_op


def folded_by_op(vm: ValueMap) -> dict[str, int]:
    """op type -> original nodes the conversion folded into another (from the value map)."""
    out: dict[str, int] = {}
    for fate in vm.nodes.values():
        if fate.fate == Fate.FOLDED and fate.op_type:
            out[fate.op_type] = out.get(fate.op_type, 0) + 1
    return out


def cast_count(proto: onnx.ModelProto) -> int:
    return sum(
        1 for n in all_nodes(proto.graph) if n.op_type == "Cast" and n.domain in ("", "ai.onnx")
    )


def weight_bytes(proto: onnx.ModelProto) -> int:
    """Bytes of every weight: initializers and the tensors of Constant nodes (exporters such as
    TorchScript hold weights there), in every graph (``reports.figures.proto_weights``)."""
    return proto_weights(proto).total
