"""How a target's kernels accumulate for low-precision inputs, as package data.

The kernel table (kernel_table.py) says which types a kernel takes; this table says where its sums
are kept, so that a kernel that holds a sum in FP16 is known by the limit that implies. The rows
are read from ONNX Runtime's CUDA sources and checked on a GPU (``ort_cuda_accumulation.json``:
op, types, mode, where the sum is kept, the limit, the source file and function, the evidence).

Three readers:

- classify: a deny-listed op whose kernel keeps FP32 statistics and has a bounded output
  (``low_between_low``: Softmax, LogSoftmax, InstanceNormalization) takes low I/O between low
  neighbours (`fp32_accumulating`);
- the emulator and ``--auto``'s range guard: ops whose kernel holds a sum in the low type
  (``kept_in == "low"``: ReduceMean's fast path writes the sum into the FP16 output before
  dividing) overflow where that sum passes the low type's range (`held_sum_ops`);
- the conversion report: a node placed low that depends on such a limit is named
  (`limited_row`).

A target without a file (registry.py: ``accumulation_file`` None) has no rows: plain functions of
the target name, so that a Target object can wrap them.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

from amp_convert.targets.registry import SHIPPED

#: where a kernel keeps its sums: in FP32, or in the low-precision I/O type
KEPT_IN = ("float", "low")
#: the quantity a held sum bounds: "sum" = |sum of the reduced values|; "output" = the output only
LIMITS = ("sum", "output")
MODES = ("any", "default", "strict")


@dataclass(frozen=True)
class Accumulation:
    """One row: how `op` accumulates for `types` (in `mode` of the provider) on a target."""

    op: str
    domain: str
    types: tuple[str, ...]
    mode: str
    kept_in: str
    statistic: str
    limit: str
    limit_text: str
    source: str
    evidence: str
    low_between_low: bool

    @property
    def holds_sum(self) -> bool:
        """True where a sum is held in the low type: the result depends on `limit_text`."""
        return self.kept_in == "low"


def _row(data: dict) -> Accumulation:
    row = Accumulation(
        op=str(data["op"]),
        domain=str(data.get("domain", "")),
        types=tuple(data["types"]),
        mode=str(data.get("mode", "any")),
        kept_in=str(data["kept_in"]),
        statistic=str(data["statistic"]),
        limit=str(data["limit"]),
        limit_text=str(data["limit_text"]),
        source=str(data["source"]),
        evidence=str(data["evidence"]),
        low_between_low=bool(data.get("low_between_low", False)),
    )
    if row.kept_in not in KEPT_IN or row.limit not in LIMITS or row.mode not in MODES:
        raise ValueError(f"accumulation row for {row.op}: bad kept_in/limit/mode in {data}")
    return row


@functools.cache
def accumulation_rows(target: str) -> tuple[Accumulation, ...]:
    """Every row of `target`'s accumulation table (empty for a target without one)."""
    spec = SHIPPED.get(target)
    name = spec.accumulation_file if spec is not None else None
    if name is None:
        return ()
    text = resources.files("amp_convert.targets").joinpath(name).read_text()
    return tuple(_row(r) for r in json.loads(text)["rows"])


def _domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def accumulation_for(
    target: str, op: str, domain: str = "", dtype: str = "float16", mode: str = "default"
) -> Accumulation | None:
    """The row for `op` in `dtype` (an ONNX type name) on `target` in the provider's `mode`."""
    for row in accumulation_rows(target):
        if (
            row.op == op
            and row.domain == _domain(domain)
            and dtype in row.types
            and row.mode in ("any", mode)
        ):
            return row
    return None


@functools.cache
def held_sum_ops(target: str) -> frozenset[tuple[str, str]]:
    """(domain, op) of the ops whose kernel holds the sum of their inputs in the low type."""
    return frozenset(
        (r.domain, r.op) for r in accumulation_rows(target) if r.holds_sum and r.limit == "sum"
    )


def limited_row(target: str, op: str, domain: str, dtype: str) -> Accumulation | None:
    """The row that makes a low `op` node depend on a limit (a sum held low), else None."""
    row = accumulation_for(target, op, domain, dtype)
    return row if row is not None and row.holds_sum else None


@functools.cache
def fp32_accumulating(target: str) -> dict[str, str]:
    """op type -> reason (with the kernel source) for deny-listed ops `target` accumulates in FP32
    with a bounded output: they take low I/O between low neighbours."""
    return {
        r.op: f"{r.source}; {r.limit_text}"
        for r in accumulation_rows(target)
        if r.low_between_low and r.kept_in == "float"
    }
