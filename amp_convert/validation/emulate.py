"""Build an FP32 copy of a mixed-precision model that rounds like FP16/BF16 hardware would.

Why: ONNX Runtime's CPU provider runs FP16 nodes in FP32 and removes the casts between them, so a
value that overflows FP16 (anything above 65504) or loses bits on a GPU looks fine on CPU, and it
has almost no BF16 kernels at all. The emulated copy computes every node in FP32 and rounds each
value that is FP16/BF16 in the candidate through ``Cast(to=low) -> Cast(to=FLOAT)`` where it is
produced, so rounding and overflow show up exactly where they would on a GPU, on any CPU.

What that models: a kernel with low-precision I/O that computes in FP32 and rounds its outputs
once. That is what ORT's CUDA kernels do for FP16 I/O (Conv/MatMul accumulate in FP32, Softmax,
LayerNormalization with ``stash_type=1`` keep their statistics in FP32), so the emulated error of
``Softmax(fp16)`` equals that of ``Cast→Softmax(fp32)→Cast``. Where the accumulation table
(targets/ort_cuda_accumulation.json) says a kernel holds a sum in the low type (ReduceMean writes
its sum into the FP16 output before dividing), that sum is rounded too (validation/held_sums.py).

The copy is an onnx-ir model built by the converter's own layer: ``InferDtypesPass`` (ONNX
inference on a weight-free serialisation, then schema propagation with ONNX Runtime's contrib
schemas) types every value, and ``EmulatePass`` rewrites it, in every graph including If/Loop/Scan
bodies, with names from ``precision.UniqueNames``:

* a node output that is FP16/BF16 is renamed ``<name>__emu_f32`` and followed by the Cast pair that
  produces ``<name>`` again, so consumers (also inside bodies) are untouched. A ``Cast(to=low)``
  keeps its cast and only gets the Cast back to FLOAT. Ops that only select or move elements
  (``EXACT_OPS``) are exact on already rounded inputs and are skipped; so are If/Loop/Scan outputs,
  which their bodies already rounded;
* FP16/BF16 initializers are renamed ``<name>__emu_low`` and upcast exactly by one Cast to FLOAT;
  main-graph FP16/BF16 inputs become FLOAT inputs, and the caller feeds values already rounded to
  the input's low dtype (``EmulatedModel.low_inputs``), which is an exact upcast;
* dtype attributes that name FLOAT16/BFLOAT16 (``precision.DTYPE_ATTRIBUTES``; Cast ``to`` is the
  rounding itself) become FLOAT, and tensor attributes (Constant / ConstantOfShape ``value``) are
  upcast exactly;
* every other FP16/BF16 type (graph inputs and outputs, values, sequences, optionals) becomes FLOAT;
* an input of a kernel that prepacks what it reads (``CONSTANT_INPUT_OPS``: MatMulNBits' scales)
  that constants alone compute (an Identity or a Cast of an initializer, a Constant node) becomes
  an initializer first (``fold_constant_inputs``), as ORT's constant folding makes it for users:
  the copy runs unoptimised, and the kernel would otherwise read zeros.

The session running the copy must not optimise the Cast pairs away: see
``amp_convert.validation.runtime`` (graph optimisations disabled; the pair survives, proven by the
overflow test).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnx_ir as ir

from amp_convert.core import proto_walk
from amp_convert.core.dtypes import low_type_of, onnx_name
from amp_convert.core.precision import (
    DTYPE_ATTRIBUTES,
    FLOAT,
    LOW_TYPES,
    UniqueNames,
    is_default_domain,
)
from amp_convert.files import load_repairs
from amp_convert.passes.analyse import analyse
from amp_convert.passes.infer_dtypes import InferDtypesPass
from amp_convert.validation import held_sums
from amp_convert.validation.prepacked import fold_constant_inputs, read_as_constant, subgraphs
from amp_convert.validation.providers import runtime_target
from amp_convert.validation.sparse import densified

if TYPE_CHECKING:
    from amp_convert.targets import Target


# Default-domain ops whose outputs only select, move or compare-select input elements: applied to
# values that are already representable in the low dtype they give a representable result, so
# rounding their outputs again would only add nodes. (Ops with float attributes that could bring
# in an unrepresentable value, such as Pad-2 `value` or Clip-6 `min`/`max`, are not here.)
EXACT_OPS = frozenset(
    {
        "Identity",
        "Reshape",
        "Transpose",
        "Squeeze",
        "Unsqueeze",
        "Flatten",
        "Expand",
        "Tile",
        "Gather",
        "GatherElements",
        "GatherND",
        "Slice",
        "Split",
        "Concat",
        "Where",
        "Max",
        "Min",
        "Relu",
        "Neg",
        "Abs",
        "Sign",
        "Ceil",
        "Floor",
        "Round",
        "MaxPool",
        "ReduceMax",
        "ReduceMin",
        "DepthToSpace",
        "SpaceToDepth",
        "Compress",
        "ReverseSequence",
        "TopK",
        "Trilu",
    }
)


@dataclass
class EmulatedModel:
    """The emulated copy plus what was done to it (recorded in the validation report)."""

    model: onnx.ModelProto
    #: main-graph inputs that were FP16/BF16 in the candidate: feed values rounded to this dtype
    low_inputs: dict[str, str] = field(default_factory=dict)
    #: rounding points inserted, per low dtype name
    rounding_points: dict[str, int] = field(default_factory=dict)
    upcast_initializers: int = 0
    retargeted_attributes: int = 0
    #: node outputs whose element type stayed unknown (not rounded even if they were low)
    unknown_types: list[str] = field(default_factory=list)
    #: low nodes whose kernel holds a sum in the low type, emulated so (held_sums.py)
    held_sums: list[str] = field(default_factory=list)
    #: inputs of constant-reading kernels computed from constants, made initializers as ORT's
    #: constant folding makes them (``fold_constant_inputs``)
    folded_inputs: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        """JSON-ready description for the report."""
        return {
            "rounding_points": dict(self.rounding_points),
            "low_precision_inputs": dict(self.low_inputs),
            "upcast_initializers": self.upcast_initializers,
            "retargeted_attributes": self.retargeted_attributes,
            "unknown_types": list(self.unknown_types),
            "held_sums": list(self.held_sums),
            "folded_constant_inputs": list(self.folded_inputs),
        }


def build_emulated_model(
    model: onnx.ModelProto, base_dir: str | None = None, target: Target | None = None
) -> EmulatedModel:
    """Return the FP32-with-rounding copy of ``model`` (``model`` itself is not changed).

    ``target``: the runtime whose kernels are reproduced (which hold a sum in the low type);
    default the one emulate mode judges for (providers.runtime_target: ORT CUDA).

    Initializers stored as external data keep their references (only their names change) and are
    not read (but the few a kernel reads as constants, ``CONSTANT_INPUT_OPS``, which are stored
    as FP32 in the copy: ``base_dir`` is the folder their data is relative to), so the copy must
    be run with the original model's folder as external-data folder.
    """
    clone = ir.serde.deserialize_model(densified(model))  # wraps the weights, copies nothing
    if base_dir:
        ir.external_data.set_base_dir(clone.graph, base_dir)
    # the clone's tensors are views of `model`'s TensorProtos, and renaming an initializer renames
    # the proto it wraps: put the names back once the copy is serialised
    names = [
        (v.const_value, v.const_value.name)
        for graph in clone.graphs()
        for v in graph.initializers.values()
        if v.const_value is not None
    ]
    try:
        # ORT sorts a graph's nodes when it loads it (its own FP16 converter appends the I/O
        # Casts last): the copy is sorted the same way, never refused for it
        load_repairs.sort_nodes(clone, "candidate")
        untyped = [v for node in clone.graph.all_nodes() for v in node.outputs if v.type is None]
        _, inferred = analyse(clone)
        InferDtypesPass(inferred)(clone)
        unique = UniqueNames.of_model(clone)
        folded = fold_constant_inputs(clone, unique)
        emulate = EmulatePass(unique, target or runtime_target("emulate"))
        emulate(clone)
        for value in untyped:  # typed only to decide the rounding: ORT infers them again
            if not value.is_graph_output():
                value.type = None
        result = emulate.result
        result.folded_inputs = folded
        result.model = ir.serde.serialize_model(clone)
    finally:
        for tensor, name in names:
            tensor.name = name
    return result


# --------------------------------------------------------------------------------------------
# the pass


def _as_float(vtype: ir.TypeProtocol | None) -> ir.TypeProtocol | None:
    """``vtype`` with its FP16/BF16 element type made FLOAT, or None when it has none."""
    if isinstance(vtype, ir.TensorType | ir.SparseTensorType):
        return type(vtype)(FLOAT) if vtype.dtype in LOW_TYPES else None
    if isinstance(vtype, ir.SequenceType | ir.OptionalType):
        inner = _as_float(vtype.elem_type)
        return None if inner is None else type(vtype)(inner)
    return None


def _low_tensor_dtype(value: ir.Value) -> ir.DataType | None:
    vtype = value.type
    if isinstance(vtype, ir.TensorType) and vtype.dtype in LOW_TYPES:
        return vtype.dtype
    return None


def _retype(value: ir.Value) -> None:
    new = _as_float(value.type)
    if new is not None:
        value.type = new


def _store_as_float(value: ir.Value) -> None:
    """Make low initializer ``value`` an FP32 initializer holding the same numbers (exact): it
    stays a constant for kernels that prepack it, and the emulated copy computes in FP32."""
    tensor = value.const_value
    assert tensor is not None
    exact = np.asarray(tensor.numpy(), dtype=np.float32)  # FP16/BF16 ⊂ FP32
    value.const_value = ir.tensor(exact, name=value.name)
    value.type = ir.TensorType(FLOAT)


def _cast(value: ir.Value, to: ir.DataType, out: ir.Value, name: str) -> ir.Node:
    return ir.Node("", "Cast", [value], [ir.AttrInt64("to", to)], outputs=[out], name=name)


#: the first opset whose Div/Mul ONNX Runtime implements: the held-sum emulation's nodes need it
#: (a model below it, from the onnx wheel's pytorch-operator set, has its outputs rounded only)
HELD_SUM_OPSET = 7


class EmulatePass(ir.passes.InPlacePass):
    """Round every FP16/BF16 value where it is produced; compute everything else in FP32.

    Runs on a typed clone (after ``InferDtypesPass``); what it did is in ``self.result``.
    """

    def __init__(self, names: UniqueNames, target: Target) -> None:
        super().__init__()
        self.names = names
        self.target = target
        self.result = EmulatedModel(model=onnx.ModelProto())
        self.opset = HELD_SUM_OPSET

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        self._graph(model.graph, is_main=True)
        return ir.passes.PassResult(model, modified=True)

    def _graph(self, graph: ir.Graph, is_main: bool) -> None:
        upcasts = [self._upcast_initializer(v) for v in list(graph.initializers.values())]
        for value in graph.inputs:
            if value.is_initializer():
                continue  # IR < 4: an initializer declared as input keeps its stored type
            dtype = _low_tensor_dtype(value)
            if is_main and dtype is not None:
                self.result.low_inputs[str(value.name)] = low_type_of(dtype).onnx_name
            _retype(value)
        for node in list(graph):
            subs = list(subgraphs(node))
            for sub in subs:
                self._graph(sub, is_main=False)
            self._retarget_attributes(node)
            added: list[ir.Node] = []
            for value in node.outputs:
                if not value.name:  # an omitted optional output: nothing to round
                    continue
                if subs:  # If/Loop/Scan outputs were rounded inside their bodies
                    _retype(value)
                elif value.type is None:
                    self.result.unknown_types.append(str(value.name))
                else:
                    added.extend(self._round(node, value))
            if added:
                graph.insert_after(node, added)
        casts = [c for c in upcasts if c is not None]
        if casts:
            if len(graph):
                graph.insert_before(graph.node(0), casts)
            else:
                graph.extend(casts)

    def _upcast_initializer(self, value: ir.Value) -> ir.Node | None:
        """Read a low initializer through one exact Cast to FLOAT, under its old name."""
        dtype = value.const_value.dtype if value.const_value is not None else value.dtype
        if dtype not in LOW_TYPES:
            return None
        if value.const_value is not None and read_as_constant(value):
            _store_as_float(value)
            self.result.upcast_initializers += 1
            return None
        name = value.name
        up = ir.Value(name=name, type=ir.TensorType(FLOAT), shape=value.shape)
        ir.convenience.replace_all_uses_with(value, up, replace_graph_outputs=True)
        value.name = self.names.take(f"{name}__emu_low")
        self.result.upcast_initializers += 1
        return _cast(value, FLOAT, up, self.names.take(f"{name}__emu_up"))

    def _round(self, node: ir.Node, value: ir.Value) -> list[ir.Node]:
        """The Cast pair after a low output (none for exact ops); the value itself turns FLOAT."""
        dtype = _low_tensor_dtype(value)
        exact = is_default_domain(node.domain) and node.op_type in EXACT_OPS
        is_cast = is_default_domain(node.domain) and node.op_type == "Cast"
        if dtype is None or (exact and not is_cast):
            _retype(value)
            return []
        low_name = low_type_of(dtype).onnx_name
        self.result.rounding_points[low_name] = self.result.rounding_points.get(low_name, 0) + 1
        name = value.name
        up = ir.Value(name=name, type=ir.TensorType(FLOAT), shape=value.shape)
        ir.convenience.replace_all_uses_with(value, up, replace_graph_outputs=True)
        if is_cast:  # the cast to low precision is the rounding; only come back to FLOAT
            value.name = self.names.take(f"{name}__emu_low")
            return [_cast(value, FLOAT, up, self.names.take(f"{name}__emu_up"))]
        value.name = self.names.take(f"{name}__emu_f32")
        value.type = ir.TensorType(FLOAT)
        low = ir.Value(
            name=self.names.take(f"{name}__emu_low"), type=ir.TensorType(dtype), shape=value.shape
        )
        held: list[ir.Node] = []
        source = value
        # ReduceMean: the kernel writes the sum in the low type (its emulation needs Div-7+)
        if held_sums.holds_sum(node, self.target) and self.opset >= HELD_SUM_OPSET:
            held, source = held_sums.held_sum_nodes(node, value, dtype, self.names)
            self.result.held_sums.append(str(node.name or name))
        return [
            *held,
            _cast(source, dtype, low, self.names.take(f"{name}__emu_round")),
            _cast(low, FLOAT, up, self.names.take(f"{name}__emu_up")),
        ]

    def _retarget_attributes(self, node: ir.Node) -> None:
        names = DTYPE_ATTRIBUTES.get(node.op_type, ()) if is_default_domain(node.domain) else ()
        for key, attr in list(node.attributes.items()):
            if attr.type == ir.AttributeType.INT and key in names and attr.value in LOW_TYPES:
                node.attributes[key] = ir.AttrInt64(key, FLOAT)
            elif attr.type == ir.AttributeType.TENSOR and attr.value.dtype in LOW_TYPES:
                tensor = attr.value
                exact = np.asarray(tensor.numpy(), dtype=np.float32)  # FP16/BF16 ⊂ FP32
                node.attributes[key] = ir.AttrTensor(key, ir.tensor(exact, name=tensor.name))
            else:
                continue
            self.result.retargeted_attributes += 1


# --------------------------------------------------------------------------------------------
# a look at a proto without converting it


_LOW_PROTO: dict[int, str] = {int(t): onnx_name(t) for t in LOW_TYPES}


def _proto_elem(tp: onnx.TypeProto) -> int | None:
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        return getattr(tp, kind).elem_type
    if kind in ("sequence_type", "optional_type"):
        return _proto_elem(getattr(tp, kind).elem_type)
    if kind == "map_type":
        return _proto_elem(tp.map_type.value_type)
    return None


def low_dtype_names(model: onnx.ModelProto) -> list[str]:
    """Low-precision dtype names used anywhere in ``model`` (for messages)."""
    found: set[str] = set()
    for graph in proto_walk.graphs(model.graph):
        for t in graph.initializer:
            if t.data_type in _LOW_PROTO:
                found.add(_LOW_PROTO[t.data_type])
        for vi in itertools.chain(graph.input, graph.output, graph.value_info):
            e = _proto_elem(vi.type)
            if e in _LOW_PROTO:
                found.add(_LOW_PROTO[e])
        for node in graph.node:
            for a in node.attribute:
                is_dtype = a.type == onnx.AttributeProto.INT and a.name in ("to", "dtype")
                if is_dtype and a.i in _LOW_PROTO:
                    found.add(_LOW_PROTO[a.i])
    return sorted(found)


_FLOAT_PROTO = {int(t) for t in (FLOAT, ir.DataType.DOUBLE, *LOW_TYPES)}


def low_share(model: onnx.ModelProto) -> float:
    """How much of ``model`` is in low precision, 0 to 1: the low share of its float weights
    (by elements) and of its typed float values (graph I/O, value_info, Cast targets), averaged
    over the two where both exist. A converted model is mostly low; an FP32 original holding one
    FP16 round trip is all but none."""
    weights = [0, 0]  # low, all
    values = [0, 0]
    for graph in proto_walk.graphs(model.graph):
        for t in graph.initializer:
            if t.data_type in _FLOAT_PROTO:
                n = int(np.prod(t.dims)) if len(t.dims) else 1
                weights[0] += n if t.data_type in _LOW_PROTO else 0
                weights[1] += n
        for vi in itertools.chain(graph.input, graph.output, graph.value_info):
            e = _proto_elem(vi.type)
            if e in _FLOAT_PROTO:
                values[0] += e in _LOW_PROTO
                values[1] += 1
        for node in graph.node:
            if node.op_type == "Cast" and is_default_domain(node.domain):
                to = next((a.i for a in node.attribute if a.name == "to"), None)
                if to in _FLOAT_PROTO:
                    values[0] += to in _LOW_PROTO
                    values[1] += 1
    shares = [low / total for low, total in (weights, values) if total]
    return sum(shares) / len(shares) if shares else 0.0
