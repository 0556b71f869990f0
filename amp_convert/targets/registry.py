"""The one registry of targets: every runtime a conversion can name, and its package data.

A shipped target is one `TargetSpec`: its kernel table file, its accumulation table file, the graph
rewrites it wants, the table whose held-sum limits its results are judged by, and the ONNX Runtime
execution provider it stands for. The kernel table loader, the accumulation table, the Target
builder, the op-name check of ``--fp32-ops`` and the Olive pass (an execution provider picks its
target) all read this table; a new shipped runtime is one entry here plus its data files.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping
from dataclasses import dataclass


class Rewrite(enum.Enum):
    """Graph rewrites a target may want (each step that performs one asks for it by this)."""

    #: spatial ReduceMean run as GlobalAveragePool, whose kernel writes the average, not the sum
    GLOBAL_POOL = "global-pool"
    #: hand LayerNorm/RMSNorm below their ONNX opsets folded into the runtime's own ai.onnx
    #: LayerNormalization-1 / SimplifiedLayerNormalization (ORT registers them for every opset)
    RUNTIME_NORMS = "runtime-norms"


@dataclass(frozen=True)
class TargetSpec:
    """One shipped target, as data."""

    name: str
    #: package file of its kernel table; None: no table, every kernel accepted (schema only)
    kernel_file: str | None
    #: package file of its accumulation table (where its kernels keep their sums); None: none
    accumulation_file: str | None = None
    rewrites: frozenset[Rewrite] = frozenset()
    #: the target whose held-sum limits (ReduceMean's FP16 sum) a result is judged by; the
    #: schema-only target's results most often run on ORT CUDA, so it names that one
    held_sums: str | None = None
    #: the ONNX Runtime execution provider it is for (Olive's accelerator, a validation's mode)
    provider: str | None = None


#: what a conversion is for unless told otherwise
DEFAULT_TARGET = "ort-cuda"
CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"

#: the shipped targets, in the order the command line lists them
SHIPPED: Mapping[str, TargetSpec] = types.MappingProxyType(
    {
        spec.name: spec
        for spec in (
            TargetSpec(
                "ort-cuda",
                "ort_cuda_kernels.json",
                "ort_cuda_accumulation.json",
                frozenset({Rewrite.GLOBAL_POOL, Rewrite.RUNTIME_NORMS}),
                held_sums="ort-cuda",
                provider=CUDA_EP,
            ),
            TargetSpec(
                "ort-cpu",
                "ort_cpu_kernels.json",
                rewrites=frozenset({Rewrite.RUNTIME_NORMS}),
                provider=CPU_EP,
            ),
            TargetSpec("none", None, held_sums="ort-cuda"),
        )
    }
)


def shipped_for_provider(provider: str) -> str | None:
    """The shipped target standing for an ONNX Runtime execution provider, or None."""
    for spec in SHIPPED.values():
        if spec.provider == provider:
            return spec.name
    return None


def providers() -> dict[str, str]:
    """Execution provider -> the shipped target for it."""
    return {s.provider: s.name for s in SHIPPED.values() if s.provider is not None}
