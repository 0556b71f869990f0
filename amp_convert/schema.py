"""What the ONNX operator schemas allow, per op, opset and input/output slot.

The converter never hard-codes which ops "can't take float16": it asks the schema of the op at the
model's opset which type variable each slot uses and which element types that variable admits.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import onnx.defs
import onnx_ir as ir

from amp_convert import domains


class _Param(Protocol):
    @property
    def variadic(self) -> bool: ...


P = TypeVar("P", bound=_Param)

_TYPE_NAMES = {
    ir.DataType.FLOAT: "tensor(float)",
    ir.DataType.FLOAT16: "tensor(float16)",
    ir.DataType.BFLOAT16: "tensor(bfloat16)",
    ir.DataType.DOUBLE: "tensor(double)",
}


@dataclass(frozen=True)
class Slot:
    """One formal parameter of a schema: its type variable (or fixed type) and admitted types."""

    type_str: str
    allowed: frozenset[str]
    variadic: bool
    is_type_var: bool
    homogeneous: bool = True


@dataclass(frozen=True)
class OpSignature:
    """Formal inputs and outputs of an op at one opset, resolved to their admitted types."""

    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]

    def input_slot(self, index: int) -> Slot | None:
        return param_at(self.inputs, index)

    def output_slot(self, index: int) -> Slot | None:
        return param_at(self.outputs, index)

    @functools.cached_property
    def output_type_vars(self) -> frozenset[str]:
        """Type variables bound to at least one output: the node's data path."""
        return frozenset(s.type_str for s in self.outputs if s.is_type_var)


def param_at(params: Sequence[P], index: int) -> P | None:
    """The formal parameter that input/output `index` binds to (a variadic last one repeats)."""
    if index < len(params):
        return params[index]
    if params and params[-1].variadic:
        return params[-1]
    return None


def _resolve(param: onnx.defs.OpSchema.FormalParameter, constraints: dict[str, list[str]]) -> Slot:
    variadic = param.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    homogeneous = not variadic or param.is_homogeneous
    if param.type_str in constraints:
        allowed = frozenset(constraints[param.type_str])
        return Slot(param.type_str, allowed, variadic, True, homogeneous)
    return Slot(param.type_str, frozenset([param.type_str]), variadic, False, homogeneous)


@functools.lru_cache(maxsize=4096)
def signature(op_type: str, domain: str, opset: int) -> OpSignature | None:
    """The op's signature at `opset`, or None when onnx.defs does not know the op."""
    domain = domains.normalise(domain)
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    constraints = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    return OpSignature(
        inputs=tuple(_resolve(p, constraints) for p in schema.inputs),
        outputs=tuple(_resolve(p, constraints) for p in schema.outputs),
    )


@functools.lru_cache(maxsize=1024)
def has_attribute(op_type: str, domain: str, opset: int, name: str) -> bool:
    """Whether the op's schema at `opset` declares attribute `name`."""
    domain = domains.normalise(domain)
    try:
        return name in onnx.defs.get_schema(op_type, opset, domain).attributes
    except onnx.defs.SchemaError:
        return False


def type_name(dtype: ir.DataType) -> str:
    """The schema spelling of a tensor element type, e.g. 'tensor(float16)'."""
    return _TYPE_NAMES.get(dtype) or f"tensor({dtype.name.lower()})"


@functools.lru_cache(maxsize=1)
def _runtime_schemas() -> dict[tuple[str, str], list]:
    """ONNX Runtime's contrib schemas (com.microsoft...), when onnxruntime is installed."""
    try:
        from onnxruntime.capi import _pybind_state
    except Exception:  # conversion never needs onnxruntime; without it these ops stay untyped
        return {}
    out: dict[tuple[str, str], list] = {}
    for s in _pybind_state.get_all_operator_schema():
        if not domains.is_default(s.domain) and s.domain != "ai.onnx.ml":
            out.setdefault((s.domain, s.name), []).append(s)
    return out


def _resolve_runtime(param, constraints: dict[str, list[str]]) -> Slot:
    variadic = "Variadic" in str(param.option)
    allowed = constraints.get(param.typeStr)
    if allowed is not None:
        return Slot(param.typeStr, frozenset(allowed), variadic, True, param.isHomogeneous)
    return Slot(param.typeStr, frozenset([param.typeStr]), variadic, False, True)


@functools.lru_cache(maxsize=1024)
def runtime_signature(op_type: str, domain: str, opset: int) -> OpSignature | None:
    """Signature of a custom op from ONNX Runtime's registry: used only to type its outputs.

    The op itself still keeps its precision (we cannot know its kernels' numerics), but knowing
    that com.microsoft:FusedMatMul returns float lets the nodes after it be converted.
    """
    candidates = [
        s for s in _runtime_schemas().get((domain, op_type), []) if s.since_version <= opset
    ]
    if not candidates:
        return None
    s = max(candidates, key=lambda c: c.since_version)
    constraints = {c.type_param_str: list(c.allowed_type_strs) for c in s.type_constraints}
    return OpSignature(
        inputs=tuple(_resolve_runtime(p, constraints) for p in s.inputs),
        outputs=tuple(_resolve_runtime(p, constraints) for p in s.outputs),
    )
