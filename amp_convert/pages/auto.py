"""The HTML page of an ``--auto`` search: its facts, pins and trace, read from the AutoReport."""

from __future__ import annotations

from amp_convert.auto.report import AutoReport
from amp_convert.pages.html import Page, bytes_text, thresholds_text
from amp_convert.reports.value_map import Fate


def auto_page(report: AutoReport, title: str = "amp-convert --auto") -> Page:
    """The page for an AutoReport (precision per node from the converter's value map)."""
    conv = report.conversion
    one = report.rounds == 1
    facts = [
        ("start level", f"{report.level}, {report.dtype.upper()}"),
        ("provider", report.provider),
        ("thresholds", thresholds_text(report.thresholds)),
        ("samples", str(report.samples)),
        ("ONNX Runtime sessions", str(report.sessions)),
        ("runs", str(report.runs)),
        (
            "candidates",
            str(report.rounds) + (" (the first candidate is the final one)" if one else ""),
        ),
        ("time", f"{report.seconds:.2f} s"),
        (
            "float nodes low",
            f"{report.low_nodes} / {report.float_nodes} ({report.low_node_percent:.1f}%)",
        ),
        ("kept FP32 by the search", str(len(report.pinned))),
    ]
    sizes = [  # the validate page's figures, by the same rules (reports.figures)
        ("weights before", bytes_text(report.weight_bytes_before)),
        ("weights after", bytes_text(report.weight_bytes_after)),
        ("float weights stored low", f"{report.low_weight_percent:.1f}%"),
    ]
    folded = []
    if conv is not None:
        if conv.size_before:
            before, now = bytes_text(conv.size_before), bytes_text(conv.size_after)
            sizes.append(("file size", f"{before} → {now}"))
        folded = conv.value_map.with_fate(Fate.FOLDED, Fate.REMOVED)
    return Page(
        title=title,
        verdict="thresholds met" if report.passed else "thresholds NOT met",
        passed=report.passed,
        facts=facts,
        outputs=report.outputs,
        trace=report.trace,
        pinned=report.pinned,
        by_op=dict(report.by_op),
        sizes=sizes,
        traffic=getattr(conv, "traffic", None),
        warnings=report.warnings,
        folded=folded,
    )
