"""Accuracy-driven conversion (``--auto``): keep FP32 only the nodes calibration data shows must be.

``auto_convert`` returns the converted model and an ``AutoReport`` (every node pinned FP32 with its
evidence, ORT sessions and time used, final per-output metrics, share of nodes and weight bytes in
low precision).
"""

from amp_convert.auto.report import AutoReport, PinnedNode, TracePoint
from amp_convert.auto.search import auto_convert

__all__ = ["AutoReport", "PinnedNode", "TracePoint", "auto_convert"]
