"""Classify: give each node a class (allow / infer / clear / deny) and find the slots it may lower.

Which slots may turn low comes from the op's schema at the model's opset: the type variables that
carry the node's data path (those bound to an output, and the one of input 0) when they are bound
to FP32 and admit the low type. Auxiliary inputs with a type variable of their own (Resize roi,
BatchNormalization statistics at opset 15) and fixed-type slots (Resize scales, NMS boxes) keep
their original type. Ops without a schema (custom domains) and control flow keep their precision.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from amp_convert import schema
from amp_convert.op_lists import OpLists, op_key
from amp_convert.options import ConvertOptions
from amp_convert.passes.plan import Classes, NodeInfo
from amp_convert.precision import (
    CONTROL_FLOW,
    FLOAT,
    LOW_TYPES,
    NodeClass,
    constant_tensor,
    is_default_domain,
)
from amp_convert.targets import load_target

FIXED, NONE = NodeClass.FIXED, NodeClass.NONE
#: normalizations whose schema can fix FP32 statistics through `stash_type`
STASH_NORMS = frozenset({"LayerNormalization", "GroupNormalization", "RMSNormalization"})
#: deny-listed ops whose ORT CUDA kernels accumulate in FP32 for FP16 I/O and whose outputs are
#: bounded (probabilities, log-probabilities): checked in ORT's softmax_impl (AccumulationType)
FP32_ACCUMULATING = frozenset({"Softmax", "LogSoftmax"})


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


def _normalise_constant(node: ir.Node) -> None:
    """Constant(value_float[s]=...) → Constant(value=tensor) so it converts like any tensor."""
    for key in ("value_float", "value_floats"):
        attr = node.attributes.get(key)
        if attr is not None:
            data = np.asarray(attr.value, dtype=np.float32)
            del node.attributes[key]
            node.attributes["value"] = ir.AttrTensor("value", ir.Tensor(data))


def _slots(node: ir.Node, sig: schema.OpSignature, low: ir.DataType) -> tuple[set, str]:
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
    lowered, why = set(), ""
    for var, dtypes in bound.items():
        if dtypes != {FLOAT}:
            if FLOAT in dtypes and None in dtypes:
                why = f"type of {var} not fully known"
            continue
        admitted = next(s for s in (*sig.inputs, *sig.outputs) if s.type_str == var).allowed
        if schema.type_name(low) in admitted:
            lowered.add(var)
        else:
            why = f"schema: {var} of {node.op_type} excludes {low.name.lower()} at this opset"
    return lowered, why


def _info_for(node: ir.Node, ctx: ClassifyPass, opset: int) -> NodeInfo:
    has_float = any(v is not None and v.dtype == FLOAT for v in (*node.inputs, *node.outputs))
    default = is_default_domain(node.domain)
    if node.op_type in CONTROL_FLOW and default:
        return NodeInfo(FIXED, "control flow: boundary keeps its types, bodies are converted")
    if node.op_type == "Constant" and default:
        return NodeInfo(NONE, "constant: stored in the precision its readers need")
    sig = schema.signature(node.op_type, node.domain, opset)
    if sig is None:
        reason = f"no ONNX schema for {op_key(node.domain, node.op_type)} (custom op)"
        return NodeInfo(FIXED if has_float else NONE, reason)
    if any(
        v is not None and v.type is not None and not isinstance(v.type, ir.TensorType)
        for v in (*node.inputs, *node.outputs)
    ):
        return NodeInfo(FIXED if has_float else NONE, "sequence/optional types")
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
            return NodeInfo(NONE, "no float data path")
        return NodeInfo(
            FIXED, why or "schema: no float slot can take the low type", any_inputs=any_in
        )
    if node.op_type == "Cast" and node.inputs[0] is not None and node.inputs[0].dtype in LOW_TYPES:
        # A widening Cast out of a low-precision value is a deliberate boundary (our own output)
        return NodeInfo(FIXED, "boundary cast out of a low-precision value", any_inputs=any_in)
    cls, reason, user = _list_class(node, ctx)
    info = NodeInfo(cls, reason, low_in, low_out, any_in, user=user)
    if cls == NodeClass.DENY and not user and default:
        _refine_deny(node, info, sig_has_stash(node.op_type, opset), ctx.options.target)
    if info.candidate and ctx.table is not None:
        _fit_kernels(node, info, sig, ctx, opset)
    return info


def _proposed(values: Sequence[ir.Value | None], low_slots: frozenset[int], low: ir.DataType):
    return [
        None if v is None else (low if i in low_slots and v.dtype == FLOAT else v.dtype)
        for i, v in enumerate(values)
    ]


def _clip_as_min_max(node: ir.Node, ctx: ClassifyPass, opset: int) -> bool:
    """Clip before opset 12 has no FP16 CUDA kernel; Max(Min(x, hi), lo) does the same exactly.

    Only with constant (or absent) bounds, so the rewrite needs no new runtime values.
    """
    bounds = node.inputs[1:3]
    if opset < 8 or any(b is not None and constant_tensor(b) is None for b in bounds):
        return False  # Min/Max broadcast a scalar bound only from opset 8
    low = ctx.low
    return all(ctx.table.accepts(op, "", opset, [low, low], [low]) is None for op in ("Min", "Max"))


def _fit_kernels(
    node: ir.Node, info: NodeInfo, sig: schema.OpSignature, ctx: ClassifyPass, opset: int
) -> None:
    """Keep the node FP32 unless the target runs it with its low-precision types.

    A node whose kernel wants one float type for all inputs (BatchNormalization) may lower its
    constant auxiliary inputs too, where the schema admits it: their range is checked like any
    weight's. Otherwise the node keeps FP32 with the kernel table's reason.
    """
    table, low = ctx.table, ctx.low

    def refusal(low_inputs: frozenset[int]) -> str | None:
        ins = _proposed(node.inputs, low_inputs, low)
        outs = _proposed(node.outputs, info.low_outputs, low)
        return table.accepts(node.op_type, node.domain, opset, ins, outs)

    problem = refusal(info.low_inputs)
    if problem is None:
        return
    if node.op_type == "Clip" and _clip_as_min_max(node, ctx, opset):
        info.rewrite_as = "minmax"
        info.reason += f"; runs as Min/Max when low ({problem})"
        return
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
        info.low_inputs = info.low_inputs | extra
        return
    info.pin(NodeClass.FIXED, f"target {table.name}: {problem}")


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


def sig_has_stash(op_type: str, opset: int) -> bool:
    """Whether the op's schema at `opset` has `stash_type` (statistics type independent of I/O)."""
    return op_type in STASH_NORMS and schema.has_attribute(op_type, "", opset, "stash_type")


def _refine_deny(node: ir.Node, info: NodeInfo, has_stash: bool, target: str) -> None:
    """Deny-listed ops whose danger the runtime already handles go low with low I/O.

    - Normalizations with `stash_type` keep mean and variance in FP32 whatever the I/O type
      (stash_type = 1 is set explicitly by rewrite).
    - ORT's CUDA Softmax/LogSoftmax accumulate in FP32 for FP16 I/O: between low neighbours the
      casts around them only move bytes; next to an FP32 neighbour they keep FP32 (assign).
    """
    if has_stash:
        info.op_class = NodeClass.INFER
        info.reason = "statistics in FP32 via stash_type; low-precision I/O"
    elif node.op_type == "Pow" and _is_tanh_gelu_cube(node):
        info.op_class = NodeClass.INFER
        info.reason = (
            "the cube inside a tanh-GELU: where it overflows, tanh saturates to +-1 and the GELU "
            "is exact; low keeps the GELU fusable (FastGelu)"
        )
    elif target == "ort-cuda" and node.op_type in FP32_ACCUMULATING:
        info.op_class = NodeClass.INFER
        info.low_between_low = True
        info.reason = (
            "FP32 accumulation in the ORT CUDA kernel: low I/O between low neighbours, "
            "FP32 next to an FP32 one"
        )


def _list_class(node: ir.Node, ctx: ClassifyPass) -> tuple[NodeClass, str, bool]:
    """The node's class from the lists, its reason, and whether the user decided it."""
    for pattern in ctx.options.exclude_patterns:
        if node.name and pattern.search(node.name):
            return FIXED, f"user: --exclude-nodes {pattern.pattern}", True
    key = op_key(node.domain, node.op_type)
    lists = ctx.lists
    entry = lists.lookup(key)
    user = lists.is_user(key)
    for rule in lists.rules_for(key):  # the first matching rule wins
        if (rule.user or not user) and rule.matches(_subject(node, rule.subject)):
            prefix = "user rule: " if rule.user else "rule: "
            return NodeClass(rule.cls), prefix + rule.reason, rule.user
    if entry is None:
        return NodeClass.INFER, "unlisted op: follows its neighbours", False
    cls, reason = entry
    if user:
        return NodeClass(cls), reason if reason.startswith("user") else f"user: {reason}", True
    return NodeClass(cls), f"{cls} list: {reason}", False


class ClassifyPass(ir.passes.InPlacePass):
    """Attach a NodeInfo to every node (subgraphs included); the result is `classes`."""

    def __init__(self, options: ConvertOptions, lists: OpLists) -> None:
        super().__init__()
        self.options = options
        self.lists = lists
        self.low = options.low_dtype
        self.table = load_target(options.target) if options.target != "none" else None
        self.classes: Classes = {}

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opsets = model.opset_imports
        classes: Classes = {}
        for node in model.graph.all_nodes():
            if node.op_type == "Constant":
                _normalise_constant(node)
            domain = "" if node.domain == "ai.onnx" else node.domain
            classes[node] = _info_for(node, self, opsets.get(domain, 1))
        self.classes = classes
        return ir.passes.PassResult(model, modified=False)
