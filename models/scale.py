"""Generated graphs of any node count, for the scale bench (bench/scale.py).

Each builder takes the number of nodes wanted and returns a model with about that many, in the
shapes whose min-cut networks are hard for augmenting paths (issue 36):

* ``chain``: MatMul (ALLOW) and Softmax (DENY) alternating, one stream;
* ``leaky_chain``: a residual stream of INFER ops (Add, Mul) whose every value is also read by an
  FP32 side stream (Log, DENY, summed by Adds the DENY reach keeps FP32): each stream value may
  leak to FP32, the chain-with-leaks network;
* ``ladder``: two streams, each step reading both (Add and Mul of the two rails), a MatMul on one
  rail and an Exp on the other every few steps: a ladder of rungs;
* ``transformer``: models/blocks.gpt_decoder stacked as deep as the count asks (hidden 16).

Weights are tiny (hidden 8 or 16): the graph, not the bytes, is what grows.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN = 8


def _model(
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto],
    outputs: list[str],
    name: str,
) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", HIDDEN])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["batch", HIDDEN]) for o in outputs]
    graph = helper.make_graph(nodes, name, [x], outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _weight(name: str, rng: np.random.Generator) -> onnx.TensorProto:
    w = (rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32)
    return numpy_helper.from_array(w, name)


def chain(n: int, seed: int = 0) -> onnx.ModelProto:
    """MatMul, Softmax, MatMul, Softmax... (n nodes)."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(n):
        out = f"v{i}"
        if i % 2 == 0:
            inits.append(_weight(f"w{i}", rng))
            nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [out], name=f"mm{i}"))
        else:
            nodes.append(helper.make_node("Softmax", [x], [out], name=f"sm{i}", axis=-1))
        x = out
    return _model(nodes, inits, [x], "chain")


def leaky_chain(n: int, seed: int = 0) -> onnx.ModelProto:
    """A stream of Add/Mul (INFER) every value of which an FP32 side stream (Log, Add) reads.

    Four nodes a step: a MatMul (ALLOW: a reason for the stream to be low), the stream op, the
    Log reading its value and the side Add."""
    rng = np.random.default_rng(seed)
    bias = numpy_helper.from_array(np.full([HIDDEN], 0.5, np.float32), "bias")
    nodes, inits, x, side = [], [bias], "x", ""
    steps = max(1, n // 4)
    for i in range(steps):
        inits.append(_weight(f"w{i}", rng))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        op = "Add" if i % 2 == 0 else "Mul"
        nodes.append(helper.make_node(op, [f"m{i}", "bias"], [f"s{i}"], name=f"stream{i}"))
        nodes.append(helper.make_node("Log", [f"s{i}"], [f"l{i}"], name=f"log{i}"))
        if side:
            nodes.append(helper.make_node("Add", [side, f"l{i}"], [f"a{i}"], name=f"side{i}"))
            side = f"a{i}"
        else:
            side = f"l{i}"
        x = f"s{i}"
    return _model(nodes, inits, [x, side], "leaky_chain")


def ladder(n: int, seed: int = 0) -> onnx.ModelProto:
    """Two rails a, b; each step a' = Add(a, b), b' = Mul(b, a); a MatMul on rail a and an Exp
    on rail b every third step."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = [
        helper.make_node("Relu", ["x"], ["a_in"], name="a_in"),
        helper.make_node("Sigmoid", ["x"], ["b_in"], name="b_in"),
    ]
    inits: list[onnx.TensorProto] = []
    a, b = "a_in", "b_in"
    i = 0
    while len(nodes) < n:
        na, nb = f"a{i}", f"b{i}"
        nodes.append(helper.make_node("Add", [a, b], [na], name=f"add{i}"))
        nodes.append(helper.make_node("Mul", [b, a], [nb], name=f"mul{i}"))
        if i % 3 == 2:
            inits.append(_weight(f"w{i}", rng))
            nodes.append(helper.make_node("MatMul", [na, f"w{i}"], [f"{na}m"], name=f"mm{i}"))
            nodes.append(helper.make_node("Exp", [nb], [f"{nb}e"], name=f"exp{i}"))
            na, nb = f"{na}m", f"{nb}e"
        a, b = na, nb
        i += 1
    return _model(nodes, inits, [a, b], "ladder")


def transformer(n: int, seed: int = 0) -> onnx.ModelProto:
    """models/blocks.gpt_decoder with as many layers as make about n nodes (34 a layer)."""
    from models.blocks import gpt_decoder

    layers = max(1, round((n - 13) / 34))
    return gpt_decoder(layers=layers, hidden=16, heads=2, vocab=50, max_positions=64, seed=seed)


SHAPES = {
    "chain": chain,
    "leaky_chain": leaky_chain,
    "ladder": ladder,
    "transformer": transformer,
}
