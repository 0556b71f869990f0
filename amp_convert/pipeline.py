"""The conversion of one ir.Model, in place: a numbered sequence of steps, each a function.

Every step takes what it reads as arguments and returns one frozen result that later steps receive
explicitly; no step reads another step's object, and every graph edit happens inside a step.

    1. prepare         passes/prepare.py       -> Prepared (initializer inputs, constants, names)
   1b. opset upgrade   passes/opset_upgrade.py -> UpgradeResult (--opset-upgrade, QDQ models)
    2. analyse         passes/analyse.py       -> (strict check error, inferred types)
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
       kernel limits   passes/kernel_limits.py -> LimitNotes (low nodes that rely on a held sum)
   14. report          reports/conversion.py   -> ConversionReport (and the ValueMap, built from
                                                   the records of steps 5, 6, 11 and 12)

Each step logs its result (and classify/assign each node's decision) at DEBUG (`amp-convert -v`).
`_step` passes a step its arguments typed (ParamSpec: mypy checks them against the step's
signature), and an exception escaping a step carries a note naming it ("in step 8: classify").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import ParamSpec, TypeVar

import onnx_ir as ir

from amp_convert import schema
from amp_convert.core import domains
from amp_convert.core.graph_digest import DIGEST_KEY, graph_digest
from amp_convert.core.precision import NodeClass, Precision, UniqueNames
from amp_convert.core.qdq_rules import has_qdq
from amp_convert.core.reasons import render
from amp_convert.core.summaries import one_line
from amp_convert.cost.traffic import (
    ShapeBook,
    cast_notes,
    excess_warning,
    model_traffic,
)
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
from amp_convert.passes.measure import measure_original
from amp_convert.passes.opset_upgrade import UpgradeResult, upgrade_opset
from amp_convert.passes.prepare import prepare
from amp_convert.passes.qdq import QdqGroups, keep_qdq_groups
from amp_convert.passes.rewrite import RewriteResult, rewrite
from amp_convert.passes.verify import Verified, verify
from amp_convert.placement.plan import PrecisionPlan
from amp_convert.reports.conversion import ConversionReport, FoldNote, NodeDecision
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
from amp_convert.targets import Target, build_target, uncovered_nodes

log = logging.getLogger(__name__)
STAMP_KEY = "amp_convert"
_R = TypeVar("_R")
_P = ParamSpec("_P")


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
    prepared = _step(1, "prepare", prepare, model, options.keep_initializer_inputs)
    upgraded = _step(1, "opset upgrade", _upgrade, model, options, prepared.names)
    with serialised_once(model):  # analyse and the shape inference read one stripped copy
        strict_error, inferred = _step(2, "analyse", analyse, model)
        report.warnings.extend(schema.unknown_warnings(model))
        shapes = ShapeBook(model, options.dim_values)  # sizes from the input dims (cost/shapes)
    _step(3, "infer dtypes", infer_dtypes, model, inferred)
    check_runtime_ops(model)  # the input's ORT ops against ORT's schemas: its fault, not ours
    before = _step(4, "measure", measure_original, model, shapes, low, keep_io, low_io)
    folded = _step(5, "fold BN", fold_batch_norm, model, low, inferred, prepared.names)
    norms = _step(6, "hand norms", rewrite_hand_norms, model, prepared.names, inferred, target)
    pooled = _step(7, "global pool", run_as_global_pool, model, inferred, target, prepared.names)
    classes = _step(8, "classify", classify, model, options, lists, target)
    classes = _step(9, "pin statistics", pin_norm_statistics, classes, norms, options.level)
    groups = _step(9, "QDQ groups", keep_qdq_groups, model, classes)
    classes = groups.classes
    plan = _step(10, "assign", assign, model, classes, shapes, options, low_io)
    if not _has_float(model):  # typed by step 3: no float data path at all
        report.warnings.append(
            "nothing to convert: no value of the model is a float; its graph is kept as it is"
        )
    rewritten = _step(
        11, "rewrite", rewrite, model, plan, prepared.names,
        cast_optional_params=options.cast_optional_params,
    )  # fmt: skip
    cleaned = _step(12, "cleanup", cleanup, model)
    _step(13, "verify", _verify, model, strict_error)
    limits = kernel_limits(model, target, shapes)

    report.initializer_inputs = prepared.initializer_inputs
    if prepared.initializer_inputs is not None and prepared.initializer_inputs.case == "constants":
        report.warnings.append(
            f"IR version < 4: {prepared.promoted} initializers listed as graph inputs are "
            "constants (as ONNX Runtime treats them); they left the inputs and the IR version is "
            "now 4"
        )
    if strict_error is not None:
        report.warnings.append(
            "the input model fails ONNX's strict type inference; only amp-convert's own type "
            "check verified the result"
        )
    report.nodes = decisions(model, plan, rewritten)
    records = (
        *folded.values, *norms.values, *pooled.values, *rewritten.values, *cleaned.values
    )  # fmt: skip
    report.value_map = _value_map(snapshot, records, model, plan, rewritten)
    report.tensors.extend((*plan.tensor_notes, *rewritten.saturated))
    report.initializers_converted = rewritten.initializers_converted
    report.initializers_kept = rewritten.initializers_kept
    report.folds = list(folded.records)
    report.rewrites = [*norms.notes, *pooled.notes, *_upgrade_notes(upgraded)]
    report.warnings.extend(_qdq_warnings(groups, options))
    report.limits = list(limits)
    report.warnings.extend(_low_type_warnings(report, model, options))
    report.warnings.extend(_runtime_only_warnings(model, norms.notes, options))
    _describe_target(report, model, target)
    report.casts_after = count_casts(model)
    report.weight_bytes_after = ir_weights(model).total  # Constant-held weights too
    report.casts = cast_notes(model, shapes)
    report.traffic = {
        "original": before.original,
        "result": model_traffic(model, shapes),
        "all_low": before.all_low,
    }
    excess = excess_warning(
        before.original, report.traffic["result"], report.casts, _fp32_causes(plan)
    )
    if excess is not None:
        report.warnings.append(excess)
    report.traffic_dims = dict(shapes.dims)
    report.traffic_estimated = shapes.estimated
    model.metadata_props[STAMP_KEY] = options.stamp()
    model.metadata_props[METADATA_KEY] = report.value_map.to_metadata()
    fp32 = {n.name: n.reason for n in report.nodes if n.precision == Precision.FP32.value}
    model.metadata_props[REASONS_KEY] = reasons_to_metadata(fp32)  # `validate --html` shows them
    model.metadata_props[DIGEST_KEY] = graph_digest(model)  # "already converted" only if unedited
    return report


def _upgrade(model: ir.Model, options: ConvertOptions, names: UniqueNames) -> UpgradeResult | None:
    """--opset-upgrade on a model with Q/DQ nodes (the only models it helps); else nothing."""
    if not options.opset_upgrade or not has_qdq(model):
        return None
    return upgrade_opset(model, names)


def _low_type_warnings(
    report: ConversionReport, model: ir.Model, options: ConvertOptions
) -> list[str]:
    """A BF16 (or FP16) request that leaves most nodes FP32 where the model or the target sets
    the limit (a schema at this opset, a missing kernel): why, and what would help. Nodes FP32 by
    the level's own rules are the summary's "FP32 because" line, not a warning."""
    low, fp32 = report.nodes_low, report.nodes_fp32
    if fp32 <= low:
        return []
    causes = report.fp32_causes()
    cause, count = causes.most_common(1)[0]
    opset = domains.opset_version(model.opset_imports)
    name = options.dtype.upper()
    line = (
        f"{fp32} of {low + fp32} float nodes stay FP32 under {name}; the most because "
        f"{cause} ({count})"
    )
    helps = []
    schema_ops = sorted({n.op_type for n in report.counted("fp32")
                         if n.reasons and n.reasons[0].kind.value == "schema"})  # fmt: skip
    if schema_ops:
        if options.dtype == "bf16" and opset < 22:
            helps.append(
                f"the model is at opset {opset}: {', '.join(schema_ops[:4])} take bfloat16 "
                "only from opset 22 (re-export at opset >= 22), or use --dtype fp16"
            )
        else:
            helps.append(
                f"their schemas exclude {name} at opset {opset}: {', '.join(schema_ops[:4])}"
            )
    if "no low-precision kernel on the target" in causes:
        helps.append(f"--target {options.target} has no {name} kernel for some ops; --target none "
                     "follows the ONNX schemas only")  # fmt: skip
    return [f"{line}: {'; '.join(helps)}"] if helps else []


def _runtime_only_warnings(
    model: ir.Model, notes: tuple[FoldNote, ...], options: ConvertOptions
) -> list[str]:
    """Hand norms folded into ONNX Runtime's own ai.onnx ops (LayerNormalization below opset 17,
    SimplifiedLayerNormalization): the result now loads in ONNX Runtime only."""
    opset = domains.opset_version(model.opset_imports)
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


def _upgrade_notes(upgraded: UpgradeResult | None) -> list[FoldNote]:
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


def _qdq_warnings(groups: QdqGroups, options: ConvertOptions) -> list[str]:
    """Why ops between Q/DQ nodes kept FP32, and how to lower them."""
    if not groups.pinned:
        return []
    line = (
        f"{groups.pinned} op(s) next to FP32 QuantizeLinear/DequantizeLinear nodes keep FP32 (a "
        "Cast between them would split the DQ -> op -> Q groups ORT and TensorRT fuse)"
    )
    if groups.below_19 and not options.opset_upgrade:
        line += (
            f": below opset 19 a Q/DQ scale must be FP32 (the model is at opset "
            f"{groups.opset}); --opset-upgrade moves it to opset 19, where the groups go low"
        )
    elif groups.cause:
        line += f"; a Q/DQ keeps FP32 for: {groups.cause}"
    return [line]


def _fp32_causes(plan: PrecisionPlan) -> list[str]:
    """For each float node kept FP32, who decided it (its first reason's source)."""
    causes = []
    for node in plan.nodes:
        p = plan.placement(node)
        if p is None or p.op_class == NodeClass.NONE or p.precision != Precision.FP32:
            continue
        if p.reasons:
            causes.append(p.reasons[0].source or p.reasons[0].kind.value)
    return causes


def _step(
    number: int, name: str, func: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs
) -> _R:
    """Run one step, logging its name and a line about its result at DEBUG; an exception that
    escapes it leaves with a note naming the step (shown in tracebacks and the CLI's line)."""
    log.debug("step %d: %s", number, name)
    try:
        result = func(*args, **kwargs)
    except Exception as e:
        e.add_note(f"in step {number}: {name}")
        raise
    if log.isEnabledFor(logging.DEBUG):
        log.debug("step %d: %s -> %s", number, name, _summary(result))
    return result


def _summary(result: object) -> str:
    """A result in one line: per-node mappings and plans by their counts, the rest by their
    scalar fields (core/summaries.py)."""
    if isinstance(result, PrecisionPlan):
        low = sum(1 for p in result.nodes.values() if p.precision == Precision.LOW)
        return f"PrecisionPlan: {low} of {len(result.nodes)} nodes low"
    if isinstance(result, Mapping):
        return f"{len(result)} nodes classified"
    if isinstance(result, tuple):  # analyse: (strict error, inferred types)
        return f"strict check error: {result[0]}, {len(result[1])} inferred types"
    return one_line(result)


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
    for graph in model.graphs():
        values = (*graph.inputs, *graph.outputs, *graph.initializers.values())
        if any(v.dtype == low for v in values):
            return True
    return any(out.dtype == low for node in model.graph.all_nodes() for out in node.outputs)


def _has_float(model: ir.Model) -> bool:
    """Whether any value or weight of the model has a floating-point type (a float data path)."""
    for graph in model.graphs():
        values = (*graph.inputs, *graph.outputs, *graph.initializers.values())
        if any(v.dtype is not None and v.dtype.is_floating_point() for v in values):
            return True
    return any(
        out.dtype is not None and out.dtype.is_floating_point()
        for node in model.graph.all_nodes()
        for out in node.outputs
    )


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


def decisions(model: ir.Model, plan: PrecisionPlan, rewritten: RewriteResult) -> list[NodeDecision]:
    """One NodeDecision per node of the result the plan decided (inserted Casts are not)."""
    out = []
    for i, node in enumerate(model.graph.all_nodes()):
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


def _value_map(
    snapshot: Snapshot,
    records: tuple[ValueRecord, ...],
    model: ir.Model,
    plan: PrecisionPlan,
    rewritten: RewriteResult,
) -> ValueMap:
    """Where each original value and node went, from the records the steps returned."""

    def precision(node: ir.Node) -> Precision | None:
        placement = plan.placement(rewritten.replaced.get(node, node))
        if placement is None or placement.op_class == NodeClass.NONE:
            return None
        return placement.precision

    return build_value_map(snapshot, records, model, precision)


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


def _unknown_user_ops(options: ConvertOptions, model: ir.Model) -> list[str]:
    """--fp32-ops / --fp16-ops names that match no node of the model (typos, a missing domain)."""
    if not options.fp32_ops and not options.fp16_ops:
        return []
    present = {op_key(node.domain, node.op_type) for node in model.graph.all_nodes()}
    flags = (("--fp32-ops", options.fp32_ops), ("--fp16-ops", options.fp16_ops))
    return unmatched_user_ops(flags, present)
