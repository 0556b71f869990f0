"""Models as old exporters wrote them, for the initializer-input handling (passes/prepare.py).

- `torch12_face_detector`: a small face detector shaped like those exported by torch 1.2's
  TorchScript exporter (opset 9, IR version 4): every weight, BatchNormalization statistics
  included, is listed among the graph inputs after the image, as exporters of that era did
  (``keep_initializers_as_inputs=True`` was their default); Conv -> BN -> Relu stages, MaxPool,
  and two heads (box regression, and class scores through Softmax), flattened and concatenated
  over the anchors.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from models._graph import FLOAT, GraphBuilder, first_doc_paragraph
from models.cnn import bn_stats


def _conv_bn_relu(b: GraphBuilder, x: str, i: int, c_in: int, c_out: int, stride: int) -> str:
    conv = b.op(
        "Conv",
        [x, b.weight(f"features.{i}.conv.weight", [c_out, c_in, 3, 3])],
        f"Conv_{3 * i}",
        kernel_shape=[3, 3],
        strides=[stride, stride],
        pads=[1, 1, 1, 1],
    )
    scale, bias, mean, var = bn_stats(b.rng, c_out)
    stats = [
        b.initializer(f"features.{i}.bn.{name}", array)
        for name, array in (
            ("weight", scale),
            ("bias", bias),
            ("running_mean", mean),
            ("running_var", var),
        )
    ]
    bn = b.op(
        "BatchNormalization",
        [conv, *stats],
        f"BatchNormalization_{3 * i + 1}",
        epsilon=1e-5,
        momentum=0.9,
    )
    return b.op("Relu", [bn], f"Relu_{3 * i + 2}")


def _head(b: GraphBuilder, x: str, name: str, c_in: int, per_anchor: int, anchors: int) -> str:
    """Conv head -> (N, H*W*anchors, per_anchor), as torch 1.2 exported permute + view."""
    conv = b.op(
        "Conv",
        [
            x,
            b.weight(f"{name}.weight", [anchors * per_anchor, c_in, 3, 3]),
            b.weight(f"{name}.bias", [anchors * per_anchor]),
        ],
        f"Conv_{name}",
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
    )
    t = b.op("Transpose", [conv], f"Transpose_{name}", perm=[0, 2, 3, 1])
    return b.op(
        "Reshape", [t, b.i64(f"shape_{per_anchor}", [0, -1, per_anchor])], f"Reshape_{name}"
    )


def torch12_face_detector(channels: int = 16, image: int = 32, seed: int = 90) -> onnx.ModelProto:
    """A face detector as torch 1.2 exported it: opset 9, IR 4, every weight a graph input too."""
    b = GraphBuilder("torch-jit-export", seed)
    x = b.input("input", FLOAT, [1, 3, image, image])
    y, c_in = x, 3
    for i, (c, s) in enumerate(((channels, 2), (channels, 1), (2 * channels, 2))):
        y = _conv_bn_relu(b, y, i, c_in, c, s)
        c_in = c
    y = b.op("MaxPool", [y], "MaxPool_9", kernel_shape=[2, 2], strides=[2, 2])
    anchors = 2
    loc = _head(b, y, "loc", c_in, 4, anchors)
    conf = _head(b, y, "conf", c_in, 2, anchors)
    b.op("Identity", [loc], "Identity_loc", outputs=["boxes"])
    b.op("Softmax", [conf], "Softmax_conf", axis=2, outputs=["scores"])
    cells = (image // 8) ** 2 * anchors
    b.output("boxes", FLOAT, [1, cells, 4])
    b.output("scores", FLOAT, [1, cells, 2])
    model = b.model(opset=9, ir_version=4, doc=first_doc_paragraph(torch12_face_detector))
    model.producer_name, model.producer_version = "pytorch", "1.2"
    for init in model.graph.initializer:  # after the image, in the order torch 1.2 wrote them
        model.graph.input.append(
            helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
        )
    return model


__all__ = ["torch12_face_detector"]
_ = np  # numpy is the builders' common import; kept for the seeded weights' helpers
