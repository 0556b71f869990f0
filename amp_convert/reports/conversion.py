"""ConversionReport: what became low precision, what stayed FP32, and why."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from amp_convert.core.dtypes import low_type_of
from amp_convert.core.reasons import Reason
from amp_convert.reports.base import Report
from amp_convert.reports.figures import bytes_text, cast_change
from amp_convert.reports.value_map import ValueMap

SCHEMA_VERSION = 1


@dataclass
class NodeDecision:
    """One node's outcome. precision: 'low', 'fp32', or 'n/a' (no float data path).

    ``reason`` is the line people read; ``reasons`` the same decision structured, one Reason per
    cause in order (``kind`` for code: "user", "target", "range"...; ``source``: who decided;
    ``detail``), so a tool filters decisions by kind without parsing prose.
    """

    name: str
    op_type: str
    domain: str
    graph: str
    op_class: str
    precision: str
    reason: str
    reasons: tuple[Reason, ...] = ()


@dataclass
class TensorNote:
    """An initializer or constant worth a line: kept FP32 because of its range, or converted."""

    name: str
    action: str
    detail: str


@dataclass
class CastNote:
    """A Cast in the result: the tensor it reads, the type it makes, the bytes it moves per run."""

    tensor: str
    to: str
    bytes: int


@dataclass
class FoldNote:
    """A BatchNormalization done offline: folded into its producer, decomposed, or kept."""

    node: str
    action: str
    into: str
    detail: str


@dataclass
class InitializerInputs:
    """Initializers the model also listed as graph inputs (old exporters), and what became of
    them. case: "constants" (IR < 4: ORT cannot override them; promoted), "weights" (IR >= 4:
    removed from the inputs, converted and folded like any weight) or "overridable"
    (--keep-initializer-inputs: kept as FP32 inputs)."""

    count: int
    case: str
    detail: str

    def text(self) -> str:
        return f"{self.count} initializers listed as graph inputs: {self.detail}"


@dataclass
class LimitNote:
    """A low node whose kernel holds a sum in the low type (targets/accumulation.py): it is right
    exactly while `limit` holds for the data (passes/kernel_limits.py)."""

    node: str
    op_type: str
    dtype: str
    #: how many values each output element sums (None where the shapes do not say)
    count: int | None
    limit: str
    source: str

    def text(self) -> str:
        over = ""
        if self.count:
            bound = low_type_of(self.dtype).max / self.count
            over = f"; over {self.count} values: |mean| <= {bound:.4g}"
        return f"{self.op_type} {self.node!r} ({self.dtype}): {self.limit}{over} [{self.source}]"


@dataclass
class ConversionReport(Report, tool="amp-convert", schema_version=SCHEMA_VERSION):
    """Summary and per-node decisions of one conversion (serialisable with to_dict/to_json)."""

    level: str
    dtype: str
    keep_io_types: bool
    nodes: list[NodeDecision] = field(default_factory=list)
    casts_before: int = 0
    casts_after: int = 0
    initializers_converted: int = 0
    initializers_kept: int = 0
    tensors: list[TensorNote] = field(default_factory=list)
    size_before: int = 0
    size_after: int = 0
    #: every weight (initializers and Constant tensors, ``reports.figures``) as stored
    weight_bytes_before: int = 0
    weight_bytes_after: int = 0
    seconds: float = 0.0
    already_converted: bool = False
    warnings: list[str] = field(default_factory=list)
    #: every Cast in the result with its estimated bytes per inference (largest first)
    casts: list[CastNote] = field(default_factory=list)
    #: estimated bytes read+written per inference: original, result, original all in low precision
    traffic: dict[str, int] = field(default_factory=dict)
    #: the input dims the traffic figures assume (the user's --dim, else the defaults)
    traffic_dims: dict[str, int] = field(default_factory=dict)
    #: values whose size no shape gave, estimated from their producer's inputs
    traffic_estimated: int = 0
    folds: list[FoldNote] = field(default_factory=list)
    target: str = ""
    #: graph rewrites for the target or for precision: hand-written norms folded or given FP32
    #: statistics, spatial ReduceMeans run as GlobalAveragePool (node, action, into, detail)
    rewrites: list[FoldNote] = field(default_factory=list)
    #: where each original value and node went (see value_map.py)
    value_map: ValueMap = field(default_factory=ValueMap)
    #: model inputs/outputs made low precision by --low-io (despite keep_io_types)
    low_io: list[str] = field(default_factory=list)
    #: low nodes whose kernel holds a sum in the low type: right only while the limit holds
    limits: list[LimitNote] = field(default_factory=list)
    #: initializers the input also listed as graph inputs, and which case applied (or None)
    initializer_inputs: InitializerInputs | None = None

    @property
    def casts_inserted(self) -> int:
        """Net Cast nodes added by the conversion (pre-existing casts are not counted)."""
        return self.casts_after - self.casts_before

    def count(self, precision: str) -> Counter[str]:
        """Float nodes of ``precision`` by op type; Casts and Constants are not counted (the one
        rule of ``reports.figures``, shared by every command and page)."""
        return Counter(n.op_type for n in self.counted(precision))

    def counted(self, precision: str) -> Iterator[NodeDecision]:
        """Float nodes of ``precision`` as every figure counts them (no Cast, no Constant)."""
        return (
            n
            for n in self.nodes
            if n.precision == precision
            and not (n.op_type in ("Cast", "Constant") and n.domain in ("", "ai.onnx"))
        )

    @property
    def nodes_low(self) -> int:
        return sum(self.count("low").values())

    @property
    def nodes_fp32(self) -> int:
        return sum(self.count("fp32").values())

    def decision(self, name: str) -> NodeDecision:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def to_dict(self) -> dict:
        data = self.versioned(asdict(self))
        data["value_map"] = self.value_map.to_dict()
        data["casts_inserted"] = self.casts_inserted
        data["nodes_low"] = self.nodes_low
        data["nodes_fp32"] = self.nodes_fp32
        return data

    def summary(self) -> str:
        """A few lines for the terminal."""
        low_name = self.dtype.upper()
        if self.already_converted:
            return f"already converted to {low_name} by amp-convert: nothing to do"
        lines = [
            f"level {self.level}, {low_name}, I/O types "
            + ("kept FP32" if self.keep_io_types else f"{low_name}")
            + (f" except {len(self.low_io)} {low_name} (--low-io)" if self.low_io else "")
            + (f", target {self.target}" if self.target else ""),
            f"nodes {low_name}: {self.nodes_low}  " + _top(self.count("low")),
            f"nodes FP32: {self.nodes_fp32}  " + _top(self.count("fp32")),
            *self._fp32_why(),
            f"casts inserted: {cast_change(self.casts_before, self.casts_after)}",
            f"initializers converted: {self.initializers_converted}, "
            f"kept FP32: {self.initializers_kept}",
        ]
        if self.weight_bytes_before:
            lines.append(
                f"weights: {bytes_text(self.weight_bytes_before)} -> "
                f"{bytes_text(self.weight_bytes_after)} (initializers and Constant tensors)"
            )
        if self.traffic.get("original"):
            lines.append(self._traffic_line())
        if self.folds:
            actions = Counter(f.action for f in self.folds)
            lines.append(
                "BatchNormalization done offline: "
                + ", ".join(f"{n} {action}" for action, n in sorted(actions.items()))
            )
        if self.rewrites:
            kinds = Counter(f"{f.action} {f.into}".strip() for f in self.rewrites)
            lines.append("rewritten: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
        if self.size_before and self.size_after:  # not before the file is written (--validate)
            before, after = _sizes(self.size_before, self.size_after)
            lines.append(f"size: {before} -> {after} in {self.seconds:.2f} s")
        if self.initializer_inputs is not None and self.initializer_inputs.case != "constants":
            lines.append(f"note: {self.initializer_inputs.text()}")
        for note in self.tensors:
            if note.action != "converted":
                lines.append(f"note: {note.name}: {note.action} ({note.detail})")
        lines.extend(f"kernel limit: {note.text()}" for note in self.limits)
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)

    def fp32_causes(self) -> Counter[str]:
        """FP32 float nodes (as `count` counts them) by the cause that kept them FP32."""
        return Counter(fp32_cause(n) for n in self.counted("fp32"))

    def _fp32_why(self) -> list[str]:
        causes = self.fp32_causes()
        if not causes:
            return []
        items = causes.most_common()
        text = ", ".join(f"{n} {cause}" for cause, n in items[:3])
        if len(items) > 3:
            text += f", +{sum(n for _, n in items[3:])} for {len(items) - 3} other reasons"
        return [f"  FP32 because: {text}"]

    def _traffic_line(self) -> str:
        t = self.traffic
        original, result, all_low = _sizes(t["original"], t["result"], t["all_low"])
        dims = ", ".join(f"{k}={v}" for k, v in self.traffic_dims.items()) or "all static"
        guessed = (
            f"; {self.traffic_estimated} value sizes estimated from neighbours"
            if self.traffic_estimated
            else ""
        )
        return (
            f"traffic per inference: {original} → {result} (all-low {all_low}); "
            f"1.00 → {t['result'] / t['original']:.2f} (all-low {t['all_low'] / t['original']:.2f})"
            f"; estimated for dims {dims}{guessed}"
        )


#: the cause a report names for an FP32 node, by the kind of the reason that decided it
_CAUSES = {
    "deny_reach": "follow a deny op (O2)",
    "neighbour": "next to an FP32 neighbour",
    "placement": "placed FP32 (fewer bytes moved)",
    "schema": "the schema excludes the low type",
    "target": "no low-precision kernel on the target",
    "range": "weights beyond the low type's range",
    "norm_statistics": "statistics of a hand-written norm",
    "user": "kept FP32 by the user",
    "qdq": "next to an FP32 Q/DQ node",
    "custom_op": "no schema for the op",
    "control_flow": "control-flow boundary",
}


def fp32_cause(node: NodeDecision) -> str:
    """Why an FP32 node is FP32, in a few words: the last reason a step added (a propagation or
    a placement), else the first (its list, rule, schema or target)."""
    for reason in reversed(node.reasons):
        cause = _CAUSES.get(reason.kind.value)
        if cause is not None:
            return cause
    first = node.reasons[0] if node.reasons else None
    if first is None:
        return "unknown"
    if first.kind.value in ("list", "rule"):
        return f"{first.source} ({node.op_type}: {first.detail.split(';')[0]})"
    return first.source or first.kind.value


def _top(counter: Counter[str], limit: int = 8) -> str:
    if not counter:
        return ""
    items = counter.most_common()
    text = ", ".join(f"{op} {n}" for op, n in items[:limit])
    if len(items) > limit:
        text += f", +{len(items) - limit} more op types"
    return f"({text})"


def _sizes(*sizes: int) -> list[str]:
    """Sizes in one unit (the one that suits the largest), e.g. ['1.20 GB', '0.60 GB']."""
    top = max(sizes)
    unit, scale = next(
        (u, s) for u, s in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("B", 1)) if top >= s or s == 1
    )
    return [f"{n / scale:.2f} {unit}" for n in sizes]
