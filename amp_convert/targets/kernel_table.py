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

from amp_convert import domains, schema
from amp_convert.errors import TargetError
from amp_convert.schema import OpSignature, Slot
from amp_convert.targets.formals import doc_formals

FORMAT = 1
TARGETS = {"ort-cuda": "ort_cuda_kernels.json", "ort-cpu": "ort_cpu_kernels.json", "none": None}
CONSTRAINT_KINDS = ("same_type", "combinations", "allowed_types")

_SHORT = {"float16": "FP16", "bfloat16": "BF16", "float": "FP32", "double": "FP64"}
_FLOATS = frozenset(_SHORT)
_TYPE_NAME = re.compile(r"^[a-z][a-z0-9_]*(\([a-z0-9_(), ]+\))?$")


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
        self._load_time = dict(load_time_ops or {})
        self.fallback = fallback
        """The target that claims what this one does not (ORT CUDA: "ort-cpu"); None: nothing."""

    def __repr__(self) -> str:
        return f"KernelTable({self.name!r}, ort_version={self.ort_version!r}, ops={len(self._ops)})"

    def _kernels(self, op_type: str, domain: str, opset: int) -> tuple[_OpEntry | None, list]:
        entry = self._ops.get((_domain(domain), op_type))
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

    def kernel_types(self, op_type: str, domain: str, opset: int) -> list[Mapping[str, frozenset]]:
        """The type constraints of each kernel registered at `opset` (empty list: none)."""
        return [k.types for k in self._kernels(op_type, domain, opset)[1]]

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
        reason = self._reason(op_type, domain, opset, input_dtypes, output_dtypes)
        if reason is not None and self.inlined(op_type, domain, opset, input_dtypes, output_dtypes):
            who = f"{self.display} or {self.fallback}" if self.fallback else self.display
            return (
                f"no {who} kernel takes {op_type}-{opset} in these types: "
                "ORT inlines its function body (not checked here)"
            )
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

    def accepts_node(self, node: ir.Node, opset: int) -> str | None:
        """accepts() for an ir.Node, reading its inputs' and outputs' dtypes from the graph."""
        return self.accepts(
            node.op_type,
            node.domain,
            opset,
            [v.dtype if v is not None else None for v in node.inputs],
            [v.dtype for v in node.outputs],
        )

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
# Loading and validating table files


def _fail(where: str, message: str) -> TargetError:
    return TargetError(f"{where}: {message}")


def _check_range(obj: Mapping[str, Any], where: str) -> None:
    since, until = obj.get("since"), obj.get("until", "missing")
    if not isinstance(since, int) or isinstance(since, bool) or since < 1:
        raise _fail(where, f"'since' must be a positive integer, got {since!r}")
    if until is not None and (not isinstance(until, int) or isinstance(until, bool)):
        raise _fail(where, f"'until' must be an integer or null, got {until!r}")
    if until is not None and until < since:
        raise _fail(where, f"'until' {until} is before 'since' {since}")


def _check_type_names(values: Any, where: str) -> None:
    if not isinstance(values, list) or not values:
        raise _fail(where, f"must be a non-empty list of type names, got {values!r}")
    for v in values:
        if not isinstance(v, str) or not _TYPE_NAME.match(v):
            raise _fail(where, f"{v!r} is not a type name such as 'float16' or 'seq(float)'")


def _check_params(params: Any, where: str) -> None:
    if not isinstance(params, list):
        raise _fail(where, "'params' must be a list")
    for i, alt in enumerate(params):
        ok = isinstance(alt, dict) and all(
            isinstance(alt.get(k), list)
            and all(
                isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p)
                for p in alt[k]
            )
            for k in ("inputs", "outputs")
        )
        if not ok:
            raise _fail(f"{where}[{i}]", "needs 'inputs' and 'outputs' lists of [name, type]")


def validate_table(data: Any, where: str) -> None:
    """Raise TargetError naming the first thing wrong with a table file's content."""
    if not isinstance(data, dict):
        raise _fail(where, "a kernel table must be a JSON object")
    if data.get("format") != FORMAT:
        raise _fail(where, f"'format' must be {FORMAT}, got {data.get('format')!r}")
    for key in ("target", "provider", "ort_version"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise _fail(where, f"'{key}' must be a non-empty string, got {data.get(key)!r}")
    kernels = data.get("kernels")
    if not isinstance(kernels, dict) or not kernels:
        raise _fail(where, "'kernels' must be a non-empty object of domains")
    for domain, ops in kernels.items():
        if not isinstance(ops, dict):
            raise _fail(f"{where}: kernels[{domain!r}]", "must be an object of ops")
        for op, entry in ops.items():
            at = f"{where}: kernels[{domain!r}][{op!r}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("kernels"), list):
                raise _fail(at, "needs a 'kernels' list")
            if not entry["kernels"]:
                raise _fail(at, "'kernels' is empty")
            _check_params(entry.get("params", []), f"{at}['params']")
            for i, k in enumerate(entry["kernels"]):
                kat = f"{at}['kernels'][{i}]"
                if not isinstance(k, dict):
                    raise _fail(kat, "must be an object")
                _check_range(k, kat)
                if not isinstance(k.get("types"), dict):
                    raise _fail(kat, "'types' must be an object of type constraints")
                for var, values in k["types"].items():
                    _check_type_names(values, f"{kat}['types'][{var!r}]")
    constraints = data.get("constraints", [])
    if not isinstance(constraints, list):
        raise _fail(where, "'constraints' must be a list")
    for i, c in enumerate(constraints):
        cat = f"{where}: constraints[{i}]"
        if not isinstance(c, dict):
            raise _fail(cat, "must be an object")
        for key in ("op", "domain", "reason"):
            if not isinstance(c.get(key), str) or not c[key]:
                raise _fail(cat, f"'{key}' must be a non-empty string, got {c.get(key)!r}")
        _check_range(c, cat)
        if c.get("kind") not in CONSTRAINT_KINDS:
            raise _fail(cat, f"'kind' must be one of {', '.join(CONSTRAINT_KINDS)}")
        params = c.get("type_params")
        if not (isinstance(params, list) and params and all(isinstance(p, str) for p in params)):
            raise _fail(cat, "'type_params' must be a non-empty list of names")
        if c["kind"] == "allowed_types":
            _check_type_names(c.get("allowed"), f"{cat}['allowed']")
        elif c["kind"] == "combinations":
            allowed = c.get("allowed")
            if not isinstance(allowed, list) or not allowed:
                raise _fail(cat, "'allowed' must be a non-empty list of type tuples")
            for j, combo in enumerate(allowed):
                _check_type_names(combo, f"{cat}['allowed'][{j}]")
                if len(combo) != len(params):
                    raise _fail(
                        f"{cat}['allowed'][{j}]",
                        f"has {len(combo)} types for {len(params)} type_params",
                    )
    fallback = data.get("fallback")
    if fallback is not None and fallback not in TARGETS:
        raise _fail(
            where, f"'fallback' must be one of {', '.join(TARGETS)} or null, got {fallback!r}"
        )
    load_time = data.get("load_time_ops", [])
    if not isinstance(load_time, list) or not all(
        isinstance(x, dict) and isinstance(x.get("op"), str) and isinstance(x.get("domain"), str)
        for x in load_time
    ):
        raise _fail(where, "'load_time_ops' must be a list of {op, domain, reason}")


def table_from_data(data: Any, where: str = "kernel table") -> KernelTable:
    """A KernelTable from a table file's parsed JSON (validated first)."""
    validate_table(data, where)
    constraints: dict[tuple[str, str], list[Constraint]] = {}
    for c in data.get("constraints", []):
        allowed = c.get("allowed", [])
        if c["kind"] != "combinations":
            allowed = [[t] for t in allowed]
        constraints.setdefault((_domain(c["domain"]), c["op"]), []).append(
            Constraint(
                c["kind"],
                c["since"],
                c["until"],
                tuple(c["type_params"]),
                tuple(tuple(element(t) for t in combo) for combo in allowed),
                c["reason"],
            )
        )
    ops: dict[tuple[str, str], _OpEntry] = {}
    for domain, entries in data["kernels"].items():
        for op, entry in entries.items():
            kernels = tuple(
                Kernel(
                    k["since"],
                    k["until"],
                    {v: frozenset(element(t) for t in ts) for v, ts in k["types"].items()},
                )
                for k in entry["kernels"]
            )
            key = (_domain(domain), op)
            ops[key] = _OpEntry(
                kernels, tuple(entry.get("params", [])), tuple(constraints.get(key, []))
            )
    return KernelTable(
        data["target"],
        display=data.get("display", data["target"]),
        provider=data["provider"],
        ort_version=data["ort_version"],
        source=data.get("source", {}),
        ops=ops,
        load_time_ops={
            (_domain(x["domain"]), x["op"]): x.get("reason", "")
            for x in data.get("load_time_ops", [])
        },
        fallback=data.get("fallback"),
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


def load_target(name: str = "ort-cuda") -> KernelTable:
    """The kernel table of a named target, loaded once.

    "ort-cuda": ONNX Runtime's CUDA provider (package data, see ort_cuda_kernels.json).
    "ort-cpu": ONNX Runtime's CPU provider (the CUDA table's fallback).
    "none": accepts everything (schema-only conversion for other runtimes).
    A path ending in .json loads that table file.
    """
    return _load_target(name)


@functools.cache
def _load_target(name: str) -> KernelTable:
    if name == "none":
        return KernelTable("none", display="no target", accept_all=True)
    if name in TARGETS:
        ref = resources.files("amp_convert.targets").joinpath(TARGETS[name])
        with resources.as_file(ref) as path:
            return load_table(path)
    if name.endswith(".json"):
        return load_table(name)
    known = ", ".join(TARGETS)
    raise TargetError(f"unknown target {name!r}: use one of {known}, or a kernel table .json path")
