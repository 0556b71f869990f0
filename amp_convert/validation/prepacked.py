"""Inputs that prepacking contrib kernels read as constants, folded for the emulated copy.

MatMulNBits and its kin prepack their scales, biases and zero points at session creation, from
initializers only. The emulated copy runs unoptimised (its rounding Casts must stay), so what ORT's
constant folding would make an initializer for users is folded here instead (emulate.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from amp_convert.core.precision import UniqueNames, is_default_domain


def subgraphs(node: ir.Node) -> Iterator[ir.Graph]:
    """The graphs of `node`'s attributes (If's branches, Loop's and Scan's bodies)."""
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH:
            yield attr.as_graph()
        elif attr.type == ir.AttributeType.GRAPHS:
            yield from attr.as_graphs()


#: contrib ops whose kernels read their low-precision side inputs (scales, bias, zero points) as
#: constants, prepacked with the quantized weight: fed by a Cast node instead, ORT's CPU
#: MatMulNBits (accuracy_level 4) computes with scales it never received and returns zeros
CONSTANT_INPUT_OPS = frozenset(
    {
        "MatMulNBits",
        "MatMulNBitsMlp",
        "MatMulNBitsQkv",
        "MatMulNBitsQLoRA",
        "MatMulBnb4",
        "MatMulFpQ4",
        "GatherBlockQuantized",
        "QMoE",
    }
)


def read_as_constant(value: ir.Value) -> bool:
    """Whether a kernel in ``CONSTANT_INPUT_OPS`` reads initializer ``value`` directly."""
    return any(
        node.domain == "com.microsoft" and node.op_type in CONSTANT_INPUT_OPS
        for node, _ in value.uses()
    )


#: ops a chain of constants may pass through and still be folded here (as ORT folds them)
_FOLDABLE = frozenset({"Identity", "Constant", "Cast"})
_FOLD_DEPTH = 16


def _constant_array(value: ir.Value, depth: int = 0) -> np.ndarray | None:
    """The value of `value` when it is computed from constants alone through ``_FOLDABLE`` ops
    (an initializer, a Constant node, Identity and Cast of those), else None."""
    if value.is_initializer() and value.const_value is not None:
        return np.asarray(value.const_value.numpy())
    node = value.producer()
    if node is None or depth > _FOLD_DEPTH or not is_default_domain(node.domain):
        return None
    if node.op_type not in _FOLDABLE or any(sub for sub in subgraphs(node)):
        return None
    if node.op_type == "Constant":
        tensor = ir.convenience.get_const_tensor(value)
        return None if tensor is None else np.asarray(tensor.numpy())
    source = node.inputs[0] if node.inputs else None
    arr = None if source is None else _constant_array(source, depth + 1)
    if arr is None or node.op_type == "Identity":
        return arr
    to = node.attributes.get("to")
    if to is None or to.type != ir.AttributeType.INT:
        return None
    try:
        return arr.astype(ir.DataType(to.value).numpy())
    except (ValueError, TypeError):
        return None


def fold_constant_inputs(model: ir.Model, names: UniqueNames) -> list[str]:
    """Make each input of a ``CONSTANT_INPUT_OPS`` kernel that constants alone compute an
    initializer, as ORT's constant folding does at its default level; names of those folded.

    Why: those kernels prepack what they read at session creation, from initializers only. The
    emulated copy runs with optimisations disabled (its rounding Casts must stay), so scales
    that reach MatMulNBits through an Identity or a Constant node would never be folded and the
    kernel would compute with scales it never received (zeros), unlike the model as users run it.
    """
    folded: list[str] = []
    for graph in model.graphs():
        for node in list(graph):
            if node.domain != "com.microsoft" or node.op_type not in CONSTANT_INPUT_OPS:
                continue
            for i, value in enumerate(node.inputs[1:], start=1):
                if value is None or value.is_initializer():
                    continue
                arr = _constant_array(value)
                if arr is None:
                    continue
                name = names.take(f"{value.name or 'input'}__emu_folded")
                tensor = ir.tensor(arr, name=name)
                const = ir.Value(
                    name=name,
                    type=ir.TensorType(tensor.dtype),
                    shape=ir.Shape(arr.shape),
                    const_value=tensor,
                )
                graph.register_initializer(const)
                node.replace_input_with(i, const)
                folded.append(str(value.name))
    return folded
