"""Models ONNX Runtime loads though ONNX's checker refuses them (onnxconverter-common's data).

The patterns of three files in onnxconverter-common's ``tests/data``, built in code:

- ``tf2onnx_no_opt``: a tf2onnx export without its optimizer (``test_model_*_no_opt.onnx``): the
  nodes are listed out of topological order, Identity nodes left in;
- ``untyped_if_output``: a graph output with no type that an If produces (``test_subgraph.onnx``),
  plus a value_info entry without a type;
- ``one_hot_ml_only``: a scikit-learn OneHotEncoder as skl2onnx writes it: only ``ai.onnx.ml`` is
  imported, no ``ai.onnx`` opset at all.

They are not in ``models.build``'s registry: the generic model tests assume checker-clean models.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PRODUCER = "amp-convert-models"


def _model(graph: onnx.GraphProto, opsets: dict[str, int], doc: str) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
        producer_name=PRODUCER,
        ir_version=8,
    )
    model.doc_string = doc
    return model


def tf2onnx_no_opt(features: int = 8, hidden: int = 16, seed: int = 40) -> onnx.ModelProto:
    """Dense → BiasAdd → Relu → Dense → Softmax as tf2onnx writes it without optimizing.

    The nodes are in reverse order (outputs first), with the Identity nodes tf2onnx leaves for
    TensorFlow's ``Identity`` ops: ONNX Runtime sorts them when it loads the model.
    """
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(
        (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32),
        "dense/kernel:0",
    )
    b1 = numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "dense/bias:0")
    w2 = numpy_helper.from_array(
        (rng.standard_normal((hidden, 4)) / np.sqrt(hidden)).astype(np.float32), "dense_1/kernel:0"
    )
    steps = [  # (op, inputs, output): outputs first, as the no_opt export lists them
        ("Identity", ["dense_1/Softmax:0"], "Identity"),
        ("Softmax", ["dense_1/MatMul:0"], "dense_1/Softmax"),
        ("MatMul", ["dense/Relu:0", "dense_1/kernel:0"], "dense_1/MatMul"),
        ("Relu", ["dense/BiasAdd:0"], "dense/Relu"),
        ("Add", ["dense/MatMul:0", "dense/bias/read:0"], "dense/BiasAdd"),
        ("Identity", ["dense/bias:0"], "dense/bias/read"),
        ("MatMul", ["input:0", "dense/kernel:0"], "dense/MatMul"),
    ]
    nodes = [helper.make_node(op, ins, [f"{name}:0"], name=name) for op, ins, name in steps]
    graph = helper.make_graph(
        nodes,
        "tf2onnx",
        [helper.make_tensor_value_info("input:0", TensorProto.FLOAT, ["unk__6", features])],
        [helper.make_tensor_value_info("Identity:0", TensorProto.FLOAT, ["unk__7", 4])],
        [w1, b1, w2],
    )
    return _model(graph, {"": 13}, tf2onnx_no_opt.__doc__ or "")


def untyped_if_output(features: int = 8, seed: int = 41) -> onnx.ModelProto:
    """MatMul → If(sum > 0: Relu, else: Neg) whose graph output ``y`` declares no type.

    ``h`` also has a value_info entry with a name only. ONNX Runtime infers both; ONNX's checker
    refuses them ("Field 'type' of 'value_info' is required but missing").
    """
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((features, features)).astype(np.float32), "w")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")

    def branch(name: str, op: str) -> onnx.GraphProto:
        out = f"{name}_out"
        return helper.make_graph(
            [helper.make_node(op, ["h"], [out], name=f"{name}_{op.lower()}")],
            name,
            [],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", features])],
        )

    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("ReduceSum", ["h"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="positive"),
        helper.make_node(
            "If",
            ["cond"],
            ["y"],
            name="branch",
            then_branch=branch("then", "Relu"),
            else_branch=branch("else", "Neg"),
        ),  # fmt: skip
    ]
    untyped_y, untyped_h = onnx.ValueInfoProto(name="y"), onnx.ValueInfoProto(name="h")
    graph = helper.make_graph(
        nodes,
        "subgraph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [untyped_y],
        [w, zero],
        value_info=[untyped_h],
    )
    return _model(graph, {"": 13}, untyped_if_output.__doc__ or "")


def one_hot_ml_only(categories: int = 5) -> onnx.ModelProto:
    """skl2onnx's OneHotEncoder: int64 categories → float one-hot, only ``ai.onnx.ml`` imported.

    Nothing in it can run in FP16: the honest answer is "nothing to convert".
    """
    node = helper.make_node(
        "OneHotEncoder",
        ["input"],
        ["variable"],
        name="OneHotEncoder",
        domain="ai.onnx.ml",
        cats_int64s=list(range(categories)),
        zeros=1,
    )
    graph = helper.make_graph(
        [node],
        "OneHotEncoder",
        [helper.make_tensor_value_info("input", TensorProto.INT64, [None, 1])],
        [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [None, 1, categories])],
    )
    return _model(graph, {"ai.onnx.ml": 1}, one_hot_ml_only.__doc__ or "")
