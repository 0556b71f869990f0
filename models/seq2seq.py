"""A seq2seq decoder with transformers' causal mask, shaped like optimum's BART/T5/Marian exports.

transformers builds the decoder's causal mask from the sequence length at run time: a square
``ConstantOfShape`` filled with ``torch.finfo(float32).min``, zeroed on and below the diagonal
by a 0/1 upper-triangle factor, then added to the attention scores. The fill lives in the
``value`` *attribute* of ConstantOfShape, not in an initializer or a Constant node: stored in
FP16 without a range check it is -inf, and ``-inf * 0`` is NaN on every position the mask keeps.

* :func:`causal_mask` adds the 8-node pattern to a builder;
* :func:`seq2seq_decoder` is a one-layer decoder (self-attention under the mask, cross-attention
  over ``encoder_hidden_states``, LM head); ``merged=True`` puts it in both branches of an ``If``
  on ``use_cache_branch`` the way optimum merges decoders, so the pattern sits inside a subgraph.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from models._graph import BOOL, FLOAT, INT64, GraphBuilder, first_doc_paragraph

__all__ = ["causal_mask", "seq2seq_decoder"]

FLT_MIN = float(np.finfo(np.float32).min)


def causal_mask(b: GraphBuilder, ids: str, scope: str) -> str:
    """[S, S] float mask: 0 on and below the diagonal, float32 min above (8 nodes).

    Shape -> Gather(1) -> Unsqueeze -> Concat([S, S]) -> ConstantOfShape(value=finfo.min), times
    Trilu(ConstantOfShape(value=1), k=1, upper): the 0/1 factor that keeps the future positions.
    """
    shape = b.op("Shape", [ids], f"{scope}/Shape")
    seq = b.op("Gather", [shape, b.i64(f"{scope}/one", 1)], f"{scope}/Gather", axis=0)
    seq1 = b.op("Unsqueeze", [seq, b.i64(f"{scope}/axes", [0])], f"{scope}/Unsqueeze")
    square = b.op("Concat", [seq1, seq1], f"{scope}/Concat", axis=0)
    fill = numpy_helper.from_array(np.array([FLT_MIN], np.float32), "value")
    full = b.op("ConstantOfShape", [square], f"{scope}/ConstantOfShape", value=fill)
    one = numpy_helper.from_array(np.array([1.0], np.float32), "value")
    ones = b.op("ConstantOfShape", [square], f"{scope}/ConstantOfShape_1", value=one)
    upper = b.op("Trilu", [ones, b.i64(f"{scope}/k", 1)], f"{scope}/Trilu", upper=1)
    return b.op("Mul", [full, upper], f"{scope}/Mul")  # type: ignore[return-value]


def _attention(
    b: GraphBuilder, q_in: str, kv_in: str, scope: str, hidden: int, heads: int, mask: str | None
) -> str:
    head_dim = hidden // heads
    split = b.i64(f"{scope}/heads_shape", [0, 0, heads, head_dim])

    def project(x: str, name: str, perm: list[int]) -> str:
        y = b.op(
            "MatMul",
            [x, b.weight(f"{scope}.{name}.weight", [hidden, hidden])],
            f"{scope}/{name}/MatMul",
        )
        y = b.op("Add", [y, b.weight(f"{scope}.{name}.bias", [hidden])], f"{scope}/{name}/Add")
        y = b.op("Reshape", [y, split], f"{scope}/{name}/Reshape")
        return b.op("Transpose", [y], f"{scope}/{name}/Transpose", perm=perm)  # type: ignore[return-value]

    q = project(q_in, "q_proj", [0, 2, 1, 3])
    k = project(kv_in, "k_proj", [0, 2, 3, 1])
    v = project(kv_in, "v_proj", [0, 2, 1, 3])
    s = b.op("MatMul", [q, k], f"{scope}/MatMul")
    s = b.op("Mul", [s, b.f32(f"{scope}/scale", 1.0 / math.sqrt(head_dim))], f"{scope}/Mul")
    if mask is not None:
        s = b.op("Add", [s, mask], f"{scope}/Add")
    p = b.op("Softmax", [s], f"{scope}/Softmax", axis=-1)
    ctx = b.op("MatMul", [p, v], f"{scope}/MatMul_1")
    ctx = b.op("Transpose", [ctx], f"{scope}/Transpose", perm=[0, 2, 1, 3])
    merge = b.i64(f"{scope}/merge_shape", [0, 0, hidden])
    return b.op("Reshape", [ctx, merge], f"{scope}/Reshape")  # type: ignore[return-value]


def _decoder(b: GraphBuilder, p: str, hidden: int, heads: int, vocab: int) -> str:
    """The decoder's nodes in `b` (names prefixed by `p`); returns the logits value."""
    emb = b.weight(f"{p}embed_tokens.weight", [vocab, hidden], std=0.5)
    x = b.op("Gather", [emb, "input_ids"], f"{p}/embed_tokens/Gather", axis=0)
    mask = causal_mask(b, "input_ids", f"{p}/causal_mask")
    a = _attention(b, x, x, f"{p}/self_attn", hidden, heads, mask)
    x = b.op("Add", [x, a], f"{p}/Add")
    c = _attention(b, x, "encoder_hidden_states", f"{p}/encoder_attn", hidden, heads, None)
    x = b.op("Add", [x, c], f"{p}/Add_1")
    head = b.weight(f"{p}lm_head.weight", [hidden, vocab])
    return b.op("MatMul", [x, head], f"{p}/lm_head/MatMul")  # type: ignore[return-value]


def seq2seq_decoder(
    *,
    merged: bool = False,
    hidden: int = 32,
    heads: int = 4,
    vocab: int = 64,
    seed: int = 41,
    opset: int = 17,
) -> onnx.ModelProto:
    """optimum-style seq2seq decoder whose causal mask is ConstantOfShape(finfo.min) * triu.

    Traps: the mask fill is a float32-min ConstantOfShape attribute (not an initializer), the 0/1
    factor comes from a Trilu of ones (no bool anywhere), and with ``merged`` both copies of the
    pattern sit inside If branches. ``opset`` 20 lets ConstantOfShape itself be BF16.
    """
    b = GraphBuilder("seq2seq_decoder", seed)
    b.input("input_ids", INT64, ["batch_size", "decoder_sequence_length"], value_range=(0, vocab))
    b.input("encoder_hidden_states", FLOAT, ["batch_size", "encoder_sequence_length", hidden])
    if merged:
        b.input("use_cache_branch", BOOL, [1])
    b.output("logits", FLOAT, ["batch_size", "decoder_sequence_length", vocab])
    if not merged:
        b.op(
            "Identity",
            [_decoder(b, "model.decoder", hidden, heads, vocab)],
            "/Identity",
            outputs=["logits"],
        )
        return b.model(opset=opset, doc=first_doc_paragraph(seq2seq_decoder))
    branches = []
    for name in ("with_past", "no_past"):
        sub = b.subgraph(name)
        logits = _decoder(sub, f"{name}.model.decoder", hidden, heads, vocab)
        sub.op("Identity", [logits], f"{name}/Identity", outputs=[f"{name}/logits"])
        sub.outputs.append(helper.make_tensor_value_info(f"{name}/logits", FLOAT, None))
        branches.append(sub.graph())
    b.op(
        "If",
        ["use_cache_branch"],
        "optimum::if",
        outputs=["logits"],
        then_branch=branches[0],
        else_branch=branches[1],
    )
    return b.model(opset=opset, doc=first_doc_paragraph(seq2seq_decoder))
