"""The figures of a float comparison (metrics.py), computed a chunk at a time.

Why: comparing two float32 outputs whole in float64, with the masks, differences and ratios the
figures need, held about 20 times the output's size at once (a 200 MB output cost 3.6 GB, and
ended in MemoryError under a memory limit). Every figure is a count, a sum, an extreme or an
argmax, so it is gathered over chunks of at most ``CHUNK`` elements (whole rows when top-1 is
wanted) and the comparison costs a few chunks beyond the two outputs. Sums are float64, as
before; only their order of addition differs (the last digits of ``mean_abs``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

#: elements compared per step
CHUNK = 1 << 16
REL_FLOOR = 1e-6


@dataclass
class FloatStats:
    """What ``metrics._compare_float`` reports, gathered over chunks (``add``)."""

    size: int = 0
    ref_nan: int = 0
    ref_inf: int = 0
    cand_nan: int = 0
    cand_inf: int = 0
    nonfinite: int = 0
    max_abs: float = 0.0
    sum_abs: float = 0.0
    max_rel: float = 0.0
    dot: float = 0.0
    rr: float = 0.0
    cc: float = 0.0
    both: int = 0
    ref_sq: float = 0.0
    ref_finite: int = 0
    rows: int = 0
    agree: int = 0
    n_bad: int = 0
    worst: float = -np.inf
    worst_at: int = -1
    worst_ref: float = 0.0
    worst_cand: float = 0.0

    def add(
        self,
        r: np.ndarray,
        c: np.ndarray,
        offset: int,
        tolerance: tuple[float, float] | None,
        top1: bool,
    ) -> None:
        """Fold in one chunk: float64 arrays of equal shape (rows of the last axis when `top1`),
        starting at flat index `offset` of the whole output."""
        r_fin, c_fin = np.isfinite(r), np.isfinite(c)
        both = r_fin & c_fin
        r_nan, c_nan = np.isnan(r), np.isnan(c)
        self.size += r.size
        self.ref_nan += int(np.count_nonzero(r_nan))
        self.ref_inf += int(np.count_nonzero(~r_fin & ~r_nan))
        self.cand_nan += int(np.count_nonzero(c_nan))
        self.cand_inf += int(np.count_nonzero(~c_fin & ~c_nan))
        same_nonfinite = ~both & ((r == c) | (r_nan & c_nan))
        mismatch = ~both & ~same_nonfinite
        self.nonfinite += int(np.count_nonzero(mismatch))
        with np.errstate(invalid="ignore", over="ignore"):
            absdiff = np.where(both, np.abs(c - r), np.where(same_nonfinite, 0.0, np.inf))
        if absdiff.size:
            self.max_abs = max(self.max_abs, float(absdiff.max()))
            self.sum_abs += float(absdiff.sum())
            denom = np.maximum(np.abs(np.where(r_fin, r, 0.0)), REL_FLOOR)
            self.max_rel = max(self.max_rel, float((absdiff / denom).max()))
        rv, cv = r[both], c[both]
        self.dot += float(np.dot(rv, cv))
        self.rr += float(np.dot(rv, rv))
        self.cc += float(np.dot(cv, cv))
        self.both += rv.size
        ref_finite = r[r_fin]
        self.ref_sq += float(np.dot(ref_finite, ref_finite))
        self.ref_finite += ref_finite.size
        if top1:
            clean_row = ~np.any(mismatch, axis=-1)
            agree = (np.argmax(r, axis=-1) == np.argmax(c, axis=-1)) & clean_row
            self.rows += agree.size
            self.agree += int(np.count_nonzero(agree))
        if tolerance is not None:
            atol, rtol = tolerance
            allowed = atol + rtol * np.abs(np.where(r_fin, r, 0.0))
            bad = both & ~(absdiff <= allowed)
            n_bad = int(np.count_nonzero(bad))
            if n_bad:
                self.n_bad += n_bad
                excess = np.where(bad, absdiff - allowed, -np.inf)
                i = int(np.argmax(excess))
                if excess.flat[i] > self.worst:
                    self.worst = float(excess.flat[i])
                    self.worst_at = offset + i
                    self.worst_ref, self.worst_cand = float(r.flat[i]), float(c.flat[i])


def chunks(
    ref: np.ndarray, cand: np.ndarray, rows: bool
) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """(ref, cand, flat offset) chunks as float64, at most CHUNK elements each; whole rows of
    the last axis when `rows` (a row longer than CHUNK is one chunk)."""
    if rows and ref.ndim >= 1 and ref.shape[-1] >= 1:
        last = ref.shape[-1]
        r2, c2 = ref.reshape(-1, last), cand.reshape(-1, last)
        step = max(1, CHUNK // last)
        for start in range(0, r2.shape[0], step):
            yield (
                r2[start : start + step].astype(np.float64),
                c2[start : start + step].astype(np.float64),
                start * last,
            )
        return
    r1, c1 = ref.reshape(-1), cand.reshape(-1)
    for start in range(0, r1.size, CHUNK):
        yield (
            r1[start : start + CHUNK].astype(np.float64),
            c1[start : start + CHUNK].astype(np.float64),
            start,
        )


def any_finite(a: np.ndarray) -> bool:
    """Whether float array `a` holds a finite value (a chunk at a time)."""
    flat = a.reshape(-1)
    return any(
        bool(np.isfinite(flat[i : i + CHUNK].astype(np.float64)).any())
        for i in range(0, flat.size, CHUNK)
    )
