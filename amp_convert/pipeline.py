"""Builds the pass list from the options and runs it over one ir.Model, in place.

The passes, in order, each in its own file under passes/ and handing its result to the next
explicitly (through the constructor of the pass that reads it):

    InferDtypesPass      every float value gets an element type
    MeasureTrafficPass   → original / all-low bytes per inference (for the report)
    FoldBatchNormPass    → records: inference BatchNormalization folded or decomposed in float64
    ClassifyPass         → classes: dict[Node, NodeInfo] (op lists, schema slots, user rules)
    AssignPrecisionPass  → plan: PrecisionPlan (reads classify.classes)
    RewritePass          applies assign.plan: retyped values, low weights, one Cast per value/type
    CleanupPass          folds redundant casts
  postcondition: verify (strict type check); a failure is a converter bug, never written
"""

from __future__ import annotations

import onnx_ir as ir

from amp_convert.errors import AmpConvertError, InputError, VerificationError
from amp_convert.onnx_checks import analyse
from amp_convert.op_lists import OpLists, apply_user_file, apply_user_ops, load_builtin
from amp_convert.options import ConvertOptions, Level
from amp_convert.passes.assign import AssignPrecisionPass
from amp_convert.passes.classify import ClassifyPass
from amp_convert.passes.cleanup import CleanupPass, count_casts
from amp_convert.passes.fold_bn import FoldBatchNormPass
from amp_convert.passes.infer_dtypes import InferDtypesPass
from amp_convert.passes.plan import PrecisionPlan
from amp_convert.passes.rewrite import RewritePass
from amp_convert.passes.verify import verify
from amp_convert.precision import NodeClass, UniqueNames
from amp_convert.report import ConversionReport, NodeDecision
from amp_convert.targets import uncovered_nodes
from amp_convert.traffic import ShapeBook, cast_notes, model_traffic

STAMP_KEY = "amp_convert"


class MeasureTrafficPass(ir.passes.InPlacePass):
    """Estimate the original's bytes per inference, and the same graph all in low precision."""

    def __init__(self, shapes: ShapeBook, low: ir.DataType, keep_io_types: bool) -> None:
        super().__init__()
        self.shapes = shapes
        self.low = low
        self.keep_io_types = keep_io_types
        self.original = self.all_low = 0

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.original = model_traffic(model, self.shapes)
        self.all_low = model_traffic(model, self.shapes, self.low, self.keep_io_types)
        return ir.passes.PassResult(model, modified=False)


class ConversionPipeline(ir.passes.Sequential):
    """The conversion passes; verification is the sequence's postcondition."""

    def __init__(self, *passes: ir.passes.PassBase, original_passed_strict: bool) -> None:
        super().__init__(*passes)
        self.original_passed_strict = original_passed_strict

    def ensures(self, model: ir.Model) -> None:
        verify(model, self.original_passed_strict)


def promote_constant_inputs(model: ir.Model) -> int:
    """IR < 4 lists every initializer as a graph input; ONNX Runtime cannot override them there
    (Graph::CanOverrideInitializer is IR >= 4), so they are constants. Make them plain
    initializers so they fold, convert and store low like any weight; how many moved."""
    if model.ir_version is None or model.ir_version >= 4:
        return 0
    graph = model.graph
    keep = [v for v in graph.inputs if not v.is_initializer()]
    moved = len(graph.inputs) - len(keep)
    if moved:
        graph.inputs.clear()
        graph.inputs.extend(keep)
    model.ir_version = 4
    return moved


def build_lists(options: ConvertOptions) -> OpLists:
    """The built-in op lists with the user's file and --fp32-ops / --fp16-ops applied."""
    lists = load_builtin()
    if options.op_lists is not None:
        lists = apply_user_file(lists, options.op_lists)
    lists = apply_user_ops(lists, "deny", options.fp32_ops, "user: --fp32-ops")
    return apply_user_ops(lists, "allow", options.fp16_ops, "user: --fp16-ops")


def _decisions(model: ir.Model, plan: PrecisionPlan) -> list[NodeDecision]:
    out = []
    for i, node in enumerate(model.graph.all_nodes()):
        info = plan.info.get(node)
        if info is None:  # a Cast we inserted
            continue
        precision = "n/a" if info.op_class == NodeClass.NONE else info.precision.value
        out.append(
            NodeDecision(
                name=node.name or f"{node.op_type}_{i}",
                op_type=node.op_type,
                domain=node.domain,
                graph=node.graph.name if node.graph is not None and node.graph.name else "",
                op_class=info.op_class.value,
                precision=precision,
                reason=info.reason,
            )
        )
    return out


def _unknown_user_ops(options: ConvertOptions, model: ir.Model) -> list[str]:
    """--fp32-ops / --fp16-ops names that are neither ONNX ops nor in the model: likely typos."""
    import onnx.defs

    present = {node.op_type for node in model.graph.all_nodes()}
    warnings = []
    for flag, ops in (("--fp32-ops", options.fp32_ops), ("--fp16-ops", options.fp16_ops)):
        for op in ops:
            if ":" in op or op in present:
                continue
            if not onnx.defs.has(op):
                warnings.append(f"{flag} {op}: no ONNX op of that name (misspelt?); ignored")
    return warnings


def run(model: ir.Model, options: ConvertOptions) -> ConversionReport:
    """Convert `model` in place; the report says what happened."""
    report = ConversionReport(
        level=options.level.value, dtype=options.dtype, keep_io_types=options.keep_io_types
    )
    report.casts_before = report.casts_after = count_casts(model)
    lists = build_lists(options)  # validates op list files even at O0
    report.warnings.extend(_unknown_user_ops(options, model))
    if options.level == Level.O0:
        report.warnings.append("level O0: the model is re-saved unchanged")
        return report
    if model.metadata_props.get(STAMP_KEY) == options.stamp():
        report.already_converted = True
        return report
    promoted = promote_constant_inputs(model)
    if promoted:
        report.warnings.append(
            f"IR version < 4: {promoted} initializers listed as graph inputs are constants (as "
            "ONNX Runtime treats them); they left the inputs and the IR version is now 4"
        )
    names = UniqueNames.of_model(model)
    strict_error, inferred_types = analyse(model)
    original_strict = strict_error is None
    if not original_strict:
        report.warnings.append(
            "the input model fails ONNX's strict type inference; only amp-convert's own type "
            "check verified the result"
        )
    shapes = ShapeBook(inferred_types, options.dim_values)
    measure = MeasureTrafficPass(shapes, options.low_dtype, options.keep_io_types)
    fold = FoldBatchNormPass(options.low_dtype, inferred_types, names)
    classify = ClassifyPass(options, lists)
    assign = AssignPrecisionPass(options, classify, shapes)
    rewrite = RewritePass(options.cast_optional_params, assign, names)
    pipeline = ConversionPipeline(
        InferDtypesPass(inferred_types),
        measure,
        fold,
        classify,
        assign,
        rewrite,
        CleanupPass(),
        original_passed_strict=original_strict,
    )
    try:
        try:
            pipeline(model)
        except ir.passes.PostconditionError as e:
            if isinstance(e.__cause__, AmpConvertError):
                raise e.__cause__ from None
            raise
    except VerificationError as e:
        if original_strict:
            raise
        # the input was not type-correct to begin with: say so rather than blame the converter
        raise InputError(
            f"the input model fails ONNX's type inference ({strict_error}), and its converted "
            f"form cannot be verified: {str(e).removeprefix('converter bug, model not written: ')}"
        ) from None
    plan = assign.plan
    assert plan is not None
    report.nodes = _decisions(model, plan)
    report.tensors.extend(plan.tensor_notes)
    report.initializers_converted = rewrite.stats.initializers_converted
    report.initializers_kept = rewrite.stats.initializers_kept
    report.folds = fold.records
    if classify.table is not None:
        table = classify.table
        report.target = f"{table.name} (kernel table from ONNX Runtime {table.ort_version})"
        uncovered = uncovered_nodes(model, table)
        if uncovered:  # nodes that were low precision already, or a table gap: say so
            report.warnings.append(
                f"{len(uncovered)} low-precision node(s) without a {table.name} kernel in their "
                f"types, e.g. {uncovered[0]}"
            )
    else:
        report.target = "none (ONNX schemas only)"
    report.casts_after = count_casts(model)
    report.casts = cast_notes(model, shapes)
    report.traffic = {
        "original": measure.original,
        "result": model_traffic(model, shapes),
        "all_low": measure.all_low,
    }
    model.metadata_props[STAMP_KEY] = options.stamp()
    return report
