"""bench/compare.py's tables: a row per model and converter, the summary, the compact table.

Each builds rows of strings; bench/_table.py lays them out as text or Markdown. A figure a later
change wants in the main table (and so in every format) goes into EXTRA_COLUMNS: one entry gives
the column and its cell on the original's row and on each converter's row.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench._compare_model import AMP, CONVERTERS, Model
from bench._table import Column, clip, columns, float_text, secs_text, size_text

MiB = 2**20


@dataclass(frozen=True)
class ExtraColumn:
    """A main-table column after the fixed ones: its cell for the original and for a converter."""

    column: Column
    original: Callable[[Model], str]
    converter: Callable[[Model, str], str]


def _traffic(m: Model, conv: str) -> dict[str, Any]:
    return m.checks.get(conv, {}).get("traffic", {})


def _traffic_of_original(m: Model) -> str:
    """1.00, and the original all in FP16 over itself (the same whichever output measured it)."""
    lows = (_traffic(m, c).get("all_low_ratio") for c in m.checks)
    low = next((x for x in lows if x is not None), None)
    return "-" if low is None else f"1.00 (all-low {low:.2f})"


def _traffic_ratio(m: Model, conv: str) -> str:
    return float_text(_traffic(m, conv).get("ratio"), ".2f")


# the figures of _compare_analyze.FIGURES that the main table shows, after the fixed columns
EXTRA_COLUMNS: list[ExtraColumn] = [
    ExtraColumn(Column("traffic", right=True), _traffic_of_original, _traffic_ratio),
]

_FIXED = [
    Column("model"),
    Column("converter"),
    Column("loads in ORT"),
    Column("full checker"),
    Column("casts added"),
    Column("FP32 nodes"),
    Column("time", right=True),
    Column("x floor", right=True, md_title="× floor"),
    Column("peak RSS MiB", right=True),
    Column("size", right=True),
    Column("max rel err", right=True),
    Column("min cosine", right=True),
    Column("NaN/Inf", right=True),
]


def main_columns() -> list[Column]:
    return _FIXED + [x.column for x in EXTRA_COLUMNS]


LEGEND = """\
Per model: a row for the FP32 original (its "time" and "peak RSS" are the I/O floor: onnx.load +
onnx.save in a fresh process), then one row per converter (file to file: load + convert + save).
loads in ORT: onnxruntime.InferenceSession on CPU. full checker: onnx.checker.check_model(path,
full_check=True). casts added: Cast nodes (subgraphs included) minus the original's. FP32 nodes:
float nodes still computing in FP32 / all float nodes (see bench/_compare_analyze.py). time:
median over rounds, each from a warm fresh process (batched for small models; for large ones, a
process per run and the range over runs); x floor: median time / median I/O floor. peak RSS:
VmHWM of that conversion. size: output on disk with external data. max rel err / min cosine /
NaN/Inf: worst over outputs, amp_convert.validate(provider="emulate", runs=0) against the FP32
original (NaN/Inf counted in the converted model's outputs). traffic: estimated bytes read and
written per inference (amp_convert.cost.traffic, as amp-convert's report has it) over the FP32
original's; on the original's row, the original all in FP16 over itself."""
LEGEND_MD = LEGEND.replace("x floor", "×floor")


def _io_note(m: Model, conv: str) -> str:
    changed = m.io_changed(conv)
    return f" (I/O types changed: {', '.join(changed)})" if changed else ""


def _time_cell(m: Model, conv: str) -> str:
    """Median; for an isolated (large) model also the range over its runs."""
    t = m.median(conv)
    runs = [r["seconds"] for r in m.runs.get(conv, []) if "seconds" in r]
    if t is None or not m.isolated or len(runs) < 2:
        return secs_text(t)
    return f"{secs_text(t)} ({min(runs):.2f}-{max(runs):.2f})"


def _yes(err: str | None, width: int) -> str:
    return "yes" if err is None else "no: " + clip(err, width)


def _nodes(c: dict[str, Any]) -> str:
    if "fp32_nodes" not in c:
        return "-"
    return f"{c['fp32_nodes']}/{c['float_nodes']}"


def _accuracy_cells(acc: dict[str, Any], width: int) -> list[str]:
    """max rel err, min cosine, NaN/Inf."""
    if "skipped" in acc:
        return [f"skipped: {acc['skipped']}", "", ""]
    if "error" in acc:
        return [_yes(acc["error"], width), "", ""]
    if not acc:
        return ["-", "-", "-"]
    nan = str(acc["nan_inf"])
    if acc["ref_nan_inf"]:
        nan += f" (orig {acc['ref_nan_inf']})"
    if acc["exact_mismatches"]:
        nan += f"; {acc['exact_mismatches']} int mismatches"
    return [float_text(acc["max_rel"], ".2e"), float_text(acc["min_cosine"], ".6f"), nan]


def rows(m: Model, width: int) -> list[list[str]]:
    """The original's row, then one row per converter that ran."""
    o = m.original
    floor_s, floor_peak = m.median("floor"), m.peak("floor")
    head = [
        m.key,
        "original FP32 (time = I/O floor)",
        _yes(o.get("ort_error"), width) if o else "-",
        _yes(o.get("checker_error"), width) if o else "-",
        f"({o['casts']} casts)" if "casts" in o else "-",
        _nodes(o),
        _time_cell(m, "floor") if floor_s is not None else f"floor failed: {m.error('floor')}",
        "1.00",
        f"{floor_peak / MiB:.0f}" if floor_peak else "-",
        size_text(m.size),
        "",
        "",
        "",
    ]
    out = [head + [x.original(m) for x in EXTRA_COLUMNS]]
    blank = len(_FIXED) - 3 + len(EXTRA_COLUMNS)
    for conv, (_, _, label) in CONVERTERS.items():
        if conv not in m.runs:
            continue
        err = m.error(conv)
        if err:
            out.append([m.key, label, _yes("conversion failed: " + err, width)] + [""] * blank)
            continue
        c = m.checks.get(conv, {})
        t, peak = m.median(conv), m.peak(conv)
        casts = m.casts_added(conv)
        out.append(
            [
                m.key,
                label,
                _yes(c.get("ort_error"), width) if c else "-",
                _yes(c.get("checker_error"), width) + _io_note(m, conv) if c else "-",
                "-" if casts is None else f"{casts:+d}",
                _nodes(c),
                _time_cell(m, conv),
                f"{t / floor_s:.2f}" if t and floor_s else "-",
                f"{peak / MiB:.0f}" if peak else "-",
                size_text(c.get("size")),
                *_accuracy_cells(c.get("accuracy", {}), width),
                *(x.converter(m, conv) for x in EXTRA_COLUMNS),
            ]
        )
    return out


# ----------------------------------------------------------------------------------------------
# summary per converter
# ----------------------------------------------------------------------------------------------
SUMMARY_COLUMNS = [
    Column("converter"),
    *(Column(t, right=True) for t in ("converted", "loads in ORT", "full checker")),
    *(Column(t, right=True) for t in ("casts added", "FP32 nodes")),
    Column("median x floor", right=True, md_title="median × floor"),
    *(Column(t, right=True) for t in ("total time", "median max rel err", "models with NaN/Inf")),
    Column("median traffic", right=True),
]

SUMMARY_NOTE = """\
converted / full checker: over all models; loads in ORT: over the models whose FP32
original loads. The other columns are over the {n} models where all four outputs load and pass the
checker: casts added and FP32 nodes summed, time summed, median of time / I/O floor, median of
the worst max rel error per model, models with NaN/Inf in an output (emulated FP16), median of
the estimated traffic over the original's."""


def summary(models: list[Model]) -> dict[str, Any]:
    """Per converter: validity over all models; casts, nodes, time and accuracy on a common set.

    The common set: models whose original loads in ORT and where amp-convert (O1/O2/O3) and
    onnxconverter-common all produced an output that loads and passes the full checker, so
    sums compare the same models.
    """
    loads = [m for m in models if m.loads()]
    common = [m for m in loads if all(m.valid(c) for c in (*AMP, "occ"))]
    out: dict[str, Any] = {
        "models": len(models),
        "originals_loading": len(loads),
        "common": [m.key for m in common],
    }
    for conv in (*AMP, "occ"):
        ran = [m for m in models if conv in m.runs]
        ok = [m for m in ran if m.converted(conv)]
        times = [(m.median(conv), m.median("floor")) for m in common]
        accs = [m.checks[conv].get("accuracy", {}) for m in common]
        rels = [a["max_rel"] for a in accs if isinstance(a.get("max_rel"), float)]
        traffic = [t["ratio"] for m in common if "ratio" in (t := _traffic(m, conv))]
        out[conv] = {
            "ran": len(ran),
            "converted": len(ok),
            "loads": sum(1 for m in loads if m.converted(conv) and not m.checks[conv]["ort_error"]),
            "checker": sum(1 for m in ok if not m.checks.get(conv, {}).get("checker_error", "?")),
            "casts_added": sum(m.casts_added(conv) or 0 for m in common),
            "fp32_nodes": sum(m.checks[conv].get("fp32_nodes", 0) for m in common),
            "float_nodes": sum(m.checks[conv].get("float_nodes", 0) for m in common),
            "median_x_floor": statistics.median(a / f for a, f in times) if times else None,
            "total_s": sum(a for a, _ in times),
            "median_max_rel": statistics.median(rels) if rels else None,
            "nonfinite_models": sum(1 for a in accs if a.get("nan_inf")),
            "accuracy_models": len(accs),
            "median_traffic": statistics.median(traffic) if traffic else None,
        }
    return out


def summary_rows(s: dict[str, Any]) -> list[list[str]]:
    n_common = len(s["common"])
    out = []
    for conv in (*AMP, "occ"):
        v = s[conv]
        out.append(
            [
                CONVERTERS[conv][2],
                f"{v['converted']}/{v['ran']}",
                f"{v['loads']}/{s['originals_loading']}",
                f"{v['checker']}/{v['ran']}",
                f"+{v['casts_added']}",
                f"{v['fp32_nodes']}/{v['float_nodes']}",
                float_text(v["median_x_floor"], ".1f"),
                f"{v['total_s']:.2f} s",
                float_text(v["median_max_rel"], ".2e"),
                f"{v['nonfinite_models']}/{n_common}",
                float_text(v.get("median_traffic"), ".2f"),
            ]
        )
    return out


# ----------------------------------------------------------------------------------------------
# compact table: one row per model
# ----------------------------------------------------------------------------------------------
COMPACT_COLUMNS = columns(
    "model",
    "original loads",
    "valid O1/O2/O3/occ",
    "casts added O1/O2/O3/occ",
    "FP32 nodes O2/occ",
    "time O2/occ/floor",
    "max rel err O2/occ",
    "traffic O2/occ",
    right_from=1,
)
COMPACT_NOTE = """\
One row per model. valid: the output loads in ORT and passes the full checker (y), passes the
checker only (c), neither (n), conversion failed (E), * = model input/output types changed
despite keep_io_types=True; occ = onnxconverter-common
(keep_io_types=True; its disable_shape_infer=True retry in brackets where the default failed).
casts added: Cast nodes minus the original's. time: medians, file to file; floor: onnx.load +
onnx.save. max rel err: emulated FP16 against the FP32 original, worst output ("-": not
measured, e.g. the original or the output does not load). traffic: estimated bytes per
inference over the original's."""


def _valid_mark(m: Model, conv: str) -> str:
    if conv not in m.runs:
        return "-"
    if m.error(conv):
        return "E"
    c = m.checks.get(conv, {})
    if c.get("checker_error") is not None:
        return "n"
    return "y" if c.get("ort_error") is None else "c"


def _rel(m: Model, conv: str) -> str:
    acc = m.checks.get(conv, {}).get("accuracy", {})
    return float_text(acc.get("max_rel"), ".1e") if "max_rel" in acc else "-"


def compact_rows(models: list[Model]) -> list[list[str]]:
    out = []
    for m in models:
        retry = bool(m.error("occ") and "occ_noinfer" in m.runs)
        occ = "occ_noinfer" if retry else "occ"

        def wrap(text: str, retry: bool = retry) -> str:
            """onnxconverter-common's retry figures, in brackets."""
            return f"[{text}]" if retry else text

        casts = [m.casts_added(c) for c in (*AMP, occ)]
        casts_cells = ["-" if n is None else f"{n:+d}" for n in casts]
        casts_cells[-1] = wrap(casts_cells[-1])
        nodes = [_nodes(m.checks.get(c, {})) for c in ("amp_O2", occ)]
        marks = [_valid_mark(m, c) + ("*" if m.io_changed(c) else "") for c in (*AMP, "occ")]
        if retry:
            marks[-1] += f"[{_valid_mark(m, occ)}]"
        out.append(
            [
                f"`{m.key}`",
                "yes" if m.original.get("ort_error") is None else "no",
                "/".join(marks),
                "/".join(casts_cells),
                f"{nodes[0]} / {wrap(nodes[1])}",
                f"{secs_text(m.median('amp_O2'))} / {wrap(secs_text(m.median(occ)))} / "
                f"{secs_text(m.median('floor'))}",
                f"{_rel(m, 'amp_O2')} / {wrap(_rel(m, occ))}",
                f"{_traffic_ratio(m, 'amp_O2')} / {wrap(_traffic_ratio(m, occ))}",
            ]
        )
    return out
