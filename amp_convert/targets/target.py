"""The runtime a conversion is for, as one object built once: what its kernels take, what it
accumulates in FP32, which graph rewrites it wants.

Steps ask the Target for capabilities (``target.kernels.accepts(...)``,
``target.accumulates_fp32(op)``, ``target.wants(Rewrite.GLOBAL_POOL)``), never for its name, so a
new runtime (TensorRT, DirectML, ROCm) is one entry of the registry (registry.py: its kernel table
and accumulation facts as package data beside it), or one ``register_target`` call for a runtime
kept outside the package; no step changes. Validation and ``--auto`` take the Target of the
runtime they judge on (`target_for_provider`).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from amp_convert.core import domains
from amp_convert.errors import TargetError
from amp_convert.targets.accumulation import (
    Accumulation,
    fp32_accumulating,
    held_sum_ops,
    limited_row,
)
from amp_convert.targets.kernel_table import KernelTable, load_target
from amp_convert.targets.registry import SHIPPED, Rewrite, TargetSpec, shipped_for_provider

__all__ = [
    "Rewrite",
    "Target",
    "build_target",
    "register_target",
    "target_for_provider",
    "target_names",
]


@dataclass(frozen=True)
class Target:
    """One runtime's capabilities; ``kernels`` of the schema-only target accepts everything."""

    name: str
    kernels: KernelTable
    #: op type -> the kernel source showing it accumulates in FP32 (a range-bounded output)
    accumulation: Mapping[str, str] = field(default_factory=lambda: types.MappingProxyType({}))
    rewrites: frozenset[Rewrite] = frozenset()
    #: the accumulation table whose held-sum limits (ReduceMean's FP16 sum) a result is judged
    #: by; the schema-only target's results most often run on ORT CUDA, so it names that one
    held_sums: str | None = None

    def held_sum(self, op: str, domain: str, dtype: str) -> Accumulation | None:
        """The table row when the target's kernel for ``op`` holds a sum in ``dtype``."""
        return None if self.held_sums is None else limited_row(self.held_sums, op, domain, dtype)

    def holds_input_sum(self, op: str, domain: str = "") -> bool:
        """Whether the kernel for ``op`` holds the sum of its inputs in the low type (ORT CUDA's
        ReduceMean writes it into its FP16 output before dividing)."""
        if self.held_sums is None:
            return False
        return ("" if domains.is_default(domain) else domain, op) in held_sum_ops(self.held_sums)

    @property
    def checks_kernels(self) -> bool:
        """Whether a kernel table limits what goes low (the schema-only target: no)."""
        return not self.kernels.accept_all

    def wants(self, rewrite: Rewrite) -> bool:
        return rewrite in self.rewrites

    def accumulates_fp32(self, op_type: str) -> str | None:
        """The kernel source when the target accumulates ``op_type`` in FP32, else None."""
        return self.accumulation.get(op_type)

    def describe(self) -> str:
        """The report's line for the target."""
        if not self.checks_kernels:
            return f"{self.name} (ONNX schemas only)"
        return f"{self.name} (kernel table from ONNX Runtime {self.kernels.ort_version})"


def _shipped(spec: TargetSpec) -> Callable[[], Target]:
    """A target whose kernel table and accumulation facts ship as package data."""

    def build() -> Target:
        accumulation = types.MappingProxyType(dict(fp32_accumulating(spec.name)))
        kernels = load_target(spec.name)
        return Target(spec.name, kernels, accumulation, spec.rewrites, spec.held_sums)

    return build


#: the targets a conversion can name, in the order the command line lists them: the shipped
#: ones (registry.py) and any registered from outside
_BUILDERS: dict[str, Callable[[], Target]] = {n: _shipped(s) for n, s in SHIPPED.items()}


def target_names() -> tuple[str, ...]:
    return tuple(_BUILDERS)


def register_target(name: str, build: Callable[[], Target] | None) -> None:
    """Add (or with None remove) a target by name: a runtime kept outside the package, a test."""
    if build is None:
        _BUILDERS.pop(name, None)
    else:
        _BUILDERS[name] = build
    build_target.cache_clear()


@functools.cache
def build_target(name: str) -> Target:
    """The named target, built once per process."""
    build = _BUILDERS.get(name)
    if build is None:
        raise TargetError(f"unknown target {name!r}: use one of {', '.join(_BUILDERS)}")
    target = build()
    if target.name != name:
        raise TargetError(f"target {name!r} was built as {target.name!r}")
    return target


def target_for_provider(provider: str) -> Target | None:
    """The Target of an ONNX Runtime execution provider ("CUDAExecutionProvider"), or None."""
    name = shipped_for_provider(provider)
    return None if name is None else build_target(name)
