"""Walk an ir.Model's graphs and nodes, subgraphs included, at a third of onnx-ir's cost.

``model.graphs()`` and ``graph.all_nodes()`` run onnx-ir's RecursiveGraphIterator: a generator and
an attribute-view per node, whichever the graph. The conversion walks every graph some 80 times
(each step finds what it works on itself), so on a small model with If bodies a quarter of the
pipeline's time went there. These do the same walk as plain loops, and yield the same objects in
the same order: nodes depth first with a node's body nodes right after it; graphs the top one
first, then every subgraph once, in the order it is entered.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

_GRAPH = ir.AttributeType.GRAPH
_GRAPHS = ir.AttributeType.GRAPHS


def _bodies(node: ir.Node) -> list[ir.Graph]:
    """The graphs a node's attributes hold (reference attributes hold none)."""
    found: list[ir.Graph] = []
    for attr in node.attributes.values():
        kind = attr.type
        if kind is _GRAPH and isinstance(attr, ir.Attr):
            found.append(attr.value)
        elif kind is _GRAPHS and isinstance(attr, ir.Attr):
            found.extend(attr.value)
    return found


def all_nodes(graph: ir.Graph) -> Iterator[ir.Node]:
    """`graph.all_nodes()`: every node, a node's body nodes right after it."""
    for node in graph:
        yield node
        if node.attributes:
            for body in _bodies(node):
                yield from all_nodes(body)


def _subgraphs(graph: ir.Graph, seen: dict[ir.Graph, None]) -> None:
    for node in graph:
        if node.attributes:
            for body in _bodies(node):
                seen.setdefault(body, None)
                _subgraphs(body, seen)


def graphs(model: ir.Model) -> Iterator[ir.Graph]:
    """`model.graphs()`: the top graph, then every subgraph once, in the order entered."""
    yield model.graph
    seen: dict[ir.Graph, None] = {}
    _subgraphs(model.graph, seen)
    seen.pop(model.graph, None)
    yield from seen
