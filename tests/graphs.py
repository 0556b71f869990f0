"""Small onnx_ir models for the step tests: built from onnx.helper nodes, looked up by name."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

F32 = onnx.TensorProto.FLOAT
F16 = onnx.TensorProto.FLOAT16


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    opset: int = 17,
    extra_opsets: Sequence[onnx.OperatorSetIdProto] = (),
    ir_version: int = 8,
    typed: bool = True,
) -> ir.Model:
    """The model; `typed`: intermediate values typed by ONNX shape inference (as exporters do)."""
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset), *extra_opsets]
    proto = helper.make_model(graph, opset_imports=opsets, ir_version=ir_version)
    if typed:
        proto = onnx.shape_inference.infer_shapes(proto)
    return ir.serde.deserialize_model(proto)


def tensor(name: str, shape: Sequence[int | str] | None, elem: int = F32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def weight(name: str, array: np.ndarray | Sequence[float]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def node(m: ir.Model, name: str) -> ir.Node:
    for n in m.graph.all_nodes():
        if n.name == name:
            return n
    raise KeyError(name)


def value(m: ir.Model, name: str) -> ir.Value:
    for graph in m.graphs():
        for v in (*graph.inputs, *graph.initializers.values()):
            if v.name == name:
                return v
    for n in m.graph.all_nodes():
        for v in n.outputs:
            if v.name == name:
                return v
    raise KeyError(name)


def proto_bytes(m: ir.Model) -> bytes:
    """The model serialised: equal bytes before and after a step that must not edit the graph."""
    return ir.serde.serialize_model(m).SerializeToString()


def clip_opset11() -> ir.Model:
    """y = Clip(x, 0, 6) at opset 11, bounds as weights: ORT CUDA has no FP16 Clip-11."""
    return model(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="clip")],
        [tensor("x", [4])],
        [tensor("y", [4])],
        [weight("lo", 0.0), weight("hi", 6.0)],
        opset=11,
    )


def pow_model(exponent: float) -> onnx.ModelProto:
    """x -> MatMul -> Pow(exponent as a weight) -> MatMul -> y: the op lists' and options' model."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Pow", ["m", "e"], ["p"], name="pow"),
            helper.make_node("MatMul", ["p", "w"], ["y"], name="mm2"),
        ],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])],
        [
            numpy_helper.from_array(np.eye(4, dtype=np.float32), "w"),
            numpy_helper.from_array(np.array(exponent, dtype=np.float32), "e"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def cancellation_model() -> onnx.ModelProto:
    """m = x * k, d = x - m (cancels what the rounding of m left), r = Relu(x): with m low and
    d FP32, d fails; the Mul introduced the error (auto/localise.py, auto/blame.py)."""
    k = numpy_helper.from_array(np.array([1.001], np.float32), "k")
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "k"], ["m"], name="scale"),
            helper.make_node("Sub", ["x", "m"], ["d"], name="cancel"),
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
        ],
        "cancellation",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [16])],
        [
            helper.make_tensor_value_info("d", onnx.TensorProto.FLOAT, [16]),
            helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [16]),
        ],
        [k],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def if_branches_reading(name: str) -> tuple[onnx.GraphProto, onnx.GraphProto]:
    """An If's branches: `then` is Relu(`name`), a value it captures from an outer scope (or from
    none, to test a dangling reference); `else` is Neg(x)."""
    then = helper.make_graph(
        [helper.make_node("Relu", [name], ["t"], name="body_relu")],
        "then",
        [],
        [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [4])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"], name="body_neg")],
        "else",
        [],
        [helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, [4])],
    )
    return then, other


def mlp(layers: int = 3, width: int = 64, seed: int = 0) -> onnx.ModelProto:
    """x[1, width] → (MatMul, Add, Relu) × layers: one weight and one bias per layer."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        b = (rng.standard_normal(width) * 0.1).astype(np.float32)
        inits += [
            onnx.numpy_helper.from_array(w, f"w{i}"),
            onnx.numpy_helper.from_array(b, f"b{i}"),
        ]
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}"),
        ]
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(prev, onnx.TensorProto.FLOAT, [1, width])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
