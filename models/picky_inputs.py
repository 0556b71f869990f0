"""Small FP32 / FP16 model pairs that cannot run on the validator's default input dims.

Why: real models often need more than the defaults (16 for named dims, 1 for unnamed ones): a
reflect-padded STFT front end needs a signal longer than its padding, a detector needs H and W
divisible by its total stride. Each builder returns ``(reference_fp32, candidate_fp16)``; the
candidate computes in FP16 between Casts. Opset 17, IR version 9, deterministic weights.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 9
F32 = TensorProto.FLOAT
F16 = TensorProto.FLOAT16
_NP = {F32: np.float32, F16: np.float16}

Body = Callable[[str, int], tuple[list[onnx.NodeProto], list[onnx.TensorProto]]]


def _pair(
    name: str,
    inputs: list[tuple[str, list]],
    outputs: list[tuple[str, list]],
    body: Body,
) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Reference and FP16 candidate from ``body(suffix, dtype)``, which maps ``<input><suffix>``
    to ``<output><suffix>`` in ``dtype``; the candidate casts in and out around it."""

    def model(dtype: int) -> onnx.ModelProto:
        low = dtype != F32
        sfx = "_low" if low else ""
        nodes = (
            [helper.make_node("Cast", [i], [i + sfx], to=dtype) for i, _ in inputs] if low else []
        )
        inner, inits = body(sfx, dtype)
        nodes += inner
        if low:
            nodes += [helper.make_node("Cast", [o + sfx], [o], to=F32) for o, _ in outputs]
        graph = helper.make_graph(
            nodes,
            f"{name}_{'fp16' if low else 'fp32'}",
            [helper.make_tensor_value_info(i, F32, s) for i, s in inputs],
            [helper.make_tensor_value_info(o, F32, s) for o, s in outputs],
            inits,
        )
        m = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
        )
        m.producer_name = "amp-convert-picky-inputs"
        return m

    return model(F32), model(F16)


def _const(name: str, arr: np.ndarray, dtype: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr).astype(_NP[dtype]), name)


def stride32_pair(
    dims: tuple = (1, 3, "height", "width"), block: int = 32
) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Detector-style input whose H and W must be multiples of 32: SpaceToDepth(32) → scale → Relu.

    ``dims`` is the input shape; pass ``(1, 3, None, None)`` for unnamed H/W. ``block`` = 64
    makes the default image size (224) fail where 640 runs.
    """

    def body(sfx: str, dtype: int):
        nodes = [
            helper.make_node("SpaceToDepth", ["x" + sfx], ["s" + sfx], blocksize=block),
            helper.make_node("Mul", ["s" + sfx, "k"], ["m" + sfx]),
            helper.make_node("Relu", ["m" + sfx], ["y" + sfx]),
        ]
        return nodes, [_const("k", np.array(0.5), dtype)]

    out = [dims[0], 3 * block * block, "h32", "w32"]
    return _pair("stride32", [("x", list(dims))], [("y", out)], body)


def reflect_pad_pair(pad: int = 100) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Speech front-end style: reflect-pad the signal by ``pad`` on each side, then scale.

    ONNX Runtime needs the signal longer than ``pad`` for reflect padding, so ``samples`` = 16 or
    64 fails and 256 runs (for the default ``pad`` of 100).
    """

    def body(sfx: str, dtype: int):
        pads = numpy_helper.from_array(np.array([0, pad, 0, pad], np.int64), "pads")
        nodes = [
            helper.make_node("Pad", ["x" + sfx, "pads"], ["p" + sfx], mode="reflect"),
            helper.make_node("Mul", ["p" + sfx, "k"], ["y" + sfx]),
        ]
        return nodes, [pads, _const("k", np.array(0.25), dtype)]

    return _pair("reflect_pad", [("x", ["batch", "samples"])], [("y", ["batch", "padded"])], body)


def fixed_length_pair(length: int = 91) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Reshape to a fixed [7, length // 7]: runs only when dim ``length`` is exactly ``length``."""

    def body(sfx: str, dtype: int):
        shape = numpy_helper.from_array(np.array([7, length // 7], np.int64), "shape")
        nodes = [
            helper.make_node("Reshape", ["x" + sfx, "shape"], ["r" + sfx]),
            helper.make_node("Mul", ["r" + sfx, "k"], ["y" + sfx]),
        ]
        return nodes, [shape, _const("k", np.array(3.0), dtype)]

    return _pair("fixed_length", [("x", [1, "length"])], [("y", [7, length // 7])], body)


def paddle_style_pair() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Two inputs whose dynamic dims are all named ``?`` (Paddle's "unknown"), of unrelated sizes.

    x [?, 3, ?, ?] → mean over H, W → ``pooled`` [?, 3]; t [?, ?] → sum over axis 1 → ``total``.
    Each ``?`` is its own dim: H and W differ, and t's axes are unrelated to x's.
    """

    def body(sfx: str, dtype: int):
        axes = numpy_helper.from_array(np.array([1], np.int64), "axes1")
        nodes = [
            helper.make_node("ReduceMean", ["x" + sfx], ["pooled" + sfx], axes=[2, 3], keepdims=0),
            helper.make_node("ReduceSum", ["t" + sfx, "axes1"], ["total" + sfx], keepdims=0),
        ]
        return nodes, [axes]

    return _pair(
        "paddle_style",
        [("x", ["?", 3, "?", "?"]), ("t", ["?", "?"])],
        [("pooled", ["?", 3]), ("total", ["?"])],
        body,
    )
