"""Realistic FP32 building blocks people actually convert (BERT, GPT, ResNet, YOLO, RNNs).

Each builder is deterministic (fixed seed), small by default, and shaped like what PyTorch/TF
exporters produce, so the converter meets the patterns it will meet in the wild: decomposed GELU,
additive attention masks, tied embeddings, un-fused BatchNormalization, Resize with a ``scales``
input, NonMaxSuppression, LSTM and Loop bodies reading outer-scope weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx

from models._graph import BOOL, FLOAT, INT64, GraphBuilder, first_doc_paragraph

__all__ = [
    "ALL_BLOCKS",
    "bert_encoder",
    "gpt_decoder",
    "loop_rnn",
    "lstm_model",
    "resnet_cnn",
    "scan_rnn",
    "yolo_head",
]


# ----------------------------------------------------------------------------------------------
# shared transformer pieces
# ----------------------------------------------------------------------------------------------
def _linear(b: GraphBuilder, x: str, scope: str, n_in: int, n_out: int) -> str:
    """MatMul + Add bias, named like an exporter would (``scope/MatMul``, ``scope/Add``)."""
    w = b.weight(f"{scope}/weight", [n_in, n_out])
    bias = b.weight(f"{scope}/bias", [n_out])
    y = b.op("MatMul", [x, w], f"{scope}/MatMul")
    return b.op("Add", [y, bias], f"{scope}/Add")


def _layer_norm(b: GraphBuilder, x: str, scope: str, hidden: int, eps: float = 1e-12) -> str:
    gamma = b.initializer(
        f"{scope}/weight", (1.0 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32)
    )
    beta = b.weight(f"{scope}/bias", [hidden])
    return b.op(
        "LayerNormalization", [x, gamma, beta], f"{scope}/LayerNormalization", axis=-1, epsilon=eps
    )


def _gelu_erf(b: GraphBuilder, x: str, scope: str) -> str:
    """GELU as exporters decompose it: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    d = b.op("Div", [x, b.f32("const/sqrt2", math.sqrt(2.0))], f"{scope}/Div")
    e = b.op("Erf", [d], f"{scope}/Erf")
    a = b.op("Add", [e, b.f32("const/one", 1.0)], f"{scope}/Add")
    m = b.op("Mul", [x, a], f"{scope}/Mul")
    return b.op("Mul", [m, b.f32("const/half", 0.5)], f"{scope}/Mul_1")


def _gelu_tanh(b: GraphBuilder, x: str, scope: str) -> str:
    """GPT-2 ``gelu_new``: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))) — has Pow(x, 3)."""
    p = b.op("Pow", [x, b.f32("const/three", 3.0)], f"{scope}/Pow")
    m = b.op("Mul", [p, b.f32("const/gelu_coeff", 0.044715)], f"{scope}/Mul")
    a = b.op("Add", [x, m], f"{scope}/Add")
    s = b.op("Mul", [a, b.f32("const/sqrt_2_over_pi", math.sqrt(2.0 / math.pi))], f"{scope}/Mul_1")
    t = b.op("Tanh", [s], f"{scope}/Tanh")
    a1 = b.op("Add", [t, b.f32("const/one", 1.0)], f"{scope}/Add_1")
    m1 = b.op("Mul", [x, a1], f"{scope}/Mul_2")
    return b.op("Mul", [m1, b.f32("const/half", 0.5)], f"{scope}/Mul_3")


def _split_heads(b: GraphBuilder, x: str, scope: str, heads: int, head_dim: int, perm: list[int]):
    """[B, S, H] -> Reshape [B, S, heads, d] -> Transpose(perm)."""
    shape = b.i64(f"const/heads_shape_{heads}x{head_dim}", [0, 0, heads, head_dim])
    r = b.op("Reshape", [x, shape], f"{scope}/Reshape")
    return b.op("Transpose", [r], f"{scope}/Transpose", perm=perm)


def _merge_heads(b: GraphBuilder, x: str, scope: str, hidden: int) -> str:
    """[B, heads, S, d] -> Transpose [B, S, heads, d] -> Reshape [B, S, H]."""
    t = b.op("Transpose", [x], f"{scope}/Transpose", perm=[0, 2, 1, 3])
    return b.op(
        "Reshape", [t, b.i64(f"const/merge_shape_{hidden}", [0, 0, hidden])], f"{scope}/Reshape"
    )


def _seq_len(b: GraphBuilder, ids: str, scope: str) -> str:
    """Scalar int64 sequence length from Shape(ids)[1]."""
    shape = b.op("Shape", [ids], f"{scope}/Shape")
    return b.op("Gather", [shape, b.i64("const/idx1", 1)], f"{scope}/Gather", axis=0)


# ----------------------------------------------------------------------------------------------
# BERT
# ----------------------------------------------------------------------------------------------
def bert_encoder(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    seq: int | str = "seq",
    vocab: int = 100,
    max_positions: int = 128,
    seed: int = 0,
) -> onnx.ModelProto:
    """BERT encoder: decomposed Erf-GELU, additive -10000 mask bias, graph output re-read.

    Traps: the mask becomes an additive bias through Cast(to=FLOAT)/Sub/Mul(-10000) (Cast
    retargeting, large constants); Softmax and LayerNormalization must stay FP32; position ids come
    from Shape/Range (integer side-chain); ``last_hidden_state`` is both a graph output and the
    input of the pooler (Gather/Gemm/Tanh), so keep-io-types casts must not cut the consumers off.
    """
    if hidden % heads:
        raise ValueError("hidden must be divisible by heads")
    if isinstance(seq, int) and seq > max_positions:
        raise ValueError("seq exceeds max_positions")
    head_dim = hidden // heads
    b = GraphBuilder("bert_encoder", seed)
    ids = b.input("input_ids", INT64, ["batch", seq], value_range=(0, vocab))
    mask = b.input("attention_mask", INT64, ["batch", seq], value_range=(0, 2))

    # embeddings
    word = b.weight("embeddings/word_embeddings/weight", [vocab, hidden], std=0.02)
    pos = b.weight("embeddings/position_embeddings/weight", [max_positions, hidden], std=0.02)
    tok = b.weight("embeddings/token_type_embeddings/weight", [1, hidden], std=0.02)
    we = b.op("Gather", [word, ids], "embeddings/word_embeddings/Gather", axis=0)
    n = _seq_len(b, ids, "embeddings/seq_len")
    pos_ids = b.op(
        "Range", [b.i64("const/zero_i64", 0), n, b.i64("const/one_i64", 1)], "embeddings/Range"
    )
    pos_ids = b.op("Unsqueeze", [pos_ids, b.i64("const/axes_0", [0])], "embeddings/Unsqueeze")
    pe = b.op("Gather", [pos, pos_ids], "embeddings/position_embeddings/Gather", axis=0)
    x = b.op("Add", [we, pe], "embeddings/Add")
    x = b.op("Add", [x, tok], "embeddings/Add_1")
    x = _layer_norm(b, x, "embeddings/LayerNorm", hidden)

    # extended attention mask: (1 - mask) * -10000, shape [B, 1, 1, S]
    m = b.op("Unsqueeze", [mask, b.i64("const/axes_1_2", [1, 2])], "extended_mask/Unsqueeze")
    m = b.op("Cast", [m], "extended_mask/Cast", to=FLOAT)
    m = b.op("Sub", [b.f32("const/one", 1.0), m], "extended_mask/Sub")
    mask_bias = b.op("Mul", [m, b.f32("const/mask_neg", -10000.0)], "extended_mask/Mul")

    scale = b.f32("const/sqrt_head_dim", math.sqrt(head_dim))
    for i in range(layers):
        p = f"encoder/layer{i}"
        q = _linear(b, x, f"{p}/attn/q_proj", hidden, hidden)
        k = _linear(b, x, f"{p}/attn/k_proj", hidden, hidden)
        v = _linear(b, x, f"{p}/attn/v_proj", hidden, hidden)
        q = _split_heads(b, q, f"{p}/attn/q_heads", heads, head_dim, [0, 2, 1, 3])
        kt = _split_heads(b, k, f"{p}/attn/k_heads", heads, head_dim, [0, 2, 3, 1])
        v = _split_heads(b, v, f"{p}/attn/v_heads", heads, head_dim, [0, 2, 1, 3])
        s = b.op("MatMul", [q, kt], f"{p}/attn/scores/MatMul")
        s = b.op("Div", [s, scale], f"{p}/attn/scores/Div")
        s = b.op("Add", [s, mask_bias], f"{p}/attn/scores/Add")
        probs = b.op("Softmax", [s], f"{p}/attn/Softmax", axis=-1)
        ctx = b.op("MatMul", [probs, v], f"{p}/attn/context/MatMul")
        ctx = _merge_heads(b, ctx, f"{p}/attn/context", hidden)
        o = _linear(b, ctx, f"{p}/attn/out_proj", hidden, hidden)
        x = b.op("Add", [o, x], f"{p}/attn/residual/Add")
        x = _layer_norm(b, x, f"{p}/attn/LayerNorm", hidden)
        h = _linear(b, x, f"{p}/ffn/intermediate", hidden, 4 * hidden)
        h = _gelu_erf(b, h, f"{p}/ffn/gelu")
        h = _linear(b, h, f"{p}/ffn/output", 4 * hidden, hidden)
        x = b.op("Add", [h, x], f"{p}/ffn/residual/Add")
        x = _layer_norm(b, x, f"{p}/ffn/LayerNorm", hidden)

    last = b.op("Identity", [x], "encoder/output", outputs=["last_hidden_state"])
    b.output(last, FLOAT, ["batch", seq, hidden])

    # pooler reads the graph output
    first = b.op("Gather", [last, b.i64("const/idx0", 0)], "pooler/Gather", axis=1)
    pw = b.weight("pooler/dense/weight", [hidden, hidden], std=1.0 / math.sqrt(hidden))
    pb = b.weight("pooler/dense/bias", [hidden])
    g = b.op("Gemm", [first, pw, pb], "pooler/dense/Gemm", transB=1)
    pooled = b.op("Tanh", [g], "pooler/Tanh", outputs=["pooler_output"])
    b.output(pooled, FLOAT, ["batch", hidden])
    return b.model(doc=first_doc_paragraph(bert_encoder))


# ----------------------------------------------------------------------------------------------
# GPT
# ----------------------------------------------------------------------------------------------
def gpt_decoder(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    vocab: int = 100,
    max_positions: int = 128,
    seed: int = 1,
) -> onnx.ModelProto:
    """GPT-2 style decoder: Trilu causal mask + Where(-max), tied embedding, Pow-based GELU.

    Traps: the causal mask is built from Shape → ConstantOfShape(float 1) → Trilu → Cast(BOOL)
    and selects float32-min (overflows to -inf in FP16) in a Where; the word embedding
    initializer is read both by the embedding Gather and by a Transpose→MatMul LM head (a shared
    initializer with LOW and possibly HIGH readers); fused QKV uses Split with a sizes input; the
    positional table is sliced with a Shape-derived end; GELU uses Pow(x, 3).
    """
    if hidden % heads:
        raise ValueError("hidden must be divisible by heads")
    head_dim = hidden // heads
    b = GraphBuilder("gpt_decoder", seed)
    ids = b.input("input_ids", INT64, ["batch", "seq"], value_range=(0, vocab))

    wte = b.weight("transformer/wte/weight", [vocab, hidden], std=0.02)
    wpe = b.weight("transformer/wpe/weight", [max_positions, hidden], std=0.01)
    tok = b.op("Gather", [wte, ids], "transformer/wte/Gather", axis=0)
    n = _seq_len(b, ids, "transformer/seq_len")
    n1 = b.op("Unsqueeze", [n, b.i64("const/axes_0", [0])], "transformer/seq_len/Unsqueeze")
    pe = b.op(
        "Slice",
        [wpe, b.i64("const/starts_0", [0]), n1, b.i64("const/axes_0", [0])],
        "transformer/wpe/Slice",
    )
    x = b.op("Add", [tok, pe], "transformer/embed/Add")

    # causal mask [S, S] bool, lower triangle True
    ss = b.op("Concat", [n1, n1], "causal_mask/Concat", axis=0)
    ones = b.op(
        "ConstantOfShape",
        [ss],
        "causal_mask/ConstantOfShape",
        value=onnx.numpy_helper.from_array(np.array([1.0], dtype=np.float32), "value"),
    )
    tri = b.op("Trilu", [ones], "causal_mask/Trilu", upper=0)
    causal = b.op("Cast", [tri], "causal_mask/Cast", to=BOOL)
    neg = b.f32("const/float32_min", np.finfo(np.float32).min)
    scale = b.f32("const/sqrt_head_dim", math.sqrt(head_dim))
    split_sizes = b.i64("const/qkv_split", [hidden, hidden, hidden])

    for i in range(layers):
        p = f"transformer/h{i}"
        h = _layer_norm(b, x, f"{p}/ln_1", hidden, eps=1e-5)
        qkv = _linear(b, h, f"{p}/attn/c_attn", hidden, 3 * hidden)
        q, k, v = b.op("Split", [qkv, split_sizes], f"{p}/attn/Split", outputs=3, axis=2)
        q = _split_heads(b, q, f"{p}/attn/q_heads", heads, head_dim, [0, 2, 1, 3])
        kt = _split_heads(b, k, f"{p}/attn/k_heads", heads, head_dim, [0, 2, 3, 1])
        v = _split_heads(b, v, f"{p}/attn/v_heads", heads, head_dim, [0, 2, 1, 3])
        s = b.op("MatMul", [q, kt], f"{p}/attn/scores/MatMul")
        s = b.op("Div", [s, scale], f"{p}/attn/scores/Div")
        s = b.op("Where", [causal, s, neg], f"{p}/attn/scores/Where")
        probs = b.op("Softmax", [s], f"{p}/attn/Softmax", axis=-1)
        ctx = b.op("MatMul", [probs, v], f"{p}/attn/context/MatMul")
        ctx = _merge_heads(b, ctx, f"{p}/attn/context", hidden)
        o = _linear(b, ctx, f"{p}/attn/c_proj", hidden, hidden)
        x = b.op("Add", [x, o], f"{p}/attn/residual/Add")
        h = _layer_norm(b, x, f"{p}/ln_2", hidden, eps=1e-5)
        h = _linear(b, h, f"{p}/mlp/c_fc", hidden, 4 * hidden)
        h = _gelu_tanh(b, h, f"{p}/mlp/gelu")
        h = _linear(b, h, f"{p}/mlp/c_proj", 4 * hidden, hidden)
        x = b.op("Add", [x, h], f"{p}/mlp/residual/Add")

    x = _layer_norm(b, x, "transformer/ln_f", hidden, eps=1e-5)
    wte_t = b.op("Transpose", [wte], "lm_head/Transpose", perm=[1, 0])
    logits = b.op("MatMul", [x, wte_t], "lm_head/MatMul", outputs=["logits"])
    b.output(logits, FLOAT, ["batch", "seq", vocab])
    return b.model(doc=first_doc_paragraph(gpt_decoder))


# ----------------------------------------------------------------------------------------------
# ResNet
# ----------------------------------------------------------------------------------------------
def _conv_bn(
    b: GraphBuilder,
    x: str,
    scope: str,
    c_in: int,
    c_out: int,
    k: int,
    stride: int = 1,
    relu: bool = True,
) -> str:
    w = b.weight(f"{scope}/conv/weight", [c_out, c_in, k, k])
    cb = b.weight(f"{scope}/conv/bias", [c_out], std=0.01)
    pad = k // 2
    y = b.op(
        "Conv",
        [x, w, cb],
        f"{scope}/conv/Conv",
        kernel_shape=[k, k],
        strides=[stride, stride],
        pads=[pad, pad, pad, pad],
    )
    rng = b.rng
    gamma = b.initializer(f"{scope}/bn/weight", rng.uniform(0.5, 1.5, c_out).astype(np.float32))
    beta = b.initializer(f"{scope}/bn/bias", (0.1 * rng.standard_normal(c_out)).astype(np.float32))
    mean = b.initializer(
        f"{scope}/bn/running_mean", (0.2 * rng.standard_normal(c_out)).astype(np.float32)
    )
    var = b.initializer(f"{scope}/bn/running_var", rng.uniform(0.3, 3.0, c_out).astype(np.float32))
    y = b.op(
        "BatchNormalization",
        [y, gamma, beta, mean, var],
        f"{scope}/bn/BatchNormalization",
        epsilon=1e-5,
        momentum=0.9,
    )
    if relu:
        y = b.op("Relu", [y], f"{scope}/Relu")
    return y


def resnet_cnn(
    blocks: int = 2,
    channels: int = 16,
    image: int = 32,
    classes: int = 10,
    seed: int = 2,
    *,
    depths: Sequence[int] | None = None,
    bottleneck: bool = False,
    stem_kernel: int = 3,
    stem_stride: int = 1,
) -> onnx.ModelProto:
    """Small ResNet: Conv+bias, un-fused BatchNormalization with real running stats, residuals.

    Traps: BatchNormalization is DENY (its running variance/mean initializers must stay FP32 while
    Conv weights go low), residual Add joins a LOW and a HIGH path, a strided block has a 1x1
    projection shortcut, and the head is GlobalAveragePool→Flatten→Gemm.

    ``depths`` (blocks per stage; default one block in each of ``blocks`` stages), ``bottleneck``
    (1x1-3x3-1x1 blocks, 4x expansion) and the stem's kernel/stride scale it up to ResNet-50
    (``depths=[3, 4, 6, 3], channels=64, bottleneck=True, stem_kernel=7, stem_stride=2``) for
    GPU benchmarks; stage ``i`` is ``channels * 2**i`` wide (x4 at a bottleneck's output).
    """
    b = GraphBuilder("resnet_cnn", seed)
    x = b.input("pixel_values", FLOAT, ["batch", 3, image, image])
    x = _conv_bn(b, x, "stem", 3, channels, stem_kernel, stem_stride)
    x = b.op("MaxPool", [x], "stem/MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = channels
    for i, depth in enumerate(depths if depths is not None else [1] * blocks):
        width = channels * 2**i
        for j in range(depth):
            p = f"layer{i}" if j == 0 else f"layer{i}_{j}"
            stride = 2 if i > 0 and j == 0 else 1
            if bottleneck:
                c_out = 4 * width
                y = _conv_bn(b, x, f"{p}/block/0", c, width, 1)
                y = _conv_bn(b, y, f"{p}/block/1", width, width, 3, stride)
                y = _conv_bn(b, y, f"{p}/block/2", width, c_out, 1, relu=False)
            else:
                c_out = width
                y = _conv_bn(b, x, f"{p}/block/0", c, c_out, 3, stride)
                y = _conv_bn(b, y, f"{p}/block/1", c_out, c_out, 3, relu=False)
            if stride != 1 or c_out != c:
                x = _conv_bn(b, x, f"{p}/downsample", c, c_out, 1, stride, relu=False)
            y = b.op("Add", [y, x], f"{p}/residual/Add")
            x = b.op("Relu", [y], f"{p}/Relu")
            c = c_out
    x = b.op("GlobalAveragePool", [x], "head/GlobalAveragePool")
    x = b.op("Flatten", [x], "head/Flatten", axis=1)
    w = b.weight("head/fc/weight", [classes, c], std=1.0 / math.sqrt(c))
    fb = b.weight("head/fc/bias", [classes])
    logits = b.op("Gemm", [x, w, fb], "head/fc/Gemm", transB=1, outputs=["logits"])
    b.output(logits, FLOAT, ["batch", classes])
    return b.model(doc=first_doc_paragraph(resnet_cnn))


# ----------------------------------------------------------------------------------------------
# YOLO
# ----------------------------------------------------------------------------------------------
def _conv_silu(b: GraphBuilder, x: str, scope: str, c_in: int, c_out: int, k: int, stride: int):
    w = b.weight(f"{scope}/conv/weight", [c_out, c_in, k, k])
    cb = b.weight(f"{scope}/conv/bias", [c_out], std=0.01)
    pad = k // 2
    y = b.op(
        "Conv",
        [x, w, cb],
        f"{scope}/conv/Conv",
        kernel_shape=[k, k],
        strides=[stride, stride],
        pads=[pad, pad, pad, pad],
    )
    s = b.op("Sigmoid", [y], f"{scope}/act/Sigmoid")
    return b.op("Mul", [y, s], f"{scope}/act/Mul")


def yolo_head(
    channels: int = 16,
    image: int = 32,
    classes: int = 4,
    max_boxes: int = 10,
    seed: int = 3,
) -> onnx.ModelProto:
    """YOLOv5-like detector tail: Resize(scales), Concat, box decode, NonMaxSuppression, Gather.

    Traps: Resize's ``scales`` input and NonMaxSuppression's boxes/scores/thresholds are
    float32-only slots (hard HIGH limits) while the Convs around them go LOW; the box decode
    multiplies by anchor/grid initializers in pixel units (values up to ``image``); the selected
    indices are int64 and feed a Gather of the decoded boxes.
    """
    if image % 4:
        raise ValueError("image must be divisible by 4")
    b = GraphBuilder("yolo_head", seed)
    x = b.input("images", FLOAT, [1, 3, image, image])
    c = channels
    p1 = _conv_silu(b, x, "backbone/0", 3, c, 3, 2)  # [1, C, I/2, I/2]
    p2 = _conv_silu(b, p1, "backbone/1", c, 2 * c, 3, 2)  # [1, 2C, I/4, I/4]
    up = b.op(
        "Resize",
        [p2, "", b.f32("neck/upsample/scales", [1.0, 1.0, 2.0, 2.0])],
        "neck/upsample/Resize",
        mode="nearest",
    )
    cat = b.op("Concat", [up, p1], "neck/Concat", axis=1)
    f1 = _conv_silu(b, cat, "neck/fuse", 3 * c, c, 1, 1)

    no = 5 + classes
    boxes_xy, boxes_wh, objs, clss = [], [], [], []
    for lvl, (feat, c_in, stride) in enumerate([(f1, c, 2), (p2, 2 * c, 4)]):
        p = f"head/level{lvl}"
        g = image // stride
        w = b.weight(f"{p}/conv/weight", [no, c_in, 1, 1], std=0.5 / math.sqrt(c_in))
        cb = b.weight(f"{p}/conv/bias", [no], std=0.1)
        y = b.op("Conv", [feat, w, cb], f"{p}/conv/Conv", kernel_shape=[1, 1])
        y = b.op("Reshape", [y, b.i64(f"{p}/shape", [1, no, g * g])], f"{p}/Reshape")
        y = b.op("Transpose", [y], f"{p}/Transpose", perm=[0, 2, 1])  # [1, G*G, no]
        y = b.op("Sigmoid", [y], f"{p}/Sigmoid")
        xy, wh, obj, cls = b.op(
            "Split",
            [y, b.i64("const/yolo_split", [2, 2, 1, classes])],
            f"{p}/Split",
            outputs=4,
            axis=2,
        )
        # grid [1, G*G, 2] in cells; anchor grid [1, G*G, 2] in pixels
        gy, gx = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
        grid = np.stack([gx, gy], -1).reshape(1, g * g, 2).astype(np.float32) - 0.5
        anchor = np.array([[10.0, 13.0], [30.0, 61.0]][lvl], dtype=np.float32) * image / 640 * 8
        anchor_grid = np.broadcast_to(anchor, (1, g * g, 2)).astype(np.float32)
        gi = b.initializer(f"{p}/grid", grid)
        ai = b.initializer(f"{p}/anchor_grid", anchor_grid)
        two = b.f32("const/two", 2.0)
        xy = b.op("Mul", [xy, two], f"{p}/decode/xy/Mul")
        xy = b.op("Add", [xy, gi], f"{p}/decode/xy/Add")
        xy = b.op("Mul", [xy, b.f32(f"{p}/stride", float(stride))], f"{p}/decode/xy/Mul_1")
        wh = b.op("Mul", [wh, two], f"{p}/decode/wh/Mul")
        wh = b.op("Mul", [wh, wh], f"{p}/decode/wh/Square")
        wh = b.op("Mul", [wh, ai], f"{p}/decode/wh/Mul_1")
        boxes_xy.append(xy)
        boxes_wh.append(wh)
        objs.append(obj)
        clss.append(cls)

    xy = b.op("Concat", boxes_xy, "decode/xy/Concat", axis=1)
    wh = b.op("Concat", boxes_wh, "decode/wh/Concat", axis=1)
    obj = b.op("Concat", objs, "decode/obj/Concat", axis=1)
    cls = b.op("Concat", clss, "decode/cls/Concat", axis=1)
    half = b.op("Mul", [wh, b.f32("const/half", 0.5)], "decode/half_wh/Mul")
    x1y1 = b.op("Sub", [xy, half], "decode/x1y1/Sub")
    x2y2 = b.op("Add", [xy, half], "decode/x2y2/Add")
    boxes = b.op("Concat", [x1y1, x2y2], "decode/boxes/Concat", axis=2, outputs=["boxes"])
    conf = b.op("Mul", [cls, obj], "decode/conf/Mul")  # [1, N, classes]
    scores = b.op(
        "Transpose", [conf], "decode/scores/Transpose", perm=[0, 2, 1], outputs=["scores"]
    )

    sel = b.op(
        "NonMaxSuppression",
        [
            boxes,
            scores,
            b.i64("nms/max_output_boxes_per_class", [max_boxes]),
            b.f32("nms/iou_threshold", [0.45]),
            b.f32("nms/score_threshold", [0.25]),
        ],
        "nms/NonMaxSuppression",
        center_point_box=0,
        outputs=["selected_indices"],
    )
    box_idx = b.op(
        "Gather", [sel, b.i64("const/idx2", 2)], "nms/box_index/Gather", axis=1
    )  # [num_selected]
    flat = b.op("Squeeze", [boxes, b.i64("const/axes_0", [0])], "nms/boxes/Squeeze")
    sel_boxes = b.op(
        "Gather", [flat, box_idx], "nms/selected_boxes/Gather", axis=0, outputs=["selected_boxes"]
    )
    n = (image // 2) ** 2 + (image // 4) ** 2
    b.output(boxes, FLOAT, [1, n, 4])
    b.output(scores, FLOAT, [1, classes, n])
    b.output(sel, INT64, ["num_selected", 3])
    b.output(sel_boxes, FLOAT, ["num_selected", 4])
    return b.model(doc=first_doc_paragraph(yolo_head))


# ----------------------------------------------------------------------------------------------
# RNNs
# ----------------------------------------------------------------------------------------------
def lstm_model(
    hidden: int = 32,
    input_size: int = 16,
    seq: int | str = 8,
    classes: int = 5,
    seed: int = 4,
) -> onnx.ModelProto:
    """One LSTM layer (W, R, B initializers) followed by a Gemm classifier.

    Traps: LSTM is one big recurrent op whose sigmoid/tanh gates accumulate rounding error over
    the sequence, and whose W/R/B initializers and three outputs must all share one float type;
    ``Y_c`` is produced but unused, ``Y_h`` is squeezed and classified, and the full sequence
    ``Y`` is also a graph output.
    """
    b = GraphBuilder("lstm_model", seed)
    x = b.input("x", FLOAT, [seq, "batch", input_size])
    std = 1.0 / math.sqrt(hidden)
    w = b.weight("lstm/W", [1, 4 * hidden, input_size], std=std)
    r = b.weight("lstm/R", [1, 4 * hidden, hidden], std=std)
    bias = b.weight("lstm/B", [1, 8 * hidden], std=std)
    y, y_h, _ = b.op(
        "LSTM",
        [x, w, r, bias],
        "lstm/LSTM",
        outputs=["sequence_output", "lstm/LSTM_Y_h", "lstm/LSTM_Y_c"],
        hidden_size=hidden,
        direction="forward",
    )
    h = b.op("Squeeze", [y_h, b.i64("const/axes_0", [0])], "classifier/Squeeze")
    cw = b.weight("classifier/weight", [classes, hidden], std=1.0 / math.sqrt(hidden))
    cb = b.weight("classifier/bias", [classes])
    logits = b.op("Gemm", [h, cw, cb], "classifier/Gemm", transB=1, outputs=["logits"])
    b.output(logits, FLOAT, ["batch", classes])
    b.output(y, FLOAT, [seq, 1, "batch", hidden])
    return b.model(doc=first_doc_paragraph(lstm_model))


def _rnn_weights(b: GraphBuilder, hidden: int, input_size: int) -> tuple[str, str, str]:
    w_ih = b.weight("rnn/W_ih", [input_size, hidden], std=0.5 / math.sqrt(input_size))
    w_hh = b.weight("rnn/W_hh", [hidden, hidden], std=0.5 / math.sqrt(hidden))
    b_h = b.weight("rnn/b_h", [hidden], std=0.1)
    return w_ih, w_hh, b_h


def _rnn_h0(b: GraphBuilder, x: str, hidden: int) -> str:
    shape = b.op("Shape", [x], "rnn/h0/Shape")
    batch = b.op(
        "Slice",
        [shape, b.i64("const/starts_1", [1]), b.i64("const/ends_2", [2])],
        "rnn/h0/Slice",
    )
    hs = b.op("Concat", [batch, b.i64("const/hidden", [hidden])], "rnn/h0/Concat", axis=0)
    return b.op(
        "ConstantOfShape",
        [hs],
        "rnn/h0/ConstantOfShape",
        value=onnx.numpy_helper.from_array(np.zeros(1, np.float32), "value"),
    )


def loop_rnn(
    hidden: int = 32,
    input_size: int = 16,
    seq: int | str = 8,
    seed: int = 5,
) -> onnx.ModelProto:
    """Simple RNN as a Loop whose body reads OUTER-scope weights and the outer input.

    Traps: the body's MatMul/Add/Tanh read ``rnn/W_hh``, ``rnn/b_h`` (outer initializers) and
    ``x`` (outer graph input) by capture, not through body inputs, so the converter must recurse
    into subgraphs and cast captured values on the edge; the loop-carried state type must match
    between the Loop's inputs and the body's outputs.
    """
    b = GraphBuilder("loop_rnn", seed)
    x = b.input("x", FLOAT, [seq, "batch", input_size])
    w_ih, w_hh, b_h = _rnn_weights(b, hidden, input_size)
    h0 = _rnn_h0(b, x, hidden)
    shape = b.op("Shape", [x], "rnn/trip/Shape")
    trips = b.op("Gather", [shape, b.i64("const/idx0", 0)], "rnn/trip/Gather", axis=0)

    body = b.subgraph("rnn_loop_body")
    it = body.input("rnn/body/iter", INT64, [])
    cond_in = body.input("rnn/body/cond_in", BOOL, [])
    h_prev = body.input("rnn/body/h_prev", FLOAT, ["batch", hidden])
    x_t = body.op("Gather", [x, it], "rnn/body/x_t/Gather", axis=0)  # outer x
    a = body.op("MatMul", [x_t, w_ih], "rnn/body/ih/MatMul")  # outer weight
    r = body.op("MatMul", [h_prev, w_hh], "rnn/body/hh/MatMul")  # outer weight
    s = body.op("Add", [a, r], "rnn/body/Add")
    s = body.op("Add", [s, b_h], "rnn/body/bias/Add")  # outer bias
    h_next = body.op("Tanh", [s], "rnn/body/Tanh")
    cond_out = body.op("Identity", [cond_in], "rnn/body/cond/Identity")
    h_scan = body.op("Identity", [h_next], "rnn/body/scan/Identity")
    body.output(cond_out, BOOL, [])
    body.output(h_next, FLOAT, ["batch", hidden])
    body.output(h_scan, FLOAT, ["batch", hidden])

    last, all_h = b.op(
        "Loop",
        [trips, "", h0],
        "rnn/Loop",
        outputs=["last_hidden", "all_hidden"],
        body=body.graph(),
    )
    b.output(last, FLOAT, ["batch", hidden])
    b.output(all_h, FLOAT, [seq, "batch", hidden])
    return b.model(doc=first_doc_paragraph(loop_rnn))


def scan_rnn(
    hidden: int = 32,
    input_size: int = 16,
    seq: int | str = 8,
    seed: int = 6,
) -> onnx.ModelProto:
    """Simple RNN as a Scan over the sequence axis; the body captures outer weights.

    Traps: like :func:`loop_rnn` but through Scan (scan inputs/outputs, no iteration counter); the
    body reads the outer initializers ``rnn/W_ih``, ``rnn/W_hh`` and ``rnn/b_h``.
    """
    b = GraphBuilder("scan_rnn", seed)
    x = b.input("x", FLOAT, [seq, "batch", input_size])
    w_ih, w_hh, b_h = _rnn_weights(b, hidden, input_size)
    h0 = _rnn_h0(b, x, hidden)

    body = b.subgraph("rnn_scan_body")
    h_prev = body.input("rnn/body/h_prev", FLOAT, ["batch", hidden])
    x_t = body.input("rnn/body/x_t", FLOAT, ["batch", input_size])
    a = body.op("MatMul", [x_t, w_ih], "rnn/body/ih/MatMul")
    r = body.op("MatMul", [h_prev, w_hh], "rnn/body/hh/MatMul")
    s = body.op("Add", [a, r], "rnn/body/Add")
    s = body.op("Add", [s, b_h], "rnn/body/bias/Add")
    h_next = body.op("Tanh", [s], "rnn/body/Tanh")
    h_scan = body.op("Identity", [h_next], "rnn/body/scan/Identity")
    body.output(h_next, FLOAT, ["batch", hidden])
    body.output(h_scan, FLOAT, ["batch", hidden])

    last, all_h = b.op(
        "Scan",
        [h0, x],
        "rnn/Scan",
        outputs=["last_hidden", "all_hidden"],
        body=body.graph(),
        num_scan_inputs=1,
    )
    b.output(last, FLOAT, ["batch", hidden])
    b.output(all_h, FLOAT, [seq, "batch", hidden])
    return b.model(doc=first_doc_paragraph(scan_rnn))


#: Every block builder by name; each takes only keyword options with small defaults.
ALL_BLOCKS: dict[str, Callable[[], onnx.ModelProto]] = {
    "bert_encoder": bert_encoder,
    "gpt_decoder": gpt_decoder,
    "resnet_cnn": resnet_cnn,
    "yolo_head": yolo_head,
    "lstm_model": lstm_model,
    "loop_rnn": loop_rnn,
    "scan_rnn": scan_rnn,
}
