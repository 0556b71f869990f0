"""Small FP32 models where a plain O3 conversion to FP16 fails, and the nodes responsible.

Each builder returns ``(model, responsible)``: the node names that must stay FP32 for the FP16
model to match the original, which ``--auto`` is expected to find, no more. Calibration inputs
come from :func:`calibration` (standard normal unless the builder needs another distribution).
Sizes are small so tests run in well under a second each.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from models._graph import BOOL, FLOAT, INT64, GraphBuilder, first_doc_paragraph

Built = tuple[onnx.ModelProto, list[str]]


def reduce_sum_overflow(features: int = 32, width: int = 16384, seed: int = 30) -> Built:
    """Mean |activation| computed as ReduceSum then a scale: the sum passes 65504 in FP16.

    x [batch, features] -> MatMul [features, width] -> Mul 8 -> Abs -> ReduceSum (~1e5)
    -> Mul 1/width -> Add bias. Only the sum and the scale that reads it must stay FP32.
    """
    b = GraphBuilder("reduce_sum_overflow", seed)
    x = b.input("x", FLOAT, ["batch", features])
    h = b.op("MatMul", [x, b.weight("proj/weight", [features, width])], "proj/MatMul")
    h = b.op("Mul", [h, b.f32("const/eight", 8.0)], "proj/Mul")
    a = b.op("Abs", [h], "act/Abs")
    s = b.op("ReduceSum", [a, b.i64("const/axes_last", [-1])], "sum/ReduceSum", keepdims=1)
    m = b.op("Mul", [s, b.f32("const/inv_width", 1.0 / width)], "sum/Scale")
    y = b.op("Add", [m, b.f32("const/bias", 0.5)], "out/Add", outputs=["y"])
    b.output(y, FLOAT, ["batch", 1])
    return b.model(doc=first_doc_paragraph(reduce_sum_overflow)), ["sum/ReduceSum", "sum/Scale"]


def reduce_mean_sum_overflow(features: int = 32, width: int = 4096, seed: int = 37) -> Built:
    """A mean over 4096 values near 20: ORT CUDA's ReduceMean holds the sum (~8e4) in FP16.

    x [batch, features] -> MatMul [features, width] -> Abs -> Mul 25 -> ReduceMean(-1) -> Sub
    from the features -> Mul 0.01. Every value is small; only the sum the kernel writes before
    dividing passes 65504 (targets/ort_cuda_accumulation.json), so only the ReduceMean must
    stay FP32. 2-D, so it is no spatial mean (run as GlobalAveragePool on ort-cuda).
    """
    b = GraphBuilder("reduce_mean_sum_overflow", seed)
    x = b.input("x", FLOAT, ["batch", features])
    h = b.op("MatMul", [x, b.weight("proj/weight", [features, width])], "proj/MatMul")
    a = b.op("Abs", [h], "act/Abs")
    a = b.op("Mul", [a, b.f32("const/gain", 25.0)], "act/Mul")
    m = b.op("ReduceMean", [a], "mean/ReduceMean", axes=[-1], keepdims=1)
    d = b.op("Sub", [a, m], "centre/Sub")
    y = b.op("Mul", [d, b.f32("const/scale", 0.01)], "out/Mul", outputs=["y"])
    b.output(y, FLOAT, ["batch", width])
    return b.model(doc=first_doc_paragraph(reduce_mean_sum_overflow)), ["mean/ReduceMean"]


def matmul_overflow(features: int = 32, hidden: int = 4096, seed: int = 31) -> Built:
    """A long MatMul accumulation: Relu features times positive weights sum past 65504.

    x -> MatMul -> Relu -> MatMul [hidden, 4] with weights in [40, 80] (~1e5) -> Mul 1e-4.
    The accumulating MatMul and the scale that reads its output must stay FP32.
    """
    b = GraphBuilder("matmul_overflow", seed)
    x = b.input("x", FLOAT, ["batch", features])
    h = b.op("MatMul", [x, b.weight("fc1/weight", [features, hidden])], "fc1/MatMul")
    h = b.op("Relu", [h], "fc1/Relu")
    w2 = b.initializer("fc2/weight", b.rng.uniform(40.0, 80.0, (hidden, 4)).astype(np.float32))
    z = b.op("MatMul", [h, w2], "fc2/MatMul")
    y = b.op("Mul", [z, b.f32("const/scale", 1e-4)], "fc2/Scale", outputs=["y"])
    b.output(y, FLOAT, ["batch", 4])
    return b.model(doc=first_doc_paragraph(matmul_overflow)), ["fc2/MatMul", "fc2/Scale"]


def exp_overflow(features: int = 16, classes: int = 64, seed: int = 32) -> Built:
    """Softmax written by hand without subtracting the max: Exp of logits up to ~40 overflows.

    x -> MatMul (std 3) -> Exp -> ReduceSum -> Div. Exp, the sum and the division must stay FP32.
    """
    b = GraphBuilder("exp_overflow", seed)
    x = b.input("x", FLOAT, ["batch", features])
    logits = b.op(
        "MatMul", [x, b.weight("head/weight", [features, classes], std=3.0)], "head/MatMul"
    )
    e = b.op("Exp", [logits], "softmax/Exp")
    s = b.op("ReduceSum", [e, b.i64("const/axes_last", [-1])], "softmax/ReduceSum", keepdims=1)
    y = b.op("Div", [e, s], "softmax/Div", outputs=["probs"])
    b.output(y, FLOAT, ["batch", classes])
    return b.model(doc=first_doc_paragraph(exp_overflow)), [
        "softmax/Exp",
        "softmax/ReduceSum",
        "softmax/Div",
    ]


def hand_variance(features: int = 256, seed: int = 33, *, normalise: bool = False) -> Built:
    """A hand-computed spread: mean, x - mean, square, mean, sqrt, then (x - mean) - std.

    Which nodes fail depends on the data (see :func:`calibration`): wide inputs (std 150) make
    the square overflow (``var/Mul`` and ``var/ReduceMean`` that reads it); inputs with a large
    offset and a small spread (100 + 0.05 N) lose everything in ``x - mean`` once x and the mean
    are rounded (``mean/ReduceMean`` and ``center/Sub``). With ``normalise`` the last step is
    (x - mean) / std, a hand-written LayerNorm, which the converter runs as one fused norm with
    FP32 statistics (passes/hand_norms.py): then only the value it reads can still lose precision.
    """
    b = GraphBuilder("hand_variance", seed)
    x = b.input("x", FLOAT, ["batch", features])
    mean = b.op("ReduceMean", [x], "mean/ReduceMean", axes=[-1], keepdims=1)
    d = b.op("Sub", [x, mean], "center/Sub")
    sq = b.op("Mul", [d, d], "var/Mul")
    var = b.op("ReduceMean", [sq], "var/ReduceMean", axes=[-1], keepdims=1)
    var = b.op("Add", [var, b.f32("const/eps", 1e-5)], "var/Add")
    std = b.op("Sqrt", [var], "std/Sqrt")
    last = ("Div", "norm/Div") if normalise else ("Sub", "spread/Sub")
    y = b.op(last[0], [d, std], last[1], outputs=["y"])
    b.output(y, FLOAT, ["batch", features])
    return b.model(opset=17, doc=first_doc_paragraph(hand_variance)), []


VARIANCE_OVERFLOW = ["var/Mul", "var/ReduceMean"]
VARIANCE_CANCELLATION = ["mean/ReduceMean", "center/Sub"]


def mlp_ok(features: int = 32, hidden: int = 64, seed: int = 34) -> Built:
    """A small MLP that FP16 handles at O3 (nothing needs to stay FP32)."""
    b = GraphBuilder("mlp_ok", seed)
    x = b.input("x", FLOAT, ["batch", features])
    h = b.op("MatMul", [x, b.weight("fc1/weight", [features, hidden])], "fc1/MatMul")
    h = b.op("Add", [h, b.weight("fc1/bias", [hidden])], "fc1/Add")
    h = b.op("Relu", [h], "fc1/Relu")
    y = b.op("MatMul", [h, b.weight("fc2/weight", [hidden, 8])], "fc2/MatMul", outputs=["y"])
    b.output(y, FLOAT, ["batch", 8])
    return b.model(doc=first_doc_paragraph(mlp_ok)), []


def if_exp_overflow(features: int = 16, classes: int = 32, seed: int = 35) -> Built:
    """An If whose then-branch computes a max-free softmax (Exp overflows inside the body).

    The overflow is invisible from the main graph until the If's output turns NaN, so the If
    (with its body) is what must stay FP32; the MatMul in front of it stays low.
    """
    b = GraphBuilder("if_exp_overflow", seed)
    x = b.input("x", FLOAT, ["batch", features])
    cond = b.input("use_softmax", BOOL, [])
    logits = b.op(
        "MatMul", [x, b.weight("head/weight", [features, classes], std=3.0)], "head/MatMul"
    )
    then_b = b.subgraph("then_branch")
    e = then_b.op("Exp", [logits], "then/Exp")
    s = then_b.op("ReduceSum", [e, then_b.i64("then/axes", [-1])], "then/ReduceSum", keepdims=1)
    p = then_b.op("Div", [e, s], "then/Div")
    then_b.output(p, FLOAT, ["batch", classes])
    else_b = b.subgraph("else_branch")
    q = else_b.op("Mul", [logits, else_b.f32("else/half", 0.5)], "else/Mul")
    else_b.output(q, FLOAT, ["batch", classes])
    y = b.op(
        "If",
        [cond],
        "branch/If",
        outputs=["y"],
        then_branch=then_b.graph(),
        else_branch=else_b.graph(),
    )
    b.output(y, FLOAT, ["batch", classes])
    return b.model(doc=first_doc_paragraph(if_exp_overflow)), ["branch/If"]


def calibration(
    model: onnx.ModelProto, kind: str = "normal", batch: int = 4, seed: int = 0
) -> dict[str, np.ndarray]:
    """Inputs for the builders: ``normal``, ``wide`` (std 150) or ``offset`` (100 + 0.05 N)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        t = vi.type.tensor_type
        if t.elem_type == BOOL:
            feeds[vi.name] = np.array(True)
            continue
        dims = [d.dim_value if d.HasField("dim_value") else batch for d in t.shape.dim]
        z = rng.standard_normal(dims)
        arr = {"normal": z, "wide": 150.0 * z, "offset": 100.0 + 0.05 * z}[kind]
        feeds[vi.name] = arr.astype(np.float32)
    return feeds


def bert_outliers(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    seq: int = 32,
    vocab: int = 100,
    outlier: float = 200.0,
    seed: int = 36,
) -> Built:
    """BERT encoder as older exporters wrote it (LayerNorm decomposed: ReduceMean, Sub, Pow 2,
    ReduceMean, Add, Sqrt, Div), with outlier features in the residual stream.

    Trained BERTs carry a few hidden dimensions with values in the hundreds (large LayerNorm
    gains there keep them alive); here two dimensions get gain ``outlier``. ``(x - mean)^2`` then
    exceeds 65504 in every LayerNorm: each ``Pow`` and the ``ReduceMean`` that reads it must stay
    FP32, nothing else. Sized like BERT-base with ``hidden=768, heads=12``.
    """
    b = GraphBuilder("bert_outliers", seed)
    ids = b.input("input_ids", INT64, ["batch", seq], value_range=(0, vocab))
    word = b.weight("embeddings/word/weight", [vocab, hidden], std=1.0)
    pos = b.weight("embeddings/position/weight", [seq, hidden], std=0.1)
    x = b.op("Gather", [word, ids], "embeddings/Gather", axis=0)
    x = b.op("Add", [x, pos], "embeddings/Add")
    gain = np.ones(hidden, np.float32)
    gain[[hidden // 7, hidden // 3]] = outlier
    responsible: list[str] = []

    def layer_norm(x: str, scope: str) -> str:
        mean = b.op("ReduceMean", [x], f"{scope}/ReduceMean", axes=[-1], keepdims=1)
        d = b.op("Sub", [x, mean], f"{scope}/Sub")
        sq = b.op("Pow", [d, b.f32("const/two", 2.0)], f"{scope}/Pow")
        var = b.op("ReduceMean", [sq], f"{scope}/ReduceMean_1", axes=[-1], keepdims=1)
        var = b.op("Add", [var, b.f32("const/eps", 1e-12)], f"{scope}/Add")
        std = b.op("Sqrt", [var], f"{scope}/Sqrt")
        y = b.op("Div", [d, std], f"{scope}/Div")
        y = b.op("Mul", [y, b.initializer(f"{scope}/weight", gain.copy())], f"{scope}/Mul")
        responsible.extend([f"{scope}/Pow", f"{scope}/ReduceMean_1"])
        return b.op("Add", [y, b.weight(f"{scope}/bias", [hidden])], f"{scope}/Add_1")

    def linear(x: str, scope: str, n_in: int, n_out: int) -> str:
        y = b.op("MatMul", [x, b.weight(f"{scope}/weight", [n_in, n_out])], f"{scope}/MatMul")
        return b.op("Add", [y, b.weight(f"{scope}/bias", [n_out])], f"{scope}/Add")

    x = layer_norm(x, "embeddings/LayerNorm")
    head_dim = hidden // heads
    split = b.i64("const/split_shape", [0, 0, heads, head_dim])
    merge = b.i64("const/merge_shape", [0, 0, hidden])
    scale = b.f32("const/scale", 1.0 / math.sqrt(head_dim))
    for i in range(layers):
        p = f"encoder/layer{i}"
        qkv = []
        for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            h = linear(x, f"{p}/attn/{name}", hidden, hidden)
            h = b.op("Reshape", [h, split], f"{p}/attn/{name}/Reshape")
            qkv.append(b.op("Transpose", [h], f"{p}/attn/{name}/Transpose", perm=perm))
        s = b.op("MatMul", [qkv[0], qkv[1]], f"{p}/attn/scores/MatMul")
        s = b.op("Mul", [s, scale], f"{p}/attn/scores/Mul")
        s = b.op("Softmax", [s], f"{p}/attn/Softmax", axis=-1)
        c = b.op("MatMul", [s, qkv[2]], f"{p}/attn/context/MatMul")
        c = b.op("Transpose", [c], f"{p}/attn/context/Transpose", perm=[0, 2, 1, 3])
        c = b.op("Reshape", [c, merge], f"{p}/attn/context/Reshape")
        o = linear(c, f"{p}/attn/out", hidden, hidden)
        x = layer_norm(b.op("Add", [o, x], f"{p}/attn/residual"), f"{p}/attn/LayerNorm")
        h = linear(x, f"{p}/ffn/in", hidden, 4 * hidden)
        e = b.op(
            "Erf",
            [b.op("Mul", [h, b.f32("const/inv_sqrt2", 0.7071068)], f"{p}/gelu/Mul")],
            f"{p}/gelu/Erf",
        )
        e = b.op("Add", [e, b.f32("const/one", 1.0)], f"{p}/gelu/Add")
        h = b.op(
            "Mul",
            [b.op("Mul", [h, e], f"{p}/gelu/Mul_1"), b.f32("const/half", 0.5)],
            f"{p}/gelu/Mul_2",
        )
        o = linear(h, f"{p}/ffn/out", 4 * hidden, hidden)
        x = layer_norm(b.op("Add", [o, x], f"{p}/ffn/residual"), f"{p}/ffn/LayerNorm")
    y = b.op("Identity", [x], "encoder/output", outputs=["last_hidden_state"])
    b.output(y, FLOAT, ["batch", seq, hidden])
    return b.model(doc=first_doc_paragraph(bert_outliers)), responsible
