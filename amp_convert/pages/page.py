"""What an HTML page shows (``Page``), and the palette every part of the page draws with.

Built by ``pages/auto.py`` (an ``--auto`` search) and ``pages/trace.py`` (``validate --html``);
rendered by ``pages/html.py``, whose chart is ``pages/chart.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from amp_convert.auto.report import PinnedNode, TracePoint
from amp_convert.reports.value_map import ValueFate
from amp_convert.validation.metrics import OutputResult

LOG_MIN, LOG_MAX = -8.0, 1.0
#: worst nodes named on the chart
LABELLED = 5
# Okabe-Ito colours (distinguishable with colour-blindness), one meaning each
FIRST, FINAL, PIN, INF = "#E69F00", "#0072B2", "#CC79A7", "#D55E00"
STRIP = {
    "low": ("#009E73", "low precision"),
    "fp32": ("#7f6a4a", "FP32"),
    "fp32 (pinned)": (PIN, "FP32, kept by the search"),
    "folded": ("#56B4E9", "folded into another node"),
    "removed": ("#e0e0e0", "removed"),
    "n/a": ("#bdbdbd", "no float data path"),
}


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
    #: what the reader must know about how values were matched (e.g. no value map)
    notes: Sequence[str] = ()
    #: original values the conversion folded or removed (from the value map)
    folded: Sequence[ValueFate] = ()
    #: op type -> original nodes folded into another node (not in the converted graph)
    folded_ops: Mapping[str, int] = field(default_factory=dict)
    #: why the value map cannot say what was folded (None: it can)
    map_problem: str | None = None


def num(v: float | None, digits: int = 4) -> str:
    """``v`` with the fewest significant digits (at least ``digits``) that keep it honest: a
    value that is not 1 (or 0) never prints as 1 (or 0), so 0.9999999 against a 0.9999999x
    threshold shows why it failed."""
    if v is None:
        return "–"
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, float) and math.isinf(v):
        return "Inf" if v > 0 else "-Inf"
    if isinstance(v, int):
        return str(v)
    for d in range(digits, 18):
        text = f"{v:.{d}g}"
        back = float(text)
        if back == v or (abs(back - v) <= 5e-4 * abs(v) and back not in (0.0, 1.0, -1.0)):
            return text
    return repr(v)
