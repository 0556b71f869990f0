"""core/precision.py: the dtype attributes a node's precision retargets."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert.core.precision import DTYPE_ATTRIBUTES
from tests.helpers import FLOAT, node_by_name, op_counts


# ---------------------------------------------------------------- dtype attributes
@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_window_ops_follow_the_node_precision(op: str) -> None:
    assert op in DTYPE_ATTRIBUTES
    graph = helper.make_graph(
        [
            helper.make_node(op, ["n"], ["w"], name="win"),
            helper.make_node("Mul", ["w", "x"], ["y"], name="mul"),
        ],
        "g",
        [helper.make_tensor_value_info("x", FLOAT, [8])],
        [helper.make_tensor_value_info("y", FLOAT, [8])],
        [numpy_helper.from_array(np.array(8, dtype=np.int64), "n")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    # target none: ORT's CUDA provider has no window kernels, so ort-cuda keeps them FP32
    out = amp_convert.convert(proto, level="O3", target="none")
    onnx.checker.check_model(out, full_check=True)
    attrs = {a.name: a.i for a in node_by_name(out, "win").attribute}
    assert attrs["output_datatype"] == TensorProto.FLOAT16
    assert op_counts(out)["Cast"] == 2  # the x input and the y output, nothing around the window
