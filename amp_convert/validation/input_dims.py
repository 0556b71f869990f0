"""Which sizes the dynamic dims of a model's inputs take: the one set of rules for every caller.

``validate``, ``--auto``, the HTML probes and ``--decode-steps`` all size random inputs here.

* A named dim (``dim_param``) is one value shared by every axis that names it; an unnamed dim, or
  one whose name only says "unknown" (``?``, ``-1``, ``None``, ``unk`` or empty, as Paddle and
  other exporters write), is its own value, keyed ``<input>[<axis>]``.
* A dim written as an expression over other dims (``past_sequence_length + sequence_length``,
  ``2*s0``) is computed from them (``amp_convert.cost.dims.DimExpr``, no ``eval``), when every name
  it uses is a dim of its own somewhere in the inputs or given by the user; otherwise the text
  is just a name.
* A decoder's inputs are recognised once (``decoder_inputs``): the attention mask spans past +
  current tokens whatever its axis is named, every KV cache shares one past length, a
  cross-attention cache spans the encoder states, the head size is the model's own.
* Defaults: ``amp_convert.cost.dim_defaults``, the rules the cast-cost estimate uses too: 1 for a
  batch (batch-like names such as ``batch_size``, ``N``, and the leading axis of a rank >= 2
  input not named otherwise, Paddle's ``p2o.DynamicDimension.0`` included), 224 for image H/W,
  3 for channels named so, 128 for any other dim.
* What the graph itself says (``model_sizes``): a GroupQueryAttention's KV-cache head size
  (ORT GenAI's ``kv_cache_dim``), the positions a decoder's tables hold (the sequence and past
  lengths are sized to fit, leaving ``reserve`` positions free for decode steps), and the sizes
  in its Reshape/Slice targets and later layers.
* A recurrent state input (``state``, ``h0``, ``c``... as ``[layers, ?, hidden]``: a VAD's
  ``[2, ?, 128]``) whose only dynamic axis is unnamed and not the first takes the data inputs'
  batch, as an LSTM's initial state must.
* Further attempts (``DimPlan.attempts``): models often cannot run on the defaults (H/W that must
  be multiples of 32, windows longer than the signal, fewer than 128 positions, a text line 48
  pixels high). Each further attempt takes every default dim not set by the user one step along
  its ladder: image H 640, 48, 32 (text-line heights; W 320 with them); other dims 256 → 1024,
  then 64 → 16 (a position table shorter than the default sequence); then the sizes the graph
  implies. Batches and channels stay; a KV cache is never grown as an image.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from amp_convert.cost.dim_defaults import (
    BATCH_DIM,
    OTHER_DIM,
    UNKNOWN_DIM_NAMES,
    Dim,
    axis_defaults,
    is_batch_like,
    is_named,
    named_default,
)
from amp_convert.cost.dims import DimExpr, Dims, check_dim_names, parse_dim_expression
from amp_convert.errors import ValidationError
from amp_convert.validation.decoder_inputs import FLOAT_TYPES, DecoderInputs, name_expr, recognise
from amp_convert.validation.decoder_inputs import InputLike as InputShape
from amp_convert.validation.model_sizes import ModelSizes

__all__ = [
    "BATCH_DIM",
    "OTHER_DIM",
    "UNKNOWN_DIM_NAMES",
    "Dim",
    "DimPlan",
    "axis_key",
    "is_batch_like",
    "is_named",
    "is_static",
]
#: image H: detectors' 640, then text-line heights (a recognizer's later layers fix its H)
IMAGE_LADDER = (640, 48, 32)
#: image W alongside: a text line is wide
IMAGE_W_LADDER = (640, 320, 320)
#: longer first (windows, strides), then shorter (a position table shorter than the default)
SEQUENCE_LADDER = (256, 1024, 64, 16)
#: recurrent state inputs whose unnamed axis is the batch (an LSTM's [layers, batch, hidden])
_STATE_INPUTS = re.compile(r"state|hidden|^[hc]n?\d*$|^[hc]_|_[hc]\d*$|^(h|c)0", re.I)
_LADDERS: dict[str, tuple[int, ...]] = {
    "batch": (),
    "channels": (),
    "image": IMAGE_LADDER,
    "other": SEQUENCE_LADDER,
}


def is_static(d: Dim) -> bool:
    return isinstance(d, int) and d >= 0


def axis_key(name: str, shape: Sequence[Dim], axis: int) -> str | None:
    """The key an axis is set by (its name, or ``input[axis]``); None for a static axis."""
    d = shape[axis]
    if is_static(d):
        return None
    if is_named(d):
        return str(d)
    return f"{name}[{axis}]"


@dataclass(frozen=True)
class DimPlan:
    """The free dims of a model's inputs (defaults, ladders) and the dims computed from them."""

    defaults: dict[str, int] = field(default_factory=dict)
    ladders: dict[str, tuple[int, ...]] = field(default_factory=dict)
    exprs: dict[str, DimExpr] = field(default_factory=dict)
    #: (input, axis) sized by an expression whatever the axis's own key (a decoder's mask, caches)
    links: dict[tuple[str, int], DimExpr] = field(default_factory=dict)
    decoder: DecoderInputs = field(default_factory=DecoderInputs)

    @classmethod
    def of(
        cls,
        specs: Sequence[InputShape],
        user: Mapping[str, int] | None = None,
        outputs: Mapping[str, Sequence[Dim]] | None = None,
        sizes: ModelSizes | None = None,
        reserve: int = 0,
    ) -> DimPlan:
        """Read the specs; ``user`` dims count as free dims that expressions may use;
        ``outputs`` (the model's declared output shapes) tell a cache's head size; ``sizes``
        what the graph implies (``model_sizes``); ``reserve`` positions are left free for
        decode steps."""
        user = user or {}
        sizes = sizes or ModelSizes()
        decoder = recognise(specs, outputs, user)
        decoder = replace(decoder, fixed={**_head_keys(specs, sizes, user), **decoder.fixed})
        exprs = _expressions(specs, user)
        links = dict(decoder.links)
        keys: list[tuple[str, int, str]] = []
        for spec in specs:
            for axis in range(len(spec.shape)):
                key = axis_key(spec.name, spec.shape, axis)
                if key is None:
                    continue
                if (spec.name, axis) in links or key in exprs:
                    continue  # computed: a key used only by computed axes is no free dim
                keys.append((spec.name, axis, key))
        inputs = [(s.name, s.type_str in FLOAT_TYPES, s.shape) for s in specs]
        roles = axis_defaults(inputs, keys)
        state, replaced = _state_links(specs, keys, roles, user)
        links.update(state)
        widths = _width_keys(specs, keys, roles)
        extra = tuple(sizes.sizes)
        defaults: dict[str, int] = {}
        ladders: dict[str, tuple[int, ...]] = {}
        for key, (value, role) in roles.items():
            if key in replaced:
                continue
            defaults[key] = decoder.fixed.get(key, value)
            ladder = _LADDERS[role]
            if role == "image":
                ladder = IMAGE_W_LADDER if key in widths else IMAGE_LADDER + extra
            elif role == "other":
                ladder = ladder + extra
            ladders[key] = () if key in decoder.fixed else ladder
        names = {n for e in (*exprs.values(), *links.values()) for n in e.names}
        for name in sorted(names - set(defaults)):
            defaults[name] = named_default(name)
            ladders[name] = () if is_batch_like(name) else SEQUENCE_LADDER + extra
        _fit_positions(decoder, specs, defaults, ladders, sizes.position_limit, reserve, user)
        return cls(defaults, ladders, exprs, links, decoder)

    @property
    def keys(self) -> set[str]:
        """The dims a user may set (``--dim``)."""
        return set(self.defaults)

    def check_user(self, user: Mapping[str, int]) -> None:
        """Every user dim names a free dim (cost/dims.check_dim_names: the one check and message
        of --dim); values non-negative integers (the one parser)."""
        offered = ", ".join(sorted(self.keys)) or "none (all dims are static)"
        if self.exprs:
            offered += f"; computed from them: {', '.join(sorted(self.exprs))}"
        check_dim_names(sorted(Dims(user)), self.keys, listed=offered)

    def attempts(self, user: Mapping[str, int] | None = None) -> list[dict[str, int]]:
        """The dims to try in order: the defaults, then each step of the ladders.

        User dims are kept in every attempt; identical attempts are dropped.
        """
        user = dict(user or {})
        ladders = {k: v for k, v in self.ladders.items() if k not in user}
        attempts = [{**self.defaults, **user}]
        steps = max((len(v) for v in ladders.values()), default=0)
        for step in range(steps):
            grown = {
                k: (v[min(step, len(v) - 1)] if v else self.defaults[k]) for k, v in ladders.items()
            }
            attempt = {**self.defaults, **grown, **user}
            if attempt not in attempts:
                attempts.append(attempt)
        return attempts

    def shape(self, spec: InputShape, values: Mapping[str, int]) -> list[int]:
        """Concrete shape of ``spec`` for ``values`` (free dims; defaults fill the rest)."""
        full = {**self.defaults, **values}
        shape: list[int] = []
        for axis, d in enumerate(spec.shape):
            key = axis_key(spec.name, spec.shape, axis)
            expr = self.links.get((spec.name, axis))
            if key is None:
                shape.append(int(d))  # type: ignore[arg-type]
            elif expr is not None or key in self.exprs:
                try:
                    shape.append((expr or self.exprs[key]).evaluate(full))
                except ValueError as e:
                    raise ValidationError(
                        f"input {spec.name!r} axis {axis}: {e} (dims {_fmt(full)})"
                    ) from None
            else:
                shape.append(full[key])
        return shape


def _expressions(specs: Sequence[InputShape], user: Mapping[str, int]) -> dict[str, DimExpr]:
    """dim_param texts that are expressions over dims that exist on their own (or are given)."""
    texts = {str(d) for s in specs for d in s.shape if is_named(d)}
    parsed = {t: parse_dim_expression(t) for t in texts}
    plain = {t for t, e in parsed.items() if e is None} | set(user)
    return {t: e for t, e in parsed.items() if e is not None and e.names <= plain}


def _fmt(dims: Mapping[str, int]) -> str:
    return "(" + (", ".join(f"{k}={v}" for k, v in dims.items()) or "none") + ")"


def _state_links(
    specs: Sequence[InputShape],
    keys: Sequence[tuple[str, int, str]],
    roles: Mapping[str, tuple[int, str]],
    user: Mapping[str, int],
) -> tuple[dict[tuple[str, int], DimExpr], set[str]]:
    """A recurrent state's unnamed batch axis follows the data inputs' batch (see the module
    docstring): the links, and the keys they replace (no free dims any more). Nothing when no
    data input has a batch axis or the user sized the axis."""
    batch = next(
        (k for n, _, k in keys if roles[k][1] == "batch" and not _STATE_INPUTS.search(n)), None
    )
    links: dict[tuple[str, int], DimExpr] = {}
    replaced: set[str] = set()
    if batch is None:
        return links, replaced
    for spec in specs:
        if not _STATE_INPUTS.search(spec.name) or spec.type_str not in FLOAT_TYPES:
            continue
        dynamic = [a for a, d in enumerate(spec.shape) if not is_static(d)]
        if len(spec.shape) < 2 or len(dynamic) != 1 or dynamic[0] == 0:
            continue
        axis = dynamic[0]
        if is_named(spec.shape[axis]):
            continue  # a named axis is shared by name already
        key = f"{spec.name}[{axis}]"
        if key in user:
            continue
        links[(spec.name, axis)] = name_expr(batch)
        replaced.add(key)
    return links, replaced


def _width_keys(
    specs: Sequence[InputShape],
    keys: Sequence[tuple[str, int, str]],
    roles: Mapping[str, tuple[int, str]],
) -> set[str]:
    """Image keys used only as a W axis (the last spatial axis: NCHW's 3, NHWC's 2)."""
    rank = {s.name: len(s.shape) for s in specs}
    nhwc = {s.name for s in specs if len(s.shape) == 4 and s.shape[3] in (1, 3, 4)}
    widths: set[str] = set()
    heights: set[str] = set()
    for name, axis, key in keys:
        if roles[key][1] != "image" or rank[name] != 4:
            continue
        w_axis = 2 if name in nhwc and axis in (1, 2) else 3
        (widths if axis == w_axis else heights).add(key)
    return widths - heights


def _head_keys(
    specs: Sequence[InputShape], sizes: ModelSizes, user: Mapping[str, int]
) -> dict[str, int]:
    """Keys of KV-cache head axes whose size the attention node fixes."""
    fixed: dict[str, int] = {}
    for spec in specs:
        size = sizes.head_sizes.get(spec.name)
        if size is None or not spec.shape:
            continue
        key = axis_key(spec.name, spec.shape, len(spec.shape) - 1)
        if key is not None and key not in user:
            fixed[key] = size
    return fixed


def _fit_positions(
    decoder: DecoderInputs,
    specs: Sequence[InputShape],
    defaults: dict[str, int],
    ladders: dict[str, tuple[int, ...]],
    limit: int | None,
    reserve: int,
    user: Mapping[str, int],
) -> None:
    """A decoder's current + past length (and ``reserve`` decode steps) within its positions."""
    if limit is None or not decoder.past:
        return
    by_name = {s.name: s for s in specs}
    tokens = next((by_name[t] for t in ("input_ids", "decoder_input_ids") if t in by_name), None)
    seq = axis_key(tokens.name, tokens.shape, 1) if tokens and len(tokens.shape) >= 2 else None
    free = [k for k in (decoder.past, seq) if k is not None and k in defaults and k not in user]
    taken = sum(user.get(k, 0) for k in (decoder.past, seq) if k is not None and k in user)
    room = limit - reserve - taken
    if not free or room < len(free):
        return
    share = max(1, room // len(free))
    for k in free:
        if user.get(k) is None and defaults[k] > share:
            defaults[k] = share
            ladders[k] = tuple(v for v in ladders.get(k, ()) if v <= share)
