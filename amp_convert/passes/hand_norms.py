"""Hand-written LayerNorm / RMSNorm get what LayerNormalization with stash_type=1 gets.

A fused LayerNormalization (opset >= 17) keeps its mean and variance in FP32 through
``stash_type = 1`` while its input and output are low precision, and needs no Cast between low
neighbours. The same norm written out by an exporter (norm_match.py) would otherwise be placed op
by op: ReduceMean and Pow are on the deny list, FP32 spreads forward through the affine part and
beyond, and each norm costs casts and FP32 traffic (16 casts on two OCR recognisers).

- Where the opset has the fused op, the match is folded into it: LayerNormalization (opset >= 17)
  or RMSNormalization (opset >= 23), axis = the first normalised axis, the constant gamma/beta as
  Scale/B, stash_type = 1. Same math (float64 check in the tests), one node, no casts.
- Below those opsets, for a target that wants it (``Rewrite.RUNTIME_NORMS``: the ORT targets), into
  ONNX Runtime's own ai.onnx-domain ops, which ORT registers for every opset from 1
  (contrib_defs.cc, with ``stash_type``) and whose kernels the target's table lists:
  LayerNormalization-1 for a LayerNorm, SimplifiedLayerNormalization-1 for an RMSNorm (the op
  onnxruntime-genai's builder and ORT's transformers optimizer write). Their CUDA kernels keep the
  statistics in FP32 (LayerNorm<MLFloat16, float, ...>: targets/ort_cuda_accumulation.json), so they
  take low I/O like the opset-17 op. onnx's checker does not know them; our checks hide them in a
  domain of their own (onnx_checks.hide_runtime_ops), as for any model that already has them.
- Otherwise (``--target none`` below the fused op's opset, an unknown rank, non-trailing axes) the
  statistics nodes (the reductions, the square, + eps, Sqrt, 1/x) are pinned FP32 after
  classify, with that reason, and everything else is left to placement: the centring Sub, the
  normalising Div/Mul and the affine part are free to be low, so only the full-size values the
  statistics read cross a Cast.

A norm written around a reshape to (N, 1, -1), as torch's dynamo exporter writes GroupNorm(1, C)
(timm MobileViTv2's GroupNorm1), is a LayerNorm over the last axis of the reshaped value: it folds
the same way, and the per-channel affine after the reshape back stays as it was. Where the
normalised sizes are known at run time only (that -1 under a dynamic batch), the fused op's Scale
is ``ConstantOfShape(Shape(x)[axis:], 1)`` and the affine part stays outside.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from amp_convert import schema
from amp_convert.core import domains, walk
from amp_convert.core.precision import FLOAT, UniqueNames, constant_tensor
from amp_convert.core.reasons import Reason, ReasonKind
from amp_convert.core.steps import StepResult
from amp_convert.options.convert import Level
from amp_convert.passes._moments_match import find_moments
from amp_convert.passes._norm_match import NoMatch, NormMatch, find_norms
from amp_convert.placement.plan import Classes
from amp_convert.reports.conversion import FoldNote
from amp_convert.reports.value_map import Carried, Folded, NodeCarried, NodeFolded, ValueRecord
from amp_convert.targets import Rewrite, Target

#: fused op and the opset it appears at, per norm kind
FUSED = {"layer": ("LayerNormalization", 17), "rms": ("RMSNormalization", 23)}
#: ONNX Runtime's own ai.onnx-domain op for the norm kind, registered from version 1
RUNTIME_FUSED = {"layer": "LayerNormalization", "rms": "SimplifiedLayerNormalization"}


def runtime_fused_op(kind: str, opset: int, target: Target) -> str | None:
    """The runtime's ai.onnx op a norm of `kind` folds into at `opset` on `target`, or None:
    only for a target that wants the fold and whose kernel table has the op."""
    op = RUNTIME_FUSED[kind]
    if not target.wants(Rewrite.RUNTIME_NORMS) or schema.runtime_schema(op, "", opset) is None:
        return None
    fp32 = [FLOAT, FLOAT]
    return op if target.kernels.accepts(op, "", opset, fp32, [FLOAT]) is None else None


def _dims(value: ir.Value, inferred: Mapping[str, onnx.TypeProto]) -> list[int | None] | None:
    """The value's dims (None where not static), from its own shape or ONNX inference."""
    if value.shape is not None:
        return [d if isinstance(d, int) else None for d in value.shape]
    tp = inferred.get(value.name or "")
    if (
        tp is None
        or tp.WhichOneof("value") != "tensor_type"
        or not tp.tensor_type.HasField("shape")
    ):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in tp.tensor_type.shape.dim]


def _normalised_dims(
    match: NormMatch, inferred: Mapping[str, onnx.TypeProto]
) -> tuple[int, list[int] | None] | None:
    """(first normalised axis as a negative index, static sizes of the normalised dims or None
    where a size is not static); None where the axes are not trailing (or cannot be known to be).

    Where ONNX inference loses the input's shape (paddle2onnx's Reshape to a Concat of Shape
    slices, then a Transpose: PP-OCRv4's recogniser at opset 12), the rank is taken from a
    producing Transpose's perm, and trailing negative axes (``axes=[-1]``) need no rank at all;
    the sizes then come from the affine weights (`_sizes_from_weights`).
    """
    shape = _dims(match.x, inferred)
    if shape is None:
        rank = _rank_from_producer(match.x)
        if rank is None:
            first = sorted(match.axes)
            if first[0] >= 0 or first != list(range(first[0], 0)):
                return None  # rank unknown: only axes counted from the end are known trailing
            return first[0], _sizes_from_weights(match, len(first))
        shape = [None] * rank
    rank = len(shape)
    axes = sorted(a % rank for a in match.axes)
    if axes != list(range(axes[0], rank)):
        return None  # LayerNormalization normalises trailing axes only
    dims = [shape[a] for a in axes]
    if any(d is None for d in dims):
        return axes[0] - rank, _sizes_from_weights(match, len(axes))
    return axes[0] - rank, [int(d) for d in dims]  # type: ignore[arg-type]


def _rank_from_producer(value: ir.Value) -> int | None:
    """The rank a Transpose's perm gives its output (inference may lose what perm says)."""
    producer = value.producer()
    if (
        producer is None
        or producer.op_type != "Transpose"
        or not domains.is_default(producer.domain)
    ):
        return None
    perm = producer.attributes.get("perm")
    return None if perm is None else len(perm.value)


def _sizes_from_weights(match: NormMatch, count: int) -> list[int] | None:
    """The normalised dims' sizes read off the affine weights (gamma, else beta): their shape,
    right-aligned on the `count` normalised axes, must give every size (a 1 there could be a
    broadcast, so it gives none), and anything before those axes must be 1."""
    last = match.normalised
    operands: list[ir.Value | None] = [match.inner_scale]
    for node in (match.gamma, match.beta):
        if node is not None:
            operands.append(node.inputs[1] if node.inputs[0] is last else node.inputs[0])
            last = node.outputs[0]
    for other in operands:
        tensor = constant_tensor(other) if other is not None else None
        if tensor is None:
            continue
        shape = [int(d) for d in tensor.shape.numpy()]
        lead, tail = shape[: max(0, len(shape) - count)], shape[max(0, len(shape) - count) :]
        if len(tail) == count and all(d > 1 for d in tail) and all(d == 1 for d in lead):
            return tail
    return None


def _param(node: ir.Node | None, out: ir.Value, dims: list[int]) -> np.ndarray | None:
    """The constant operand of an affine Mul/Add, shaped as the normalised dims, or None."""
    if node is None:
        return None
    return _constant_param(node.inputs[1] if node.inputs[0] is out else node.inputs[0], dims)


def _constant_param(other: ir.Value | None, dims: list[int]) -> np.ndarray | None:
    """A constant shaped (after broadcasting) as the normalised dims, or None."""
    tensor = constant_tensor(other) if other is not None else None
    if tensor is None or tensor.dtype != FLOAT or tensor.size != int(np.prod(dims)):
        return None
    array = np.asarray(tensor.numpy(), dtype=np.float32)
    # broadcast shape (1, 1, H) or (H,) only: the constant must lie along the normalised dims
    if [d for d in array.shape if d != 1] != [d for d in dims if d != 1]:
        return None
    return array.reshape(dims)


def _mean_factor(match: NormMatch) -> float:
    """The factor a ReduceSum-spelled mean applies (moments_match notes it), 1 otherwise."""
    for note in match.notes:
        if note.startswith("mean_factor="):
            return float(note.removeprefix("mean_factor="))
    return 1.0


def _mean_factor_fits(match: NormMatch, dims: list[int]) -> bool:
    """A ReduceSum-spelled mean is a mean: its factor is 1/n for the n values it sums."""
    factor = _mean_factor(match)
    return factor == 1.0 or abs(factor * float(np.prod(dims)) - 1.0) <= 1e-5


def _carried_name(match: NormMatch, fallback: str, names: UniqueNames) -> str:
    """The fused node takes the name of the node that produced the norm's output: the value it
    carries keeps its name too, so a user's --exclude-nodes and --auto's pins (which name the
    producer of the value where the error shows) still reach the norm."""
    producer = match.output.producer()
    return producer.name if producer is not None and producer.name else names.take(fallback)


@dataclass(frozen=True)
class NormsResult(StepResult):
    """What `rewrite_hand_norms` did: a note per norm, the near misses, and the statistics nodes
    of the norms it could not fold (node -> reason) for `pin_norm_statistics` after classify."""

    notes: tuple[FoldNote, ...] = ()
    misses: tuple[NoMatch, ...] = ()
    pinned: Mapping[ir.Node, str] = field(default_factory=dict, repr=False)
    #: the norms' values and nodes merged into the fused op (for the value map)
    values: tuple[ValueRecord, ...] = field(default=(), compare=False, repr=False)

    @property
    def modified(self) -> bool:
        return any(n.into.startswith("run as") for n in self.notes)


def rewrite_hand_norms(
    model: ir.Model,
    names: UniqueNames,
    inferred: Mapping[str, onnx.TypeProto],
    target: Target,
) -> NormsResult:
    """Fold hand-written norms where the opset (or the target) has a fused op; name the statistics
    of the rest. Each graph (subgraphs included) is matched on its own nodes."""
    folder = _Folder(names, inferred, target)
    opset = domains.opset_version(model.opset_imports)
    graphs: dict[int, tuple[ir.Graph, list[ir.Node]]] = {}
    for node in walk.all_nodes(model.graph):
        if node.graph is not None:
            graphs.setdefault(id(node.graph), (node.graph, []))[1].append(node)
    notes: list[FoldNote] = []
    misses: list[NoMatch] = []
    pinned: dict[ir.Node, str] = {}
    for graph, nodes in graphs.values():
        found, missed = find_norms(nodes, opset)
        found += find_moments(nodes, opset, {id(n) for m in found for n in m.nodes})
        misses.extend(missed)
        for match in found:
            if match.x.dtype != FLOAT:
                continue
            first = match.stats[0].name or ""
            kind = "LayerNorm" if match.kind == "layer" else "RMSNorm"
            fused = folder.fold(graph, match, opset)
            if fused:
                notes.append(FoldNote(first, f"hand-written {kind}", f"run as {fused}", ""))
                continue
            reason = f"statistics of a hand-written {kind} (from {first}): FP32 like stash_type=1"
            pinned.update((node, reason) for node in match.stats)
            notes.append(FoldNote(first, f"hand-written {kind}", "statistics FP32", ""))
    return NormsResult(
        tuple(notes), tuple(misses), types.MappingProxyType(pinned), tuple(folder.values)
    )


def pin_norm_statistics(classes: Classes, norms: NormsResult, level: Level) -> Classes:
    """The classes with the statistics of unfolded hand-written norms pinned FP32 at O1/O2 (never
    a node the user decided); the data path (centring, normalising, affine) is left to placement.
    O3 puts everything low, as it does with the deny list."""
    if not norms.pinned or not level.places_free_nodes:
        return classes
    out = dict(classes)
    for node, detail in norms.pinned.items():
        info = out.get(node)
        if info is None or info.user or not info.candidate:
            continue
        out[node] = info.pinned(Reason(ReasonKind.NORM_STATISTICS, "hand-written norm", detail))
    return Classes(out)


class _Folder:
    """rewrite_hand_norms' private state: the name registry and the shapes it folds with."""

    def __init__(
        self, names: UniqueNames, inferred: Mapping[str, onnx.TypeProto], target: Target
    ) -> None:
        self.names = names
        self.inferred = inferred
        self.target = target
        self.values: list[ValueRecord] = []

    def _record(self, match: NormMatch, fused: ir.Node, out: ir.Value) -> None:
        """The norm's output is carried by ``out``; its other values and nodes are in ``fused``."""
        why = f"hand-written norm run as {fused.op_type} {fused.name!r}"
        into = fused.name or ""
        last = match.output.producer()
        self.values.append(Carried(match.output, out, why))
        for node in match.nodes:
            if node is last:
                self.values.append(NodeCarried(node, fused, why))
            else:
                self.values.append(NodeFolded(node, into, why))
            for value in node.outputs:
                if value is not match.output:
                    self.values.append(Folded(value, into, why))

    def fold(self, graph: ir.Graph, match: NormMatch, opset: int) -> str:
        """Replace `match` by a fused op; the op's name, or "" when it cannot be folded."""
        op, since = FUSED[match.kind]
        layout = _normalised_dims(match, self.inferred)
        if layout is None:
            return ""
        if opset < since:
            runtime_op = runtime_fused_op(match.kind, opset, self.target)
            if runtime_op is None:
                return ""
            op = runtime_op
        axis, dims = layout
        base = match.stats[0].name or "norm"
        inputs: list[ir.Value | None] = [match.x]
        made: list[ir.Node] = []
        if dims is None and (match.inner_scale is not None or _mean_factor(match) != 1.0):
            return ""  # a scale inside the statistics, or a 1/n nothing checks: not folded
        if dims is None:  # sizes known at run time only (a reshape to (N, 1, -1)): unit scale
            match.gamma = match.beta = None  # the affine part stays as it is
            ones = self._ones_of_shape(graph, match.x, axis, opset, base)
            if ones is None:
                return ""
            made, scale_value = ones
            inputs.append(scale_value)
        else:
            if not _mean_factor_fits(match, dims):
                return ""
            last = match.normalised
            gamma = _param(match.gamma, last, dims)
            if match.inner_scale is not None:  # inside the statistics: fold it or nothing
                gamma = _constant_param(match.inner_scale, dims)
                if gamma is None:
                    return ""
            if match.gamma is not None and gamma is None:
                match.gamma = match.beta = None  # keep a non-constant affine part as it is
            last = match.gamma.outputs[0] if match.gamma is not None else last
            beta = _param(match.beta, last, dims) if match.kind == "layer" else None
            if match.beta is not None and beta is None:
                match.beta = None
            scale = (gamma if gamma is not None else np.ones(dims)).astype(np.float32)
            inputs.append(self._initializer(graph, f"{base}/scale", scale))
            if beta is not None:
                inputs.append(self._initializer(graph, f"{base}/bias", beta.astype(np.float32)))
        out = ir.Value(name=self.names.take(f"{base}/{op}_out"), type=ir.TensorType(FLOAT))
        fused = ir.Node(
            "",
            op,
            inputs,
            outputs=[out],
            name=_carried_name(match, f"{base}/{op}", self.names),
            attributes=[
                ir.AttrInt64("axis", axis),
                ir.AttrFloat32("epsilon", match.epsilon),
                ir.AttrInt64("stash_type", 1),
            ],
        )
        old = match.nodes
        self._record(match, fused, out)
        consts = {id(v): v for n in old for v in n.inputs if v is not None and v.is_initializer()}
        ir.convenience.replace_nodes_and_values(
            graph, match.output.producer() or old[-1], old, [*made, fused], [match.output], [out]
        )
        self._drop_dead(graph, consts.values(), fused)
        return op

    def _drop_dead(self, graph: ir.Graph, values: Iterable[ir.Value], fused: ir.Node) -> None:
        """The norm's constants nobody reads any more (its eps, exponent, gamma and beta, now
        the fused op's attributes and Scale/B) leave the graph instead of staying FP32 there."""
        why = f"hand-written norm run as {fused.op_type} {fused.name!r}"
        for value in values:
            if value.uses() or value.is_graph_input() or value.is_graph_output():
                continue
            if value.graph is graph and value.name is not None and value.name in graph.initializers:
                graph.initializers.pop(value.name)
                self.values.append(Folded(value, fused.name or "", why))

    def _ones_of_shape(
        self, graph: ir.Graph, x: ir.Value, axis: int, opset: int, base: str
    ) -> tuple[list[ir.Node], ir.Value] | None:
        """Nodes computing ones shaped like x's dims from `axis` on (the fused op's Scale where
        those sizes are not static), and their output; None below opset 10 (Slice by inputs)."""
        take = self.names.take
        dims = ir.Value(name=take(f"{base}/norm_dims"), type=ir.TensorType(ir.DataType.INT64))
        if opset >= 15:
            shape = [
                ir.Node(
                    "",
                    "Shape",
                    [x],
                    [ir.AttrInt64("start", axis)],
                    outputs=[dims],
                    name=take(f"{base}/Shape"),
                )
            ]
        elif opset >= 10:
            full = ir.Value(name=take(f"{base}/x_shape"), type=ir.TensorType(ir.DataType.INT64))
            start = self._initializer(graph, f"{base}/from_axis", np.array([axis], np.int64))
            end = self._initializer(
                graph, f"{base}/to_end", np.array([np.iinfo(np.int64).max], np.int64)
            )
            shape = [
                ir.Node("", "Shape", [x], outputs=[full], name=take(f"{base}/Shape")),
                ir.Node(
                    "", "Slice", [full, start, end], outputs=[dims], name=take(f"{base}/Slice")
                ),
            ]
        else:
            return None
        ones = ir.Value(name=take(f"{base}/scale"), type=ir.TensorType(FLOAT))
        one = ir.tensor(np.ones(1, np.float32), name=f"{base}/one")
        fill = ir.Node(
            "",
            "ConstantOfShape",
            [dims],
            [ir.AttrTensor("value", one)],
            outputs=[ones],
            name=take(f"{base}/ConstantOfShape"),
        )
        return [*shape, fill], ones

    def _initializer(self, graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
        tensor = ir.Tensor(np.ascontiguousarray(array))
        value = ir.Value(
            name=self.names.take(name),
            type=ir.TensorType(tensor.dtype),
            shape=ir.Shape(array.shape),
            const_value=tensor,
        )
        graph.register_initializer(value)
        return value
