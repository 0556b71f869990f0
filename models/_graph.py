"""A tiny, deterministic graph-building helper shared by the test-model builders.

Why not plain ``onnx.helper`` everywhere: every builder needs the same bookkeeping (unique node and
value names across the main graph *and* its subgraphs, seeded weights, memoised shape constants),
and getting that wrong silently produces models that hide converter bugs (e.g. a subgraph value
shadowing an outer one). This module keeps that bookkeeping in one place; the graphs themselves are
still built from ``onnx.helper`` / ``onnx.numpy_helper`` protos.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

Dim = int | str | None
Shape = Sequence[Dim] | None

PRODUCER = "amp-convert-models"

#: Metadata key prefix recording the valid half-open value range of an integer graph input,
#: e.g. ``input_range:input_ids`` -> ``"0,100"``. Read by :func:`models.inputs.sample_inputs`.
INPUT_RANGE_KEY = "input_range:"

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
BOOL = TensorProto.BOOL


def _elem_type(dtype: int | np.dtype | type) -> int:
    if isinstance(dtype, int):
        return dtype
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


class GraphBuilder:
    """Collects nodes, initializers and graph inputs/outputs for one (sub)graph.

    Names are claimed in a registry shared with all subgraph builders created through
    :meth:`subgraph`, so a duplicate anywhere in the model raises immediately.
    """

    def __init__(self, name: str, seed: int = 0, *, parent: GraphBuilder | None = None) -> None:
        self.name = name
        self.parent = parent
        self._names: set[str] = parent._names if parent is not None else set()
        self.rng: np.random.Generator = (
            parent.rng if parent is not None else np.random.default_rng(seed)
        )
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.metadata: dict[str, str] = parent.metadata if parent is not None else {}
        self._consts: dict[str, str] = {}

    # -- names -------------------------------------------------------------------------------
    def claim(self, name: str) -> str:
        """Reserve ``name`` model-wide; raise if it is already used."""
        if not name:
            raise ValueError("empty name")
        if name in self._names:
            raise ValueError(f"duplicate name {name!r}")
        self._names.add(name)
        return name

    # -- graph interface ---------------------------------------------------------------------
    def input(
        self,
        name: str,
        dtype: int | np.dtype | type,
        shape: Shape,
        value_range: tuple[int, int] | None = None,
    ) -> str:
        """Declare a graph input; ``value_range`` records valid integer values [low, high)."""
        self.claim(name)
        self.inputs.append(helper.make_tensor_value_info(name, _elem_type(dtype), shape))
        if value_range is not None:
            self.metadata[INPUT_RANGE_KEY + name] = f"{value_range[0]},{value_range[1]}"
        return name

    def output(self, name: str, dtype: int | np.dtype | type, shape: Shape) -> str:
        """Declare a graph output (the value must be produced by a node or be an input)."""
        self.outputs.append(helper.make_tensor_value_info(name, _elem_type(dtype), shape))
        return name

    # -- initializers ------------------------------------------------------------------------
    def initializer(self, name: str, array: np.ndarray) -> str:
        """Add ``array`` as an initializer called ``name``."""
        self.claim(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name: str, shape: Sequence[int], std: float | None = None) -> str:
        """Seeded normal float32 weight; default std keeps activations O(1).

        2-D ``[in, out]`` (MatMul layout): 1/sqrt(in). 4-D conv ``[out, in, kh, kw]``:
        He init sqrt(2/fan_in). 1-D (bias): 0.02.
        """
        if std is None:
            if len(shape) == 1:
                std = 0.02
            elif len(shape) == 2:
                std = 1.0 / math.sqrt(shape[0])
            else:
                std = math.sqrt(2.0 / math.prod(shape[1:]))
        arr = (self.rng.standard_normal(tuple(shape)) * std).astype(np.float32)
        return self.initializer(name, arr)

    def const(self, name: str, value: object, dtype: type = np.int64) -> str:
        """Memoised constant initializer (shape vectors, axes, scalars) shared by readers."""
        if name in self._consts:
            return self._consts[name]
        self._consts[name] = self.initializer(name, np.array(value, dtype=dtype))
        return name

    def i64(self, name: str, value: object) -> str:
        """int64 constant (see :meth:`const`)."""
        return self.const(name, value, np.int64)

    def f32(self, name: str, value: object) -> str:
        """float32 constant (see :meth:`const`)."""
        return self.const(name, value, np.float32)

    # -- nodes -------------------------------------------------------------------------------
    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        name: str,
        *,
        outputs: int | Sequence[str] = 1,
        domain: str = "",
        **attrs: object,
    ) -> str | list[str]:
        """Add a node called ``name``; returns its output name (or list when several).

        Output values default to ``f"{name}_out"`` (``_out0``, ``_out1``... when several).
        """
        self.claim(name)
        if isinstance(outputs, int):
            if outputs == 1:
                out_names = [f"{name}_out"]
            else:
                out_names = [f"{name}_out{i}" for i in range(outputs)]
        else:
            out_names = list(outputs)
        for out in out_names:
            if out:
                self.claim(out)
        node = helper.make_node(
            op_type, list(inputs), out_names, name=name, domain=domain or None, **attrs
        )
        self.nodes.append(node)
        return out_names[0] if len(out_names) == 1 else out_names

    def subgraph(self, name: str) -> GraphBuilder:
        """Builder for an If/Loop/Scan body sharing this model's name registry and RNG."""
        return GraphBuilder(name, parent=self)

    # -- assembly ----------------------------------------------------------------------------
    def graph(self) -> onnx.GraphProto:
        """Assemble the GraphProto."""
        return helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, initializer=self.initializers
        )

    def model(
        self,
        *,
        opset: int = 17,
        ir_version: int = 9,
        extra_opsets: dict[str, int] | None = None,
        doc: str | None = None,
    ) -> onnx.ModelProto:
        """Assemble the ModelProto (default opset 17, IR version 9)."""
        imports = [helper.make_opsetid("", opset)]
        for domain, version in (extra_opsets or {}).items():
            imports.append(helper.make_opsetid(domain, version))
        model = helper.make_model(
            self.graph(),
            opset_imports=imports,
            ir_version=ir_version,
            producer_name=PRODUCER,
            doc_string=" ".join((doc or "").split()),
        )
        if self.metadata:
            helper.set_model_props(model, dict(sorted(self.metadata.items())))
        return model


def first_doc_paragraph(obj: object) -> str:
    """The first paragraph of ``obj.__doc__`` (used as the model's ``doc_string``)."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.split("\n\n")[0]
