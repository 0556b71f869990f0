"""A decoder's input interface, recognised once so its random inputs are consistent.

Exporters name a decoder's dims in ways that do not say how they relate; the sizes that make the
model run follow from what the inputs are, not from their dim names:

* the self-attention KV cache (``past_key_values.N.key``, ``past.N``, ``past_N``,
  ``past_key_values.N.decoder.key``, ``*cache*``): every cache shares one past length, whatever
  its axes are called (optimum's ``past_sequence_length``, ORT GenAI's ``kv_cache_dim``, or
  nothing at all);
* ``attention_mask`` spans past + current tokens (optimum's merged decoder names its axis
  ``sequence_length``, ORT GenAI ``total_sequence_length``; both mean past + sequence);
* an encoder-decoder's cross-attention cache (``past_key_values.N.encoder.*``, ``*cross*``)
  spans the encoder's sequence: the length of ``encoder_hidden_states`` (or
  ``encoder_attention_mask``) when the model has it;
* the cache's head size, when its axis is dynamic, is the size the model's own ``present.*``
  output declares.

``links`` gives, per (input, axis), the expression over free dims that sizes it
(``input_dims.DimPlan`` uses them in place of the axis's own key); ``fixed`` gives free dims
whose value the model's shapes fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from amp_convert.cost.dim_defaults import Dim, axis_role, is_named
from amp_convert.cost.dims import DimExpr, parse_dim_expression

_PAST = re.compile(r"^(?:past_key_values|past|cache)[._]?(.*)$|cache", re.I)
_CROSS = re.compile(r"[._](encoder|cross)[._]|cross_?attn|cross", re.I)
_ENCODER_STATES = ("encoder_hidden_states", "encoder_outputs", "audio_features", "encoder_output")
_ENCODER_MASK = "encoder_attention_mask"
_MASKS = ("attention_mask", "decoder_attention_mask")
FLOAT_TYPES = ("tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)")
_TOKENS = ("input_ids", "decoder_input_ids", "inputs_embeds")


def is_cross_cache(name: str) -> bool:
    """An encoder-decoder's cross-attention cache input (``past_key_values.0.encoder.key``)."""
    return bool(_CROSS.search(name))


def _key(name: str, shape: Sequence[Dim], axis: int) -> str | None:
    d = shape[axis]
    if isinstance(d, int) and d >= 0:
        return None
    return str(d) if is_named(d) else f"{name}[{axis}]"


def name_expr(*keys: str) -> DimExpr:
    """The sum of the dims ``keys`` (any spelling: keys are looked up, never parsed)."""
    return DimExpr.sum_of(keys)


class InputLike(Protocol):
    """What recognition needs of an input: its name, ORT type string and declared shape."""

    @property
    def name(self) -> str: ...
    @property
    def type_str(self) -> str: ...
    @property
    def shape(self) -> Sequence[Dim]: ...


@dataclass(frozen=True)
class DecoderInputs:
    """The decoder roles found among a model's inputs (empty for a model that is no decoder)."""

    self_cache: tuple[tuple[str, int], ...] = ()  # (input, past axis)
    cross_cache: tuple[tuple[str, int], ...] = ()
    links: dict[tuple[str, int], DimExpr] = field(default_factory=dict)
    fixed: dict[str, int] = field(default_factory=dict)
    #: the past length's key (None without a self-attention cache)
    past: str | None = None


def _past_axis(name: str, shape: Sequence[Dim]) -> int | None:
    """The cache's length axis: its first dynamic axis that is neither the batch nor the last
    (head size); [B, H, P, D], [B, P, H*D] and GPT-2's [2, B, H, P, D] alike."""
    for axis in range(len(shape) - 1):
        if _key(name, shape, axis) is None:
            continue
        if axis_role(name, True, shape, axis) == "batch":
            continue
        return axis
    return None


def recognise(
    specs: Sequence[InputLike],
    outputs: Mapping[str, Sequence[Dim]] | None = None,
    user: Mapping[str, int] | None = None,
) -> DecoderInputs:
    """Find the decoder roles among ``specs``; ``outputs`` are the model's declared output
    shapes (for the head size), ``user`` the dims the user set (never overridden)."""
    user = user or {}
    outputs = outputs or {}
    self_cache: list[tuple[str, int]] = []
    cross_cache: list[tuple[str, int]] = []
    fixed: dict[str, int] = {}
    by_name = {s.name: s for s in specs}
    for s in specs:
        if not _PAST.search(s.name) or s.type_str not in FLOAT_TYPES or len(s.shape) < 2:
            continue
        axis = _past_axis(s.name, s.shape)
        if axis is None:
            continue
        (cross_cache if is_cross_cache(s.name) else self_cache).append((s.name, axis))
        _head_size(s, outputs, user, fixed)
    links: dict[tuple[str, int], DimExpr] = {}
    past = None
    if self_cache:
        name, axis = self_cache[0]
        past = _key(name, by_name[name].shape, axis)
        assert past is not None
        _share(self_cache, by_name, past, links, user)
        tokens = next((by_name[t] for t in _TOKENS if t in by_name), None)
        seq = _key(tokens.name, tokens.shape, 1) if tokens and len(tokens.shape) >= 2 else None
        for m in _MASKS:
            mask = by_name.get(m)
            if seq is None or mask is None or len(mask.shape) < 2:
                continue
            mkey = _key(mask.name, mask.shape, len(mask.shape) - 1)
            if mkey is None or (mkey in user and mkey not in (seq, past)):
                continue  # static, or the user sized it
            parsed = parse_dim_expression(mkey)
            if parsed is None or parsed.names != {past, seq}:
                links[(mask.name, len(mask.shape) - 1)] = name_expr(past, seq)
    if cross_cache:
        enc = _encoder_length(by_name)
        if enc is None:
            name, axis = cross_cache[0]
            enc = _key(name, by_name[name].shape, axis)
        assert enc is not None
        _share(cross_cache, by_name, enc, links, user)
    return DecoderInputs(tuple(self_cache), tuple(cross_cache), links, fixed, past)


def _share(
    caches: list[tuple[str, int]],
    by_name: Mapping[str, InputLike],
    key: str,
    links: dict[tuple[str, int], DimExpr],
    user: Mapping[str, int],
) -> None:
    for name, axis in caches:
        own = _key(name, by_name[name].shape, axis)
        if own != key and own not in user:
            links[(name, axis)] = name_expr(key)


def _encoder_length(by_name: Mapping[str, InputLike]) -> str | None:
    for n in (*_ENCODER_STATES, _ENCODER_MASK):
        s = by_name.get(n)
        if s is not None and len(s.shape) >= 2:
            return _key(s.name, s.shape, 1)
    return None


def _head_size(
    spec: InputLike,
    outputs: Mapping[str, Sequence[Dim]],
    user: Mapping[str, int],
    fixed: dict[str, int],
) -> None:
    """A dynamic last axis takes the size the matching ``present`` output declares."""
    key = _key(spec.name, spec.shape, len(spec.shape) - 1)
    if key is None or key in user:
        return
    m = re.match(r"^(?:past_key_values|past)[._](.+)$", spec.name)
    if m is None:
        return
    for out in (
        f"present.{m.group(1)}",
        f"present_{m.group(1)}",
        f"present_key_values.{m.group(1)}",
    ):
        shape = outputs.get(out)
        if shape and len(shape) == len(spec.shape):
            d = shape[-1]
            if isinstance(d, int) and d > 0:
                fixed[key] = d
                return
