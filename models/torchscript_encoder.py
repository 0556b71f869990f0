"""A TorchScript-exported sequence encoder: 2 TransformerEncoder layers and a Conv1d/BN head.

Shaped like ``torch.onnx.export(..., dynamo=False)`` of ``nn.TransformerEncoder`` (sequence-first,
``batch_first=False``, the non-fast path) followed by ``Conv1d -> BatchNorm1d -> ReLU``: the packed
in-projection is one MatMul + Add split by Reshape/Transpose/Gather into q, k and v; heads are
folded into the batch (``[T, B*heads, d]`` transposed to ``[B*heads, T, d]``); ``q * scale`` then
``bmm(q, k.transpose(-2, -1))`` becomes Mul, Transpose(perm 0,2,1) and MatMul (what ORT's
MatmulTransposeFusion fuses); the out-projection runs on ``[T*B, C]`` as a Gemm; the feed-forward
is MatMul + Add with pre-transposed weights; LayerNormalization (opset 17) after each residual.
The head transposes ``[T, B, C]`` to ``[B, C, T]`` for a 3-D Conv (kernel 3) with an unfused
BatchNormalization and Relu.

Issue 18 reports that this model, converted at O1/O2/O3, crashed ``onnxruntime.InferenceSession``
(ORT 1.32 CPU, default ``ORT_ENABLE_ALL``) while loading at ``ORT_ENABLE_EXTENDED``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from models._graph import FLOAT, GraphBuilder, first_doc_paragraph

__all__ = ["ALL_TORCHSCRIPT", "encoder_conv_head"]


def _in_projection(
    b: GraphBuilder, x: str, p: str, hidden: int, heads: int
) -> tuple[str, str, str]:
    """Packed q/k/v projection, split the way the TorchScript exporter writes it."""
    w = b.weight(f"{p}/self_attn/in_proj_weight_t", [hidden, 3 * hidden])
    bias = b.weight(f"{p}/self_attn/in_proj_bias", [3 * hidden])
    qkv = b.op("MatMul", [x, w], f"{p}/self_attn/MatMul")
    qkv = b.op("Add", [qkv, bias], f"{p}/self_attn/Add")
    # unflatten(-1, (3, C)).unsqueeze(0).transpose(0, -2).squeeze(-2) -> [3, T, B, C]
    shape = b.i64(f"const/qkv_shape_{hidden}", [0, 0, 3, hidden])
    r = b.op("Reshape", [qkv, shape], f"{p}/self_attn/Reshape")
    u = b.op("Unsqueeze", [r, b.i64("const/axes_0", [0])], f"{p}/self_attn/Unsqueeze")
    t = b.op("Transpose", [u], f"{p}/self_attn/Transpose", perm=[3, 1, 2, 0, 4])
    s = b.op("Squeeze", [t, b.i64("const/axes_m2", [-2])], f"{p}/self_attn/Squeeze")
    head_dim = hidden // heads
    out = []
    for i, name in enumerate("qkv"):
        g = b.op("Gather", [s, b.i64(f"const/idx{i}", i)], f"{p}/self_attn/Gather_{name}", axis=0)
        # .view(T, B * heads, d).transpose(0, 1)
        view = b.i64(f"const/heads_view_{heads}x{head_dim}", [0, -1, head_dim])
        v = b.op("Reshape", [g, view], f"{p}/self_attn/Reshape_{name}")
        out.append(b.op("Transpose", [v], f"{p}/self_attn/Transpose_{name}", perm=[1, 0, 2]))
    return out[0], out[1], out[2]


def _self_attention(b: GraphBuilder, x: str, p: str, hidden: int, heads: int) -> str:
    q, k, v = _in_projection(b, x, p, hidden, heads)
    scale = b.f32(f"const/attn_scale_{hidden // heads}", 1.0 / math.sqrt(hidden // heads))
    q = b.op("Mul", [q, scale], f"{p}/self_attn/Mul")
    kt = b.op("Transpose", [k], f"{p}/self_attn/Transpose_kt", perm=[0, 2, 1])
    scores = b.op("MatMul", [q, kt], f"{p}/self_attn/MatMul_qk")
    probs = b.op("Softmax", [scores], f"{p}/self_attn/Softmax", axis=-1)
    ctx = b.op("MatMul", [probs, v], f"{p}/self_attn/MatMul_pv")
    # .transpose(0, 1).contiguous().view(T * B, C) -> Gemm -> .view(T, B, C)
    ctx = b.op("Transpose", [ctx], f"{p}/self_attn/Transpose_ctx", perm=[1, 0, 2])
    flat = b.op(
        "Reshape", [ctx, b.i64(f"const/flat_{hidden}", [-1, hidden])], f"{p}/self_attn/Reshape_ctx"
    )
    w = b.weight(f"{p}/self_attn/out_proj/weight", [hidden, hidden])
    bias = b.weight(f"{p}/self_attn/out_proj/bias", [hidden])
    o = b.op("Gemm", [flat, w, bias], f"{p}/self_attn/out_proj/Gemm", alpha=1.0, beta=1.0, transB=1)
    shape = b.op("Shape", [x], f"{p}/self_attn/Shape")
    return b.op("Reshape", [o, shape], f"{p}/self_attn/Reshape_back")


def _layer_norm(b: GraphBuilder, x: str, scope: str, hidden: int) -> str:
    gamma = b.initializer(
        f"{scope}/weight", (1.0 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32)
    )
    beta = b.weight(f"{scope}/bias", [hidden])
    return b.op(
        "LayerNormalization", [x, gamma, beta], f"{scope}/LayerNormalization", axis=-1,
        epsilon=1e-5,
    )  # fmt: skip


def _encoder_layer(b: GraphBuilder, x: str, p: str, hidden: int, heads: int, ffn: int) -> str:
    a = _self_attention(b, x, p, hidden, heads)
    x = _layer_norm(b, b.op("Add", [x, a], f"{p}/Add"), f"{p}/norm1", hidden)
    w1 = b.weight(f"{p}/linear1/weight_t", [hidden, ffn])
    h = b.op("MatMul", [x, w1], f"{p}/linear1/MatMul")
    h = b.op("Add", [h, b.weight(f"{p}/linear1/bias", [ffn])], f"{p}/linear1/Add")
    h = b.op("Relu", [h], f"{p}/Relu")
    w2 = b.weight(f"{p}/linear2/weight_t", [ffn, hidden])
    h = b.op("MatMul", [h, w2], f"{p}/linear2/MatMul")
    h = b.op("Add", [h, b.weight(f"{p}/linear2/bias", [hidden])], f"{p}/linear2/Add")
    return _layer_norm(b, b.op("Add", [x, h], f"{p}/Add_1"), f"{p}/norm2", hidden)


def encoder_conv_head(
    layers: int = 2,
    hidden: int = 32,
    heads: int = 4,
    ffn: int = 64,
    channels: int = 16,
    seed: int = 60,
) -> onnx.ModelProto:
    """TorchScript-style TransformerEncoder (sequence-first) with a Conv1d/BatchNorm/ReLU head.

    Input ``src`` [sequence, batch, hidden] (float); output ``features`` [batch, channels,
    sequence]. BatchNormalization is left unfused (eval-mode export with do_constant_folding off).
    """
    if hidden % heads:
        raise ValueError("hidden must be divisible by heads")
    b = GraphBuilder("torch_jit", seed)
    x = b.input("src", FLOAT, ["sequence", "batch", hidden])
    for i in range(layers):
        x = _encoder_layer(b, x, f"transformer_encoder/layers.{i}", hidden, heads, ffn)
    y = b.op("Transpose", [x], "head/Transpose", perm=[1, 2, 0])  # [B, C, T]
    w = b.weight("head/conv/weight", [channels, hidden, 3])
    cb = b.weight("head/conv/bias", [channels])
    y = b.op("Conv", [y, w, cb], "head/conv/Conv", kernel_shape=[3], pads=[1, 1], strides=[1])
    rng = b.rng
    bn = [
        b.initializer("head/bn/weight", rng.uniform(0.5, 1.5, channels).astype(np.float32)),
        b.initializer("head/bn/bias", (0.1 * rng.standard_normal(channels)).astype(np.float32)),
        b.initializer(
            "head/bn/running_mean", (0.2 * rng.standard_normal(channels)).astype(np.float32)
        ),
        b.initializer("head/bn/running_var", rng.uniform(0.3, 3.0, channels).astype(np.float32)),
    ]
    y = b.op("BatchNormalization", [y, *bn], "head/bn/BatchNormalization", epsilon=1e-5)
    out = b.op("Relu", [y], "head/Relu", outputs=["features"])
    b.output(out, FLOAT, ["batch", channels, "sequence"])
    return b.model(doc=first_doc_paragraph(encoder_conv_head))


ALL_TORCHSCRIPT = {"encoder_conv_head": encoder_conv_head}
