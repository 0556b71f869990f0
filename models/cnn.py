"""FP32 CNN test models with un-fused BatchNormalization, for the BN folding pass and the converter.

Exported CNNs (Paddle2ONNX, older PyTorch/TF exporters, anything exported in training layout) keep
``Conv → BatchNormalization`` un-fused and often decompose activations such as HardSwish into
``Add/Clip/Mul/Div``. BatchNormalization is on the deny list, so without folding its FP32 spreads
through those activations. Each builder is deterministic (fixed seed) and small; the docstring
says which folding case it pins down.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx

from models._graph import FLOAT, GraphBuilder, first_doc_paragraph

__all__ = [
    "ALL_CNN",
    "bn_after_add",
    "bn_fp16_overflow",
    "bn_in_if_branch",
    "bn_shared_weight",
    "bn_training_mode",
    "linear_bn",
    "mobilenet_cnn",
    "resnet_bn_block",
]


class _Names:
    """Paddle2ONNX-style names (``p2o.Conv.0``, ``conv2d_0.w_0``, ``batch_norm_0.w_0``)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def next(self, kind: str) -> int:
        n = self.counts.get(kind, 0)
        self.counts[kind] = n + 1
        return n


def bn_stats(
    rng: np.random.Generator, channels: int, dead: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Realistic (scale, bias, mean, var): var log-uniform in [0.1, 10]; ``dead`` gets var 1e-8.

    A dead channel (var ~1e-8, far below epsilon) is what trained CNNs carry after pruning or a
    ReLU that never fires; it makes ``rsqrt(var + eps)`` depend on eps (~316x for eps 1e-5).
    """
    scale = rng.uniform(0.5, 1.5, channels)
    bias = 0.1 * rng.standard_normal(channels)
    var = np.exp(rng.uniform(math.log(0.1), math.log(10.0), channels))
    mean = 0.3 * rng.standard_normal(channels) * np.sqrt(var)
    if dead is not None:
        var[dead] = 1e-8
        mean[dead] = 0.0
    return tuple(a.astype(np.float32) for a in (scale, bias, mean, var))  # type: ignore[return-value]


def _bn(
    b: GraphBuilder,
    x: str,
    names: _Names,
    channels: int,
    *,
    dead: int | None = None,
    epsilon: float = 1e-5,
) -> str:
    i = names.next("batch_norm")
    scale, bias, mean, var = bn_stats(b.rng, channels, dead)
    p = f"batch_norm_{i}"
    ins = [
        b.initializer(f"{p}.w_0", scale),
        b.initializer(f"{p}.b_0", bias),
        b.initializer(f"{p}.w_1", mean),
        b.initializer(f"{p}.w_2", var),
    ]
    return b.op(
        "BatchNormalization",
        [x, *ins],
        f"p2o.BatchNormalization.{i}",
        epsilon=epsilon,
        momentum=0.9,
    )


def _conv(
    b: GraphBuilder,
    x: str,
    names: _Names,
    c_in: int,
    c_out: int,
    k: int,
    stride: int = 1,
    group: int = 1,
    dead: int | None = None,
    bias: bool = False,
) -> str:
    """Conv without bias (Paddle's layout before BN); ``dead`` output channel gets ~0 weights."""
    i = names.next("conv2d")
    w = b.rng.standard_normal((c_out, c_in // group, k, k)) * math.sqrt(
        2.0 / (c_in // group * k * k)
    )
    if dead is not None:
        w[dead] *= 1e-4
    inputs = [x, b.initializer(f"conv2d_{i}.w_0", w.astype(np.float32))]
    if bias:
        inputs.append(b.weight(f"conv2d_{i}.b_0", [c_out], std=0.01))
    pad = k // 2
    return b.op(
        "Conv",
        inputs,
        f"p2o.Conv.{i}",
        kernel_shape=[k, k],
        strides=[stride, stride],
        pads=[pad] * 4,
        group=group,
        dilations=[1, 1],
    )


def _hardswish(b: GraphBuilder, x: str, names: _Names) -> str:
    """HardSwish as Paddle2ONNX decomposes it: x * Clip(x + 3, 0, 6) / 6."""
    a = b.op("Add", [x, b.f32("hardswish.three", 3.0)], f"p2o.Add.{names.next('Add')}")
    c = b.op(
        "Clip",
        [a, b.f32("hardswish.zero", 0.0), b.f32("hardswish.six", 6.0)],
        f"p2o.Clip.{names.next('Clip')}",
    )
    m = b.op("Mul", [x, c], f"p2o.Mul.{names.next('Mul')}")
    return b.op("Div", [m, b.f32("hardswish.six_div", 6.0)], f"p2o.Div.{names.next('Div')}")


def _conv_bn_act(
    b: GraphBuilder,
    x: str,
    names: _Names,
    c_in: int,
    c_out: int,
    k: int,
    stride: int = 1,
    group: int = 1,
    act: bool = True,
    dead: int | None = None,
) -> str:
    y = _conv(b, x, names, c_in, c_out, k, stride, group, dead)
    y = _bn(b, y, names, c_out, dead=dead)
    return _hardswish(b, y, names) if act else y


def mobilenet_cnn(
    opset: int = 17,
    width: int = 16,
    image: int = 32,
    classes: int = 10,
    seed: int = 40,
) -> onnx.ModelProto:
    """Paddle MobileNet/PicoDet-style CNN: Conv → BatchNormalization → HardSwish(Add/Clip/Mul/Div).

    Convs have no bias (the BN carries it), blocks are depthwise (group = channels) + pointwise,
    one channel of the stem has var 1e-8 (a dead channel, rsqrt dominated by eps), and the head is
    GlobalAveragePool → Flatten → Gemm. Clip takes min/max as inputs (opset >= 11).
    """
    if opset < 11:
        raise ValueError("Clip takes min/max inputs from opset 11")
    b = GraphBuilder(f"mobilenet_cnn_opset{opset}", seed)
    names = _Names()
    x = b.input("image", FLOAT, ["batch", 3, image, image])
    c = width
    x = _conv_bn_act(b, x, names, 3, c, 3, stride=2, dead=c // 2)
    for c_out, stride in ((2 * width, 1), (4 * width, 2), (4 * width, 1)):
        x = _conv_bn_act(b, x, names, c, c, 3, stride=stride, group=c)  # depthwise
        x = _conv_bn_act(b, x, names, c, c_out, 1)  # pointwise
        c = c_out
    x = b.op("GlobalAveragePool", [x], "p2o.GlobalAveragePool.0")
    x = b.op("Flatten", [x], "p2o.Flatten.0", axis=1)
    w = b.weight("linear_0.w_0", [classes, c], std=1.0 / math.sqrt(c))
    logits = b.op(
        "Gemm",
        [x, w, b.weight("linear_0.b_0", [classes])],
        "p2o.Gemm.0",
        transB=1,
        outputs=["logits"],
    )
    b.output(logits, FLOAT, ["batch", classes])
    return b.model(opset=opset, doc=first_doc_paragraph(mobilenet_cnn))


def _res_conv_bn(
    b: GraphBuilder, x: str, scope: str, c_in: int, c_out: int, k: int, *, const_stats: bool
) -> str:
    w = b.weight(f"{scope}/conv/weight", [c_out, c_in, k, k])
    y = b.op(
        "Conv",
        [x, w],
        f"{scope}/conv/Conv",
        kernel_shape=[k, k],
        pads=[k // 2] * 4,
    )
    scale, bias, mean, var = bn_stats(b.rng, c_out)
    stats = []
    for name, arr in (
        ("weight", scale),
        ("bias", bias),
        ("running_mean", mean),
        ("running_var", var),
    ):
        if const_stats:  # exporters that emit Constant nodes instead of initializers
            t = onnx.numpy_helper.from_array(arr, f"{scope}/bn/{name}_value")
            stats.append(b.op("Constant", [], f"{scope}/bn/{name}/Constant", value=t))
        else:
            stats.append(b.initializer(f"{scope}/bn/{name}", arr))
    return b.op(
        "BatchNormalization",
        [y, *stats],
        f"{scope}/bn/BatchNormalization",
        epsilon=1e-5,
    )


def resnet_bn_block(channels: int = 8, image: int = 16, seed: int = 41) -> onnx.ModelProto:
    """ResNet basic block at opset 15: Conv → BN → Relu → Conv → BN, identity residual Add, Relu.

    Opset 15 gives BatchNormalization's statistics their own type variable (T2); the second BN
    reads its statistics from Constant nodes rather than initializers, as some exporters write.
    """
    b = GraphBuilder("resnet_bn_block", seed)
    x = b.input("x", FLOAT, ["batch", channels, image, image])
    y = _res_conv_bn(b, x, "layer1/0/conv1", channels, channels, 3, const_stats=False)
    y = b.op("Relu", [y], "layer1/0/relu1/Relu")
    y = _res_conv_bn(b, y, "layer1/0/conv2", channels, channels, 3, const_stats=True)
    y = b.op("Add", [y, x], "layer1/0/residual/Add")
    y = b.op("Relu", [y], "layer1/0/relu2/Relu", outputs=["y"])
    b.output(y, FLOAT, ["batch", channels, image, image])
    return b.model(opset=15, doc=first_doc_paragraph(resnet_bn_block))


def _bn_params(b: GraphBuilder, scope: str, channels: int) -> list[str]:
    scale, bias, mean, var = bn_stats(b.rng, channels)
    return [
        b.initializer(f"{scope}/scale", scale),
        b.initializer(f"{scope}/bias", bias),
        b.initializer(f"{scope}/mean", mean),
        b.initializer(f"{scope}/var", var),
    ]


def linear_bn(
    features: int = 16, hidden: int = 32, out: int = 24, seed: int = 42
) -> onnx.ModelProto:
    """BatchNorm1d after rank-2 linear layers: Gemm(transB=1, C) → BN, Gemm(transB=0, alpha,
    beta, no C) → BN, MatMul → BN as the graph output.

    The BN channel axis (1) is the last axis of a rank-2 activation, so each folds into the output
    columns of the weight; the last BN's output is the graph output ``y`` and must keep its name.
    """
    b = GraphBuilder("linear_bn", seed)
    x = b.input("x", FLOAT, ["batch", features])
    h = b.op(
        "Gemm",
        [
            x,
            b.weight("fc1/weight", [hidden, features], std=1 / math.sqrt(features)),
            b.weight("fc1/bias", [hidden], std=0.1),
        ],
        "fc1/Gemm",
        transB=1,
    )
    h = b.op("BatchNormalization", [h, *_bn_params(b, "bn1", hidden)], "bn1/BatchNormalization")
    h = b.op("Relu", [h], "fc1/Relu")
    h = b.op(
        "Gemm",
        [h, b.weight("fc2/weight", [hidden, hidden])],
        "fc2/Gemm",
        alpha=0.5,
        beta=2.0,
    )
    h = b.op("BatchNormalization", [h, *_bn_params(b, "bn2", hidden)], "bn2/BatchNormalization")
    h = b.op("Relu", [h], "fc2/Relu")
    h = b.op("MatMul", [h, b.weight("fc3/weight", [hidden, out])], "fc3/MatMul")
    y = b.op(
        "BatchNormalization",
        [h, *_bn_params(b, "bn3", out)],
        "bn3/BatchNormalization",
        outputs=["y"],
        epsilon=1e-3,
    )
    b.output(y, FLOAT, ["batch", out])
    return b.model(doc=first_doc_paragraph(linear_bn))


def bn_after_add(
    channels: int = 8, image: int = 12, length: int = 10, seed: int = 43
) -> onnx.ModelProto:
    """BNs with nothing to fold into: after a residual Add (rank 4), and on a graph input (rank 3).

    Each becomes Mul + Add with per-channel constants shaped [C, 1, 1] / [C, 1] for broadcasting
    over axis 1.
    """
    b = GraphBuilder("bn_after_add", seed)
    x = b.input("x", FLOAT, ["batch", channels, image, image])
    seq = b.input("seq", FLOAT, ["batch", channels, length])
    w = b.weight("conv/weight", [channels, channels, 3, 3])
    c = b.op("Conv", [x, w, b.weight("conv/bias", [channels])], "conv/Conv", pads=[1] * 4)
    a = b.op("Add", [c, x], "residual/Add")
    y = b.op(
        "BatchNormalization", [a, *_bn_params(b, "post_bn", channels)], "post_bn/BatchNormalization"
    )
    y = b.op("Relu", [y], "post/Relu", outputs=["y"])
    b.output(y, FLOAT, ["batch", channels, image, image])
    s = b.op(
        "BatchNormalization",
        [seq, *_bn_params(b, "seq_bn", channels)],
        "seq_bn/BatchNormalization",
        outputs=["seq_y"],
    )
    b.output(s, FLOAT, ["batch", channels, length])
    return b.model(doc=first_doc_paragraph(bn_after_add))


def bn_fp16_overflow(channels: int = 8, image: int = 12, seed: int = 44) -> onnx.ModelProto:
    """A near-constant channel (var 1e-10) under epsilon = 0: its folded weight overflows FP16.

    rsqrt(var + eps) = 1e5, so the folded Conv weight of that channel reaches ~1e5 > 65504: the
    fold must be refused and the BN kept (FP32). MobileNetV2's ReLU6 (Clip 0..6) saturates the
    channel, so what follows stays in FP16 range. A second BN, well conditioned, still folds.
    """
    b = GraphBuilder("bn_fp16_overflow", seed)
    x = b.input("x", FLOAT, ["batch", channels, image, image])
    w = b.rng.standard_normal((channels, channels, 3, 3)) * math.sqrt(2.0 / (9 * channels))
    w[0] *= 4.0  # the channel whose statistics are near-constant
    y = b.op(
        "Conv",
        [x, b.initializer("conv0/weight", w.astype(np.float32))],
        "conv0/Conv",
        pads=[1] * 4,
    )
    scale, bias, mean, var = bn_stats(b.rng, channels)
    var[0] = 1e-10
    params = [
        b.initializer(f"bn0/{n}", a)
        for n, a in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var))
    ]
    y = b.op("BatchNormalization", [y, *params], "bn0/BatchNormalization", epsilon=0.0)
    y = b.op("Clip", [y, b.f32("relu6/zero", 0.0), b.f32("relu6/six", 6.0)], "bn0/Relu6")
    y = b.op("Conv", [y, b.weight("conv1/weight", [channels, channels, 1, 1])], "conv1/Conv")
    y = b.op(
        "BatchNormalization",
        [y, *_bn_params(b, "bn1", channels)],
        "bn1/BatchNormalization",
        outputs=["y"],
    )
    b.output(y, FLOAT, ["batch", channels, image, image])
    return b.model(doc=first_doc_paragraph(bn_fp16_overflow))


def bn_in_if_branch(channels: int = 4, image: int = 8, seed: int = 45) -> onnx.ModelProto:
    """BNs inside If branches: Conv(outer weight) → BN in then, BN on the outer input in else.

    The then-branch fold rewrites a weight read from the outer scope (only there); the else-branch
    BN is decomposed into the branch. The condition is mean(x) > 0, so -x takes the other branch.
    """
    b = GraphBuilder("bn_in_if_branch", seed)
    x = b.input("x", FLOAT, ["batch", channels, image, image])
    w = b.weight("branch/conv/weight", [channels, channels, 3, 3])
    mean = b.op("ReduceMean", [x], "cond/ReduceMean", keepdims=0)
    cond = b.op("Greater", [mean, b.f32("cond/zero", 0.0)], "cond/Greater")

    then_b = b.subgraph("then_branch")
    c = then_b.op("Conv", [x, w], "then/conv/Conv", pads=[1] * 4)
    t = then_b.op(
        "BatchNormalization",
        [c, *_bn_params(then_b, "then/bn", channels)],
        "then/bn/BatchNormalization",
    )
    then_b.output(t, FLOAT, ["batch", channels, image, image])

    else_b = b.subgraph("else_branch")
    e = else_b.op(
        "BatchNormalization",
        [x, *_bn_params(else_b, "else/bn", channels)],
        "else/bn/BatchNormalization",
    )
    else_b.output(e, FLOAT, ["batch", channels, image, image])

    y = b.op("If", [cond], "branch/If", then_branch=then_b.graph(), else_branch=else_b.graph())
    y = b.op("Relu", [y], "out/Relu", outputs=["y"])
    b.output(y, FLOAT, ["batch", channels, image, image])
    return b.model(doc=first_doc_paragraph(bn_in_if_branch))


def bn_shared_weight(channels: int = 8, image: int = 8, seed: int = 46) -> onnx.ModelProto:
    """Two Convs read one weight (Siamese/weight-tied), each followed by its own BN.

    Each fold needs its own scaled copy; the shared weight must stay as it was for the third,
    BN-free reader. A ConvTranspose (group 2) → BN folds on its weight's axis 1.
    """
    b = GraphBuilder("bn_shared_weight", seed)
    x = b.input("x", FLOAT, ["batch", channels, image, image])
    w = b.weight("shared/conv/weight", [channels, channels, 3, 3])
    a = b.op("Conv", [x, w], "left/Conv", pads=[1] * 4)
    a = b.op(
        "BatchNormalization", [a, *_bn_params(b, "left/bn", channels)], "left/bn/BatchNormalization"
    )
    r = b.op("Conv", [x, w], "right/Conv", pads=[1] * 4)
    r = b.op(
        "BatchNormalization",
        [r, *_bn_params(b, "right/bn", channels)],
        "right/bn/BatchNormalization",
    )
    p = b.op("Conv", [x, w], "plain/Conv", pads=[1] * 4)
    s = b.op("Add", [a, r], "merge/Add")
    s = b.op("Add", [s, p], "merge/Add_1")
    group, c_out = 2, channels // 2
    wt = b.weight("up/weight", [channels, c_out // group, 2, 2], std=0.3)
    u = b.op(
        "ConvTranspose",
        [s, wt, b.weight("up/bias", [c_out])],
        "up/ConvTranspose",
        strides=[2, 2],
        kernel_shape=[2, 2],
        group=group,
    )
    u = b.op(
        "BatchNormalization",
        [u, *_bn_params(b, "up/bn", c_out)],
        "up/bn/BatchNormalization",
        outputs=["y"],
    )
    b.output(u, FLOAT, ["batch", c_out, 2 * image, 2 * image])
    return b.model(doc=first_doc_paragraph(bn_shared_weight))


def bn_training_mode(channels: int = 4, image: int = 6, seed: int = 47) -> onnx.ModelProto:
    """A training-mode BN (training_mode=1, running stats as outputs) next to an inference one.

    Training mode normalises with the batch's statistics, so no offline fold is valid: it must be
    left exactly as it is; the inference BN after it still folds.
    """
    b = GraphBuilder("bn_training_mode", seed)
    x = b.input("x", FLOAT, ["batch", channels, image, image])
    c = b.op("Conv", [x, b.weight("conv/weight", [channels, channels, 1, 1])], "conv/Conv")
    t, rm, rv = b.op(
        "BatchNormalization",
        [c, *_bn_params(b, "train_bn", channels)],
        "train_bn/BatchNormalization",
        outputs=["train_bn_y", "running_mean", "running_var"],
        training_mode=1,
    )
    c2 = b.op("Conv", [t, b.weight("conv2/weight", [channels, channels, 1, 1])], "conv2/Conv")
    y = b.op(
        "BatchNormalization",
        [c2, *_bn_params(b, "infer_bn", channels)],
        "infer_bn/BatchNormalization",
        outputs=["y"],
    )
    b.output(y, FLOAT, ["batch", channels, image, image])
    b.output(rm, FLOAT, [channels])
    b.output(rv, FLOAT, [channels])
    return b.model(doc=first_doc_paragraph(bn_training_mode))


#: Every CNN/BN builder, by name (``python -m models.build OUT --only NAME``).
ALL_CNN: dict[str, Callable[[], onnx.ModelProto]] = {
    "mobilenet_cnn": mobilenet_cnn,
    "mobilenet_cnn_opset11": lambda: mobilenet_cnn(opset=11),
    "resnet_bn_block": resnet_bn_block,
    "linear_bn": linear_bn,
    "bn_after_add": bn_after_add,
    "bn_fp16_overflow": bn_fp16_overflow,
    "bn_in_if_branch": bn_in_if_branch,
    "bn_shared_weight": bn_shared_weight,
    "bn_training_mode": bn_training_mode,
}
