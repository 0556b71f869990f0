"""Per-output comparison and the pass/fail rules.

Float outputs (both arrays upcast to float64). Let ``F`` be the positions where both values are
finite and ``M`` the non-finite mismatches: positions where either value is NaN/Inf and the two are
not identical (a candidate ``-inf`` matching a reference ``-inf``, e.g. a masked logit, or NaN
matching NaN, is identical and belongs to neither set).

* ``abs = |cand - ref|`` elementwise: 0 at identical non-finite pairs, +inf on ``M``;
* ``max_abs = max(abs)``, ``mean_abs = mean(abs)``;
* ``max_rel = max(abs / max(|ref|, REL_FLOOR))`` with ``REL_FLOOR = 1e-6``, so reference values
  near zero do not turn a tiny absolute error into an enormous relative one;
* ``cosine`` counts every position of ``M`` as a full mismatch::

      cosine = sum_F(r*c) / (sqrt(sum_F(r^2) + |M| s^2) * sqrt(sum_F(c^2) + |M| s^2))

  where ``s^2`` is the mean of ``r^2`` over the positions where the reference is finite (1 when
  that is 0 or there are none): each mismatch acts as a pair of orthogonal components of the
  reference's typical size, adding to both norms and nothing to the dot product. Without
  mismatches it is the ordinary cosine similarity over ``F`` (1.0 when both vectors are zero there,
  0.0 when only one is); an all-inf candidate against a finite reference gets 0.0, never 1.0;
* ``cosine_finite`` = the ordinary cosine over ``F`` alone, leaving ``M`` out (None when ``F`` is
  empty). It says how close the finite part is; it is never what thresholds check;
* NaN/Inf counts of candidate and reference, and ``nonfinite = |M|``;
* ``top1`` = fraction of rows whose argmax over the last axis agrees, a row with a position in
  ``M`` counting as disagreeing. Computed for outputs that look like class scores (float, rank
  2 ``[N, C]`` with ``C > 1``, not named like a box/landmark/keypoint/embedding regression:
  ``looks_like_class_scores``), and for any float output whose last axis has at least 2
  elements when asked for by name (``--top1 NAME``); None otherwise.

Order-insensitive outputs (``match="sort"``, CLI ``--match NAME:sort``): both arrays are sorted
along their last axis before anything above is computed, so two near-equal scores that swap places
(detections after NMS, top-k lists) compare as equal values; top-1 is not computed for them.

Integer and bool outputs are compared exactly: ``mismatches`` = number of differing elements.

Verdicts (``OutputResult.status``):

* ``fail`` when any rule below is broken. Two rules hold with no threshold at all: a shape
  mismatch fails, and so does any non-finite mismatch (``nonfinite > max_nan``, ``max_nan``
  defaulting to 0): a candidate with NaN/Inf the reference does not have (or the reverse) is
  never called good;
* ``pass`` when the output was checked against at least one explicit threshold and broke none;
* ``not_judged`` when no threshold applies to it and nothing failed (report only);
* ``skipped`` for non-tensor outputs, which are not compared.

Threshold rules:

* tolerance, when ``atol`` or ``rtol`` is set (a missing one counts as 0):
  ``|cand - ref| <= atol + rtol * |ref|`` for every element where both are finite
  (numpy.isclose semantics, asymmetric in the reference);
* ``cosine >= min_cosine`` when set (the cosine that counts ``M``, not ``cosine_finite``);
* ``nonfinite <= max_nan`` (0 unless set);
* integer/bool outputs with any threshold set: ``mismatches == 0``.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from amp_convert.errors import ValidationError
from amp_convert.validation.float_stats import REL_FLOOR as REL_FLOOR  # re-exported
from amp_convert.validation.float_stats import FloatStats, any_finite, chunks
from amp_convert.validation.thresholds import MATCH_MODES as MATCH_MODES  # re-exported
from amp_convert.validation.thresholds import (
    Thresholds,
    statistic,
)


@dataclass
class OutputResult:
    """Numbers for one output and its verdict (``status``; see the module docstring)."""

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
    cosine_finite: float | None = None
    #: ||candidate|| / ||reference|| over finite positions: the scale cosine does not see
    norm_ratio: float | None = None
    top1: float | None = None
    mismatches: int | None = None
    reference_nan: int = 0
    reference_inf: int = 0
    candidate_nan: int = 0
    candidate_inf: int = 0
    nonfinite: int = 0
    thresholds: dict[str, Any] = field(default_factory=dict)
    checked: bool = False
    failures: list[str] = field(default_factory=list)
    #: "position", or "sort": compared after sorting along the last axis
    match: str = "position"
    #: index of the sample (``--inputs`` file) this result comes from when there are several
    sample: int | None = None
    #: share of the elements beyond the element-wise atol/rtol bound (when it was checked)
    mismatch_fraction: float | None = None
    #: the error statistic checked (``error_stat``), when one was
    error_stat_value: float | None = None

    @property
    def status(self) -> str:
        """``fail``, ``pass`` (checked, nothing broken), ``not_judged`` or ``skipped``."""
        if self.failures:
            return "fail"
        if self.kind == "skipped":
            return "skipped"
        return "pass" if self.checked else "not_judged"

    @property
    def passed(self) -> bool:
        """True only when explicit thresholds were checked and all held."""
        return self.status == "pass"

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("mismatch_fraction", "error_stat_value"):  # new keys only when computed
            if d[key] is None:
                del d[key]
        d["status"] = self.status
        d["passed"] = self.passed
        return {k: json_number(v) for k, v in d.items()}


def json_number(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: json_number(x) for k, x in v.items()}
    return v


def compare_output(
    name: str,
    ref: np.ndarray | None,
    cand: np.ndarray | None,
    limits: Thresholds,
    *,
    top1: bool | None = None,
    match: str = "position",
) -> OutputResult:
    """Compare one output pair and apply ``limits`` (already resolved for this output).

    ``top1``: None computes top-1 agreement only for outputs that look like class scores
    (``looks_like_class_scores``: rank 2, not a box or landmark regression),
    True for any float output whose last axis has 2 or more elements, False never.
    ``match="sort"`` compares both after sorting along the last axis (no top-1 then).
    """
    if match not in MATCH_MODES:
        raise ValidationError(f"match {match!r}: expected one of {', '.join(MATCH_MODES)}")
    if ref is None or cand is None:
        return OutputResult(
            name, "skipped", "non-tensor", "non-tensor", [], 0, thresholds=limits.to_dict()
        )
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
        match=match,
    )
    if ref.shape == cand.shape and (ref.size == 0 or (_is_float(ref) and not any_finite(ref))):
        res.kind = "skipped"  # nothing to compare (no element, no finite value): never a PASS
        return res
    if match == "sort" and ref.shape == cand.shape and ref.ndim >= 1:
        ref, cand, top1 = np.sort(ref, axis=-1), np.sort(cand, axis=-1), False
    if ref.shape != cand.shape:
        res.kind = "float" if _is_float(ref) else "exact"
        res.failures.append(
            f"shape mismatch: reference {list(ref.shape)}, candidate {list(cand.shape)}"
        )
        return res
    if not _is_float(ref) and not _is_float(cand):
        _compare_exact(res, ref, cand)
    else:
        _compare_float(res, ref, cand, limits, top1)
    return res


#: output names that say "regression": boxes, landmarks, keypoints, offsets (top-1 means nothing)
_REGRESSION = re.compile(
    r"box|bbox|landm|lmk|kps|kpt|keypoint|point|coord|loc(ation)?s?\b|regress|reg\b|delta|"
    r"offset|pose|depth|angle|embed|feature|hidden|vector",
    re.I,
)


def looks_like_class_scores(name: str, shape: tuple[int, ...] | list[int]) -> bool:
    """Top-1 means something: rank 2 ``[N, C]`` with ``C > 1``, not named like a regression
    (boxes, landmarks, keypoints, embeddings: ``bbox``, ``landms``, ``kps``... as detectors name
    their heads)."""
    return len(shape) == 2 and shape[1] > 1 and not _REGRESSION.search(name)


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind in "fc" or a.dtype.name == "bfloat16"


def _compare_exact(res: OutputResult, ref: np.ndarray, cand: np.ndarray) -> None:
    res.kind = "exact"
    diff = ref != cand
    res.mismatches = int(np.count_nonzero(diff))
    if ref.dtype.kind in "OUSV" or cand.dtype.kind in "OUSV":
        pass  # strings and other non-numbers: compared exactly, no distance
    elif ref.size:
        top, total = 0.0, 0.0
        for r, c, _ in chunks(ref, cand, rows=False):
            delta = np.abs(r - c)
            top, total = max(top, float(delta.max())), total + float(delta.sum())
        res.max_abs, res.mean_abs = top, total / ref.size
    else:
        res.max_abs = res.mean_abs = 0.0
    if res.checked and res.mismatches:
        res.failures.append(f"{res.mismatches} of {res.elements} elements differ (exact output)")


def _cosine(dot: float, rr: float, cc: float) -> float:
    """dot / (sqrt(rr) sqrt(cc)) with the zero-vector conventions of the module docstring."""
    if rr == 0.0 and cc == 0.0:
        return 1.0
    if rr == 0.0 or cc == 0.0:
        return 0.0
    return float(np.clip(dot / (math.sqrt(rr) * math.sqrt(cc)), -1.0, 1.0))


def _compare_float(
    res: OutputResult, ref: np.ndarray, cand: np.ndarray, t: Thresholds, top1: bool | None
) -> None:
    """The figures of the module docstring, gathered a chunk at a time (float_stats)."""
    want_top1 = looks_like_class_scores(res.name, ref.shape) if top1 is None else top1
    want_top1 = bool(want_top1 and ref.ndim >= 1 and ref.shape[-1] >= 2)
    tolerance = None
    if res.checked and (t.atol is not None or t.rtol is not None):
        tolerance = (t.atol or 0.0, t.rtol or 0.0)
    st = FloatStats()
    for r, c, offset in chunks(ref, cand, rows=want_top1):
        st.add(r, c, offset, tolerance, want_top1)
    res.reference_nan, res.reference_inf = st.ref_nan, st.ref_inf
    res.candidate_nan, res.candidate_inf = st.cand_nan, st.cand_inf
    res.nonfinite = st.nonfinite
    if st.size:
        res.max_abs, res.mean_abs, res.max_rel = st.max_abs, st.sum_abs / st.size, st.max_rel
        dot, rr, cc = st.dot, st.rr, st.cc
        res.cosine_finite = _cosine(dot, rr, cc) if st.both else None
        res.norm_ratio = math.sqrt(cc / rr) if rr > 0 else (1.0 if cc == 0 else math.inf)
        if res.nonfinite:
            s2 = st.ref_sq / st.ref_finite if st.ref_finite else 0.0
            extra = res.nonfinite * (s2 if s2 > 0.0 else 1.0)
            rr, cc = rr + extra, cc + extra
        res.cosine = _cosine(dot, rr, cc)
        if want_top1:
            res.top1 = st.agree / st.rows if st.rows else None
    else:
        res.max_abs = res.mean_abs = res.max_rel = 0.0
        res.cosine = 1.0

    if res.checked:
        _check_thresholds(res, st, ref, cand, t)
    max_nan = t.max_nan if t.max_nan is not None else 0
    if res.nonfinite > max_nan:
        default = "" if t.max_nan else " (the default: new NaN/Inf always fail)"
        fin = "n/a" if res.cosine_finite is None else f"{res.cosine_finite:.6f}"
        res.failures.append(
            f"{res.nonfinite} new NaN/Inf values (candidate nan {res.candidate_nan}, "
            f"inf {res.candidate_inf}) > max_nan {max_nan}{default}; "
            f"cosine {res.cosine:.6f} counting them, {fin} over finite positions only"
        )


def _check_thresholds(
    res: OutputResult, st: FloatStats, ref: np.ndarray, cand: np.ndarray, t: Thresholds
) -> None:
    if (
        (t.error_stat is not None or t.max_mismatch is not None)
        and t.atol is None
        and (t.rtol is None)
    ):
        res.failures.append(
            "error_stat/max_mismatch shape the atol/rtol check: set --atol or --rtol too"
        )
    if t.atol is not None or t.rtol is not None:
        atol = t.atol or 0.0
        rtol = t.rtol or 0.0
        stat = t.error_stat or "elementwise"
        if stat != "elementwise":
            diffs, refs = _finite_pairs(ref, cand)
            _checkstatistic(res, diffs, refs, atol, rtol, stat)
            return _check_cosine(res, t)
        res.mismatch_fraction = st.n_bad / res.elements if res.elements else 0.0
        allowed_share = t.max_mismatch or 0.0
        if st.n_bad and res.mismatch_fraction > allowed_share:
            i = np.unravel_index(st.worst_at, ref.shape) if ref.shape else ()
            share = (
                f" ({res.mismatch_fraction:.3%}, more than max_mismatch {allowed_share:g})"
                if t.max_mismatch is not None
                else ""
            )
            res.failures.append(
                f"{st.n_bad} of {res.elements} elements exceed atol {atol:g} + rtol "
                f"{rtol:g}*|ref|{share} (max_abs {res.max_abs:.4g}; worst at "
                f"{list(map(int, i))}: ref {st.worst_ref:.6g}, cand {st.worst_cand:.6g})"
            )
    _check_cosine(res, t)


def _finite_pairs(ref: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|cand - ref| and |ref| where both are finite (an error statistic needs them all: a
    median or a quantile is no running figure), gathered a chunk at a time."""
    diffs, refs = [], []
    for r, c, _ in chunks(ref, cand, rows=False):
        both = np.isfinite(r) & np.isfinite(c)
        diffs.append(np.abs(c[both] - r[both]))
        refs.append(np.abs(r[both]))
    return np.concatenate(diffs or [np.empty(0)]), np.concatenate(refs or [np.empty(0)])


def _checkstatistic(
    res: OutputResult,
    diff: np.ndarray,
    ref_abs: np.ndarray,
    atol: float,
    rtol: float,
    stat: str,
) -> None:
    """``S(|cand - ref|) <= atol + rtol * S(|ref|)`` for the statistic S (finite positions)."""
    err, scale = statistic(diff, stat), statistic(ref_abs, stat)
    res.error_stat_value = err
    bound = atol + rtol * scale
    if not err <= bound:
        res.failures.append(
            f"{stat} |error| {err:.4g} > atol {atol:g} + rtol {rtol:g}*{stat} |ref| "
            f"{scale:.4g} (= {bound:.4g})"
        )


def _check_cosine(res: OutputResult, t: Thresholds) -> None:
    if t.min_cosine is not None and not (res.cosine is not None and res.cosine >= t.min_cosine):
        res.failures.append(f"cosine {res.cosine:.6f} < min_cosine {t.min_cosine:g}")
    return None


def check_names(thresholds: Thresholds, outputs: list[str]) -> None:
    """Per-output overrides must name real outputs (a typo would silently check nothing)."""
    unknown = sorted(set(thresholds.per_output) - set(outputs))
    if unknown:
        raise ValidationError(
            f"thresholds for unknown output {', '.join(repr(u) for u in unknown)} "
            f"(model outputs: {', '.join(outputs)})"
        )
