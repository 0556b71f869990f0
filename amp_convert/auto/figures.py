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
from amp_convert.core.precision import Precision
from amp_convert.reports.figures import count_nodes, ir_nodes, ir_weights
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
    """Node and weight shares (``reports.figures``: the rules every command and page counts by,
    on the model as written), and one trace point per float node (body nodes after theirs)."""
    counts = count_nodes(ir_nodes(cand))
    report.low_nodes, report.float_nodes = counts.low, counts.total
    report.by_op = dict(counts.by_op)
    weights = ir_weights(cand)
    report.float_weight_bytes = weights.float_as_fp32
    report.low_weight_bytes = 2 * weights.low
    report.weight_bytes_after = weights.total
    absorbed: dict[str, list[str]] = {}  # a BatchNormalization's outputs: its Conv's error
    for node in facts.nodes:
        fate = value_map.nodes.get(node.name)
        if fate is not None and fate.fate == Fate.FOLDED and fate.into:
            absorbed.setdefault(fate.into, []).extend(node.outputs)
    for node in facts.nodes:
        floats = [v for v in node.outputs if v in ref_max or v in first]
        if not floats:
            continue
        label, into = node_label(value_map, node.name, node.name in pinned)
        if label == "folded":  # its work is in the node it was folded into: drawn there
            compared: list[str] = []
        else:
            compared = [v for v in (*floats, *absorbed.get(node.name, [])) if v in first]
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
                    inner,
                    facts.op_type(inner),
                    0.0,
                    None,
                    None,
                    label,
                    folded_into=into,
                    inside=node.name,
                )
            )
