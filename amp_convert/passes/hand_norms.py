"""Hand-written LayerNorm / RMSNorm get what LayerNormalization with stash_type=1 gets.

A fused LayerNormalization (opset >= 17) keeps its mean and variance in FP32 through
``stash_type = 1`` while its input and output are low precision, and needs no Cast between low
neighbours. The same norm written out by an exporter (norm_match.py) would otherwise be placed op
by op: ReduceMean and Pow are on the deny list, FP32 spreads forward through the affine part and
beyond, and each norm costs casts and FP32 traffic (16 casts on two OCR recognisers).

- Where the opset has the fused op, the match is folded into it: LayerNormalization (opset >= 17)
  or RMSNormalization (opset >= 23), axis = the first normalised axis, the constant gamma/beta as
  Scale/B, stash_type = 1. Same math (float64 check in the tests), one node, no casts.
- Below opset 17, for a target that wants it (``Rewrite.LAYERNORM_AS_INSTANCENORM``: ORT CUDA),
  a LayerNorm over trailing axes of static size H runs as
  ``Reshape(x, [-1, 1, H])`` -> InstanceNormalization(scale [1], bias [0]) -> ``Reshape`` back to
  ``Shape(x)``: per row the same mean, biased variance and epsilon, and ORT's CUDA InstanceNorm
  keeps its statistics in FP32 for FP16 I/O (nn/instance_norm.cc, InstanceNorm<MLFloat16>:
  float stats descriptor and buffers; cuDNN >= 7.5 no longer clamps epsilon to 1e-5).
- Otherwise (other targets, RMSNorm below opset 23, unknown sizes) the statistics nodes (the
  reductions, the square, + eps, Sqrt, 1/x) are pinned FP32 after classify, with that reason, and
  everything else is left to placement: the centring Sub, the normalising Div/Mul and the affine
  part are free to be low, so only the full-size values the statistics read cross a Cast.

ORT's own LayerNormalization-1 / SimplifiedLayerNormalization in the ai.onnx domain would fold
below opset 17 too, but ONNX's checker rejects them there, and every result must pass it.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from amp_convert import domains
from amp_convert.options import Level
from amp_convert.passes.norm_match import NoMatch, NormMatch, find_norms
from amp_convert.passes.plan import Classes
from amp_convert.precision import FLOAT, UniqueNames, constant_tensor
from amp_convert.reasons import Reason, ReasonKind
from amp_convert.report import FoldNote
from amp_convert.targets import Rewrite, Target
from amp_convert.value_map import Carried, Folded, NodeCarried, NodeFolded, ValueRecord

#: fused op and the opset it appears at, per norm kind
FUSED = {"layer": ("LayerNormalization", 17), "rms": ("RMSNormalization", 23)}


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


def _named_dims(value: ir.Value, inferred: Mapping[str, onnx.TypeProto]) -> list[int | str]:
    """The value's dims as ints or dim names ("" where ONNX knows nothing)."""
    if value.shape is not None:
        return [d if isinstance(d, int) else (d.value or "") for d in value.shape]
    tp = inferred.get(value.name or "")
    if tp is None or tp.WhichOneof("value") != "tensor_type":
        return []
    return [
        d.dim_value if d.HasField("dim_value") else d.dim_param for d in tp.tensor_type.shape.dim
    ]


def _rows_shape(x: ir.Value, inferred: Mapping[str, onnx.TypeProto], size: int) -> ir.Shape:
    """The shape of x as rows of `size`: (leading product, 1, size). A symbolic product is
    written as an expression ("16*batch"), so size estimates see what the reshape holds."""
    dims = _named_dims(x, inferred)
    lead = dims[: len(dims) - 1] if dims else []
    static = int(np.prod([d for d in lead if isinstance(d, int)]))
    names = [d for d in lead if isinstance(d, str)]
    if not dims or "" in names:
        return ir.Shape([None, 1, size])
    if not names:
        return ir.Shape([static, 1, size])
    expr = "*".join(([str(static)] if static != 1 else []) + names)
    return ir.Shape([expr, 1, size])


def _normalised_dims(
    match: NormMatch, inferred: Mapping[str, onnx.TypeProto]
) -> tuple[int, list[int]] | None:
    """(first normalised axis as a negative index, static sizes of the normalised dims)."""
    shape = _dims(match.x, inferred)
    if shape is None:
        return None
    rank = len(shape)
    axes = sorted(a % rank for a in match.axes)
    if axes != list(range(axes[0], rank)):
        return None  # LayerNormalization normalises trailing axes only
    dims = [shape[a] for a in axes]
    if any(d is None for d in dims):
        return None
    return axes[0] - rank, [int(d) for d in dims]  # type: ignore[arg-type]


def _param(node: ir.Node | None, out: ir.Value, dims: list[int]) -> np.ndarray | None:
    """The constant operand of an affine Mul/Add, shaped as the normalised dims, or None."""
    if node is None:
        return None
    other = node.inputs[1] if node.inputs[0] is out else node.inputs[0]
    tensor = constant_tensor(other) if other is not None else None
    if tensor is None or tensor.dtype != FLOAT or tensor.size != int(np.prod(dims)):
        return None
    array = np.asarray(tensor.numpy(), dtype=np.float32)
    # broadcast shape (1, 1, H) or (H,) only: the constant must lie along the normalised dims
    if [d for d in array.shape if d != 1] != [d for d in dims if d != 1]:
        return None
    return array.reshape(dims)


def _carried_name(match: NormMatch, fallback: str, names: UniqueNames) -> str:
    """The fused node takes the name of the node that produced the norm's output: the value it
    carries keeps its name too, so a user's --exclude-nodes and --auto's pins (which name the
    producer of the value where the error shows) still reach the norm."""
    producer = match.output.producer()
    return producer.name if producer is not None and producer.name else names.take(fallback)


@dataclass(frozen=True)
class NormsResult:
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
    for node in model.graph.all_nodes():
        if node.graph is not None:
            graphs.setdefault(id(node.graph), (node.graph, []))[1].append(node)
    notes: list[FoldNote] = []
    misses: list[NoMatch] = []
    pinned: dict[ir.Node, str] = {}
    for graph, nodes in graphs.values():
        found, missed = find_norms(nodes, opset)
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
    if not norms.pinned or level not in (Level.O1, Level.O2):
        return classes
    out = dict(classes)
    for node, detail in norms.pinned.items():
        info = out.get(node)
        if info is None or info.user or not info.candidate:
            continue
        out[node] = info.pinned(Reason(ReasonKind.NORM_STATISTICS, "hand-written norm", detail))
    return types.MappingProxyType(out)


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
            wanted = self.target.wants(Rewrite.LAYERNORM_AS_INSTANCENORM)
            ok = match.kind == "layer" and wanted and opset >= 6
            return self._as_instance_norm(graph, match, layout[1]) if ok else ""
        axis, dims = layout
        base = match.stats[0].name or "norm"
        inputs: list[ir.Value | None] = [match.x]
        last = match.normalised
        gamma = _param(match.gamma, last, dims)
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
            "", op, inputs, outputs=[out], name=_carried_name(match, f"{base}/{op}", self.names),
            attributes=[ir.AttrInt64("axis", axis), ir.AttrFloat32("epsilon", match.epsilon),
                        ir.AttrInt64("stash_type", 1)],
        )  # fmt: skip
        old = match.nodes
        self._record(match, fused, out)
        ir.convenience.replace_nodes_and_values(
            graph, match.output.producer() or old[-1], old, [fused], [match.output], [out]
        )
        return op

    def _as_instance_norm(self, graph: ir.Graph, match: NormMatch, dims: list[int]) -> str:
        """LayerNorm over H trailing elements = InstanceNormalization of rows (N=-1, C=1, H)."""
        base = match.stats[0].name or "norm"
        match.gamma = match.beta = None  # the affine part stays as it is, after the Reshape back
        size = int(np.prod(dims))
        take = self.names.take
        rows_shape = self._initializer(
            graph, f"{base}/rows_shape", np.array([-1, 1, size], np.int64)
        )
        one = self._initializer(graph, f"{base}/in_scale", np.ones(1, np.float32))
        zero = self._initializer(graph, f"{base}/in_bias", np.zeros(1, np.float32))

        def value(name: str, shape: ir.Shape | None, dtype: ir.DataType = FLOAT) -> ir.Value:
            return ir.Value(name=take(f"{base}/{name}"), type=ir.TensorType(dtype), shape=shape)

        rank = len(_named_dims(match.x, self.inferred)) or None
        x_shape = value("x_shape", ir.Shape([rank]) if rank else None, ir.DataType.INT64)
        shape = ir.Node("", "Shape", [match.x], outputs=[x_shape], name=take(f"{base}/Shape"))
        row_dims = _rows_shape(match.x, self.inferred, size)
        rows = ir.Node("", "Reshape", [match.x, rows_shape], outputs=[value("rows", row_dims)],
                       name=take(f"{base}/Reshape"))  # fmt: skip
        norm = ir.Node(
            "", "InstanceNormalization", [rows.outputs[0], one, zero],
            outputs=[value("normalised_rows", row_dims)],
            name=_carried_name(match, f"{base}/InstanceNormalization", self.names),
            attributes=[ir.AttrFloat32("epsilon", match.epsilon)],
        )  # fmt: skip
        out = value("normalised", None)
        back = ir.Node("", "Reshape", [norm.outputs[0], shape.outputs[0]], outputs=[out],
                       name=take(f"{base}/Reshape_back"))  # fmt: skip
        old = match.nodes
        self._record(match, norm, out)
        ir.convenience.replace_nodes_and_values(
            graph, match.output.producer() or old[-1], old, [shape, rows, norm, back],
            [match.output], [out],
        )  # fmt: skip
        return "InstanceNormalization"

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
