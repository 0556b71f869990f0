"""Transformers as ONNX Runtime runs them: graphs of ``com.microsoft`` fused ops.

What ORT's transformers optimizer (``onnxruntime.transformers.optimizer.optimize_model``) writes for
BERT and GPT-2, and what onnxruntime-genai's model builder writes for a Llama (``-p fp32 -e cuda``):
EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu, FastGelu; GroupQueryAttention
with rotary inside, or RotaryEmbedding + MultiHeadAttention; SimplifiedLayerNormalization in the
ONNX domain (ORT registers it there; onnx has no schema for it), SkipSimplifiedLayerNormalization.
Integer side inputs keep the types the schemas fix: int32 mask_index / seqlens_k /
total_sequence_length, int64 position_ids. Small and seeded: every tensor is deterministic.

``bert_plain`` is the unfused counterpart in the layout ORT's optimizer pattern-matches (torch's
TorchScript export of BERT), so a test can fuse it with ``optimize_model``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from models._graph import FLOAT, INT64, GraphBuilder, first_doc_paragraph

MS = "com.microsoft"
INT32 = onnx.TensorProto.INT32
#: dim names as the exporters write them (onnxruntime-genai, optimum)
PAST = "past_sequence_length"
TOTAL = "total_sequence_length"


def _matmul(b: GraphBuilder, x: str, scope: str, n_in: int, n_out: int) -> str:
    return b.op("MatMul", [x, b.weight(f"{scope}/weight", [n_in, n_out])], f"{scope}/MatMul")


def _ln_weights(b: GraphBuilder, scope: str, hidden: int, beta: bool = True) -> list[str]:
    gamma = (1.0 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32)
    out = [b.initializer(f"{scope}/weight", gamma)]
    if beta:
        out.append(b.weight(f"{scope}/bias", [hidden]))
    return out


def _int32(b: GraphBuilder, x: str, name: str) -> str:
    return b.op("Cast", [x], name, to=INT32)


def fused_bert(
    layers: int = 2,
    hidden: int = 32,
    heads: int = 4,
    vocab: int = 100,
    max_positions: int = 64,
    type_vocab: int = 2,
    seed: int = 30,
) -> onnx.ModelProto:
    """BERT after ORT's optimizer: EmbedLayerNormalization, Attention, SkipLayerNormalization...

    Traps: int64 inputs are cast to int32 for EmbedLayerNormalization, whose int32 ``mask_index``
    output feeds every Attention (fixed-type slots that must stay as they are); the FFN uses
    BiasGelu in even layers and FastGelu in odd ones; ``last_hidden_state`` is a graph output also
    read by the pooler (Gather/Gemm/Tanh).
    """
    b = GraphBuilder("fused_bert", seed)
    ids = b.input("input_ids", INT64, ["batch", "sequence"], value_range=(0, vocab))
    seg = b.input("token_type_ids", INT64, ["batch", "sequence"], value_range=(0, type_vocab))
    mask = b.input("attention_mask", INT64, ["batch", "sequence"], value_range=(0, 2))
    ids32 = _int32(b, ids, "input_ids/Cast")
    seg32 = _int32(b, seg, "token_type_ids/Cast")
    mask32 = _int32(b, mask, "attention_mask/Cast")
    emb = [
        b.weight("embeddings/word_embeddings/weight", [vocab, hidden], std=0.02),
        b.weight("embeddings/position_embeddings/weight", [max_positions, hidden], std=0.02),
        b.weight("embeddings/token_type_embeddings/weight", [type_vocab, hidden], std=0.02),
        *_ln_weights(b, "embeddings/LayerNorm", hidden),
    ]
    x, mask_index = b.op(
        "EmbedLayerNormalization",
        [ids32, seg32, *emb, mask32],
        "embeddings/EmbedLayerNormalization",
        outputs=2,
        domain=MS,
        epsilon=1e-12,
    )
    last = layers - 1
    for i in range(layers):
        p = f"encoder/layer{i}"
        qkv_w = b.weight(f"{p}/attention/qkv/weight", [hidden, 3 * hidden])
        qkv_b = b.weight(f"{p}/attention/qkv/bias", [3 * hidden])
        a = b.op(
            "Attention",
            [x, qkv_w, qkv_b, mask_index],
            f"{p}/attention/Attention",
            domain=MS,
            num_heads=heads,
        )
        a = _matmul(b, a, f"{p}/attention/output/dense", hidden, hidden)
        x = b.op(
            "SkipLayerNormalization",
            [
                a,
                x,
                *_ln_weights(b, f"{p}/attention/output/LayerNorm", hidden),
                b.weight(f"{p}/attention/output/dense/bias", [hidden]),
            ],
            f"{p}/attention/output/SkipLayerNorm",
            domain=MS,
            epsilon=1e-12,
        )
        h = _matmul(b, x, f"{p}/intermediate/dense", hidden, 4 * hidden)
        gelu = "BiasGelu" if i % 2 == 0 else "FastGelu"
        bias = b.weight(f"{p}/intermediate/dense/bias", [4 * hidden])
        h = b.op(gelu, [h, bias], f"{p}/intermediate/{gelu}", domain=MS)
        h = _matmul(b, h, f"{p}/output/dense", 4 * hidden, hidden)
        x = b.op(
            "SkipLayerNormalization",
            [
                h,
                x,
                *_ln_weights(b, f"{p}/output/LayerNorm", hidden),
                b.weight(f"{p}/output/dense/bias", [hidden]),
            ],
            f"{p}/output/SkipLayerNorm",
            domain=MS,
            epsilon=1e-12,
            outputs=["last_hidden_state"] if i == last else 1,
        )
    b.output(x, FLOAT, ["batch", "sequence", hidden])
    first = b.op("Gather", [x, b.i64("const/idx0", 0)], "pooler/Gather", axis=1)
    pw = b.weight("pooler/dense/weight", [hidden, hidden])
    pooled = b.op(
        "Gemm", [first, pw, b.weight("pooler/dense/bias", [hidden])], "pooler/dense/Gemm", transB=1
    )
    pooled = b.op("Tanh", [pooled], "pooler/Tanh", outputs=["pooler_output"])
    b.output(pooled, FLOAT, ["batch", hidden])
    return b.model(opset=14, extra_opsets={MS: 1}, doc=first_doc_paragraph(fused_bert))


def fused_gpt2_past(
    layers: int = 2,
    hidden: int = 32,
    heads: int = 4,
    vocab: int = 100,
    max_positions: int = 64,
    seed: int = 31,
) -> onnx.ModelProto:
    """GPT-2 with past after ORT's optimizer: LayerNormalization-1, Attention with past, FastGelu.

    Traps: opset 14, so the first LayerNormalization is ORT's own ONNX-domain schema (onnx defines
    LayerNormalization from 17 only; onnx's checker alone would refuse the model); each Attention
    reads ``past_i`` [2, batch, heads, past, head_dim] and writes ``present_i``, with the raw int32
    attention mask; SkipLayerNormalization's 4th output carries the residual stream.
    """
    head_dim = hidden // heads
    b = GraphBuilder("fused_gpt2_past", seed)
    ids = b.input("input_ids", INT64, ["batch", "sequence_length"], value_range=(0, vocab))
    pos = b.input("position_ids", INT64, ["batch", "sequence_length"], value_range=(0, 8))
    total = f"{PAST} + sequence_length"
    mask = b.input("attention_mask", INT64, ["batch", total], value_range=(1, 2))
    pasts = [
        b.input(f"past_{i}", FLOAT, [2, "batch", heads, PAST, head_dim]) for i in range(layers)
    ]
    mask32 = _int32(b, mask, "attention_mask/Cast")
    wte = b.weight("transformer/wte/weight", [vocab, hidden], std=0.02)
    tok = b.op("Gather", [wte, ids], "transformer/wte/Gather", axis=0)
    wpe = b.weight("transformer/wpe/weight", [max_positions, hidden], std=0.01)
    pe = b.op("Gather", [wpe, pos], "transformer/wpe/Gather", axis=0)
    resid = b.op("Add", [tok, pe], "transformer/embed/Add")
    h = b.op(
        "LayerNormalization",
        [resid, *_ln_weights(b, "transformer/h0/ln_1", hidden)],
        "transformer/h0/ln_1/LayerNormalization",
        axis=-1,
        epsilon=1e-5,
    )
    for i in range(layers):
        p = f"transformer/h{i}"
        w = b.weight(f"{p}/attn/c_attn/weight", [hidden, 3 * hidden])
        bias = b.weight(f"{p}/attn/c_attn/bias", [3 * hidden])
        a, _ = b.op(
            "Attention",
            [h, w, bias, mask32, pasts[i]],
            f"{p}/attn/Attention",
            outputs=[f"{p}/attn/Attention_out", f"present_{i}"],
            domain=MS,
            num_heads=heads,
            unidirectional=1,
        )
        b.output(f"present_{i}", FLOAT, [2, "batch", heads, total, head_dim])
        a = _matmul(b, a, f"{p}/attn/c_proj", hidden, hidden)
        h, _, _, resid = b.op(
            "SkipLayerNormalization",
            [
                a,
                resid,
                *_ln_weights(b, f"{p}/ln_2", hidden),
                b.weight(f"{p}/attn/c_proj/bias", [hidden]),
            ],
            f"{p}/ln_2/SkipLayerNorm",
            domain=MS,
            epsilon=1e-5,
            outputs=[f"{p}/ln_2/out", "", "", f"{p}/ln_2/residual"],
        )
        m = _matmul(b, h, f"{p}/mlp/c_fc", hidden, 4 * hidden)
        m = b.op(
            "FastGelu",
            [m, b.weight(f"{p}/mlp/c_fc/bias", [4 * hidden])],
            f"{p}/mlp/FastGelu",
            domain=MS,
        )
        m = _matmul(b, m, f"{p}/mlp/c_proj", 4 * hidden, hidden)
        nxt = f"transformer/h{i + 1}/ln_1" if i + 1 < layers else "transformer/ln_f"
        h, _, _, resid = b.op(
            "SkipLayerNormalization",
            [m, resid, *_ln_weights(b, nxt, hidden), b.weight(f"{p}/mlp/c_proj/bias", [hidden])],
            f"{nxt}/SkipLayerNorm",
            domain=MS,
            epsilon=1e-5,
            outputs=[f"{nxt}/out", "", "", f"{nxt}/residual"],
        )
    wte_t = b.op("Transpose", [wte], "lm_head/Transpose", perm=[1, 0])
    logits = b.op("MatMul", [h, wte_t], "lm_head/MatMul", outputs=["logits"])
    b.output(logits, FLOAT, ["batch", "sequence_length", vocab])
    return b.model(opset=14, extra_opsets={MS: 1}, doc=first_doc_paragraph(fused_gpt2_past))


def rotary_caches(max_positions: int, rotary_dim: int, theta: float = 10000.0) -> np.ndarray:
    """cos and sin of position x inverse frequency, [2, max_positions, rotary_dim / 2], float32."""
    inv_freq = 1.0 / theta ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    angles = np.outer(np.arange(max_positions, dtype=np.float64), inv_freq)
    return np.stack([np.cos(angles), np.sin(angles)]).astype(np.float32)


def genai_llama(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    vocab: int = 100,
    max_positions: int = 128,
    attention: str = "gqa",
    seed: int = 32,
    packed: bool = False,
) -> onnx.ModelProto:
    """A Llama as onnxruntime-genai's builder writes it for CUDA in FP32, with a KV cache.

    ``attention="gqa"``: GroupQueryAttention with rotary inside (``do_rotary``), int32 seqlens_k and
    total_sequence_length computed from the attention mask, the builder's CUDA layout.
    ``attention="mha"``: RotaryEmbedding on q and k (int64 position_ids input) + MultiHeadAttention
    with past (kv_heads = heads). Both: SimplifiedLayerNormalization in the ONNX domain for the
    first norm, SkipSimplifiedLayerNormalization for the others, SiLU-gated MLP, I/O named
    ``past_key_values.{i}.key/value`` and ``present.{i}.key/value`` [batch, kv_heads, len, head].
    ``packed=True`` (GQA only): as the builder (0.18) writes its CPU FP32 and int4 models: one
    ``qkv_proj`` MatMul feeds GroupQueryAttention (key and value inputs empty) and the caches'
    head axis is the symbolic ``kv_cache_dim`` (its size is only in the attention node).
    """
    if attention not in ("gqa", "mha"):
        raise ValueError("attention must be 'gqa' or 'mha'")
    if (hidden // heads) % 16:
        raise ValueError("ORT's GroupQueryAttention needs head_dim a multiple of 16")
    kv_heads = heads if attention == "mha" else kv_heads
    head_dim = hidden // heads
    b = GraphBuilder(f"genai_llama_{attention}", seed)
    ids = b.input("input_ids", INT64, ["batch_size", "sequence_length"], value_range=(0, vocab))
    mask = b.input("attention_mask", INT64, ["batch_size", TOTAL], value_range=(1, 2))
    pos = None
    if attention == "mha":
        pos = b.input("position_ids", INT64, ["batch_size", "sequence_length"], value_range=(0, 8))
    if packed and attention != "gqa":
        raise ValueError("packed=True is the GroupQueryAttention layout")
    head_axis: int | str = "kv_cache_dim" if packed else head_dim
    cache = ["batch_size", kv_heads, PAST, head_axis]
    present = ["batch_size", kv_heads, TOTAL, head_axis]
    caches = rotary_caches(max_positions, head_dim)
    cos = b.initializer("cos_cache", caches[0])
    sin = b.initializer("sin_cache", caches[1])

    x = b.op(
        "Gather",
        [b.weight("model/embed_tokens/weight", [vocab, hidden], std=0.02), ids],
        "model/embed_tokens/Gather",
    )
    if attention == "gqa":
        # the builder's mask reformatting: seqlens_k = sum(mask) - 1, total = mask.shape[1]
        s = b.op(
            "ReduceSum", [mask, b.i64("const/axes_1", [1])], "model/attn_mask/ReduceSum", keepdims=0
        )
        s = b.op("Sub", [s, b.i64("const/one", 1)], "model/attn_mask/Sub")
        seqlens_k = _int32(b, s, "model/attn_mask/seqlens_k/Cast")
        shape = b.op("Shape", [mask], "model/attn_mask/Shape")
        t = b.op("Gather", [shape, b.i64("const/idx1", 1)], "model/attn_mask/Gather", axis=0)
        total = _int32(b, t, "model/attn_mask/total_seq_len/Cast")
    else:
        key_mask = _int32(b, mask, "model/attn_mask/Cast")
    resid = x
    h = b.op(
        "SimplifiedLayerNormalization",
        [x, _ln_weights(b, "model/layers.0/input_layernorm", hidden, beta=False)[0]],
        "model/layers.0/input_layernorm/SimplifiedLayerNorm",
        axis=-1,
        epsilon=1e-6,
        stash_type=1,
    )
    down = ""
    for i in range(layers):
        p = f"model/layers.{i}"
        if i > 0:
            h, _, _, resid = b.op(
                "SkipSimplifiedLayerNormalization",
                [down, resid, _ln_weights(b, f"{p}/input_layernorm", hidden, beta=False)[0]],
                f"{p}/input_layernorm/SkipLayerNorm",
                domain=MS,
                epsilon=1e-6,
                outputs=[f"{p}/input_layernorm/out", "", "", f"{p}/input_layernorm/residual"],
            )
        if packed:
            q = _matmul(b, h, f"{p}/attn/qkv_proj", hidden, (heads + 2 * kv_heads) * head_dim)
            k = v = ""
        else:
            q = _matmul(b, h, f"{p}/attn/q_proj", hidden, hidden)
            k = _matmul(b, h, f"{p}/attn/k_proj", hidden, kv_heads * head_dim)
            v = _matmul(b, h, f"{p}/attn/v_proj", hidden, kv_heads * head_dim)
        past_k = b.input(f"past_key_values.{i}.key", FLOAT, cache)
        past_v = b.input(f"past_key_values.{i}.value", FLOAT, cache)
        outs = [f"{p}/attn/out", f"present.{i}.key", f"present.{i}.value"]
        if attention == "gqa":
            a = b.op(
                "GroupQueryAttention",
                [q, k, v, past_k, past_v, seqlens_k, total, cos, sin],
                f"{p}/attn/GroupQueryAttention",
                outputs=outs,
                domain=MS,
                num_heads=heads,
                kv_num_heads=kv_heads,
                do_rotary=1,
                rotary_interleaved=0,
                local_window_size=-1,
            )[0]
        else:
            assert pos is not None
            q, k = (
                b.op(
                    "RotaryEmbedding",
                    [t, pos, cos, sin],
                    f"{p}/attn/{n}_rotary/RotaryEmbedding",
                    domain=MS,
                    num_heads=heads,
                    interleaved=0,
                )
                for t, n in ((q, "q"), (k, "k"))
            )
            a = b.op(
                "MultiHeadAttention",
                [q, k, v, "", key_mask, "", past_k, past_v],
                f"{p}/attn/MultiHeadAttention",
                outputs=outs,
                domain=MS,
                num_heads=heads,
                unidirectional=1,
            )[0]
        b.output(f"present.{i}.key", FLOAT, present)
        b.output(f"present.{i}.value", FLOAT, present)
        o = _matmul(b, a, f"{p}/attn/o_proj", hidden, hidden)
        h, _, _, resid = b.op(
            "SkipSimplifiedLayerNormalization",
            [o, resid, _ln_weights(b, f"{p}/post_attention_layernorm", hidden, beta=False)[0]],
            f"{p}/post_attention_layernorm/SkipLayerNorm",
            domain=MS,
            epsilon=1e-6,
            outputs=[
                f"{p}/post_attention_layernorm/out",
                "",
                "",
                f"{p}/post_attention_layernorm/residual",
            ],
        )
        gate = _matmul(b, h, f"{p}/mlp/gate_proj", hidden, intermediate)
        up = _matmul(b, h, f"{p}/mlp/up_proj", hidden, intermediate)
        act = b.op("Sigmoid", [gate], f"{p}/mlp/act_fn/Sigmoid")
        act = b.op("Mul", [gate, act], f"{p}/mlp/act_fn/Mul")
        m = b.op("Mul", [act, up], f"{p}/mlp/Mul")
        down = _matmul(b, m, f"{p}/mlp/down_proj", intermediate, hidden)
    h = b.op(
        "SkipSimplifiedLayerNormalization",
        [down, resid, _ln_weights(b, "model/norm", hidden, beta=False)[0]],
        "model/norm/SkipLayerNorm",
        domain=MS,
        epsilon=1e-6,
        outputs=["model/norm/out", "", "", ""],
    )[0]
    logits = b.op(
        "MatMul",
        [h, b.weight("lm_head/weight", [hidden, vocab])],
        "lm_head/MatMul",
        outputs=["logits"],
    )
    b.output(logits, FLOAT, ["batch_size", "sequence_length", vocab])
    return b.model(
        opset=21, ir_version=10, extra_opsets={MS: 1}, doc=first_doc_paragraph(genai_llama)
    )


def bert_plain(
    layers: int = 2,
    hidden: int = 32,
    heads: int = 4,
    vocab: int = 100,
    max_positions: int = 64,
    seed: int = 33,
) -> onnx.ModelProto:
    """Unfused BERT in the layout ORT's optimizer fuses (torch's TorchScript export of BERT).

    LayerNorm decomposed as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, attention as
    MatMul/Add/Reshape/Transpose per q/k/v with Div by sqrt(head_dim) and an additive
    (1 - mask) * -10000 bias, GELU via Erf. Positions come from a constant position_ids slice.
    """
    head_dim = hidden // heads
    b = GraphBuilder("bert_plain", seed)
    ids = b.input("input_ids", INT64, ["batch", "sequence"], value_range=(0, vocab))
    seg = b.input("token_type_ids", INT64, ["batch", "sequence"], value_range=(0, 2))
    mask = b.input("attention_mask", INT64, ["batch", "sequence"], value_range=(0, 2))

    def linear(x: str, scope: str, n_in: int, n_out: int) -> str:
        y = _matmul(b, x, scope, n_in, n_out)
        return b.op("Add", [b.weight(f"{scope}/bias", [n_out]), y], f"{scope}/Add")

    def layer_norm(x: str, scope: str) -> str:
        mean = b.op("ReduceMean", [x], f"{scope}/ReduceMean", axes=[-1], keepdims=1)
        d = b.op("Sub", [x, mean], f"{scope}/Sub")
        var = b.op("Pow", [d, b.f32("const/two", 2.0)], f"{scope}/Pow")
        var = b.op("ReduceMean", [var], f"{scope}/ReduceMean_1", axes=[-1], keepdims=1)
        var = b.op("Add", [var, b.f32("const/eps", 1e-12)], f"{scope}/Add")
        std = b.op("Sqrt", [var], f"{scope}/Sqrt")
        y = b.op("Div", [d, std], f"{scope}/Div")
        gamma, beta = _ln_weights(b, scope, hidden)
        y = b.op("Mul", [y, gamma], f"{scope}/Mul")
        return b.op("Add", [y, beta], f"{scope}/Add_1")

    def heads_of(x: str, scope: str, perm: list[int]) -> str:
        shape = b.i64("const/heads_shape", [0, 0, heads, head_dim])
        x = b.op("Reshape", [x, shape], f"{scope}/Reshape")
        return b.op("Transpose", [x], f"{scope}/Transpose", perm=perm)

    word = b.weight("embeddings/word_embeddings/weight", [vocab, hidden], std=0.02)
    posw = b.weight("embeddings/position_embeddings/weight", [max_positions, hidden], std=0.02)
    segw = b.weight("embeddings/token_type_embeddings/weight", [2, hidden], std=0.02)
    pos_ids = b.i64("embeddings/position_ids", np.arange(max_positions)[None, :])
    n = b.op("Shape", [ids], "embeddings/Shape")
    n = b.op("Gather", [n, b.i64("const/idx1", 1)], "embeddings/Gather_len", axis=0)
    n = b.op("Unsqueeze", [n, b.i64("const/axes_0", [0])], "embeddings/Unsqueeze_len")
    sliced = b.op(
        "Slice",
        [pos_ids, b.i64("const/zero1", [0]), n, b.i64("const/axes_1", [1])],
        "embeddings/Slice",
    )
    x = b.op("Gather", [word, ids], "embeddings/word_embeddings/Gather", axis=0)
    pe = b.op("Gather", [posw, sliced], "embeddings/position_embeddings/Gather", axis=0)
    se = b.op("Gather", [segw, seg], "embeddings/token_type_embeddings/Gather", axis=0)
    x = b.op("Add", [x, pe], "embeddings/Add")
    x = b.op("Add", [x, se], "embeddings/Add_1")
    x = layer_norm(x, "embeddings/LayerNorm")
    m = b.op("Unsqueeze", [mask, b.i64("const/axes_1", [1])], "extended_mask/Unsqueeze")
    m = b.op("Unsqueeze", [m, b.i64("const/axes_2", [2])], "extended_mask/Unsqueeze_1")
    m = b.op("Cast", [m], "extended_mask/Cast", to=FLOAT)
    m = b.op("Sub", [b.f32("const/one", 1.0), m], "extended_mask/Sub")
    m = b.op("Mul", [m, b.f32("const/mask_neg", -10000.0)], "extended_mask/Mul")
    scale = b.f32("const/sqrt_head_dim", math.sqrt(head_dim))
    for i in range(layers):
        p = f"encoder/layer{i}/attention/self"
        q = heads_of(linear(x, f"{p}/query", hidden, hidden), f"{p}/q", [0, 2, 1, 3])
        k = heads_of(linear(x, f"{p}/key", hidden, hidden), f"{p}/k", [0, 2, 3, 1])
        v = heads_of(linear(x, f"{p}/value", hidden, hidden), f"{p}/v", [0, 2, 1, 3])
        s = b.op("MatMul", [q, k], f"{p}/MatMul")
        s = b.op("Div", [s, scale], f"{p}/Div")
        s = b.op("Add", [s, m], f"{p}/Add")
        s = b.op("Softmax", [s], f"{p}/Softmax", axis=-1)
        c = b.op("MatMul", [s, v], f"{p}/MatMul_1")
        c = b.op("Transpose", [c], f"{p}/Transpose", perm=[0, 2, 1, 3])
        c = b.op("Reshape", [c, b.i64("const/merge_shape", [0, 0, hidden])], f"{p}/Reshape")
        p = f"encoder/layer{i}"
        c = linear(c, f"{p}/attention/output/dense", hidden, hidden)
        x = layer_norm(
            b.op("Add", [c, x], f"{p}/attention/output/Add"), f"{p}/attention/output/LayerNorm"
        )
        h = linear(x, f"{p}/intermediate/dense", hidden, 4 * hidden)
        g = b.op("Div", [h, b.f32("const/sqrt2", math.sqrt(2.0))], f"{p}/intermediate/gelu/Div")
        g = b.op("Erf", [g], f"{p}/intermediate/gelu/Erf")
        g = b.op("Add", [g, b.f32("const/one", 1.0)], f"{p}/intermediate/gelu/Add")
        g = b.op("Mul", [h, g], f"{p}/intermediate/gelu/Mul")
        h = b.op("Mul", [g, b.f32("const/half", 0.5)], f"{p}/intermediate/gelu/Mul_1")
        h = linear(h, f"{p}/output/dense", 4 * hidden, hidden)
        x = layer_norm(b.op("Add", [h, x], f"{p}/output/Add"), f"{p}/output/LayerNorm")
    last = b.op("Identity", [x], "encoder/output", outputs=["last_hidden_state"])
    b.output(last, FLOAT, ["batch", "sequence", hidden])
    return b.model(opset=14, doc=first_doc_paragraph(bert_plain))


def in_graph_rotary(head_dim: int = 16) -> onnx.ModelProto:
    """Rotary angles as torch exports them unfused: Cast(position_ids) x inv_freq -> Cos/Sin.

    x*cos(p*f) + x*sin(p*f) with the angles computed in the graph from int64 position ids (what
    ORT's fused RotaryEmbedding replaces by cos/sin caches). Trap: FP16 holds integers exactly
    only to 2048, and Sin/Cos need the angle's absolute precision.
    """
    inv = 1.0 / 10000 ** (np.arange(0, head_dim, 2) / head_dim)
    nodes = [
        helper.make_node("Cast", ["position_ids"], ["pos"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Unsqueeze", ["pos", "axis1"], ["pos3"], name="unsqueeze"),
        helper.make_node("MatMul", ["inv_freq", "pos3"], ["freqs"], name="matmul"),
        helper.make_node("Transpose", ["freqs"], ["freqs_t"], perm=[0, 2, 1], name="transpose"),
        helper.make_node("Concat", ["freqs_t", "freqs_t"], ["emb"], axis=-1, name="concat"),
        helper.make_node("Cos", ["emb"], ["cos"], name="cos"),
        helper.make_node("Sin", ["emb"], ["sin"], name="sin"),
        helper.make_node("Mul", ["x", "cos"], ["xc"], name="mul_cos"),
        helper.make_node("Mul", ["x", "sin"], ["xs"], name="mul_sin"),
        helper.make_node("Add", ["xc", "xs"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "in_graph_rotary",
        [
            helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "s"]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "s", head_dim]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "s", head_dim])],
        [
            numpy_helper.from_array(inv.astype(np.float32).reshape(1, -1, 1), "inv_freq"),
            numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def step_feeds(
    model: onnx.ModelProto, seq: int = 5, past: int = 3, start: int | None = None
) -> dict[str, np.ndarray]:
    """Inputs for one decode step with a KV cache of `past` positions (batch 1: GQA's CPU limit).

    Dims named batch* are 1, total*/`a + b` are past + seq, past* past, the rest seq; floats are
    seeded normals, `position_ids` count from `start` (default: past), masks are ones, other ints
    0/1 ids. Shared by the contrib-op tests and the fused-model benches.
    """
    rng = np.random.default_rng(0)
    out: dict[str, np.ndarray] = {}
    for i in model.graph.input:
        dims = []
        for d in i.type.tensor_type.shape.dim:
            p = d.dim_param
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif p.startswith("batch"):
                dims.append(1)
            elif "total" in p or "+" in p:
                dims.append(past + seq)
            else:
                dims.append(past if "past" in p else seq)
        if i.type.tensor_type.elem_type == FLOAT:
            out[i.name] = rng.standard_normal(dims).astype(np.float32)
        elif i.name == "position_ids":
            first = past if start is None else start
            out[i.name] = np.arange(first, first + seq, dtype=np.int64).reshape(dims)
        elif i.name == "attention_mask":
            out[i.name] = np.ones(dims, np.int64)
        else:
            out[i.name] = rng.integers(0, 2, dims).astype(np.int64)
    return out


def ort_optimized_bert(layers: int = 2, hidden: int = 32, heads: int = 4) -> onnx.ModelProto:
    """`bert_plain` fused by ORT's own `optimize_model` (the pipeline ORT documents).

    Needs onnxruntime. Fusion only (opt_level 0: higher levels run a session that imports torch);
    saved and reloaded as users do, which adds the opset imports.
    """
    import tempfile
    from pathlib import Path

    from onnxruntime.transformers.optimizer import optimize_model

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "plain.onnx", Path(tmp) / "fused.onnx"
        onnx.save(bert_plain(layers=layers, hidden=hidden, heads=heads), src)
        opt = optimize_model(str(src), "bert", heads, hidden, opt_level=0)
        opt.save_model_to_file(str(dst))
        return onnx.load(dst)


ALL_FUSED = {
    "fused_bert": fused_bert,
    "fused_gpt2_past": fused_gpt2_past,
    "genai_llama": genai_llama,
    "genai_llama_mha": lambda: genai_llama(attention="mha"),
    "bert_plain": bert_plain,
    "in_graph_rotary": in_graph_rotary,
}
