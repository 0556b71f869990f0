"""Builds the pass list from the options and runs it over one ir.Model, in place."""

from __future__ import annotations

import json

import onnx_ir as ir

from amp_convert import __version__
from amp_convert.op_lists import apply_user_file, apply_user_ops, load_builtin
from amp_convert.options import ConvertOptions, Level
from amp_convert.passes.assign import AssignPrecisionPass
from amp_convert.passes.classify import ClassifyPass
from amp_convert.passes.cleanup import CleanupPass, count_casts
from amp_convert.passes.infer_dtypes import InferDtypesPass, analyse
from amp_convert.passes.rewrite import RewritePass
from amp_convert.passes.state import ConversionState
from amp_convert.passes.verify import VerifyPass
from amp_convert.report import ConversionReport, NodeDecision

STAMP_KEY = "amp_convert"


def _stamp(options: ConvertOptions) -> str:
    return json.dumps(
        {
            "version": __version__,
            "level": options.level.value,
            "dtype": options.dtype,
            "keep_io_types": options.keep_io_types,
            "fp32_ops": list(options.fp32_ops),
            "fp16_ops": list(options.fp16_ops),
            "exclude_nodes": list(options.exclude_nodes),
            "cast_optional_params": options.cast_optional_params,
        },
        sort_keys=True,
    )


def _same_conversion(old: str | None, options: ConvertOptions) -> bool:
    if not old:
        return False
    try:
        previous = json.loads(old)
        current = json.loads(_stamp(options))
    except json.JSONDecodeError:
        return False
    previous.pop("version", None)
    current.pop("version", None)
    return previous == current


def _all_names(model: ir.Model) -> set[str]:
    names: set[str] = set()
    for graph in model.graphs():
        names.update(v.name for v in graph.inputs if v.name)
        names.update(v.name for v in graph.outputs if v.name)
        names.update(graph.initializers.keys())
    for node in model.graph.all_nodes():
        if node.name:
            names.add(node.name)
        names.update(v.name for v in node.outputs if v.name)
    return names


def _decisions(model: ir.Model, state: ConversionState) -> list[NodeDecision]:
    out = []
    for i, node in enumerate(model.graph.all_nodes()):
        info = state.info.get(node)
        if info is None:  # a Cast we inserted
            continue
        precision = "n/a" if info.op_class == "none" else info.precision
        out.append(
            NodeDecision(
                name=node.name or f"{node.op_type}_{i}",
                op_type=node.op_type,
                domain=node.domain,
                graph=node.graph.name if node.graph is not None and node.graph.name else "",
                op_class=info.op_class,
                precision=precision,
                reason=info.reason,
            )
        )
    return out


def build_state(options: ConvertOptions, report: ConversionReport) -> ConversionState:
    lists = load_builtin()
    if options.op_lists is not None:
        lists = apply_user_file(lists, options.op_lists)
    lists = apply_user_ops(lists, "deny", options.fp32_ops, "user: --fp32-ops")
    lists = apply_user_ops(lists, "allow", options.fp16_ops, "user: --fp16-ops")
    return ConversionState(options=options, lists=lists, report=report)


def run(model: ir.Model, options: ConvertOptions) -> ConversionReport:
    """Convert `model` in place; the report says what happened."""
    report = ConversionReport(
        level=options.level.value, dtype=options.dtype, keep_io_types=options.keep_io_types
    )
    report.casts_before = report.casts_after = count_casts(model)
    state = build_state(options, report)  # validates op list files even at O0
    if options.level == Level.O0:
        report.warnings.append("level O0: the model is re-saved unchanged")
        return report
    if _same_conversion(model.metadata_props.get(STAMP_KEY), options):
        report.already_converted = True
        return report
    state.names = _all_names(model)
    strict_error, inferred_types = analyse(model)
    original_strict = strict_error is None
    if not original_strict:
        report.warnings.append(
            "the input model fails ONNX's strict type inference; only amp-convert's own type "
            "check verified the result"
        )
    for pass_ in (
        InferDtypesPass(state, inferred_types),
        ClassifyPass(state),
        AssignPrecisionPass(state),
        RewritePass(state),
        CleanupPass(state),
        VerifyPass(state, original_strict),
    ):
        pass_(model)
    report.nodes = _decisions(model, state)
    report.casts_after = count_casts(model)
    model.metadata_props[STAMP_KEY] = _stamp(options)
    return report
