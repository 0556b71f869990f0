"""Trained weights whose low-precision rounding cannot matter, shaped like paddle2onnx exports.

Training leaves values no initialiser makes: biases that decayed to ~1e-5, conv kernels with a
tail of near-zero taps. paddle2onnx writes a Linear as MatMul + Add(bias) and a Conv's bias as a
separate Add of a [1, C, 1, 1] tensor. Counted value by value these weights look unsafe in FP16
(every bias value is subnormal, 3% of the kernel flushes to zero); judged by what their readers
compute they are not: the bias errs by 3e-8 on O(1) sums, the flushed taps carry ~1e-7 of the
kernel's norm.

* :func:`tiny_bias_linear`: MatMul -> Add(bias ~1e-5) -> Relu -> MatMul -> Add(bias ~1e-5);
* :func:`conv_tiny_tail`: Conv(kernel with a 3% tail of |v| < 3e-8) -> Add(bias ~1e-5) -> Relu
  -> Conv -> Add(Reshape(bias [C]) to [1, C, 1, 1]);
* :func:`bn_tiny_tail`: Conv -> BatchNormalization whose scale/sqrt(var) of ~0.02 puts ~5% of
  the folded kernel below FP16's smallest normal (as in PP-OCRv4's recogniser, where 5.6-7.1% did),
  each output channel losing ~1e-6 of its norm to them -> Swish -> Conv.
"""

from __future__ import annotations

import numpy as np
import onnx

from models._graph import FLOAT, GraphBuilder, first_doc_paragraph

__all__ = ["bn_tiny_tail", "conv_tiny_tail", "tiny_bias_linear"]


def _tiny(b: GraphBuilder, name: str, shape: list[int], scale: float = 1e-5) -> str:
    """A trained-looking tiny bias: normal values of std `scale` (all below FP16's 6.1e-5)."""
    data = b.rng.standard_normal(shape) * scale
    return b.initializer(name, np.clip(data, -5e-5, 5e-5).astype(np.float32))


def tiny_bias_linear(features: int = 64, hidden: int = 128, seed: int = 51) -> onnx.ModelProto:
    """Two paddle2onnx Linears whose biases decayed to ~1e-5 (MatMul + Add of a tiny bias)."""
    b = GraphBuilder("tiny_bias_linear", seed)
    b.input("x", FLOAT, ["batch", features])
    b.output("y", FLOAT, ["batch", features])
    h = b.op("MatMul", ["x", b.weight("fc1.w_0", [features, hidden])], "linear_0.matmul")
    h = b.op("Add", [h, _tiny(b, "fc1.b_0", [hidden])], "linear_0.add")
    h = b.op("Relu", [h], "relu_0")
    h = b.op("MatMul", [h, b.weight("fc2.w_0", [hidden, features])], "linear_1.matmul")
    b.op("Add", [h, _tiny(b, "fc2.b_0", [features])], "linear_1.add", outputs=["y"])
    return b.model(opset=11, doc=first_doc_paragraph(tiny_bias_linear))


def conv_tiny_tail(channels: int = 16, size: int = 12, seed: int = 52) -> onnx.ModelProto:
    """paddle2onnx Conv + Add([1, C, 1, 1] bias) pairs; the first kernel has a 3% tail of taps
    below 3e-8 (they flush to zero in FP16), its other taps 1e6x larger."""
    b = GraphBuilder("conv_tiny_tail", seed)
    b.input("x", FLOAT, [1, 3, size, size])
    b.output("y", FLOAT, [1, channels, size, size])
    kernel = b.rng.standard_normal((channels, 3, 3, 3)) * 0.05
    flat = kernel.reshape(-1)
    tail = b.rng.choice(flat.size, size=max(1, round(0.03 * flat.size)), replace=False)
    signs = np.sign(b.rng.standard_normal(tail.size))
    flat[tail] = signs * 10.0 ** b.rng.uniform(-10, np.log10(2.9e-8), tail.size)
    w0 = b.initializer("conv2d_0.w_0", kernel.astype(np.float32))
    h = b.op("Conv", ["x", w0], "conv2d_0", pads=[1, 1, 1, 1])
    h = b.op("Add", [h, _tiny(b, "conv2d_0.b_0", [1, channels, 1, 1])], "conv2d_0.add")
    h = b.op("Relu", [h], "relu_0")
    w1 = b.weight("conv2d_1.w_0", [channels, channels, 3, 3])
    h = b.op("Conv", [h, w1], "conv2d_1", pads=[1, 1, 1, 1])
    bias = _tiny(b, "conv2d_1.b_0", [channels])
    bias = b.op("Reshape", [bias, b.i64("bias_shape", [1, -1, 1, 1])], "conv2d_1.bias_reshape")
    b.op("Add", [h, bias], "conv2d_1.add", outputs=["y"])
    return b.model(opset=11, doc=first_doc_paragraph(conv_tiny_tail))


def bn_tiny_tail(
    channels: int = 24, c_in: int = 48, size: int = 8, seed: int = 53
) -> onnx.ModelProto:
    """paddle2onnx Conv -> BatchNormalization (running var ~2500: scale/sqrt(var) ~0.02) ->
    Swish -> Conv; folded, ~5% of the first kernel's values fall below 2**-14."""
    b = GraphBuilder("bn_tiny_tail", seed)
    b.input("x", FLOAT, [1, c_in, size, size])
    b.output("y", FLOAT, [1, channels, size, size])
    w0 = b.weight("conv2d_0.w_0", [channels, c_in, 1, 3], std=0.05)
    h = b.op("Conv", ["x", w0], "p2o.Conv.0", kernel_shape=[1, 3], pads=[0, 1, 0, 1])
    stats = {
        "w_0": b.rng.uniform(0.8, 1.2, channels),  # scale
        "b_0": 0.5 * b.rng.standard_normal(channels),  # shift
        "w_1": 0.1 * b.rng.standard_normal(channels),  # running mean
        "w_2": b.rng.uniform(1500.0, 3500.0, channels),  # running variance
    }
    ins = [b.initializer(f"batch_norm_0.{k}", v.astype(np.float32)) for k, v in stats.items()]
    h = b.op("BatchNormalization", [h, *ins], "p2o.BatchNormalization.0", epsilon=1e-5)
    h = b.op("Mul", [h, b.op("Sigmoid", [h], "p2o.Sigmoid.0")], "p2o.Mul.0")
    w1 = b.weight("conv2d_1.w_0", [channels, channels, 3, 3])
    b.op("Conv", [h, w1], "p2o.Conv.1", pads=[1, 1, 1, 1], outputs=["y"])
    return b.model(opset=12, doc=first_doc_paragraph(bn_tiny_tail))
