"""The limits that make a validation a check (``Thresholds``), checked once when built.

Why its own module: the thresholds are what every entry point builds (the command line's flags,
the API's dict, ``--auto``'s limits) and the comparison (``metrics``) only reads.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from amp_convert.errors import ValidationError

#: how an output is matched: element by element, or after sorting along the last axis
MATCH_MODES = ("position", "sort")

__all__ = [
    "DEFAULT_THRESHOLDS_SPEC",
    "ERROR_STATS",
    "JUDGING_KEYS",
    "THRESHOLD_KEYS",
    "Thresholds",
    "check_error_stat",
    "statistic",
]


#: the threshold fields, in the order reports give them
THRESHOLD_KEYS = ("atol", "rtol", "min_cosine", "max_nan", "error_stat", "max_mismatch")
#: the fields that judge on their own (error_stat and max_mismatch shape the atol/rtol check)
JUDGING_KEYS = ("atol", "rtol", "min_cosine", "max_nan")
#: statistics ``error_stat`` names besides a quantile ``pNN`` (``p99``, ``p99.9``)
ERROR_STATS = ("elementwise", "max", "mean", "median")
_QUANTILE = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")


@dataclass(frozen=True)
class Thresholds:
    """Limits that make validation a check; ``None`` = not checked. ``per_output`` overrides.

    ``atol``/``rtol`` bound the error element by element (``|cand - ref| <= atol + rtol*|ref|``)
    unless ``error_stat`` names a statistic S of the error (``max``, ``mean``, ``median``, a
    quantile ``p99``/``p99.9``): then ``S(|cand - ref|) <= atol + rtol * S(|ref|)``. With
    ``max_mismatch`` (a fraction, 0-1) the element-wise bound may be exceeded by at most that
    share of the elements. Both shape the atol/rtol check and need one of them.
    """

    atol: float | None = None
    rtol: float | None = None
    min_cosine: float | None = None
    max_nan: int | None = None
    error_stat: str | None = None
    max_mismatch: float | None = None
    per_output: Mapping[str, Thresholds] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.error_stat is not None:
            check_error_stat(self.error_stat)

    @classmethod
    def coerce(cls, value: Thresholds | Mapping[str, Any] | None) -> Thresholds:
        """Accept a Thresholds, None, or a dict ``{"atol": .., "per_output": {name: {..}}}``."""
        if value is None:
            return cls()
        if isinstance(value, Thresholds):
            per = {k: cls.coerce(v) for k, v in value.per_output.items()}
            return replace(value, per_output=per)
        if not isinstance(value, Mapping):
            raise ValidationError(f"thresholds: expected a dict or Thresholds, got {value!r}")
        known = {f.name for f in fields(cls)}
        bad = sorted(set(value) - known)
        if bad:
            raise ValidationError(
                f"thresholds: unknown key {', '.join(bad)} (known: {', '.join(sorted(known))})"
            )
        kw: dict[str, Any] = {}
        for k, v in value.items():
            if k == "per_output":
                kw[k] = {str(n): cls.coerce(t) for n, t in (v or {}).items()}
            elif k == "error_stat" and v is not None:
                kw[k] = check_error_stat(v)
            elif v is not None:
                kw[k] = _number(k, v)
        return cls(**kw)

    def for_output(self, name: str) -> Thresholds:
        """Global values overridden field by field by the output's own entry."""
        own = self.per_output.get(name)
        merged = {f: getattr(self, f) for f in THRESHOLD_KEYS}
        if own is not None:
            for f in merged:
                if getattr(own, f) is not None:
                    merged[f] = getattr(own, f)
        return Thresholds(**merged)

    @property
    def active(self) -> bool:
        return any(getattr(self, f) is not None for f in JUDGING_KEYS)

    @property
    def any_set(self) -> bool:
        """Any threshold set, globally or for an output (the user asked for a judgement)."""
        own = any(getattr(self, f) is not None for f in THRESHOLD_KEYS)
        return own or any(t.any_set for t in self.per_output.values())

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in JUDGING_KEYS}
        for f in ("error_stat", "max_mismatch"):  # only when set: reports stay as they were
            if getattr(self, f) is not None:
                d[f] = getattr(self, f)
        if self.per_output:
            d["per_output"] = {k: v.to_dict() for k, v in self.per_output.items()}
        return d


#: what every command judges by when the user sets no threshold (``validate``, ``convert
#: --validate``, ``--auto``, the Olive pass): a conversion that works measures cosine 0.999+ on
#: every output, and a new NaN/Inf is an overflow. ``--report-only`` judges nothing instead.
DEFAULT_THRESHOLDS_SPEC: dict[str, Any] = {"min_cosine": 0.999, "max_nan": 0}


def check_error_stat(value: Any) -> str:
    """``max``, ``mean``, ``median``, ``elementwise`` or a quantile ``pNN`` (0 < NN < 100)."""
    text = str(value).strip().lower()
    m = _QUANTILE.match(text)
    if text in ERROR_STATS or (m is not None and 0 < float(m.group(1)) < 100):
        return text
    raise ValidationError(
        f"error statistic {value!r}: expected one of {', '.join(ERROR_STATS)} or a quantile "
        "such as p99 or p99.9"
    )


def statistic(values: np.ndarray, stat: str) -> float:
    if values.size == 0:
        return 0.0
    if stat == "mean":
        return float(values.mean())
    if stat == "median":
        return float(np.median(values))
    if stat.startswith("p"):
        return float(np.quantile(values, float(stat[1:]) / 100.0))
    return float(values.max())


def _number(key: str, v: Any) -> float | int:
    try:
        x = int(v) if key == "max_nan" else float(v)
    except (TypeError, ValueError, OverflowError):
        raise ValidationError(f"thresholds: {key} must be a number, got {v!r}") from None
    if key == "max_nan" and (x < 0 or float(v) != x):
        raise ValidationError(f"thresholds: max_nan must be a non-negative integer, got {v!r}")
    if key in ("atol", "rtol") and not (0 <= x < math.inf):
        raise ValidationError(f"thresholds: {key} must be a finite number >= 0, got {v!r}")
    if key == "min_cosine" and not (-1.0 <= x <= 1.0):
        raise ValidationError(f"thresholds: min_cosine must be between -1 and 1, got {v!r}")
    if key == "max_mismatch" and not (0.0 <= x <= 1.0):
        raise ValidationError(f"thresholds: max_mismatch is a fraction (0-1), got {v!r}")
    return x
