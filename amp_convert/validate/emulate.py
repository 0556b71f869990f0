"""Build an FP32 copy of a mixed-precision model that rounds like FP16/BF16 hardware would.

Why: ONNX Runtime's CPU provider runs FP16 nodes in FP32 and removes the casts between them, so a
value that overflows FP16 (anything above 65504) or loses bits on a GPU looks fine on CPU, and it
has almost no BF16 kernels at all. The emulated copy computes every node in FP32 and rounds each
value that is FP16/BF16 in the candidate through ``Cast(to=low) -> Cast(to=FLOAT)`` where it is
produced, so rounding and overflow show up exactly where they would on a GPU, on any CPU.

How the copy is built (``build_emulated_model``), in every graph including If/Loop/Scan bodies:

* element types of all values come from ONNX shape inference of the *original* candidate, run per
  graph on a weight-free skeleton (bodies get their captured outer values as typed inputs, because
  ``onnx.shape_inference`` leaves body value_info empty); a dtype propagation from op schemas
  (ONNX's, and ONNX Runtime's contrib schemas for ``com.microsoft`` ops, which ONNX inference does
  not know) fills what inference leaves unknown; values still unknown are listed in the report;
* a node output that is FP16/BF16 is renamed ``<name>__emu_f32`` and followed by the Cast pair that
  produces ``<name>`` again, so consumers (also inside bodies) are untouched. A ``Cast(to=low)``
  keeps its cast and only gets the Cast back to FLOAT. Ops that only select or move elements
  (Reshape, Transpose, Gather, Concat, MaxPool, ...) are exact on already rounded inputs and are
  skipped; so are If/Loop/Scan outputs, which their bodies already rounded;
* FP16/BF16 initializers are renamed ``<name>__emu_low`` and upcast exactly by one Cast to FLOAT;
  main-graph FP16/BF16 inputs become FLOAT inputs, and the caller feeds values already rounded to
  the input's low dtype (``EmulatedModel.low_inputs``), which is an exact upcast;
* dtype attributes that name FLOAT16/BFLOAT16 (Cast ``to`` excepted, see above; RandomNormal(Like),
  RandomUniform(Like), EyeLike, Bernoulli ``dtype``, window ops' ``output_datatype``,
  SequenceEmpty ``dtype``) become FLOAT, and tensor attributes (Constant / ConstantOfShape
  ``value``) are upcast exactly;
* all FP16/BF16 types in graph inputs, outputs and value_info (tensor, sequence, optional, map)
  become FLOAT.

The session running the copy must not optimise the Cast pairs away: see
``amp_convert.validate.runtime`` (graph optimisations disabled; the pair survives, proven by the
overflow test).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from amp_convert import proto_walk

LOW_TYPES: dict[int, str] = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}

# Default-domain ops whose outputs only select, move or compare-select input elements: applied to
# values that are already representable in the low dtype they give a representable result, so
# rounding their outputs again would only add nodes. (Ops with float attributes that could bring
# in an unrepresentable value, such as Pad-2 `value` or Clip-6 `min`/`max`, are not here.)
EXACT_OPS = frozenset(
    {
        "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile",
        "Gather", "GatherElements", "GatherND", "Slice", "Split", "Concat", "Where", "Max", "Min",
        "Relu", "Neg", "Abs", "Sign", "Ceil", "Floor", "Round", "MaxPool", "ReduceMax",
        "ReduceMin", "DepthToSpace", "SpaceToDepth", "Compress", "ReverseSequence", "TopK",
        "Trilu",
    }
)  # fmt: skip

# Integer attributes that name an output element type, per default-domain op. Cast is handled
# separately (its cast to low precision *is* the rounding).
DTYPE_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "RandomNormal": ("dtype",),
    "RandomUniform": ("dtype",),
    "RandomNormalLike": ("dtype",),
    "RandomUniformLike": ("dtype",),
    "EyeLike": ("dtype",),
    "Bernoulli": ("dtype",),
    "SequenceEmpty": ("dtype",),
    "HannWindow": ("output_datatype",),
    "HammingWindow": ("output_datatype",),
    "BlackmanWindow": ("output_datatype",),
    "MelWeightMatrix": ("output_datatype",),
}

_DEFAULT_DOMAINS = ("", "ai.onnx")


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

    def summary(self) -> dict:
        """JSON-ready description for the report."""
        return {
            "rounding_points": dict(self.rounding_points),
            "low_precision_inputs": dict(self.low_inputs),
            "upcast_initializers": self.upcast_initializers,
            "retargeted_attributes": self.retargeted_attributes,
            "unknown_types": list(self.unknown_types),
        }


def build_emulated_model(model: onnx.ModelProto) -> EmulatedModel:
    """Return the FP32-with-rounding copy of ``model`` (``model`` itself is not changed).

    Initializers stored as external data keep their references (only their names change), so the
    copy must be run with the original model's folder as external-data folder.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    result = EmulatedModel(model=out)
    ctx = _Context(out, result)
    ctx.rewrite_graph(out.graph, outer_types={}, is_main=True)
    return result


# --------------------------------------------------------------------------------------------
# type helpers


_graphs = proto_walk.graphs
_subgraphs = proto_walk.subgraphs


def _type_has_low(tp: onnx.TypeProto) -> bool:
    leaf = _element_holder(tp)
    return leaf is not None and leaf.elem_type in LOW_TYPES


def _retype_low(tp: onnx.TypeProto) -> bool:
    """FP16/BF16 → FLOAT everywhere inside ``tp``; returns whether anything changed."""
    leaf = _element_holder(tp)
    if leaf is None or leaf.elem_type not in LOW_TYPES:
        return False
    leaf.elem_type = TensorProto.FLOAT
    return True


def _element_holder(tp: onnx.TypeProto):
    """The (sparse) tensor type inside ``tp`` that carries the element type, or None."""
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        return getattr(tp, kind)
    if kind in ("sequence_type", "optional_type"):
        return _element_holder(getattr(tp, kind).elem_type)
    if kind == "map_type":
        return _element_holder(tp.map_type.value_type)
    return None


def _tensor_elem(tp: onnx.TypeProto | None) -> int | None:
    """Element type of a tensor type, None when not a tensor or unknown."""
    if tp is None or tp.WhichOneof("value") != "tensor_type":
        return None
    return tp.tensor_type.elem_type or None


def _known(tp: onnx.TypeProto) -> bool:
    kind = tp.WhichOneof("value")
    if kind is None:
        return False
    if kind == "tensor_type":
        return tp.tensor_type.elem_type != 0
    return True


def _upcast_tensor(t: onnx.TensorProto) -> onnx.TensorProto:
    """Exact FP16/BF16 → FP32 copy of a tensor attribute value (keeps the name)."""
    arr = numpy_helper.to_array(t).astype(np.float32)
    out = numpy_helper.from_array(arr, t.name)
    return out


# --------------------------------------------------------------------------------------------
# per-graph type inference


def _used_names(graph: onnx.GraphProto) -> set[str]:
    used: set[str] = set()
    for node in graph.node:
        used.update(n for n in node.input if n)
        for sub in _subgraphs(node):
            used |= _captured(sub)
    used.update(o.name for o in graph.output)
    return used


def _defined_names(graph: onnx.GraphProto) -> set[str]:
    defined = {i.name for i in graph.input}
    defined.update(t.name for t in graph.initializer)
    defined.update(t.values.name for t in graph.sparse_initializer)
    for node in graph.node:
        defined.update(o for o in node.output if o)
    return defined


def _captured(graph: onnx.GraphProto) -> set[str]:
    """Names a (sub)graph reads from enclosing scopes."""
    return _used_names(graph) - _defined_names(graph)


def _skeleton(graph: onnx.GraphProto) -> onnx.GraphProto:
    """Weight-free copy for type inference: initializers become typed inputs."""
    sk = onnx.GraphProto(name=graph.name)
    for node in graph.node:
        n = sk.node.add()
        n.CopyFrom(node)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                a.g.CopyFrom(_skeleton(a.g))
            elif a.type == onnx.AttributeProto.GRAPHS:
                subs = [_skeleton(g) for g in a.graphs]
                del a.graphs[:]
                a.graphs.extend(subs)
    sk.input.extend(graph.input)
    declared = {i.name for i in graph.input}
    for t in graph.initializer:
        if t.name not in declared:
            sk.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    for st in graph.sparse_initializer:
        if st.values.name not in declared:
            sk.input.append(
                helper.make_tensor_value_info(st.values.name, st.values.data_type, list(st.dims))
            )
    sk.output.extend(graph.output)
    sk.value_info.extend(graph.value_info)
    return sk


class _Context:
    def __init__(self, model: onnx.ModelProto, result: EmulatedModel) -> None:
        self.model = model
        self.result = result
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.names: set[str] = set()
        for g in _graphs(model.graph):
            self.names |= _defined_names(g)
            self.names |= _used_names(g)
            self.names.update(n.name for n in g.node if n.name)

    # ---- naming
    def fresh(self, base: str) -> str:
        name = base
        i = 1
        while name in self.names:
            name = f"{base}_{i}"
            i += 1
        self.names.add(name)
        return name

    # ---- types
    def infer_types(
        self, graph: onnx.GraphProto, outer_types: dict[str, onnx.TypeProto]
    ) -> dict[str, onnx.TypeProto]:
        """Types of every value visible in ``graph`` (its own and captured outer ones)."""
        sk = _skeleton(graph)
        captured = sorted(_captured(graph))
        for name in captured:
            if name in outer_types:
                vi = onnx.ValueInfoProto(name=name)
                vi.type.CopyFrom(outer_types[name])
                sk.input.append(vi)
        tmp = helper.make_model(
            sk, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version
        )
        # best effort: where inference fails, the schema-based propagation below still runs
        with contextlib.suppress(Exception):
            tmp = onnx.shape_inference.infer_shapes(tmp, check_type=False, strict_mode=False)
        types: dict[str, onnx.TypeProto] = dict(outer_types)
        g = tmp.graph
        for vi in itertools.chain(g.input, g.value_info, g.output):
            if _known(vi.type):
                types[vi.name] = vi.type
        self._propagate(graph, types)
        return types

    def _propagate(self, graph: onnx.GraphProto, types: dict[str, onnx.TypeProto]) -> None:
        """Schema-based dtype propagation for outputs inference left unknown."""
        for node in graph.node:
            missing = [o for o in node.output if o and o not in types]
            if not missing:
                continue
            elem = self._output_elem_types(node, types)
            for i, o in enumerate(node.output):
                if o and o not in types and elem.get(i):
                    types[o] = helper.make_tensor_type_proto(elem[i], None)

    def _output_elem_types(
        self, node: onnx.NodeProto, types: dict[str, onnx.TypeProto]
    ) -> dict[int, int]:
        if node.domain in _DEFAULT_DOMAINS and node.op_type == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), 0)
            return {0: to} if to else {}
        if node.domain in _DEFAULT_DOMAINS and node.op_type == "CastLike":
            e = _tensor_elem(types.get(node.input[1])) if len(node.input) > 1 else None
            return {0: e} if e else {}
        domain = node.domain if node.domain not in _DEFAULT_DOMAINS else ""
        version = self.opsets.get(domain, self.opsets.get("ai.onnx", 1))
        schema = _schema(node.op_type, version, domain)
        if schema is None:  # unknown op (custom domain): nothing to go on
            return {}
        ins, outs, constraints = schema
        in_types: dict[str, int] = {}
        for i, name in enumerate(node.input):
            if not name or not ins:
                continue
            e = _tensor_elem(types.get(name))
            if e:
                in_types.setdefault(ins[min(i, len(ins) - 1)], e)
        out: dict[int, int] = {}
        for i, _ in enumerate(node.output):
            if not outs:
                break
            ts = outs[min(i, len(outs) - 1)]
            if ts in in_types:
                out[i] = in_types[ts]
            else:
                allowed = constraints.get(ts, [ts])
                if len(allowed) == 1 and allowed[0].startswith("tensor("):
                    e = _elem_from_str(allowed[0])
                    if e:
                        out[i] = e
        return out

    # ---- rewrite
    def rewrite_graph(
        self, graph: onnx.GraphProto, outer_types: dict[str, onnx.TypeProto], is_main: bool
    ) -> None:
        types = self.infer_types(graph, outer_types)
        result = self.result
        new_nodes: list[onnx.NodeProto] = []

        # initializers: rename and upcast exactly with one Cast
        input_names = {i.name: i for i in graph.input}
        keep_low: set[str] = set()  # IR < 4 initializers declared as inputs stay low
        for t in list(graph.initializer) + [s.values for s in graph.sparse_initializer]:
            if t.data_type not in LOW_TYPES:
                continue
            low_name = self.fresh(f"{t.name}__emu_low")
            if t.name in input_names:  # IR < 4: initializer also declared as graph input
                input_names[t.name].name = low_name
                keep_low.add(low_name)
            new_nodes.append(
                helper.make_node(
                    "Cast", [low_name], [t.name], name=self.fresh(f"{t.name}__emu_up"),
                    to=TensorProto.FLOAT,
                )
            )  # fmt: skip
            t.name = low_name
            result.upcast_initializers += 1

        if is_main:
            initializer_names = {t.name for t in graph.initializer}
            for vi in graph.input:
                e = _tensor_elem(vi.type)
                if e in LOW_TYPES and vi.name not in initializer_names:
                    result.low_inputs[vi.name] = LOW_TYPES[e]

        for node in graph.node:
            subs = list(_subgraphs(node))
            for sub in subs:
                self.rewrite_graph(sub, types, is_main=False)
            self._retarget_attributes(node)
            new_nodes.append(node)
            if subs:
                continue  # If/Loop/Scan outputs were rounded inside their bodies
            for idx, out_name in enumerate(node.output):
                if not out_name:
                    continue
                tp = types.get(out_name)
                if tp is None:
                    result.unknown_types.append(out_name)
                    continue
                elem = _tensor_elem(tp)
                if elem not in LOW_TYPES:
                    continue
                new_nodes.extend(self._round_output(node, idx, elem))

        del graph.node[:]
        graph.node.extend(new_nodes)
        for vi in itertools.chain(graph.input, graph.output, graph.value_info):
            if vi.name not in keep_low:
                _retype_low(vi.type)

    def _round_output(self, node: onnx.NodeProto, idx: int, elem: int) -> list[onnx.NodeProto]:
        name = node.output[idx]
        is_cast = node.domain in _DEFAULT_DOMAINS and node.op_type == "Cast"
        if not is_cast and node.domain in _DEFAULT_DOMAINS and node.op_type in EXACT_OPS:
            return []
        low = LOW_TYPES[elem]
        self.result.rounding_points[low] = self.result.rounding_points.get(low, 0) + 1
        if is_cast:  # the cast to low precision is the rounding; only come back to FLOAT
            low_name = self.fresh(f"{name}__emu_low")
            node.output[idx] = low_name
            return [
                helper.make_node(
                    "Cast", [low_name], [name], name=self.fresh(f"{name}__emu_up"),
                    to=TensorProto.FLOAT,
                )
            ]  # fmt: skip
        f32_name = self.fresh(f"{name}__emu_f32")
        low_name = self.fresh(f"{name}__emu_low")
        node.output[idx] = f32_name
        return [
            helper.make_node(
                "Cast", [f32_name], [low_name], name=self.fresh(f"{name}__emu_round"), to=elem
            ),
            helper.make_node(
                "Cast", [low_name], [name], name=self.fresh(f"{name}__emu_up"),
                to=TensorProto.FLOAT,
            ),
        ]  # fmt: skip

    def _retarget_attributes(self, node: onnx.NodeProto) -> None:
        default = node.domain in _DEFAULT_DOMAINS
        names = DTYPE_ATTRIBUTES.get(node.op_type, ()) if default else ()
        for a in node.attribute:
            if a.type == onnx.AttributeProto.INT and a.name in names and a.i in LOW_TYPES:
                a.i = TensorProto.FLOAT
                self.result.retargeted_attributes += 1
            elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type in LOW_TYPES:
                a.t.CopyFrom(_upcast_tensor(a.t))
                self.result.retargeted_attributes += 1
            elif (
                a.type == onnx.AttributeProto.SPARSE_TENSOR
                and a.sparse_tensor.values.data_type in LOW_TYPES
            ):
                a.sparse_tensor.values.CopyFrom(_upcast_tensor(a.sparse_tensor.values))
                self.result.retargeted_attributes += 1


Schema = tuple[list[str], list[str], dict[str, list[str]]]


@functools.cache
def _schema(op_type: str, version: int, domain: str) -> Schema | None:
    """(input type strs, output type strs, constraints) from ONNX, else from ONNX Runtime.

    ONNX Runtime registers its contrib schemas (com.microsoft FusedMatMul, Attention,
    SkipLayerNormalization, ...), which ONNX shape inference does not know.
    """
    try:
        s = onnx.defs.get_schema(op_type, version, domain)
    except Exception:
        return _ort_schema(op_type, version, domain)
    return (
        [f.type_str for f in s.inputs],
        [f.type_str for f in s.outputs],
        {c.type_param_str: list(c.allowed_type_strs) for c in s.type_constraints},
    )


def _ort_schema(op_type: str, version: int, domain: str) -> Schema | None:
    try:
        from onnxruntime.capi import _pybind_state as C

        candidates = [
            s for s in _ort_schemas(C) if s.name == op_type and s.domain == domain
            and s.since_version <= version
        ]  # fmt: skip
    except Exception:  # no ORT, or an ORT without schema access: stay unknown
        return None
    if not candidates:
        return None
    s = max(candidates, key=lambda s: s.since_version)
    return (
        [f.typeStr for f in s.inputs],
        [f.typeStr for f in s.outputs],
        {c.type_param_str: list(c.allowed_type_strs) for c in s.type_constraints},
    )


@functools.cache
def _ort_schemas(C) -> list:  # noqa: N803 - the module's conventional name
    return [s for s in C.get_all_operator_schema() if s.domain not in _DEFAULT_DOMAINS]


_STR_TO_ELEM = {
    f"tensor({helper.tensor_dtype_to_string(t).split('.')[-1].lower()})": t
    for t in TensorProto.DataType.values()
    if t
}
_STR_TO_ELEM.update({"tensor(float)": TensorProto.FLOAT, "tensor(double)": TensorProto.DOUBLE})


def _elem_from_str(s: str) -> int | None:
    return _STR_TO_ELEM.get(s)


def low_dtype_names(model: onnx.ModelProto) -> list[str]:
    """Low-precision dtype names used anywhere in ``model`` (for messages)."""
    found: set[str] = set()
    for graph in _graphs(model.graph):
        for t in graph.initializer:
            if t.data_type in LOW_TYPES:
                found.add(LOW_TYPES[t.data_type])
        for vi in itertools.chain(graph.input, graph.output, graph.value_info):
            e = _tensor_elem(vi.type)
            if e in LOW_TYPES:
                found.add(LOW_TYPES[e])
        for node in graph.node:
            for a in node.attribute:
                if (
                    a.type == onnx.AttributeProto.INT
                    and a.name in ("to", "dtype")
                    and (a.i in LOW_TYPES)
                ):
                    found.add(LOW_TYPES[a.i])
    return sorted(found)
