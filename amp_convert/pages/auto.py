"""The HTML page of an ``--auto`` search: its facts, pins and trace, read from the AutoReport."""

from __future__ import annotations

from amp_convert.auto.report import AutoReport
from amp_convert.core.precision import Precision
from amp_convert.pages.html import Page, bytes_text, thresholds_text
from amp_convert.reports.value_map import Fate


def auto_page(report: AutoReport, title: str = "amp-convert --auto") -> Page:
    """The page for an AutoReport (precision per node from the converter's value map)."""
    conv = report.conversion
    by_op: dict[str, list[int]] = {}
    for n in conv.value_map.nodes.values() if conv is not None else ():
        if n.precision in (Precision.LOW, Precision.FP32):
            by_op.setdefault(n.op_type, [0, 0])[0 if n.precision == Precision.LOW else 1] += 1
    one = report.rounds == 1
    facts = [
        ("start level", f"{report.level}, {report.dtype.upper()}"),
        ("provider", report.provider),
        ("thresholds", thresholds_text(report.thresholds)),
        ("samples", str(report.samples)),
        ("ONNX Runtime sessions", str(report.sessions)),
        ("runs", str(report.runs)),
        ("candidates", str(report.rounds) + (" (the first candidate is the final one)" if one
                                             else "")),
        ("time", f"{report.seconds:.2f} s"),
        ("float nodes low", f"{report.low_nodes} / {report.float_nodes} "
                            f"({report.low_node_percent:.1f}%)"),
        ("kept FP32 by the search", str(len(report.pinned))),
    ]  # fmt: skip
    after = report.float_weight_bytes - report.low_weight_bytes + report.low_weight_bytes // 2
    sizes = [
        ("float weights (FP32 bytes)", bytes_text(report.float_weight_bytes)),
        ("of which stored low", f"{report.low_weight_percent:.1f}%"),
        ("weights after", bytes_text(after)),
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
        by_op={k: (v[0], v[1]) for k, v in by_op.items()},
        sizes=sizes,
        traffic=getattr(conv, "traffic", None),
        warnings=report.warnings,
        folded=folded,
    )
