"""The four targets of project issue 4, judged on a bench/compare.py run: figures and verdicts.

1. amp-convert's output loads in ORT and passes the full checker (O1/O2/O3);
2. casts added at O2 <= onnxconverter-common's;
3. conversion time <= onnxconverter-common's, and models over 100 MB within 1.3x the I/O floor;
4. peak RSS on the > 2 GB model <= half its size.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from bench._compare_model import AMP, Model
from bench._table import GB, clip, secs_text, size_text

MiB = 2**20
LARGE = 100 * 10**6  # target 3: models over 100 MB convert within 1.3x the I/O floor
FLOOR_LIMIT = 1.3


def _outcome(m: Model, conv: str) -> dict[str, Any]:
    c = m.checks.get(conv, {})
    return {
        "conversion_error": m.error(conv),
        "checker_error": c.get("checker_error"),
        "ort_error": c.get("ort_error"),
    }


def _target1(models: list[Model]) -> dict[str, Any]:
    loads = [m for m in models if m.loads()]
    failures = [
        {
            "model": m.key,
            "converter": conv,
            "problem": m.error(conv)
            or m.checks.get(conv, {}).get("ort_error")
            or m.checks.get(conv, {}).get("checker_error"),
        }
        for m in loads
        for conv in AMP
        if not (m.converted(conv) and m.valid(conv))
    ]
    io = [
        {"model": m.key, "converter": conv, "changed": m.io_changed(conv)}
        for m in models
        for conv in AMP
        if m.io_changed(conv)
    ]
    broken = [
        {
            "model": m.key,
            "original_ort_error": m.original.get("ort_error"),
            "original_checker_error": m.original.get("checker_error"),
            "amp": {conv: _outcome(m, conv) for conv in AMP},
        }
        for m in models
        if not m.loads()
    ]
    return {
        "met": not failures,
        "models_loading": len(loads),
        "failures": failures,
        "io_types_changed": io,
        "original_does_not_load": broken,
    }


def _casts_vs_occ(models: list[Model], conv: str) -> dict[str, Any]:
    both = [m for m in models if m.valid(conv) and m.valid("occ") and not m.io_changed("occ")]
    pairs = [(m, m.casts_added(conv), m.casts_added("occ")) for m in both]
    more = [{"model": m.key, "amp": a, "occ": b} for m, a, b in pairs if a is None or a > b]
    fewer = sum(1 for _, a, b in pairs if a is not None and a < b)
    invalid = [m.key for m in models if m.valid(conv) and not m.valid("occ")]
    io_changed = [m.key for m in models if m.valid(conv) and m.valid("occ") and m.io_changed("occ")]
    return {
        "met": not more,
        "compared": len(both),
        "more": more,
        "fewer": fewer,
        "occ_invalid": invalid,
        "occ_io_changed": io_changed,
    }


def _time_vs_occ(models: list[Model], conv: str) -> dict[str, Any]:
    pairs = [(m, m.median(conv), m.median("occ")) for m in models]
    pairs = [(m, a, b) for m, a, b in pairs if a is not None and b is not None]
    slower = sorted(
        ({"model": m.key, "amp_s": a, "occ_s": b, "ratio": a / b} for m, a, b in pairs if a > b),
        key=lambda d: -d["ratio"],
    )
    ratios = [a / b for _, a, b in pairs]
    return {
        "compared": len(pairs),
        "slower": len(slower),
        "median_ratio": statistics.median(ratios) if ratios else None,
        "total_amp_s": sum(a for _, a, _ in pairs),
        "total_occ_s": sum(b for _, _, b in pairs),
        "worst": slower[:10],
        "noinfer": [
            {"model": m.key, "amp_s": m.median(conv), "occ_noinfer_s": m.median("occ_noinfer")}
            for m in models
            if m.median("occ") is None and m.median("occ_noinfer") and m.median(conv)
        ],
    }


def _time_vs_floor(m: Model, conv: str) -> dict[str, Any]:
    return {
        "model": m.key,
        "converter": conv,
        "seconds": m.median(conv),
        "floor_s": m.median("floor"),
        "floor_min_s": m.fastest("floor"),
        "ratio": (m.median(conv) or math.nan) / (m.median("floor") or math.nan),
        # the verdict's figure: against the floor's best run (the floor's spread is the
        # machine's, e.g. first-touch of GBs of fresh memory in a VM)
        "ratio_vs_fastest": (m.median(conv) or math.nan) / (m.fastest("floor") or math.nan),
    }


def _peak_rss(m: Model, conv: str) -> dict[str, Any]:
    runs = m.runs.get(conv, [])
    return {
        "model": m.key,
        "converter": conv,
        "size": m.size,
        "peak_rss": m.peak(conv),
        "limit": m.size / 2,
        "ratio": (m.peak(conv) or math.nan) / m.size,
        "anon_peak": max((r.get("anon_peak", 0) for r in runs), default=0),
        "file_peak": max((r.get("file_peak", 0) for r in runs), default=0),
        "occ_peak": m.peak("occ") or m.peak("occ_noinfer"),
    }


def targets(models: list[Model]) -> dict[str, Any]:
    """The four targets, with the figures behind each verdict."""
    t3 = {conv: _time_vs_occ(models, conv) for conv in AMP}
    t3_floor = [_time_vs_floor(m, conv) for m in models if m.size > LARGE for conv in AMP]
    t4 = [_peak_rss(m, conv) for m in models if m.size > 2 * GB for conv in AMP]
    return {
        "1": _target1(models),
        "2": {**_casts_vs_occ(models, "amp_O2"), "context_O3": _casts_vs_occ(models, "amp_O3")},
        "3": {
            "met_vs_occ": all(v["slower"] == 0 for v in t3.values()),
            "vs_occ": t3,
            "met_vs_floor": (
                all(r["ratio_vs_fastest"] <= FLOOR_LIMIT for r in t3_floor) if t3_floor else None
            ),
            "vs_floor": t3_floor,
        },
        "4": {
            "met": all(r["peak_rss"] and r["peak_rss"] <= r["limit"] for r in t4) if t4 else None,
            "figures": t4,
        },
    }


# ----------------------------------------------------------------------------------------------
# lines
# ----------------------------------------------------------------------------------------------
def _verdict(met: bool | None) -> str:
    return (
        "not evaluated (no such model in this run)" if met is None else ("MET" if met else "MISSED")
    )


def _listed(head: str, items: list[str]) -> list[str]:
    """A line and its items, one "   - " line each."""
    return [head, *(f"   - {item}" for item in items)]


def _signed(n: int | None) -> str:
    return "-" if n is None else f"{n:+d}"


def _short_outcome(o: dict[str, Any], original_error: str) -> str:
    """amp's outcome on a model whose original does not load: a few words."""
    if o["conversion_error"]:
        return "conversion failed: " + clip(o["conversion_error"], 60)
    checker = "checker ok" if o["checker_error"] is None else "checker FAILS"
    if o["ort_error"] is None:
        return f"{checker}, loads"
    if o["ort_error"] == original_error:
        return f"{checker}, same ORT error"
    return f"{checker}, ORT: " + clip(o["ort_error"], 70)


def _target1_lines(t1: dict[str, Any]) -> list[str]:
    out = _listed(
        f"1. amp-convert output loads in ORT and passes the full checker at O1/O2/O3: "
        f"{_verdict(t1['met'])} ({t1['models_loading']} models whose original loads; "
        f"{len(t1['failures'])} failures)",
        [f"{f['model']} {f['converter']}: {f['problem']}" for f in t1["failures"]],
    )
    out += _listed(
        f"   amp-convert outputs whose input/output types differ from the original "
        f"(keep_io_types=True): {len(t1['io_types_changed'])}",
        [
            f"{f['model']} {f['converter']}: {', '.join(f['changed'])}"
            for f in t1["io_types_changed"]
        ],
    )
    if t1["original_does_not_load"]:
        out.append(
            f"   originals that do not load in ORT ({len(t1['original_does_not_load'])}; "
            "amp-convert's O1/O2/O3 outputs: full checker, ORT):"
        )
        for b in t1["original_does_not_load"]:
            orig = b["original_ort_error"] or ""
            outcomes = [_short_outcome(v, orig) for v in b["amp"].values()]
            if len(set(outcomes)) == 1:
                amp = f"O1/O2/O3: {outcomes[0]}"
            else:
                amp = "; ".join(f"O{i}: {o}" for i, o in enumerate(outcomes, 1))
            out.append(f"   - {b['model']}: {clip(orig, 90)} -> {amp}")
    return out


def _target2_lines(t2: dict[str, Any]) -> list[str]:
    def more(level: str, v: dict[str, Any]) -> list[str]:
        return [
            f"{f['model']}: amp {level} {_signed(f['amp'])}, occ {_signed(f['occ'])}"
            for f in v["more"]
        ]

    out = _listed(
        f"2. casts added at O2 <= onnxconverter-common's: {_verdict(t2['met'])} "
        f"({t2['compared']} models where both outputs load and pass the checker: "
        f"{len(t2['more'])} with more casts, {t2['fewer']} with fewer)",
        more("O2", t2),
    )
    o3 = t2["context_O3"]
    out += _listed(
        f"   context, O3 (everything the schemas allow, closest to what onnxconverter-common "
        f"does): {len(o3['more'])} of {o3['compared']} with more casts, {o3['fewer']} with fewer",
        more("O3", o3),
    )
    if t2["occ_io_changed"]:
        out.append(
            "   not compared, onnxconverter-common changed the model's input/output types "
            f"despite keep_io_types=True ({len(t2['occ_io_changed'])}): "
            + ", ".join(t2["occ_io_changed"])
        )
    if t2["occ_invalid"]:
        out.append(
            f"   not compared, onnxconverter-common's output fails ORT or the checker "
            f"({len(t2['occ_invalid'])}): {', '.join(t2['occ_invalid'])}"
        )
    return out


def _target3_lines(t3: dict[str, Any]) -> list[str]:
    out = [f"3a. conversion time <= onnxconverter-common's: {_verdict(t3['met_vs_occ'])}"]
    for conv, v in t3["vs_occ"].items():
        med = v["median_ratio"]
        out.append(
            f"   - {conv}: slower on {v['slower']}/{v['compared']} models; median time ratio "
            f"amp/occ {med:.2f}; totals {v['total_amp_s']:.2f} s vs {v['total_occ_s']:.2f} s"
            if med is not None
            else f"   - {conv}: nothing to compare"
        )
        worst = ", ".join(
            f"{w['model']} {w['ratio']:.1f}x ({secs_text(w['amp_s'])} vs {secs_text(w['occ_s'])})"
            for w in v["worst"][:3]
        )
        if worst:
            out.append(f"     worst: {worst}")
        for n in v["noinfer"]:
            out.append(
                f"     {n['model']}: default occ failed; vs disable_shape_infer: "
                f"{secs_text(n['amp_s'])} vs {secs_text(n['occ_noinfer_s'])}"
            )
    out += _listed(
        f"3b. models over 100 MB convert within {FLOOR_LIMIT}x the I/O floor (median conversion vs "
        f"the floor's fastest run): {_verdict(t3['met_vs_floor'])}",
        [
            f"{r['model']} {r['converter']}: {secs_text(r['seconds'])} = "
            f"{r['ratio_vs_fastest']:.2f}x the floor's fastest run "
            f"({secs_text(r['floor_min_s'])}), "
            f"{r['ratio']:.2f}x its median ({secs_text(r['floor_s'])})"
            for r in t3["vs_floor"]
        ],
    )
    return out


def _peak_line(r: dict[str, Any]) -> str:
    peak = r["peak_rss"]
    if not peak:
        return f"{r['model']} {r['converter']}: no figure"
    occ = f"; onnxconverter-common {r['occ_peak'] / MiB:.0f} MiB" if r["occ_peak"] else ""
    return (
        f"{r['model']} {r['converter']}: peak {peak / MiB:.0f} MiB = "
        f"{100 * r['ratio']:.0f}% of {size_text(r['size'])} (limit {r['limit'] / MiB:.0f} MiB; "
        f"sampled anonymous {r['anon_peak'] / MiB:.0f} MiB, file-backed "
        f"{r['file_peak'] / MiB:.0f} MiB){occ}"
    )


def target_lines(t: dict[str, Any]) -> list[str]:
    """The verdicts and the figures behind them, a line each."""
    t4 = t["4"]
    return [
        *_target1_lines(t["1"]),
        *_target2_lines(t["2"]),
        *_target3_lines(t["3"]),
        *_listed(
            f"4. peak RSS on the > 2 GB model <= half its size: {_verdict(t4['met'])}",
            [_peak_line(r) for r in t4["figures"]],
        ),
    ]
