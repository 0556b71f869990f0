"""The conversion of one ir.Model, in place: a numbered sequence of steps, each a function.

Every step takes what it reads as arguments and returns one frozen result (a StepResult,
core/steps.py) that later steps receive explicitly; no step reads another step's object, and
every graph edit happens inside a step. Each runs through one StepRunner, which numbers it, logs
it with its result and time at DEBUG (`amp-convert -v`), names it in an escaping exception
("in step 8: classify"), and rebuilds the shape cache after a step that may change shapes; each
step declares what it edits (Edits: nothing, types, nodes keeping every shape, or shapes).

    1. prepare         passes/prepare.py       -> Prepared (initializer inputs, constants, names)
   1b. opset upgrade   passes/opset_upgrade.py -> UpgradeResult (--opset-upgrade, QDQ models)
    2. analyse         passes/analyse.py       -> Analysis (strict check error, inferred types)
    3. infer dtypes    passes/infer_dtypes.py  -> DtypeResult
       (then the input's ORT ops checked, files/contrib_checks.py: InputError, its fault)
    4. measure         passes/measure.py       -> OriginalTraffic (bytes per inference, before)
    5. fold BN         passes/fold_bn.py       -> FoldResult
    6. hand norms      passes/hand_norms.py    -> NormsResult (folded, or statistics to pin)
    7. global pool     passes/global_pool.py   -> PoolResult (spatial ReduceMean, if the target
                                                   wants Rewrite.GLOBAL_POOL)
    8. classify        passes/classify.py      -> Classes (a frozen ClassInfo per node)
    9. pin statistics  passes/hand_norms.py    -> Classes (unfolded norms' statistics FP32)
   9b. QDQ groups      passes/qdq.py           -> QdqGroups (ops next to an FP32 Q/DQ pinned)
   10. assign          passes/assign.py        -> PrecisionPlan (a frozen Placement per node)
   11. rewrite         passes/rewrite.py       -> RewriteResult
   12. cleanup         passes/cleanup.py       -> CleanupResult
   13. verify          passes/verify.py        -> Verified (or VerificationError: never written)
   14. kernel limits   passes/kernel_limits.py -> LimitNotes (low nodes that rely on a held sum)
   15. measure result  passes/measure.py       -> ResultTraffic (bytes per inference, Casts)
       report          reports/assembly.py     -> ConversionReport (and the ValueMap, built from
                                                   the records of steps 5, 6, 7, 11 and 12)

`StepRunner.run` passes a step its arguments typed (ParamSpec: mypy checks them against the
step's signature).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import onnx_ir as ir

from amp_convert import schema
from amp_convert.core import domains, walk
from amp_convert.core.graph_digest import DIGEST_KEY, graph_digest
from amp_convert.core.precision import UniqueNames
from amp_convert.core.qdq_rules import has_qdq
from amp_convert.core.steps import Edits, StepRunner
from amp_convert.cost.shapes import ShapeBook
from amp_convert.errors import InputError, VerificationError
from amp_convert.files.contrib_checks import check_runtime_ops
from amp_convert.files.onnx_checks import serialised_once
from amp_convert.op_lists import (
    OpLists,
    apply_user_file,
    apply_user_ops,
    load_builtin,
    op_key,
    unmatched_user_ops,
)
from amp_convert.options.checks import check_against_model
from amp_convert.options.convert import ConvertOptions
from amp_convert.options.low_io import resolve_low_io
from amp_convert.passes.analyse import analyse
from amp_convert.passes.assign import assign
from amp_convert.passes.classify import classify
from amp_convert.passes.cleanup import cleanup, count_casts
from amp_convert.passes.fold_bn import fold_batch_norm
from amp_convert.passes.global_pool import run_as_global_pool
from amp_convert.passes.hand_norms import pin_norm_statistics, rewrite_hand_norms
from amp_convert.passes.infer_dtypes import infer_dtypes
from amp_convert.passes.kernel_limits import kernel_limits
from amp_convert.passes.measure import measure_original, measure_result
from amp_convert.passes.opset_upgrade import UpgradeResult, upgrade_opset
from amp_convert.passes.prepare import prepare
from amp_convert.passes.qdq import keep_qdq_groups
from amp_convert.passes.rewrite import rewrite
from amp_convert.passes.verify import Verified, verify
from amp_convert.reports.assembly import STAMP_KEY, Outcome, assemble
from amp_convert.reports.conversion import ConversionReport
from amp_convert.reports.figures import ir_weights
from amp_convert.reports.value_map import Snapshot
from amp_convert.targets import build_target

__all__ = ["STAMP_KEY", "build_lists", "checked_lists", "run"]

log = logging.getLogger(__name__)


def run(model: ir.Model, options: ConvertOptions) -> ConversionReport:
    """Convert `model` in place; the report says what happened."""
    report = ConversionReport(
        level=options.level.value, dtype=options.dtype, keep_io_types=options.keep_io_types
    )
    report.casts_before = report.casts_after = count_casts(model)
    report.weight_bytes_before = report.weight_bytes_after = ir_weights(model).total
    lists = checked_lists(model, options)  # a misspelt name: an error at every entry point
    report.warnings.extend(_unknown_user_ops(options, model))
    if _nothing_to_do(model, options, report):
        return report
    target = build_target(options.target)  # the one Target every step that needs one asks
    low, keep_io = options.low_dtype, options.keep_io_types
    low_io, low_io_warnings = resolve_low_io(model, options.low_io_patterns)  # before any edit
    report.warnings.extend(low_io_warnings)
    if keep_io:
        report.low_io = sorted(low_io)

    snapshot = Snapshot.take(model)  # the original's values and nodes: the value map's keys
    steps = StepRunner(model, log)
    E = Edits
    prepared = steps.run(1, "prepare", E.NODES, prepare, model, options.keep_initializer_inputs)
    names = prepared.names
    upgraded = steps.run("1b", "opset upgrade", E.NODES, _upgrade, model, options, names)
    with serialised_once(model):  # analyse and the shape inference read one stripped copy
        analysis = steps.run(2, "analyse", E.NOTHING, analyse, model)
        report.warnings.extend(schema.unknown_warnings(model))
        shapes = ShapeBook(model, options.dim_values)  # sizes from the input dims (cost/shapes)

    def new_shapes() -> None:  # after a step that may change shapes (none today)
        nonlocal shapes
        shapes = ShapeBook(model, options.dim_values)

    steps.after_shapes_change.append(new_shapes)
    inferred = analysis.inferred
    steps.run(3, "infer dtypes", E.TYPES, infer_dtypes, model, inferred)
    check_runtime_ops(model)  # the input's ORT ops against ORT's schemas: its fault, not ours
    before = steps.run(
        4, "measure", E.NOTHING, measure_original, model, shapes, low, keep_io, low_io
    )
    folded = steps.run(5, "fold BN", E.NODES, fold_batch_norm, model, low, inferred, names)
    norms = steps.run(6, "hand norms", E.NODES, rewrite_hand_norms, model, names, inferred, target)
    pooled = steps.run(
        7, "global pool", E.NODES, run_as_global_pool, model, inferred, target, names
    )
    classes = steps.run(8, "classify", E.NOTHING, classify, model, options, lists, target)
    classes = steps.run(
        9, "pin statistics", E.NOTHING, pin_norm_statistics, classes, norms, options.level
    )
    groups = steps.run("9b", "QDQ groups", E.NOTHING, keep_qdq_groups, model, classes)
    classes = groups.classes
    plan = steps.run(10, "assign", E.NOTHING, assign, model, classes, shapes, options, low_io)
    has_float = _has_float(model)  # typed by step 3: is there a float data path at all?
    rewritten = steps.run(
        11,
        "rewrite",
        E.NODES,
        rewrite,
        model,
        plan,
        names,
        cast_optional_params=options.cast_optional_params,
    )
    cleaned = steps.run(12, "cleanup", E.NODES, cleanup, model)
    steps.run(13, "verify", E.NOTHING, _verify, model, analysis.strict_error)
    limits = steps.run(14, "kernel limits", E.NOTHING, kernel_limits, model, target, shapes)
    measured = steps.run(
        15, "measure result", E.NOTHING, measure_result, model, shapes, before, plan
    )
    outcome = Outcome(
        snapshot=snapshot,
        promoted=prepared.promoted,
        initializer_inputs=prepared.initializer_inputs,
        upgraded=upgraded,
        strict_error=analysis.strict_error,
        has_float=has_float,
        folds=folded.records,
        norms=norms.notes,
        pools=pooled.notes,
        records=(*folded.values, *norms.values, *pooled.values, *rewritten.values, *cleaned.values),
        groups=groups,
        opset_upgrade=options.opset_upgrade,
        plan=plan,
        rewritten=rewritten,
        limits=limits.notes,
        target=target,
        target_option=options.target,
        low=options.low,
        traffic=measured,
        casts_after=count_casts(model),
        stamp=options.stamp(),
    )
    return assemble(report, model, outcome)


def _upgrade(model: ir.Model, options: ConvertOptions, names: UniqueNames) -> UpgradeResult | None:
    """--opset-upgrade on a model with Q/DQ nodes (the only models it helps); else nothing."""
    if not options.opset_upgrade or not has_qdq(model):
        return None
    return upgrade_opset(model, names)


def _nothing_to_do(model: ir.Model, options: ConvertOptions, report: ConversionReport) -> bool:
    """O0 (re-save unchanged), or a model this very conversion already produced."""
    if options.level.keeps_model:
        report.warnings.append("level O0: the model is re-saved unchanged")
        return True
    if domains.imported_opset(model.opset_imports) is None:
        imported = ", ".join(sorted(d or "ai.onnx" for d in model.opset_imports)) or "none"
        report.warnings.append(
            f"nothing to convert: the model imports no ai.onnx opset (only {imported}); its ops "
            "are kept as they are and the model is re-saved unchanged"
        )
        return True
    if model.metadata_props.get(STAMP_KEY) == options.stamp():
        if not _holds_low(model, options.low_dtype):
            report.warnings.append(
                f"the model carries amp-convert's stamp for these options but holds no "
                f"{options.dtype.upper()} value: a stale stamp, ignored (converted again)"
            )
            return False
        digest = model.metadata_props.get(DIGEST_KEY)
        if digest is not None and digest != graph_digest(model):
            report.warnings.append(
                "the model carries amp-convert's stamp for these options but its graph changed "
                "since it was written (nodes, inputs, outputs or weights differ): converted again"
            )
            return False
        report.already_converted = True
        return True
    return False


def _holds_low(model: ir.Model, low: ir.DataType) -> bool:
    """Whether any value or weight of the model has the low type (a real converted model)."""
    return _any_dtype(model, lambda dtype: dtype == low)


def _has_float(model: ir.Model) -> bool:
    """Whether any value or weight of the model has a floating-point type (a float data path)."""
    return _any_dtype(model, lambda dtype: dtype is not None and dtype.is_floating_point())


def _any_dtype(model: ir.Model, test: Callable[[ir.DataType | None], bool]) -> bool:
    """Whether a graph input, output or weight, or a node's output, of any graph of the model
    has a dtype that passes `test`."""
    for graph in walk.graphs(model):
        values = (*graph.inputs, *graph.outputs, *graph.initializers.values())
        if any(test(v.dtype) for v in values):
            return True
    return any(test(out.dtype) for node in walk.all_nodes(model.graph) for out in node.outputs)


def _verify(model: ir.Model, strict_error: str | None) -> Verified:
    """The postcondition; on an input that was not type-correct, say so rather than blame us."""
    try:
        return verify(model, original_passed_strict=strict_error is None)
    except VerificationError as e:
        if strict_error is None:
            raise
        raise InputError(
            f"the input model fails ONNX's type inference ({strict_error}), and its converted "
            f"form cannot be verified: {str(e).removeprefix('converter bug, model not written: ')}"
        ) from None


def checked_lists(model: ir.Model, options: ConvertOptions) -> OpLists:
    """The op lists for `options` (their files read, even at O0), with every name the options
    give (ops, list entries, --dim) checked against `model`: the one check of every entry point."""
    lists = build_lists(options)
    check_against_model(options, lists, model)
    return lists


def build_lists(options: ConvertOptions) -> OpLists:
    """The built-in op lists with the user's file and --fp32-ops / --fp16-ops applied."""
    lists = load_builtin()
    if options.op_lists is not None:
        lists = apply_user_file(lists, options.op_lists)
    lists = apply_user_ops(lists, "deny", options.fp32_ops, "user: --fp32-ops")
    return apply_user_ops(lists, "allow", options.fp16_ops, "user: --fp16-ops")


def _unknown_user_ops(options: ConvertOptions, model: ir.Model) -> list[str]:
    """--fp32-ops / --fp16-ops names that match no node of the model (typos, a missing domain)."""
    if not options.fp32_ops and not options.fp16_ops:
        return []
    present = {op_key(node.domain, node.op_type) for node in walk.all_nodes(model.graph)}
    flags = (("--fp32-ops", options.fp32_ops), ("--fp16-ops", options.fp16_ops))
    return unmatched_user_ops(flags, present)
