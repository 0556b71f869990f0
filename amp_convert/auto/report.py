"""AutoReport: what ``--auto`` kept FP32 and why, what it cost, and how accurate the result is."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from amp_convert.reports.base import Report, json_ready
from amp_convert.reports.conversion import ConversionReport
from amp_convert.reports.figures import bytes_text
from amp_convert.validation.metrics import OutputResult

SCHEMA_VERSION = 1


@dataclass
class PinnedNode:
    """A node kept FP32 by the search, with the evidence that made it so."""

    name: str
    op_type: str
    round: int  # 0: range guard; 1..: error localisation after that candidate
    reason: str  # "range" or "error"
    evidence: str
    max_abs: float | None = None
    introduced_error: float | None = None
    body_nodes: int = 0
    #: the main-graph If/Loop/Scan whose body holds this node ("" in the main graph)
    inside: str = ""


@dataclass
class TracePoint:
    """One node along the graph (topological order; a body node right after its If/Loop/Scan).

    ``precision``: "low", "fp32", "fp32 (pinned)", "folded", "removed" or "n/a". Errors are None
    where the value was not compared (folded away, or inside a body: measured at its outputs).
    """

    node: str
    op_type: str
    max_abs: float | None
    first_error: float | None
    final_error: float | None
    precision: str
    #: "folded": the node that absorbed it
    folded_into: str = ""
    #: a body node: the main-graph control-flow node it sits in
    inside: str = ""
    #: why it is FP32 (the conversion report's reason) or what became of it
    reason: str = ""
    #: a nameless Constant: listed only on request, never labelled
    hidden: bool = False


@dataclass
class AutoReport(Report, tool="amp-convert --auto", schema_version=SCHEMA_VERSION):
    """The result of auto_convert (serialisable with to_dict / to_json, from Report)."""

    level: str
    dtype: str
    provider: str
    thresholds: dict[str, Any]
    margin: float
    samples: int
    passed: bool = False
    pinned: list[PinnedNode] = field(default_factory=list)
    sessions: int = 0
    runs: int = 0
    rounds: int = 0
    seconds: float = 0.0
    outputs: list[OutputResult] = field(default_factory=list)
    float_nodes: int = 0
    low_nodes: int = 0
    float_weight_bytes: int = 0
    low_weight_bytes: int = 0
    #: every weight (initializers and Constant tensors) as stored, before and after
    weight_bytes_before: int = 0
    weight_bytes_after: int = 0
    #: float nodes per op type (low, FP32) of the result, as the page shows them
    by_op: dict[str, tuple[int, int]] = field(default_factory=dict)
    trace: list[TracePoint] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    conversion: ConversionReport | None = None

    @property
    def low_node_percent(self) -> float:
        return 100.0 * self.low_nodes / self.float_nodes if self.float_nodes else 0.0

    @property
    def low_weight_percent(self) -> float:
        if not self.float_weight_bytes:
            return 0.0
        return 100.0 * self.low_weight_bytes / self.float_weight_bytes

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["conversion"] = None if self.conversion is None else self.conversion.to_dict()
        data["outputs"] = [o.to_dict() for o in self.outputs]
        data = self.versioned(data)
        data["low_node_percent"] = round(self.low_node_percent, 2)
        data["low_weight_percent"] = round(self.low_weight_percent, 2)
        return json_ready(data)

    def summary(self) -> str:
        """A few lines for the terminal."""
        low = self.dtype.upper()
        verdict = "met" if self.passed else "NOT met"
        lines = [
            f"auto from level {self.level}, {low}, provider {self.provider}: thresholds {verdict} "
            f"({_thresholds(self.thresholds)}) on {self.samples} sample(s)",
            f"{self.sessions} ONNX Runtime sessions, {self.runs} runs, {self.rounds} candidate "
            f"round(s), {self.seconds:.2f} s",
            f"nodes {low}: {self.low_nodes} of {self.float_nodes} float nodes "
            f"({self.low_node_percent:.1f}%); weights {bytes_text(self.weight_bytes_before)} -> "
            f"{bytes_text(self.weight_bytes_after)} ({low}: {self.low_weight_percent:.1f}% of "
            "the float weights)",
            f"kept FP32 by the search: {len(self.pinned)}",
        ]
        for p in self.pinned:
            body = f" (+{p.body_nodes} body nodes)" if p.body_nodes else ""
            where = f" in {p.inside}" if p.inside else ""
            lines.append(f"  {p.name} [{p.op_type}]{where}{body}: {p.reason}, {p.evidence}")
        for o in self.outputs:
            mark = _MARKS.get(o.status, o.status)
            cos = "n/a" if o.cosine is None else f"{o.cosine:.6f}"
            mx = "n/a" if o.max_abs is None else f"{o.max_abs:.3g}"
            lines.append(
                f"  {mark} {o.name}: cosine {cos}, max_abs {mx}, new NaN/Inf {o.nonfinite}"
                + (f" ({'; '.join(o.failures)})" if o.failures else "")
            )
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)


#: an output's status as the summary marks it (a skipped output is no failure)
_MARKS = {"pass": "ok ", "fail": "FAIL", "not_judged": "--  ", "skipped": "n/c "}


def _thresholds(t: dict[str, Any]) -> str:
    parts = [f"{k} {v:g}" for k, v in t.items() if k != "per_output" and v is not None]
    return ", ".join(parts) or "none"
