"""Models in the shapes real exporters leave them, for the cost model's fidelity (issue 20).

What matters here is what each exporter leaves *unknown*, because every unknown dim is one the
cost model has to resolve itself:

* ``dynamo_bert``: torch.onnx dynamo. Input dims ``s0``/``s1``; Reshape targets built at run time
  from Shape -> Gather -> Concat; intermediate ``value_info`` with every dynamic dim unnamed.
* ``torchscript_vit``: a ViT exported with only the batch symbolic; the CLS token is Expanded to
  a shape built from Shape(x)[0], patches Reshaped through a Shape-derived target.
* ``gpt2_past_decoder``: an optimum-style GPT-2 with ``past_key_values``: key/value Concat of
  ``past`` and ``seq`` (``past+seq``), the causal mask Sliced from a static bias buffer with
  Shape-derived starts/ends, ``present.*`` outputs.
* ``tf2onnx_cnn``: a Keras NHWC CNN via tf2onnx: ``unk__N`` batch dim, a Transpose into NCHW,
  Flatten as Reshape(Shape-derived [-1, C]), Dense as MatMul.
* ``paddle_ocr_rec``: a PaddleOCR-like recogniser via paddle2onnx: input ``[-1, 3, 48, -1]``,
  every intermediate dim -1, Reshape with shape tensors, a hand-written LayerNorm
  (ReduceMean-Sub-Pow-ReduceMean-Add-Sqrt-Div), a CTC head with Softmax.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx

from models._graph import FLOAT, INT64, GraphBuilder, first_doc_paragraph

__all__ = [
    "ALL_EXPORTERS",
    "dynamo_bert",
    "gpt2_past_decoder",
    "paddle_ocr_rec",
    "tf2onnx_cnn",
    "torchscript_vit",
]


def unname_intermediate_dims(model: onnx.ModelProto, unknown: str = "") -> onnx.ModelProto:
    """Write ONNX-inferred value_info with every non-static dim unnamed (or ``unknown``)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.value_info[:]
    for vi in inferred.graph.value_info:
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        for d in t.shape.dim:
            if not d.HasField("dim_value"):
                d.Clear()
                if unknown:
                    d.dim_param = unknown
        model.graph.value_info.append(vi)
    return model


def _linear(b: GraphBuilder, x: str, scope: str, n_in: int, n_out: int, bias: bool = True) -> str:
    y = b.op("MatMul", [x, b.weight(f"{scope}.weight", [n_in, n_out])], f"{scope}/MatMul")
    if bias:
        y = b.op("Add", [y, b.weight(f"{scope}.bias", [n_out])], f"{scope}/Add")
    return y


def _layer_norm(b: GraphBuilder, x: str, scope: str, hidden: int, eps: float = 1e-5) -> str:
    gamma = b.initializer(
        f"{scope}.weight", (1 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32)
    )
    beta = b.weight(f"{scope}.bias", [hidden])
    return b.op("LayerNormalization", [x, gamma, beta], f"{scope}/LayerNorm", axis=-1, epsilon=eps)


def _gelu(b: GraphBuilder, x: str, scope: str) -> str:
    d = b.op("Div", [x, b.f32("c/sqrt2", math.sqrt(2.0))], f"{scope}/Div")
    e = b.op("Erf", [d], f"{scope}/Erf")
    a = b.op("Add", [e, b.f32("c/one", 1.0)], f"{scope}/Add")
    m = b.op("Mul", [x, a], f"{scope}/Mul")
    return b.op("Mul", [m, b.f32("c/half", 0.5)], f"{scope}/Mul_1")


def _dims_of(b: GraphBuilder, x: str, scope: str, idx: list[int]) -> str:
    """Shape(x)[idx] as a 1-D int64 tensor (dynamo's sym_size + prims)."""
    s = b.op("Shape", [x], f"{scope}/Shape")
    return b.op(
        "Gather", [s, b.i64(f"c/idx_{'_'.join(map(str, idx))}", idx)], f"{scope}/Gather", axis=0
    )


def _heads_dynamo(b: GraphBuilder, x: str, scope: str, heads: int, d: int, perm: list[int]) -> str:
    """Reshape [B, S, H] -> [B, S, heads, d] with a run-time target, then Transpose."""
    bs = _dims_of(b, x, f"{scope}/bs", [0, 1])
    target = b.op("Concat", [bs, b.i64(f"c/hd_{heads}_{d}", [heads, d])], f"{scope}/Concat", axis=0)
    r = b.op("Reshape", [x, target], f"{scope}/Reshape")
    return b.op("Transpose", [r], f"{scope}/Transpose", perm=perm)


def _attention(
    b: GraphBuilder, q: str, k: str, v: str, scope: str, hidden: int, heads: int, mask: str | None
) -> str:
    """Scores, Softmax, context; merged back to [B, S, H] through a run-time Reshape target."""
    d = hidden // heads
    kt = b.op("Transpose", [k], f"{scope}/k/Transpose_t", perm=[0, 1, 3, 2])
    s = b.op("MatMul", [q, kt], f"{scope}/scores/MatMul")
    s = b.op("Mul", [s, b.f32(f"c/scale_{d}", 1 / math.sqrt(d))], f"{scope}/scores/Mul")
    if mask is not None:
        s = b.op("Add", [s, mask], f"{scope}/scores/Add")
    p = b.op("Softmax", [s], f"{scope}/Softmax", axis=-1)
    ctx = b.op("MatMul", [p, v], f"{scope}/ctx/MatMul")
    ctx = b.op("Transpose", [ctx], f"{scope}/ctx/Transpose", perm=[0, 2, 1, 3])
    bs = _dims_of(b, ctx, f"{scope}/ctx/bs", [0, 1])
    target = b.op("Concat", [bs, b.i64(f"c/h_{hidden}", [hidden])], f"{scope}/ctx/Concat", axis=0)
    return b.op("Reshape", [ctx, target], f"{scope}/ctx/Reshape")


def _encoder_layer(
    b: GraphBuilder, x: str, p: str, hidden: int, heads: int, mask: str | None, pre_ln: bool
) -> str:
    d = hidden // heads
    h = _layer_norm(b, x, f"{p}.ln1", hidden) if pre_ln else x
    q = _heads_dynamo(b, _linear(b, h, f"{p}.q", hidden, hidden), f"{p}/q", heads, d, [0, 2, 1, 3])
    k = _heads_dynamo(b, _linear(b, h, f"{p}.k", hidden, hidden), f"{p}/k", heads, d, [0, 2, 1, 3])
    v = _heads_dynamo(b, _linear(b, h, f"{p}.v", hidden, hidden), f"{p}/v", heads, d, [0, 2, 1, 3])
    a = _attention(b, q, k, v, f"{p}/attn", hidden, heads, mask)
    a = _linear(b, a, f"{p}.o", hidden, hidden)
    x = b.op("Add", [x, a], f"{p}/res1")
    if not pre_ln:
        x = _layer_norm(b, x, f"{p}.ln1", hidden)
    h = _layer_norm(b, x, f"{p}.ln2", hidden) if pre_ln else x
    h = _linear(
        b,
        _gelu(b, _linear(b, h, f"{p}.fc1", hidden, 4 * hidden), f"{p}/gelu"),
        f"{p}.fc2",
        4 * hidden,
        hidden,
    )
    x = b.op("Add", [x, h], f"{p}/res2")
    return x if pre_ln else _layer_norm(b, x, f"{p}.ln2", hidden)


def dynamo_bert(
    layers: int = 2, hidden: int = 64, heads: int = 4, vocab: int = 200, seed: int = 3
) -> onnx.ModelProto:
    """BERT-like encoder as torch.onnx dynamo leaves it: run-time Reshape targets, dims unnamed."""
    b = GraphBuilder("main_graph", seed)
    ids = b.input("input_ids", INT64, ["s0", "s1"], value_range=(0, vocab))
    mask = b.input("attention_mask", INT64, ["s0", "s1"], value_range=(1, 2))
    x = b.op(
        "Gather", [b.weight("embeddings.word.weight", [vocab, hidden], std=0.02), ids], "emb/Gather"
    )
    n = _dims_of(b, ids, "emb/seq", [1])
    n0 = b.op("Squeeze", [n, b.i64("c/axes0", [0])], "emb/Squeeze")
    pos = b.op("Range", [b.i64("c/zero", 0), n0, b.i64("c/one_i", 1)], "emb/Range")
    pe = b.op(
        "Gather",
        [b.weight("embeddings.pos.weight", [512, hidden], std=0.02), pos],
        "emb/pos/Gather",
    )
    x = _layer_norm(b, b.op("Add", [x, pe], "emb/Add"), "embeddings.ln", hidden)
    m = b.op("Unsqueeze", [mask, b.i64("c/axes12", [1, 2])], "mask/Unsqueeze")
    m = b.op("Cast", [m], "mask/Cast", to=FLOAT)
    m = b.op("Sub", [b.f32("c/onef", 1.0), m], "mask/Sub")
    m = b.op("Mul", [m, b.f32("c/fmin", float(np.finfo(np.float32).min))], "mask/Mul")
    for i in range(layers):
        x = _encoder_layer(b, x, f"encoder.layer.{i}", hidden, heads, m, pre_ln=False)
    out = b.op("Identity", [x], "out/Identity", outputs=["last_hidden_state"])
    b.output(out, FLOAT, ["s0", "s1", hidden])
    return unname_intermediate_dims(b.model(opset=18, doc=first_doc_paragraph(dynamo_bert)))


def torchscript_vit(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    image: int = 64,
    patch: int = 8,
    classes: int = 10,
    seed: int = 4,
) -> onnx.ModelProto:
    """ViT with only the batch symbolic: patch Conv, CLS Expand from Shape(x)[0], pre-LN blocks."""
    b = GraphBuilder("torch_jit", seed)
    x = b.input("pixel_values", FLOAT, ["batch_size", 3, image, image])
    y = b.op(
        "Conv",
        [x, b.weight("patch.weight", [hidden, 3, patch, patch]), b.weight("patch.bias", [hidden])],
        "patch/Conv",
        kernel_shape=[patch, patch],
        strides=[patch, patch],
    )
    batch = _dims_of(b, y, "patch/batch", [0])
    flat = b.op("Concat", [batch, b.i64("c/flat", [hidden, -1])], "patch/Concat", axis=0)
    y = b.op("Reshape", [y, flat], "patch/Reshape")
    y = b.op("Transpose", [y], "patch/Transpose", perm=[0, 2, 1])
    cls_shape = b.op("Concat", [batch, b.i64("c/cls_rest", [1, hidden])], "cls/Concat", axis=0)
    cls = b.op("Expand", [b.weight("cls_token", [1, 1, hidden], std=0.02), cls_shape], "cls/Expand")
    y = b.op("Concat", [cls, y], "tokens/Concat", axis=1)
    tokens = (image // patch) ** 2 + 1
    y = b.op("Add", [y, b.weight("pos_embed", [1, tokens, hidden], std=0.02)], "tokens/Add")
    for i in range(layers):
        y = _encoder_layer(b, y, f"blocks.{i}", hidden, heads, None, pre_ln=True)
    y = _layer_norm(b, y, "norm", hidden)
    first = b.op("Gather", [y, b.i64("c/zero_s", 0)], "head/Gather", axis=1)
    logits = b.op(
        "Gemm",
        [first, b.weight("head.weight", [classes, hidden]), b.weight("head.bias", [classes])],
        "head/Gemm",
        transB=1,
        outputs=["logits"],
    )
    b.output(logits, FLOAT, ["batch_size", classes])
    return unname_intermediate_dims(b.model(opset=17, doc=first_doc_paragraph(torchscript_vit)))


def gpt2_past_decoder(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    vocab: int = 200,
    max_positions: int = 1024,
    seed: int = 5,
) -> onnx.ModelProto:
    """GPT-2 with past_key_values (optimum style): K/V Concat past+seq, mask Sliced by Shape."""
    d = hidden // heads
    b = GraphBuilder("main_graph", seed)
    ids = b.input("input_ids", INT64, ["batch_size", "sequence_length"], value_range=(0, vocab))
    pasts = []
    for i in range(layers):
        pasts.append(
            (
                b.input(
                    f"past_key_values.{i}.key",
                    FLOAT,
                    ["batch_size", heads, "past_sequence_length", d],
                ),
                b.input(
                    f"past_key_values.{i}.value",
                    FLOAT,
                    ["batch_size", heads, "past_sequence_length", d],
                ),
            )
        )
    wte = b.weight("wte.weight", [vocab, hidden], std=0.02)
    x = b.op("Gather", [wte, ids], "wte/Gather")
    past_len = _dims_of(b, pasts[0][0], "pos/past", [2])
    seq_len = _dims_of(b, ids, "pos/seq", [1])
    total = b.op("Add", [past_len, seq_len], "pos/total")
    sq = b.i64("c/axes0", [0])
    pos = b.op(
        "Range",
        [
            b.op("Squeeze", [past_len, sq], "pos/Squeeze0"),
            b.op("Squeeze", [total, sq], "pos/Squeeze1"),
            b.i64("c/one_i", 1),
        ],
        "pos/Range",
    )
    x = b.op(
        "Add",
        [
            x,
            b.op(
                "Gather",
                [b.weight("wpe.weight", [max_positions, hidden], std=0.01), pos],
                "wpe/Gather",
            ),
        ],
        "emb/Add",
    )
    bias = b.initializer(
        "attn.bias", np.tril(np.ones((max_positions, max_positions), dtype=bool))[None, None]
    )
    rows = b.op("Slice", [bias, past_len, total, b.i64("c/axis2", [2])], "mask/Slice_rows")
    causal = b.op(
        "Slice", [rows, b.i64("c/zero1", [0]), total, b.i64("c/axis3", [3])], "mask/Slice_cols"
    )
    neg = b.f32("c/fmin", float(np.finfo(np.float32).min))
    for i in range(layers):
        p = f"h.{i}"
        h = _layer_norm(b, x, f"{p}.ln_1", hidden)
        qkv = _linear(b, h, f"{p}.attn.c_attn", hidden, 3 * hidden)
        q, k, v = b.op(
            "Split", [qkv, b.i64("c/split", [hidden] * 3)], f"{p}/Split", outputs=3, axis=2
        )
        q = _heads_dynamo(b, q, f"{p}/q", heads, d, [0, 2, 1, 3])
        k = _heads_dynamo(b, k, f"{p}/k", heads, d, [0, 2, 1, 3])
        v = _heads_dynamo(b, v, f"{p}/v", heads, d, [0, 2, 1, 3])
        k = b.op(
            "Concat",
            [pasts[i][0], k],
            f"{p}/present_k/Concat",
            axis=2,
            outputs=[f"present.{i}.key"],
        )
        v = b.op(
            "Concat",
            [pasts[i][1], v],
            f"{p}/present_v/Concat",
            axis=2,
            outputs=[f"present.{i}.value"],
        )
        kt = b.op("Transpose", [k], f"{p}/kt", perm=[0, 1, 3, 2])
        s = b.op("MatMul", [q, kt], f"{p}/scores/MatMul")
        s = b.op("Div", [s, b.f32("c/sqrt_d", math.sqrt(d))], f"{p}/scores/Div")
        s = b.op("Where", [causal, s, neg], f"{p}/scores/Where")
        pr = b.op("Softmax", [s], f"{p}/Softmax", axis=-1)
        ctx = b.op("MatMul", [pr, v], f"{p}/ctx/MatMul")
        ctx = b.op("Transpose", [ctx], f"{p}/ctx/Transpose", perm=[0, 2, 1, 3])
        bs = _dims_of(b, ctx, f"{p}/ctx/bs", [0, 1])
        ctx = b.op(
            "Reshape",
            [ctx, b.op("Concat", [bs, b.i64("c/h", [hidden])], f"{p}/ctx/Concat", axis=0)],
            f"{p}/ctx/Reshape",
        )
        x = b.op("Add", [x, _linear(b, ctx, f"{p}.attn.c_proj", hidden, hidden)], f"{p}/res1")
        h = _layer_norm(b, x, f"{p}.ln_2", hidden)
        h = _linear(
            b,
            _gelu(b, _linear(b, h, f"{p}.mlp.c_fc", hidden, 4 * hidden), f"{p}/gelu"),
            f"{p}.mlp.c_proj",
            4 * hidden,
            hidden,
        )
        x = b.op("Add", [x, h], f"{p}/res2")
        b.output(
            f"present.{i}.key",
            FLOAT,
            ["batch_size", heads, "past_sequence_length + sequence_length", d],
        )
        b.output(
            f"present.{i}.value",
            FLOAT,
            ["batch_size", heads, "past_sequence_length + sequence_length", d],
        )
    x = _layer_norm(b, x, "ln_f", hidden)
    logits = b.op(
        "MatMul",
        [x, b.op("Transpose", [wte], "lm_head/Transpose", perm=[1, 0])],
        "lm_head/MatMul",
        outputs=["logits"],
    )
    b.output(logits, FLOAT, ["batch_size", "sequence_length", vocab])
    b.outputs.insert(0, b.outputs.pop())
    return unname_intermediate_dims(b.model(opset=17, doc=first_doc_paragraph(gpt2_past_decoder)))


def tf2onnx_cnn(
    image: int = 64, channels: int = 16, classes: int = 8, seed: int = 6
) -> onnx.ModelProto:
    """Keras NHWC CNN via tf2onnx: unk__ batch, Transpose to NCHW, Reshape(-1, C), MatMul Dense."""
    b = GraphBuilder("tf2onnx", seed)
    x = b.input("input_1", FLOAT, ["unk__612", image, image, 3])
    y = b.op("Transpose", [x], "model/conv2d/Conv2D__6", perm=[0, 3, 1, 2])
    c_in = 3
    for i, c in enumerate((channels, 2 * channels, 4 * channels)):
        w = b.weight(f"model/conv2d_{i}/Conv2D/ReadVariableOp:0", [c, c_in, 3, 3])
        y = b.op(
            "Conv",
            [y, w, b.weight(f"model/conv2d_{i}/BiasAdd/ReadVariableOp:0", [c])],
            f"model/conv2d_{i}/Relu",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        )
        y = b.op("Relu", [y], f"model/conv2d_{i}/Relu_act")
        c_in = c
    y = b.op("Transpose", [y], "model/to_nhwc", perm=[0, 2, 3, 1])
    y = b.op("ReduceMean", [y], "model/global_average_pooling2d/Mean", axes=[1, 2], keepdims=0)
    shape = b.op(
        "Concat",
        [b.i64("c/neg1", [-1]), b.i64("c/ch", [4 * channels])],
        "model/flatten/Const",
        axis=0,
    )
    y = b.op("Reshape", [y, shape], "model/flatten/Reshape")
    y = b.op(
        "MatMul",
        [y, b.weight("model/dense/MatMul/ReadVariableOp:0", [4 * channels, classes])],
        "model/dense/MatMul",
    )
    y = b.op(
        "Add",
        [y, b.weight("model/dense/BiasAdd/ReadVariableOp:0", [classes])],
        "model/dense/BiasAdd",
    )
    out = b.op("Softmax", [y], "model/dense/Softmax", axis=-1, outputs=["dense"])
    b.output(out, FLOAT, ["unk__613", classes])
    return unname_intermediate_dims(
        b.model(opset=13, doc=first_doc_paragraph(tf2onnx_cnn)), "unk__"
    )


def _paddle_ln(b: GraphBuilder, x: str, scope: str, hidden: int) -> str:
    """Paddle's hand-written LayerNorm: ReduceMean-Sub-Pow-ReduceMean-Add-Sqrt-Div, scale, shift."""
    mean = b.op("ReduceMean", [x], f"{scope}/mean", axes=[-1], keepdims=1)
    d = b.op("Sub", [x, mean], f"{scope}/sub")
    var = b.op(
        "ReduceMean",
        [b.op("Pow", [d, b.f32("c/two", 2.0)], f"{scope}/pow")],
        f"{scope}/var",
        axes=[-1],
        keepdims=1,
    )
    std = b.op(
        "Sqrt", [b.op("Add", [var, b.f32("c/eps", 1e-6)], f"{scope}/add_eps")], f"{scope}/sqrt"
    )
    y = b.op("Div", [d, std], f"{scope}/div")
    y = b.op(
        "Mul",
        [
            y,
            b.initializer(
                f"{scope}.w", (1 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32)
            ),
        ],
        f"{scope}/scale",
    )
    return b.op("Add", [y, b.weight(f"{scope}.b", [hidden])], f"{scope}/shift")


def paddle_ocr_rec(channels: int = 32, classes: int = 40, seed: int = 7) -> onnx.ModelProto:
    """PaddleOCR-like recogniser via paddle2onnx: -1 dims, shape-tensor Reshape, hand-written LN."""
    b = GraphBuilder("paddle-onnx", seed)
    x = b.input("x", FLOAT, [-1, 3, 48, -1])
    y, c_in = x, 3
    for i, (c, s) in enumerate(
        ((channels, [2, 2]), (channels, [2, 1]), (2 * channels, [2, 1]), (2 * channels, [2, 1]))
    ):
        y = b.op(
            "Conv",
            [y, b.weight(f"conv{i}.w_0", [c, c_in, 3, 3])],
            f"p2o.Conv.{i}",
            kernel_shape=[3, 3],
            strides=s,
            pads=[1, 1, 1, 1],
        )
        y = b.op(
            "BatchNormalization",
            [
                y,
                b.initializer(f"bn{i}.scale", b.rng.uniform(0.5, 1.5, c).astype(np.float32)),
                b.weight(f"bn{i}.offset", [c]),
                b.weight(f"bn{i}.mean", [c]),
                b.initializer(f"bn{i}.var", b.rng.uniform(0.5, 2.0, c).astype(np.float32)),
            ],
            f"p2o.BatchNormalization.{i}",
            epsilon=1e-5,
        )
        y = b.op("HardSwish", [y], f"p2o.HardSwish.{i}")
        c_in = c
    y = b.op("AveragePool", [y], "p2o.Pool.0", kernel_shape=[3, 2], strides=[3, 2])
    hidden = c_in
    sh = b.op("Shape", [y], "p2o.Shape.0")
    nw = b.op(
        "Slice", [sh, b.i64("c/s0", [0]), b.i64("c/s1", [1]), b.i64("c/ax0", [0])], "p2o.Slice.0"
    )
    target = b.op("Concat", [nw, b.i64("c/cm1", [hidden, -1])], "p2o.Concat.0", axis=0)
    y = b.op("Reshape", [y, target], "p2o.Reshape.0")
    y = b.op("Transpose", [y], "p2o.Transpose.0", perm=[0, 2, 1])
    for i in range(2):
        h = _paddle_ln(b, y, f"svtr.{i}.norm1", hidden)
        h = b.op("Sigmoid", [_linear(b, h, f"svtr.{i}.mixer", hidden, hidden)], f"svtr.{i}/act")
        y = b.op("Add", [y, h], f"svtr.{i}/res")
    y = _paddle_ln(b, y, "svtr.norm", hidden)
    logits = _linear(b, y, "ctc.fc", hidden, classes)
    out = b.op("Softmax", [logits], "p2o.Softmax.0", axis=2, outputs=["softmax_0.tmp_0"])
    b.output(out, FLOAT, [-1, -1, classes])
    model = b.model(opset=14, doc=first_doc_paragraph(paddle_ocr_rec))
    return unname_intermediate_dims(model, "-1")


ALL_EXPORTERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "dynamo_bert": dynamo_bert,
    "torchscript_vit": torchscript_vit,
    "gpt2_past_decoder": gpt2_past_decoder,
    "tf2onnx_cnn": tf2onnx_cnn,
    "paddle_ocr_rec": paddle_ocr_rec,
}
