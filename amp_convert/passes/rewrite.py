"""Rewrite: retype values, retarget dtype attributes, store constants low, insert casts.

Every FP32 value gets a home type (low when produced by a LOW node; interface type for graph
inputs; for constants, what their readers need). Each reader whose slot needs another type reads
one Cast per (value, type), shared by all readers in any subgraph, placed right after the value is
defined. Graph outputs keep their names: the cast takes the name, the low value gets a new one.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from amp_convert.core import domains, walk, weight_range
from amp_convert.core.dtypes import FLOAT, SUFFIX, low_type_of
from amp_convert.core.precision import (
    DTYPE_ATTRIBUTES,
    Precision,
    UniqueNames,
    constant_tensor,
    is_float_tensor,
    low_array,
)
from amp_convert.core.steps import StepResult
from amp_convert.core.summaries import one_line
from amp_convert.core.tensors import to_low
from amp_convert.placement.plan import ANY, FREE, LOW, LoweredAs, Placed, PrecisionPlan
from amp_convert.reports.conversion import TensorNote
from amp_convert.reports.value_map import BehindCast, Carried, NodeCarried, ValueRecord
from amp_convert.schema import has_stash_type

log = logging.getLogger(__name__)

SMALL_CONSTANT = 64  # elements; below this a copy beats a runtime Cast even when asked for one


@dataclass(frozen=True)
class RewriteResult(StepResult):
    """What the rewrite did to the graph (counts for the report, and the nodes it replaced)."""

    values_lowered: int = 0  # values retyped to the low type (weights included)
    casts_inserted: int = 0  # runtime Cast nodes added
    weight_copies: int = 0  # constants stored a second time in another precision
    initializers_converted: int = 0
    initializers_kept: int = 0
    attributes_retargeted: int = 0  # nodes whose dtype attribute followed their precision
    #: new node -> the planned node whose decision it carries out (a low Clip run as Min/Max)
    replaced: Mapping[ir.Node, ir.Node] = field(default_factory=lambda: types.MappingProxyType({}))
    #: mask fills stored saturated in the low type (only those actually stored low)
    saturated: tuple[TensorNote, ...] = ()
    #: graph outputs now behind a Cast, Clips now Min/Max: for the value map
    values: tuple[ValueRecord, ...] = field(default=(), compare=False)

    @property
    def modified(self) -> bool:
        return bool(
            self.values_lowered
            or self.casts_inserted
            or self.weight_copies
            or self.attributes_retargeted
            or self.replaced
        )


def rewrite(
    model: ir.Model, plan: PrecisionPlan, names: UniqueNames, *, cast_optional_params: bool = False
) -> RewriteResult:
    """Apply `plan` to `model` in place; new names come from `names` (unique model-wide)."""
    return _Rewriter(plan, names, cast_optional_params).run(model)


class _Rewriter:
    """One rewrite's private state: the casts made so far (shared by all readers) and counts."""

    def __init__(self, plan: PrecisionPlan, names: UniqueNames, cast_optional_params: bool) -> None:
        self.plan = plan
        self.names = names
        self.cast_optional_params = cast_optional_params
        self.opset = 1
        self._casts: dict[tuple[int, ir.DataType], ir.Value] = {}
        self._fills: dict[ir.Node, str] = {}  # ConstantOfShape mask fills -> their report name
        self.counts = dict.fromkeys(
            (
                "values_lowered",
                "casts_inserted",
                "weight_copies",
                "initializers_converted",
                "initializers_kept",
                "attributes_retargeted",
            ),
            0,
        )
        self.replaced: dict[ir.Node, ir.Node] = {}
        self.saturated: dict[str, TensorNote] = {}
        self.values: list[ValueRecord] = []

    def run(self, model: ir.Model) -> RewriteResult:
        self.opset = domains.opset_version(model.opset_imports)
        # mask fills held in ConstantOfShape attributes, by their output's name before any rename
        self._fills = {
            node: node.outputs[0].name or ""
            for node in (walk.all_nodes(model.graph) if self.plan.saturate else ())
            if node.op_type == "ConstantOfShape" and node.outputs[0].name in self.plan.saturate
        }
        homes = [(v, self._home(v)) for v in _float_values(model)]
        for value, home in homes:
            self._connect(value, home)
        for value, home in homes:
            if home == LOW:
                value.type = ir.TensorType(self.plan.low)  # a new object: clones share types
                self.counts["values_lowered"] += 1
        self._drop_replaced_fills()
        self._retarget_attributes(model)
        lowered = [
            n for n in walk.all_nodes(model.graph) if self._lowered_as(n) == LoweredAs.MIN_MAX
        ]
        for node in lowered:
            self._clip_as_min_max(node)
        result = RewriteResult(
            **self.counts,
            replaced=types.MappingProxyType(self.replaced),
            saturated=tuple(self.saturated.values()),
            values=tuple(self.values),
        )
        log.debug("rewrite: %s", one_line(result))
        return result

    def _lowered_as(self, node: ir.Node) -> LoweredAs | None:
        placed: Placed | None = self.plan.nodes.get(node)
        return placed.info.lowered_as if placed is not None and placed.precision == LOW else None

    def _clip_as_min_max(self, clip: ir.Node) -> None:
        """A low Clip the target has no kernel for becomes Max(Min(x, hi), lo): the same values."""
        low, graph = self.plan.low, _graph(clip)
        x = clip.inputs[0]
        bounds: list[tuple[str, ir.Value | None]] = [("Min", None), ("Max", None)]
        if len(clip.inputs) > 1:  # opset 11: bounds are (already low) inputs
            bounds = [("Min", _input(clip, 2)), ("Max", _input(clip, 1))]
        else:  # opset 6-10: float attributes
            for i, (op, attr) in enumerate((("Min", "max"), ("Max", "min"))):
                if attr in clip.attributes:
                    given = np.array(clip.attributes[attr].value, np.float32)
                    data = low_array(given, low, True)
                    if abs(float(given)) > low_type_of(low).max:
                        detail = (
                            f"Clip bound {attr}={float(given):.4g} stored as "
                            f"{float(data.astype(np.float32)):g}: nothing a finite "
                            f"{low_type_of(low).name} value exceeds"
                        )
                        where = f"{clip.name or 'clip'}/{attr}"
                        self._note_saturated(where, ir.Tensor(given), detail)
                    value = ir.Value(
                        name=self.names.take(f"{clip.name or 'clip'}/{attr}_{SUFFIX[low]}"),
                        type=ir.TensorType(low),
                        shape=ir.Shape([]),
                        const_value=ir.Tensor(data, dtype=low),
                    )
                    graph.register_initializer(value)
                    bounds[i] = (op, value)
        nodes, current = [], x
        for op, bound in bounds:
            if bound is None:
                continue
            out = ir.Value(name=self.names.take(f"{clip.name or 'clip'}/{op}_out"))
            nodes.append(
                ir.Node(
                    "",
                    op,
                    [current, bound],
                    outputs=[out],
                    name=self.names.take(f"{clip.name}/{op}"),
                )
            )
            current = out
        if not nodes:  # no bounds at all: an identity
            nodes.append(
                ir.Node("", "Identity", [x], name=self.names.take(f"{clip.name}/Identity"))
            )
        nodes[-1].outputs[0].type = clip.outputs[0].type
        nodes[-1].outputs[0].shape = clip.outputs[0].shape
        nodes[-1].name = clip.name  # the report speaks of the node the user knows
        origin = self.replaced.pop(clip, clip)
        for new in nodes:
            self.replaced[new] = origin
        why = f"low Clip {clip.name!r} rewritten as {'/'.join(n.op_type for n in nodes)}"
        self.values.append(NodeCarried(clip, nodes[-1], why))
        self.values.append(Carried(clip.outputs[0], nodes[-1].outputs[0], why))
        ir.convenience.replace_nodes_and_values(
            graph, clip, [clip], nodes, [clip.outputs[0]], [nodes[-1].outputs[0]]
        )

    def _home(self, value: ir.Value) -> Precision:
        plan = self.plan
        home = plan.home(value)
        tensor = constant_tensor(value)
        if home == FREE:
            reqs = plan.needs(value)
            low_wanted = reqs == {LOW} or (LOW in reqs and self.cast_optional_params)
            home = LOW if low_wanted else Precision.FP32
        elif home == LOW and value.is_initializer():
            tensor = value.const_value  # an initializer that is also a low graph input
        if tensor is not None:
            if home == LOW:
                self._store_low(value, tensor)
            else:
                self.counts["initializers_kept"] += int(value.is_initializer())
        return home

    def _store_low(self, value: ir.Value, tensor: ir.TensorProtocol) -> None:
        plan = self.plan
        saturate = self._saturating(value, tensor)
        producer = value.producer()
        if producer is not None:  # a Constant node
            low = to_low(tensor, plan.low, False, saturate)
            producer.attributes["value"] = ir.AttrTensor("value", low)
        else:
            value.const_value = to_low(tensor, plan.low, saturate=saturate)
            self.counts["initializers_converted"] += 1

    def _saturating(self, value: ir.Value, tensor: ir.TensorProtocol) -> bool:
        """A mask fill stored low is saturated: said once in the report, only where it is done."""
        name = value.name or ""
        if name not in self.plan.saturate:
            return False
        return self._note_saturated(name, tensor)

    def _note_saturated(self, name: str, tensor: ir.TensorProtocol, detail: str = "") -> bool:
        """Say once that `name` is stored saturated (default words: a mask fill's); True."""
        if name not in self.saturated:
            words = detail or weight_range.saturation_detail(tensor, self.plan.low)
            self.saturated[name] = TensorNote(name, "saturated", words)
        return True

    def _connect(self, value: ir.Value, home: Precision) -> None:
        plan = self.plan
        for use in list(value.uses()):
            need = plan.need(use.node, use.idx)
            if need not in (ANY, home):
                use.node.replace_input_with(use.idx, self._cast(value, need))
        if value.is_graph_output() and plan.interface(value) != home:
            cast = self._cast(value, plan.interface(value))
            graph = _graph(value)
            original = value.name or ""
            value.name = self.names.take(f"{original}_{SUFFIX[self._dtype(home)]}")
            cast.name = original
            self.values.append(BehindCast(value, cast))
            for i, out in enumerate(graph.outputs):
                if out is value:
                    graph.outputs[i] = cast

    def _dtype(self, precision: Precision) -> ir.DataType:
        return self.plan.low if precision == LOW else FLOAT

    def _cast(self, value: ir.Value, need: Precision) -> ir.Value:
        """The one Cast of `value` to `need`, created on first use next to the value's definition.

        A constant is stored a second time in the other precision instead: no runtime Cast ever
        reads a weight (the placement already made such splits expensive). The one exception is
        --cast-optional-params, whose point is a single low copy with casts for FP32 readers.
        """
        target = self._dtype(need)
        key = (id(value), target)
        if key in self._casts:
            return self._casts[key]
        tensor = constant_tensor(value)
        if (
            tensor is not None
            and not value.is_graph_output()
            and (target != FLOAT or tensor.size <= SMALL_CONSTANT or not self.cast_optional_params)
        ):
            saturate = target != FLOAT and self._saturating(value, tensor)
            data: ir.TensorProtocol
            if target == FLOAT:
                data = ir.Tensor(low_array(np.asarray(tensor.numpy()), FLOAT), dtype=FLOAT)
            else:
                data = to_low(tensor, target, saturate=saturate)
            copy = ir.Value(
                name=self.names.take(f"{value.name}_{SUFFIX[target]}"),
                type=ir.TensorType(target),
                shape=value.shape,
                const_value=data,
            )
            _graph(value).register_initializer(copy)
            self._casts[key] = copy
            self.counts["weight_copies"] += 1
            return copy
        out = ir.Value(
            name=self.names.take(f"{value.name}_{SUFFIX[target]}"),
            type=ir.TensorType(target),
            shape=value.shape,
        )
        producer = value.producer()
        if target != FLOAT and producer is not None and producer in self._fills:
            node = self._low_fill(producer, out, target)  # a Cast would make the fill -inf
        else:
            node = ir.Node(
                "",
                "Cast",
                [value],
                [ir.AttrInt64("to", target)],
                outputs=[out],
                name=self.names.take(f"{value.name}/cast_{SUFFIX[target]}"),
            )
        if producer is not None:
            _graph(producer).insert_after(producer, node)
        else:
            graph = _graph(value)
            first = next(iter(graph), None)
            if first is None:
                graph.append(node)
            else:
                graph.insert_before(first, node)
        self._casts[key] = out
        self.counts["casts_inserted"] += 1
        return out

    def _drop_replaced_fills(self) -> None:
        """An FP32 mask fill whose every reader now reads its low copy leaves the graph."""
        for fill in list(self._fills):
            out = fill.outputs[0]
            copy = self._casts.get((id(out), self.plan.low))
            if copy is None or out.uses() or out.is_graph_output():
                continue
            new = copy.producer()
            assert new is not None
            why = f"mask fill {out.name!r} made directly in {SUFFIX[self.plan.low]} (saturated)"
            self.values.append(NodeCarried(fill, new, why))
            self.values.append(Carried(out, copy, why))
            _graph(fill).remove(fill, safe=True)
            del self._fills[fill]

    def _low_fill(self, fill: ir.Node, out: ir.Value, low: ir.DataType) -> ir.Node:
        """A second ConstantOfShape making an FP32 mask fill's value in `low`, saturated (and
        said so): what a stored copy is to an initializer, without a runtime Cast to -inf."""
        attr = fill.attributes["value"]
        self._note_saturated(self._fills[fill], attr.as_tensor())
        value = ir.AttrTensor("value", to_low(attr.as_tensor(), low, False, saturate=True))
        name = self.names.take(f"{fill.name or 'fill'}_{SUFFIX[low]}")
        return ir.Node("", "ConstantOfShape", [fill.inputs[0]], [value], outputs=[out], name=name)

    def _retarget_attributes(self, model: ir.Model) -> None:
        """Attributes that name a float dtype follow the node's new precision."""
        plan = self.plan
        low = plan.low
        for node in list(walk.all_nodes(model.graph)):
            placed = plan.nodes.get(node)
            if placed is None or placed.precision != LOW or not domains.is_default(node.domain):
                continue
            if 0 not in placed.info.low_outputs:
                continue
            op = node.op_type
            if op == "Cast" and node.attributes["to"].value == FLOAT:
                node.attributes["to"] = ir.AttrInt64("to", low)
            elif op in DTYPE_ATTRIBUTES:
                for name in DTYPE_ATTRIBUTES[op]:
                    node.attributes[name] = ir.AttrInt64(name, low)
            elif has_stash_type(op, self.opset):
                node.attributes["stash_type"] = ir.AttrInt64("stash_type", 1)
            elif op == "ConstantOfShape":
                attr = node.attributes.get("value")
                base = attr.value if attr is not None else ir.Tensor(np.zeros(1, np.float32))
                saturate = node in self._fills and self._note_saturated(self._fills[node], base)
                node.attributes["value"] = ir.AttrTensor(
                    "value", to_low(base, low, False, saturate)
                )
            else:
                continue
            self.counts["attributes_retargeted"] += 1


def _graph(item: ir.Node | ir.Value) -> ir.Graph:
    """The graph a node or value of the model belongs to (never None once in a model)."""
    graph = item.graph
    assert graph is not None, f"{item!r} is not in a graph"
    return graph


def _input(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def _float_values(model: ir.Model) -> list[ir.Value]:
    """Every FP32 tensor value: graph inputs, initializers and node outputs of all graphs."""
    seen: set[int] = set()
    out: list[ir.Value] = []

    def add(value: ir.Value | None) -> None:
        if value is not None and id(value) not in seen and is_float_tensor(value):
            seen.add(id(value))
            out.append(value)

    for graph in walk.graphs(model):
        for value in graph.inputs:
            add(value)
        for value in graph.initializers.values():
            add(value)
    for node in walk.all_nodes(model.graph):
        for value in node.outputs:
            add(value)
    return out
