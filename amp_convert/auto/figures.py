"""The figures of an AutoReport: low share of nodes and weights, and the per-node trace.

Precision comes from the converter's value map, per node, as a value: a node folded away (a
BatchNormalization merged into its Conv) is shown as folded, with where it went, not as FP32.
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx_ir as ir

from amp_convert.auto.graph import GraphFacts
from amp_convert.auto.localise import ValueStats
from amp_convert.auto.report import AutoReport, PinnedNode, TracePoint
from amp_convert.core.dtypes import FLOAT, LOW_TYPES
from amp_convert.core.precision import Precision
from amp_convert.reports.value_map import Fate, ValueMap


def node_label(value_map: ValueMap, name: str, pinned: bool = False) -> tuple[str, str]:
    """(precision label, folded-into) of an original node for the trace and the page."""
    fate = value_map.nodes.get(name)
    if fate is not None and fate.fate == Fate.FOLDED:
        return "folded", fate.into
    if fate is not None and fate.fate == Fate.REMOVED:
        return "removed", ""
    if pinned:
        return "fp32 (pinned)", ""
    p = value_map.precision(name)
    return (p.value if p in (Precision.LOW, Precision.FP32) else "n/a"), ""


def weight_bytes(report: AutoReport, cand: ir.Model) -> None:
    """Float weight bytes (in FP32 bytes) and the share stored low."""
    for graph in cand.graphs():
        for value in graph.initializers.values():
            t = value.const_value
            if t is None or t.dtype not in (FLOAT, *LOW_TYPES):
                continue
            if t.dtype in LOW_TYPES:
                report.low_weight_bytes += 2 * t.nbytes  # in FP32 bytes
                report.float_weight_bytes += 2 * t.nbytes
            else:
                report.float_weight_bytes += t.nbytes


def fill_figures(
    report: AutoReport,
    cand: ir.Model,
    value_map: ValueMap,
    facts: GraphFacts,
    ref_max: Mapping[str, float],
    first: Mapping[str, ValueStats],
    final: Mapping[str, ValueStats],
    pinned: Mapping[str, PinnedNode],
) -> None:
    """Node and weight shares, and one trace point per float node (body nodes after theirs)."""
    precisions = [value_map.precision(n) for n in value_map.nodes]
    report.low_nodes = sum(p == Precision.LOW for p in precisions)
    report.float_nodes = report.low_nodes + sum(p == Precision.FP32 for p in precisions)
    weight_bytes(report, cand)
    for node in facts.nodes:
        floats = [v for v in node.outputs if v in ref_max or v in first]
        if not floats:
            continue
        label, into = node_label(value_map, node.name, node.name in pinned)
        compared = [v for v in floats if v in first]
        report.trace.append(
            TracePoint(
                node=node.name,
                op_type=node.op_type,
                max_abs=max(ref_max.get(v, 0.0) for v in floats),
                first_error=max((first[v].error for v in compared), default=None),
                final_error=max((final[v].error for v in compared if v in final), default=None),
                precision=label,
                folded_into=into,
            )
        )
        for inner in node.body_nodes:
            label, into = node_label(value_map, inner, inner in pinned)
            report.trace.append(
                TracePoint(
                    inner, facts.op_type(inner), 0.0, None, None, label,
                    folded_into=into, inside=node.name,
                )
            )  # fmt: skip
