"""What the search needs to know about the model's main graph: nodes, float values, who reads what.

Built once from the weight-free reference proto. Nodes inside If/Loop/Scan bodies cannot be
graph outputs, so the main graph's control-flow node stands for them in the probes (its outputs
are exposed, its captured outer values count as its inputs); ``inner`` indexes the body nodes so
that the body localisation (bodies.py) can pin them one by one, and pinning a control-flow node
itself pins every node of its bodies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from amp_convert.core import domains, proto_walk

FLOAT = TensorProto.FLOAT


def name_nodes(model: ir.Model) -> int:
    """Give every node (subgraphs included) a unique, non-empty name; returns how many changed.

    The search pins nodes by name, so two nodes must never share one. Named nodes keep theirs.
    """
    seen: set[str] = set()
    nodes = list(model.graph.all_nodes())
    taken = {n.name for n in nodes if n.name}
    changed = 0
    for i, node in enumerate(nodes):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = node.name or f"{node.op_type}_{i}"
        name, k = base, 1
        while name in seen or (name != node.name and name in taken):
            name = f"{base}__{k}"
            k += 1
        node.name = name
        seen.add(name)
        taken.add(name)
        changed += 1
    return changed


def captured_names(graph: onnx.GraphProto) -> set[str]:
    """Names a (sub)graph and its nested bodies read from enclosing scopes."""
    used: set[str] = set()
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for node in graph.node:
        used.update(n for n in node.input if n)
        for a in node.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                used |= captured_names(sub)
        defined.update(o for o in node.output if o)
    used.update(o.name for o in graph.output)
    return used - defined


def body_graphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    out: list[onnx.GraphProto] = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


@dataclass
class NodeFacts:
    """One main-graph node: its float inputs/outputs (captures included) and body node names."""

    name: str
    op_type: str
    index: int
    inputs: list[str]
    outputs: list[str]
    body_nodes: list[str] = field(default_factory=list)


@dataclass
class InnerNode:
    """A node inside a body: the main-graph node it sits in, its order, its own nested nodes."""

    name: str
    op_type: str
    parent: str
    order: int
    body_nodes: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


@dataclass
class GraphFacts:
    """Main-graph structure and the element type and shape of each value."""

    nodes: list[NodeFacts]
    producer: dict[str, int]
    types: dict[str, int]
    shapes: dict[str, list[int | None]]
    graph_inputs: list[str]
    graph_outputs: list[str]
    initializers: set[str]
    opsets: dict[str, int]
    ir_version: int

    @property
    def float_values(self) -> list[str]:
        """Float node outputs of the main graph, in topological order (the values to probe)."""
        out: list[str] = []
        for n in self.nodes:
            out.extend(v for v in n.outputs if self.types.get(v) == FLOAT)
        return out

    def node(self, name: str) -> NodeFacts:
        return self.nodes[self._by_name[name]]

    def __post_init__(self) -> None:
        self._by_name = {n.name: n.index for n in self.nodes}

    #: body nodes by name (nested bodies included)
    inner: dict[str, InnerNode] = field(default_factory=dict)

    def op_type(self, name: str) -> str:
        return self.inner[name].op_type if name in self.inner else self.node(name).op_type

    def body_of(self, name: str) -> list[str]:
        """Names of the nodes in ``name``'s bodies (a main-graph or a body node)."""
        if name in self.inner:
            return self.inner[name].body_nodes
        return self.node(name).body_nodes if name in self._by_name else []

    def order(self, name: str) -> tuple[int, int]:
        """Topological position: a body node sits at its main-graph node, in body order."""
        if name in self.inner:
            return self._by_name[self.inner[name].parent], 1 + self.inner[name].order
        return self._by_name[name], 0

    @property
    def control_inputs(self) -> list[str]:
        """Non-float values read by control-flow nodes (If conditions, trip counts, captured
        indices): the body localisation re-runs bodies on them, so the reference records them."""
        out: list[str] = []
        seen: set[str] = set()
        for n in self.nodes:
            if not n.body_nodes:
                continue
            for v in n.inputs:
                skip = v in seen or v in self.initializers or v in self.graph_inputs
                if not skip and v in self.types and self.types[v] != FLOAT:
                    out.append(v)
                    seen.add(v)
        return out

    def estimated_bytes(self, value: str) -> int:
        """Bytes of one FP32 value; a partly unknown shape counts as the largest known value."""
        shape = self.shapes.get(value)
        if shape is None or any(not d for d in shape):
            return 4 * self.largest_elements
        return 4 * int(np.prod([int(d or 0) for d in shape], dtype=np.int64))

    largest_elements: int = 1

    def ancestors(self, values: Iterable[str]) -> set[str]:
        """Names of the nodes that ``values`` depend on (one backward walk)."""
        seen: set[str] = set()
        stack = [self.producer[v] for v in values if v in self.producer]
        while stack:
            i = stack.pop()
            node = self.nodes[i]
            if node.name in seen:
                continue
            seen.add(node.name)
            stack.extend(self.producer[v] for v in node.inputs if v in self.producer)
        return seen


def graph_facts(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> GraphFacts:
    """Facts of ``proto``'s main graph, shapes inferred for the concrete shapes of ``feeds``."""
    graph = proto.graph
    types, shapes = _infer(proto, feeds)
    nodes: list[NodeFacts] = []
    producer: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        inputs = [v for v in node.input if v]
        body: list[str] = []
        subs = body_graphs(node)
        for sub in subs:
            inputs.extend(sorted(captured_names(sub) - set(inputs)))
            body.extend(n.name for g in proto_walk.graphs(sub) for n in g.node)
        outs = [v for v in node.output if v]
        nodes.append(NodeFacts(node.name, node.op_type, i, inputs, outs, body))
        for v in outs:
            producer[v] = i
    inits = {t.name for t in graph.initializer}
    inner: dict[str, InnerNode] = {}
    for node in graph.node:
        k = 0
        for sub in body_graphs(node):
            for g in proto_walk.graphs(sub):
                for n in g.node:
                    nested = [
                        m.name for b in body_graphs(n) for h in proto_walk.graphs(b) for m in h.node
                    ]
                    outs = [o for o in n.output if o]
                    inner[n.name] = InnerNode(n.name, n.op_type, node.name, k, nested, outs)
                    k += 1
    facts = GraphFacts(
        nodes=nodes,
        producer=producer,
        types=types,
        shapes=shapes,
        graph_inputs=[i.name for i in graph.input if i.name not in inits],
        graph_outputs=[o.name for o in graph.output],
        initializers=inits,
        opsets={domains.normalise(o.domain): o.version for o in proto.opset_import},
        ir_version=proto.ir_version,
        inner=inner,
    )
    known = [  # activations only: a weight's size says nothing about a value's
        int(np.prod([int(d or 0) for d in s], dtype=np.int64))
        for v, s in shapes.items()
        if v in producer and s and all(d for d in s)
    ]
    facts.largest_elements = max([1, *known, *(int(a.size) for a in feeds.values())])
    return facts


def _infer(
    proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
) -> tuple[dict[str, int], dict[str, list[int | None]]]:
    """Element types and shapes of main-graph values, from ONNX inference on a weight-free copy."""
    g = proto.graph
    sk = onnx.GraphProto(name=g.name)
    sk.node.extend(g.node)
    inits = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name in inits:
            continue
        if vi.name in feeds and vi.type.HasField("tensor_type"):
            arr = feeds[vi.name]
            sk.input.append(
                helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, arr.shape)
            )
        else:
            sk.input.append(vi)
    for t in g.initializer:
        sk.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    sk.output.extend(g.output)
    sk.value_info.extend(g.value_info)
    model = helper.make_model(sk, opset_imports=list(proto.opset_import))
    model.ir_version = proto.ir_version
    with contextlib.suppress(Exception):  # best effort: values left untyped are not probed
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    types: dict[str, int] = {}
    shapes: dict[str, list[int | None]] = {}
    for vi in (*model.graph.input, *model.graph.value_info, *model.graph.output):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.elem_type:
            continue
        types[vi.name] = vi.type.tensor_type.elem_type
        if vi.type.tensor_type.HasField("shape"):
            shapes[vi.name] = [
                d.dim_value if d.HasField("dim_value") else None
                for d in vi.type.tensor_type.shape.dim
            ]
    return types, shapes
