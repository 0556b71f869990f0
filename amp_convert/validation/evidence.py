"""How much a verdict can be trusted, and what would change it.

* ``weak_outputs``: reference outputs a comparison says little about on these inputs: *near
  zero* (every value below ``NEAR_ZERO`` in magnitude: a detector's probability map on noise,
  where the cosine measures rounding, not the model) or *nearly constant* (spread below
  ``FLAT`` of the magnitude: any candidate close to the constant matches). Outputs of one
  element are never called weak (a scalar is constant by nature).
* ``all_zero``: a reference whose every output is exactly zero, which no verdict may rest on.
* ``Tolerances``: on FAIL, for an output *near the bar* (cosine at least ``BROKEN_COSINE``
  and no new NaN/Inf), the smallest thresholds that would have passed it (Polygraphy prints the
  same): the ``--atol`` at the given ``--rtol``, the ``--min-cosine``, over every failing sample
  and decode step (runs that passed are within the thresholds set, which the suggestion never
  tightens). *Far from it* (a cosine below 0.99, or NaN/Inf the original does not have: an FP16
  or BF16 conversion that works measures 0.999+ on every output), no threshold is suggested:
  the line says the conversion is broken for that output and how to find the node
  (``broken`` lists those outputs; the command line names the worst node).
* ``save_npz``: the inputs a run used, as an ``.npz`` that ``--inputs`` reads back (Polygraphy's
  ``--save-inputs``), one array per model input by name. Generated inputs carry their origin in
  the archive's comment (``PROVENANCE_KEY``: JSON, invisible to numpy and to the model), so
  that fed back with ``--inputs`` they are still called random (``read_provenance``); data
  re-saved by another tool has no such comment and counts as the user's.
* ``scale_notes``: what random inputs assume (floats drawn from N(0, 1)), and the inputs whose
  real scale likely differs (raw audio samples up to 32768, 0-255 pixels), with the next step.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_convert.core.user_text import printable
from amp_convert.errors import OutputError
from amp_convert.files.safe_write import write_bytes
from amp_convert.validation.float_stats import CHUNK
from amp_convert.validation.metrics import OutputResult, Thresholds

ZERO_REFERENCE = (
    "the reference {label} computes exactly zero for every output on these inputs: no verdict "
    "can rest on it (any candidate returning zeros would match); give inputs it computes "
    "something for with --inputs FILE.npz"
)
NEAR_ZERO = 1e-3
FLAT = 1e-4
#: below this cosine (or with new NaN/Inf) an output is broken, not near a threshold
BROKEN_COSINE = 0.99
#: the key of the JSON object a generated .npz carries in its archive comment
PROVENANCE_KEY = "amp_convert_inputs"
_AUDIO = re.compile(r"audio|wave|wav|speech|pcm|signal|samples|^input_values$|^input$", re.I)
_IMAGE = re.compile(r"pixel|image|img|^x$|^input$|^images?$|^data$", re.I)


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
            flat = value.reshape(-1)
            for start in range(0, flat.size, CHUNK):  # a chunk at a time: bounded memory
                chunk = flat[start : start + CHUNK].astype(np.float64)
                finite = chunk[np.isfinite(chunk)]
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


def weak_notes(
    weak: Mapping[str, str],
    random: bool,
    inputs: Mapping[str, np.ndarray] | None = None,
    origin: str = "",
) -> list[str]:
    """The lines a report shows: one per weak output, and the random inputs with the scale they
    assume (``scale_notes`` of ``inputs``); ``origin`` says where random inputs came from when
    they were read back from a file."""
    notes = [
        f"weak evidence: reference output {name!r} is {why} on these inputs: its metrics measure "
        "rounding, not the model; give real inputs with --inputs FILE.npz"
        for name, why in weak.items()
    ]
    if random:
        came = f" ({origin})" if origin else ""
        notes.append(
            f"weak evidence: the inputs are random{came}, not data the model was made for"
            f"{scale_notes(inputs or {})}; give real inputs with --inputs FILE.npz "
            "(--save-inputs FILE.npz writes these to start from), or let --auto calibrate on them"
        )
    return notes


def scale_notes(inputs: Mapping[str, np.ndarray]) -> str:
    """``; assumed scale: floats ~N(0, 1) ...; 'audio' may be raw samples ...`` (or ``""``)."""
    floats = {n: a for n, a in inputs.items() if np.asarray(a).dtype.kind == "f"}
    if not floats:
        return ""
    parts = ["floats drawn from N(0, 1) (|x| < 5)"]
    audio = [
        n for n, a in floats.items() if a.ndim in (1, 2) and _AUDIO.search(n) and a.shape[-1] >= 64
    ]
    images = [
        n
        for n, a in floats.items()
        if a.ndim == 4
        and (a.shape[1] in (1, 3, 4) or a.shape[-1] in (1, 3, 4))
        and _IMAGE.search(n)
    ]
    for names, what in (
        (
            audio,
            "audio samples, which a front end may expect raw (int16 scale, up to 32768: "
            "a power spectrum then reaches 1e11, far past FP16's 65504)",
        ),
        (images, "pixels, which a model exported without its normalisation expects in 0-255"),
    ):
        if names:
            parts.append(f"{', '.join(repr(n) for n in names)} may be {what}")
    return "; assumed scale: " + "; ".join(parts)


def weak_flags(weak: Mapping[str, str], random: bool, origin: str = "") -> list[str]:
    """Short flags for the result line: ``random inputs``, ``reference 'maps' near zero``;
    random inputs read back from a file say so (``random inputs, generated by ...``)."""
    flags = [f"random inputs, {origin}" if origin else "random inputs"] if random else []
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

    def broken(self, results: Iterable[OutputResult]) -> list[str]:
        """Failing outputs far from any threshold (see the module docstring)."""
        return [r.name for r in results if r.failed and _far(r, self.cosine.get(r.name))]

    def lines(self, results: Iterable[OutputResult], limits: Thresholds) -> list[str]:
        """For each failing output near the bar, the smallest thresholds that would have passed
        it; for one far from it, that it is broken (never a threshold that accepts it)."""
        out = []
        for r in results:
            if not r.failed:
                continue
            if _far(r, self.cosine.get(r.name)):
                out.append(broken_line(r))
                continue
            if r.name not in self.atol:
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
            if parts:
                out.append(f"smallest thresholds that would pass {r.name!r}: {', '.join(parts)}")
        return out


def _far(r: OutputResult, cosine: float | None) -> bool:
    """New NaN/Inf, or the lowest cosine seen (this result's, any failing run's) below 0.99."""
    seen = [c for c in (cosine, r.cosine) if c is not None]
    return bool(r.nonfinite) or (bool(seen) and min(seen) < BROKEN_COSINE)


def broken_line(r: OutputResult) -> str:
    """What a FAIL far from the bar says: broken, and where to look; no threshold."""
    what = []
    if r.cosine is not None:
        what.append(f"cosine {r.cosine:.6f}")
    if r.nonfinite:
        what.append(f"{r.nonfinite} new NaN/Inf")
    return (
        f"{r.name!r} is far from any threshold ({', '.join(what)}; a conversion that works "
        f"measures 0.999+): the converted model is broken for this output, no threshold is "
        "suggested; --html shows the error node by node and names the worst, --auto keeps "
        "FP32 the nodes that introduce it, --exclude-nodes NODE keeps one"
    )


def threshold_steps(outputs: Iterable[OutputResult]) -> list[str]:
    """``--auto``'s next steps for failing outputs: the per-output cosine the best candidate
    reached when it is near the bar, the broken line when it is far from it."""
    reached, broken = [], []
    for o in outputs:
        if not o.failed:
            continue
        if _far(o, None):
            broken.append(broken_line(o))
        elif o.cosine is not None:
            reached.append(f"--min-cosine {o.name}:{_down(o.cosine)}")
    if reached:
        broken.append(
            "next step: if this accuracy is enough for the output, a per-output threshold: "
            + " ".join(reached)
        )
    return broken


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


def npz_bytes(
    arrays: Mapping[str, np.ndarray], provenance: Mapping[str, Any] | None = None
) -> bytes:
    """``arrays`` as an ``.npz`` that ``--inputs`` reads back (strings as unicode, no pickle);
    ``provenance`` (generated inputs: their origin, seed and dims) goes in the archive comment,
    where ``read_provenance`` finds it.

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
        if provenance:
            z.comment = json.dumps({PROVENANCE_KEY: dict(provenance)}).encode()[:65535]
        for name, value in arrays.items():
            arr = np.asarray(value)
            if arr.dtype.kind == "O":
                arr = arr.astype(str)
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, arr, allow_pickle=False)
    return buf.getvalue()


def save_npz(
    path: str | os.PathLike,
    arrays: Mapping[str, np.ndarray],
    provenance: Mapping[str, Any] | None = None,
) -> None:
    """Write ``arrays`` as an ``.npz`` (``npz_bytes``), whole or not at all (safe_write)."""
    write_bytes(path, npz_bytes(arrays, provenance))


def read_provenance(path: str | os.PathLike) -> dict[str, Any] | None:
    """The origin a ``save_npz`` file carries (None for any other file, or a damaged comment:
    the comment is untrusted text, read as data and never more than 64 KiB)."""
    try:
        with zipfile.ZipFile(path) as z:
            comment = z.comment
    except (OSError, zipfile.BadZipFile):
        return None
    try:
        found = json.loads(comment.decode("utf-8")) if comment else None
    except (UnicodeDecodeError, ValueError):
        return None
    value = found.get(PROVENANCE_KEY) if isinstance(found, dict) else None
    return value if isinstance(value, dict) else None


def provenance_text(value: Mapping[str, Any]) -> str:
    """``generated by amp-convert (seed 0, dims batch=1), saved with --save-inputs``."""
    seed = value.get("seed")
    dims = value.get("dims")
    bits = []
    if isinstance(seed, int):
        bits.append(f"seed {seed}")
    if isinstance(dims, dict) and dims:
        bits.append("dims " + ", ".join(f"{k}={v}" for k, v in list(dims.items())[:8]))
    inner = f" ({', '.join(bits)})" if bits else ""
    return f"generated by amp-convert{inner}, saved with --save-inputs"
