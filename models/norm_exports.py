"""Norms as exporters write them out, for the hand-norm folds (passes/hand_norms.py).

- `dynamo_group_norm1`: timm MobileViTv2's GroupNorm1 (``nn.GroupNorm(1, C)``) through torch's
  dynamo exporter at opset 18: ``native_group_norm`` decomposed by ``var_mean`` over a reshape to
  ``(N, 1, -1)`` (the target built from ``Shape(x)`` for a dynamic batch), ``Sub``, ``Mul(d, d)``,
  ``ReduceMean``, ``+ eps``, ``Sqrt``, ``Reciprocal``, ``Mul``, a reshape back to ``Shape(x)``,
  then the per-channel affine ``Mul``/``Add`` with ``(C, 1, 1)`` weights; conv + SiLU around it.
- `llama_hand_rms`: a Llama-shaped decoder (embedding, pre-norm attention with a causal mask,
  SiLU-gated MLP, final norm, LM head) whose RMSNorms are hand-written as TorchScript writes
  HF ``LlamaRMSNorm``: ``Pow(x, 2)``, ``ReduceMean(-1)``, ``+ eps``, ``Sqrt``, ``Div(1, ·)``,
  ``Mul(x, ·)``, ``Mul(weight, ·)``; opset 17. Rotary embeddings are left out (the norms are
  what it is for).
- `paddle_ln_after_transpose`: PP-OCRv4's recogniser neck as paddle2onnx writes it at opset 12:
  Conv -> Swish -> ``Reshape`` to ``Concat(Slice(Shape(x), 0, 2), [-1])`` -> ``Transpose(0, 2, 1)``
  -> Paddle's hand LayerNorm (``ReduceMean(axes=[-1])``, ``Sub``, ``Pow(2)``, ``ReduceMean``,
  ``Add(eps)``, ``Sqrt``, ``Div``, ``Mul(gamma)``, ``Add(beta)``) -> Linear. ONNX inference loses
  the reshaped value's rank (the target shape is computed), so the norm's axis size is known only
  from its weights.
- `jax_moments_ln`: a flax LayerNorm through jax2tf and tf2onnx (opset 15; Google's Magika ships
  one): the variance as ``E[x^2] - E[x]^2`` from ``ReduceSum(keepdims=0) * (1/n)``, clamped by
  ``Max(0, .)``, each statistic ``Reshape``'d and ``Expand``'ed back, ``Rsqrt`` as ``Sqrt`` +
  ``Reciprocal``, the scale multiplied into it, then ``(x - mean) * inv + bias``.
"""

from __future__ import annotations

import numpy as np
import onnx

from models._graph import FLOAT, GraphBuilder, first_doc_paragraph


def dynamo_group_norm1(
    blocks: int = 3, channels: int = 16, size: int = 8, seed: int = 70
) -> onnx.ModelProto:
    """Conv -> GroupNorm(1, C) as dynamo decomposes it -> SiLU, `blocks` times; batch dynamic."""
    b = GraphBuilder("dynamo_group_norm1", seed)
    x = b.input("x", FLOAT, ["batch", channels, size, size])
    axes = b.i64("val_axes_2", [2])
    for i in range(blocks):
        s = f"stages.{i}.norm"
        c = b.op(
            "Conv",
            [x, b.weight(f"stages.{i}.conv.weight", [channels, channels, 3, 3])],
            f"node_conv2d_{i}",
            pads=[1, 1, 1, 1],
        )
        shape = b.op("Shape", [c], f"{s}/node_Shape")
        n = b.op("Slice", [shape, b.i64("val_0", [0]), b.i64("val_1", [1])], f"{s}/node_Slice")
        target = b.op("Concat", [n, b.i64("val_1_neg1", [1, -1])], f"{s}/node_Concat", axis=0)
        r = b.op("Reshape", [c, target], f"{s}/node_Reshape")
        mean = b.op("ReduceMean", [r, axes], f"{s}/node_ReduceMean", keepdims=1)
        d = b.op("Sub", [r, mean], f"{s}/node_Sub")
        sq = b.op("Mul", [d, d], f"{s}/node_Mul")
        var = b.op("ReduceMean", [sq, axes], f"{s}/node_ReduceMean_1", keepdims=1)
        ve = b.op("Add", [var, b.f32("val_eps", 1e-5)], f"{s}/node_Add")
        rstd = b.op("Reciprocal", [b.op("Sqrt", [ve], f"{s}/node_Sqrt")], f"{s}/node_Reciprocal")
        normed = b.op("Mul", [d, rstd], f"{s}/node_Mul_1")
        back = b.op(
            "Reshape", [normed, b.op("Shape", [c], f"{s}/node_Shape_1")], f"{s}/node_Reshape_1"
        )
        w = b.initializer(
            f"{s}.weight",
            (1 + (0.1 * b.rng.standard_normal((channels, 1, 1))).astype(np.float32)).astype(
                np.float32
            ),
        )
        bias = b.initializer(
            f"{s}.bias", (0.1 * b.rng.standard_normal((channels, 1, 1))).astype(np.float32)
        )
        aff = b.op("Add", [b.op("Mul", [back, w], f"{s}/node_Mul_2"), bias], f"{s}/node_Add_1")
        x = str(
            b.op("Mul", [aff, b.op("Sigmoid", [aff], f"act_{i}/node_Sigmoid")], f"act_{i}/node_Mul")
        )
    b.op("Identity", [x], "output", outputs=["y"])
    b.output("y", FLOAT, ["batch", channels, size, size])
    return b.model(opset=18, doc=first_doc_paragraph(dynamo_group_norm1))


def llama_hand_rms(
    layers: int = 14,
    hidden: int = 64,
    heads: int = 4,
    seq: int = 16,
    vocab: int = 128,
    seed: int = 71,
) -> onnx.ModelProto:
    """A Llama-shaped decoder whose 2 * layers + 1 RMSNorms are written out by hand."""
    b = GraphBuilder("llama_hand_rms", seed)
    ids = b.input("input_ids", np.int64, [1, seq], value_range=(0, vocab))
    x = b.op(
        "Gather",
        [b.weight("model.embed_tokens.weight", [vocab, hidden], std=1.0), ids],
        "/model/embed_tokens/Gather",
    )
    dh = hidden // heads
    causal = np.triu(np.full((seq, seq), -1e4, np.float32), 1)[None, None]
    mask = b.initializer("causal_mask", causal)

    def rms(v: str, scope: str) -> str:
        p = b.op("Pow", [v, b.f32("two", 2.0)], f"{scope}/Pow")
        m = b.op("ReduceMean", [p], f"{scope}/ReduceMean", axes=[-1], keepdims=1)
        m = b.op("Add", [m, b.f32("eps", 1e-6)], f"{scope}/Add")
        inv = b.op("Div", [b.f32("one", 1.0), b.op("Sqrt", [m], f"{scope}/Sqrt")], f"{scope}/Div")
        v = b.op("Mul", [v, inv], f"{scope}/Mul")
        w = b.initializer(
            f"{scope}.weight", (1 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32)
        )
        return str(b.op("Mul", [w, v], f"{scope}/Mul_1"))

    def linear(v: str, name: str, n_in: int, n_out: int) -> str:
        w = b.weight(f"{name}.weight", [n_in, n_out])
        return str(b.op("MatMul", [v, w], f"/{name}/MatMul"))

    def heads_of(v: str, scope: str) -> str:
        v = b.op("Reshape", [v, b.i64("split_shape", [1, seq, heads, dh])], f"{scope}/Reshape")
        return str(b.op("Transpose", [v], f"{scope}/Transpose", perm=[0, 2, 1, 3]))

    for i in range(layers):
        s = f"model.layers.{i}"
        h = rms(x, f"/{s}/input_layernorm")
        q, k, v = (
            heads_of(linear(h, f"{s}.self_attn.{n}_proj", hidden, hidden), f"/{s}/{n}")
            for n in "qkv"
        )
        kt = b.op("Transpose", [k], f"/{s}/kt", perm=[0, 1, 3, 2])
        sc = b.op(
            "Mul",
            [b.op("MatMul", [q, kt], f"/{s}/scores"), b.f32("scale", 1 / np.sqrt(dh))],
            f"/{s}/scaled",
        )
        sc = b.op("Add", [sc, mask], f"/{s}/masked")
        a = b.op("MatMul", [b.op("Softmax", [sc], f"/{s}/Softmax", axis=-1), v], f"/{s}/context")
        a = b.op("Transpose", [a], f"/{s}/merge/Transpose", perm=[0, 2, 1, 3])
        a = b.op("Reshape", [a, b.i64("merge_shape", [1, seq, hidden])], f"/{s}/merge/Reshape")
        x = str(b.op("Add", [x, linear(a, f"{s}.self_attn.o_proj", hidden, hidden)], f"/{s}/Add"))
        h = rms(x, f"/{s}/post_attention_layernorm")
        gate = linear(h, f"{s}.mlp.gate_proj", hidden, 2 * hidden)
        silu = b.op("Mul", [gate, b.op("Sigmoid", [gate], f"/{s}/mlp/Sigmoid")], f"/{s}/mlp/silu")
        up = linear(h, f"{s}.mlp.up_proj", hidden, 2 * hidden)
        h = b.op("Mul", [silu, up], f"/{s}/mlp/Mul")
        x = str(
            b.op("Add", [x, linear(h, f"{s}.mlp.down_proj", 2 * hidden, hidden)], f"/{s}/Add_1")
        )
    h = rms(x, "/model/norm")
    b.op(
        "MatMul",
        [h, b.weight("lm_head.weight", [hidden, vocab])],
        "/lm_head/MatMul",
        outputs=["logits"],
    )
    b.output("logits", FLOAT, [1, seq, vocab])
    return b.model(opset=17, doc=first_doc_paragraph(llama_hand_rms))


def paddle_ln_after_transpose(
    channels: int = 32, width: int = 16, norms: int = 2, seed: int = 72
) -> onnx.ModelProto:
    """paddle2onnx at opset 12: a computed Reshape, a Transpose, then hand LayerNorms."""
    b = GraphBuilder("paddle_ln_after_transpose", seed)
    x = b.input("x", FLOAT, ["p2o.DynamicDimension.0", channels, 1, "p2o.DynamicDimension.1"])
    h = b.op("Conv", [x, b.weight("conv2d_0.w_0", [channels, channels, 1, 1])], "p2o.Conv.0")
    h = b.op("Mul", [h, b.op("Sigmoid", [h], "p2o.Sigmoid.0")], "p2o.Mul.0")
    shape = b.op("Shape", [h], "p2o.Shape.0")
    head = b.op(
        "Slice",
        [shape, b.i64("p2o.helper.constant.0", [0]), b.i64("p2o.helper.constant.1", [2])],
        "p2o.Slice.0",
    )
    target = b.op("Concat", [head, b.i64("p2o.helper.constant.2", [-1])], "p2o.Concat.0", axis=0)
    h = b.op("Reshape", [h, target], "p2o.Reshape.0")
    h = b.op("Transpose", [h], "p2o.Transpose.0", perm=[0, 2, 1])
    for i in range(norms):
        mean = b.op("ReduceMean", [h], f"p2o.ReduceMean.{2 * i}", axes=[-1], keepdims=1)
        d = b.op("Sub", [h, mean], f"p2o.Sub.{i}")
        sq = b.op("Pow", [d, b.f32("p2o.helper.constant.3", 2.0)], f"p2o.Pow.{i}")
        var = b.op("ReduceMean", [sq], f"p2o.ReduceMean.{2 * i + 1}", axes=[-1], keepdims=1)
        std = b.op(
            "Sqrt",
            [b.op("Add", [var, b.f32("p2o.helper.constant.4", 1e-6)], f"p2o.Add.{2 * i}")],
            f"p2o.Sqrt.{i}",
        )
        y = b.op("Div", [d, std], f"p2o.Div.{i}")
        gamma = (1 + 0.1 * b.rng.standard_normal(channels)).astype(np.float32)
        y = b.op("Mul", [y, b.initializer(f"layer_norm_{i}.w_0", gamma)], f"p2o.Mul.{i + 1}")
        y = b.op("Add", [y, b.weight(f"layer_norm_{i}.b_0", [channels])], f"p2o.Add.{2 * i + 1}")
        y = b.op(
            "MatMul", [y, b.weight(f"linear_{i}.w_0", [channels, channels])], f"p2o.MatMul.{i}"
        )
        h = b.op("Add", [y, b.weight(f"linear_{i}.b_0", [channels])], f"p2o.Add.lin{i}")
    b.op("Identity", [h], "p2o.Identity.0", outputs=["y"])
    b.output("y", FLOAT, ["p2o.DynamicDimension.2", "p2o.DynamicDimension.3", channels])
    return b.model(opset=12, doc=first_doc_paragraph(paddle_ln_after_transpose))


def jax_moments_ln(features: int = 48, hidden: int = 64, seed: int = 73) -> onnx.ModelProto:
    """Dense -> flax LayerNorm in jax2tf/tf2onnx's E[x^2] - E[x]^2 spelling -> Dense (opset 15)."""
    b = GraphBuilder("jax_moments_ln", seed)
    s = "jax2tf_model_/pjit_model_/LayerNorm_0"
    x = b.input("x", FLOAT, ["unk__10", features])
    h = b.op(
        "MatMul",
        [x, b.weight(f"{s}/../Dense_0/kernel", [features, hidden])],
        "jax2tf_model_/pjit_model_/Dense_0/MatMul",
    )
    shape = b.op("Shape", [h], f"{s}/Shape")
    head = b.op(
        "Slice",
        [
            shape,
            b.i64("const_starts__0", [0]),
            b.i64("const_ends__1", [1]),
            b.i64("const_axes__2", [0]),
        ],
        f"{s}/strided_slice",
    )
    keep = b.op("Concat", [head, b.i64("const_fold_opt__3", [1])], f"{s}/shape_Concat", axis=0)
    axes = b.i64("const_axes__4", [1])
    inv_n = b.f32("const_fold_opt__5", [1.0 / hidden])
    total = b.op("ReduceSum", [h, axes], f"{s}/Sum", keepdims=0, noop_with_empty_axes=1)
    mean = b.op("Mul", [total, inv_n], f"{s}/truediv")
    squares = b.op("Mul", [h, h], f"{s}/Square")
    total2 = b.op("ReduceSum", [squares, axes], f"{s}/Sum_1", keepdims=0, noop_with_empty_axes=1)
    mean2 = b.op("Mul", [total2, inv_n], f"{s}/truediv_1")
    var = b.op("Sub", [mean2, b.op("Mul", [mean, mean], f"{s}/Square_1")], f"{s}/Sub")
    var = b.op("Max", [b.f32("const_fold_opt__6", [0.0]), var], f"{s}/Maximum")
    var = b.op(
        "Expand", [b.op("Reshape", [var, keep], f"{s}/Reshape_1"), keep], f"{s}/BroadcastTo_1"
    )
    ve = b.op("Add", [var, b.f32("const_fold_opt__7", [1e-6])], f"{s}/AddV2")
    inv = b.op("Reciprocal", [b.op("Sqrt", [ve], f"{s}/Rsqrt")], f"{s}/Rsqrt__1")
    gamma = (1 + 0.1 * b.rng.standard_normal((1, hidden))).astype(np.float32)
    inv = b.op("Mul", [inv, b.initializer(f"{s}/scale", gamma)], f"{s}/Mul")
    centre = b.op(
        "Expand", [b.op("Reshape", [mean, keep], f"{s}/Reshape"), keep], f"{s}/BroadcastTo"
    )
    y = b.op("Mul", [b.op("Sub", [h, centre], f"{s}/Sub_1"), inv], f"{s}/Mul_1")
    y = b.op("Add", [y, b.weight(f"{s}/bias", [1, hidden])], f"{s}/AddV2_1")
    b.op(
        "MatMul",
        [y, b.weight("Dense_1/kernel", [hidden, 8])],
        "jax2tf_model_/pjit_model_/Dense_1/MatMul",
        outputs=["logits"],
    )
    b.output("logits", FLOAT, ["unk__11", 8])
    return b.model(opset=15, doc=first_doc_paragraph(jax_moments_ln))
