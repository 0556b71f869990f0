"""The structural check the suite runs around every conversion step (tests/conftest.py).

After each step the graph must still be a graph: every input a node reads is defined before it
(a graph input, an initializer, an earlier node's output, or a value of an enclosing graph for a
subgraph), every output names its producer, every node belongs to the graph that lists it. And
the step must have done no more than it declared (core/steps.Edits): a step that edits nothing
leaves every node and wiring as it was, one that edits types adds or removes no node, and no
step short of Edits.SHAPES changes the known shape of a value that stays (which is what lets the
shape cache, built once before the edits, stay valid).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import onnx_ir as ir

from amp_convert.core.steps import Edits, Step

Shape = tuple[object, ...] | None


def _graphs(graph: ir.Graph) -> Iterator[ir.Graph]:
    yield graph
    for node in graph:
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                yield from _graphs(attr.as_graph())
            elif attr.type == ir.AttributeType.GRAPHS:
                for g in attr.as_graphs():
                    yield from _graphs(g)


def _values(model: ir.Model) -> Iterator[ir.Value]:
    for graph in _graphs(model.graph):
        yield from graph.inputs
        yield from graph.initializers.values()
        for node in graph:
            yield from (v for v in node.outputs if v is not None)


def _shape(value: ir.Value) -> Shape:
    if value.shape is None:
        return None
    return tuple(d if isinstance(d, int) else str(d) for d in value.shape)


def _wiring(model: ir.Model) -> list[tuple[object, ...]]:
    return [
        (id(n), n.op_type, n.domain, tuple(id(v) for v in n.inputs), tuple(map(id, n.outputs)))
        for graph in _graphs(model.graph)
        for n in graph
    ]


def check_structure(model: ir.Model, where: str) -> None:
    """Every value a node reads is defined before it; outputs and nodes know their owners."""
    _check_graph(model.graph, set(), where)


def _check_graph(graph: ir.Graph, outer: set[int], where: str) -> None:
    defined = set(outer)
    defined.update(id(v) for v in graph.inputs)
    defined.update(id(v) for v in graph.initializers.values())
    for node in graph:
        label = f"{where}: {node.op_type} {node.name!r}"
        assert node.graph is graph, f"{label} does not belong to the graph that lists it"
        for i, value in enumerate(node.inputs):
            if value is not None:
                assert id(value) in defined, (
                    f"{label} reads {value.name!r} (input {i}) before anything defines it"
                )
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                _check_graph(attr.as_graph(), defined, where)
            elif attr.type == ir.AttributeType.GRAPHS:
                for g in attr.as_graphs():
                    _check_graph(g, defined, where)
        for value in node.outputs:
            assert value.producer() is node, f"{label}: output {value.name!r} names another node"
            defined.add(id(value))
    for value in graph.outputs:
        assert id(value) in defined, f"{where}: graph output {value.name!r} is defined nowhere"


def around_step(model: ir.Model, step: Step) -> Callable[[], None]:
    """Called before a step; what it returns checks the model after it."""
    where = f"after step {step.number} ({step.name})"
    wiring = _wiring(model) if step.edits in (Edits.NOTHING, Edits.TYPES) else None
    shapes = {id(v): (v, _shape(v)) for v in _values(model)} if step.edits != Edits.SHAPES else {}

    def after() -> None:
        check_structure(model, where)
        if step.edits is Edits.NOTHING:
            assert _wiring(model) == wiring, f"{where}: a step that edits nothing edited nodes"
        elif step.edits is Edits.TYPES:
            nodes = [w[0] for w in _wiring(model)]
            assert nodes == [w[0] for w in wiring or []], f"{where}: nodes added or removed"
        for value in _values(model):
            known = shapes.get(id(value))  # the dict holds the values: no id is reused meanwhile
            if known is None or known[0] is not value or known[1] is None:
                continue
            if _shape(value) is None:
                continue
            assert _shape(value) == known[1], (
                f"{where}: {value.name!r} changed shape {known[1]} -> {_shape(value)} in a step "
                f"declared {step.edits.value}"
            )

    return after
