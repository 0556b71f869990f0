"""Walk the graphs of an onnx.ModelProto, subgraphs (If/Loop/Scan bodies) included."""

from __future__ import annotations

from collections.abc import Iterator

import onnx


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held by a node's attributes."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """`graph` and every graph nested in it, depth first."""
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from graphs(sub)
