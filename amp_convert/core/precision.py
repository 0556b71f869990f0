"""The precision vocabulary shared by the converter and the emulating validator.

One place for what both sides must agree on: which element types are "low", the FP16 range, which
ops carry a dtype attribute that follows the node's precision, how a float array becomes low, and
how new names stay unique model-wide. Two copies of these drifted once (window ops were missing
from the converter's dtype table); do not copy them again.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import numpy as np
import onnx_ir as ir

from amp_convert.core import domains, walk, weight_range
from amp_convert.core.dtypes import (  # re-exported: the precision vocabulary's element types
    BFLOAT16,
    FLOAT,
    FLOAT16,
    LOW_TYPES,
    NUMPY_TYPES,
    SUFFIX,
    numpy_type,
)

__all__ = [
    "BFLOAT16",
    "CONTROL_FLOW",
    "DTYPE_ATTRIBUTES",
    "FLOAT",
    "FLOAT16",
    "LOW_TYPES",
    "NUMPY_TYPES",
    "STASH_NORMS",
    "SUFFIX",
    "NodeClass",
    "Precision",
    "UniqueNames",
    "constant_tensor",
    "is_default_domain",
    "is_float_tensor",
    "low_array",
]

CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})
#: normalizations whose schema can fix FP32 statistics through `stash_type`
STASH_NORMS = frozenset({"LayerNormalization", "GroupNormalization", "RMSNormalization"})

#: Integer attributes that name a node's float output type, per default-domain op. When the node
#: changes precision, these follow (Cast `to` is handled by each side on its own: it *is* the
#: rounding). ConstantOfShape/Constant carry a tensor `value` instead and are handled apart.
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


class NodeClass(str, enum.Enum):
    """What the op lists and the schema say of a node."""

    ALLOW = "allow"  # fast and safe in low precision
    INFER = "infer"  # safe unless fed by something dangerous
    CLEAR = "clear"  # precision-neutral (moves or selects elements)
    DENY = "deny"  # numerically dangerous in low precision
    FIXED = "fixed"  # keeps its precision whatever the level (schema, range, custom op, user)
    NONE = "none"  # no float data path

    def __str__(self) -> str:
        return self.value


class Precision(str, enum.Enum):
    """A node's precision, or where a value lives before casts, or what a slot needs."""

    LOW = "low"
    FP32 = "fp32"
    FREE = "free"  # a constant: stored in whatever precision its readers need
    ANY = "any"  # a slot that takes any float type (Cast's input)

    def __str__(self) -> str:
        return self.value


def is_default_domain(domain: str) -> bool:
    return domains.is_default(domain)


def is_float_tensor(value: ir.Value | None) -> bool:
    """A value of FP32 tensor type: the only kind the converter retypes."""
    if value is None:
        return False
    vtype = value.type
    if vtype is not None and not isinstance(vtype, ir.TensorType):
        return False
    return value.dtype == FLOAT


def constant_tensor(value: ir.Value) -> ir.TensorProtocol | None:
    """The tensor behind an initializer (not a graph input) or a Constant node's `value`."""
    if value.is_initializer() and not value.is_graph_input():
        return value.const_value
    producer = value.producer()
    if (
        producer is not None
        and producer.op_type == "Constant"
        and is_default_domain(producer.domain)
    ):
        attr = producer.attributes.get("value")
        if attr is not None and attr.type == ir.AttributeType.TENSOR:
            return attr.value
    return None


def low_array(array: np.ndarray, dtype: ir.DataType, saturate: bool = False) -> np.ndarray:
    """`array` in `dtype`; `saturate` clips a reported mask fill to the low type's range first."""
    if saturate and dtype in (FLOAT16, BFLOAT16):
        array = weight_range.saturated(array, dtype)
    return array.astype(numpy_type(dtype) if dtype in NUMPY_TYPES else np.float32)


class UniqueNames:
    """Hands out value/node names unused anywhere in the model (subgraphs included).

    onnx-ir's generated names can clash across subgraphs; every pass that adds values or nodes
    takes its names from the one instance the pipeline creates.
    """

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self._taken = set(taken)

    @classmethod
    def of_model(cls, model: ir.Model) -> UniqueNames:
        names: set[str] = set()
        for graph in walk.graphs(model):
            names.update(v.name for v in graph.inputs if v.name)
            names.update(v.name for v in graph.outputs if v.name)
            names.update(graph.initializers.keys())
        for node in walk.all_nodes(model.graph):
            if node.name:
                names.add(node.name)
            names.update(v.name for v in node.outputs if v.name)
        return cls(names)

    def __contains__(self, name: str) -> bool:
        return name in self._taken

    def take(self, base: str) -> str:
        """`base`, or `base_N` with the smallest N that is still free; reserved from now on."""
        name, n = base, 0
        while name in self._taken:
            n += 1
            name = f"{base}_{n}"
        self._taken.add(name)
        return name
