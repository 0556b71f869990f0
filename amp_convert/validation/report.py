"""ValidationReport: what ran, the numbers per output, latency, and the verdict.

``to_dict()`` is the stable JSON schema (``schema_version`` 2). Non-finite floats are written as
the strings ``"inf"``, ``"-inf"`` and ``"nan"`` so the file is strict JSON. Top-level keys:

* ``schema_version``, ``tool``;
* ``verdict``: ``"fail"`` (an output failed), ``"pass"`` (explicit thresholds were checked on at
  least one output and nothing failed) or ``"not_judged"`` (no threshold applied and nothing
  failed: report only); ``passed`` is true only for ``"pass"``;
* ``reference``, ``candidate``;
* ``provider {requested, used, ort_providers, onnxruntime_version, graph_optimizations, options}``;
* ``inputs {source, seed, dims, shapes, dtypes}``;
* ``thresholds``;
* ``outputs``: one object per output with the OutputResult fields (``name, kind,
  reference_dtype, candidate_dtype, shape, elements, max_abs, max_rel, mean_abs, cosine,
  cosine_finite, top1, mismatches, reference_nan, reference_inf, candidate_nan, candidate_inf,
  nonfinite, thresholds, checked, failures``) plus ``status`` (``pass``, ``fail``,
  ``not_judged``, ``skipped``) and ``passed`` (true only for ``pass``); see metrics.py for the
  definitions;
* ``latency {warmup, runs, reference, candidate, speedup}`` or null;
* ``emulation {rounding_points, low_precision_inputs, upcast_initializers,
  retargeted_attributes, unknown_types}`` or null;
* ``warnings``;
* ``samples``: with several ``--inputs`` files, one ``{source, dims, shapes}`` per sample (each
  output's result is then its worst sample's, with ``sample`` its index); empty with one sample;
* ``decode``: null, or with ``--decode-steps N`` ``{steps, token_agreement, first_divergence,
  merged, kv_pairs, notes}``, ``steps`` one ``{step, reference_tokens, candidate_tokens,
  same_token, status, outputs}`` per step (``outputs`` as above); each top-level output is then
  its worst of the single run and every step;
* ``weak_evidence``: what makes the verdict weak, as short flags (``random inputs``,
  ``reference 'maps' near zero``, ``... nearly constant``; see evidence.py); empty when none;
* ``broken``: failing outputs far from any threshold (cosine below 0.99, or new NaN/Inf): no
  threshold is suggested for them (evidence.py); empty when none;
* ``worst_node``: with ``broken`` outputs, the node that introduces the most error
  (``{name, op_type, precision, error}``, from the command line's localisation) or null.

Each output also says ``match``: ``position`` or ``sort`` (compared after sorting along its last
axis, ``--match NAME:sort``).

New keys may be added within a schema version; renamed or removed keys, or a changed meaning,
bump it. Version 2 (from 1): ``cosine`` counts non-finite mismatches (the old finite-only value
is ``cosine_finite``); new NaN/Inf fail without thresholds; ``passed`` is false when nothing was
judged; ``verdict`` and per-output ``status`` were added.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_convert.core.user_text import printable
from amp_convert.files import safe_write
from amp_convert.reports.base import Report, json_ready
from amp_convert.validation.decode import DecodeResult
from amp_convert.validation.metrics import OutputResult

SCHEMA_VERSION = 2


@dataclass
class LatencyStats:
    """Milliseconds per run over the timed runs (after warm-up)."""

    median_ms: float
    p90_ms: float
    mean_ms: float
    min_ms: float
    runs: int

    @classmethod
    def from_times(cls, times_ms: list[float]) -> LatencyStats:
        a = np.asarray(times_ms, dtype=np.float64)
        return cls(
            median_ms=float(np.median(a)),
            p90_ms=float(np.percentile(a, 90)),
            mean_ms=float(a.mean()),
            min_ms=float(a.min()),
            runs=len(times_ms),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "median_ms": self.median_ms,
            "p90_ms": self.p90_ms,
            "mean_ms": self.mean_ms,
            "min_ms": self.min_ms,
            "runs": self.runs,
        }


@dataclass
class ValidationReport(Report, tool="amp-convert validate", schema_version=SCHEMA_VERSION):
    """Everything one validation found; ``passed`` is the CI verdict."""

    reference: str
    candidate: str
    provider_requested: str
    provider: str  # the mode that ran: "cuda", "cpu" or "emulate"
    ort_providers: list[str]
    onnxruntime_version: str
    graph_optimizations: str
    inputs_source: str
    seed: int
    dims: dict[str, int]
    input_shapes: dict[str, list[int]]
    input_dtypes: dict[str, str]
    thresholds: dict[str, Any]
    outputs: list[OutputResult]
    warmup: int
    runs: int
    #: the CUDA provider options both sessions ran with (``--cuda-option``)
    provider_options: dict[str, str] = field(default_factory=dict)
    reference_latency: LatencyStats | None = None
    candidate_latency: LatencyStats | None = None
    emulation: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    decode: DecodeResult | None = None
    #: short flags for the result line and JSON (evidence.py): random inputs, weak references
    weak_evidence: list[str] = field(default_factory=list)
    #: failing outputs far from any threshold: broken, no threshold suggested (evidence.py)
    broken: list[str] = field(default_factory=list)
    #: the node that introduces the most error, when ``broken`` (name, op_type, precision, error)
    worst_node: dict[str, Any] | None = None

    @property
    def verdict(self) -> str:
        """``fail``, ``pass`` (explicit thresholds checked, none broken) or ``not_judged``."""
        if any(o.failed for o in self.outputs):
            return "fail"
        return "pass" if any(o.status == "pass" for o in self.outputs) else "not_judged"

    @property
    def passed(self) -> bool:
        """True only when thresholds were checked and held: a report-only run is not a pass."""
        return self.verdict == "pass"

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"

    @property
    def failed_outputs(self) -> list[str]:
        return [o.name for o in self.outputs if o.failed]

    @property
    def speedup(self) -> float | None:
        if self.reference_latency is None or self.candidate_latency is None:
            return None
        if self.candidate_latency.median_ms <= 0:
            return None
        return self.reference_latency.median_ms / self.candidate_latency.median_ms

    def output(self, name: str) -> OutputResult:
        """The result for one output, by name."""
        for o in self.outputs:
            if o.name == name:
                return o
        raise KeyError(name)

    # ---------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """Stable, JSON-ready dict (the schema in the module docstring)."""
        latency = None
        if self.reference_latency is not None and self.candidate_latency is not None:
            latency = {
                "warmup": self.warmup,
                "runs": self.runs,
                "reference": self.reference_latency.to_dict(),
                "candidate": self.candidate_latency.to_dict(),
                "speedup": self.speedup,
            }
        d = {
            "schema_version": SCHEMA_VERSION,
            "tool": "amp-convert validate",
            "verdict": self.verdict,
            "passed": self.passed,
            "reference": self.reference,
            "candidate": self.candidate,
            "provider": {
                "requested": self.provider_requested,
                "used": self.provider,
                "ort_providers": list(self.ort_providers),
                "onnxruntime_version": self.onnxruntime_version,
                "graph_optimizations": self.graph_optimizations,
                "options": dict(self.provider_options),
            },
            "inputs": {
                "source": self.inputs_source,
                "seed": self.seed,
                "dims": dict(self.dims),
                "shapes": dict(self.input_shapes),
                "dtypes": dict(self.input_dtypes),
            },
            "thresholds": self.thresholds,
            "outputs": [o.to_dict() for o in self.outputs],
            "latency": latency,
            "emulation": self.emulation,
            "warnings": list(self.warnings),
            "samples": [dict(s) for s in self.samples],
            "decode": None if self.decode is None else self.decode.to_dict(),
            "weak_evidence": list(self.weak_evidence),
            "broken": list(self.broken),
            "worst_node": self.worst_node,
        }
        return json_ready(d)

    def summary(self) -> str:
        """The terminal report: the table, latency, provider, inputs, warnings and verdict."""
        return self.format_table()

    def to_junit(self, path: str | os.PathLike) -> None:
        """JUnit XML for CI (``junit_bytes``), written atomically."""
        safe_write.write_bytes(path, self.junit_bytes())

    def junit_bytes(self) -> bytes:
        """JUnit XML for CI: one testcase per output, failures carry the numbers."""
        suite = ET.Element(
            "testsuite",
            name="amp-convert validate",
            tests=str(len(self.outputs)),
            failures=str(len(self.failed_outputs)),
            errors="0",
            skipped=str(sum(o.status in ("skipped", "not_judged") for o in self.outputs)),
        )
        props = ET.SubElement(suite, "properties")
        for k, v in (
            ("reference", self.reference),
            ("candidate", self.candidate),
            ("provider", self.provider),
            ("dims", _fmt_dims(self.dims)),
            ("speedup", "" if self.speedup is None else f"{self.speedup:.3f}"),
        ):
            ET.SubElement(props, "property", name=k, value=printable(v))
        for o in self.outputs:
            name = printable(o.name)
            case = ET.SubElement(
                suite, "testcase", classname="amp_convert.validate", name=name, time="0"
            )
            numbers = printable(_numbers_line(o))
            if o.status == "skipped":
                ET.SubElement(case, "skipped", message="non-tensor output, not compared")
            elif o.status == "not_judged":
                ET.SubElement(case, "skipped", message="no thresholds: not judged")
            elif o.failed:
                fail = ET.SubElement(case, "failure", message=printable("; ".join(o.failures)))
                fail.text = numbers
            out = ET.SubElement(case, "system-out")
            out.text = numbers
        root = ET.Element("testsuites")
        root.append(suite)
        ET.indent(root)
        return ET.tostring(root, encoding="utf-8", xml_declaration=True)

    # ---------------------------------------------------------------- terminal
    def format_table(self) -> str:
        """Per-output rows, latency with speedup, provider, dims, warnings, verdict."""
        headers = [
            "output",
            "dtype",
            "shape",
            "max_abs",
            "max_rel",
            "mean_abs",
            "cosine",
            "nan/inf",
            "agreement",
            "result",
        ]
        rows = []
        for o in self.outputs:
            dtype = o.candidate_dtype
            if o.reference_dtype != o.candidate_dtype:
                dtype = f"{o.reference_dtype}->{o.candidate_dtype}"
            if o.kind == "exact":
                cells = [_g(o.max_abs), "", _g(o.mean_abs), "", "", f"exact: {o.mismatches} diff"]
            elif o.kind == "skipped":
                cells = ["", "", "", "", "", ""]
            else:
                cells = [
                    _g(o.max_abs),
                    _g(o.max_rel),
                    _g(o.mean_abs),
                    "" if o.cosine is None else f"{o.cosine:.6f}",
                    f"{o.candidate_nan}/{o.candidate_inf}",
                    "" if o.top1 is None else f"top1 {o.top1:.1%}",
                ]
            verdict = _STATUS_CELL[o.status]
            name = o.name + (" (sorted)" if o.match == "sort" else "")
            rows.append([name, dtype, str(o.shape), *cells, verdict])
        widths = [
            max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
            for i, h in enumerate(headers)
        ]
        lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        for o in self.outputs:
            for f in o.failures:
                lines.append(f"  {o.name}: {f}")
        lines.extend(f"  {note}" for note in self.notes())
        if self.reference_latency and self.candidate_latency:
            rl, cl = self.reference_latency, self.candidate_latency
            sp = self.speedup
            lines.append(
                f"latency ({self.runs} runs after {self.warmup} warm-up): "
                f"reference {rl.median_ms:.3f} ms (p90 {rl.p90_ms:.3f}), "
                f"candidate {cl.median_ms:.3f} ms (p90 {cl.p90_ms:.3f}), "
                f"speedup {'n/a' if sp is None else f'{sp:.2f}x'}"
            )
        else:
            lines.append("latency: not measured (--runs N to time N runs of each model)")
        options = ", ".join(f"{k}={v}" for k, v in self.provider_options.items())
        lines.append(
            f"provider: {self.provider} (requested {self.provider_requested}; ORT "
            f"{self.onnxruntime_version}: {', '.join(self.ort_providers)}; graph optimizations "
            f"{self.graph_optimizations}" + (f"; CUDA options {options}" if options else "") + ")"
        )
        shapes = ", ".join(f"{k}{v}" for k, v in self.input_shapes.items())
        lines.append(
            f"inputs: {self.inputs_source}"
            + (f" (seed {self.seed})" if self.inputs_source == "random" else "")
            + f"; dims: {_fmt_dims(self.dims) or 'none'}; shapes: {shapes or 'none'}"
        )
        if self.samples:
            lines.append(
                f"samples: {len(self.samples)} ("
                + ", ".join(str(s.get("source")) for s in self.samples)
                + "); each output shows its worst sample"
            )
        sorted_outputs = [o.name for o in self.outputs if o.match == "sort"]
        if sorted_outputs:
            lines.append(
                "compared after sorting along the last axis (order-insensitive): "
                + ", ".join(sorted_outputs)
            )
        if self.decode is not None:
            lines.extend(self.decode.lines())
        if self.emulation:
            pts = self.emulation.get("rounding_points", {})
            lines.append(
                "emulation: "
                + (", ".join(f"{v} {k} rounding points" for k, v in pts.items()) or "no rounding")
                + f"; low-precision initializers upcast: "
                f"{self.emulation.get('upcast_initializers', 0)}"
            )
        for w in self.warnings:
            lines.append(f"warning: {w}")
        lines.append(self.result_line())
        return "\n".join(lines)

    def result_line(self) -> str:
        """The verdict line: FAIL, PASS, or NOT JUDGED when no threshold applied."""
        n = len(self.outputs)
        outs = f"{n} output{'' if n == 1 else 's'}"
        failed = self.failed_outputs
        checked = sum(o.status == "pass" for o in self.outputs)
        weak = f"; weak evidence: {', '.join(self.weak_evidence)}" if self.weak_evidence else ""
        if failed:
            return f"result: FAIL ({len(failed)} of {outs}: {', '.join(failed)}){weak}"
        if checked:
            return f"result: PASS ({checked} of {outs} checked){weak}"
        if _any_set(self.thresholds):
            return f"result: NOT JUDGED ({self._nothing_to_judge()}; {outs}){weak}"
        return (
            f"result: NOT JUDGED (--report-only: no thresholds, nothing failed; {outs}; "
            f"without it the defaults judge: --min-cosine 0.999, no new NaN/Inf){weak}"
        )

    def _nothing_to_judge(self) -> str:
        """Thresholds were set, yet no output had values they apply to (all empty, say)."""
        return "thresholds set, but no output had values to judge them on, nothing failed"

    def notes(self) -> list[str]:
        """What the numbers alone hide: a scale change (norms > 1% apart), empty outputs."""
        return output_notes(self.outputs)

    def summary_line(self) -> str:
        """One line for quiet mode and assertion messages."""
        notes = "".join(f"; {n}" for n in self.notes())
        if self.passed:
            return f"validation passed ({len(self.outputs)} outputs, {self.provider}){notes}"
        if not self.failed:
            why = "no thresholds set, nothing failed"
            if _any_set(self.thresholds):
                why = self._nothing_to_judge()
            n = len(self.outputs)
            return f"validation not judged: {why} ({n} outputs, {self.provider}){notes}"
        parts = [f"{o.name}: {'; '.join(o.failures)}" for o in self.outputs if o.failed]
        return f"validation FAILED ({self.provider}): " + " | ".join(parts) + notes


#: norms of reference and candidate further apart than this are called out
NORM_TOLERANCE = 0.01
_STATUS_CELL = {"pass": "PASS", "fail": "FAIL", "not_judged": "-", "skipped": "skip"}


def _any_set(thresholds: Any) -> bool:
    """Whether any threshold (at any depth: per output too) has a value."""
    if isinstance(thresholds, dict):
        return any(_any_set(v) for v in thresholds.values())
    if isinstance(thresholds, list | tuple):
        return any(_any_set(v) for v in thresholds)
    return thresholds is not None


def _fmt_dims(dims: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in dims.items())


def _g(v: float | None) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return f"{v:.4g}"


def _numbers_line(o: OutputResult) -> str:
    if o.kind == "exact":
        return f"{o.name}: exact comparison, {o.mismatches} of {o.elements} elements differ"
    if o.kind == "skipped":
        return f"{o.name}: not compared"
    top1 = "" if o.top1 is None else f" top1={o.top1:.4f}"
    cos = "n/a" if o.cosine is None else f"{o.cosine:.6f}"
    if o.nonfinite:
        fin = "n/a" if o.cosine_finite is None else f"{o.cosine_finite:.6f}"
        cos += f" cosine_finite={fin}"
    return (
        f"{o.name}: max_abs={_g(o.max_abs)} max_rel={_g(o.max_rel)} mean_abs={_g(o.mean_abs)} "
        f"cosine={cos} nan={o.candidate_nan} inf={o.candidate_inf} "
        f"new_nonfinite={o.nonfinite}{top1} thresholds={o.thresholds}"
    )


def output_notes(outputs: Sequence[OutputResult]) -> list[str]:
    """What the numbers alone hide, for the table, the summary and the HTML page alike: a scale
    change (norms more than 1% apart), outputs with nothing compared."""
    out = []
    for o in outputs:
        if o.norm_ratio is not None and abs(o.norm_ratio - 1.0) > NORM_TOLERANCE:
            out.append(
                f"{o.name}: norms differ: ||candidate|| / ||reference|| = {o.norm_ratio:.4g} "
                "(a scale change cosine does not see)"
            )
        if o.kind == "skipped" and o.reference_dtype != "non-tensor":
            why = "0 elements" if o.elements == 0 else "no finite reference value"
            out.append(f"{o.name}: {why}, nothing compared")
    return out
