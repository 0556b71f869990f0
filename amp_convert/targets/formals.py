"""Which formal parameter, and so which type constraint, each input/output index of a node binds.

A kernel table speaks in type-constraint names ("T", "T1"...) of the op's schema at that opset;
a node has positional inputs. onnx.defs knows the ONNX domain; ORT's own schemas (contrib ops in
com.microsoft, and ai.onnx ops ORT defines itself such as LayerNormalization-1 and
SimplifiedLayerNormalization) come from onnxruntime when it is installed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import onnx.defs

from amp_convert import domains
from amp_convert import schema as onnx_schema


@dataclass(frozen=True)
class Formal:
    """One formal parameter: its name and the type constraint (or fixed type) it binds."""

    name: str
    type_str: str
    is_var: bool
    variadic: bool = False
    homogeneous: bool = True


@dataclass(frozen=True)
class Formals:
    """The formal inputs and outputs of an op at one opset, and where they came from."""

    inputs: tuple[Formal, ...]
    outputs: tuple[Formal, ...]
    source: str

    def input(self, index: int) -> Formal | None:
        return onnx_schema.param_at(self.inputs, index)

    def output(self, index: int) -> Formal | None:
        return onnx_schema.param_at(self.outputs, index)


def _is_variadic(option: Any) -> bool:
    return getattr(option, "name", str(option)).rsplit(".", 1)[-1] == "Variadic"


def _from_schema(schema: Any, source: str) -> Formals:
    """Formals of an onnx.defs.OpSchema or an onnxruntime schema (same shape, other spellings)."""
    vars_ = {c.type_param_str for c in schema.type_constraints}

    def formal(p: Any) -> Formal:
        type_str = getattr(p, "type_str", None) or p.typeStr
        homogeneous = getattr(p, "is_homogeneous", getattr(p, "isHomogeneous", True))
        return Formal(p.name, type_str, type_str in vars_, _is_variadic(p.option), homogeneous)

    return Formals(
        tuple(formal(p) for p in schema.inputs), tuple(formal(p) for p in schema.outputs), source
    )


@functools.cache
def _ort_schema_index() -> dict[tuple[str, str], list[tuple[int, Any]]] | None:
    """ORT's registered schemas by (domain, op), newest first; None without onnxruntime."""
    try:
        from onnxruntime.capi import _pybind_state
    except ImportError:
        return None
    index: dict[tuple[str, str], list[tuple[int, Any]]] = {}
    for s in _pybind_state.get_all_operator_schema():
        index.setdefault((domains.normalise(s.domain), s.name), []).append((s.since_version, s))
    for versions in index.values():
        versions.sort(key=lambda v: -v[0])
    return index


@functools.lru_cache(maxsize=4096)
def schema_formals(op_type: str, domain: str, opset: int) -> Formals | None:
    """The op's formals at `opset` from onnx.defs, else ORT's schemas; None if neither knows it."""
    onnx_domain = domains.normalise(domain)
    try:
        return _from_schema(onnx.defs.get_schema(op_type, opset, onnx_domain), "onnx")
    except onnx.defs.SchemaError:
        pass
    index = _ort_schema_index()
    if index is None:
        return None
    for since, schema in index.get((onnx_domain, op_type), []):
        if since <= opset:
            return _from_schema(schema, "onnxruntime")
    return None


def doc_formals(
    alternatives: Sequence[dict[str, list[list[str]]]], type_vars: set[str], n_inputs: int
) -> Formals | None:
    """Formals read from the table's own parameter lists, when no schema is available.

    The document lists one parameter list per schema version without saying which is which; pick
    the one using most of the type variables the kernel constrains (and no others) that has room
    for the inputs; the first listed on a tie.
    """

    def build(alt: dict[str, list[list[str]]]) -> Formals:
        def formal(pair: list[str]) -> Formal:
            return Formal(pair[0], pair[1], not pair[1].startswith(("tensor(", "seq(")))

        return Formals(
            tuple(formal(p) for p in alt["inputs"]),
            tuple(formal(p) for p in alt["outputs"]),
            "table",
        )

    candidates = [build(a) for a in alternatives]
    fitting = [
        (len(used), -i, f)
        for i, f in enumerate(candidates)
        if (used := {x.type_str for x in f.inputs + f.outputs if x.is_var}) <= type_vars
        and len(f.inputs) >= n_inputs
    ]
    if fitting:
        return max(fitting, key=lambda t: t[:2])[2]
    return candidates[0] if candidates else None


@functools.lru_cache(maxsize=4096)
def has_function_body(op_type: str, domain: str, opset: int) -> bool:
    """True when the op's ONNX schema at `opset` defines a function body ORT can inline."""
    onnx_domain = domains.normalise(domain)
    try:
        schema = onnx.defs.get_schema(op_type, opset, onnx_domain)
    except onnx.defs.SchemaError:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def schema_admits(
    op_type: str,
    domain: str,
    opset: int,
    input_dtypes: Sequence[Any],
    output_dtypes: Sequence[Any],
) -> bool:
    """Whether the op's ONNX schema at `opset` admits these element types (None: unknown, ok)."""
    sig = onnx_schema.signature(op_type, domains.normalise(domain), opset)
    if sig is None:
        return True
    pairs = [(sig.input_slot(i), d) for i, d in enumerate(input_dtypes)]
    pairs += [(sig.output_slot(i), d) for i, d in enumerate(output_dtypes)]
    return all(
        slot is None
        or d is None
        or not slot.is_type_var
        or onnx_schema.type_name(d) in slot.allowed
        for slot, d in pairs
    )
