"""How much a verdict can be trusted, and what would change it.

* ``weak_outputs``: reference outputs a comparison says little about on these inputs: *near
  zero* (every value below ``NEAR_ZERO`` in magnitude: a detector's probability map on noise,
  where the cosine measures rounding, not the model) or *nearly constant* (spread below
  ``FLAT`` of the magnitude: any candidate close to the constant matches). Outputs of one
  element are never called weak (a scalar is constant by nature).
* ``all_zero``: a reference whose every output is exactly zero, which no verdict may rest on.
* ``Tolerances``: on FAIL, the smallest thresholds that would have passed each failing output
  (Polygraphy prints the same): the ``--atol`` at the given ``--rtol``, the ``--min-cosine``, the
  ``--max-nan`` (of the worst result), over every failing sample and decode step (runs that
  passed are within the thresholds set, which the suggestion never tightens).
* ``save_npz``: the inputs a run used, as an ``.npz`` that ``--inputs`` reads back (Polygraphy's
  ``--save-inputs``), one array per model input by name.
"""

from __future__ import annotations

import io
import math
import os
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from amp_convert.core.user_text import printable
from amp_convert.errors import OutputError
from amp_convert.files.safe_write import write_bytes
from amp_convert.validation.metrics import OutputResult, Thresholds

ZERO_REFERENCE = (
    "the reference {label} computes exactly zero for every output on these inputs: no verdict "
    "can rest on it (any candidate returning zeros would match); give inputs it computes "
    "something for with --inputs FILE.npz"
)
NEAR_ZERO = 1e-3
FLAT = 1e-4


def weak_outputs(references: Iterable[Mapping[str, np.ndarray | None]]) -> dict[str, str]:
    """Output name → why the reference says little (see the module docstring), over samples."""
    peak: dict[str, float] = {}
    low: dict[str, float] = {}
    high: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for ref in references:
        for name, value in ref.items():
            if value is None or value.dtype.kind != "f" or value.size <= 1:
                continue
            finite = np.asarray(value, np.float64)[np.isfinite(value)]
            if finite.size == 0:
                continue
            peak[name] = max(peak.get(name, 0.0), float(np.abs(finite).max()))
            low[name] = min(low.get(name, math.inf), float(finite.min()))
            high[name] = max(high.get(name, -math.inf), float(finite.max()))
            sizes[name] = sizes.get(name, 0) + finite.size
    weak: dict[str, str] = {}
    for name, top in peak.items():
        spread = high[name] - low[name]
        if top < NEAR_ZERO:
            weak[name] = f"near zero (max |value| {top:.2g})"
        elif spread <= FLAT * top:
            weak[name] = f"nearly constant ({low[name]:.6g} to {high[name]:.6g})"
    return weak


def all_zero(references: Iterable[Mapping[str, np.ndarray | None]]) -> bool:
    """Whether every reference output with elements is exactly zero on every sample.

    Such a reference is no evidence at all: any candidate that also returns zeros "matches"
    it, a broken one included (ORT's MatMulNBits returns zeros when it never received its
    scales). The verdict is refused rather than given.
    """
    seen = False
    for ref in references:
        for value in ref.values():
            if value is None or value.size == 0 or value.dtype.kind not in "fiub":
                continue
            if np.any(value):
                return False
            seen = True
    return seen


def weak_notes(weak: Mapping[str, str], random: bool) -> list[str]:
    """The lines a report shows: one per weak output, and the random inputs."""
    notes = [
        f"weak evidence: reference output {name!r} is {why} on these inputs: its metrics measure "
        "rounding, not the model; give real inputs with --inputs FILE.npz"
        for name, why in weak.items()
    ]
    if random:
        notes.append(
            "weak evidence: the inputs are random, not data the model was made for; give real "
            "inputs with --inputs FILE.npz (--save-inputs FILE.npz writes these to start from)"
        )
    return notes


def weak_flags(weak: Mapping[str, str], random: bool) -> list[str]:
    """Short flags for the result line: ``random inputs``, ``reference 'maps' near zero``."""
    flags = ["random inputs"] if random else []
    flags += [f"reference {n!r} {why.split(' (')[0]}" for n, why in weak.items()]
    return flags


@dataclass
class Tolerances:
    """Per output, the loosest values seen of what each threshold would have needed."""

    atol: dict[str, float] = field(default_factory=dict)
    cosine: dict[str, float] = field(default_factory=dict)

    def see(
        self,
        name: str,
        ref: np.ndarray | None,
        cand: np.ndarray | None,
        limits: Thresholds,
        match: str = "position",
    ) -> None:
        """Record what ``name`` needed on one run (float outputs of the same shape only)."""
        if ref is None or cand is None or ref.shape != cand.shape or ref.dtype.kind != "f":
            return
        r = np.asarray(ref, np.float64)
        c = np.asarray(cand, np.float64)
        if match == "sort" and r.ndim:
            r, c = np.sort(r, axis=-1), np.sort(c, axis=-1)
        both = np.isfinite(r) & np.isfinite(c)
        if not both.any():
            return
        rtol = limits.for_output(name).rtol or 0.0
        need = float((np.abs(c[both] - r[both]) - rtol * np.abs(r[both])).max())
        self.atol[name] = max(self.atol.get(name, 0.0), max(need, 0.0))
        rv, cv = r[both], c[both]
        denom = math.sqrt(float(np.dot(rv, rv)) * float(np.dot(cv, cv)))
        cos = float(np.dot(rv, cv)) / denom if denom > 0 else 1.0
        self.cosine[name] = min(self.cosine.get(name, 1.0), cos)

    def lines(self, results: Iterable[OutputResult], limits: Thresholds) -> list[str]:
        """For each failing output, the smallest thresholds that would have passed it."""
        out = []
        for r in results:
            if not r.failed or r.name not in self.atol:
                continue
            t = limits.for_output(r.name)
            parts = []
            # never tighter than what is set: runs that passed were only checked against that
            if t.atol is not None or t.rtol is not None:
                rtol = f" (at --rtol {t.rtol:g})" if t.rtol else ""
                atol = max(self.atol[r.name], t.atol or 0.0)
                parts.append(f"--atol {r.name}:{_up(atol)}{rtol}")
            if t.min_cosine is not None:
                cosine = min(self.cosine[r.name], t.min_cosine)
                parts.append(f"--min-cosine {r.name}:{_down(cosine)}")
            if r.nonfinite:
                parts.append(f"--max-nan {r.name}:{r.nonfinite}")
            if parts:
                out.append(f"smallest thresholds that would pass {r.name!r}: {', '.join(parts)}")
        return out


def _up(x: float) -> str:
    """``x`` rounded up to 3 significant digits (the printed value still passes)."""
    if x <= 0:
        return "0"
    e = math.floor(math.log10(x)) - 2
    return f"{math.ceil(x / 10.0**e) * 10.0**e:.3g}"


def _down(x: float) -> str:
    """A cosine rounded down at 6 decimals (the printed value still passes)."""
    return f"{math.floor(x * 1e6) / 1e6:.6f}"


#: longest member name a zip file holds (its header stores the length in 16 bits)
MAX_MEMBER_BYTES = 0xFFFF


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """``arrays`` as an ``.npz`` that ``--inputs`` reads back (strings as unicode, no pickle).

    A name the file cannot hold so that it reads back the same (a NUL, which ends the name
    inside the zip; one longer than a zip member name) is refused in one line (OutputError).
    """
    for name in arrays:
        member = f"{name}.npy"
        why = ""
        if "\x00" in name:
            why = "holds a NUL character"
        elif len(member.encode("utf-8", "surrogatepass")) > MAX_MEMBER_BYTES:
            why = f"is longer than a .npz member name can be ({MAX_MEMBER_BYTES} bytes)"
        if why:
            raise OutputError(
                "cannot save the inputs as .npz: input name "
                f"'{printable(name[:60])}{'...' if len(name) > 60 else ''}' {why}; --inputs "
                "could not read it back"
            )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, value in arrays.items():
            arr = np.asarray(value)
            if arr.dtype.kind == "O":
                arr = arr.astype(str)
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, arr, allow_pickle=False)
    return buf.getvalue()


def save_npz(path: str | os.PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` as an ``.npz`` (``npz_bytes``), whole or not at all (safe_write)."""
    write_bytes(path, npz_bytes(arrays))
