"""Which sizes the dynamic dims of a model's inputs take: the one set of rules for every caller.

``validate``, ``--auto``, the HTML probes and ``--decode-steps`` all size random inputs here.

* A named dim (``dim_param``) is one value shared by every axis that names it; an unnamed dim, or
  one whose name only says "unknown" (``?``, ``-1``, ``None`` or empty, as Paddle and other
  exporters write), is its own value, keyed ``<input>[<axis>]``.
* A dim written as an expression over other dims (``past_sequence_length + sequence_length``,
  ``2*s0``) is computed from them (``amp_convert.dims.DimExpr``, no ``eval``), when every name
  it uses is a dim of its own somewhere in the inputs or given by the user; otherwise the text
  is just a name. Names with a fixed meaning by convention count as such expressions:
  ``total_sequence_length`` (ORT GenAI's builder, for the attention mask) is
  ``past_sequence_length + sequence_length`` when the model has both and the user did not set it.
* Defaults: 1 for batch-like names (``batch``, ``batch_size``, ``N``, ``B``, ``bs``) and for the
  first axis of an unnamed rank >= 2 input; 16 for any other name; 1 for other unnamed axes.
* Larger attempts (``DimPlan.attempts``): models often cannot run on the defaults (reflect padding
  longer than the signal, H/W that must be multiples of 32). Each further attempt takes every
  default dim not set by the user one step along its ladder: image H/W (axes 2-3 of a rank-4
  NCHW float input with 1-4 channels, axes 1-2 of NHWC, or names containing ``height``/``width``)
  224 → 640; other non-batch dims 64 → 256 → 1024. Batch-like dims stay 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from amp_convert.dims import DimExpr, parse_dim_expression
from amp_convert.errors import ValidationError

BATCH_DIM = 1
OTHER_DIM = 16
UNNAMED_DIM = 1
_BATCH_NAMES = {"n", "b", "bs", "batch", "batch_size", "batchsize", "nbatch"}
#: dim_param strings that exporters write for "unknown": each such axis is its own dim
UNKNOWN_DIM_NAMES = frozenset({"", "?", "-1", "none"})
IMAGE_LADDER = (224, 640)
SEQUENCE_LADDER = (64, 256, 1024)
_IMAGE_NAMES = ("height", "width")
_FLOAT_TYPES = ("tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)")

Dim = int | str | None
#: dim names whose size exporters define by convention (see the module docstring)
CONVENTIONS = {"total_sequence_length": "past_sequence_length + sequence_length"}


def is_batch_like(name: str) -> bool:
    """Symbolic dim names that conventionally mean the batch size."""
    low = name.lower()
    return low in _BATCH_NAMES or "batch" in low


def is_named(d: Dim) -> bool:
    """A dim_param that names a shared dim (not one of the "unknown" spellings)."""
    return isinstance(d, str) and d.strip().lower() not in UNKNOWN_DIM_NAMES


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


def _unnamed_batch_axis(shape: Sequence[Dim], axis: int) -> bool:
    return axis == 0 and len(shape) >= 2


def _is_image_axis(type_str: str, shape: Sequence[Dim], axis: int) -> bool:
    """H or W of an image input: NCHW / NHWC with 1-4 static channels, or named so."""
    d = shape[axis]
    if is_named(d) and any(n in str(d).lower() for n in _IMAGE_NAMES):
        return True
    if len(shape) != 4 or type_str not in _FLOAT_TYPES:
        return False
    channels = {1, 2, 3, 4}
    if axis in (2, 3) and shape[1] in channels:
        return True
    return axis in (1, 2) and shape[3] in channels


class InputShape(Protocol):
    """What the dim rules need of one input: its name, ORT type string and declared shape."""

    @property
    def name(self) -> str: ...
    @property
    def type_str(self) -> str: ...
    @property
    def shape(self) -> Sequence[Dim]: ...


@dataclass(frozen=True)
class DimPlan:
    """The free dims of a model's inputs (defaults, ladders) and the dims computed from them."""

    defaults: dict[str, int] = field(default_factory=dict)
    ladders: dict[str, tuple[int, ...]] = field(default_factory=dict)
    exprs: dict[str, DimExpr] = field(default_factory=dict)

    @classmethod
    def of(cls, specs: Sequence[InputShape], user: Mapping[str, int] | None = None) -> DimPlan:
        """Read the specs; ``user`` dims count as free dims that expressions may use."""
        user = user or {}
        exprs = _expressions(specs, user)
        defaults: dict[str, int] = {}
        ladders: dict[str, tuple[int, ...]] = {}
        for spec in specs:
            for axis, d in enumerate(spec.shape):
                key = axis_key(spec.name, spec.shape, axis)
                if key is None:
                    continue
                if key in exprs:
                    for name in exprs[key].names:
                        defaults.setdefault(name, _named_default(name))
                        ladders.setdefault(name, () if is_batch_like(name) else SEQUENCE_LADDER)
                    continue
                defaults.setdefault(key, _axis_default(spec.shape, axis))
                named = is_named(d)
                if (named and is_batch_like(str(d))) or (
                    not named and _unnamed_batch_axis(spec.shape, axis)
                ):
                    ladders.setdefault(key, ())
                elif _is_image_axis(spec.type_str, spec.shape, axis):
                    ladders[key] = IMAGE_LADDER  # image wins if any use of the key looks like one
                else:
                    ladders.setdefault(key, SEQUENCE_LADDER)
        return cls(defaults, ladders, exprs)

    @property
    def keys(self) -> set[str]:
        """The dims a user may set (``--dim``)."""
        return set(self.defaults)

    def check_user(self, user: Mapping[str, int]) -> None:
        """Every user dim must name a free dim; values non-negative integers."""
        unknown = sorted(set(user) - self.keys)
        if unknown:
            offered = ", ".join(sorted(self.keys)) or "none (all dims are static)"
            computed = (
                f"; computed from them: {', '.join(sorted(self.exprs))}" if self.exprs else ""
            )
            raise ValidationError(
                f"dim {', '.join(unknown)} matches no dynamic dimension of the model's inputs "
                f"(dynamic dims: {offered}{computed})"
            )
        for k, v in user.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValidationError(f"dim {k}: expected a non-negative integer, got {v!r}")

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
            if key is None:
                shape.append(int(d))  # type: ignore[arg-type]
            elif key in self.exprs:
                try:
                    shape.append(self.exprs[key].evaluate(full))
                except ValueError as e:
                    raise ValidationError(
                        f"input {spec.name!r} axis {axis}: {e} (dims {_fmt(full)})"
                    ) from None
            else:
                shape.append(full[key])
        return shape


def _named_default(name: str) -> int:
    return BATCH_DIM if is_batch_like(name) else OTHER_DIM


def _axis_default(shape: Sequence[Dim], axis: int) -> int:
    d = shape[axis]
    if is_named(d):
        return _named_default(str(d))
    return BATCH_DIM if _unnamed_batch_axis(shape, axis) else UNNAMED_DIM


def _expressions(specs: Sequence[InputShape], user: Mapping[str, int]) -> dict[str, DimExpr]:
    """dim_param texts that are expressions over dims that exist on their own (or are given)."""
    texts = {str(d) for s in specs for d in s.shape if is_named(d)}
    parsed = {t: parse_dim_expression(t) for t in texts}
    plain = {t for t, e in parsed.items() if e is None} | set(user)
    exprs = {t: e for t, e in parsed.items() if e is not None and e.names <= plain}
    for name, text in CONVENTIONS.items():
        meant = parse_dim_expression(text)
        if name in texts and name not in user and meant is not None and meant.names <= plain:
            exprs[name] = meant
    return exprs


def _fmt(dims: Mapping[str, int]) -> str:
    return "(" + (", ".join(f"{k}={v}" for k, v in dims.items()) or "none") + ")"
