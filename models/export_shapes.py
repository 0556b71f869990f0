"""Small models shaped like real exports (issue 18), for the ``--auto`` / ``validate --html`` sweep.

Issue 18 found ``--auto`` failing on 8 of 18 real exports: the probe asked the converted model for
values the conversion had folded or renamed. These builders reproduce the patterns that broke it,
each small and deterministic:

- Paddle2ONNX CNNs keep ``Conv -> BatchNormalization`` un-fused (PP-OCR det/rec, PicoDet heads);
- torchvision/timm exported in training layout leave BN for the converter to fold;
- T5 encoders (RMSNorm by Pow/ReduceMean/Sqrt/Div, relative-position bias added to the scores,
  bias-free projections, ReLU FFN), BERT encoders;
- wake-word front ends (openWakeWord-style): STFT as a Conv with DFT kernels, power, a mel
  MatMul, Clip + Log, then a small Conv/BN classifier; one variant has its work inside an If (the
  tf2onnx pattern for a data-dependent branch);
- ``bn_cast_head``: a BN folded and a model Cast dropped by the conversion (the value map's test).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from models._graph import FLOAT, GraphBuilder
from models.blocks import bert_encoder, resnet_cnn
from models.cnn import bn_stats, mobilenet_cnn
from models.detector import dbnet_detector

__all__ = ["EXPORTS"]


def _bn(b: GraphBuilder, x: str, scope: str, c: int, *, dead: int | None = None) -> str:
    scale, bias, mean, var = bn_stats(b.rng, c, dead)
    names = [
        b.initializer(f"{scope}.w_0", scale),
        b.initializer(f"{scope}.b_0", bias),
        b.initializer(f"{scope}.w_1", mean),
        b.initializer(f"{scope}.w_2", var),
    ]
    out = b.op("BatchNormalization", [x, *names], f"{scope}.bn", epsilon=1e-5, momentum=0.9)
    assert isinstance(out, str)
    return out


def _conv_bn(
    b: GraphBuilder,
    x: str,
    scope: str,
    cin: int,
    cout: int,
    k: int = 3,
    s: int = 1,
    act: str | None = "Relu",
    group: int = 1,
) -> str:
    w = b.weight(f"{scope}.w", [cout, cin // group, k, k])
    y = b.op(
        "Conv",
        [x, w],
        f"{scope}.conv",
        kernel_shape=[k, k],
        strides=[s, s],
        pads=[k // 2] * 4,
        group=group,
    )
    y = _bn(b, str(y), f"{scope}.batch_norm", cout)
    if act == "HardSwish":  # paddle2onnx decomposes it
        t = b.op("Add", [y, b.f32("three", 3.0)], f"{scope}.hs_add")
        t = b.op("Clip", [t, b.f32("zero", 0.0), b.f32("six", 6.0)], f"{scope}.hs_clip")
        t = b.op("Mul", [y, t], f"{scope}.hs_mul")
        return str(b.op("Div", [t, b.f32("six", 6.0)], f"{scope}.hs_div"))
    if act is not None:
        return str(b.op(act, [y], f"{scope}.{act.lower()}"))
    return y


def bn_cast_head(channels: int = 8, image: int = 12, seed: int = 60) -> onnx.ModelProto:
    """Conv -> BN -> Relu -> Cast(to FLOAT) -> Conv -> Sigmoid: the BN folds into the first Conv
    (its output name then carries BN(conv)), and the model's own Cast to float becomes a Cast to
    its own type once the Relu is low, and is dropped."""
    b = GraphBuilder("bn_cast_head", seed)
    x = b.input("image", FLOAT, [1, 3, image, image])
    y = _conv_bn(b, x, "stem", 3, channels)
    y = b.op("Cast", [y], "stem.cast", to=onnx.TensorProto.FLOAT)
    w = b.weight("head.w", [2, channels, 1, 1])
    y = b.op("Conv", [y, w], "head.conv", kernel_shape=[1, 1])
    y = b.op("Sigmoid", [y], "head.sigmoid", outputs=["score"])
    b.output("score", FLOAT, [1, 2, image, image])
    return b.model(opset=13)


def paddle_ppocr_rec(width: int = 32, classes: int = 40, seed: int = 61) -> onnx.ModelProto:
    """PP-OCR recognition shape: Conv/BN/HardSwish backbone to height 1, Squeeze, Transpose to
    [N, W, C], a bias-free MatMul head and Softmax (the CTC probabilities), BN un-fused."""
    b = GraphBuilder("paddle_ppocr_rec", seed)
    x = b.input("x", FLOAT, [1, 3, 8, width])
    y = _conv_bn(b, x, "conv2d_0", 3, 16, s=2, act="HardSwish")
    y = _conv_bn(b, y, "conv2d_1", 16, 16, act="HardSwish", group=16)
    y = _conv_bn(b, y, "conv2d_2", 16, 32, k=1, act="HardSwish")
    y = b.op("MaxPool", [y], "pool2d_0", kernel_shape=[4, 1], strides=[4, 1])
    y = b.op("Squeeze", [y, b.i64("axes2", [2])], "squeeze_0")
    y = b.op("Transpose", [y], "transpose_0", perm=[0, 2, 1])
    y = b.op("MatMul", [y, b.weight("fc_0.w_0", [32, classes])], "fc_0.matmul")
    y = b.op("Add", [y, b.weight("fc_0.b_0", [classes])], "fc_0.add")
    b.op("Softmax", [y], "softmax_0", axis=2, outputs=["softmax_0.tmp_0"])
    b.output("softmax_0.tmp_0", FLOAT, [1, width // 2, classes])
    return b.model(opset=13)


def paddle_picodet_head(image: int = 32, classes: int = 4, seed: int = 62) -> onnx.ModelProto:
    """PicoDet-style: ESNet-ish Conv/BN/HardSwish stem, a shared head with Sigmoid scores and a
    distribution (Softmax over 8 bins, MatMul with the bin centres) box branch."""
    b = GraphBuilder("paddle_picodet", seed)
    x = b.input("image", FLOAT, [1, 3, image, image])
    y = _conv_bn(b, x, "conv2d_0", 3, 16, s=2, act="HardSwish")
    y = _conv_bn(b, y, "conv2d_1", 16, 16, act="HardSwish")
    y = _conv_bn(b, y, "conv2d_2", 16, 24, s=2, act="HardSwish")
    cls = b.op(
        "Conv", [y, b.weight("head.cls.w", [classes, 24, 1, 1])], "head.cls", kernel_shape=[1, 1]
    )
    cls = b.op("Sigmoid", [cls], "head.cls.sigmoid")
    hw = (image // 4) ** 2
    cls = b.op(
        "Reshape",
        [cls, b.i64("cls_shape", [1, classes, hw])],
        "head.cls.reshape",
        outputs=["scores"],
    )
    reg = b.op("Conv", [y, b.weight("head.reg.w", [32, 24, 1, 1])], "head.reg", kernel_shape=[1, 1])
    reg = b.op("Reshape", [reg, b.i64("reg_shape", [1, 4, 8, hw])], "head.reg.reshape")
    reg = b.op("Transpose", [reg], "head.reg.transpose", perm=[0, 3, 1, 2])
    reg = b.op("Softmax", [reg], "head.reg.softmax", axis=-1)
    centres = b.f32("bins", np.arange(8, dtype=np.float32).reshape(8, 1))
    reg = b.op("MatMul", [reg, centres], "head.reg.integral")
    b.op("Squeeze", [reg, b.i64("axes3", [3])], "head.reg.squeeze", outputs=["distances"])
    b.output("scores", FLOAT, [1, classes, hw])
    b.output("distances", FLOAT, [1, hw, 4])
    return b.model(opset=13)


def timm_efficientnet(image: int = 24, seed: int = 63) -> onnx.ModelProto:
    """timm EfficientNet block, exported in training layout: Conv/BN/SiLU (as Sigmoid*x), a
    depthwise Conv/BN, squeeze-excitation (GlobalAveragePool, 1x1 Convs, Sigmoid gate), Conv/BN
    projection with a residual Add, then pooling and a Gemm classifier."""
    b = GraphBuilder("timm_efficientnet", seed)
    x = b.input("input", FLOAT, [1, 3, image, image])
    y = _conv_bn(b, x, "conv_stem", 3, 16, s=2, act=None)
    y = b.op("Mul", [y, b.op("Sigmoid", [y], "act1.sigmoid")], "act1.mul")
    r = y
    y = _conv_bn(b, y, "blocks.0.conv_dw", 16, 16, act=None, group=16)
    y = b.op("Mul", [y, b.op("Sigmoid", [y], "blocks.0.act.sigmoid")], "blocks.0.act.mul")
    s = b.op("GlobalAveragePool", [y], "blocks.0.se.pool")
    s = b.op(
        "Conv",
        [s, b.weight("se.reduce.w", [4, 16, 1, 1])],
        "blocks.0.se.reduce",
        kernel_shape=[1, 1],
    )
    s = b.op("Relu", [s], "blocks.0.se.relu")
    s = b.op(
        "Conv",
        [s, b.weight("se.expand.w", [16, 4, 1, 1])],
        "blocks.0.se.expand",
        kernel_shape=[1, 1],
    )
    y = b.op("Mul", [y, b.op("Sigmoid", [s], "blocks.0.se.gate")], "blocks.0.se.mul")
    y = _conv_bn(b, y, "blocks.0.conv_pw", 16, 16, k=1, act=None)
    y = b.op("Add", [y, r], "blocks.0.residual")
    y = b.op("GlobalAveragePool", [y], "global_pool")
    y = b.op("Flatten", [y], "flatten")
    b.op(
        "Gemm",
        [y, b.weight("classifier.w", [10, 16]), b.weight("classifier.b", [10])],
        "classifier",
        transB=1,
        outputs=["logits"],
    )
    b.output("logits", FLOAT, [1, 10])
    return b.model(opset=13)


def t5_encoder(
    layers: int = 2, hidden: int = 32, heads: int = 4, seq: int = 16, seed: int = 64
) -> onnx.ModelProto:
    """T5 encoder as torch.onnx exports it: embedding Gather, T5LayerNorm as
    x * 1/sqrt(mean(x^2) + eps) * w (Pow/ReduceMean/Add/Sqrt/Div/Mul), bias-free Q/K/V/O MatMuls
    without score scaling, a relative-position bias (Gather of a bucket table, computed once)
    added to every layer's scores, Softmax, and a ReLU feed-forward."""
    b = GraphBuilder("t5_encoder", seed)
    ids = b.input("input_ids", np.int64, [1, seq], value_range=(0, 100))
    x = b.op("Gather", [b.weight("shared.weight", [100, hidden], std=1.0), ids], "embed")
    dh = hidden // heads
    buckets = np.minimum(np.abs(np.arange(seq)[None, :] - np.arange(seq)[:, None]), 7)
    bias = b.op(
        "Gather",
        [b.weight("rel_bias", [8, heads], std=1.0), b.i64("buckets", buckets)],
        "position_bias.gather",
    )
    bias = b.op("Transpose", [bias], "position_bias.transpose", perm=[2, 0, 1])
    bias = b.op("Unsqueeze", [bias, b.i64("ax0", [0])], "position_bias.unsqueeze")

    def norm(v: str, scope: str) -> str:
        p = b.op("Pow", [v, b.f32("two", 2.0)], f"{scope}.pow")
        m = b.op("ReduceMean", [p], f"{scope}.mean", axes=[-1], keepdims=1)
        m = b.op("Add", [m, b.f32("eps", 1e-6)], f"{scope}.add")
        m = b.op("Sqrt", [m], f"{scope}.sqrt")
        v = b.op("Div", [v, m], f"{scope}.div")
        return str(
            b.op(
                "Mul", [v, b.initializer(f"{scope}.w", np.ones(hidden, np.float32))], f"{scope}.mul"
            )
        )

    def heads_of(v: str, scope: str) -> str:
        v = b.op("Reshape", [v, b.i64("split_shape", [1, seq, heads, dh])], f"{scope}.reshape")
        return str(b.op("Transpose", [v], f"{scope}.transpose", perm=[0, 2, 1, 3]))

    for i in range(layers):
        s = f"block.{i}"
        h = norm(x, f"{s}.ln0")
        q, k, v = (
            heads_of(
                str(b.op("MatMul", [h, b.weight(f"{s}.{n}", [hidden, hidden])], f"{s}.{n}.matmul")),
                f"{s}.{n}",
            )
            for n in "qkv"
        )
        kt = b.op("Transpose", [k], f"{s}.kt", perm=[0, 1, 3, 2])
        sc = b.op("Add", [b.op("MatMul", [q, kt], f"{s}.scores"), bias], f"{s}.scores.bias")
        a = b.op("MatMul", [b.op("Softmax", [sc], f"{s}.softmax", axis=-1), v], f"{s}.context")
        a = b.op("Transpose", [a], f"{s}.merge.transpose", perm=[0, 2, 1, 3])
        a = b.op("Reshape", [a, b.i64("merge_shape", [1, seq, hidden])], f"{s}.merge")
        a = b.op("MatMul", [a, b.weight(f"{s}.o", [hidden, hidden])], f"{s}.o.matmul")
        x = str(b.op("Add", [x, a], f"{s}.attn.residual"))
        h = norm(x, f"{s}.ln1")
        h = b.op("MatMul", [h, b.weight(f"{s}.wi", [hidden, 4 * hidden])], f"{s}.wi.matmul")
        h = b.op("Relu", [h], f"{s}.relu")
        h = b.op("MatMul", [h, b.weight(f"{s}.wo", [4 * hidden, hidden])], f"{s}.wo.matmul")
        x = str(b.op("Add", [x, h], f"{s}.ffn.residual"))
    out = norm(x, "final_layer_norm")
    b.op("Identity", [out], "output", outputs=["last_hidden_state"])
    b.output("last_hidden_state", FLOAT, [1, seq, hidden])
    return b.model(opset=13)


def _melspec(
    b: GraphBuilder,
    audio: str,
    scope: str,
    samples: int,
    n_fft: int = 64,
    hop: int = 32,
    mels: int = 16,
) -> str:
    """openWakeWord-style melspectrogram: reflect Pad, STFT as Conv1d with DFT kernels, power,
    mel MatMul, Clip + Log, dB scaling: [1, 1, frames, mels]."""
    bins = n_fft // 2 + 1
    t = np.arange(n_fft)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * t / n_fft)
    f = np.arange(bins)[:, None]
    real = (np.cos(2 * np.pi * f * t / n_fft) * window).astype(np.float32)[:, None, :]
    imag = (-np.sin(2 * np.pi * f * t / n_fft) * window).astype(np.float32)[:, None, :]
    x = b.op("Unsqueeze", [audio, b.i64("ax1", [1])], f"{scope}.unsqueeze")
    pads = b.i64(f"{scope}.pads", [0, 0, n_fft // 2, 0, 0, n_fft // 2])
    x = b.op("Pad", [x, pads], f"{scope}.pad", mode="reflect")
    parts = []
    for name, kernel in (("real", real), ("imag", imag)):
        k = b.initializer(f"{scope}.{name}_kernel", kernel)
        c = b.op("Conv", [x, k], f"{scope}.stft_{name}", kernel_shape=[n_fft], strides=[hop])
        parts.append(b.op("Pow", [c, b.f32("two", 2.0)], f"{scope}.{name}_pow"))
    power = b.op("Add", parts, f"{scope}.power")
    power = b.op("Transpose", [power], f"{scope}.transpose", perm=[0, 2, 1])
    fb = np.abs(np.random.default_rng(0).standard_normal((bins, mels))).astype(np.float32) / bins
    mel = b.op("MatMul", [power, b.initializer(f"{scope}.mel_fb", fb)], f"{scope}.mel")
    mel = b.op("Clip", [mel, b.f32("tiny", 1e-10)], f"{scope}.clip")
    mel = b.op("Log", [mel], f"{scope}.log")
    mel = b.op("Mul", [mel, b.f32("db", 10.0 / np.log(10.0))], f"{scope}.db")
    return str(b.op("Unsqueeze", [mel, b.i64("ax1", [1])], f"{scope}.image"))


def _wake_head(b: GraphBuilder, mel: str, scope: str, frames: int, mels: int) -> str:
    y = _conv_bn(b, mel, f"{scope}.conv_0", 1, 8)
    y = _conv_bn(b, y, f"{scope}.conv_1", 8, 8, s=2)
    y = b.op("GlobalAveragePool", [y], f"{scope}.pool")
    y = b.op("Flatten", [y], f"{scope}.flatten")
    y = b.op(
        "Gemm",
        [y, b.weight(f"{scope}.fc.w", [1, 8]), b.weight(f"{scope}.fc.b", [1])],
        f"{scope}.fc",
        transB=1,
    )
    return str(b.op("Sigmoid", [y], f"{scope}.sigmoid"))


def wakeword_melspec(samples: int = 1024, seed: int = 65) -> onnx.ModelProto:
    """A wake-word model with its melspectrogram front end (STFT as Conv) and a Conv/BN head."""
    b = GraphBuilder("wakeword_melspec", seed)
    audio = b.input("audio", FLOAT, [1, samples])
    mel = _melspec(b, audio, "melspec", samples)
    score = _wake_head(b, mel, "wakeword", samples // 32 + 1, 16)
    b.op("Identity", [score], "score", outputs=["probability"])
    b.output("probability", FLOAT, [1, 1])
    return b.model(opset=13)


def wakeword_in_if(samples: int = 1024, seed: int = 66) -> onnx.ModelProto:
    """The same work inside an If (tf2onnx's pattern for a data-dependent branch): the then
    branch computes the melspectrogram and the head; else returns zeros. The whole model is a
    body, so the page must draw the body's nodes."""
    b = GraphBuilder("wakeword_in_if", seed)
    audio = b.input("audio", FLOAT, [1, samples])
    peak = b.op("ReduceMax", [b.op("Abs", [audio], "abs")], "peak", keepdims=0)
    cond = b.op("Greater", [peak, b.f32("silence", 1e-4)], "not_silent")
    then = b.subgraph("then_branch")
    mel = _melspec(then, audio, "melspec", samples)
    score = _wake_head(then, mel, "wakeword", samples // 32 + 1, 16)
    then.outputs.append(onnx.helper.make_tensor_value_info(score, FLOAT, [1, 1]))
    other = b.subgraph("else_branch")
    zero = other.op("Identity", [other.f32("zeros", np.zeros((1, 1), np.float32))], "zero_score")
    other.outputs.append(onnx.helper.make_tensor_value_info(str(zero), FLOAT, [1, 1]))
    b.op(
        "If",
        [cond],
        "detect",
        outputs=["probability"],
        then_branch=then.graph(),
        else_branch=other.graph(),
    )
    b.output("probability", FLOAT, [1, 1])
    return b.model(opset=13)


def _renamed(build: Callable[[], onnx.ModelProto], name: str) -> Callable[[], onnx.ModelProto]:
    def builder() -> onnx.ModelProto:
        model = build()
        model.graph.name = name
        return model

    builder.__doc__ = build.__doc__
    return builder


EXPORTS: dict[str, Callable[[], onnx.ModelProto]] = {
    "bn_cast_head": bn_cast_head,
    "paddle_ppocr_det": _renamed(lambda: dbnet_detector(image=64, channels=8), "paddle_ppocr_det"),
    "paddle_ppocr_rec": paddle_ppocr_rec,
    "paddle_picodet_head": paddle_picodet_head,
    "paddle_mobilenet": _renamed(mobilenet_cnn, "paddle_mobilenet"),
    "torchvision_resnet": _renamed(lambda: resnet_cnn(), "torchvision_resnet"),
    "timm_efficientnet": timm_efficientnet,
    "t5_encoder": t5_encoder,
    "bert_encoder": _renamed(lambda: bert_encoder(layers=2), "bert_encoder"),
    "wakeword_melspec": wakeword_melspec,
    "wakeword_in_if": wakeword_in_if,
}
