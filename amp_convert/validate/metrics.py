"""Per-output comparison and the pass/fail rules.

Float outputs (both arrays upcast to float64):

* ``abs = |cand - ref|`` elementwise; where both are non-finite and equal (same ±inf, or both NaN)
  the difference is 0, where only one is non-finite or they differ it is +inf;
* ``max_abs = max(abs)``, ``mean_abs = mean(abs)``;
* ``max_rel = max(abs / max(|ref|, REL_FLOOR))`` with ``REL_FLOOR = 1e-6``, so reference values
  near zero do not turn a tiny absolute error into an enormous relative one;
* ``cosine`` = cosine similarity over the positions where both are finite (1.0 when both vectors
  are zero there, 0.0 when only one is);
* NaN/Inf counts of candidate and reference, and ``nonfinite`` = positions where either is
  non-finite and they are not identical (a candidate ``-inf`` matching a reference ``-inf``, e.g. a
  masked logit, does not count);
* ``top1`` = fraction of rows whose argmax over the last axis agrees, for outputs that look like
  logits (float, rank >= 2, last dim >= 2).

Integer and bool outputs are compared exactly: ``mismatches`` = number of differing elements.

Pass rules (an output with no threshold configured is report-only and passes, except that a shape
mismatch always fails):

* tolerance, when ``atol`` or ``rtol`` is set (a missing one counts as 0):
  ``|cand - ref| <= atol + rtol * |ref|`` for every element where both are finite
  (numpy.isclose semantics, asymmetric in the reference);
* ``cosine >= min_cosine`` when set;
* ``nonfinite <= max_nan`` — ``max_nan`` defaults to 0 as soon as any threshold is set for the
  output, so a threshold never silently lets new NaN/Inf through;
* integer/bool outputs with any threshold set: ``mismatches == 0``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from amp_convert.errors import ValidationError

REL_FLOOR = 1e-6


@dataclass(frozen=True)
class Thresholds:
    """Limits that make validation a check; ``None`` = not checked. ``per_output`` overrides."""

    atol: float | None = None
    rtol: float | None = None
    min_cosine: float | None = None
    max_nan: int | None = None
    per_output: Mapping[str, Thresholds] = field(default_factory=dict)

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
            elif v is not None:
                kw[k] = _number(k, v)
        return cls(**kw)

    def for_output(self, name: str) -> Thresholds:
        """Global values overridden field by field by the output's own entry."""
        own = self.per_output.get(name)
        merged = {f: getattr(self, f) for f in ("atol", "rtol", "min_cosine", "max_nan")}
        if own is not None:
            for f in merged:
                if getattr(own, f) is not None:
                    merged[f] = getattr(own, f)
        return Thresholds(**merged)

    @property
    def active(self) -> bool:
        return any(getattr(self, f) is not None for f in ("atol", "rtol", "min_cosine", "max_nan"))

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in ("atol", "rtol", "min_cosine", "max_nan")}
        if self.per_output:
            d["per_output"] = {k: v.to_dict() for k, v in self.per_output.items()}
        return d


def _number(key: str, v: Any) -> float | int:
    try:
        x = int(v) if key == "max_nan" else float(v)
    except (TypeError, ValueError):
        raise ValidationError(f"thresholds: {key} must be a number, got {v!r}") from None
    if key == "max_nan" and (x < 0 or float(v) != x):
        raise ValidationError(f"thresholds: max_nan must be a non-negative integer, got {v!r}")
    if key in ("atol", "rtol") and (x < 0 or math.isnan(x)):
        raise ValidationError(f"thresholds: {key} must be >= 0, got {v!r}")
    return x


@dataclass
class OutputResult:
    """Numbers for one output, and whether it passed."""

    name: str
    kind: str  # "float" or "exact" (integer/bool) or "skipped"
    reference_dtype: str
    candidate_dtype: str
    shape: list[int]
    elements: int
    max_abs: float | None = None
    max_rel: float | None = None
    mean_abs: float | None = None
    cosine: float | None = None
    top1: float | None = None
    mismatches: int | None = None
    reference_nan: int = 0
    reference_inf: int = 0
    candidate_nan: int = 0
    candidate_inf: int = 0
    nonfinite: int = 0
    thresholds: dict[str, Any] = field(default_factory=dict)
    checked: bool = False
    passed: bool = True
    failures: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {k: _json_number(v) for k, v in asdict(self).items()}


def _json_number(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _json_number(x) for k, x in v.items()}
    return v


def compare_output(
    name: str, ref: np.ndarray | None, cand: np.ndarray | None, limits: Thresholds
) -> OutputResult:
    """Compare one output pair and apply ``limits`` (already resolved for this output)."""
    if ref is None or cand is None:
        return OutputResult(
            name, "skipped", "non-tensor", "non-tensor", [], 0,
            thresholds=limits.to_dict(), failures=[],
        )  # fmt: skip
    ref = np.asarray(ref)
    cand = np.asarray(cand)
    res = OutputResult(
        name=name,
        kind="float",
        reference_dtype=str(ref.dtype),
        candidate_dtype=str(cand.dtype),
        shape=list(ref.shape),
        elements=int(ref.size),
        thresholds=limits.to_dict(),
        checked=limits.active,
    )
    if ref.shape != cand.shape:
        res.kind = "float" if _is_float(ref) else "exact"
        res.passed = False
        res.checked = True
        res.failures.append(
            f"shape mismatch: reference {list(ref.shape)}, candidate {list(cand.shape)}"
        )
        return res
    if not _is_float(ref) and not _is_float(cand):
        _compare_exact(res, ref, cand)
    else:
        _compare_float(res, ref, cand, limits)
    return res


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind in "fc" or a.dtype.name == "bfloat16"


def _compare_exact(res: OutputResult, ref: np.ndarray, cand: np.ndarray) -> None:
    res.kind = "exact"
    diff = ref != cand
    res.mismatches = int(np.count_nonzero(diff))
    if ref.size:
        delta = np.abs(ref.astype(np.float64) - cand.astype(np.float64))
        res.max_abs = float(delta.max())
        res.mean_abs = float(delta.mean())
    else:
        res.max_abs = res.mean_abs = 0.0
    if res.checked and res.mismatches:
        res.passed = False
        res.failures.append(f"{res.mismatches} of {res.elements} elements differ (exact output)")


def _compare_float(res: OutputResult, ref: np.ndarray, cand: np.ndarray, t: Thresholds) -> None:
    r = ref.astype(np.float64)
    c = cand.astype(np.float64)
    r_fin = np.isfinite(r)
    c_fin = np.isfinite(c)
    both = r_fin & c_fin
    res.reference_nan = int(np.count_nonzero(np.isnan(r)))
    res.reference_inf = int(np.count_nonzero(np.isinf(r)))
    res.candidate_nan = int(np.count_nonzero(np.isnan(c)))
    res.candidate_inf = int(np.count_nonzero(np.isinf(c)))
    same_nonfinite = ~both & ((r == c) | (np.isnan(r) & np.isnan(c)))
    res.nonfinite = int(np.count_nonzero(~both & ~same_nonfinite))

    with np.errstate(invalid="ignore", over="ignore"):
        absdiff = np.where(both, np.abs(c - r), np.where(same_nonfinite, 0.0, np.inf))
    if r.size:
        res.max_abs = float(absdiff.max())
        res.mean_abs = float(absdiff.mean())
        denom = np.maximum(np.abs(np.where(r_fin, r, 0.0)), REL_FLOOR)
        res.max_rel = float((absdiff / denom).max())
        rv, cv = r[both], c[both]
        nr, nc = float(np.linalg.norm(rv)), float(np.linalg.norm(cv))
        if nr == 0.0 and nc == 0.0:
            res.cosine = 1.0
        elif nr == 0.0 or nc == 0.0:
            res.cosine = 0.0
        else:
            res.cosine = float(np.clip(np.dot(rv, cv) / (nr * nc), -1.0, 1.0))
        if r.ndim >= 2 and r.shape[-1] >= 2:
            res.top1 = float(np.mean(np.argmax(r, axis=-1) == np.argmax(c, axis=-1)))
    else:
        res.max_abs = res.mean_abs = res.max_rel = 0.0
        res.cosine = 1.0

    if not res.checked:
        return
    if t.atol is not None or t.rtol is not None:
        atol = t.atol or 0.0
        rtol = t.rtol or 0.0
        allowed = atol + rtol * np.abs(np.where(r_fin, r, 0.0))
        bad = both & ~(absdiff <= allowed)
        n_bad = int(np.count_nonzero(bad))
        if n_bad:
            worst = np.where(bad, absdiff - allowed, -np.inf)
            i = np.unravel_index(int(np.argmax(worst)), r.shape)
            res.failures.append(
                f"{n_bad} of {res.elements} elements exceed atol {atol:g} + rtol {rtol:g}*|ref| "
                f"(max_abs {res.max_abs:.4g}; worst at {list(map(int, i))}: "
                f"ref {r[i]:.6g}, cand {c[i]:.6g})"
            )
    if t.min_cosine is not None and not (res.cosine is not None and res.cosine >= t.min_cosine):
        res.failures.append(f"cosine {res.cosine:.6f} < min_cosine {t.min_cosine:g}")
    max_nan = t.max_nan if t.max_nan is not None else 0
    if res.nonfinite > max_nan:
        res.failures.append(
            f"{res.nonfinite} new NaN/Inf values (candidate nan {res.candidate_nan}, "
            f"inf {res.candidate_inf}) > max_nan {max_nan}"
        )
    res.passed = not res.failures


def check_names(thresholds: Thresholds, outputs: list[str]) -> None:
    """Per-output overrides must name real outputs (a typo would silently check nothing)."""
    unknown = sorted(set(thresholds.per_output) - set(outputs))
    if unknown:
        raise ValidationError(
            f"thresholds for unknown output {', '.join(repr(u) for u in unknown)} "
            f"(model outputs: {', '.join(outputs)})"
        )
