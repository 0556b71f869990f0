"""A digest of a model's graph structure, stored next to amp-convert's stamp.

Why: the stamp says "converted with these options"; an FP32 node added to a converted model
afterwards (the stamp kept) made the next run answer "already converted: nothing to do". The
digest covers what an edit changes (nodes with their attributes and the names they read and
write, graph inputs/outputs and initializers with their types and shapes), never weight data:
O(nodes), nothing is read from disk. Metadata is left out (the stamp lives there).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import onnx_ir as ir

from amp_convert.core import walk

#: metadata key of the digest (written with the stamp, compared when the stamp matches)
DIGEST_KEY = "amp_convert.graph_digest"


def _value(v: ir.Value) -> str:
    shape = "?" if v.shape is None else ",".join(str(d) for d in v.shape)
    return f"{v.name}:{v.dtype.name if v.dtype is not None else '?'}[{shape}]"


def _attribute(attr: ir.Attr) -> str:
    if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        return f"{attr.name}=<graph>"  # the bodies are digested as graphs of their own
    if attr.type == ir.AttributeType.TENSOR:
        t = attr.value
        return f"{attr.name}=tensor:{t.dtype.name}{list(t.shape)}"
    if attr.type == ir.AttributeType.TENSORS:
        return f"{attr.name}=tensors:{[(t.dtype.name, list(t.shape)) for t in attr.value]}"
    return f"{attr.name}={attr.value!r}"


def _names(values: Sequence[ir.Value | None]) -> str:
    """Slot names; trailing empty slots are dropped when a model is saved: left out here too."""
    return ",".join(v.name if v is not None and v.name else "" for v in values).rstrip(",")


def graph_digest(model: ir.Model) -> str:
    """SHA-256 (hex) of every graph's structure, subgraphs included."""
    h = hashlib.sha256()
    for graph in walk.graphs(model):
        h.update(f"graph {graph.name}\n".encode())
        for kind, values in (("in", graph.inputs), ("out", graph.outputs)):
            h.update(f"{kind} {' '.join(_value(v) for v in values)}\n".encode())
        for name, value in graph.initializers.items():
            t = value.const_value
            what = "?" if t is None else f"{t.dtype.name}{list(t.shape)}"
            h.update(f"init {name} {what}\n".encode())
        for node in graph:
            ins, outs = _names(node.inputs), _names(node.outputs)
            attrs = ";".join(_attribute(a) for a in node.attributes.values())
            h.update(
                f"node {node.domain}:{node.op_type} {node.name} {ins}>{outs} {attrs}\n".encode()
            )
    return h.hexdigest()
