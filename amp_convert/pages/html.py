"""One self-contained HTML page for a conversion: error along the graph, precision, what was kept.

No network, no CDN, no external file: inline CSS and SVG, plus one small inline script that sorts
the node table (the page reads the same without it), so the file opens anywhere and can be
attached to a CI run. This module only renders a ``Page``; ``pages/auto.py`` builds one from an
``--auto`` search and ``pages/trace.py`` from ``validate --html``. Sections: verdict and outputs;
per-node output error in topological order (body nodes of If/Loop/Scan right after their node),
the worst nodes labelled, a precision strip and a legend; precision by op type; nodes kept FP32
and why (``--auto`` only); values folded or removed by the conversion; sizes and traffic; every
node in a sortable table.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

from amp_convert.auto.report import PinnedNode, TracePoint
from amp_convert.core.user_text import markup
from amp_convert.files import safe_write
from amp_convert.pages.chart import chart, error_of, worst_nodes
from amp_convert.pages.page import LABELLED, Page, num
from amp_convert.reports.figures import bytes_text
from amp_convert.reports.value_map import ValueFate
from amp_convert.validation.metrics import OutputResult


def write(page: Page, path: str | os.PathLike) -> None:
    """Write ``page`` to ``path`` (UTF-8), atomically through the output registry's writer."""
    safe_write.write_bytes(path, render(page).encode("utf-8"))  # render() applies markup()


# -- rendering ---------------------------------------------------------------------------------
def render(page: Page) -> str:
    return markup(_render(page))  # names from a model: no control character reaches the page


def _render(page: Page) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{e(page.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{e(page.title)}</h1>",
        f"<p class='verdict {'ok' if page.passed else 'bad'}'>{e(page.verdict)}</p>",
        _table(["", ""], [[e(k), e(v)] for k, v in page.facts], cls="facts"),
    ]
    parts += [f"<p class='warn'>warning: {e(w)}</p>" for w in page.warnings]
    parts += [f"<p class='note'>note: {e(n)}</p>" for n in page.notes]
    parts.append("<h2>Outputs</h2>")
    parts.append(_outputs(page.outputs))
    parts.append("<h2>Error along the graph</h2>")
    parts.append(f"<p class='note'>{_chart_note(page)}</p>")
    parts.append(chart(page))
    parts.append(_worst_table(page))
    parts.append("<h2>Precision by op type</h2>")
    parts.append(_by_op(page.by_op, page.searched, page.folded_ops))
    if page.searched:
        parts.append("<h2>Nodes kept FP32 by the search</h2>")
        parts.append(_pinned(page.pinned))
    parts.append("<h2>Values folded or removed by the conversion</h2>")
    parts.append(_folded(page.folded, page.map_problem))
    parts.append("<h2>Size and memory traffic</h2>")
    parts.append(_table(["", ""], [[e(k), e(v)] for k, v in page.sizes], cls="facts"))
    parts.append(_traffic(page.traffic))
    parts.append("<h2>Every node</h2>")
    parts.append(_nodes(page.trace, page.series))
    parts.append(f"<script>{_SORT_JS}</script></body></html>")
    return "\n".join(parts)


def _chart_note(page: Page) -> str:
    where = (
        "its precision in the candidate the search kept"
        if page.searched
        else "its precision as read from the converted model itself"
    )
    return (
        "Per node in topological order (nodes inside If/Loop/Scan bodies right after their node): "
        "the error of its output, converted vs original FP32, as max(relative L2, max error / "
        f"max |ref|), log scale; the {LABELLED} worst are named. The strip below shows {where}. "
        "A value the conversion folded into another node has no error of its own (its work is "
        "in that node's output). Hover a point for its name and numbers."
    )


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    h = "".join(f"<th>{c}</th>" for c in head) if any(head) else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table class='{cls}'>" + (f"<tr>{h}</tr>" if h else "") + body + "</table>"


_STATUS = {
    "pass": "<span class='ok'>pass</span>",
    "fail": "<span class='bad'>FAIL</span>",
    "not_judged": "not judged",
    "skipped": "not compared",
}


def _outputs(outputs: Sequence[OutputResult]) -> str:
    rows = []
    for o in outputs:
        status = _STATUS.get(o.status, html.escape(o.status))
        rows.append(
            [
                html.escape(o.name),
                status,
                num(o.cosine),
                num(o.max_abs),
                num(o.max_rel),
                str(o.nonfinite),
                html.escape("; ".join(o.failures)),
            ]
        )
    head = ["output", "", "cosine", "max abs", "max rel", "new NaN/Inf", "failures"]
    return _table(head, rows, cls="grid")


def _worst_table(page: Page) -> str:
    worst = worst_nodes(page.trace)
    if not worst:
        return ""
    rows = [
        [
            str(rank),
            html.escape(t.node),
            html.escape(t.op_type),
            html.escape(t.precision),
            num(error_of(t)),
            num(t.max_abs),
            html.escape(t.reason),
        ]
        for rank, t in enumerate(worst, 1)
    ]
    head = ["#", "worst nodes", "op", "precision", "error", "max |x| (FP32)", "why"]
    return _table(head, rows, cls="grid worst")


def _by_op(
    by_op: Mapping[str, tuple[int, int]], searched: bool, folded: Mapping[str, int] | None = None
) -> str:
    folded = folded or {}
    if not by_op and not folded:
        return "<p class='note'>No node decisions available.</p>"
    rows = []
    ops = {op: (*by_op.get(op, (0, 0)), folded.get(op, 0)) for op in {*by_op, *folded}}
    top = max(lo + hi + fo for lo, hi, fo in ops.values()) or 1
    for op, (lo, hi, fo) in sorted(ops.items(), key=lambda kv: (-sum(kv[1]), kv[0])):
        bar = (
            f"<div class='bar'><span class='lowbar' style='width:{100 * lo / top:.1f}%'></span>"
            f"<span class='fp32bar' style='width:{100 * hi / top:.1f}%'></span>"
            f"<span class='foldbar' style='width:{100 * fo / top:.1f}%'></span></div>"
        )
        row = [html.escape(op), str(lo), str(hi)]
        rows.append([*row, str(fo), bar] if folded else [*row, bar])
    if searched:
        note = "<p class='note'>Float nodes per op type, from the candidate.</p>"
    else:
        note = (
            "<p class='note'>Float nodes per op type in the converted model as written (its "
            "own element types; Casts and Constants not counted)"
            + (
                "; folded: nodes of the original merged into another node, so absent from the "
                "converted model"
                if folded
                else ""
            )
            + ".</p>"
        )
    head = ["op type", "low", "FP32", *(["folded"] if folded else []), ""]
    return note + _table(head, rows, cls="grid ops")


def _pinned(pinned: Sequence[PinnedNode]) -> str:
    if not pinned:
        return "<p class='note'>None: every float node the level allows is in low precision.</p>"
    rows = [
        [
            html.escape(p.name),
            html.escape(p.op_type),
            html.escape(p.reason),
            "range guard" if p.round == 0 else f"after candidate {p.round}",
            html.escape(p.evidence) + (f" (+{p.body_nodes} body nodes)" if p.body_nodes else ""),
        ]
        for p in pinned
    ]
    return _table(["node", "op", "why", "when", "evidence"], rows, cls="grid")


def _folded(folded: Sequence[ValueFate], map_problem: str | None) -> str:
    """The values the conversion folded or removed; with no usable value map, why not, said
    here (never a pointer to a note that may not be there)."""
    if not folded:
        if map_problem:
            return f"<p class='note'>Unknown: {html.escape(map_problem)}.</p>"
        return "<p class='note'>None: every value of the original is carried by the result.</p>"
    rows = [
        [
            html.escape(v.name),
            f"<span class='fate {v.fate.value}'>{v.fate.value}</span>",
            html.escape(v.into),
            html.escape(v.why),
        ]
        for v in folded
    ]
    return _table(["original value", "fate", "into", "why"], rows, cls="grid folded")


def _traffic(traffic: Any) -> str:
    if not traffic:
        return (
            "<p class='note'>Memory-traffic estimate: not on this page (a conversion's "
            "<code>--report</code> JSON holds it, under <code>traffic</code>).</p>"
        )
    data = traffic.to_dict() if hasattr(traffic, "to_dict") else traffic
    if is_dataclass(data) and not isinstance(data, type):
        data = asdict(data)
    if isinstance(data, Mapping) and data:
        base = data.get("original")
        rows = []
        for k, v in data.items():
            share = (
                f" ({v / base:.2f}x the original)" if base and isinstance(v, int | float) else ""
            )
            label = {"original": "original FP32", "result": "this model", "all_low": "all low"}
            text = bytes_text(v) + share
            rows.append([html.escape(label.get(str(k), str(k))), html.escape(text)])
        return "<h3>Memory traffic per inference (bytes read and written, estimated)</h3>" + _table(
            ["", ""], rows, cls="facts"
        )
    return f"<p>Memory traffic: {html.escape(str(data))}</p>"


def _nodes(trace: Sequence[TracePoint], series: tuple[str, str]) -> str:
    """Every node, sortable by any column (click a heading; numbers sort by value); nameless
    Constants hidden until the box above the table is ticked."""
    head = [
        "#",
        "node",
        "op",
        "in body of",
        "precision",
        "why",
        "max |x| (FP32)",
        *(s or "–" for s in series),
    ]
    rows = []
    for i, t in enumerate(trace):
        precision = t.precision + (f" into {t.folded_into}" if t.folded_into else "")
        cells = [
            (str(i), i),
            (html.escape(t.node), None),
            (html.escape(t.op_type), None),
            (html.escape(t.inside), None),
            (html.escape(precision), None),
            (html.escape(t.reason), None),
            (num(t.max_abs), t.max_abs),
            (num(t.first_error), t.first_error),
            (num(t.final_error), t.final_error),
        ]
        rows.append(
            ("<tr class='nameless'>" if t.hidden else "<tr>")
            + "".join(
                f"<td data-v='{_sort_key(v)}'>{c}</td>" if v is not None else f"<td>{c}</td>"
                for c, v in cells
            )
            + "</tr>"
        )
    ths = "".join(f"<th title='click to sort'>{h}</th>" for h in head)
    hidden = sum(t.hidden for t in trace)
    toggle = (
        f"<p class='note'><label><input type='checkbox' class='shownameless'> show the {hidden} "
        "nameless Constant node(s)</label></p>"
        if hidden
        else ""
    )
    return (
        f"{toggle}<table class='grid sortable' id='nodes'><thead><tr>{ths}</tr></thead><tbody>"
        f"{''.join(rows)}</tbody></table>"
    )


def _sort_key(v: float) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "1e309"
    return repr(float(v)) if math.isfinite(v) else ("1e308" if v > 0 else "-1e308")


def thresholds_text(t: Mapping[str, Any]) -> str:
    parts = [f"{k} {num(v)}" for k, v in t.items() if k != "per_output" and v is not None]
    return ", ".join(parts) or "none (report only)"


_SORT_JS = """
document.querySelectorAll('input.shownameless').forEach(function(box){
  box.addEventListener('change', function(){
    document.getElementById('nodes').classList.toggle('showall', box.checked);
  });
});
document.querySelectorAll('table.sortable th').forEach(function(th, col){
  th.addEventListener('click', function(){
    var body = th.closest('table').tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var down = th.dataset.dir !== 'up'; th.dataset.dir = down ? 'up' : 'down';
    rows.sort(function(a, b){
      var x = a.cells[col], y = b.cells[col];
      var u = x.dataset.v, v = y.dataset.v, r;
      if (u !== undefined && v !== undefined) { r = parseFloat(u) - parseFloat(v); }
      else { r = x.textContent.localeCompare(y.textContent); }
      return down ? -r : r;
    });
    rows.forEach(function(r){ body.appendChild(r); });
  });
});
"""

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
max-width:1140px;color:#222;padding:0 12px}
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px}
.verdict{font-size:17px;font-weight:600;padding:6px 10px;border-radius:4px;display:inline-block}
.verdict.ok{background:#e3f4e9;color:#1e6b3c}.verdict.bad{background:#fbe4e1;color:#9b2a1f}
span.ok{color:#1e6b3c;font-weight:600}span.bad{color:#9b2a1f;font-weight:600}
table{border-collapse:collapse;margin:6px 0;max-width:100%}td,th{padding:3px 10px;
text-align:left;vertical-align:top;overflow-wrap:anywhere}
table.facts td:last-child{word-break:break-word}svg.chart{max-width:100%;height:auto}
table.grid td,table.grid th{border-bottom:1px solid #eee}table.grid th{background:#f6f6f6}
table.sortable th{cursor:pointer}table.sortable th:hover{background:#e8eef6}
table.facts td:first-child{color:#666}
.note{color:#555;font-size:13px}.warn{color:#9b2a1f}
span.fate.folded{color:#1d6fa5;font-weight:600}span.fate.removed{color:#777}
svg.chart{background:#fcfcfc;border:1px solid #e4e4e4}
svg .grid{stroke:#eee}svg .axis{font-size:11px;fill:#666;text-anchor:end}
svg .axis.left{text-anchor:start}svg .label{font-size:10.5px;fill:#222;font-family:monospace}
svg line.leader{stroke:#999;stroke-width:.6;stroke-dasharray:2 2}
svg polyline{fill:none}
svg polyline.first{stroke:#E69F00;stroke-width:4;stroke-opacity:.55}
svg polyline.final{stroke:#0072B2;stroke-width:1.4}
svg circle.first{fill:#E69F00}svg circle.final{fill:#0072B2}
svg circle.inf{fill:#D55E00;stroke:#fff;stroke-width:1}
svg line.pin{stroke:#CC79A7;stroke-width:1.6;stroke-dasharray:3 2}
.bar{width:420px;height:12px;background:#f1f1f1;display:flex}
.lowbar{background:#009E73;height:12px}.fp32bar{background:#7f6a4a;height:12px}
.foldbar{background:#56B4E9;height:12px}
tr.nameless{display:none}table.showall tr.nameless{display:table-row}
"""
