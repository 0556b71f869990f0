"""Rewrite: retype values, retarget dtype attributes, store constants low, insert casts.

Every FP32 value gets a home type (low when produced by a LOW node; interface type for graph
inputs; for constants, what their readers need). Each reader whose slot needs another type reads
one Cast per (value, type), shared by all readers in any subgraph, placed right after the value is
defined. Graph outputs keep their names: the cast takes the name, the low value gets a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from amp_convert.passes.assign import AssignPrecisionPass
from amp_convert.passes.classify import sig_has_stash
from amp_convert.passes.plan import ANY, FREE, LOW, PrecisionPlan
from amp_convert.precision import (
    DTYPE_ATTRIBUTES,
    FLOAT,
    SUFFIX,
    Precision,
    UniqueNames,
    constant_tensor,
    is_default_domain,
    is_float_tensor,
    low_array,
)
from amp_convert.tensors import to_low

SMALL_CONSTANT = 64  # elements; below this a copy beats a runtime Cast even when asked for one


@dataclass
class RewriteStats:
    """What the rewrite did to the weights, for the report."""

    initializers_converted: int = 0
    initializers_kept: int = 0


class RewritePass(ir.passes.InPlacePass):
    """Apply the decisions of AssignPrecisionPass to the graph."""

    def __init__(
        self, cast_optional_params: bool, assign: AssignPrecisionPass, names: UniqueNames
    ) -> None:
        super().__init__()
        self.cast_optional_params = cast_optional_params
        self.assign = assign
        self.names = names
        self.stats = RewriteStats()
        self._casts: dict[tuple[int, ir.DataType], ir.Value] = {}

    @property
    def plan(self) -> PrecisionPlan:
        assert self.assign.plan is not None, "AssignPrecisionPass runs before RewritePass"
        return self.assign.plan

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))
        homes = [(v, self._home(v)) for v in _float_values(model)]
        for value, home in homes:
            self._connect(value, home)
        for value, home in homes:
            if home == LOW:
                value.type = ir.TensorType(self.plan.low)  # a new object: clones share types
        self._retarget_attributes(model)
        for node in [n for n in model.graph.all_nodes() if self._rewritten_as(n) == "minmax"]:
            self._clip_as_min_max(node)
        return ir.passes.PassResult(model, modified=True)

    def _rewritten_as(self, node: ir.Node) -> str:
        info = self.plan.info.get(node)
        return info.rewrite_as if info is not None and info.precision == LOW else ""

    def _clip_as_min_max(self, clip: ir.Node) -> None:
        """A low Clip the target has no kernel for becomes Max(Min(x, hi), lo): the same values."""
        low, graph = self.plan.low, clip.graph
        x = clip.inputs[0]
        bounds: list[tuple[str, ir.Value | None]] = [("Min", None), ("Max", None)]
        if len(clip.inputs) > 1:  # opset 11: bounds are (already low) inputs
            bounds = [("Min", _input(clip, 2)), ("Max", _input(clip, 1))]
        else:  # opset 6-10: float attributes
            for i, (op, attr) in enumerate((("Min", "max"), ("Max", "min"))):
                if attr in clip.attributes:
                    data = low_array(np.array(clip.attributes[attr].value, np.float32), low, True)
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
        for new in nodes:
            self.plan.info[new] = self.plan.info[clip]
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
                self.stats.initializers_kept += int(value.is_initializer())
        return home

    def _store_low(self, value: ir.Value, tensor: ir.TensorProtocol) -> None:
        plan = self.plan
        saturate = value.name in plan.saturate
        producer = value.producer()
        if producer is not None:  # a Constant node
            low = to_low(tensor, plan.low, False, saturate)
            producer.attributes["value"] = ir.AttrTensor("value", low)
        else:
            value.const_value = to_low(tensor, plan.low, saturate=saturate)
            self.stats.initializers_converted += 1

    def _connect(self, value: ir.Value, home: Precision) -> None:
        plan = self.plan
        for use in list(value.uses()):
            need = plan.need(use.node, use.idx)
            if need not in (ANY, home):
                use.node.replace_input_with(use.idx, self._cast(value, need))
        if value.is_graph_output() and plan.interface(value) != home:
            cast = self._cast(value, plan.interface(value))
            graph = value.graph
            original = value.name or ""
            value.name = self.names.take(f"{original}_{SUFFIX[self._dtype(home)]}")
            cast.name = original
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
            saturate = value.name in self.plan.saturate
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
            value.graph.register_initializer(copy)
            self._casts[key] = copy
            return copy
        out = ir.Value(
            name=self.names.take(f"{value.name}_{SUFFIX[target]}"),
            type=ir.TensorType(target),
            shape=value.shape,
        )
        node = ir.Node(
            "",
            "Cast",
            [value],
            [ir.AttrInt64("to", target)],
            outputs=[out],
            name=self.names.take(f"{value.name}/cast_{SUFFIX[target]}"),
        )
        producer = value.producer()
        if producer is not None:
            producer.graph.insert_after(producer, node)
        else:
            graph = value.graph
            first = next(iter(graph), None)
            if first is None:
                graph.append(node)
            else:
                graph.insert_before(first, node)
        self._casts[key] = out
        return out

    def _retarget_attributes(self, model: ir.Model) -> None:
        """Attributes that name a float dtype follow the node's new precision."""
        plan = self.plan
        low = plan.low
        for node in list(model.graph.all_nodes()):
            if not plan.is_low(node) or not is_default_domain(node.domain):
                continue
            if 0 not in plan.info[node].low_outputs:
                continue
            op = node.op_type
            if op == "Cast" and node.attributes["to"].value == FLOAT:
                node.attributes["to"] = ir.AttrInt64("to", low)
            elif op in DTYPE_ATTRIBUTES:
                for name in DTYPE_ATTRIBUTES[op]:
                    node.attributes[name] = ir.AttrInt64(name, low)
            elif sig_has_stash(op, self.opset):
                node.attributes["stash_type"] = ir.AttrInt64("stash_type", 1)
            elif op == "ConstantOfShape":
                attr = node.attributes.get("value")
                base = attr.value if attr is not None else ir.Tensor(np.zeros(1, np.float32))
                node.attributes["value"] = ir.AttrTensor("value", to_low(base, low, False))


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

    for graph in model.graphs():
        for value in graph.inputs:
            add(value)
        for value in graph.initializers.values():
            add(value)
    for node in model.graph.all_nodes():
        for value in node.outputs:
            add(value)
    return out
