"""Models whose weights sit in Constant nodes, as TorchScript and some converters write them.

Figures that count only initializers report "0.00 MB of weights" for these models; every
command and page must count the Constant-held tensors as weights.
"""

from __future__ import annotations

import onnx
from onnx import helper

from models._graph import first_doc_paragraph

__all__ = ["cnn_constant_weights", "weights_in_constants"]

#: initializers up to this many elements stay initializers (shape vectors, axes)
_SMALL = 16


def weights_in_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose float initializers (more than 16 elements) are Constant nodes
    placed first in the main graph, each named ``<weight>/Constant``."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    moved = [
        t
        for t in g.initializer
        if t.data_type == onnx.TensorProto.FLOAT and len(t.raw_data or t.float_data) > _SMALL
    ]
    keep = [t for t in g.initializer if t not in moved]
    del g.initializer[:]
    g.initializer.extend(keep)
    nodes = [
        helper.make_node("Constant", [], [t.name], f"{t.name}/Constant", value=t) for t in moved
    ]
    for n in reversed(nodes):
        g.node.insert(0, n)
    return out


def cnn_constant_weights(channels: int = 16, image: int = 16) -> onnx.ModelProto:
    """``models.cnn.resnet_bn_block`` with every weight in a Constant node."""
    from models.cnn import resnet_bn_block

    model = weights_in_constants(resnet_bn_block(channels=channels, image=image))
    model.doc_string = first_doc_paragraph(cnn_constant_weights)
    return model
