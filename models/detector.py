"""A small DBNet-style text detector: the shape of model where emulate once looked 4x pessimistic.

Backbone of Conv → BatchNormalization → Relu stages with residual Adds (strides 2 to 32), an FPN
that upsamples with Resize (nearest, and bilinear on the deepest level) and joins by Add and
Concat, and DBNet's probability head: Conv → BN → Relu → ConvTranspose → BN → Relu →
ConvTranspose → Sigmoid. BatchNormalization is left unfused, as Paddle, TF and PyTorch-PRESERVE
exports leave it.
"""

from __future__ import annotations

import numpy as np
import onnx

from models._graph import FLOAT, GraphBuilder, first_doc_paragraph

__all__ = ["dbnet_detector"]


def _bn(b: GraphBuilder, x: str, scope: str, c: int) -> str:
    rng = b.rng
    params = [
        rng.uniform(0.5, 1.5, c),  # gamma
        0.1 * rng.standard_normal(c),  # beta
        0.2 * rng.standard_normal(c),  # running mean
        rng.uniform(0.3, 3.0, c),  # running var
    ]
    names = ("weight", "bias", "running_mean", "running_var")
    inputs = [
        b.initializer(f"{scope}/bn/{n}", p.astype(np.float32))
        for n, p in zip(names, params, strict=True)
    ]
    return b.op("BatchNormalization", [x, *inputs], f"{scope}/bn/BatchNormalization", epsilon=1e-5)


def _conv(
    b: GraphBuilder, x: str, scope: str, c_in: int, c_out: int, k: int, stride: int = 1
) -> str:
    pad = k // 2
    w = b.weight(f"{scope}/conv/weight", [c_out, c_in, k, k])
    return b.op(
        "Conv",
        [x, w],
        f"{scope}/conv/Conv",
        kernel_shape=[k, k],
        strides=[stride, stride],
        pads=[pad] * 4,
    )


def _conv_bn_relu(b, x, scope, c_in, c_out, k, stride=1, relu=True) -> str:
    y = _bn(b, _conv(b, x, scope, c_in, c_out, k, stride), scope, c_out)
    return b.op("Relu", [y], f"{scope}/Relu") if relu else y


def _stage(b: GraphBuilder, x: str, scope: str, c_in: int, c_out: int) -> str:
    """A strided residual block with a 1x1 projection shortcut."""
    y = _conv_bn_relu(b, x, f"{scope}/0", c_in, c_out, 3, 2)
    y = _conv_bn_relu(b, y, f"{scope}/1", c_out, c_out, 3, relu=False)
    short = _conv_bn_relu(b, x, f"{scope}/down", c_in, c_out, 1, 2, relu=False)
    return b.op("Relu", [b.op("Add", [y, short], f"{scope}/Add")], f"{scope}/out/Relu")


def _upsample(b: GraphBuilder, x: str, name: str, factor: int, mode: str) -> str:
    scales = b.f32(f"scales_x{factor}", [1.0, 1.0, float(factor), float(factor)])
    return b.op("Resize", [x, "", scales], name, mode=mode)


def dbnet_detector(image: int = 64, channels: int = 8, seed: int = 11) -> onnx.ModelProto:
    """DBNet-style detector: residual backbone, FPN with Resize/Add/Concat, ConvTranspose head.

    Output: the text probability map, Sigmoid, at the input's resolution.
    """
    b = GraphBuilder("dbnet_detector", seed)
    x = b.input("image", FLOAT, ["batch", 3, image, image])
    c = channels
    x = _conv_bn_relu(b, x, "stem", 3, c, 3, 2)  # 1/2
    feats = []
    for i, mult in enumerate((1, 2, 4, 8)):  # 1/4 .. 1/32
        x = _stage(b, x, f"stage{i}", c * max(1, mult // 2), c * mult)
        feats.append((x, c * mult))
    inner = 4 * c
    lateral = [_conv(b, f, f"fpn/in{i}", ch, inner, 1) for i, (f, ch) in enumerate(feats)]
    p = lateral[3]
    tops = [p]
    for i in (2, 1, 0):
        up = _upsample(b, p, f"fpn/up{i}/Resize", 2, "nearest")
        p = b.op("Add", [lateral[i], up], f"fpn/merge{i}/Add")
        tops.insert(0, p)
    outs = []
    for i, t in enumerate(tops):
        o = _conv(b, t, f"fpn/out{i}", inner, inner // 4, 3)
        if i:
            o = _upsample(b, o, f"fpn/out{i}/Resize", 2**i, "linear" if i == 3 else "nearest")
        outs.append(o)
    fuse = b.op("Concat", outs[::-1], "fpn/Concat", axis=1)
    h = _conv_bn_relu(b, fuse, "head/0", inner, inner // 4, 3)
    for i, c_out in enumerate((inner // 4, 1)):
        w = b.weight(f"head/up{i}/weight", [inner // 4, c_out, 2, 2])
        bias = b.weight(f"head/up{i}/bias", [c_out])
        h = b.op(
            "ConvTranspose",
            [h, w, bias],
            f"head/up{i}/ConvTranspose",
            kernel_shape=[2, 2],
            strides=[2, 2],
        )
        if i == 0:
            h = b.op("Relu", [_bn(b, h, f"head/up{i}", c_out)], f"head/up{i}/Relu")
    prob = b.op("Sigmoid", [h], "head/Sigmoid", outputs=["maps"])
    b.output(prob, FLOAT, ["batch", 1, image, image])
    return b.model(doc=first_doc_paragraph(dbnet_detector))
