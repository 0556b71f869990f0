"""Passes 4 and 5: retype values, retarget dtype attributes, store constants low, insert casts.

Every FP32 value gets a home type (low when produced by a LOW node; interface type for graph
inputs; for constants, what their readers need). Each reader whose slot needs another type reads
one Cast per (value, type), shared by all readers in any subgraph, placed right after the value is
defined. Graph outputs keep their names: the cast takes the name, the low value gets a new one.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir

from amp_convert.passes.assign import (
    FP16_MAX,
    interface_precision,
    release,
    requirements,
    use_requirement,
    value_home,
)
from amp_convert.passes.state import FLOAT, ConversionState, constant_tensor, is_float_tensor

NUMPY_TYPES = {ir.DataType.FLOAT16: np.float16, ir.DataType.BFLOAT16: ml_dtypes.bfloat16}
SUFFIX = {ir.DataType.FLOAT16: "fp16", ir.DataType.BFLOAT16: "bf16", FLOAT: "fp32"}
SMALL_CONSTANT = 64  # elements; below this a second copy beats a runtime Cast
_DTYPE_ATTR_OPS = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "EyeLike",
        "Bernoulli",
    }
)


def _numpy_type(dtype: ir.DataType) -> type:
    return NUMPY_TYPES.get(dtype, np.float32)


def low_array(array: np.ndarray, dtype: ir.DataType, saturate: bool = False) -> np.ndarray:
    """`array` in `dtype`; `saturate` clips a reported sentinel to the FP16 range first."""
    if saturate and dtype == ir.DataType.FLOAT16:
        array = np.clip(array, -FP16_MAX, FP16_MAX)
    return array.astype(_numpy_type(dtype))


def to_low(
    tensor: ir.TensorProtocol, low: ir.DataType, lazy: bool = True, saturate: bool = False
) -> ir.TensorProtocol:
    """The tensor rounded to the low type; lazy so big weights stream at save time."""

    def convert() -> ir.Tensor:
        array = low_array(np.asarray(tensor.numpy()), low, saturate)
        release(tensor)  # the converted copy is all the save needs
        return ir.Tensor(array, dtype=low, name=tensor.name)

    if not lazy:
        return convert()
    return ir.LazyTensor(convert, dtype=low, shape=tensor.shape, name=tensor.name)


class RewritePass(ir.passes.InPlacePass):
    """Apply the decisions of AssignPrecisionPass to the graph."""

    def __init__(self, state: ConversionState) -> None:
        super().__init__()
        self.state = state
        self._casts: dict[tuple[int, ir.DataType], ir.Value] = {}

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        state = self.state
        plan = [(v, self._home(v)) for v in _float_values(model)]
        for value, home in plan:
            self._connect(value, home)
        for value, home in plan:
            if home == "low":
                value.type = ir.TensorType(state.low)  # a new object: clones share types
        self._retarget_attributes(model)
        return ir.passes.PassResult(model, modified=True)

    def _home(self, value: ir.Value) -> str:
        state = self.state
        home = value_home(value, state)
        tensor = constant_tensor(value)
        if home == "free":
            reqs = requirements(value, state)
            low_wanted = reqs == {"low"} or ("low" in reqs and state.options.cast_optional_params)
            home = "low" if low_wanted else "fp32"
        elif home == "low" and value.is_initializer():
            tensor = value.const_value  # an initializer that is also a low graph input
        if tensor is not None:
            if home == "low":
                self._store_low(value, tensor)
            else:
                state.report.initializers_kept += int(value.is_initializer())
        return home

    def _store_low(self, value: ir.Value, tensor: ir.TensorProtocol) -> None:
        state = self.state
        producer = value.producer()
        if producer is not None:  # a Constant node
            low = to_low(tensor, state.low, False, value.name in state.saturate)
            producer.attributes["value"] = ir.AttrTensor("value", low)
        else:
            value.const_value = to_low(tensor, state.low, saturate=value.name in state.saturate)
            state.report.initializers_converted += 1

    def _connect(self, value: ir.Value, home: str) -> None:
        state = self.state
        for use in list(value.uses()):
            need = use_requirement(use.node, use.idx, state)
            if need not in ("any", home):
                use.node.replace_input_with(use.idx, self._cast(value, need))
        if value.is_graph_output() and interface_precision(value, state) != home:
            need = interface_precision(value, state)
            cast = self._cast(value, need)
            graph = value.graph
            original = value.name or ""
            value.name = state.unique_name(f"{original}_{SUFFIX[self._dtype(home)]}")
            cast.name = original
            for i, out in enumerate(graph.outputs):
                if out is value:
                    graph.outputs[i] = cast

    def _dtype(self, precision: str) -> ir.DataType:
        return self.state.low if precision == "low" else FLOAT

    def _cast(self, value: ir.Value, need: str) -> ir.Value:
        """The one Cast of `value` to `need`, created on first use next to the value's definition.

        A small constant is copied in the other precision instead: cheaper than a runtime Cast.
        """
        target = self._dtype(need)
        key = (id(value), target)
        if key in self._casts:
            return self._casts[key]
        state = self.state
        tensor = constant_tensor(value)
        if tensor is not None and tensor.size <= SMALL_CONSTANT and not value.is_graph_output():
            array = np.asarray(tensor.numpy())
            copy = ir.Value(
                name=state.unique_name(f"{value.name}_{SUFFIX[target]}"),
                type=ir.TensorType(target),
                shape=value.shape,
                const_value=ir.Tensor(
                    low_array(array, target, value.name in state.saturate), dtype=target
                ),
            )
            value.graph.register_initializer(copy)
            self._casts[key] = copy
            return copy
        out = ir.Value(
            name=state.unique_name(f"{value.name}_{SUFFIX[target]}"),
            type=ir.TensorType(target),
            shape=value.shape,
        )
        node = ir.Node(
            "",
            "Cast",
            [value],
            [ir.AttrInt64("to", target)],
            outputs=[out],
            name=state.unique_name(f"{value.name}/cast_{SUFFIX[target]}"),
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
        state = self.state
        low = state.low
        for node in list(model.graph.all_nodes()):
            if not state.is_low(node) or node.domain not in ("", "ai.onnx"):
                continue
            info = state.info[node]
            if 0 not in info.low_outputs:
                continue
            op = node.op_type
            if op == "Cast" and node.attributes["to"].value == FLOAT:
                node.attributes["to"] = ir.AttrInt64("to", low)
            elif op in _DTYPE_ATTR_OPS:
                node.attributes["dtype"] = ir.AttrInt64("dtype", low)
            elif op == "ConstantOfShape":
                attr = node.attributes.get("value")
                base = attr.value if attr is not None else ir.Tensor(np.zeros(1, np.float32))
                node.attributes["value"] = ir.AttrTensor("value", to_low(base, low, False))


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
