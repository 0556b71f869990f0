"""Every value's size from the input dims: the shapes the cost model (and placement) weigh.

Three sources, best first, for the dims the user set (`--dim`) or the defaults for *input* dims
(`dim_defaults`, the rules validation's random inputs follow too: batches 1, image H/W 224,
channels 3, others 128):
1. ONNX shape inference with data propagation on a weight-free copy whose inputs carry the
   concrete dims (shape constants kept, so Reshape targets built from Shape/Gather/Concat resolve);
2. our own symbolic propagation (shape_rules) over the graph and inside If/Loop/Scan bodies,
   which keeps `2*seq` or `seq+past` exact where ONNX drops a dim, and parses the dim expressions
   exporters write (`s0 + s1`);
3. a neighbour estimate for what is still unknown (data-dependent sizes): the size of the
   producer's largest input, counted in `estimated`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

import onnx
import onnx_ir as ir

from amp_convert.core import domains, proto_walk, walk
from amp_convert.cost import layers as shape_layers
from amp_convert.cost.dim_defaults import UNKNOWN_DIM_NAMES, axis_defaults
from amp_convert.cost.dims import MAX_TERMS, fold, parse_dim_expression
from amp_convert.cost.rules import RULES, UNKNOWN, Fact, Shape
from amp_convert.cost.symdim import Dim, Sym, add, evaluate, floordiv, mul, prod, sub
from amp_convert.files.onnx_checks import call_on_stripped

logger = logging.getLogger(__name__)
_SMALL_DATA = 64  # integer tensors up to this many elements carry their values (shape vectors)
_SUB_OPS = {"If", "Loop", "Scan"}
_LAYER_RULES = shape_layers  # imported for its rules, registered in shape_rules.RULES


def input_dim_key(value: ir.Value, axis: int) -> str | None:
    """The name an input axis is set by (its dim_param, or `input[axis]`); None when static."""
    shape = value.shape
    d = shape[axis] if shape is not None else None
    if isinstance(d, int) and d >= 0:
        return None
    name = d.value if isinstance(d, ir.SymbolicDim) else None
    if name and name.strip().lower() not in UNKNOWN_DIM_NAMES:
        return name
    return f"{value.name}[{axis}]"


def assumed_dims(model: ir.Model, dims: Mapping[str, int]) -> dict[str, int]:
    """Every dynamic input dim with the size the estimate takes: the user's, else the default.

    Defaults (``dim_defaults``, shared with validation): 1 for a batch (a batch-like name, or the
    first axis of a rank >= 2 input when its name does not say otherwise: dynamo's `s0`,
    tf2onnx's `unk__12`, Paddle's -1 or `p2o.DynamicDimension.0`), 224 for image H/W, 3 for
    channels named so, 128 for any other input dim. Dims inside the graph are never defaulted:
    they follow from these.
    """
    shapes: list[tuple[str, bool, list[Any]]] = []
    keys: list[tuple[str, int, str]] = []
    for value in model.graph.inputs:
        if value.is_initializer() or value.shape is None:
            continue
        shape = [_declared_dim(d) for d in value.shape]
        shapes.append((str(value.name), value.dtype in _FLOATS, shape))
        for axis in range(len(shape)):
            key = input_dim_key(value, axis)
            if key is not None and key not in dims and parse_dim_expression(key) is None:
                keys.append((str(value.name), axis, key))  # `past + seq` follows from its names
    defaults = axis_defaults(shapes, keys)
    out: dict[str, int] = {}
    for value in model.graph.inputs:
        if value.is_initializer() or value.shape is None:
            continue
        for axis in range(len(value.shape)):
            key = input_dim_key(value, axis)
            if key is None or key in out:
                continue
            if key in dims:
                out[key] = dims[key]
            elif key in defaults:
                out[key] = defaults[key][0]
    return out


_FLOATS = frozenset(
    {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE}
)


def _declared_dim(d: Any) -> int | str | None:
    if isinstance(d, int):
        return d
    return d.value if isinstance(d, ir.SymbolicDim) else None


def concrete_dim(key: str | None, env: Mapping[str, int]) -> int | None:
    """The size of an input dim key: set, or computed from the names of its expression."""
    if key is None:
        return None
    if key in env:
        return env[key]
    return evaluate(parse_dim(key), env)


# -- dim expressions written by exporters ("s0 + s1", "2*s0", "floor(s0/2)") ---------------------
def parse_dim(text: str) -> Dim:
    """A dim_param as a symbolic dim: a plain name, or arithmetic over names.

    The grammar is amp_convert.cost.dims' (the one --dim and validation use); this turns the vetted
    expression into a polynomial so that `past + seq` minus `past` is `seq` again. min, max,
    ceil, % and polynomials of more than ``MAX_TERMS`` terms stay an opaque name (no value
    unless --dim sets it).
    """
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    expr = parse_dim_expression(stripped)
    if expr is None:
        return Sym.name(text)
    try:
        return fold(expr.steps, lambda n: n, Sym.name, _sym_op, _sym_call)
    except _Opaque:
        return Sym.name(text)


class _Opaque(Exception):
    """An expression the polynomials do not model."""


def _sym_op(op: str, a: Dim, b: Dim = None) -> Dim:
    if op in ("neg", "pos"):
        return mul(-1, a) if op == "neg" else a
    ops = {"+": add, "-": sub, "*": mul, "//": floordiv, "/": floordiv}
    if op not in ops:
        raise _Opaque
    result = ops[op](a, b)
    if isinstance(result, Sym) and len(result.terms) > MAX_TERMS:
        raise _Opaque
    return result


def _sym_call(fn: str, args: list[Dim]) -> Dim:
    if fn == "floor" and len(args) == 1:
        return args[0]  # floor(a / b) is a // b
    raise _Opaque


def declared(value: ir.Value) -> Shape | None:
    """The value's own shape as symbolic dims (unknown-spelled dims are None)."""
    shape = value.shape
    if shape is None:
        return None
    out: list[Dim] = []
    for d in shape:
        if isinstance(d, int):
            out.append(d if d >= 0 else None)
        elif d.value and d.value.strip().lower() not in UNKNOWN_DIM_NAMES:
            out.append(parse_dim(d.value))
        else:
            out.append(None)
    return tuple(out)


def _tensor_fact(tensor: ir.TensorProtocol) -> Fact:
    shape = tuple(tensor.shape.numpy())
    data = None
    if tensor.dtype.is_integer() and tensor.size <= _SMALL_DATA:
        data = tuple(int(v) for v in tensor.numpy().reshape(-1))
    return Fact(shape, data)


class ShapeBook:
    """Element counts of values, resolved once from the input dims (see the module)."""

    def __init__(self, model: ir.Model, dims: Mapping[str, int]) -> None:
        self.dims = assumed_dims(model, dims)
        self.env = {**dims, **self.dims}
        self._concrete = _onnx_concrete(model, self.env)
        self._facts: dict[ir.Value, Fact] = {}
        self._sizes: dict[ir.Value, int] = {}
        #: values whose size came from a neighbour, not from a shape
        self.estimated = 0
        #: how many times per inference a subgraph runs: a Loop/Scan body its trip count, each
        #: If branch half (which one runs is data)
        self._runs: dict[ir.Graph, float] = {}
        self._propagate(model.graph)
        self._settle(model)

    # -- propagation ----------------------------------------------------------------------------
    def fact(self, value: ir.Value) -> Fact:
        known = self._facts.get(value)
        if known is not None:
            return known
        tensor = value.const_value
        if tensor is not None:
            fact = _tensor_fact(tensor)
        else:
            shape = declared(value)
            if value.is_graph_input() and shape is not None and value.shape is not None:
                shape = tuple(
                    Sym.name(input_dim_key(value, i) or "") if d is None else d
                    for i, d in enumerate(shape)
                )
            fact = self._merge(Fact(shape), value)
        self._facts[value] = fact
        return fact

    def _merge(self, fact: Fact, value: ir.Value) -> Fact:
        """Fill the dims our rules left unknown from ONNX's concrete inference."""
        concrete = self._concrete.get(value.name or "")
        if concrete is None:
            return fact
        if fact.shape is None or len(fact.shape) != len(concrete):
            if fact.shape is not None and any(d is not None for d in fact.shape):
                return fact
            return Fact(tuple(concrete), fact.data)
        dims = tuple(
            c if (d is None or evaluate(d, self.env) is None) and c is not None else d
            for d, c in zip(fact.shape, concrete, strict=True)
        )
        return Fact(dims, fact.data)

    def _propagate(self, graph: ir.Graph) -> None:
        for node in graph:
            try:
                outs = self._node_facts(node)
            except Exception as e:  # a rule meeting a malformed node must not stop conversion
                logger.debug("shape rule for %s failed: %s", node.op_type, e)
                outs = None
            for i, value in enumerate(node.outputs):
                fact = outs[i] if outs is not None and i < len(outs) else UNKNOWN
                if fact.shape is None:
                    fact = Fact(declared(value), fact.data)
                self._facts[value] = self._merge(fact, value)

    def _node_facts(self, node: ir.Node) -> list[Fact] | None:
        facts = [self.fact(v) if v is not None else UNKNOWN for v in node.inputs]
        if node.op_type == "Constant" and domains.is_default(node.domain):
            attr = node.attributes.get("value")
            if attr is not None and attr.type == ir.AttributeType.TENSOR:
                return [_tensor_fact(attr.value)]
            return None
        if node.op_type in _SUB_OPS and domains.is_default(node.domain):
            return self._body_facts(node, facts)
        for attr in node.attributes.values():  # bodies of other ops: shapes from their own types
            if attr.type == ir.AttributeType.GRAPH:
                self._propagate(attr.value)
            elif attr.type == ir.AttributeType.GRAPHS:
                for g in attr.value:
                    self._propagate(g)
        rule = RULES.get(node.op_type)
        if rule is None or domains.normalise(node.domain) not in ("", "com.microsoft"):
            return None
        return rule(node, facts)

    def _body_facts(self, node: ir.Node, facts: list[Fact]) -> list[Fact] | None:
        outer = self.runs(node.graph)
        if node.op_type == "If":
            branches = [node.attributes[n].value for n in ("then_branch", "else_branch")]
            for g in branches:
                self._runs[g] = outer / 2
                self._propagate(g)
            return [self.fact(v) for v in branches[0].outputs]
        body = node.attributes["body"].value
        if node.op_type == "Loop":
            carried = facts[2:]
            seeds = [Fact(()), Fact(()), *carried]
            trip = facts[0].data[0] if facts and facts[0].data else None
            n_carried = len(carried)
        else:
            n_carried = len(node.inputs) - _int_attr(node, "num_scan_inputs", 0)
            axes = _ints_attr(node, "scan_input_axes")
            seeds = list(facts[:n_carried])
            trip = None
            for j, f in enumerate(facts[n_carried:]):
                axis = axes[j] if axes and j < len(axes) else 0
                if f.shape is None:
                    seeds.append(UNKNOWN)
                    continue
                axis = axis + len(f.shape) if axis < 0 else axis
                trip = f.shape[axis] if trip is None else trip
                seeds.append(Fact(f.shape[:axis] + f.shape[axis + 1 :]))
        for value, seed in zip(body.inputs, seeds, strict=False):
            self._facts[value] = self._merge(
                seed if seed.shape is not None else Fact(declared(value)), value
            )
        trips = evaluate(trip, self.env)
        self._runs[body] = outer * (trips if trips is not None and trips > 0 else 1)
        self._propagate(body)
        outs = [self.fact(v) for v in body.outputs]
        skip = 1 if node.op_type == "Loop" else 0  # Loop's body returns its condition first
        result = outs[skip : skip + n_carried]
        for f in outs[skip + n_carried :]:
            result.append(Fact((trip, *f.shape)) if f.shape is not None else UNKNOWN)
        return result

    def runs(self, graph: ir.Graph | None) -> float:
        """How many times per inference the nodes of `graph` run (1 for the main graph)."""
        return self._runs.get(graph, 1.0) if graph is not None else 1.0

    # -- sizes ----------------------------------------------------------------------------------
    def _size(self, value: ir.Value) -> int | None:
        concrete = self._concrete.get(value.name or "") if value.const_value is None else None
        if concrete is not None and all(d is not None for d in concrete):
            return math.prod(concrete)  # type: ignore[arg-type]
        fact = self.fact(value)
        if fact.shape is None:
            return None
        n = evaluate(prod(fact.shape), self.env)
        return n if n is not None and n >= 0 else None

    def _settle(self, model: ir.Model) -> None:
        """Sizes for every value; unknown ones from their neighbours, counted in `estimated`."""
        pending: list[ir.Value] = []
        for value in _values(model):
            n = self._size(value)
            if n is None:
                pending.append(value)
            else:
                self._sizes[value] = n
        for value in pending:  # in graph order, so a producer's estimate is there first
            self._sizes[value] = self._neighbour(value)
            self.estimated += 1

    def _neighbour(self, value: ir.Value) -> int:
        producer = value.producer()
        sides: Iterable[ir.Value | None] = producer.inputs if producer is not None else ()
        sizes = [self._sizes[v] for v in sides if v is not None and v in self._sizes]
        if not sizes:
            sizes = [
                self._sizes[v]
                for use in value.uses()
                for v in use.node.inputs
                if v is not None and v is not value and v in self._sizes
            ]
        return max(sizes, default=1)

    def elements(self, value: ir.Value) -> int:
        """How many elements `value` holds for the assumed dims."""
        known = self._sizes.get(value)
        if known is not None:
            return known
        n: int | None
        tensor = value.const_value  # a value made after resolution (a Cast, a folded weight)
        if tensor is not None:
            n = tensor.size
        elif value.shape is not None and value.shape.is_static():
            n = math.prod(value.shape.numpy())
        else:
            producer = value.producer()
            if producer is not None and producer.op_type == "Cast" and producer.inputs:
                source = producer.inputs[0]
                n = self.elements(source) if source is not None else 1
            else:
                n = self._size(value)
        size = n if n is not None else self._neighbour(value)
        self._sizes[value] = size
        return size

    def cast_bytes(self, value: ir.Value, low: ir.DataType) -> int:
        """What a Cast of `value` between FP32 and `low` moves per inference: one read plus one
        write, as many times as the graph that holds `value` runs (a Loop body per trip)."""
        producer = value.producer()
        home = producer.graph if producer is not None else value.graph
        return int(self.elements(value) * (4 + low.itemsize) * self.runs(home))

    def shape(self, value: ir.Value) -> tuple[int | None, ...] | None:
        """The value's shape for the assumed dims (None where unknown)."""
        fact = self.fact(value)
        return tuple(evaluate(d, self.env) for d in fact.shape) if fact.shape is not None else None

    def symbolic(self, value: ir.Value) -> str:
        """The value's shape in the input dims, e.g. `[batch, seq+past, 64]`."""
        fact = self.fact(value)
        if fact.shape is None:
            return "?"
        return "[" + ", ".join("?" if d is None else str(d) for d in fact.shape) + "]"


def _int_attr(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return int(attr.value) if attr is not None else default


def _ints_attr(node: ir.Node, name: str) -> list[int] | None:
    attr = node.attributes.get(name)
    return list(attr.value) if attr is not None else None


def _values(model: ir.Model) -> Iterable[ir.Value]:
    """Every value the nodes of all graphs read or write, graph inputs first, in order."""
    seen: set[ir.Value] = set()
    for value in model.graph.inputs:
        seen.add(value)
        yield value
    for node in walk.all_nodes(model.graph):
        for v in (*node.inputs, *node.outputs):
            if v is not None and v not in seen:
                seen.add(v)
                yield v


def _onnx_concrete(model: ir.Model, env: Mapping[str, int]) -> dict[str, tuple[int | None, ...]]:
    """ONNX inference with data propagation on a weight-free copy with concrete input dims."""

    def infer(proto: onnx.ModelProto) -> dict[str, tuple[int | None, ...]]:
        graph = proto.graph
        weights = {t.name for t in graph.initializer}
        real = {v.name: v for v in model.graph.inputs if not v.is_initializer()}
        for vi in graph.input:
            value = real.get(vi.name)
            if vi.name in weights or value is None or not vi.type.HasField("tensor_type"):
                continue
            for axis, d in enumerate(vi.type.tensor_type.shape.dim):
                size = concrete_dim(input_dim_key(value, axis), env)
                if size is not None:
                    d.Clear()
                    d.dim_value = size
        del graph.value_info[:]
        for out in graph.output:  # an output's declared symbolic dims must not clash
            if out.type.HasField("tensor_type"):
                out.type.tensor_type.ClearField("shape")
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
        except Exception as e:  # inference is a help: our own rules still run
            logger.info("onnx shape inference failed (%s); symbolic rules only", e)
            return {}
        found: dict[str, tuple[int | None, ...]] = {}
        for g in proto_walk.graphs(inferred.graph):
            for vi in (*g.input, *g.value_info, *g.output):
                t = vi.type
                if t.HasField("tensor_type") and t.tensor_type.HasField("shape"):
                    found.setdefault(
                        vi.name,
                        tuple(
                            d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                            for d in t.tensor_type.shape.dim
                        ),
                    )
        return found

    try:
        return call_on_stripped(model, infer)
    except Exception as e:  # e.g. a model that cannot be serialised: rules and neighbours only
        logger.info("weight-free copy for shape inference failed: %s", e)
        return {}
