"""Fold inference BatchNormalization offline, in float64, before precision is chosen.

BatchNormalization is on the deny list because ``rsqrt(var + eps)`` and large running variances
are unsafe in FP16. Done once at conversion in float64 instead, nothing at runtime needs FP32:

- **folded**: a BN whose input is read only by a Conv, ConvTranspose, Gemm or MatMul with a
  constant weight (and bias) is merged into it: ``s = scale / sqrt(var + eps)``,
  ``W' = W * s`` on the output-channel axis, ``b' = (b - mean) * s + B``;
- **decomposed**: a BN with nothing to fold into becomes ``Mul(x, s)`` + ``Add(., B - mean * s)``
  with constants shaped ``[C, 1, ..., 1]`` to broadcast over axis 1;
- **kept**: training-mode BNs, non-constant statistics, unknown rank, and folds whose constants
  fail the range check for the low type stay as they are (FP32 via the deny list), with the reason.

Range check (on the float32 values that are stored):
- any constant: non-finite, or beyond float32 → fail; for FP16, ``|v| > 65504`` → fail;
- a folded weight ``W'`` is judged by the effect of its flushed and subnormal values on each
  output channel (the channel its BN scaled): the fold fails when, for some channel, what those
  values lose in the low type exceeds the unit roundoff (FP16 2**-11) of that channel's weight
  norm, beyond what the unfolded weight already lost there (a weight that already lost more is
  judged by the weight check, with or without the fold). A tiny tail of a trained channel
  (PP-OCRv4's recogniser: 7% of a folded weight's values below 2**-14, every channel losing
  < 3.2e-6 of its norm) folds; a channel its BN scaled down to 1e-6 (a pruned layer) loses 2-3%
  and keeps the BN;
- the decomposed scale ``s`` (additive biases are compared with O(1) activations, where a
  subnormal is harmless), for FP16: fail when more than 1% of its nonzero values fall below
  FP16's smallest normal 2**-14 ~ 6.10e-05 (there they keep fewer than 11 significant bits, or
  flush to zero).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from amp_convert.core import domains, walk
from amp_convert.core.batch_norm import (
    Kept,
    attr,
    channel_range_loss,
    check_inference,
    drop_if_dead,
    inferred_types,
    is_onnx,
    output_channels,
    shaped,
    statistics,
    subnormal_share,
    to_float32,
)
from amp_convert.core.dtypes import FLOAT, FP16, LOW_TYPES, low_type_of
from amp_convert.core.precision import UniqueNames, constant_tensor
from amp_convert.core.steps import StepResult
from amp_convert.files.onnx_checks import call_on_stripped
from amp_convert.reports.conversion import FoldNote
from amp_convert.reports.value_map import Carried, Folded, NodeCarried, NodeFolded, ValueRecord

log = logging.getLogger(__name__)

FOLD_TARGETS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
#: Share of nonzero multiplicative values the fold may newly push below FP16's normal range.
UNDERFLOW_FRACTION = 0.01


@dataclass(frozen=True)
class FoldResult(StepResult):
    """One record per inference BatchNormalization: folded, decomposed or kept (and why)."""

    records: tuple[FoldNote, ...] = ()
    #: what became of each value and node a fold touched (for the value map)
    values: tuple[ValueRecord, ...] = field(default=(), compare=False)

    @property
    def modified(self) -> bool:
        return any(r.action != "kept" for r in self.records)


def fold_batch_norm(
    model: ir.Model,
    low_dtype: ir.DataType = ir.DataType.FLOAT16,
    value_types: Mapping[str, onnx.TypeProto] | None = None,
    names: UniqueNames | None = None,
) -> FoldResult:
    """Fold or decompose every inference BatchNormalization of `model` in float64, in place.

    ``low_dtype`` is the conversion's target type (it sets the range check). ``value_types`` maps
    value names to inferred TypeProtos (the pipeline's ``analyse`` result); without it, ONNX
    shape inference runs once on the weight-stripped model, only if a rank is needed and unknown.
    ``names`` is the pipeline's shared name registry (one is made from the model otherwise).
    """
    bns = [n for n in walk.all_nodes(model.graph) if is_onnx(n, "BatchNormalization")]
    if not bns:
        return FoldResult()
    folder = _Folder(model, low_dtype, value_types, names or UniqueNames.of_model(model))
    opset = domains.opset_version(model.opset_imports)
    records = []
    for i, bn in enumerate(bns):
        name = bn.name or f"BatchNormalization_{i}"
        try:
            record = folder.rewrite(bn, name, opset)
        except Kept as kept:
            record = FoldNote(name, "kept", "", str(kept))
        log.debug(
            "fold BatchNormalization %s: %s %s %s", name, record.action, record.into, record.detail
        )
        records.append(record)
    return FoldResult(tuple(records), tuple(folder.values))


class FoldBatchNormPass(ir.passes.InPlacePass):
    """`fold_batch_norm` as an onnx-ir pass; ``records`` holds the last call's records."""

    def __init__(
        self,
        low_dtype: ir.DataType = ir.DataType.FLOAT16,
        value_types: Mapping[str, onnx.TypeProto] | None = None,
        names: UniqueNames | None = None,
    ) -> None:
        super().__init__()
        self.low_dtype = low_dtype
        self.value_types = value_types
        self.names = names
        self.records: tuple[FoldNote, ...] = ()

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        result = fold_batch_norm(model, self.low_dtype, self.value_types, self.names)
        self.records = result.records
        return ir.passes.PassResult(model, modified=result.modified)


class _Folder:
    """One fold's private state: the model, its inferred types (computed at most once), names."""

    def __init__(
        self,
        model: ir.Model,
        low_dtype: ir.DataType,
        value_types: Mapping[str, onnx.TypeProto] | None,
        names: UniqueNames,
    ) -> None:
        self.low_dtype = low_dtype
        self._model = model
        self._value_types = value_types
        self._names = names
        self.values: list[ValueRecord] = []

    def rewrite(self, bn: ir.Node, name: str, opset: int) -> FoldNote:
        check_inference(bn, opset)
        scale, bias, mean, var = statistics(bn)
        eps = float(attr(bn, "epsilon", 1e-5))
        denom = var + eps
        if not np.all(denom > 0):
            raise Kept(f"var + epsilon <= 0 in {int(np.sum(~(denom > 0)))} channel(s)")
        s = scale / np.sqrt(denom)
        shift = bias - mean * s
        x = bn.inputs[0]
        assert x is not None  # statistics checked the inputs
        producer, why_not = self._fold_target(bn, x, s.size)
        if producer is not None:  # its FLOAT weight makes X FLOAT too (one type variable)
            return self._fold(bn, name, producer, s, shift)
        dtype = self._dtype(x, bn)
        if dtype is not None and dtype != FLOAT:
            raise Kept(f"input is {dtype.name}; only FLOAT BatchNormalization is rewritten")
        if dtype is None:
            raise Kept(f"not folded ({why_not}); the element type of the input is unknown")
        rank = self._rank(x) or self._rank(bn.outputs[0])
        if rank is None:
            raise Kept(f"not folded ({why_not}); the rank of the input is unknown")
        if rank < 2:
            raise Kept(f"input has rank {rank}; BatchNormalization needs N x C x ...")
        return self._decompose(bn, name, s, shift, rank, why_not)

    # -- facts about values --------------------------------------------------------------------
    def _dtype(self, x: ir.Value, bn: ir.Node) -> ir.DataType | None:
        for value in (x, bn.outputs[0]):
            if value.dtype is not None:
                return value.dtype
        t = self._types().get(x.name or "")
        if t is not None and t.HasField("tensor_type") and t.tensor_type.elem_type:
            return ir.DataType(t.tensor_type.elem_type)
        return None

    def _rank(self, value: ir.Value) -> int | None:
        if value.shape is not None:
            return len(value.shape)
        t = self._types().get(value.name or "")
        if t is not None and t.HasField("tensor_type") and t.tensor_type.HasField("shape"):
            return len(t.tensor_type.shape.dim)
        return None

    def _types(self) -> Mapping[str, onnx.TypeProto]:
        """Inferred types by value name: given, or inferred once on the weight-stripped model."""
        if self._value_types is None:
            self._value_types = call_on_stripped(self._model, inferred_types)
        return self._value_types

    def _fresh(self, base: str) -> str:
        return self._names.take(base)

    # -- folding -------------------------------------------------------------------------------
    def _fold_target(self, bn: ir.Node, x: ir.Value, channels: int) -> tuple[ir.Node | None, str]:
        """The node to fold into, or None and why not."""
        producer = x.producer()
        if producer is None:
            return None, "its input is a graph input or initializer"
        if not is_onnx(producer, *FOLD_TARGETS):
            return None, f"its input comes from {producer.op_type}, not {'/'.join(FOLD_TARGETS)}"
        label = f"{producer.op_type} {producer.name!r}"
        if producer.graph is not bn.graph:
            return None, f"{label} is in another graph"
        if len(x.uses()) != 1 or x.is_graph_output():
            return None, f"the output of {label} has other readers"
        if len(producer.inputs) < 2 or producer.inputs[1] is None:
            return None, f"{label} has no weight input"
        weight = constant_tensor(producer.inputs[1])
        if weight is None or weight.dtype != FLOAT:
            return None, f"the weight of {label} is not a constant FLOAT tensor"
        if producer.op_type != "MatMul" and len(producer.inputs) > 2:
            c = producer.inputs[2]
            if c is not None and constant_tensor(c) is None:
                return None, f"the bias of {label} is not constant"
        wshape = tuple(weight.shape.numpy())  # a constant's shape is static
        problem = self._layout_problem(producer, x, wshape, channels)
        if problem:
            return None, f"{label}: {problem}"
        return producer, ""

    def _layout_problem(
        self, producer: ir.Node, x: ir.Value, wshape: tuple[int, ...], channels: int
    ) -> str:
        op = producer.op_type
        if op in ("Conv", "ConvTranspose"):
            if len(wshape) < 3:
                return f"weight has rank {len(wshape)}"
            if op == "Conv":
                out = wshape[0]
            else:
                group = int(attr(producer, "group", 1))
                if group < 1 or wshape[0] % group:
                    return f"weight dim 0 ({wshape[0]}) is not divisible by group {group}"
                out = group * wshape[1]
        else:
            if len(wshape) != 2:
                return f"weight has rank {len(wshape)}, not 2"
            trans_b = op == "Gemm" and int(attr(producer, "transB", 0))
            out = wshape[0] if trans_b else wshape[1]
            if op == "MatMul":
                rank = self._rank(x) or (
                    self._rank(producer.inputs[0]) if producer.inputs[0] is not None else None
                )
                if rank is None:
                    return "the rank of its output is unknown"
                if rank != 2:
                    return f"output has rank {rank}; BN's channel axis 1 is not the weight's axis"
        if out != channels:
            return f"{out} output channels, BN has {channels}"
        return ""

    def _fold(
        self,
        bn: ir.Node,
        name: str,
        producer: ir.Node,
        s: np.ndarray,
        shift: np.ndarray,
    ) -> FoldNote:
        op = producer.op_type
        w_value = producer.inputs[1]
        assert w_value is not None
        w_tensor = constant_tensor(w_value)
        assert w_tensor is not None
        w_stored = w_tensor.numpy()
        w = w_stored.astype(np.float64)
        if op == "Conv":
            w_new = w * shaped(s, 0, w.ndim)
            axis = "axis 0"
        elif op == "ConvTranspose":
            group = int(attr(producer, "group", 1))
            # W is [C_in, C_out/group, k...]; output channel g*C_out/group + j is W[g-th block, j]
            grouped = w.reshape(group, w.shape[0] // group, *w.shape[1:])
            per_group = s.reshape(group, 1, w.shape[1], *[1] * (w.ndim - 2))
            w_new = (grouped * per_group).reshape(w.shape)
            axis = f"axis 1, group {group}"
        elif op == "Gemm" and int(attr(producer, "transB", 0)):
            w_new = w * s[:, None]
            axis = "axis 0 (transB=1)"
        else:
            w_new = w * s[None, :]
            axis = "axis 1"
        old_bias = None
        if op != "MatMul" and len(producer.inputs) > 2 and producer.inputs[2] is not None:
            bias_tensor = constant_tensor(producer.inputs[2])
            assert bias_tensor is not None
            old_bias = bias_tensor.numpy().astype(np.float64)
        if op == "Gemm":
            beta = float(attr(producer, "beta", 1.0))
            b_new = shift if old_bias is None else beta * old_bias * s + shift
        else:
            b_new = shift if old_bias is None else old_bias * s + shift
        w32, b32 = to_float32(w_new), to_float32(b_new)
        group = int(attr(producer, "group", 1))
        channel = output_channels(op, w32.shape, group, bool(int(attr(producer, "transB", 0))))
        problem = (
            self._range_problem("folded weight", w32)
            or self._channel_problem(w32, w_stored, channel, s.size)
            or self._range_problem("folded bias", b32)
        )
        if problem:
            raise Kept(f"not folded into {op} {producer.name!r}: {problem}")
        graph = producer.graph
        assert graph is not None
        base = producer.name or name
        why = f"BatchNormalization {name!r} folded into {op} {producer.name!r}"
        self.values.append(Folded(producer.outputs[0], producer.name or "", why))
        self.values.append(NodeFolded(bn, producer.name or "", why))
        self._set_constant(producer, 1, w32, f"{base}/weight_bn_folded")
        if op == "MatMul":
            b_value = self._initializer(graph, f"{base}/bias_bn_folded", b32)
            out = ir.Value(name=self._fresh(f"{base}/bias_bn_folded_out"))
            add = ir.Node(
                "",
                "Add",
                [producer.outputs[0], b_value],
                outputs=[out],
                name=self._fresh(f"{base}/bias_bn_folded/Add"),
            )
            graph.insert_after(bn, add)
            result = out
        else:
            if len(producer.inputs) < 3:
                producer.resize_inputs(3)
            self._set_constant(producer, 2, b32, f"{base}/bias_bn_folded")
            if op == "Gemm":
                producer.attributes["beta"] = ir.AttrFloat32("beta", 1.0)
            result = producer.outputs[0]
        self._replace_bn(bn, result, why)
        bias_how = "added by a new Add" if op == "MatMul" else "(b - mean)*s + B"
        detail = f"W*s on {axis}, bias {bias_how}; s = scale/sqrt(var+eps) in float64"
        return FoldNote(name, "folded", producer.name or "", detail)

    # -- decomposition -------------------------------------------------------------------------
    def _decompose(
        self, bn: ir.Node, name: str, s: np.ndarray, shift: np.ndarray, rank: int, why_not: str
    ) -> FoldNote:
        s32 = to_float32(shaped(s, 0, rank - 1))
        shift32 = to_float32(shaped(shift, 0, rank - 1))
        problem = self._range_problem(
            "scale/sqrt(var+eps)", s32, multiplicative=True
        ) or self._range_problem("B - mean*scale/sqrt(var+eps)", shift32)
        if problem:
            raise Kept(f"not decomposed: {problem}")
        graph = bn.graph
        assert graph is not None
        x = bn.inputs[0]
        s_value = self._initializer(graph, f"{name}/scale_bn_decomposed", s32)
        b_value = self._initializer(graph, f"{name}/bias_bn_decomposed", shift32)
        mul_out = ir.Value(name=self._fresh(f"{name}/Mul_out"))
        mul = ir.Node("", "Mul", [x, s_value], outputs=[mul_out], name=self._fresh(f"{name}/Mul"))
        add_out = ir.Value(name=self._fresh(f"{name}/Add_out"))
        add = ir.Node(
            "", "Add", [mul_out, b_value], outputs=[add_out], name=self._fresh(f"{name}/Add")
        )
        graph.insert_after(bn, [mul, add])
        mul_out.dtype = FLOAT
        mul_out.shape = bn.outputs[0].shape
        why = f"BatchNormalization {name!r} decomposed into Mul + Add"
        self.values.append(NodeCarried(bn, add, why))
        self._replace_bn(bn, add_out, why)
        shape = "x".join(str(d) for d in s32.shape)
        detail = f"Mul + Add with float64 constants of shape [{shape}] ({why_not})"
        return FoldNote(name, "decomposed", "", detail)

    # -- graph surgery -------------------------------------------------------------------------
    def _initializer(self, graph: ir.Graph, base: str, array: np.ndarray) -> ir.Value:
        name = self._fresh(base)
        value = ir.Value(
            name=name,
            type=ir.TensorType(FLOAT),
            shape=ir.Shape(array.shape),
            const_value=ir.Tensor(array, name=name),
        )
        graph.register_initializer(value)
        return value

    def _set_constant(self, node: ir.Node, index: int, array: np.ndarray, base: str) -> None:
        """Give ``node`` input ``index`` the value ``array``: in place if only it reads it."""
        old = node.inputs[index]
        if (
            old is not None
            and old.is_initializer()
            and not old.is_graph_input()
            and not old.is_graph_output()
            and len(old.uses()) == 1
        ):
            old.const_value = ir.Tensor(array, name=old.name)
            old.shape = ir.Shape(array.shape)
            why = f"BatchNormalization folded into {node.op_type} {node.name!r}"
            self.values.append(Folded(old, node.name or "", why))
            return
        graph = node.graph
        assert graph is not None
        new = self._initializer(graph, base, array)
        node.replace_input_with(index, new)
        if old is not None:
            if not old.uses() and not old.is_graph_output():
                why = f"BatchNormalization folded into {node.op_type} {node.name!r}"
                self.values.append(Folded(old, new.name or "", why))
            drop_if_dead(old)

    def _replace_bn(self, bn: ir.Node, result: ir.Value, why: str) -> None:
        """Readers of the BN's output read ``result``; the BN and its dead constants go."""
        old = bn.outputs[0]
        self.values.append(Carried(old, result, why))
        producer = result.producer()
        into = (producer.name or "") if producer is not None else ""
        for value in bn.inputs[1:]:
            if value is not None and len(value.uses()) == 1 and not value.is_graph_output():
                self.values.append(Folded(value, into, why))
        if result.dtype is None:
            result.dtype = old.dtype if old.dtype is not None else FLOAT
        if result.shape is None and old.shape is not None:
            result.shape = old.shape
        if old.is_graph_output():  # the output keeps its name
            name = old.name
            old.name = self._fresh(f"{name}_bn_removed")
            result.name = name
        old.replace_all_uses_with(result, replace_graph_outputs=True)
        graph = bn.graph
        assert graph is not None
        stats = list(bn.inputs[1:])
        graph.remove(bn, safe=True)
        for value in stats:
            if value is not None:
                drop_if_dead(value)

    # -- range check ---------------------------------------------------------------------------
    def _channel_problem(
        self, folded: np.ndarray, stored: np.ndarray, channel: np.ndarray, channels: int
    ) -> str | None:
        """Why the folded weight's underflow harms some output channel, or None (see module)."""
        limits = low_type_of(self.low_dtype) if self.low_dtype in LOW_TYPES else None
        if limits is None or folded.size == 0:
            return None
        after = channel_range_loss(folded, channel, channels, limits)
        before = channel_range_loss(stored, channel, channels, limits)
        # a channel whose unfolded weight already loses more than the roundoff is the weight's
        # own case (the weight check judges it with or without the fold), not the fold's
        excess = np.where(before <= limits.roundoff, after - before, 0.0)
        worst = int(np.argmax(excess))
        if excess[worst] <= limits.roundoff:
            return None
        share, unfolded = subnormal_share(np.abs(folded)), subnormal_share(np.abs(stored))
        return (
            f"folded weight would underflow into {limits.name.lower().replace('fp', 'float')} "
            f"subnormals: {share:.1%} of its nonzero values are below {limits.min_normal:.2g} "
            f"(unfolded {unfolded:.1%}); output channel {worst} loses {after[worst]:.3%} of its "
            f"norm (ordinary rounding: at most {limits.roundoff:.3%})"
        )

    def _range_problem(
        self, what: str, values: np.ndarray, *, multiplicative: bool = False, before: float = 0.0
    ) -> str | None:
        """Why ``values`` (float32, as stored) cannot be trusted in the low type, or None.

        ``before`` is the subnormal share of the unfolded weight, which the fold is not blamed for.
        """
        magnitude = np.abs(values)
        if not np.all(np.isfinite(magnitude)):
            return f"{what} is not finite in float32"
        if magnitude.size == 0 or self.low_dtype != ir.DataType.FLOAT16:
            return None
        peak = float(magnitude.max())
        if peak > FP16.max:
            return f"{what} would overflow float16: max |v| = {peak:.4g} > {FP16.max:g}"
        if not multiplicative:
            return None  # additive: a subnormal next to O(1) activations is harmless
        share = subnormal_share(magnitude)
        if share - before > UNDERFLOW_FRACTION:
            return (
                f"{what} would underflow into float16 subnormals: {share:.1%} of its nonzero "
                f"values are below {FP16.min_normal:.2g} (unfolded {before:.1%})"
            )
        return None
