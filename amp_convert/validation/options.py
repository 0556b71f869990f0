"""What a validation (and ``--auto``'s judging) is asked for, checked once.

`ValidateOptions` is built by ``validate()``, by the command line (``validate``, ``convert
--validate``) and by ``--auto``; each field is checked and normalised in ``__post_init__``, so the
steps that read it trust it. ``PROVIDERS`` is the one list of providers; ``--auto`` takes all of
them but ``cpu`` (`AUTO_REFUSED_PROVIDERS` says why). Light imports only: the command line builds
these without loading onnxruntime.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from amp_convert.cost.dims import parse_dims
from amp_convert.errors import OptionError, ValidationError
from amp_convert.options.convert import check_names
from amp_convert.validation.decode import MAX_DECODE_STEPS
from amp_convert.validation.metrics import MATCH_MODES, Thresholds

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: ``auto``: cuda when it starts, else emulate; cpu: ORT CPU as is; emulate: CPU with rounding
PROVIDERS = ("auto", "cuda", "cpu", "emulate")
#: providers ``--auto`` refuses, and why
AUTO_REFUSED_PROVIDERS = {
    "cpu": "--auto needs --provider emulate or cuda (ORT CPU runs FP16 nodes in FP32 and hides "
    "the errors the search looks for)"
}


class ValidateKwargs(TypedDict, total=False):
    """ValidateOptions' fields as keywords of ``validate()``, in the loose forms they accept."""

    provider: str
    inputs: Any
    dims: Mapping[str, int] | Iterable[str] | Iterable[tuple[str, int]] | None
    seed: int
    runs: int | None
    warmup: int
    thresholds: Thresholds | Mapping[str, Any] | None
    top1: str | Collection[str]
    match: Mapping[str, str] | Iterable[str] | None
    decode_steps: int | None
    save_inputs: str | os.PathLike[str] | None


@dataclass(frozen=True)
class ValidateOptions:
    """Provider, inputs and thresholds of one validation; see ``validate()`` for their meaning."""

    provider: str = "auto"
    #: None (seeded random inputs), an ``.npz`` path or dict of arrays, or a list of them
    inputs: Any = None
    dims: Mapping[str, int] = field(default_factory=dict)
    seed: int = 0
    runs: int | None = None
    warmup: int = 3
    thresholds: Thresholds = field(default_factory=Thresholds)
    top1: frozenset[str] = frozenset()
    match: Mapping[str, str] = field(default_factory=dict)
    decode_steps: int | None = None
    #: write the (first sample's) inputs here as an ``.npz`` that ``inputs`` reads back
    save_inputs: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        put = functools.partial(object.__setattr__, self)
        if self.provider not in PROVIDERS:
            raise ValidationError(
                f"provider {self.provider!r}: expected one of {', '.join(PROVIDERS)}"
            )
        for name in ("runs", "warmup", "seed"):
            value = getattr(self, name)
            if name == "runs" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
                raise ValidationError(f"{name} must be a non-negative integer, got {value!r}")
            put(name, int(value))
        steps = self.decode_steps
        if steps is not None:
            if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 1:
                raise ValidationError(f"decode steps must be an integer >= 1, got {steps!r}")
            if steps > MAX_DECODE_STEPS:
                raise ValidationError(
                    f"decode steps: at most {MAX_DECODE_STEPS} (each step runs both models), "
                    f"got {steps}"
                )
            put("decode_steps", int(steps))
        put("dims", parse_dims(self.dims or {}))
        put("thresholds", Thresholds.coerce(self.thresholds))
        put("top1", frozenset((self.top1,) if isinstance(self.top1, str) else self.top1))
        put("match", parse_match(self.match))

    @classmethod
    def from_kwargs(cls, **kwargs: Unpack[ValidateKwargs]) -> ValidateOptions:
        """The options from keywords; an unknown name is an OptionError."""
        _check_names(kwargs)
        return cls(**kwargs)  # type: ignore[arg-type]  # loose values, normalised above

    def replace(self, **kwargs: Unpack[ValidateKwargs]) -> ValidateOptions:
        """These options with some changed (checked again)."""
        _check_names(kwargs)
        return dataclasses.replace(self, **kwargs)  # type: ignore[arg-type]


def _check_names(kwargs: Mapping[str, Any]) -> None:
    check_names(kwargs, [f.name for f in fields(ValidateOptions)], "validation option")


def resolve(options: ValidateOptions | None, kwargs: Mapping[str, Any]) -> ValidateOptions:
    """An entry point's options: ``options`` (default ValidateOptions()) with ``kwargs`` over it."""
    if options is None:
        return ValidateOptions.from_kwargs(**kwargs)
    if not isinstance(options, ValidateOptions):
        raise OptionError(f"options must be a ValidateOptions, not {type(options).__name__}")
    return options.replace(**kwargs) if kwargs else options


def parse_match(items: Any) -> dict[str, str]:
    """``{"boxes": "sort"}`` or ``("boxes:sort",)`` → ``{"boxes": "sort"}``."""
    if isinstance(items, Mapping):
        bad = sorted({str(m) for m in items.values() if m not in MATCH_MODES})
        if bad:
            raise ValidationError(f"match {bad[0]!r}: expected one of {', '.join(MATCH_MODES)}")
        return {str(k): str(v) for k, v in items.items()}
    if isinstance(items, str):
        items = (items,)
    out: dict[str, str] = {}
    for item in items or ():
        name, sep, mode = str(item).rpartition(":")
        if not sep or not name or mode not in MATCH_MODES:
            raise ValidationError(
                f"--match {item!r}: expected NAME:MODE with MODE one of {', '.join(MATCH_MODES)}"
            )
        if out.get(name, mode) != mode:
            raise ValidationError(f"--match given twice for output {name!r}")
        out[name] = mode
    return out
