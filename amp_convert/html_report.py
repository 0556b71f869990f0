"""One self-contained HTML page for a conversion: error along the graph, pinned nodes, precision.

No network, no CDN, no script: inline CSS and SVG only, so the file opens anywhere and can be
attached to a CI run. Used by ``amp-convert MODEL --auto --html`` and ``amp-convert validate
--html``. Sections: verdict and outputs; per-node output error in topological order (first
candidate vs final, original vs converted), with the nodes kept FP32 marked and a precision strip;
precision by op type; nodes kept FP32 and why; sizes and the memory-traffic estimate.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amp_convert import safe_write
from amp_convert.auto.report import AutoReport, PinnedNode, TracePoint
from amp_convert.validation.metrics import OutputResult

_LOG_MIN, _LOG_MAX = -8.0, 1.0
_COLORS = {"low": "#2e9d5b", "fp32": "#c0392b", "fp32 (pinned)": "#c0392b", "n/a": "#b8b8b8"}


@dataclass
class Page:
    """Everything the page shows, gathered by the auto or the validate side."""

    title: str
    verdict: str
    passed: bool
    facts: list[tuple[str, str]]
    outputs: Sequence[OutputResult]
    trace: Sequence[TracePoint]
    pinned: Sequence[PinnedNode] = ()
    by_op: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # op -> (low, fp32)
    sizes: list[tuple[str, str]] = field(default_factory=list)
    traffic: Any = None
    series: tuple[str, str] = ("first candidate", "final")
    searched: bool = True  # an --auto page (validate pages have no search)
    warnings: Sequence[str] = ()


def write(page: Page, path: str | os.PathLike) -> None:
    """Write ``page`` to ``path`` (UTF-8), atomically through the output registry's writer."""
    safe_write.write_bytes(path, render(page).encode("utf-8"))


def auto_page(report: AutoReport, title: str = "amp-convert --auto") -> Page:
    """The page for an AutoReport."""
    conv = report.conversion
    by_op: dict[str, list[int]] = {}
    if conv is not None:
        for n in conv.nodes:
            if n.precision in ("low", "fp32"):
                by_op.setdefault(n.op_type, [0, 0])[0 if n.precision == "low" else 1] += 1
    facts = [
        ("start level", f"{report.level}, {report.dtype.upper()}"),
        ("provider", report.provider),
        ("thresholds", _thresholds(report.thresholds)),
        ("samples", str(report.samples)),
        ("ONNX Runtime sessions", str(report.sessions)),
        ("runs", str(report.runs)),
        ("candidates", str(report.rounds)),
        ("time", f"{report.seconds:.2f} s"),
        ("float nodes low", f"{report.low_nodes} / {report.float_nodes} "
                            f"({report.low_node_percent:.1f}%)"),
        ("kept FP32 by the search", str(len(report.pinned))),
    ]  # fmt: skip
    sizes = [
        ("float weights (FP32 bytes)", _bytes(report.float_weight_bytes)),
        ("of which stored low", f"{report.low_weight_percent:.1f}%"),
        (
            "weights after",
            _bytes(
                report.float_weight_bytes - report.low_weight_bytes + report.low_weight_bytes // 2
            ),
        ),
    ]
    if conv is not None and conv.size_before:
        sizes.append(("file size", f"{_bytes(conv.size_before)} → {_bytes(conv.size_after)}"))
    return Page(
        title=title,
        verdict="thresholds met" if report.passed else "thresholds NOT met",
        passed=report.passed,
        facts=facts,
        outputs=report.outputs,
        trace=report.trace,
        pinned=report.pinned,
        by_op={k: (v[0], v[1]) for k, v in by_op.items()},
        sizes=sizes,
        traffic=getattr(conv, "traffic", None),
        warnings=report.warnings,
    )


def write_validation_html(
    original: str | Path, converted: str | Path, path: str | os.PathLike, **values: Any
) -> None:
    """``validate --html``: per-node trace of ``converted`` vs ``original`` (two more sessions)."""
    from amp_convert.auto.trace import validation_page
    from amp_convert.validation.command import thresholds_from_options

    files = values.get("inputs") or ()
    if isinstance(files, str | Path):
        files = (files,)
    page = validation_page(
        original,
        converted,
        provider=values.get("provider") or "auto",
        inputs=files[0] if files else None,
        dims=values.get("dim") or None,
        seed=values.get("seed") or 0,
        thresholds=thresholds_from_options(values),
    )
    write(page, path)


# -- rendering ---------------------------------------------------------------------------------
def render(page: Page) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{e(page.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{e(page.title)}</h1>",
        f"<p class='verdict {'ok' if page.passed else 'bad'}'>{e(page.verdict)}</p>",
        _table(["", ""], [[e(k), e(v)] for k, v in page.facts], cls="facts"),
    ]
    parts += [f"<p class='warn'>warning: {e(w)}</p>" for w in page.warnings]
    parts.append("<h2>Outputs</h2>")
    parts.append(_outputs(page.outputs))
    parts.append("<h2>Error along the graph</h2>")
    parts.append(
        "<p class='note'>Per node (main graph, topological order): the error of its output, "
        "converted vs original FP32, as max(relative L2, max error / max |ref|), log scale. "
        "Red ticks: nodes kept FP32 by the search. The strip below shows each node's precision "
        "(green low, red FP32, grey no float path). Hover for names.</p>"
    )
    parts.append(_chart(page))
    parts.append("<h2>Precision by op type</h2>")
    parts.append(_by_op(page.by_op))
    if page.searched:
        parts.append("<h2>Nodes kept FP32 by the search</h2>")
        parts.append(_pinned(page.pinned))
    parts.append("<h2>Size and memory traffic</h2>")
    parts.append(_table(["", ""], [[e(k), e(v)] for k, v in page.sizes], cls="facts"))
    parts.append(_traffic(page.traffic))
    parts.append("<details><summary>Every node</summary>")
    parts.append(_nodes(page.trace, page.series))
    parts.append("</details></body></html>")
    return "\n".join(parts)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    h = "".join(f"<th>{c}</th>" for c in head) if any(head) else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table class='{cls}'>" + (f"<tr>{h}</tr>" if h else "") + body + "</table>"


def _outputs(outputs: Sequence[OutputResult]) -> str:
    rows = []
    for o in outputs:
        status = "<span class='ok'>pass</span>" if o.passed else "<span class='bad'>FAIL</span>"
        rows.append(
            [
                html.escape(o.name), status, _num(o.cosine, 6), _num(o.max_abs), _num(o.max_rel),
                str(o.nonfinite), html.escape("; ".join(o.failures)),
            ]
        )  # fmt: skip
    head = ["output", "", "cosine", "max abs", "max rel", "new NaN/Inf", "failures"]
    return _table(head, rows, cls="grid")


def _y(err: float | None, top: float, height: float) -> float | None:
    if err is None:
        return None
    if math.isinf(err) or math.isnan(err):
        return top
    v = math.log10(max(err, 10**_LOG_MIN))
    v = min(v, _LOG_MAX)
    return top + (1 - (v - _LOG_MIN) / (_LOG_MAX - _LOG_MIN)) * height


def _chart(page: Page) -> str:
    trace = list(page.trace)
    if not trace:
        return "<p class='note'>No per-node values (nothing was probed).</p>"
    w, h, left, top, plot_h = 1100, 330, 60, 15, 240
    n = len(trace)
    step = (w - left - 15) / max(n - 1, 1)

    def x(i: int) -> float:
        return left + i * step

    out = [f"<svg viewBox='0 0 {w} {h}' width='100%' role='img' class='chart'>"]
    for k in range(int(_LOG_MIN), int(_LOG_MAX) + 1):
        yy = _y(10.0**k, top, plot_h)
        out.append(f"<line x1='{left}' x2='{w - 10}' y1='{yy:.1f}' y2='{yy:.1f}' class='grid'/>")
        out.append(f"<text x='{left - 6}' y='{yy + 4:.1f}' class='axis'>1e{k}</text>")
    pinned = {p.name for p in page.pinned}
    for i, t in enumerate(trace):
        if t.node in pinned:
            out.append(
                f"<line x1='{x(i):.1f}' x2='{x(i):.1f}' y1='{top}' y2='{top + plot_h}' "
                f"class='pin'><title>kept FP32: {html.escape(t.node)}</title></line>"
            )
    for attr, cls, label in (("first_error", "first", page.series[0]),
                             ("final_error", "final", page.series[1])):  # fmt: skip
        if not label:
            continue
        pts = [(x(i), _y(getattr(t, attr), top, plot_h)) for i, t in enumerate(trace)]
        pts = [(a, b) for a, b in pts if b is not None]
        if not pts:
            continue
        path = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        out.append(f"<polyline points='{path}' class='{cls}'><title>{label}</title></polyline>")
        for i, t in enumerate(trace):
            err = getattr(t, attr)
            yy = _y(err, top, plot_h)
            if yy is None:
                continue
            bad = err is not None and not math.isfinite(err)
            out.append(
                f"<circle cx='{x(i):.1f}' cy='{yy:.1f}' r='{3.5 if bad else 2}' "
                f"class='{'inf' if bad else cls}'><title>{html.escape(t.node)} "
                f"[{html.escape(t.op_type)}] {label}: {_num(err)}; max |x| {_num(t.max_abs)}"
                f"</title></circle>"
            )
    strip_y = top + plot_h + 12
    for i, t in enumerate(trace):
        color = _COLORS.get(t.precision, "#b8b8b8")
        x0 = max(left, x(i) - step / 2)
        x1 = min(w - 10, x(i) + step / 2)
        out.append(
            f"<rect x='{x0:.1f}' y='{strip_y}' width='{max(x1 - x0, 1):.1f}' "
            f"height='14' fill='{color}'><title>{html.escape(t.node)}: {t.precision}</title>"
            "</rect>"
        )
    ly = strip_y + 38
    legend = [
        ("first", page.series[0]), ("final", page.series[1]), ("pin", "kept FP32"),
        ("inf", "new NaN/Inf"),
    ]  # fmt: skip
    lx = left
    for cls, label in [(c, lab) for c, lab in legend if lab]:
        out.append(f"<rect x='{lx}' y='{ly - 9}' width='14' height='10' class='key {cls}'/>")
        out.append(f"<text x='{lx + 20}' y='{ly}' class='axis left'>{html.escape(label)}</text>")
        lx += 40 + 8 * len(label)
    out.append(f"<text x='{w - 10}' y='{ly}' class='axis'>{n} nodes, inputs → outputs</text></svg>")
    return "".join(out)


def _by_op(by_op: Mapping[str, tuple[int, int]]) -> str:
    if not by_op:
        return "<p class='note'>No node decisions available.</p>"
    rows = []
    top = max(lo + hi for lo, hi in by_op.values()) or 1
    for op, (lo, hi) in sorted(by_op.items(), key=lambda kv: -(kv[1][0] + kv[1][1])):
        bar = (
            f"<div class='bar'><span class='lowbar' style='width:{100 * lo / top:.1f}%'></span>"
            f"<span class='fp32bar' style='width:{100 * hi / top:.1f}%'></span></div>"
        )
        rows.append([html.escape(op), str(lo), str(hi), bar])
    return _table(["op type", "low", "FP32", ""], rows, cls="grid ops")


def _pinned(pinned: Sequence[PinnedNode]) -> str:
    if not pinned:
        return "<p class='note'>None: every float node the level allows is in low precision.</p>"
    rows = [
        [
            html.escape(p.name), html.escape(p.op_type), p.reason,
            "range guard" if p.round == 0 else f"after candidate {p.round}",
            html.escape(p.evidence) + (f" (+{p.body_nodes} body nodes)" if p.body_nodes else ""),
        ]
        for p in pinned
    ]  # fmt: skip
    return _table(["node", "op", "why", "when", "evidence"], rows, cls="grid")


def _traffic(traffic: Any) -> str:
    if not traffic:
        return (
            "<p class='note'>Memory-traffic estimate: not in this report (the converter's "
            "ConversionReport carries no <code>traffic</code> figures in this build).</p>"
        )
    data = traffic.to_dict() if hasattr(traffic, "to_dict") else traffic
    if hasattr(data, "__dataclass_fields__"):
        from dataclasses import asdict

        data = asdict(data)
    if isinstance(data, Mapping) and data:
        base = data.get("original")
        rows = []
        for k, v in data.items():
            share = (
                f" ({v / base:.2f}x the original)" if base and isinstance(v, int | float) else ""
            )
            label = {"original": "original FP32", "result": "this model", "all_low": "all low"}
            rows.append([html.escape(label.get(str(k), str(k))), html.escape(_bytes(v) + share)])
        return "<h3>Memory traffic per inference (bytes read and written, estimated)</h3>" + _table(
            ["", ""], rows, cls="facts"
        )
    return f"<p>Memory traffic: {html.escape(str(data))}</p>"


def _nodes(trace: Sequence[TracePoint], series: tuple[str, str]) -> str:
    rows = [
        [str(i), html.escape(t.node), html.escape(t.op_type), t.precision, _num(t.max_abs),
         _num(t.first_error), _num(t.final_error)]
        for i, t in enumerate(trace)
    ]  # fmt: skip
    head = ["#", "node", "op", "precision", "max |x| (FP32)", *(s or "–" for s in series)]
    return _table(head, rows, cls="grid")


def _num(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, float) and math.isinf(v):
        return "Inf"
    return f"{v:.{digits}g}" if digits != 6 else f"{v:.6f}"


def _fmt(v: Any) -> str:
    if isinstance(v, int) and abs(v) >= 10_000:
        return _bytes(v)
    return str(v)


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def _thresholds(t: Mapping[str, Any]) -> str:
    parts = [f"{k} {v:g}" for k, v in t.items() if k != "per_output" and v is not None]
    return ", ".join(parts) or "none (report only)"


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
max-width:1140px;color:#222;padding:0 12px}
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px}
.verdict{font-size:17px;font-weight:600;padding:6px 10px;border-radius:4px;display:inline-block}
.verdict.ok{background:#e3f4e9;color:#1e6b3c}.verdict.bad{background:#fbe4e1;color:#9b2a1f}
span.ok{color:#1e6b3c;font-weight:600}span.bad{color:#9b2a1f;font-weight:600}
table{border-collapse:collapse;margin:6px 0}td,th{padding:3px 10px;text-align:left;
vertical-align:top}
table.grid td,table.grid th{border-bottom:1px solid #eee}table.grid th{background:#f6f6f6}
table.facts td:first-child{color:#666}
.note{color:#555;font-size:13px}.warn{color:#9b2a1f}
svg.chart{background:#fcfcfc;border:1px solid #e4e4e4}
svg .grid{stroke:#eee}svg .axis{font-size:11px;fill:#666;text-anchor:end}
svg .axis.left{text-anchor:start}
svg polyline{fill:none;stroke-width:1.3}svg polyline.first{stroke:#e69f00}
svg polyline.final{stroke:#0072b2}svg circle.first{fill:#e69f00}svg circle.final{fill:#0072b2}
svg circle.inf{fill:#d62728}svg line.pin{stroke:#d62728;stroke-width:1.5;stroke-dasharray:3 2}
svg rect.key.first{fill:#e69f00}svg rect.key.final{fill:#0072b2}svg rect.key.pin{fill:#d62728}
svg rect.key.inf{fill:#d62728}
.bar{width:420px;height:12px;background:#f1f1f1;display:flex}
.lowbar{background:#2e9d5b;height:12px}.fp32bar{background:#c0392b;height:12px}
details{margin-top:20px}summary{cursor:pointer;font-weight:600}
"""
