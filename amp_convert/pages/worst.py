"""Where a broken output breaks: the node the command line names when a FAIL is far from any
threshold (``ValidationReport.broken``), from the per-node trace the HTML page draws.

Why the first node at half the largest error, and not the largest: error is carried forward, so
the nodes after the one that breaks it show as much error as it does, or more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from amp_convert.auto.report import TracePoint
from amp_convert.pages.chart import error_of
from amp_convert.pages.trace import validation_page


def breaking_node(trace: Sequence[TracePoint]) -> TracePoint | None:
    """Where the output breaks: the first node, in graph order, whose error reaches half the
    largest error on the graph (a NaN/Inf counts as the largest); later nodes only carry it."""
    scored = [(t, error_of(t)) for t in trace if error_of(t) is not None and not t.hidden]
    if not scored:
        return None
    errors = [math.inf if e is None or not math.isfinite(e) else e for _, e in scored]
    peak = max(errors)
    bar = peak if math.isinf(peak) else 0.5 * peak
    return next(t for (t, _), e in zip(scored, errors, strict=True) if e >= bar)


def worst_node(
    reference: Any,
    candidate: Any,
    *,
    provider: str = "emulate",
    inputs: Any = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
) -> dict[str, Any] | None:
    """The node where a broken output breaks (``breaking_node`` of the per-node trace the HTML
    page draws: two more sessions), as ``{name, op_type, precision, error, reason}``."""
    page = validation_page(
        reference, candidate, provider=provider, inputs=inputs, dims=dims, seed=seed
    )
    found = breaking_node(page.trace)
    if found is None:
        return None
    return {
        "name": found.node,
        "op_type": found.op_type,
        "precision": found.precision,
        "error": error_of(found),
        "reason": found.reason,
    }
