"""Read one provider's section of ONNX Runtime's ``docs/OperatorKernels.md`` into plain data.

ORT generates that file from its kernel registry (tools/python/gen_opkernel_doc.py): per provider a
table with, per op, its formal parameters and, per opset range, the element types each type
constraint accepts. Typed registrations of one range are merged there (a union per constraint), so
combinations a provider does not register are lost; the table file adds those back as extra
constraints (see scripts/gen_ort_cuda_kernels.py).

The result is ``{domain: {op: {"params": [...], "kernels": [...]}}}`` with types spelled as in ONNX
without the ``tensor(...)`` wrapper: ``float16``, ``seq(float)``, ``optional(seq(int64))``.
"""

from __future__ import annotations

import re
from typing import Any

from amp_convert.errors import TargetError

_SECTION = re.compile(r"^##\s+Operators implemented by\s+(\S+)\s*$")
_DOMAIN_ROW = re.compile(r"^\|\*\*Operator Domain:\*\*\s*\*([^*]+)\*")
_PARAM = re.compile(r"\*(in|out)\*\s*([^:<]*):\*\*([^*]+)\*\*")
_TYPES = re.compile(r"^\s*\*\*([^*]+)\*\*\s*=\s*(.+?)\s*$")
_TENSOR = re.compile(r"tensor\(([A-Za-z0-9_]+)\)")


def parse_version(text: str) -> tuple[int, int | None]:
    """'13+' -> (13, None); '[6, 12]' -> (6, 12); '11' -> (11, 11)."""
    t = text.strip()
    if m := re.fullmatch(r"(\d+)\+", t):
        return int(m[1]), None
    if m := re.fullmatch(r"\[\s*(\d+)\s*,\s*(\d+)\s*\]", t):
        lo, hi = int(m[1]), int(m[2])
        if hi < lo:
            raise ValueError(f"opset range {t!r} ends before it starts")
        return lo, hi
    if m := re.fullmatch(r"\d+", t):
        return int(t), int(t)
    raise ValueError(f"opset version {t!r} is none of 'N+', '[A, B]', 'N'")


def normalize_type(text: str) -> str:
    """'tensor(float16)' -> 'float16'; 'seq(tensor(float))' -> 'seq(float)'."""
    return _TENSOR.sub(r"\1", text.strip())


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_types(cell: str) -> dict[str, list[str]]:
    """'**T** = tensor(float), tensor(float16)<br/> **U** = tensor(float)' -> {T: [..], U: [..]}."""
    out: dict[str, list[str]] = {}
    for chunk in cell.split("<br/>"):
        if not chunk.strip():
            continue
        m = _TYPES.match(chunk)
        if m is None:
            raise ValueError(f"type constraint {chunk.strip()!r} is not '**NAME** = type, ...'")
        names = [normalize_type(t) for t in _split_top_level(m[2])]
        out.setdefault(m[1].strip(), [])
        out[m[1].strip()] += [n for n in names if n not in out[m[1].strip()]]
    return out


def parse_params(cell: str) -> list[dict[str, list[list[str]]]]:
    """The formal parameter lists of an op (one per schema version shown, split on 'or')."""
    alternatives = []
    for alt in re.split(r"<br>\s*<br>\s*or\s*<br>\s*<br>", cell):
        ins: list[list[str]] = []
        outs: list[list[str]] = []
        for direction, name, type_str in _PARAM.findall(alt):
            (ins if direction == "in" else outs).append([name.strip(), type_str.strip()])
        if ins or outs:
            alternatives.append({"inputs": ins, "outputs": outs})
    return alternatives


def _cells(line: str) -> list[str]:
    body = line.strip()
    if not (body.startswith("|") and body.endswith("|")):
        raise ValueError("a table row must start and end with '|'")
    return body[1:-1].split("|")


def parse_operator_kernels(text: str, provider: str) -> dict[str, dict[str, dict[str, Any]]]:
    """The kernels `provider` registers, per domain and op, from OperatorKernels.md text.

    Raises TargetError naming the line when the section is missing or a row cannot be read.
    """
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if (m := _SECTION.match(line)) and m[1] == provider),
        None,
    )
    if start is None:
        raise TargetError(f"no '## Operators implemented by {provider}' section in the document")
    table: dict[str, dict[str, dict[str, Any]]] = {}
    domain: str | None = None
    current: dict[str, Any] | None = None
    for lineno in range(start + 1, len(lines)):
        line = lines[lineno].strip()
        if line.startswith("## ") or line.startswith("<a name="):
            break
        if not line.startswith("|") or line.startswith("| Op Name") or line.startswith("|---"):
            continue
        where = f"line {lineno + 1}"
        if m := _DOMAIN_ROW.match(line):
            domain, current = m[1].strip(), None
            table.setdefault(domain, {})
            continue
        try:
            cells = _cells(line)
            if all(not c.strip() for c in cells):
                continue
            if len(cells) != 4:
                raise ValueError(f"expected 4 cells, found {len(cells)}")
            name, params, version, types = (c.strip() for c in cells)
            if domain is None:
                raise ValueError("kernel row before any 'Operator Domain' row")
            if name:
                current = table[domain].setdefault(name, {"params": [], "kernels": []})
                for alt in parse_params(params):
                    if alt not in current["params"]:
                        current["params"].append(alt)
            elif current is None:
                raise ValueError("continuation row without an op row above it")
            since, until = parse_version(version)
            current["kernels"].append({"since": since, "until": until, "types": parse_types(types)})
        except ValueError as e:
            raise TargetError(f"{where}: {e}: {line[:120]}") from None
    if not any(table.values()):
        raise TargetError(f"the {provider} section lists no kernels")
    return table
