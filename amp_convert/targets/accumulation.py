"""Which deny-listed ops a target runs with FP32 accumulation and a range-bounded output.

The facts are package data read from the runtime's kernel sources (``ort_cuda_accumulation.txt``,
one op a line with the source it was read from), so the reason a node gets in the report cites
the kernel. Such an op takes low-precision I/O between low neighbours; a target without a file
(``none``, ``ort-cpu``) keeps the range rule for all of them.
"""

from __future__ import annotations

import functools
from importlib import resources

FILES = {"ort-cuda": "ort_cuda_accumulation.txt"}


@functools.cache
def fp32_accumulating(target: str) -> dict[str, str]:
    """op type -> reason (with the kernel source) for ops `target` accumulates in FP32."""
    name = FILES.get(target)
    if name is None:
        return {}
    text = resources.files("amp_convert.targets").joinpath(name).read_text()
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        op, _, reason = line.strip().partition(" ")
        out[op] = reason.strip()
    return out
