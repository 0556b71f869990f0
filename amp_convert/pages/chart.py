"""The page's chart: per-node output error along the graph (log scale), the worst nodes labelled
in rows that never overlap, the search's pins, a precision strip and a legend; inline SVG only."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence

from amp_convert.auto.report import TracePoint
from amp_convert.pages.page import (
    FINAL,
    FIRST,
    INF,
    LABELLED,
    LOG_MAX,
    LOG_MIN,
    PIN,
    STRIP,
    Page,
    num,
)


def _y(err: float | None, top: float, height: float) -> float | None:
    if err is None:
        return None
    if math.isinf(err) or math.isnan(err):
        return top
    v = math.log10(max(err, 10**LOG_MIN))
    v = min(v, LOG_MAX)
    return top + (1 - (v - LOG_MIN) / (LOG_MAX - LOG_MIN)) * height


def error_of(t: TracePoint) -> float | None:
    """The error that ranks a node: the final candidate's, else the first's."""
    return t.final_error if t.final_error is not None else t.first_error


def worst_nodes(trace: Sequence[TracePoint], n: int = LABELLED) -> list[TracePoint]:
    """The ``n`` nodes with the largest error (NaN/Inf first); hidden ones never."""
    scored = [t for t in trace if error_of(t) is not None and not t.hidden]

    def key(t: TracePoint) -> float:
        err = error_of(t)
        return math.inf if err is None or not math.isfinite(err) else err

    return sorted(scored, key=key, reverse=True)[:n]


def chart(page: Page) -> str:
    trace = [t for t in page.trace if not t.hidden]
    if not trace:
        return "<p class='note'>No per-node values (nothing was probed).</p>"
    w, plot_h, left = 1100, 240, 60
    step = (w - left - 15) / max(len(trace) - 1, 1)
    lanes = _label_lanes(trace, lambda i: left + i * step, w)
    top = 22 + _LANE * len({lane for _, _, lane, _ in lanes})
    n = len(trace)
    step = (w - left - 15) / max(n - 1, 1)

    def x(i: int) -> float:
        return left + i * step

    out = [f"<svg viewBox='0 0 {w} {top + plot_h + 110}' width='100%' role='img' class='chart'>"]
    for k in range(int(LOG_MIN), int(LOG_MAX) + 1):
        yy = _y(10.0**k, top, plot_h) or 0.0
        out.append(f"<line x1='{left}' x2='{w - 10}' y1='{yy:.1f}' y2='{yy:.1f}' class='grid'/>")
        out.append(f"<text x='{left - 6}' y='{yy + 4:.1f}' class='axis'>1e{k}</text>")
    pinned = {p.name for p in page.pinned}
    for i, t in enumerate(trace):
        if t.node in pinned:
            out.append(
                f"<line x1='{x(i):.1f}' x2='{x(i):.1f}' y1='{top}' y2='{top + plot_h}' "
                f"class='pin'><title>kept FP32 by the search: {html.escape(t.node)}</title></line>"
            )
    same = all(t.first_error == t.final_error for t in trace)
    for attr, cls, label in (
        ("first_error", "first", page.series[0]),
        ("final_error", "final", page.series[1]),
    ):
        if label:
            out.extend(_series(trace, attr, cls, label, x, top, plot_h))
    out.extend(_labels(trace, lanes, x, top, plot_h))
    strip_y = top + plot_h + 12
    for i, t in enumerate(trace):
        color = STRIP.get(t.precision, STRIP["n/a"])[0]
        x0 = max(left, x(i) - step / 2)
        x1 = min(w - 10, x(i) + step / 2)
        where = f" (in {t.inside})" if t.inside else ""
        into = f" into {t.folded_into}" if t.folded_into else ""
        out.append(
            f"<rect x='{x0:.1f}' y='{strip_y}' width='{max(x1 - x0, 1):.1f}' height='14' "
            f"fill='{color}' class='strip'><title>{html.escape(t.node)}{html.escape(where)}: "
            f"{html.escape(t.precision + into)}</title></rect>"
        )
    out.append(_legend(page, trace, strip_y + 34, left, same))
    out.append(
        f"<text x='{w - 10}' y='{strip_y + 96}' class='axis'>{n} nodes, inputs → outputs</text>"
    )
    out.append("</svg>")
    return "".join(out)


def _series(
    trace: Sequence[TracePoint],
    attr: str,
    cls: str,
    label: str,
    x: Callable[[int], float],
    top: float,
    plot_h: float,
) -> list[str]:
    out: list[str] = []
    pts = [(x(i), _y(getattr(t, attr), top, plot_h)) for i, t in enumerate(trace)]
    pts = [(a, b) for a, b in pts if b is not None]
    if not pts:
        return out
    path = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
    out.append(f"<polyline points='{path}' class='{cls}'><title>{label}</title></polyline>")
    for i, t in enumerate(trace):
        err = getattr(t, attr)
        yy = _y(err, top, plot_h)
        if yy is None:
            continue
        bad = err is not None and not math.isfinite(err)
        out.append(
            f"<circle cx='{x(i):.1f}' cy='{yy:.1f}' r='{4.5 if bad else 2.2}' "
            f"class='{'inf' if bad else cls}'><title>{html.escape(t.node)} "
            f"[{html.escape(t.op_type)}] {label}: {num(err)}; max |x| {num(t.max_abs)}"
            f"</title></circle>"
        )
    return out


_LANE = 13  # px between label rows above the plot


def _label_text(rank: int, t: TracePoint) -> str:
    name = t.node if len(t.node) <= 40 else "…" + t.node[-39:]
    return f"{rank}. {name}"


def _label_lanes(
    trace: Sequence[TracePoint], x: Callable[[int], float], w: float
) -> list[tuple[int, TracePoint, int, float]]:
    """(rank, point, row, left x) of the worst nodes: rows above the plot, filled left to right
    so that no two labels share any horizontal extent (monospace 10.5 px: <= 6.6 px a char)."""
    index = {id(t): i for i, t in enumerate(trace)}
    placed: list[tuple[int, TracePoint, int, float]] = []
    ends: list[float] = []  # right edge of the last label of each row
    ranked = list(enumerate(worst_nodes(trace), 1))
    for rank, t in sorted(ranked, key=lambda rt: index[id(rt[1])]):
        width = 6.6 * len(_label_text(rank, t)) + 8
        start = min(max(x(index[id(t)]) - 4, 4.0), w - width - 4)
        row = next((r for r, end in enumerate(ends) if start > end), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = start + width
        placed.append((rank, t, row, start))
    return placed


def _labels(
    trace: Sequence[TracePoint],
    lanes: Sequence[tuple[int, TracePoint, int, float]],
    x: Callable[[int], float],
    top: float,
    plot_h: float,
) -> list[str]:
    """Names of the worst nodes (numbered as in the worst-nodes table) in rows above the plot,
    each with a thin line down to its point: readable, never overlapping."""
    index = {id(t): i for i, t in enumerate(trace)}
    out = []
    for rank, t, row, lx in lanes:
        i = index[id(t)]
        yy = _y(error_of(t), top, plot_h)
        if yy is None:
            continue
        text = _label_text(rank, t)
        ly = 14 + _LANE * row
        out.append(
            f"<line x1='{x(i):.1f}' x2='{x(i):.1f}' y1='{ly + 2}' y2='{yy:.1f}' class='leader'/>"
            f"<text x='{lx:.1f}' y='{ly}' class='label' data-rank='{rank}'>"
            f"{html.escape(text)}<title>{html.escape(t.node)}</title></text>"
        )
    return out


def _legend(page: Page, trace: Sequence[TracePoint], y: float, left: float, same: bool) -> str:
    items: list[tuple[str, str]] = []
    if page.series[0]:
        first = page.series[0] + (" (= final: one candidate)" if same else "")
        items.append((f"<rect width='16' height='4' y='-6' fill='{FIRST}'/>", first))
    if page.series[1]:
        items.append((f"<rect width='16' height='2' y='-5' fill='{FINAL}'/>", page.series[1]))
    if page.searched:
        items.append(
            (
                f"<line x1='8' x2='8' y1='-11' y2='3' stroke='{PIN}' stroke-width='2' "
                "stroke-dasharray='3 2'/>",
                "kept FP32 by the search",
            )
        )
    items.append((f"<circle cx='8' cy='-4' r='4.5' fill='{INF}'/>", "new NaN/Inf (top edge)"))
    shown = {t.precision for t in trace}
    strip = [(k, v) for k, v in STRIP.items() if k in shown]
    out, lx, row = [], left, 0
    for mark, label in items + [
        (f"<rect width='14' height='10' y='-9' fill='{c}'/>", f"strip: {text}")
        for _, (c, text) in strip
    ]:
        width = 30 + 6.6 * len(label)
        if lx + width > 1090:
            lx, row = left, row + 1
        out.append(
            f"<g transform='translate({lx:.0f},{y + 18 * row:.0f})' class='key'>{mark}"
            f"<text x='22' y='0' class='axis left'>{html.escape(label)}</text></g>"
        )
        lx += width
    return "".join(out)
