"""Which element types a target runtime has kernels for, per op, domain and opset.

The schema says what a model may contain; the runtime decides what runs where. ONNX Runtime's CUDA
provider has no kernel for some ops in some types (Clip-11 in FP16, BatchNormalization with FP16 X
and FP32 statistics...), and places those nodes on the CPU with a copy each way. A KernelTable
answers "does some kernel take these element types?" so the converter can avoid emitting them.

Answers are per element type: a value's dtype is matched against the type constraint its formal
parameter binds (sequence and optional types by their element type). Unknown dtypes (None) are not
checked. An op the table has no kernel for at all is rejected in every type (it runs on the CPU):
`has_kernel` tells that case from "no kernel in this type".

ONNX Runtime places a node on the first provider with a kernel for its types (CUDA, then CPU; an
FP16 node with neither gets Casts to FP32 and runs on the CPU). A node no provider claims whose
schema has a function body (GroupNormalization-21, Mish, Bernoulli, Clip-13 in BF16...) is inlined
instead and its body nodes are placed one by one. `inlined()` tells that case; accepts() still
answers with a reason there, because the body is not checked: GroupNormalization-21's body runs on
CUDA in FP16, but BF16 Clip-13's body (a Where-9) makes ORT refuse the model.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import onnx_ir as ir

from amp_convert import schema
from amp_convert.core import domains
from amp_convert.errors import TargetError
from amp_convert.schema import OpSignature, Slot
from amp_convert.targets.formals import doc_formals
from amp_convert.targets.registry import SHIPPED
from amp_convert.targets.table_format import validate_table

_SHORT = {"float16": "FP16", "bfloat16": "BF16", "float": "FP32", "double": "FP64"}
_FLOATS = frozenset(_SHORT)


_domain = domains.qualified  # ORT's registry spells the default domain "ai.onnx"


def element(type_name: str) -> str:
    """'float16' -> 'float16'; 'seq(float16)' / 'optional(seq(float16))' -> 'float16'."""
    return re.findall(r"[A-Za-z0-9_]+", type_name)[-1]


def dtype_name(dtype: ir.DataType) -> str:
    """The ONNX spelling of an element type: FLOAT16 -> 'float16', FLOAT -> 'float'."""
    return ir.DataType(dtype).name.lower()


def short(type_name: str) -> str:
    """'float16' -> 'FP16' for messages; other types as they are."""
    return _SHORT.get(type_name, type_name)


@dataclass(frozen=True)
class Kernel:
    """One registered opset range and the element types each type constraint accepts there."""

    since: int
    until: int | None
    types: Mapping[str, frozenset[str]]

    def covers(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset <= self.until)


@dataclass(frozen=True)
class Constraint:
    """A rule the registry listing cannot express, with the reason it holds."""

    kind: str
    since: int
    until: int | None
    type_params: tuple[str, ...]
    allowed: tuple[tuple[str, ...], ...]
    reason: str

    def covers(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset <= self.until)


@dataclass(frozen=True)
class _OpEntry:
    kernels: tuple[Kernel, ...]
    params: tuple[dict[str, list[list[str]]], ...]
    constraints: tuple[Constraint, ...]


Dtypes = Sequence[ir.DataType | None]
Binding = dict[str, list[tuple[str, str]]]  # type var -> [(formal name, element type)]


class KernelTable:
    """The kernels one target registers. Build with load_target() or load_table()."""

    def __init__(
        self,
        name: str,
        *,
        display: str = "",
        provider: str = "",
        ort_version: str | None = None,
        source: Mapping[str, Any] | None = None,
        ops: Mapping[tuple[str, str], _OpEntry] | None = None,
        raw_ops: Mapping[tuple[str, str], tuple[Any, list[Any]]] | None = None,
        load_time_ops: Mapping[tuple[str, str], str] | None = None,
        accept_all: bool = False,
        fallback: str | None = None,
    ) -> None:
        self.name = name
        self.display = display or name
        self.provider = provider
        self.ort_version = ort_version
        self.source = dict(source or {})
        self.accept_all = accept_all
        self._ops = dict(ops or {})
        self._raw = dict(raw_ops or {})  # (domain, op) -> (file entry, constraints), not built
        self._load_time = dict(load_time_ops or {})
        self._answers: dict[tuple, str | None] = {}  # accepts() by (op, domain, opset, types)
        self.fallback = fallback
        """The target that claims what this one does not (ORT CUDA: "ort-cpu"); None: nothing."""

    def __repr__(self) -> str:
        ops = len(self._ops) + len(self._raw)
        return f"KernelTable({self.name!r}, ort_version={self.ort_version!r}, ops={ops})"

    def entry(self, op_type: str, domain: str) -> _OpEntry | None:
        """The op's kernels and constraints (built from the file's entry at the first lookup)."""
        key = (_domain(domain), op_type)
        found = self._ops.get(key)
        if found is None and key in self._raw:
            found = self._ops[key] = _op_entry(*self._raw.pop(key))
        return found

    def op_types(self) -> frozenset[str]:
        """Every op type the table registers a kernel for (any domain, opset or type), built
        or not yet."""
        return frozenset(op for _, op in (*self._ops, *self._raw))

    def _kernels(self, op_type: str, domain: str, opset: int) -> tuple[_OpEntry | None, list]:
        entry = self.entry(op_type, domain)
        if entry is None:
            return None, []
        return entry, [k for k in entry.kernels if k.covers(opset)]

    def has_kernel(self, op_type: str, domain: str, opset: int) -> bool:
        """True when some kernel is registered for the op at `opset`, in whatever type.

        Ops the runtime resolves while loading (Constant) count as having one; the "none" target
        has every kernel.
        """
        if self.accept_all or (_domain(domain), op_type) in self._load_time:
            return True
        return bool(self._kernels(op_type, domain, opset)[1])

    def accepts(
        self,
        op_type: str,
        domain: str,
        opset: int,
        input_dtypes: Sequence[ir.DataType | None],
        output_dtypes: Sequence[ir.DataType | None] = (),
    ) -> str | None:
        """None when some kernel for the op at `opset` takes these element types, else why not.

        `input_dtypes[i]` / `output_dtypes[i]` is the element type of the node's i-th input/output
        (None: absent or unknown, not checked). Reasons read like "no FP16 kernel in ORT CUDA for
        Clip-11" or "ORT CUDA BatchNormalization-15 needs one float type for X, scale, B,
        input_mean, input_var". An op without any kernel gives "no ORT CUDA kernel for Op-N (it
        runs on the CPU)" whatever the types; see has_kernel. An op whose schema is unknown (no
        onnx.defs, no onnxruntime, no parameter list in the table) is only checked for having a
        kernel at that opset. A node ORT would inline gets a reason saying so (see inlined()).
        """
        if self.accept_all or (_domain(domain), op_type) in self._load_time:
            return None
        key = (op_type, domain, opset, tuple(input_dtypes), tuple(output_dtypes))
        try:
            return self._answers[key]  # a model repeats a few signatures thousands of times
        except KeyError:
            pass
        reason = self._reason(op_type, domain, opset, key[3], key[4])
        if reason is not None and self.inlined(op_type, domain, opset, key[3], key[4]):
            who = f"{self.display} or {self.fallback}" if self.fallback else self.display
            reason = (
                f"no {who} kernel takes {op_type}-{opset} in these types: "
                "ORT inlines its function body (not checked here)"
            )
        self._answers[key] = reason
        return reason

    def inlined(
        self, op_type: str, domain: str, opset: int, ins: Dtypes, outs: Dtypes = ()
    ) -> bool:
        """True when ORT would expand this node's function body instead of running a kernel.

        That is: the op has an ONNX function body at `opset`, no kernel here takes these types,
        and the fallback target (ORT's CPU provider) does not take them either. A node whose types
        its schema does not admit is never inlined (ORT refuses the model).
        """
        if self.accept_all or not schema.has_function_body(op_type, _domain(domain), opset):
            return False
        if not schema.admits(op_type, domain, opset, ins, outs):
            return False
        if self._reason(op_type, domain, opset, ins, outs) is None:
            return False
        if self.fallback is None:
            return True
        cpu = load_target(self.fallback)
        return cpu._reason(op_type, domain, opset, ins, outs) is not None

    def _reason(
        self,
        op_type: str,
        domain: str,
        opset: int,
        input_dtypes: Sequence[ir.DataType | None],
        output_dtypes: Sequence[ir.DataType | None],
    ) -> str | None:
        if self.accept_all or (_domain(domain), op_type) in self._load_time:
            return None
        entry, kernels = self._kernels(op_type, domain, opset)
        where = f"{op_type}-{opset}"
        if entry is None or not kernels:
            return f"no {self.display} kernel for {where} (it runs on the CPU)"
        formals = schema.signature(op_type, _domain(domain), opset)
        if formals is None and entry.params:
            type_vars = {v for k in kernels for v in k.types}
            formals = doc_formals(entry.params, type_vars, len(input_dtypes))
        if formals is None:
            return None
        binding, reason = _bind(formals, input_dtypes, output_dtypes, where)
        if reason is not None:
            return reason
        first: str | None = None
        for kernel in kernels:
            reason = self._check_kernel(kernel, binding, where, formals)
            if reason is None:
                reason = self._check_constraints(entry, opset, binding, where, formals)
            if reason is None:
                return None
            first = first or reason
        return first

    def _check_kernel(
        self, kernel: Kernel, binding: Binding, where: str, formals: OpSignature
    ) -> str | None:
        for var, seen in binding.items():
            allowed = kernel.types.get(var)
            if allowed is None:
                continue
            for _, name in seen:
                if name not in allowed:
                    detail = ""
                    if len(kernel.types) > 1:
                        detail = f" ({', '.join(_names_of(formals, var))}: {var})"
                    return f"no {short(name)} kernel in {self.display} for {where}{detail}"
        return None

    def _check_constraints(
        self, entry: _OpEntry, opset: int, binding: Binding, where: str, formals: OpSignature
    ) -> str | None:
        for c in entry.constraints:
            if not c.covers(opset):
                continue
            if c.kind == "same_type":
                names = {n for v in c.type_params for _, n in binding.get(v, [])}
                if len(names) > 1:
                    kind = "float type" if names <= _FLOATS else "type"
                    labels = [f.name for f in formals.inputs if f.type_str in c.type_params]
                    return f"{self.display} {where} needs one {kind} for {', '.join(labels)}"
            elif c.kind == "combinations":
                if not any(_matches(combo, c.type_params, binding) for combo in c.allowed):
                    got = [
                        f"{'/'.join(_names_of(formals, v))} {'/'.join(_seen(binding, v))}"
                        for v in c.type_params
                        if binding.get(v)
                    ]
                    return f"{self.display} {where} has no kernel for {', '.join(got)}"
            elif c.kind == "allowed_types":
                ok = {combo[0] for combo in c.allowed}
                for v in c.type_params:
                    for formal_name, name in binding.get(v, []):
                        if name not in ok:
                            return (
                                f"{self.display} {where} takes {formal_name} in "
                                f"{', '.join(sorted(ok))} only, not {name}"
                            )
        return None


def _seen(binding: Binding, var: str) -> list[str]:
    return sorted({n for _, n in binding.get(var, [])})


def _names_of(formals: OpSignature, var: str) -> list[str]:
    names = [f.name for f in formals.inputs + formals.outputs if f.type_str == var]
    return list(dict.fromkeys(names))


def _matches(combo: tuple[str, ...], type_params: tuple[str, ...], binding: Binding) -> bool:
    return all(
        all(name == want for _, name in binding.get(var, []))
        for var, want in zip(type_params, combo, strict=True)
    )


def _bind(
    formals: OpSignature,
    input_dtypes: Sequence[ir.DataType | None],
    output_dtypes: Sequence[ir.DataType | None],
    where: str,
) -> tuple[Binding, str | None]:
    """Element type per type variable; or why the types break the schema's own binding rules."""
    binding: Binding = {}
    homogeneous: dict[str, bool] = {}
    slots: list[tuple[Slot | None, ir.DataType | None]] = [
        (formals.input_slot(i), d) for i, d in enumerate(input_dtypes)
    ] + [(formals.output_slot(i), d) for i, d in enumerate(output_dtypes)]
    for formal, dtype in slots:
        if formal is None or dtype is None:
            continue
        name = dtype_name(dtype)
        if not formal.is_type_var:
            fixed = element(formal.type_str)
            if fixed != name:
                return binding, f"the {where} schema takes {fixed} for {formal.name}, not {name}"
            continue
        binding.setdefault(formal.type_str, []).append((formal.name, name))
        homogeneous[formal.type_str] = homogeneous.get(formal.type_str, True) and (
            formal.homogeneous
        )
    for var, seen in binding.items():
        names = {n for _, n in seen}
        if homogeneous[var] and len(names) > 1:
            labels = ", ".join(dict.fromkeys(f for f, _ in seen))
            got = ", ".join(sorted(names))
            return binding, f"the {where} schema needs one type for {labels} ({var}), got {got}"
    return binding, None


# ---------------------------------------------------------------------------------------------
# Loading table files (their format is checked by table_format.validate_table)


def table_from_data(
    data: Any, where: str = "kernel table", *, checked: bool = False
) -> KernelTable:
    """A KernelTable from a table file's parsed JSON, validated first unless `checked` (a
    shipped table: the tests validate it). An op's kernels are built at its first lookup."""
    if not checked:
        validate_table(data, where)
    constraints: dict[tuple[str, str], list[Any]] = {}
    for c in data.get("constraints", []):
        constraints.setdefault((_domain(c["domain"]), c["op"]), []).append(c)
    raw: dict[tuple[str, str], tuple[Any, list[Any]]] = {}
    for domain, entries in data["kernels"].items():
        for op, entry in entries.items():
            key = (_domain(domain), op)
            raw[key] = (entry, constraints.get(key, []))
    return KernelTable(
        data["target"],
        display=data.get("display", data["target"]),
        provider=data["provider"],
        ort_version=data["ort_version"],
        source=data.get("source", {}),
        raw_ops=raw,
        load_time_ops={
            (_domain(x["domain"]), x["op"]): x.get("reason", "")
            for x in data.get("load_time_ops", [])
        },
        fallback=data.get("fallback"),
    )


def _constraint(c: Any) -> Constraint:
    allowed = c.get("allowed", [])
    if c["kind"] != "combinations":
        allowed = [[t] for t in allowed]
    return Constraint(
        c["kind"],
        c["since"],
        c["until"],
        tuple(c["type_params"]),
        tuple(tuple(element(t) for t in combo) for combo in allowed),
        c["reason"],
    )


def _op_entry(entry: Any, constraints: list[Any]) -> _OpEntry:
    """One op's kernels and constraints as the table file writes them."""
    kernels = tuple(
        Kernel(
            k["since"],
            k["until"],
            {v: frozenset(element(t) for t in ts) for v, ts in k["types"].items()},
        )
        for k in entry["kernels"]
    )
    return _OpEntry(
        kernels, tuple(entry.get("params", [])), tuple(_constraint(c) for c in constraints)
    )


def load_table(path: str | Path) -> KernelTable:
    """Read and validate a kernel table file; TargetError says what is wrong with it."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise TargetError(f"{p}: cannot read kernel table: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        where = f"line {e.lineno}, column {e.colno}"
        raise TargetError(f"{p}: not valid JSON ({where}): {e.msg}") from None
    return table_from_data(data, str(p))


def _load_shipped(path: Path) -> KernelTable:
    """A table shipped with amp-convert: read, not validated again (tests/targets validates the
    shipped files against table_format)."""
    return table_from_data(json.loads(path.read_text(encoding="utf-8")), str(path), checked=True)


def load_target(name: str = "ort-cuda") -> KernelTable:
    """The kernel table of a named target, loaded once.

    "ort-cuda": ONNX Runtime's CUDA provider (package data, see ort_cuda_kernels.json).
    "ort-cpu": ONNX Runtime's CPU provider (the CUDA table's fallback).
    "none": accepts everything (schema-only conversion for other runtimes).
    A table file is read with load_table(path); the conversion's whole Target (this table with
    its accumulation facts and rewrites) comes from targets.build_target.
    """
    return _load_target(name)


@functools.cache
def _load_target(name: str) -> KernelTable:
    spec = SHIPPED.get(name)
    if spec is not None and spec.kernel_file is None:
        return KernelTable(name, display="no target", accept_all=True)
    if spec is not None and spec.kernel_file is not None:
        ref = resources.files("amp_convert.targets").joinpath(spec.kernel_file)
        with resources.as_file(ref) as path:
            return _load_shipped(path)
    known = ", ".join(SHIPPED)
    raise TargetError(f"unknown target {name!r}: use one of {known} (a table file: load_table)")
