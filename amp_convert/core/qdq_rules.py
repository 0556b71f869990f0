"""Facts about QuantizeLinear/DequantizeLinear the QDQ steps, classify and assign share.

Before opset 19 a Q/DQ scale is ``tensor(float)`` and a DQ's output FP32; from 19 both may be
float16/bfloat16 (`TARGET_OPSET`). A low scale is judged by what its rounding does to the values
it scales (`scale_refusal`), not by the weight range rules: a scale is a multiplier, and a
subnormal one still scales within a fraction of a quantization step.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from amp_convert.core import domains, walk
from amp_convert.core.dtypes import numpy_type

TARGET_OPSET = 19
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})


def is_qdq(node: ir.Node) -> bool:
    """Whether `node` is a default-domain QuantizeLinear or DequantizeLinear."""
    return node.op_type in QDQ_OPS and domains.is_default(node.domain)


def has_qdq(model: ir.Model) -> bool:
    """Whether the model holds a default-domain QuantizeLinear or DequantizeLinear."""
    return any(
        n.op_type in QDQ_OPS and domains.is_default(n.domain) for n in walk.all_nodes(model.graph)
    )


#: the largest relative rounding error a low Q/DQ scale may carry (argued in `scale_refusal`)
SCALE_ERROR = 2.0**-8


def is_scale_slot(node: ir.Node, index: int) -> bool:
    """Whether input `index` of `node` is a QuantizeLinear/DequantizeLinear scale."""
    return index == 1 and node.op_type in QDQ_OPS and domains.is_default(node.domain)


def scale_refusal(scale: np.ndarray, low: ir.DataType) -> str | None:
    """Why a Q/DQ scale cannot be stored in `low`, or None: judged by its effect, not its range.

    A scale s rounded to s' moves every value it (de)quantizes, q * s, by q * (s' - s): a relative
    error r = |s' - s| / s on each of them. Below SCALE_ERROR = 2^-8 that is less than one
    quantization step for an 8-bit tensor (|q| <= 255, so |q| * s * r < s) and under 0.4% of an
    int32 bias, which is added to an output whose own 8-bit step is coarser. So a scale in FP16's
    subnormal range (an int32 bias scale x_scale * w_scale of ~1e-5: r ~ 0.3%) may go low, while
    one that flushes to zero or overflows, or loses more (below ~7.6e-6 in FP16), keeps FP32.
    """
    values = np.asarray(scale, dtype=np.float32).reshape(-1)
    if values.size == 0:
        return None
    with np.errstate(over="ignore"):  # an overflow is the verdict below, not a warning
        rounded = values.astype(numpy_type(low)).astype(np.float32)
    if not np.all(np.isfinite(rounded)):
        return f"a scale overflows {low.name} (max {float(np.abs(values).max()):.3g})"
    nonzero = values != 0
    if np.any(rounded[nonzero] == 0):
        smallest = float(np.abs(values[nonzero]).min())
        return f"a scale flushes to zero in {low.name} (min {smallest:.3g})"
    error = np.abs(rounded[nonzero] - values[nonzero]) / np.abs(values[nonzero])
    worst = float(error.max()) if error.size else 0.0
    if worst > SCALE_ERROR:
        return (
            f"a scale rounds by {worst:.2%} in {low.name} (more than 2^-8, one 8-bit "
            "quantization step)"
        )
    return None
