"""Classify: give each node a class (allow / infer / clear / deny) and find the slots it may lower.

Which slots may turn low comes from the op's schema at the model's opset: the type variables that
carry the node's data path (those bound to an output, and the one of input 0) when they are bound
to FP32 and admit the low type. Auxiliary inputs with a type variable of their own (Resize roi,
BatchNormalization statistics at opset 15) and fixed-type slots (Resize scales, NMS boxes, a fused
op's mask_index or seqlens_k) keep their original type, except small constants that the low type
holds exactly (Pow's exponent 2 or 3): stored low, no value changes and the kernel sees one float
type. Contrib ops (com.microsoft) are classified
like ONNX ops through ORT's schema table; ops no schema knows, nodes with slots their schema does
not describe, and control flow keep their precision.
With a target that checks kernels, a node whose low types have no kernel keeps FP32 too.

Reads the graph only; the result is a frozen `Classes` mapping (node -> ClassInfo).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from amp_convert import schema
from amp_convert.core import domains, walk
from amp_convert.core.dtypes import FLOAT, LOW_TYPES, NUMPY_TYPES, low_type_of, onnx_name
from amp_convert.core.precision import CONTROL_FLOW, NodeClass, constant_tensor
from amp_convert.core.qdq_rules import QDQ_OPS
from amp_convert.core.reasons import Reason, ReasonKind
from amp_convert.op_lists import OpLists, op_key
from amp_convert.op_lists.bounds import Bounds
from amp_convert.options.convert import ConvertOptions
from amp_convert.passes import _angles as angles
from amp_convert.placement.plan import Classes, ClassInfo, LoweredAs
from amp_convert.schema import has_stash_type
from amp_convert.targets import KernelTable, Target

log = logging.getLogger(__name__)

FIXED, NONE = NodeClass.FIXED, NodeClass.NONE
K = ReasonKind


@dataclass(frozen=True)
class _Context:
    options: ConvertOptions
    lists: OpLists
    target: Target
    low: ir.DataType
    bounds: Bounds


def classify(model: ir.Model, options: ConvertOptions, lists: OpLists, target: Target) -> Classes:
    """A ClassInfo for every node of `model` (subgraphs included); `target` says which low types
    have kernels and which deny-listed ops accumulate in FP32."""
    opsets = model.opset_imports
    low_max = options.low.max
    bounds = Bounds(domains.opset_version(opsets), low_max)
    ctx = _Context(options, lists, target, options.low_dtype, bounds)
    classes: dict[ir.Node, ClassInfo] = {}
    for node in walk.all_nodes(model.graph):
        info = _info_for(node, ctx, domains.opset_version(opsets, node.domain))
        classes[node] = info
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "classify %s (%s): %s, %s",
                node.name,
                node.op_type,
                info.op_class,
                "; ".join(r.text() for r in info.reasons),
            )
    for node in angles.angle_nodes(model):  # rotary angles from integer positions
        info = classes[node]
        if not info.user and info.op_class != NONE:
            classes[node] = info.pinned(Reason(K.RANGE, "range", angles.DETAIL))
    return Classes(classes)


def _why(kind: ReasonKind, detail: str, source: str = "") -> tuple[Reason, ...]:
    return (Reason(kind, source, detail),)


def _scalar(value: ir.Value | None) -> float | None:
    if value is None:
        return None
    tensor = constant_tensor(value)
    if tensor is None and value.const_value is not None and not value.is_graph_input():
        tensor = value.const_value
    if tensor is None or tensor.size != 1:
        return None
    return float(np.asarray(tensor.numpy()).reshape(-1)[0])


def _subject(node: ir.Node, subject: str) -> object:
    if subject.startswith("@"):
        attr = node.attributes.get(subject[1:])
        if attr is None:
            return None
        value = attr.value
        return value.decode() if isinstance(value, bytes) else value
    index = int(subject)
    return _scalar(node.inputs[index]) if index < len(node.inputs) else None


def _slots(node: ir.Node, sig: schema.OpSignature, low: ir.DataType) -> tuple[set, Reason | None]:
    """Type variables to lower, and why none could be, for a node with a schema."""
    candidates = set(sig.output_type_vars)
    first = sig.input_slot(0)
    if first is not None and first.is_type_var and node.op_type not in ("Cast", "CastLike"):
        candidates.add(first.type_str)
    bound: dict[str, set] = {var: set() for var in candidates}
    for values, slot_at in ((node.inputs, sig.input_slot), (node.outputs, sig.output_slot)):
        for i, value in enumerate(values):
            slot = slot_at(i)
            if value is None or slot is None or slot.type_str not in bound:
                continue
            bound[slot.type_str].add(value.dtype)
    lowered: set[str] = set()
    why: Reason | None = None
    for var, dtypes in sorted(bound.items()):  # sorted: the reason names the same var every run
        if dtypes != {FLOAT}:
            if FLOAT in dtypes and None in dtypes:
                why = Reason(K.SCHEMA, "", f"type of {var} not fully known")
            continue
        admitted = next(s for s in (*sig.inputs, *sig.outputs) if s.type_str == var).allowed
        if schema.type_name(low) in admitted:
            lowered.add(var)
        else:
            detail = f"{var} of {node.op_type} excludes {onnx_name(low)} at this opset"
            why = Reason(K.SCHEMA, "schema", detail)
    return lowered, why


def _info_for(node: ir.Node, ctx: _Context, opset: int) -> ClassInfo:
    has_float = any(v is not None and v.dtype == FLOAT for v in (*node.inputs, *node.outputs))
    default = domains.is_default(node.domain)
    if node.op_type in CONTROL_FLOW and default:
        detail = "boundary keeps its types, bodies are converted"
        return ClassInfo(FIXED, _why(K.CONTROL_FLOW, detail, "control flow"))
    if node.op_type == "Constant" and default:
        detail = "stored in the precision its readers need"
        return ClassInfo(NONE, _why(K.CONSTANT, detail, "constant"))
    sig = schema.signature(node.op_type, node.domain, opset)
    if sig is None:
        custom = f"no schema for {op_key(node.domain, node.op_type)}: {schema.UNKNOWN_OP}"
        return ClassInfo(FIXED if has_float else NONE, _why(K.CUSTOM_OP, custom))
    unbound = schema.unbound_slots(node, sig)
    if unbound:
        where = f"{', '.join(unbound)} of {op_key(node.domain, node.op_type)}"
        detail = f"{where}: {schema.UNKNOWN_SLOT}"
        return ClassInfo(FIXED if has_float else NONE, _why(K.UNKNOWN_SLOT, detail))
    if any(
        v is not None and v.type is not None and not isinstance(v.type, ir.TensorType)
        for v in (*node.inputs, *node.outputs)
    ):
        why_not = _why(K.NON_TENSOR, "sequence/optional types")
        return ClassInfo(FIXED if has_float else NONE, why_not)
    lowered, why = _slots(node, sig, ctx.low)
    low_in = frozenset(
        i
        for i, v in enumerate(node.inputs)
        if v is not None and (s := sig.input_slot(i)) is not None and s.type_str in lowered
    )
    low_out = frozenset(
        i for i, _ in enumerate(node.outputs) if (s := sig.output_slot(i)) and s.type_str in lowered
    )
    any_in = frozenset({0}) if node.op_type in ("Cast", "CastLike") else frozenset()
    if not low_in and not low_out:
        if not has_float:
            return ClassInfo(NONE, _why(K.NO_FLOAT, "no float data path"))
        if why is None:
            why = Reason(K.SCHEMA, "schema", "no float slot can take the low type")
        return ClassInfo(FIXED, (why,), any_inputs=any_in)
    if node.op_type == "Cast" and node.inputs[0] is not None and node.inputs[0].dtype in LOW_TYPES:
        # A widening Cast out of a low-precision value is a deliberate boundary (our own output)
        detail = "boundary cast out of a low-precision value"
        return ClassInfo(FIXED, _why(K.BOUNDARY_CAST, detail), any_inputs=any_in)
    cls, reason, user = _list_class(node, ctx)
    info = ClassInfo(cls, (reason,), low_in, low_out, any_in, user=user)
    if cls == NodeClass.DENY and not user and default:
        info = _refine_deny(node, info, has_stash_type(node.op_type, opset), ctx.target)
    if info.op_class == NodeClass.DENY and not user and default:
        info = _bounded(node, info, ctx)
    if info.candidate and ctx.target.checks_kernels:
        info = _fit_kernels(node, info, sig, ctx, ctx.target.kernels, opset)
    if info.candidate:
        info = _exact_operands(node, info, sig, ctx, opset)
    return info


#: the most elements an auxiliary constant may have to be judged exact (exponents, ratios)
_EXACT_MAX = 64


def _held_exactly(value: ir.Value, low: ir.DataType) -> bool:
    tensor = constant_tensor(value)
    if tensor is None or not 0 < tensor.size <= _EXACT_MAX:
        return False  # an empty one (Resize's unused roi) has nothing to gain
    x = np.asarray(tensor.numpy(), dtype=np.float32)
    if not np.isfinite(x).all():
        return False
    with np.errstate(over="ignore"):
        back = x.astype(NUMPY_TYPES[low]).astype(np.float32)
    return bool(np.array_equal(back, x))


def _exact_operands(
    node: ir.Node, info: ClassInfo, sig: schema.OpSignature, ctx: _Context, opset: int
) -> ClassInfo:
    """Lower the node's small constant auxiliary operands that the low type holds exactly.

    Why: a mixed-type kernel can be a slower one. ORT CUDA's Pow with an FP32 exponent on FP16
    data made GPT-2 (b8 s512, O2, H200) 6% slower than the same graph with the exponent stored
    FP16 (10.94 vs 10.28 ms; onnxconverter-common's output, which stores it FP16, 10.23:
    bench/gpu_deploy.py --pow16). Exact values only: the numbers the node computes are unchanged.
    """
    extra = frozenset(
        i
        for i, v in enumerate(node.inputs)
        if i not in info.low_inputs
        and v is not None
        and v.dtype == FLOAT
        and (slot := sig.input_slot(i)) is not None
        and schema.type_name(ctx.low) in slot.allowed
        and _held_exactly(v, ctx.low)
    )
    if not extra:
        return info
    if ctx.target.checks_kernels:
        low = ctx.low
        ins = _proposed(node.inputs, info.low_inputs | extra, low)
        outs = _proposed(node.outputs, info.low_outputs, low)
        if ctx.target.kernels.accepts(node.op_type, node.domain, opset, ins, outs) is not None:
            return info
    return dataclasses.replace(info, low_inputs=info.low_inputs | extra)


def _proposed(
    values: Sequence[ir.Value | None], low_slots: frozenset[int], low: ir.DataType
) -> list[ir.DataType | None]:
    return [
        None if v is None else (low if i in low_slots and v.dtype == FLOAT else v.dtype)
        for i, v in enumerate(values)
    ]


def _clip_as_min_max(node: ir.Node, table: KernelTable, low: ir.DataType, opset: int) -> bool:
    """Clip before opset 12 has no FP16 CUDA kernel; Max(Min(x, hi), lo) does the same exactly.

    Only with constant (or absent) bounds, so the rewrite needs no new runtime values.
    """
    bounds = node.inputs[1:3]
    if opset < 8 or any(b is not None and constant_tensor(b) is None for b in bounds):
        return False  # Min/Max broadcast a scalar bound only from opset 8
    return all(table.accepts(op, "", opset, [low, low], [low]) is None for op in ("Min", "Max"))


def _fit_kernels(
    node: ir.Node,
    info: ClassInfo,
    sig: schema.OpSignature,
    ctx: _Context,
    table: KernelTable,
    opset: int,
) -> ClassInfo:
    """Keep the node FP32 unless the target runs it with its low-precision types.

    A node whose kernel wants one float type for all inputs (BatchNormalization) may lower its
    constant auxiliary inputs too, where the schema admits it: their range is checked like any
    weight's. Otherwise the node keeps FP32 with the kernel table's reason.
    """
    low = ctx.low

    def refusal(low_inputs: frozenset[int]) -> str | None:
        ins = _proposed(node.inputs, low_inputs, low)
        outs = _proposed(node.outputs, info.low_outputs, low)
        return table.accepts(node.op_type, node.domain, opset, ins, outs)

    problem = refusal(info.low_inputs)
    if problem is None:
        return info
    if node.op_type in QDQ_OPS and domains.is_default(node.domain):
        as_is = table.accepts(
            node.op_type,
            node.domain,
            opset,
            _proposed(node.inputs, frozenset(), low),
            _proposed(node.outputs, frozenset(), low),
        )
        if as_is is not None:  # e.g. an int32 bias DQ on CUDA: the fallback provider runs it
            kept = f"no {table.name} kernel in FP32 either ({as_is}): its group's types kept"
            return info.noted(Reason(K.TARGET, f"target {table.name}", kept))
    if node.op_type == "Clip" and _clip_as_min_max(node, table, low, opset):
        note = Reason(K.LOWERED_AS, "", f"runs as Min/Max when low ({problem})")
        return dataclasses.replace(info.noted(note), lowered_as=LoweredAs.MIN_MAX)
    extra = frozenset(
        i
        for i, v in enumerate(node.inputs)
        if i not in info.low_inputs
        and v is not None
        and v.dtype == FLOAT
        and constant_tensor(v) is not None
        and (slot := sig.input_slot(i)) is not None
        and schema.type_name(low) in slot.allowed
    )
    if extra and refusal(info.low_inputs | extra) is None:
        return dataclasses.replace(info, low_inputs=info.low_inputs | extra)
    return info.pinned(Reason(K.TARGET, f"target {table.name}", problem))


def _only_reader(value: ir.Value | None, op_type: str) -> ir.Node | None:
    if value is None:
        return None
    uses = list(value.uses())
    if len(uses) != 1 or uses[0].node.op_type != op_type:
        return None
    return uses[0].node


def _is_tanh_gelu_cube(pow_node: ir.Node) -> bool:
    """Pow(x, 3) → Mul(c) → Add(x, ·) → Mul(c') → Tanh: the tanh approximation of GELU.

    0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))): an overflowing cube is +-inf, the sum stays
    +-inf (x is finite), tanh gives +-1, and the GELU gives x or 0, its exact limits. No NaN.
    """
    if _scalar(pow_node.inputs[1] if len(pow_node.inputs) > 1 else None) != 3.0:
        return False
    x = pow_node.inputs[0]
    mul = _only_reader(pow_node.outputs[0], "Mul")
    add = _only_reader(mul.outputs[0], "Add") if mul is not None else None
    if add is None or x not in add.inputs:
        return False
    scale = _only_reader(add.outputs[0], "Mul")
    return scale is not None and _only_reader(scale.outputs[0], "Tanh") is not None


def _refine_deny(node: ir.Node, info: ClassInfo, has_stash: bool, target: Target) -> ClassInfo:
    """Deny-listed ops whose danger the runtime already handles go low with low I/O.

    - Normalizations with `stash_type` keep mean and variance in FP32 whatever the I/O type
      (stash_type = 1 is set explicitly by rewrite).
    - Ops the target accumulates in FP32 with a bounded output (Softmax, LogSoftmax,
      InstanceNormalization on ORT CUDA: the target's accumulation facts cite the kernels):
      between low neighbours the casts around them only move bytes; next to an FP32 neighbour
      they keep FP32 (assign).

    ReduceMean is not refined: ORT CUDA holds its sum in the FP16 output before dividing (the
    accumulation table; Inf once the sum passes 65504, e.g. a mean of 16 over 4096 values, which
    a LayerNorm's or a pooling's inputs reach without any outlier), and the converter sees no
    data. It keeps the deny rule (FP32 at O1/O2; spatial means run as GlobalAveragePool); where
    it does go low (O3, --fp16-ops, --auto's range guard satisfied) the report names it with
    that limit (passes/kernel_limits.py) and the emulator reproduces the overflow.
    """
    infer = NodeClass.INFER
    if has_stash:
        detail = "statistics in FP32 via stash_type; low-precision I/O"
        return dataclasses.replace(info, op_class=infer, reasons=_why(K.RUNTIME_SAFE, detail))
    if node.op_type == "Pow" and _is_tanh_gelu_cube(node):
        detail = (
            "the cube inside a tanh-GELU: where it overflows, tanh saturates to +-1 and the GELU "
            "is exact; low keeps the GELU fusable (FastGelu)"
        )
        return dataclasses.replace(info, op_class=infer, reasons=_why(K.RUNTIME_SAFE, detail))
    source = target.accumulates_fp32(node.op_type)
    if source is not None:
        detail = (
            f"FP32 accumulation in the {target.name} kernel ({source}): low I/O between low "
            "neighbours, FP32 next to an FP32 one"
        )
        why = _why(K.RUNTIME_SAFE, detail)
        return dataclasses.replace(info, op_class=infer, reasons=why, low_between_low=True)
    return info


#: deny-listed ops whose danger is overflow of their output (or of the sum a kernel holds): a
#: proven bound that fits the low type answers it
BOUNDED_OPS = frozenset({"ReduceSum", "ReduceMean", "Exp", "Pow"})


def _bounded(node: ir.Node, info: ClassInfo, ctx: _Context) -> ClassInfo:
    """A deny-listed op whose output provably fits the low type goes INFER, with the bound used.

    Asked of the value the danger is about: the output, or for an op whose kernel holds its sum
    in the low type (ReduceMean on ORT CUDA: the accumulation table) that sum, n * max|x|. An
    op nothing bounds keeps its rule.
    """
    if node.op_type not in BOUNDED_OPS or not node.outputs:
        return info
    limit = low_type_of(ctx.low).max
    held = ctx.target.held_sum(node.op_type, node.domain, onnx_name(ctx.low).lower())
    if held is not None and held.limit == "sum":
        bound = ctx.bounds.sum_of(node)
        what = "the sum its kernel holds"
    else:
        bound = ctx.bounds.of(node.outputs[0])
        what = "its output"
    if not bound.fits(limit) or not math.isfinite(bound.magnitude):
        return info
    detail = (
        f"{what} is proven within +-{bound.magnitude:.4g} ({bound.why}), inside "
        f"{onnx_name(ctx.low)}'s +-{limit:g}"
    )
    return dataclasses.replace(
        info, op_class=NodeClass.INFER, reasons=_why(K.BOUNDED, "bounds", detail)
    )


def _list_class(node: ir.Node, ctx: _Context) -> tuple[NodeClass, Reason, bool]:
    """The node's class from the lists, its reason, and whether the user decided it."""
    if node.name and node.name in ctx.options.pinned_nodes:
        return FIXED, Reason(K.USER, "pinned_nodes", "pinned FP32 by the caller"), True
    for pattern in ctx.options.exclude_patterns:
        if node.name and pattern.search(node.name):
            return FIXED, Reason(K.USER, "user", f"--exclude-nodes {pattern.pattern}"), True
    key = op_key(node.domain, node.op_type)
    lists = ctx.lists
    entry = lists.lookup(key)
    user = lists.is_user(key)
    for rule in lists.rules_for(key):  # the first matching rule wins
        if (rule.user or not user) and rule.matches(_subject(node, rule.subject)):
            source = "user rule" if rule.user else "rule"
            return NodeClass(rule.cls), Reason(K.RULE, source, rule.reason), rule.user
    if entry is None:
        return NodeClass.INFER, Reason(K.UNLISTED, "unlisted op", "follows its neighbours"), False
    cls, text = entry
    if user:
        # a user entry's text names its origin ("user: --fp32-ops", "user file x.txt: ...")
        reason = Reason(K.USER, "" if text.startswith("user") else "user", text)
        return NodeClass(cls), reason, True
    return NodeClass(cls), Reason(K.LIST, f"{cls} list", text), False
