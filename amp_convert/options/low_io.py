"""``--low-io``: the model inputs/outputs that are low precision whatever keep_io_types says.

Decoders are the reason: users keep ``input_ids`` and ``logits`` FP32 but want the KV cache
(``past_key_values.*`` in, ``present.*`` out) in FP16, half the memory and no Cast per step.
A pattern must match a whole name; one that matches an integer or bool input/output is refused
(it has no low-precision type), one that matches nothing is a warning (likely a typo).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from amp_convert.core.precision import FLOAT, LOW_TYPES
from amp_convert.errors import OptionError
from amp_convert.options.patterns import NamePattern


def resolve_low_io(
    model: ir.Model, patterns: Sequence[NamePattern]
) -> tuple[frozenset[str], list[str]]:
    """(names of the main graph's inputs/outputs the patterns select, warnings)."""
    graph = model.graph
    interface = [("input", v) for v in graph.inputs] + [("output", v) for v in graph.outputs]
    names: set[str] = set()
    warnings: list[str] = []
    for pattern in patterns:
        hits = [(kind, v) for kind, v in interface if v.name and pattern.fullmatch(v.name)]
        if not hits:
            warnings.append(f"--low-io {pattern.pattern!r} matches no model input or output")
        for kind, value in hits:
            is_tensor = value.type is None or isinstance(value.type, ir.TensorType)
            if not is_tensor or value.dtype not in (FLOAT, *LOW_TYPES):
                dtype = value.dtype.name.lower() if value.dtype is not None else "unknown"
                raise OptionError(
                    f"--low-io {pattern.pattern!r} matches {kind} {value.name!r} of type "
                    f"{dtype}: only float inputs/outputs can be low precision"
                )
            names.add(value.name or "")
    return frozenset(names), warnings
