"""The input model's ONNX Runtime ops checked against ORT's own schemas, before any conversion.

onnx's checker leaves ops outside its domains (com.microsoft's fused ops, ORT's ONNX-domain
extras such as SimplifiedLayerNormalization) to their runtime, so an input whose FastGelu reads
int32, whose SkipLayerNormalization has an int64 gamma or whose Attention has one input passed it:
the conversion then failed as a "converter bug" or wrote a model ONNX Runtime refuses (as it
refuses the input). Here they are refused as the input's fault, naming the node, with the check
ORT makes when it loads a model: the inputs and outputs a schema requires are present, and each
typed value's element type is admitted by its formal, one type per type variable. Values of
unknown type, and slots the table does not declare (a newer ORT's), are left alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from amp_convert import schema
from amp_convert.core import domains, walk
from amp_convert.errors import InputError
from amp_convert.schema.contrib import ContribSchema, Formal, load_contrib_table


def _label(node: ir.Node) -> str:
    key = domains.op_key(domains.normalise(node.domain), node.op_type)
    return f"node {node.name!r} ({key})" if node.name else f"a {key} node"


def _formal_at(formals: tuple[Formal, ...], index: int) -> Formal | None:
    """The formal that input/output `index` binds to (a variadic last one repeats)."""
    if index < len(formals):
        return formals[index]
    return formals[-1] if formals and formals[-1].option == "variadic" else None


def _present(values: Sequence[ir.Value | None]) -> list[ir.Value | None]:
    """The node's slots with empty ones as None and trailing empty ones dropped."""
    slots = [v if v is not None and v.name else None for v in values]
    while slots and slots[-1] is None:
        slots.pop()
    return slots


def _arity(formals: tuple[Formal, ...], values: list[ir.Value | None], kind: str) -> str | None:
    """Why the node lacks a required input/output (ONNX's min rule, empty single formals), or None.

    More slots than the table declares are left to schema.unknown_warnings: a newer ORT may have
    added them (the table comes from one ORT version).
    """
    required = max((i + 1 for i, f in enumerate(formals) if f.option == "single"), default=0)
    count = len(values)
    if count < required:
        missing = formals[count]
        return (
            f"has {count} {kind}(s) but ONNX Runtime's schema requires at least {required} "
            f"({kind} {count} {missing.name!r} is missing)"
        )
    for i, value in enumerate(values):
        formal = _formal_at(formals, i)
        if value is None and formal is not None and formal.option == "single":
            return f"leaves its required {kind} {i} {formal.name!r} empty"
    return None


def _types(entry: ContribSchema, node: ir.Node) -> str | None:
    """Why a typed input/output is not admitted by its formal, or None."""
    bound: dict[str, tuple[ir.DataType, str]] = {}
    for kind, formals, values in (
        ("input", entry.inputs, node.inputs),
        ("output", entry.outputs, node.outputs),
    ):
        for i, value in enumerate(values):
            formal = _formal_at(formals, i)
            if value is None or formal is None or value.dtype is None:
                continue
            if value.type is not None and not isinstance(value.type, ir.TensorType):
                continue
            name = schema.type_name(value.dtype)
            allowed = entry.type_constraints.get(formal.type_str, frozenset([formal.type_str]))
            where = f"{kind} {i} {formal.name!r} (value {value.name!r})"
            if name not in allowed:
                admitted = ", ".join(sorted(a.removeprefix("tensor(")[:-1] for a in allowed))
                return (
                    f"{where} is {value.dtype.name.lower()}, but ONNX Runtime's schema admits "
                    f"only {admitted}"
                )
            if formal.type_str in entry.type_constraints and formal.homogeneous:
                first = bound.setdefault(formal.type_str, (value.dtype, where))
                if first[0] != value.dtype:
                    return (
                        f"{where} is {value.dtype.name.lower()}, but {first[1]} is "
                        f"{first[0].name.lower()} and both are {formal.type_str}"
                    )
    return None


def check_runtime_ops(model: ir.Model) -> int:
    """InputError for the first node of an ORT-defined op its schema refuses; nodes checked.

    ORT's table is read only when the model has an op onnx does not define."""
    opsets = model.opset_imports
    checked = 0
    for node in walk.all_nodes(model.graph):
        domain = domains.normalise(node.domain)
        opset = domains.opset_version(opsets, domain)
        if domain == domains.DEFAULT:
            entry = schema.runtime_schema(node.op_type, domain, opset)
        elif domain == "com.microsoft":
            entry = load_contrib_table().lookup(domain, node.op_type, opset)
        else:
            continue
        if entry is None:
            continue
        checked += 1
        problem = (
            _arity(entry.inputs, _present(node.inputs), "input")
            or _arity(entry.outputs, _present(node.outputs), "output")
            or _types(entry, node)
        )
        if problem:
            raise InputError(
                f"the input model's {_label(node)}: {problem}; ONNX Runtime "
                f"{load_contrib_table().ort_version} refuses this node too (fix the model; "
                "nothing was converted)"
            )
    return checked
