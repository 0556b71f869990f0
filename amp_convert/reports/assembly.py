"""The ConversionReport assembled from what the conversion's steps returned, and the converted
model's metadata (stamp, value map, FP32 reasons, graph digest).

Why a function of its own: the steps return typed results (pipeline.py) and the report is their
reading for users; keeping that reading here leaves pipeline.run a list of steps. The step
results are read through the small protocols below (only what the report needs of each), so
this module depends on no step: reports sit below them in the layers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import onnx_ir as ir

from amp_convert.core import domains, walk
from amp_convert.core.dtypes import BF16, LowType
from amp_convert.core.graph_digest import DIGEST_KEY, graph_digest
from amp_convert.core.precision import NodeClass, Precision
from amp_convert.core.reasons import Reason, render
from amp_convert.reports.conversion import (
    CastNote,
    ConversionReport,
    FoldNote,
    InitializerInputs,
    LimitNote,
    NodeDecision,
    TensorNote,
)
from amp_convert.reports.figures import ir_weights
from amp_convert.reports.value_map import (
    METADATA_KEY,
    REASONS_KEY,
    Snapshot,
    ValueMap,
    ValueRecord,
    reasons_to_metadata,
)
from amp_convert.reports.value_map import build as build_value_map
from amp_convert.targets import Target, uncovered_nodes

#: the metadata key of the already-converted stamp (the options that made the model)
STAMP_KEY = "amp_convert"


class PlacedFacts(Protocol):
    @property
    def op_class(self) -> NodeClass: ...
    @property
    def precision(self) -> Precision: ...
    @property
    def reasons(self) -> Sequence[Reason]: ...


class PlanFacts(Protocol):
    """What the report reads of assign's PrecisionPlan."""

    @property
    def tensor_notes(self) -> Sequence[TensorNote]: ...
    def placement(self, node: ir.Node) -> PlacedFacts | None: ...


class RewriteFacts(Protocol):
    """What the report reads of rewrite's RewriteResult."""

    @property
    def replaced(self) -> Mapping[ir.Node, ir.Node]: ...
    @property
    def saturated(self) -> Sequence[TensorNote]: ...
    @property
    def initializers_converted(self) -> int: ...
    @property
    def initializers_kept(self) -> int: ...


class UpgradeFacts(Protocol):
    """What the report reads of the opset upgrade's result."""

    @property
    def upgraded(self) -> bool: ...
    @property
    def from_opset(self) -> int: ...
    @property
    def to_opset(self) -> int: ...
    @property
    def from_ir(self) -> int: ...
    @property
    def to_ir(self) -> int: ...
    @property
    def edits(self) -> Sequence[str]: ...


class QdqFacts(Protocol):
    """What the report reads of the QDQ groups step."""

    @property
    def pinned(self) -> int: ...
    @property
    def below_19(self) -> bool: ...
    @property
    def opset(self) -> int: ...
    @property
    def cause(self) -> str: ...


class TrafficFacts(Protocol):
    """What the report reads of the result's measure."""

    @property
    def original(self) -> int: ...
    @property
    def result(self) -> int: ...
    @property
    def all_low(self) -> int: ...
    @property
    def casts(self) -> Sequence[CastNote]: ...
    @property
    def excess(self) -> str | None: ...
    @property
    def dims(self) -> Mapping[str, int]: ...
    @property
    def estimated(self) -> int: ...


@dataclass(frozen=True)
class Outcome:
    """What the steps of one conversion hand the report (pipeline.run fills it from their
    results, one field per result or fact)."""

    snapshot: Snapshot  # the original's values and nodes: the value map's keys
    promoted: int  # prepare: initializers listed as graph inputs that left them
    initializer_inputs: InitializerInputs | None  # prepare: which case, how many (or None)
    upgraded: UpgradeFacts | None
    strict_error: str | None  # analyse
    has_float: bool
    folds: Sequence[FoldNote]
    norms: Sequence[FoldNote]  # hand norms folded or pinned
    pools: Sequence[FoldNote]  # ReduceMeans run as GlobalAveragePool
    records: Sequence[ValueRecord]  # where each value went: folds, norms, pools, rewrite, cleanup
    groups: QdqFacts
    opset_upgrade: bool  # whether --opset-upgrade was asked
    plan: PlanFacts
    rewritten: RewriteFacts
    limits: Sequence[LimitNote]
    target: Target
    target_option: str  # --target as given (the warnings name it)
    low: LowType
    traffic: TrafficFacts
    casts_after: int
    stamp: str  # the options' stamp (ConvertOptions.stamp)


def assemble(report: ConversionReport, model: ir.Model, outcome: Outcome) -> ConversionReport:
    """Fill `report` from the outcome and write the converted model's metadata."""
    report.initializer_inputs = outcome.initializer_inputs
    report.warnings.extend(_warnings(outcome))
    report.nodes = decisions(model, outcome.plan, outcome.rewritten)
    report.value_map = _value_map(outcome, model)
    report.tensors.extend((*outcome.plan.tensor_notes, *outcome.rewritten.saturated))
    report.initializers_converted = outcome.rewritten.initializers_converted
    report.initializers_kept = outcome.rewritten.initializers_kept
    report.folds = list(outcome.folds)
    report.rewrites = [*outcome.norms, *outcome.pools, *_upgrade_notes(outcome.upgraded)]
    report.warnings.extend(_qdq_warnings(outcome.groups, outcome.opset_upgrade))
    report.limits = list(outcome.limits)
    opset = domains.opset_version(model.opset_imports)
    report.warnings.extend(_low_type_warnings(report, opset, outcome))
    report.warnings.extend(_runtime_only_warnings(opset, outcome.norms))
    _describe_target(report, model, outcome.target)
    report.casts_after = outcome.casts_after
    report.weight_bytes_after = ir_weights(model).total  # Constant-held weights too
    traffic = outcome.traffic
    report.casts = list(traffic.casts)
    report.traffic = {
        "original": traffic.original,
        "result": traffic.result,
        "all_low": traffic.all_low,
    }
    if traffic.excess is not None:
        report.warnings.append(traffic.excess)
    report.traffic_dims = dict(traffic.dims)
    report.traffic_estimated = traffic.estimated
    model.metadata_props[STAMP_KEY] = outcome.stamp
    model.metadata_props[METADATA_KEY] = report.value_map.to_metadata()
    fp32 = {n.name: n.reason for n in report.nodes if n.precision == Precision.FP32.value}
    model.metadata_props[REASONS_KEY] = reasons_to_metadata(fp32)  # `validate --html` shows them
    model.metadata_props[DIGEST_KEY] = graph_digest(model)  # "already converted" only if unedited
    return report


def _warnings(outcome: Outcome) -> list[str]:
    """What the steps before the report found that the user must read, in step order."""
    out = []
    if not outcome.has_float:  # typed by infer dtypes: no float data path at all
        out.append(
            "nothing to convert: no value of the model is a float; its graph is kept as it is"
        )
    listed = outcome.initializer_inputs
    if listed is not None and listed.case == "constants":
        out.append(
            f"IR version < 4: {outcome.promoted} initializers listed as graph inputs are "
            "constants (as ONNX Runtime treats them); they left the inputs and the IR version is "
            "now 4"
        )
    if outcome.strict_error is not None:
        out.append(
            "the input model fails ONNX's strict type inference; only amp-convert's own type "
            "check verified the result"
        )
    return out


def decisions(model: ir.Model, plan: PlanFacts, rewritten: RewriteFacts) -> list[NodeDecision]:
    """One NodeDecision per node of the result the plan decided (inserted Casts are not)."""
    out = []
    for i, node in enumerate(walk.all_nodes(model.graph)):
        placement = plan.placement(rewritten.replaced.get(node, node))
        if placement is None:  # a Cast we inserted
            continue
        op_class = placement.op_class
        precision = "n/a" if op_class == NodeClass.NONE else placement.precision.value
        out.append(
            NodeDecision(
                name=node.name or f"{node.op_type}_{i}",
                op_type=node.op_type,
                domain=node.domain,
                graph=node.graph.name if node.graph is not None and node.graph.name else "",
                op_class=op_class.value,
                precision=precision,
                reason=render(placement.reasons),
                reasons=tuple(placement.reasons),
            )
        )
    return out


def _value_map(outcome: Outcome, model: ir.Model) -> ValueMap:
    """Where each original value and node went, from the records the steps returned."""
    plan, replaced = outcome.plan, outcome.rewritten.replaced

    def precision(node: ir.Node) -> Precision | None:
        placement = plan.placement(replaced.get(node, node))
        if placement is None or placement.op_class == NodeClass.NONE:
            return None
        return placement.precision

    return build_value_map(outcome.snapshot, tuple(outcome.records), model, precision)


def _low_type_warnings(report: ConversionReport, opset: int, outcome: Outcome) -> list[str]:
    """A BF16 (or FP16) request that leaves most nodes FP32 where the model or the target sets
    the limit (a schema at this opset, a missing kernel): why, and what would help. Nodes FP32 by
    the level's own rules are the summary's "FP32 because" line, not a warning."""
    low, fp32 = report.nodes_low, report.nodes_fp32
    if fp32 <= low:
        return []
    causes = report.fp32_causes()
    cause, count = causes.most_common(1)[0]
    name = outcome.low.name
    line = (
        f"{fp32} of {low + fp32} float nodes stay FP32 under {name}; the most because "
        f"{cause} ({count})"
    )
    helps = []
    schema_ops = sorted(
        {
            n.op_type
            for n in report.counted("fp32")
            if n.reasons and n.reasons[0].kind.value == "schema"
        }
    )
    if schema_ops:
        if outcome.low == BF16 and opset < 22:
            helps.append(
                f"the model is at opset {opset}: {', '.join(schema_ops[:4])} take bfloat16 "
                "only from opset 22 (re-export at opset >= 22), or use --dtype fp16"
            )
        else:
            helps.append(
                f"their schemas exclude {name} at opset {opset}: {', '.join(schema_ops[:4])}"
            )
    if "no low-precision kernel on the target" in causes:
        helps.append(
            f"--target {outcome.target_option} has no {name} kernel for some ops; "
            "--target none follows the ONNX schemas only"
        )
    return [f"{line}: {'; '.join(helps)}"] if helps else []


def _runtime_only_warnings(opset: int, notes: Sequence[FoldNote]) -> list[str]:
    """Hand norms folded into ONNX Runtime's own ai.onnx ops (LayerNormalization below opset 17,
    SimplifiedLayerNormalization): the result now loads in ONNX Runtime only."""
    runtime = [n.into.removeprefix("run as ") for n in notes if n.into.startswith("run as ")]
    only = [op for op in runtime if op == "SimplifiedLayerNormalization" or opset < 17]
    if not only:
        return []
    kinds = ", ".join(f"{only.count(op)} {op}" for op in sorted(set(only)))
    return [
        f"the result needs ONNX Runtime: hand-written norms now run as its own ops ({kinds} at "
        f"opset {opset}), which onnx.checker and other runtimes do not know; --target none "
        "keeps a portable model (the norms' statistics then stay FP32 instead)"
    ]


def _upgrade_notes(upgraded: UpgradeFacts | None) -> list[FoldNote]:
    if upgraded is None or not upgraded.upgraded:
        return []
    detail = (
        f"QuantizeLinear/DequantizeLinear take low-precision scales; IR version "
        f"{upgraded.from_ir} -> {upgraded.to_ir}"
    )
    notes = [
        FoldNote("model", f"opset {upgraded.from_opset}", f"to opset {upgraded.to_opset}", detail)
    ]
    for edit in upgraded.edits:
        notes.append(FoldNote(edit.split(":")[0], "opset-19 form", "same meaning", edit))
    return notes


def _qdq_warnings(groups: QdqFacts, opset_upgrade: bool) -> list[str]:
    """Why ops between Q/DQ nodes kept FP32, and how to lower them."""
    if not groups.pinned:
        return []
    line = (
        f"{groups.pinned} op(s) next to FP32 QuantizeLinear/DequantizeLinear nodes keep FP32 (a "
        "Cast between them would split the DQ -> op -> Q groups ORT and TensorRT fuse)"
    )
    if groups.below_19 and not opset_upgrade:
        line += (
            f": below opset 19 a Q/DQ scale must be FP32 (the model is at opset "
            f"{groups.opset}); --opset-upgrade moves it to opset 19, where the groups go low"
        )
    elif groups.cause:
        line += f"; a Q/DQ keeps FP32 for: {groups.cause}"
    return [line]


def _describe_target(report: ConversionReport, model: ir.Model, target: Target) -> None:
    report.target = target.describe()
    if not target.checks_kernels:
        return
    table = target.kernels
    uncovered = uncovered_nodes(model, table)
    if uncovered:  # nodes that were low precision already, or a table gap: say so
        report.warnings.append(
            f"{len(uncovered)} low-precision node(s) without a {table.name} kernel in their "
            f"types, e.g. {uncovered[0]}"
        )
