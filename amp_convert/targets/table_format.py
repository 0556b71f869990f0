"""The kernel table file format (format 1) and its validation, apart from the table's queries.

A table file is JSON: {"format": 1, "target", "provider", "ort_version", "kernels": {domain: {op:
{"kernels": [{"since", "until", "types": {var: [type names]}}], "params": [...]}}},
"constraints": [...], "fallback", "load_time_ops": [...]}. scripts/gen_ort_cuda_kernels.py
writes it; kernel_table.table_from_data reads it after validate_table has named the first thing
wrong with it. The tables shipped as package data are named by the registry (registry.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from amp_convert.errors import TargetError
from amp_convert.targets.registry import SHIPPED

FORMAT = 1
CONSTRAINT_KINDS = ("same_type", "combinations", "allowed_types")
_TYPE_NAME = re.compile(r"^[a-z][a-z0-9_]*(\([a-z0-9_(), ]+\))?$")


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
    if fallback is not None and fallback not in SHIPPED:
        raise _fail(
            where, f"'fallback' must be one of {', '.join(SHIPPED)} or null, got {fallback!r}"
        )
    load_time = data.get("load_time_ops", [])
    if not isinstance(load_time, list) or not all(
        isinstance(x, dict) and isinstance(x.get("op"), str) and isinstance(x.get("domain"), str)
        for x in load_time
    ):
        raise _fail(where, "'load_time_ops' must be a list of {op, domain, reason}")
