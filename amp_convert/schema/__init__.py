"""What an op's schema allows, per op, opset and input/output slot: ONNX's and ONNX Runtime's.

The converter never hard-codes which ops "can't take float16": it asks the schema of the op at the
model's opset which type variable each slot uses and which element types that variable admits.
One interface serves every caller (classify, infer_dtypes, verify, the kernel table, the checks
on load, the emulator): onnx.defs for the ONNX domains, and for what onnx does not define (the
com.microsoft fused ops, and ONNX-domain ops ORT registers itself such as
SimplifiedLayerNormalization) the table generated from ONNX Runtime's schemas (schema.contrib).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import onnx.defs
import onnx_ir as ir

from amp_convert.core import domains, walk
from amp_convert.core.precision import STASH_NORMS
from amp_convert.schema.contrib import ContribSchema, Formal, load_contrib_table


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
#: where a signature came from
ONNX, ORT_TABLE, KERNEL_DOC = "onnx", "onnxruntime", "table"
#: why a node keeps its types as they are (classify's reasons; pipeline warns on both)
UNKNOWN_OP = "neither ONNX nor ONNX Runtime's contrib schemas define it (custom op); kept as it is"
UNKNOWN_SLOT = "not in ONNX Runtime's contrib schema table (a newer op version?); kept as it is"


@dataclass(frozen=True)
class Slot:
    """One formal parameter of a schema: its type variable (or fixed type) and admitted types."""

    type_str: str
    allowed: frozenset[str]
    variadic: bool
    is_type_var: bool
    homogeneous: bool = True
    name: str = ""


@dataclass(frozen=True)
class OpSignature:
    """Formal inputs and outputs of an op at one opset, resolved to their admitted types."""

    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    source: str = ONNX

    def input_slot(self, index: int) -> Slot | None:
        return param_at(self.inputs, index)

    def output_slot(self, index: int) -> Slot | None:
        return param_at(self.outputs, index)

    @functools.cached_property
    def output_type_vars(self) -> frozenset[str]:
        """Type variables bound to at least one output: the node's data path."""
        return frozenset(s.type_str for s in self.outputs if s.is_type_var)

    def names_of(self, type_var: str) -> list[str]:
        """The formal names bound to `type_var` (for messages)."""
        return [s.name for s in self.inputs + self.outputs if s.type_str == type_var]


def param_at(params: Sequence[P], index: int) -> P | None:
    """The formal parameter that input/output `index` binds to (a variadic last one repeats)."""
    if index < len(params):
        return params[index]
    if params and params[-1].variadic:
        return params[-1]
    return None


@functools.lru_cache(maxsize=4096)
def _onnx_schema(op_type: str, domain: str, opset: int) -> onnx.defs.OpSchema | None:
    """onnx's schema of the op at `opset` (a copy made in C++ per call: worth caching)."""
    try:
        return onnx.defs.get_schema(op_type, opset, domains.normalise(domain))
    except onnx.defs.SchemaError:
        return None


def _resolve(param: onnx.defs.OpSchema.FormalParameter, constraints: dict[str, list[str]]) -> Slot:
    variadic = param.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    homogeneous = not variadic or param.is_homogeneous
    if param.type_str in constraints:
        allowed = frozenset(constraints[param.type_str])
        return Slot(param.type_str, allowed, variadic, True, homogeneous, param.name)
    fixed = frozenset([param.type_str])
    return Slot(param.type_str, fixed, variadic, False, homogeneous, param.name)


def _from_table(entry: ContribSchema) -> OpSignature:
    def slot(f: Formal) -> Slot:
        allowed = entry.type_constraints.get(f.type_str)
        variadic = f.option == "variadic"
        if allowed is not None:
            return Slot(f.type_str, allowed, variadic, True, f.homogeneous, f.name)
        return Slot(f.type_str, frozenset([f.type_str]), variadic, False, True, f.name)

    return OpSignature(
        tuple(slot(f) for f in entry.inputs), tuple(slot(f) for f in entry.outputs), ORT_TABLE
    )


def runtime_schema(op_type: str, domain: str, opset: int) -> ContribSchema | None:
    """ORT's schema of an op onnx does not define at `opset` (None where onnx does, or none)."""
    if _onnx_schema(op_type, domain, opset) is not None:
        return None
    return load_contrib_table().lookup(domains.normalise(domain), op_type, opset)


@functools.lru_cache(maxsize=4096)
def signature(op_type: str, domain: str, opset: int) -> OpSignature | None:
    """The op's signature at `opset` (onnx.defs, else ORT's table); None if neither knows it."""
    schema = _onnx_schema(op_type, domain, opset)
    if schema is None:
        entry = load_contrib_table().lookup(domains.normalise(domain), op_type, opset)
        return None if entry is None else _from_table(entry)
    constraints = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    return OpSignature(
        inputs=tuple(_resolve(p, constraints) for p in schema.inputs),
        outputs=tuple(_resolve(p, constraints) for p in schema.outputs),
    )


@functools.lru_cache(maxsize=1024)
def has_attribute(op_type: str, domain: str, opset: int, name: str) -> bool:
    """Whether the op's schema at `opset` (onnx.defs, else ORT's table) declares `name`."""
    schema = _onnx_schema(op_type, domain, opset)
    if schema is not None:
        return name in schema.attributes
    entry = load_contrib_table().lookup(domains.normalise(domain), op_type, opset)
    return entry is not None and name in entry.attributes


@functools.lru_cache(maxsize=4096)
def has_function_body(op_type: str, domain: str, opset: int) -> bool:
    """True when the op's ONNX schema at `opset` defines a function body ORT can inline."""
    schema = _onnx_schema(op_type, domain, opset)
    if schema is None:
        return False
    return bool(getattr(schema, "has_function", False)) or bool(
        getattr(schema, "has_context_dependent_function", False)
    )


def is_known_op(op_type: str, domain: str) -> bool:
    """Whether any schema version of the op exists (for messages about user op names)."""
    d = domains.normalise(domain)
    return onnx.defs.has(op_type, d) or op_type in load_contrib_table().ops(d)


def type_name(dtype: ir.DataType) -> str:
    """The schema spelling of a tensor element type, e.g. 'tensor(float16)'."""
    return _TYPE_NAMES.get(dtype) or f"tensor({dtype.name.lower()})"


def admits(
    op_type: str,
    domain: str,
    opset: int,
    input_dtypes: Sequence[ir.DataType | None],
    output_dtypes: Sequence[ir.DataType | None],
) -> bool:
    """Whether the op's schema at `opset` admits these element types (None: unknown, ok)."""
    sig = signature(op_type, domain, opset)
    if sig is None:
        return True
    pairs = [(sig.input_slot(i), d) for i, d in enumerate(input_dtypes)]
    pairs += [(sig.output_slot(i), d) for i, d in enumerate(output_dtypes)]
    return all(
        slot is None or d is None or not slot.is_type_var or type_name(d) in slot.allowed
        for slot, d in pairs
    )


def unbound_slots(node: ir.Node, sig: OpSignature) -> list[str]:
    """Inputs/outputs of `node` that no formal of `sig` describes (a newer op version's extras)."""
    missing = [
        f"input {i}"
        for i, v in enumerate(node.inputs)
        if v is not None and sig.input_slot(i) is None
    ]
    missing += [f"output {i}" for i, _ in enumerate(node.outputs) if sig.output_slot(i) is None]
    return missing


def unknown_warnings(model: ir.Model) -> list[str]:
    """Warnings for nodes kept as they are because no schema describes them (one per op).

    Ops outside the ONNX domains that neither onnx nor ORT's table defines, and nodes with inputs
    or outputs their schema has no formal for (an op version newer than the table).
    """
    opsets = model.opset_imports
    unknown: dict[str, int] = {}
    unbound: dict[str, list[str]] = {}
    for node in walk.all_nodes(model.graph):
        domain = domains.normalise(node.domain)
        if domain in (domains.DEFAULT, "ai.onnx.ml"):
            continue
        key = domains.op_key(domain, node.op_type)
        sig = signature(node.op_type, domain, domains.opset_version(opsets, domain))
        if sig is None:
            unknown[key] = unknown.get(key, 0) + 1
        elif slots := unbound_slots(node, sig):
            unbound.setdefault(key, []).append(f"{node.name or '<unnamed>'} ({', '.join(slots)})")
    out = [f"{n} node(s) of {key}: {UNKNOWN_OP}" for key, n in unknown.items()]
    out += [
        f"{key}: {names[0]}{f' and {len(names) - 1} more' if len(names) > 1 else ''} "
        f"{UNKNOWN_SLOT} (ORT {table_version()})"
        for key, names in unbound.items()
    ]
    return out


def table_version() -> str:
    """The ONNX Runtime version the contrib schema table was generated from."""
    return load_contrib_table().ort_version


def has_stash_type(op_type: str, opset: int) -> bool:
    """Whether the op's schema at `opset` has `stash_type` (statistics type independent of I/O)."""
    return op_type in STASH_NORMS and has_attribute(op_type, "", opset, "stash_type")
