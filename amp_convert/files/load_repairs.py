"""Repairs on a freshly loaded ir.Model for what ONNX Runtime loads but ONNX's checker refuses.

ONNX Runtime sorts a graph's nodes itself and infers the types a graph output or value_info
leaves out; tf2onnx's "no_opt" exports, ORT's own FP16 converter (it appends its I/O Casts at the
end of the node list) and onnxconverter-common's test data rely on that. The converter's passes,
ONNX's checker and inference need sorted nodes and typed outputs, so the loader makes them so, on
its own copy, and says what it did in a note. A cycle cannot be sorted: ORT refuses it too.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
import onnx_ir as ir

from amp_convert.core import proto_walk, walk
from amp_convert.errors import InputError
from amp_convert.files.onnx_checks import call_on_stripped


def _label(node: ir.Node) -> str:
    return f"node {node.name!r} ({node.op_type})" if node.name else f"a {node.op_type} node"


def sort_nodes(model: ir.Model, where: str) -> str:
    """Sort every graph's nodes topologically (stable); the note for the report.

    InputError naming a node on the cycle when the nodes form one.
    """
    try:
        model.graph.sort()
    except ValueError:
        node = _node_on_cycle(model)
        what = f" through {_label(node)}" if node is not None else ""
        raise InputError(
            f"{where}: the nodes form a cycle{what}; no order can run them (ONNX Runtime "
            "refuses it too)"
        ) from None
    return (
        "the nodes were not in topological order (as tf2onnx's no_opt exports and ONNX Runtime's "
        "FP16 converter write them): sorted, as ONNX Runtime does when it loads the model"
    )


def _reads(node: ir.Node) -> Iterator[ir.Value]:
    """The values `node` reads, its subgraphs' reads of outer values included."""
    yield from (v for v in node.inputs if v is not None)
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH:
            bodies = [attr.value]
        elif attr.type == ir.AttributeType.GRAPHS:
            bodies = list(attr.value)
        else:
            continue
        for body in bodies:
            for inner in ir.traversal.RecursiveGraphIterator(body):
                yield from (v for v in inner.inputs if v is not None)


def _node_on_cycle(model: ir.Model) -> ir.Node | None:
    """A node on a cycle of some graph (depth-first search for a back edge)."""
    for graph in walk.graphs(model):
        nodes = set(graph)
        state: dict[ir.Node, int] = {}  # 1: on the path, 2: done
        for root in graph:
            if root in state:
                continue
            stack = [(root, iter(_reads(root)))]
            state[root] = 1
            while stack:
                node, reads = stack[-1]
                for value in reads:
                    pred = value.producer()
                    if pred is None or pred not in nodes:
                        continue
                    if state.get(pred) == 1:
                        return pred
                    if pred not in state:
                        state[pred] = 1
                        stack.append((pred, iter(_reads(pred))))
                        break
                else:
                    state[node] = 2
                    stack.pop()
    return None


def untyped_outputs(model: ir.Model) -> list[ir.Value]:
    """Graph outputs (of every graph) that carry no type."""
    return [v for g in walk.graphs(model) for v in g.outputs if v.type is None]


def shapeless_outputs(model: ir.Model) -> list[ir.Value]:
    """Main-graph tensor outputs whose type has no ``shape`` field (ORT loads them; ONNX's
    checker says "Field 'shape' of 'type' is required but missing")."""
    return [v for v in model.graph.outputs if isinstance(v.type, ir.TensorType) and v.shape is None]


def shape_outputs(model: ir.Model, values: list[ir.Value]) -> str | None:
    """Give `values` (shapeless outputs) the shape ONNX's inference finds; the note, or None
    when it finds none (the checker then says why the model is refused)."""
    types = call_on_stripped(model, _inferred_types)
    shaped = []
    for value in values:
        proto = types.get(value.name or "")
        if proto is None:
            continue
        try:
            shape = ir.serde.deserialize_type_proto_for_shape(proto)
        except Exception:  # an incomplete type: left as it is
            continue
        if shape is not None:
            value.shape = shape
            shaped.append(value)
    if not shaped:
        return None
    names = ", ".join(repr(v.name) for v in shaped[:3]) + (" ..." if len(shaped) > 3 else "")
    return (
        f"{len(shaped)} graph output(s) declared without a shape ({names}) given the shape "
        "ONNX's inference finds (ONNX Runtime loads them; ONNX's checker requires one)"
    )


def _inferred_types(proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    try:
        inferred = onnx.shape_inference.infer_shapes(
            proto, check_type=False, strict_mode=False, data_prop=False
        )
    except Exception:  # onnx raises several kinds; the caller decides
        return {}
    return {
        vi.name: vi.type
        for g in proto_walk.graphs(inferred.graph)
        for vi in (*g.output, *g.value_info)
        if vi.type.WhichOneof("value") is not None
    }


def type_outputs(model: ir.Model, values: list[ir.Value], where: str) -> str:
    """Type `values` (untyped graph outputs) by ONNX's inference; the note for the report.

    An output inference cannot type is refused: the converter could not tell whether it is a
    float value to keep, and a converted model could silently change its type.
    """

    types = call_on_stripped(model, _inferred_types)
    for value in values:
        proto = types.get(value.name or "")
        typed = None
        if proto is not None:
            try:
                typed = ir.serde.deserialize_type_proto_for_type(proto)
                shape = ir.serde.deserialize_type_proto_for_shape(proto)
            except Exception:  # an incomplete type: refused below
                typed = None
        if typed is None:
            raise InputError(
                f"{where}: graph output {value.name!r} has no type and ONNX's inference cannot "
                "give it one; refused, since a converted model could change its type unseen "
                "(declare its type in the model)"
            )
        value.type = typed
        if value.shape is None and shape is not None:
            value.shape = shape
    names = ", ".join(repr(v.name) for v in values[:3]) + (" ..." if len(values) > 3 else "")
    return (
        f"{len(values)} graph output(s) without a type ({names}) typed by ONNX's inference, as "
        "ONNX Runtime does when it loads the model"
    )
