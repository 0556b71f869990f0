"""An encoder-decoder's merged decoder, shaped like optimum's Whisper / T5 ``decoder_model_merged``.

Inputs: ``input_ids`` [batch_size, decoder_sequence_length], ``encoder_hidden_states``
[batch_size, encoder_sequence_length, hidden], per layer ``past_key_values.{i}.decoder.key/value``
[batch_size, heads, past_decoder_sequence_length, head_dim] (self-attention cache) and
``past_key_values.{i}.encoder.key/value`` [batch_size, heads, encoder_sequence_length_out,
head_dim] (cross-attention cache), and ``use_cache_branch``. Outputs: ``logits`` and the matching
``present.{i}.decoder/encoder.key/value``.

One ``If`` on ``use_cache_branch``: the no-cache branch computes the cross-attention keys/values
from ``encoder_hidden_states``; the with-cache branch reads them from the cache and, as optimum's
``merge_decoders`` does for outputs only one branch has, returns an *empty* constant for
``present.{i}.encoder.*``: a placeholder that must never be fed back as the next step's cache.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from models._graph import BOOL, FLOAT, INT64, GraphBuilder, first_doc_paragraph

__all__ = ["seq2seq_decoder_merged"]

DEC = "decoder_sequence_length"
PAST = "past_decoder_sequence_length"
ENC = "encoder_sequence_length"
ENC_OUT = "encoder_sequence_length_out"


def _heads(b: GraphBuilder, x: str, name: str, heads: int, head_dim: int) -> str:
    r = b.op(
        "Reshape",
        [x, b.i64(f"{name.split('/')[0]}/shape_heads", [0, 0, heads, head_dim])],
        f"{name}/Reshape",
    )
    return b.op("Transpose", [r], f"{name}/Transpose", perm=[0, 2, 1, 3])  # type: ignore[return-value]


def _attend(b: GraphBuilder, q: str, k: str, v: str, name: str, hidden: int, head_dim: int) -> str:
    kt = b.op("Transpose", [k], f"{name}/kT", perm=[0, 1, 3, 2])
    s = b.op("MatMul", [q, kt], f"{name}/scores")
    s = b.op(
        "Mul",
        [s, b.f32(f"{name.split('/')[0]}/inv_sqrt_d", 1.0 / math.sqrt(head_dim))],
        f"{name}/scale",
    )
    p = b.op("Softmax", [s], f"{name}/Softmax", axis=-1)
    ctx = b.op("MatMul", [p, v], f"{name}/ctx")
    ctx = b.op("Transpose", [ctx], f"{name}/ctxT", perm=[0, 2, 1, 3])
    return b.op(
        "Reshape",
        [ctx, b.i64(f"{name.split('/')[0]}/shape_merge", [0, 0, hidden])],
        f"{name}/merge",
    )  # type: ignore[return-value]


def _branch(
    b: GraphBuilder, w: dict[str, str], cached: bool, layers: int, heads: int, hidden: int
) -> list[str]:
    """The decoder's nodes in branch ``b``; returns its outputs in the If's order."""
    hd = hidden // heads
    tag = "with_past" if cached else "no_past"
    x = b.op("Gather", [w["wte"], "input_ids"], f"{tag}/embed", axis=0)
    outs: list[str] = []
    for i in range(layers):
        p = f"{tag}/layer{i}"
        q, k, v = (
            _heads(
                b, b.op("MatMul", [x, w[f"{i}.{n}"]], f"{p}/self_{n}"), f"{p}/self_{n}h", heads, hd
            )
            for n in ("q", "k", "v")
        )
        names = [f"{p}/present.{i}.decoder.{kv}" for kv in ("key", "value")]
        if cached:
            k = b.op("Concat", [f"past_key_values.{i}.decoder.key", k], names[0], axis=2)
            v = b.op("Concat", [f"past_key_values.{i}.decoder.value", v], names[1], axis=2)
        else:
            k = b.op("Identity", [k], names[0])
            v = b.op("Identity", [v], names[1])
        a = _attend(b, q, k, v, f"{p}/self", hidden, hd)
        x = b.op("Add", [x, b.op("MatMul", [a, w[f"{i}.o"]], f"{p}/self_o")], f"{p}/self_res")
        q2 = _heads(
            b, b.op("MatMul", [x, w[f"{i}.cq"]], f"{p}/cross_q"), f"{p}/cross_qh", heads, hd
        )
        if cached:
            ek, ev = f"past_key_values.{i}.encoder.key", f"past_key_values.{i}.encoder.value"
            empty = np.zeros((1, heads, 0, hd), np.float32)
            placeholders = [
                b.op(
                    "Constant",
                    [],
                    f"{p}/present.{i}.encoder.{kv}/empty",
                    value=numpy_helper.from_array(empty, "value"),
                )
                for kv in ("key", "value")
            ]
        else:
            ek, ev = (
                _heads(
                    b,
                    b.op("MatMul", ["encoder_hidden_states", w[f"{i}.c{n}"]], f"{p}/cross_{n}"),
                    f"{p}/cross_{n}h",
                    heads,
                    hd,
                )
                for n in ("k", "v")
            )
            placeholders = [ek, ev]
        c = _attend(b, q2, ek, ev, f"{p}/cross", hidden, hd)
        x = b.op("Add", [x, b.op("MatMul", [c, w[f"{i}.co"]], f"{p}/cross_o")], f"{p}/cross_res")
        outs += [k, v, *placeholders]  # type: ignore[list-item]
    logits = b.op("MatMul", [x, w["wte_t"]], f"{tag}/lm_head")
    return [logits, *outs]  # type: ignore[list-item]


def seq2seq_decoder_merged(
    layers: int = 1, hidden: int = 32, heads: int = 4, vocab: int = 64, seed: int = 5
) -> onnx.ModelProto:
    """optimum's merged Whisper/T5-style decoder: self and cross-attention caches, one If.

    Traps: the with-cache branch returns empty placeholders for ``present.*.encoder.*`` (fed back,
    they wipe the cross-attention cache), the cross cache's length is named
    ``encoder_sequence_length_out`` while the encoder states' is ``encoder_sequence_length``.
    """
    b = GraphBuilder("seq2seq_decoder_merged", seed)
    hd = hidden // heads
    b.input("input_ids", INT64, ["batch_size", DEC], value_range=(0, vocab))
    b.input("encoder_hidden_states", FLOAT, ["batch_size", ENC, hidden])
    w: dict[str, str] = {"wte": b.weight("embed_tokens.weight", [vocab, hidden], std=0.5)}
    w["wte_t"] = b.initializer("lm_head.weight", numpy_helper.to_array(b.initializers[-1]).T.copy())
    for i in range(layers):
        for n in ("q", "k", "v", "o", "cq", "ck", "cv", "co"):
            w[f"{i}.{n}"] = b.weight(f"layers.{i}.{n}.weight", [hidden, hidden])
    outputs = [("logits", ["batch_size", DEC, vocab])]
    for i in range(layers):
        for kind, length in (("decoder", PAST), ("encoder", ENC_OUT)):
            for kv in ("key", "value"):
                b.input(
                    f"past_key_values.{i}.{kind}.{kv}", FLOAT, ["batch_size", heads, length, hd]
                )
    for i in range(layers):
        for kind, length in (("decoder", f"{PAST} + {DEC}"), ("encoder", ENC_OUT)):
            for kv in ("key", "value"):
                outputs.append((f"present.{i}.{kind}.{kv}", ["batch_size", heads, length, hd]))
    b.input("use_cache_branch", BOOL, [1])
    graphs = []
    for cached in (True, False):
        sub = b.subgraph("with_past" if cached else "no_past")
        outs = _branch(sub, w, cached, layers, heads, hidden)
        for out in outs:
            sub.outputs.append(helper.make_tensor_value_info(out, FLOAT, None))
        graphs.append(sub.graph())
    names = [n for n, _ in outputs]
    b.nodes.append(
        helper.make_node(
            "If",
            ["use_cache_branch"],
            names,
            name="optimum::if",
            then_branch=graphs[0],
            else_branch=graphs[1],
        )
    )
    for n, shape in outputs:
        b.output(n, FLOAT, shape)
    return b.model(doc=first_doc_paragraph(seq2seq_decoder_merged))
