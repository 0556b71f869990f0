"""What the target runtime can run: kernel tables per execution provider, and a coverage check.

    target = build_target("ort-cuda")     # the conversion's Target: kernels, accumulation, rewrites
    table = target.kernels                 # load_target("ort-cuda"); "none" accepts everything
    table.accepts("Clip", "", 11, [FLOAT16, None, None], [FLOAT16])
    # -> "no FP16 kernel in ORT CUDA for Clip-11"
    uncovered_nodes(model, table)          # one line per low-precision node it cannot run

The ORT CUDA table is package data generated from ONNX Runtime's docs/OperatorKernels.md by
scripts/gen_ort_cuda_kernels.py, plus a few constraints read from ORT's kernel sources. The one
registry of targets is registry.py; a validation's runtime is a Target too (target_for_provider).
"""

from __future__ import annotations

from amp_convert.targets.coverage import (
    Uncovered,
    find_uncovered,
    low_precision_nodes,
    uncovered_nodes,
)
from amp_convert.targets.kernel_table import (
    Constraint,
    Kernel,
    KernelTable,
    load_table,
    load_target,
    table_from_data,
)
from amp_convert.targets.registry import SHIPPED, TargetSpec, providers
from amp_convert.targets.table_format import validate_table
from amp_convert.targets.target import (
    Rewrite,
    Target,
    build_target,
    register_target,
    target_for_provider,
    target_names,
)

__all__ = [
    "SHIPPED",
    "Constraint",
    "Kernel",
    "KernelTable",
    "Rewrite",
    "Target",
    "TargetSpec",
    "Uncovered",
    "build_target",
    "find_uncovered",
    "load_table",
    "load_target",
    "low_precision_nodes",
    "providers",
    "register_target",
    "table_from_data",
    "target_for_provider",
    "target_names",
    "uncovered_nodes",
    "validate_table",
]
