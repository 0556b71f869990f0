"""Vision models with squeeze-excite blocks and global pooling, as two PyTorch exporters write them.

The same network comes out differently from the two exporters, and the placement must not care:

* ``torch.onnx.export(..., dynamo=True)`` (opset 18): BatchNormalization left in the graph,
  ``x.mean((2, 3), keepdim=True)`` / ``adaptive_avg_pool2d(1)`` as ``ReduceMean`` with an axes
  input, SiLU as ``Sigmoid`` + ``Mul``, HardSwish / HardSigmoid as their ONNX ops, LayerNorm as
  ``LayerNormalization``, Linear as ``Gemm``;
* the TorchScript exporter (``dynamo=False``, opset 14 here): the same pooling as
  ``GlobalAveragePool``, LayerNorm decomposed (``ReduceMean - Sub - Pow - ReduceMean - Add - Sqrt -
  Div - Mul - Add``: there is no LayerNormalization below opset 17), Linear as ``Gemm``.

Block shapes follow EfficientNet (MBConv: expand, depthwise, SE with SiLU, project, residual),
MobileNetV3 (HardSwish, SE with ReLU + HardSigmoid), RegNetY (group conv, SE with ReLU + Sigmoid)
and MobileViT (a conv stem, then tokens through LayerNorm, attention and an MLP, folded back).
Weights are seeded; BN statistics are non-trivial (``models.cnn.bn_stats``). Also here: a
Paddle-style OCR recogniser (``paddle2onnx``, opset 14) and a TorchScript encoder below opset 17,
both with hand-written LayerNorms.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx

from models._graph import FLOAT, GraphBuilder, first_doc_paragraph
from models.cnn import bn_stats

__all__ = [
    "ALL_VISION",
    "PAIRS",
    "mean_pool_cnn",
    "ocr_recogniser",
    "se_cnn",
    "torch_encoder_opset14",
]

ARCHS = ("efficientnet", "mobilenetv3", "regnet", "mobilevit")


class _Net:
    """One network being written in one exporter's style."""

    def __init__(self, b: GraphBuilder, style: str) -> None:
        self.b, self.style, self.n = b, style, 0

    def name(self, kind: str) -> str:
        self.n += 1
        return f"/{kind}_{self.n}"

    def conv(self, x: str, c_in: int, c_out: int, k: int, stride: int = 1, group: int = 1) -> str:
        b, n = self.b, self.name("conv")
        fan = c_in // group * k * k
        w = b.initializer(
            f"{n}.weight",
            (b.rng.standard_normal((c_out, c_in // group, k, k)) * math.sqrt(2.0 / fan)).astype(
                np.float32
            ),
        )
        ins = [x, w] + ([b.weight(f"{n}.bias", [c_out])] if self.style == "torchscript" else [])
        return b.op(
            "Conv",
            ins,
            f"{n}/Conv",
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[k // 2] * 4,
            group=group,
        )

    def bn(self, x: str, c: int) -> str:
        """BatchNormalization (dynamo); TorchScript folds it into the Conv in eval mode."""
        if self.style == "torchscript":
            return x
        b, n = self.b, self.name("bn")
        scale, bias, mean, var = bn_stats(b.rng, c)
        ins = [
            b.initializer(f"{n}.{k}", a)
            for k, a in zip(("w", "b", "rm", "rv"), (scale, bias, mean, var), strict=True)
        ]
        return b.op("BatchNormalization", [x, *ins], f"{n}/BatchNormalization", epsilon=1e-5)

    def act(self, x: str, kind: str) -> str:
        b, n = self.b, self.name(kind)
        if kind == "silu":
            s = b.op("Sigmoid", [x], f"{n}/Sigmoid")
            return b.op("Mul", [x, s], f"{n}/Mul")
        if kind == "relu":
            return b.op("Relu", [x], f"{n}/Relu")
        if kind == "hardswish":
            return b.op("HardSwish", [x], f"{n}/HardSwish")
        if kind == "hardsigmoid":
            return b.op("HardSigmoid", [x], f"{n}/HardSigmoid", alpha=1.0 / 6, beta=0.5)
        return b.op("Sigmoid", [x], f"{n}/Sigmoid")

    def pool(self, x: str) -> str:
        """Global average pooling, keepdims: ReduceMean (dynamo) or GlobalAveragePool."""
        n = self.name("pool")
        if self.style == "torchscript":
            return self.b.op("GlobalAveragePool", [x], f"{n}/GlobalAveragePool")
        axes = self.b.i64("val_axes_hw", [-1, -2])
        return self.b.op("ReduceMean", [x, axes], f"{n}/ReduceMean", keepdims=1)

    def conv_bn_act(self, x: str, c_in: int, c_out: int, k: int, act: str | None, **kw: int) -> str:
        y = self.bn(self.conv(x, c_in, c_out, k, **kw), c_out)
        return self.act(y, act) if act else y

    def se(self, x: str, c: int, squeeze: int, act: str, gate: str) -> str:
        s = self.pool(x)
        s = self.act(self.conv(s, c, squeeze, 1), act)
        s = self.act(self.conv(s, squeeze, c, 1), gate)
        return self.b.op("Mul", [x, s], self.name("se") + "/Mul")

    def head(self, x: str, c: int, classes: int) -> str:
        b = self.b
        p = self.pool(x)
        f = b.op("Flatten", [p], self.name("flatten") + "/Flatten", axis=1)
        w = b.weight("/classifier.weight", [classes, c], std=1.0 / math.sqrt(c))
        return b.op(
            "Gemm", [f, w, b.weight("/classifier.bias", [classes])], "/classifier/Gemm", transB=1
        )


def _mbconv(net: _Net, x: str, c: int, expand: int, act: str, gate: str, sact: str) -> str:
    h = net.conv_bn_act(x, c, c * expand, 1, act)
    h = net.conv_bn_act(h, c * expand, c * expand, 3, act, group=c * expand)
    h = net.se(h, c * expand, max(4, c // 4), sact, gate)
    h = net.conv_bn_act(h, c * expand, c, 1, None)
    return net.b.op("Add", [x, h], net.name("residual") + "/Add")


def _regnet_block(net: _Net, x: str, c: int) -> str:
    h = net.conv_bn_act(x, c, c, 1, "relu")
    h = net.conv_bn_act(h, c, c, 3, "relu", group=c // 8)
    h = net.se(h, c, c // 4, "relu", "sigmoid")
    h = net.conv_bn_act(h, c, c, 1, None)
    return net.act(net.b.op("Add", [x, h], net.name("residual") + "/Add"), "relu")


def layer_norm(net: _Net, x: str, hidden: int, *, affine: bool = True, eps: float = 1e-5) -> str:
    """LayerNorm over the last axis: the op at opset >= 17 (dynamo), else its decomposition."""
    b, n = net.b, net.name("norm")
    gamma = b.initializer(
        f"{n}.weight", (1 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32)
    )
    beta = b.weight(f"{n}.bias", [hidden])
    if net.style == "dynamo":
        return b.op(
            "LayerNormalization", [x, gamma, beta], f"{n}/LayerNormalization", axis=-1, epsilon=eps
        )
    return hand_layer_norm(b, x, n, gamma if affine else None, beta if affine else None, eps)


def hand_layer_norm(
    b: GraphBuilder,
    x: str,
    n: str,
    gamma: str | None,
    beta: str | None,
    eps: float,
    *,
    square: str = "Pow",
    axes_input: bool = False,
) -> str:
    """ReduceMean - Sub - Pow|Mul - ReduceMean - Add - Sqrt - Div (- Mul - Add), TorchScript's and
    paddle2onnx's decomposition (axes as an attribute below opset 18, as an input from 18)."""
    red = {"keepdims": 1}
    ins: list[str] = []
    if axes_input:
        ins = [b.i64("const/axes_last", [-1])]
    else:
        red["axes"] = [-1]  # type: ignore[assignment]
    mean = b.op("ReduceMean", [x, *ins], f"{n}/ReduceMean", **red)
    d = b.op("Sub", [x, mean], f"{n}/Sub")
    if square == "Pow":
        sq = b.op("Pow", [d, b.f32("const/two", 2.0)], f"{n}/Pow")
    else:
        sq = b.op("Mul", [d, d], f"{n}/Mul_sq")
    var = b.op("ReduceMean", [sq, *ins], f"{n}/ReduceMean_1", **red)
    ve = b.op("Add", [var, b.f32(f"const/eps{eps:g}", eps)], f"{n}/Add")
    std = b.op("Sqrt", [ve], f"{n}/Sqrt")
    y = b.op("Div", [d, std], f"{n}/Div")
    if gamma is not None:
        y = b.op("Mul", [y, gamma], f"{n}/Mul")
    if beta is not None:
        y = b.op("Add", [y, beta], f"{n}/Add_1")
    return y


def _vit_block(net: _Net, x: str, c: int, image: int) -> str:
    """MobileViT: (B, C, H, W) -> tokens (B, HW, C) -> LN, attention, LN, MLP -> back."""
    b, hw = net.b, image * image
    t = b.op("Reshape", [x, b.i64("const/tok_shape", [1, c, hw])], net.name("unfold") + "/Reshape")
    t = b.op("Transpose", [t], net.name("unfold") + "/Transpose", perm=[0, 2, 1])
    h = layer_norm(net, t, c)
    q = b.op("MatMul", [h, b.weight(net.name("q") + ".weight", [c, c])], net.name("q") + "/MatMul")
    k = b.op("MatMul", [h, b.weight(net.name("k") + ".weight", [c, c])], net.name("k") + "/MatMul")
    v = b.op("MatMul", [h, b.weight(net.name("v") + ".weight", [c, c])], net.name("v") + "/MatMul")
    kt = b.op("Transpose", [k], net.name("kt") + "/Transpose", perm=[0, 2, 1])
    s = b.op("MatMul", [q, kt], net.name("scores") + "/MatMul")
    s = b.op("Mul", [s, b.f32("const/scale", 1 / math.sqrt(c))], net.name("scale") + "/Mul")
    p = b.op("Softmax", [s], net.name("attn") + "/Softmax", axis=-1)
    a = b.op("MatMul", [p, v], net.name("ctx") + "/MatMul")
    t = b.op("Add", [t, a], net.name("res") + "/Add")
    h = layer_norm(net, t, c)
    h = b.op(
        "MatMul",
        [h, b.weight(net.name("fc1") + ".weight", [c, 2 * c])],
        net.name("fc1") + "/MatMul",
    )
    h = net.act(h, "silu")
    h = b.op(
        "MatMul",
        [h, b.weight(net.name("fc2") + ".weight", [2 * c, c])],
        net.name("fc2") + "/MatMul",
    )
    t = b.op("Add", [t, h], net.name("res") + "/Add")
    t = b.op("Transpose", [t], net.name("fold") + "/Transpose", perm=[0, 2, 1])
    return b.op(
        "Reshape",
        [t, b.i64("const/img_shape", [1, c, image, image])],
        net.name("fold") + "/Reshape",
    )


def se_cnn(
    arch: str = "efficientnet",
    style: str = "dynamo",
    *,
    channels: int = 32,
    image: int = 32,
    blocks: int = 2,
    classes: int = 10,
    seed: int = 60,
) -> onnx.ModelProto:
    """A small SE/global-pooling CNN of ``arch`` in ``style`` ("dynamo" or "torchscript")."""
    if arch not in ARCHS or style not in ("dynamo", "torchscript"):
        raise ValueError(f"unknown arch/style {arch!r}/{style!r}")
    b = GraphBuilder(f"{arch}_{style}", seed=seed)
    net = _Net(b, style)
    x = b.input("input", FLOAT, [1, 3, image, image])
    act = {"efficientnet": "silu", "mobilenetv3": "hardswish"}.get(arch, "relu")
    h = net.conv_bn_act(x, 3, channels, 3, act, stride=2)
    side = image // 2
    for _ in range(blocks):
        if arch == "efficientnet":
            h = _mbconv(net, h, channels, 4, "silu", "sigmoid", "silu")
        elif arch == "mobilenetv3":
            h = _mbconv(net, h, channels, 3, "hardswish", "hardsigmoid", "relu")
        elif arch == "regnet":
            h = _regnet_block(net, h, channels)
        else:
            h = _mbconv(net, h, channels, 2, "silu", "sigmoid", "silu")
            h = _vit_block(net, h, channels, side)
    h = net.conv_bn_act(h, channels, 2 * channels, 1, act)
    y = net.head(h, 2 * channels, classes)
    b.output(y, FLOAT, [1, classes])
    opset = 18 if style == "dynamo" else 14
    return b.model(opset=opset, doc=f"{arch}-like CNN, torch.onnx {style} export shape")


def mean_pool_cnn(
    style: str = "dynamo", *, channels: int = 16, image: int = 32, classes: int = 10, seed: int = 61
) -> onnx.ModelProto:
    """A CNN whose head pools with PyTorch's ``x.mean((2, 3))`` (no keepdim): ``ReduceMean`` with
    ``keepdims=0`` over the spatial axes, an axes input under dynamo (opset 18), an attribute
    under TorchScript (opset 14), then a Linear (Gemm) on the (N, C) result."""
    if style not in ("dynamo", "torchscript"):
        raise ValueError(f"unknown style {style!r}")
    b = GraphBuilder(f"mean_pool_{style}", seed=seed)
    net = _Net(b, style)
    h = b.input("input", FLOAT, ["batch", 3, image, image])
    h = net.conv_bn_act(h, 3, channels, 3, "relu", stride=2)
    h = net.conv_bn_act(h, channels, 2 * channels, 3, "relu", stride=2)
    n = net.name("mean")
    if style == "dynamo":
        axes = b.i64("val_axes_23", [2, 3])
        pooled = b.op("ReduceMean", [h, axes], f"{n}/node_mean", keepdims=0)
    else:
        pooled = b.op("ReduceMean", [h], f"{n}/ReduceMean", axes=[2, 3], keepdims=0)
    w = b.weight("/fc.weight", [classes, 2 * channels], std=1.0 / math.sqrt(2 * channels))
    y = b.op("Gemm", [pooled, w, b.weight("/fc.bias", [classes])], "/fc/Gemm", transB=1)
    b.output(y, FLOAT, ["batch", classes])
    return b.model(opset=18 if style == "dynamo" else 14, doc=first_doc_paragraph(mean_pool_cnn))


def ocr_recogniser(
    *,
    channels: int = 32,
    height: int = 8,
    width: int = 32,
    classes: int = 40,
    layers: int = 2,
    seed: int = 61,
    opset: int = 14,
    square: str = "Pow",
) -> onnx.ModelProto:
    """Paddle-style (SVTR/PP-OCR) recogniser: conv-BN-HardSwish backbone, tokens along the width,
    blocks of hand-written LayerNorm + attention + MLP, a final hand-written LayerNorm, a CTC head
    with Softmax. paddle2onnx writes layer_norm decomposed below opset 17."""
    b = GraphBuilder("ocr_rec", seed=seed)
    net = _Net(b, "dynamo")  # BN in the graph, like paddle2onnx
    x = b.input("x", FLOAT, ["batch", 3, height, width])
    h = net.conv_bn_act(x, 3, channels, 3, "hardswish", stride=1)
    h = net.conv_bn_act(h, channels, channels, 3, "hardswish", stride=1)
    p = b.op("AveragePool", [h], "p2o.AveragePool.0", kernel_shape=[height, 1], strides=[height, 1])
    t = b.op("Squeeze", [p, b.i64("const/axis2", [2])], "p2o.Squeeze.0")
    t = b.op("Transpose", [t], "p2o.Transpose.0", perm=[0, 2, 1])  # (B, W, C)
    c = channels
    for i in range(layers):
        gamma = b.initializer(
            f"norm{i}.w_0", (1 + 0.1 * b.rng.standard_normal(c)).astype(np.float32)
        )
        n = hand_layer_norm(
            b, t, f"p2o.norm{i}", gamma, b.weight(f"norm{i}.b_0", [c]), 1e-6, square=square
        )
        q = b.op("MatMul", [n, b.weight(f"attn{i}.q.w", [c, c])], f"p2o.MatMul.q{i}")
        k = b.op("MatMul", [n, b.weight(f"attn{i}.k.w", [c, c])], f"p2o.MatMul.k{i}")
        v = b.op("MatMul", [n, b.weight(f"attn{i}.v.w", [c, c])], f"p2o.MatMul.v{i}")
        kt = b.op("Transpose", [k], f"p2o.Transpose.k{i}", perm=[0, 2, 1])
        s = b.op("MatMul", [q, kt], f"p2o.MatMul.s{i}")
        s = b.op("Mul", [s, b.f32("const/attn_scale", 1 / math.sqrt(c))], f"p2o.Mul.s{i}")
        a = b.op(
            "MatMul", [b.op("Softmax", [s], f"p2o.Softmax.{i}", axis=-1), v], f"p2o.MatMul.a{i}"
        )
        t = b.op("Add", [t, a], f"p2o.Add.res{i}")
        gamma2 = b.initializer(
            f"norm{i}b.w_0", (1 + 0.1 * b.rng.standard_normal(c)).astype(np.float32)
        )
        n = hand_layer_norm(
            b, t, f"p2o.norm{i}b", gamma2, b.weight(f"norm{i}b.b_0", [c]), 1e-6, square=square
        )
        m = b.op("MatMul", [n, b.weight(f"mlp{i}.fc1.w", [c, 2 * c])], f"p2o.MatMul.fc1{i}")
        m = net.act(m, "hardswish")
        m = b.op("MatMul", [m, b.weight(f"mlp{i}.fc2.w", [2 * c, c])], f"p2o.MatMul.fc2{i}")
        t = b.op("Add", [t, m], f"p2o.Add.mlp{i}")
    gamma = b.initializer("norm_f.w_0", (1 + 0.1 * b.rng.standard_normal(c)).astype(np.float32))
    t = hand_layer_norm(b, t, "p2o.norm_f", gamma, b.weight("norm_f.b_0", [c]), 1e-6, square=square)
    logits = b.op("MatMul", [t, b.weight("ctc.fc.w", [c, classes])], "p2o.MatMul.ctc")
    y = b.op("Softmax", [logits], "p2o.Softmax.ctc", axis=-1)
    b.output(y, FLOAT, ["batch", width, classes])
    return b.model(opset=opset, doc="Paddle-style OCR recogniser with hand-written LayerNorm")


def torch_encoder_opset14(
    *, hidden: int = 32, seq: int = 16, layers: int = 2, seed: int = 62
) -> onnx.ModelProto:
    """A TorchScript-exported transformer encoder at opset 14: every LayerNorm decomposed."""
    b = GraphBuilder("torch_enc14", seed=seed)
    net = _Net(b, "torchscript")
    x = b.input("hidden_states", FLOAT, ["batch", seq, hidden])
    t = x
    for i in range(layers):
        h = layer_norm(net, t, hidden)
        h = b.op(
            "MatMul", [h, b.weight(f"l{i}.fc1.weight", [hidden, 4 * hidden])], f"/l{i}/fc1/MatMul"
        )
        h = net.act(h, "silu")
        h = b.op(
            "MatMul", [h, b.weight(f"l{i}.fc2.weight", [4 * hidden, hidden])], f"/l{i}/fc2/MatMul"
        )
        t = b.op("Add", [t, h], f"/l{i}/Add")
    t = layer_norm(net, t, hidden)
    b.output(t, FLOAT, ["batch", seq, hidden])
    return b.model(opset=14, doc="TorchScript encoder below opset 17, decomposed LayerNorm")


#: (dynamo, torchscript) builders of the same network, for the same-placement check
PAIRS: dict[str, tuple[Callable[[], onnx.ModelProto], Callable[[], onnx.ModelProto]]] = {
    arch: (lambda a=arch: se_cnn(a, "dynamo"), lambda a=arch: se_cnn(a, "torchscript"))
    for arch in ARCHS
}

ALL_VISION: dict[str, Callable[[], onnx.ModelProto]] = {
    **{f"{arch}_dynamo": pair[0] for arch, pair in PAIRS.items()},
    **{f"{arch}_torchscript": pair[1] for arch, pair in PAIRS.items()},
    "ocr_recogniser": ocr_recogniser,
    "torch_encoder_opset14": torch_encoder_opset14,
}
