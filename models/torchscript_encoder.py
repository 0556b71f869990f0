"""A TorchScript-exported sequence encoder: 2 TransformerEncoder layers and a Conv1d/BN head.

Shaped like ``torch.onnx.export(..., dynamo=False)`` of ``nn.TransformerEncoder`` with torch 1.x
followed by ``Conv1d -> BatchNorm1d -> ReLU``. With ``batch_first=True`` (the default here, as in
most models written since) each attention block starts with ``query.transpose(1, 0)`` and ends
with the transpose back; inside, the packed in-projection is one MatMul + Add (2-D weight) split
in three; ``q`` is scaled, then heads are folded into the batch (``[T, B*heads, d]`` transposed to
``[B*heads, T, d]``); ``bmm(q, k.transpose(1, 2))`` becomes Transpose(perm 1,0,2) straight into
MatMul's first input and Transpose(perm 0,2,1) into its second (the pairs ORT's
MatmulTransposeFusion fuses); the out-projection runs on ``[T*B, C]`` as a Gemm; the feed-forward
is MatMul + Add with pre-transposed weights; LayerNormalization (opset 17) after each residual.
The head transposes to ``[B, C, T]`` for a 3-D Conv (kernel 3) with an unfused
BatchNormalization and Relu.

Issue 18: converted at O1/O2/O3, this model crashes ``onnxruntime.InferenceSession`` (ORT 1.32
CPU, x86-64, default ``ORT_ENABLE_ALL``; SIGSEGV) and loads at ``ORT_ENABLE_EXTENDED``. The
pattern is ``Transpose(perm 1,0,2)`` in FP16 into a MatMul with a 2-D weight: ORT CPU has no FP16
MatMul, inserts a Cast to FP32 between the two, and its NCHWc pass then dereferences a node with
no schema (microsoft/onnxruntime#28392). The FP32 original loads. These builders are not in
``models.build.BUILDERS``: a test that loads every converted model in its own process would die.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from models._graph import FLOAT, GraphBuilder, first_doc_paragraph

__all__ = ["ALL_TORCHSCRIPT", "attention_input_projection", "encoder_conv_head"]


def _heads(b: GraphBuilder, x: str, p: str, name: str, heads: int, head_dim: int) -> str:
    """``x.contiguous().view(T, B * heads, d).transpose(0, 1)``: Reshape, Transpose(1, 0, 2)."""
    view = b.i64(f"const/heads_view_{heads}x{head_dim}", [0, -1, head_dim])
    v = b.op("Reshape", [x, view], f"{p}/self_attn/Reshape_{name}")
    return b.op("Transpose", [v], f"{p}/self_attn/Transpose_{name}", perm=[1, 0, 2])


def _self_attention(
    b: GraphBuilder, x: str, p: str, hidden: int, heads: int, batch_first: bool
) -> str:
    """torch 1.x ``F.multi_head_attention_forward`` as TorchScript exports it.

    ``linear(x, in_proj_weight, in_proj_bias).chunk(3, -1)`` is MatMul + Add + Split; ``q`` is
    scaled before the head view, so the score MatMul reads ``Transpose(1, 0, 2)`` directly on its
    first input (``bmm(q, k.transpose(1, 2))``).
    """
    head_dim = hidden // heads
    if batch_first:  # query = key = value = query.transpose(1, 0)
        x = b.op("Transpose", [x], f"{p}/self_attn/Transpose_in", perm=[1, 0, 2])
    w = b.weight(f"{p}/self_attn/in_proj_weight_t", [hidden, 3 * hidden])
    bias = b.weight(f"{p}/self_attn/in_proj_bias", [3 * hidden])
    qkv = b.op("MatMul", [x, w], f"{p}/self_attn/MatMul")
    qkv = b.op("Add", [qkv, bias], f"{p}/self_attn/Add")
    split = b.i64(f"const/qkv_split_{hidden}", [hidden] * 3)
    q, k, v = b.op("Split", [qkv, split], f"{p}/self_attn/Split", outputs=3, axis=-1)
    scale = b.f32(f"const/attn_scale_{head_dim}", 1.0 / math.sqrt(head_dim))
    q = b.op("Mul", [q, scale], f"{p}/self_attn/Mul")
    q = _heads(b, q, p, "q", heads, head_dim)
    k = _heads(b, k, p, "k", heads, head_dim)
    v = _heads(b, v, p, "v", heads, head_dim)
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
    out = b.op("Reshape", [o, shape], f"{p}/self_attn/Reshape_back")
    if batch_first:  # attn_output.transpose(1, 0)
        out = b.op("Transpose", [out], f"{p}/self_attn/Transpose_out", perm=[1, 0, 2])
    return out


def _layer_norm(b: GraphBuilder, x: str, scope: str, hidden: int) -> str:
    gamma = b.initializer(
        f"{scope}/weight", (1.0 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32)
    )
    beta = b.weight(f"{scope}/bias", [hidden])
    return b.op(
        "LayerNormalization",
        [x, gamma, beta],
        f"{scope}/LayerNormalization",
        axis=-1,
        epsilon=1e-5,
    )


def _encoder_layer(
    b: GraphBuilder, x: str, p: str, hidden: int, heads: int, ffn: int, batch_first: bool
) -> str:
    a = _self_attention(b, x, p, hidden, heads, batch_first)
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
    batch_first: bool = True,
) -> onnx.ModelProto:
    """TorchScript-style TransformerEncoder with a Conv1d/BatchNorm/ReLU head.

    Input ``src`` [batch, sequence, hidden] (``batch_first``, else [sequence, batch, hidden]);
    output ``features`` [batch, channels, sequence]. BatchNormalization is left unfused (eval-mode
    export with do_constant_folding off).
    """
    if hidden % heads:
        raise ValueError("hidden must be divisible by heads")
    b = GraphBuilder("torch_jit", seed)
    dims = ["batch", "sequence"] if batch_first else ["sequence", "batch"]
    x = b.input("src", FLOAT, [*dims, hidden])
    for i in range(layers):
        p = f"transformer_encoder/layers.{i}"
        x = _encoder_layer(b, x, p, hidden, heads, ffn, batch_first)
    perm = [0, 2, 1] if batch_first else [1, 2, 0]
    y = b.op("Transpose", [x], "head/Transpose", perm=perm)  # [B, C, T]
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


def attention_input_projection(
    hidden: int = 32, seed: int = 61, batch: int | str = "batch"
) -> onnx.ModelProto:
    """The first steps of a ``batch_first`` attention block alone: ``query.transpose(1, 0)`` into
    the packed in-projection (MatMul with a 2-D weight, Add), the q/k/v split as outputs.

    The smallest graph that shows issue 18's crash: converted, the Transpose and MatMul are FP16,
    ORT CPU (no FP16 MatMul) puts a Cast between them, and ORT 1.32 on x86-64 then segfaults in
    its NCHWc pass at ``ORT_ENABLE_ALL`` (microsoft/onnxruntime#28392). In the whole encoder
    the same pair is present but other nodes keep that pass from tripping over it.
    """
    b = GraphBuilder("torch_jit", seed)
    x = b.input("src", FLOAT, [batch, "sequence", hidden])
    p = "transformer_encoder/layers.0/self_attn"
    t = b.op("Transpose", [x], f"{p}/Transpose_in", perm=[1, 0, 2])
    qkv = b.op(
        "MatMul", [t, b.weight(f"{p}/in_proj_weight_t", [hidden, 3 * hidden])], f"{p}/MatMul"
    )
    qkv = b.op("Add", [qkv, b.weight(f"{p}/in_proj_bias", [3 * hidden])], f"{p}/Add")
    split = b.i64(f"const/qkv_split_{hidden}", [hidden] * 3)
    b.op("Split", [qkv, split], f"{p}/Split", outputs=["q", "k", "v"], axis=-1)
    for name in "qkv":
        b.output(name, FLOAT, ["sequence", batch, hidden])
    return b.model(doc=first_doc_paragraph(attention_input_projection))


ALL_TORCHSCRIPT = {
    "encoder_conv_head": encoder_conv_head,
    "attention_input_projection": attention_input_projection,
}
