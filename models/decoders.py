"""GPT-2 style decoders with a KV cache, shaped like optimum's ONNX exports.

Two models users ship for generation:

* :func:`decoder_with_past` (``decoder_with_past_model.onnx``): ``input_ids``,
  ``attention_mask``, ``position_ids`` and ``past_key_values.{i}.key/value`` in; ``logits`` and
  ``present.{i}.key/value`` out, with dims named the way optimum names them
  (``past_sequence_length``, ``past_sequence_length + sequence_length``).
* :func:`decoder_model_merged` (``decoder_model_merged.onnx``): one ``If`` on ``use_cache_branch``
  whose ``then`` branch is the with-past decoder and whose ``else`` branch the decoder without past,
  merged the way optimum's ``merge_decoders`` does it: the weights both branches read are moved to
  the outer graph, each branch keeps its own TorchScript-style value names, so the two branches
  hold values with the same name and different dtypes.

Values are named like a TorchScript export (``/transformer/h.0/attn/MatMul_output_0``,
``Constant`` nodes for shape constants, weights ``transformer.h.0.attn.c_attn.weight``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from models._graph import BOOL, FLOAT, INT64, GraphBuilder, first_doc_paragraph

__all__ = ["ALL_DECODERS", "DecoderConfig", "decoder_model_merged", "decoder_with_past"]

PAST = "past_sequence_length"
SEQ = "sequence_length"
TOTAL = "past_sequence_length + sequence_length"
BATCH = "batch_size"


@dataclass(frozen=True)
class DecoderConfig:
    """Sizes of the small decoders (defaults keep each model under 200 KB)."""

    layers: int = 2
    hidden: int = 32
    heads: int = 4
    vocab: int = 64
    max_positions: int = 128
    seed: int = 7

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass
class _Torch:
    """TorchScript-style naming: ``/scope/Op``, ``/scope/Op_1``... with ``_output_0`` values."""

    b: GraphBuilder
    counts: dict[str, int] = field(default_factory=dict)

    def op(self, op_type: str, inputs: list[str], scope: str, n_out: int = 1, **attrs: Any) -> Any:
        base = f"{scope}/{op_type}"
        k = self.counts.get(base, 0)
        self.counts[base] = k + 1
        name = base if k == 0 else f"{base}_{k}"
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        return self.b.op(op_type, inputs, name, outputs=outs, **attrs)

    def named(self, op_type: str, inputs: list[str], scope: str, out: str, **attrs: Any) -> str:
        """A node whose output has an explicit name (graph outputs, ``t``)."""
        base = f"{scope}/{op_type}"
        k = self.counts.get(base, 0)
        self.counts[base] = k + 1
        name = base if k == 0 else f"{base}_{k}"
        return self.b.op(op_type, inputs, name, outputs=[out], **attrs)  # type: ignore[return-value]

    def const(self, value: object, scope: str, dtype: type = np.int64) -> str:
        """A ``Constant`` node, as TorchScript exports shape constants and scalars."""
        tensor = numpy_helper.from_array(np.array(value, dtype=dtype), "value")
        return self.op("Constant", [], scope, value=tensor)


def _weights(b: GraphBuilder, cfg: DecoderConfig) -> dict[str, str]:
    """Every weight, created in one fixed order so both branches get identical tensors."""
    h, w = cfg.hidden, {}
    # a wide tied embedding keeps the logits' top-1 margins well above FP16 rounding
    w["wte"] = b.weight("transformer.wte.weight", [cfg.vocab, h], std=0.5)
    w["wpe"] = b.weight("transformer.wpe.weight", [cfg.max_positions, h], std=0.01)
    for i in range(cfg.layers):
        p = f"transformer.h.{i}"
        for ln in ("ln_1", "ln_2"):
            w[f"{p}.{ln}.weight"] = b.initializer(
                f"{p}.{ln}.weight", (1.0 + 0.1 * b.rng.standard_normal(h)).astype(np.float32)
            )
            w[f"{p}.{ln}.bias"] = b.weight(f"{p}.{ln}.bias", [h])
        for lin, n_in, n_out in (
            ("attn.c_attn", h, 3 * h),
            ("attn.c_proj", h, h),
            ("mlp.c_fc", h, 4 * h),
            ("mlp.c_proj", 4 * h, h),
        ):
            w[f"{p}.{lin}.weight"] = b.weight(f"{p}.{lin}.weight", [n_in, n_out])
            w[f"{p}.{lin}.bias"] = b.weight(f"{p}.{lin}.bias", [n_out])
    w["ln_f.weight"] = b.initializer(
        "transformer.ln_f.weight", (1.0 + 0.1 * b.rng.standard_normal(h)).astype(np.float32)
    )
    w["ln_f.bias"] = b.weight("transformer.ln_f.bias", [h])
    return w


def _mask(t: _Torch, cfg: DecoderConfig, with_past: bool) -> str:
    """Boolean [B, 1, S, T] mask: causal over absolute positions AND the padding mask."""
    sc = "/transformer"
    seq_shape = t.op("Shape", ["input_ids"], sc)
    s = t.op("Gather", [seq_shape, t.const(1, sc)], sc, axis=0)
    mask = "attention_mask"
    if with_past:
        past_shape = t.op("Shape", ["past_key_values.0.key"], sc)
        past = t.op("Gather", [past_shape, t.const(2, sc)], sc, axis=0)
        total = t.op("Add", [past, s], sc)  # int64 here, float in the no-past branch
    else:
        # the no-cache branch reads the last ``sequence_length`` mask columns, so it runs on the
        # merged model's inputs whatever past length they carry
        neg_s = t.op("Neg", [s], sc)
        starts = t.op("Unsqueeze", [neg_s, t.const([0], sc)], sc)
        big = t.const([np.iinfo(np.int64).max], sc)
        mask = t.op("Slice", [mask, starts, big, t.const([1], sc)], sc)
        total = s
    first = t.op("Sub", [total, s], sc)
    if with_past:  # int64 ``t`` (the other branch's ``t`` is float)
        rows = t.named("Range", [first, total, t.const(1, sc)], sc, "t")
    else:
        rows = t.op("Range", [first, total, t.const(1, sc)], sc)
    rows = t.op("Unsqueeze", [rows, t.const([1], sc)], sc)
    cols = t.op("Range", [t.const(0, sc), total, t.const(1, sc)], sc)
    cols = t.op("Unsqueeze", [cols, t.const([0], sc)], sc)
    causal = t.op("LessOrEqual", [cols, rows], sc)
    pad = t.op("Cast", [mask], sc, to=BOOL)
    pad = t.op("Unsqueeze", [pad, t.const([1, 2], sc)], sc)
    return t.op("And", [causal, pad], sc)


def _layer_norm(t: _Torch, x: str, w: dict[str, str], key: str, scope: str) -> str:
    return t.op(
        "LayerNormalization",
        [x, w[f"{key}.weight"], w[f"{key}.bias"]],
        scope,
        axis=-1,
        epsilon=1e-5,
    )


def _linear(t: _Torch, x: str, w: dict[str, str], key: str, scope: str) -> str:
    y = t.op("MatMul", [x, w[f"{key}.weight"]], scope)
    return t.op("Add", [y, w[f"{key}.bias"]], scope)


def _heads(t: _Torch, x: str, cfg: DecoderConfig, scope: str) -> str:
    shape = t.const([0, 0, cfg.heads, cfg.head_dim], scope)
    r = t.op("Reshape", [x, shape], scope)
    return t.op("Transpose", [r], scope, perm=[0, 2, 1, 3])


def _attention(
    t: _Torch, x: str, w: dict[str, str], cfg: DecoderConfig, i: int, mask: str, with_past: bool
) -> tuple[str, str, str]:
    """Self-attention of layer ``i``; returns (output, present key, present value)."""
    sc, key = f"/transformer/h.{i}/attn", f"transformer.h.{i}.attn"
    qkv = _linear(t, x, w, f"{key}.c_attn", f"{sc}/c_attn")
    sizes = t.const([cfg.hidden] * 3, sc)
    q, k, v = t.op("Split", [qkv, sizes], sc, n_out=3, axis=2)
    q, k, v = (_heads(t, y, cfg, sc) for y in (q, k, v))
    names = (f"present.{i}.key", f"present.{i}.value")
    if with_past:
        k = t.named("Concat", [f"past_key_values.{i}.key", k], sc, names[0], axis=2)
        v = t.named("Concat", [f"past_key_values.{i}.value", v], sc, names[1], axis=2)
    else:
        k = t.named("Identity", [k], sc, names[0])
        v = t.named("Identity", [v], sc, names[1])
    kt = t.op("Transpose", [k], sc, perm=[0, 1, 3, 2])
    s = t.op("MatMul", [q, kt], sc)
    s = t.op("Div", [s, t.const(math.sqrt(cfg.head_dim), sc, np.float32)], sc)
    s = t.op("Where", [mask, s, t.const(-1e4, sc, np.float32)], sc)
    p = t.op("Softmax", [s], sc, axis=-1)
    ctx = t.op("MatMul", [p, v], sc)
    ctx = t.op("Transpose", [ctx], sc, perm=[0, 2, 1, 3])
    ctx = t.op("Reshape", [ctx, t.const([0, 0, cfg.hidden], sc)], sc)
    return _linear(t, ctx, w, f"{key}.c_proj", f"{sc}/c_proj"), k, v


def _gelu(t: _Torch, x: str, scope: str, name_tanh: str | None) -> str:
    """GPT-2 ``gelu_new`` with Pow(x, 3); ``name_tanh`` names the Tanh output (the float ``t``)."""
    p = t.op("Pow", [x, t.const(3.0, scope, np.float32)], scope)
    m = t.op("Mul", [p, t.const(0.044715, scope, np.float32)], scope)
    a = t.op("Add", [x, m], scope)
    s = t.op("Mul", [a, t.const(math.sqrt(2.0 / math.pi), scope, np.float32)], scope)
    th = t.named("Tanh", [s], scope, name_tanh) if name_tanh else t.op("Tanh", [s], scope)
    a1 = t.op("Add", [th, t.const(1.0, scope, np.float32)], scope)
    m1 = t.op("Mul", [x, a1], scope)
    return t.op("Mul", [m1, t.const(0.5, scope, np.float32)], scope)


def _decoder_nodes(b: GraphBuilder, cfg: DecoderConfig, with_past: bool) -> list[str]:
    """Add the decoder's nodes to ``b``; returns the output names (logits, present.*)."""
    t = _Torch(b)
    w = _weights(b, cfg)
    mask = _mask(t, cfg, with_past)
    tok = t.op("Gather", [w["wte"], "input_ids"], "/transformer/wte", axis=0)
    pos = t.op("Gather", [w["wpe"], "position_ids"], "/transformer/wpe", axis=0)
    x = t.op("Add", [tok, pos], "/transformer")  # float /transformer/Add_output_0 without past
    outputs = ["logits"]
    for i in range(cfg.layers):
        sc, key = f"/transformer/h.{i}", f"transformer.h.{i}"
        h = _layer_norm(t, x, w, f"{key}.ln_1", f"{sc}/ln_1")
        a, k, v = _attention(t, h, w, cfg, i, mask, with_past)
        outputs += [k, v]
        x = t.op("Add", [x, a], sc)
        h = _layer_norm(t, x, w, f"{key}.ln_2", f"{sc}/ln_2")
        h = _linear(t, h, w, f"{key}.mlp.c_fc", f"{sc}/mlp/c_fc")
        tanh_name = "t" if (i == 0 and not with_past) else None
        h = _gelu(t, h, f"{sc}/mlp/act", tanh_name)
        h = _linear(t, h, w, f"{key}.mlp.c_proj", f"{sc}/mlp/c_proj")
        x = t.op("Add", [x, h], sc)
    x = _layer_norm(t, x, w, "ln_f", "/transformer/ln_f")
    wte_t = t.op("Transpose", [w["wte"]], "/lm_head", perm=[1, 0])
    t.named("MatMul", [x, wte_t], "/lm_head", "logits")
    return outputs


def _declare_io(
    b: GraphBuilder, cfg: DecoderConfig, *, past: bool, use_cache: bool, mask_axis: str = ""
) -> None:
    b.input("input_ids", INT64, [BATCH, SEQ], value_range=(0, cfg.vocab))
    mask = mask_axis or (TOTAL if past else SEQ)
    b.input("attention_mask", INT64, [BATCH, mask], value_range=(1, 2))
    b.input("position_ids", INT64, [BATCH, SEQ], value_range=(0, cfg.max_positions // 2))
    if past:
        for i in range(cfg.layers):
            for kv in ("key", "value"):
                b.input(f"past_key_values.{i}.{kv}", FLOAT, [BATCH, cfg.heads, PAST, cfg.head_dim])
    if use_cache:
        b.input("use_cache_branch", BOOL, [1])
    out_len = TOTAL if past else SEQ
    b.output("logits", FLOAT, [BATCH, SEQ, cfg.vocab])
    for i in range(cfg.layers):
        for kv in ("key", "value"):
            b.output(f"present.{i}.{kv}", FLOAT, [BATCH, cfg.heads, out_len, cfg.head_dim])


def decoder_with_past(**sizes: int) -> onnx.ModelProto:
    """GPT-2 decoder with KV cache (optimum ``decoder_with_past_model``): past in, present out.

    Traps: ``present.{i}.key/value`` are Concats of the ``past_key_values`` graph inputs with the
    new keys/values (KV I/O that wants to stay low precision end to end), dims are named with
    expressions (``past_sequence_length + sequence_length``), the causal mask is built from Shape
    arithmetic over the past length, and the LM head reads the tied word embedding.
    """
    cfg = DecoderConfig(**sizes)
    b = GraphBuilder("decoder_with_past", cfg.seed)
    _declare_io(b, cfg, past=True, use_cache=False)
    _decoder_nodes(b, cfg, with_past=True)
    return b.model(doc=first_doc_paragraph(decoder_with_past))


def _branch(cfg: DecoderConfig, name: str, with_past: bool) -> tuple[GraphBuilder, list[str]]:
    """One If branch built on its own name registry (names repeat across branches)."""
    b = GraphBuilder(name, cfg.seed)
    outs = _decoder_nodes(b, cfg, with_past)
    for out in outs:
        b.outputs.append(helper.make_tensor_value_info(out, FLOAT, None))
    return b, outs


def decoder_model_merged(mask_axis: str = "", **sizes: int) -> onnx.ModelProto:
    """optimum ``decoder_model_merged``: If(use_cache_branch) over with-past and no-past decoders.

    ``mask_axis``: the name of ``attention_mask``'s axis 1 (default ``past_sequence_length +
    sequence_length``); ``"sequence_length"`` is how some optimum exports misname it, though the
    with-cache branch needs past + current columns.

    Traps: both branches are a full decoder built separately and merged: the weights they share
    live in the outer graph, each branch keeps its own TorchScript value names, so names repeat
    across branches with different dtypes (``t`` is int64 in one branch and float in the other,
    ``/transformer/Add_output_0`` too), branch outputs carry the If's output names, and every
    logits/present output crosses the If boundary.
    """
    cfg = DecoderConfig(**sizes)
    with_past, outs = _branch(cfg, "with_past", True)
    no_past, _ = _branch(cfg, "no_past", False)
    shared = {t.name: t for t in with_past.initializers}
    for init in no_past.initializers:
        if shared.get(init.name) != init:
            raise AssertionError(f"branches disagree on weight {init.name}")
    with_past.initializers, no_past.initializers = [], []

    b = GraphBuilder("decoder_model_merged", cfg.seed)
    _declare_io(b, cfg, past=True, use_cache=True, mask_axis=mask_axis)
    b.initializers = list(shared.values())
    node = helper.make_node(
        "If",
        ["use_cache_branch"],
        outs,
        name="optimum::if",
        then_branch=with_past.graph(),
        else_branch=no_past.graph(),
    )
    b.nodes.append(node)
    return b.model(doc=first_doc_paragraph(decoder_model_merged))


#: Every decoder builder by name; each takes only keyword options with small defaults.
ALL_DECODERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "decoder_with_past": decoder_with_past,
    "decoder_model_merged": decoder_model_merged,
}
