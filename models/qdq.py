"""QDQ test models in the pattern ONNX Runtime's ``quantize_static`` writes (QuantFormat.QDQ).

What the quantizer produces, and these builders copy: opset 17 (ORT's default when the model is
older), activations quantized per tensor to uint8 (``QuantizeLinear -> DequantizeLinear`` on every
tensor a quantizable op reads or writes), weights stored int8 per channel behind a
``DequantizeLinear`` on the initializer (axis 0 for Conv, axis 1 for MatMul), an Add's constant
operand int8 per tensor, Conv/Gemm biases
stored int32 with scale ``input_scale * weight_scale`` and ops ORT does not quantize (Softmax's
neighbours, Erf, LayerNormalization) left in float between a DQ and the next Q. Scales are float32
(the only type DequantizeLinear/QuantizeLinear admit before opset 19). Each builder is seeded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from models._graph import FLOAT, GraphBuilder, first_doc_paragraph

__all__ = ["ALL_QDQ", "qdq_cnn", "qdq_encoder"]


class _Quant:
    """Adds Q/DQ pairs and quantized weights to one builder the way quantize_static names them."""

    def __init__(self, g: GraphBuilder) -> None:
        self.g = g

    def qdq(self, x: str, scale: float, zero: int = 128) -> str:
        """Activation ``x`` quantized per tensor to uint8 and dequantized again."""
        g = self.g
        s = g.f32(f"{x}_scale", scale)
        z = g.const(f"{x}_zero_point", zero, np.uint8)
        q = g.op("QuantizeLinear", [x, s, z], f"{x}_QuantizeLinear", outputs=[f"{x}_quantized"])
        assert isinstance(q, str)
        out = g.op(
            "DequantizeLinear", [q, s, z], f"{x}_DequantizeLinear", outputs=[f"{x}_dequantized"]
        )
        assert isinstance(out, str)
        return out

    def weight(self, name: str, w: np.ndarray, axis: int) -> tuple[str, np.ndarray]:
        """``w`` stored int8 per channel along `axis` behind a DequantizeLinear; its scales."""
        g = self.g
        other = tuple(i for i in range(w.ndim) if i != axis)
        scale = (np.abs(w).max(axis=other) / 127.0).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        wq = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
        g.initializer(f"{name}_quantized", wq)
        g.initializer(f"{name}_scale", scale)
        g.initializer(f"{name}_zero_point", np.zeros(scale.shape, np.int8))
        return self._dequantized(name, axis), scale

    def tensor(self, name: str, w: np.ndarray) -> str:
        """A constant operand of a quantized Add stored int8 per tensor (symmetric) behind a DQ."""
        g = self.g
        scale = np.float32(np.abs(w).max() / 127.0)
        g.initializer(f"{name}_quantized", np.round(w / scale).astype(np.int8))
        g.initializer(f"{name}_scale", np.array(scale, np.float32))
        g.initializer(f"{name}_zero_point", np.array(0, np.int8))
        return self._dequantized(name)

    def bias(self, name: str, b: np.ndarray, scale: np.ndarray) -> str:
        """A bias stored int32 with scale ``input_scale * weight_scale`` (ORT's bias rule)."""
        g = self.g
        g.initializer(f"{name}_quantized", np.round(b / scale).astype(np.int32))
        g.initializer(f"{name}_scale", scale.astype(np.float32))
        g.initializer(f"{name}_zero_point", np.zeros(scale.shape, np.int32))
        return self._dequantized(name, 0)

    def _dequantized(self, name: str, axis: int | None = None) -> str:
        """DequantizeLinear of the `name`_quantized/_scale/_zero_point initializers."""
        attrs: dict[str, Any] = {} if axis is None else {"axis": axis}
        out = self.g.op(
            "DequantizeLinear",
            [f"{name}_quantized", f"{name}_scale", f"{name}_zero_point"],
            f"{name}_DequantizeLinear",
            outputs=[f"{name}_dequantized"],
            **attrs,
        )
        assert isinstance(out, str)
        return out


def _he(g: GraphBuilder, shape: tuple[int, ...]) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 2 else shape[0]
    return (g.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def qdq_cnn(
    channels: int = 16, image: int = 32, blocks: int = 2, classes: int = 10
) -> onnx.ModelProto:
    """A quantize_static ResNet: Conv->Relu->Q (ORT's redundant-Relu group), residual Add,
    MaxPool, GlobalAveragePool, Flatten and Gemm, every one between DQ and Q; opset 17, IR 8."""
    g = GraphBuilder("qdq_cnn", seed=24)
    qz = _Quant(g)
    act = 4.0 / 255  # post-Relu activations in [0, 4)
    g.input("input", FLOAT, [1, 3, image, image])
    x = qz.qdq("input", 2.0 / 255)
    in_scale = 2.0 / 255

    def conv(name: str, x: str, x_scale: float, cin: int, cout: int, relu: bool) -> str:
        w, w_scale = qz.weight(f"{name}.weight", _he(g, (cout, cin, 3, 3)), axis=0)
        bias = 0.05 * g.rng.standard_normal(cout).astype(np.float32)
        b = qz.bias(f"{name}.bias", bias, (x_scale * w_scale).astype(np.float32))
        y = g.op("Conv", [x, w, b], name, pads=[1, 1, 1, 1])
        assert isinstance(y, str)
        if relu:
            y = g.op("Relu", [y], f"{name}.relu")
            assert isinstance(y, str)
            return qz.qdq(y, act, 0)
        return qz.qdq(y, 8.0 / 255)

    x = conv("stem", x, in_scale, 3, channels, relu=True)
    pooled = g.op("MaxPool", [x], "stem.pool", kernel_shape=[2, 2], strides=[2, 2])
    assert isinstance(pooled, str)
    x = qz.qdq(pooled, act, 0)
    for i in range(blocks):
        y = conv(f"block{i}.conv1", x, act, channels, channels, relu=True)
        y = conv(f"block{i}.conv2", y, act, channels, channels, relu=False)
        s = g.op("Add", [x, y], f"block{i}.add")
        assert isinstance(s, str)
        r = g.op("Relu", [s], f"block{i}.relu")
        assert isinstance(r, str)
        x = qz.qdq(r, act, 0)
    gap = g.op("GlobalAveragePool", [x], "pool")
    assert isinstance(gap, str)
    gap = qz.qdq(gap, 2.0 / 255, 0)
    flat = g.op("Flatten", [gap], "flatten", axis=1)
    assert isinstance(flat, str)
    flat = qz.qdq(flat, 2.0 / 255, 0)
    w = (g.rng.standard_normal((classes, channels)) / np.sqrt(channels)).astype(np.float32)
    wd, w_scale = qz.weight("fc.weight", w, axis=0)
    b = qz.bias("fc.bias", np.zeros(classes, np.float32), (2.0 / 255 * w_scale).astype(np.float32))
    logits = g.op("Gemm", [flat, wd, b], "fc", transB=1)
    assert isinstance(logits, str)
    out = qz.qdq(logits, 8.0 / 255)
    g.op("Identity", [out], "output_identity", outputs=["logits"])
    g.output("logits", FLOAT, [1, classes])
    return g.model(opset=17, ir_version=8, doc=first_doc_paragraph(qdq_cnn))


def qdq_encoder(seq: int = 16, hidden: int = 64, ffn: int = 128) -> onnx.ModelProto:
    """A quantize_static transformer encoder layer: every MatMul and Add between DQ and Q with
    int8 per-channel weights (axis 1), Softmax, Erf-GELU and LayerNormalization left float, and
    a mean-pool ReduceMean with its axes as an attribute (opset 17); IR 8."""
    g = GraphBuilder("qdq_encoder", seed=25)
    qz = _Quant(g)
    g.input("hidden_states", FLOAT, [1, seq, hidden])
    act = 8.0 / 255

    def linear(name: str, x: str, cin: int, cout: int, scale: float = act) -> str:
        w = (g.rng.standard_normal((cin, cout)) / np.sqrt(cin)).astype(np.float32)
        wd, _ = qz.weight(f"{name}.weight", w, axis=1)
        y = g.op("MatMul", [x, wd], f"{name}.matmul")
        assert isinstance(y, str)
        y = qz.qdq(y, scale)
        b = 0.02 * g.rng.standard_normal(cout).astype(np.float32)
        bq = qz.tensor(f"{name}.bias", b)
        y = g.op("Add", [y, bq], f"{name}.add")
        assert isinstance(y, str)
        return qz.qdq(y, scale)

    x = qz.qdq("hidden_states", act)
    q = linear("query", x, hidden, hidden)
    k = linear("key", x, hidden, hidden)
    v = linear("value", x, hidden, hidden)
    kt = g.op("Transpose", [k], "key.transpose", perm=[0, 2, 1])
    assert isinstance(kt, str)
    kt = qz.qdq(kt, act)
    scores = g.op("MatMul", [q, kt], "scores.matmul")
    assert isinstance(scores, str)
    scores = qz.qdq(scores, 64.0 / 255)
    scaled = g.op("Div", [scores, g.f32("sqrt_hidden", np.sqrt(hidden))], "scores.div")
    assert isinstance(scaled, str)
    probs = g.op("Softmax", [scaled], "softmax", axis=-1)
    assert isinstance(probs, str)
    probs = qz.qdq(probs, 1.0 / 255, 0)
    ctx = g.op("MatMul", [probs, v], "context.matmul")
    assert isinstance(ctx, str)
    ctx = qz.qdq(ctx, act)
    attn = linear("output", ctx, hidden, hidden)
    res = g.op("Add", [x, attn], "residual1")
    assert isinstance(res, str)
    gamma = g.initializer("ln1.weight", np.ones(hidden, np.float32))
    beta = g.initializer("ln1.bias", np.zeros(hidden, np.float32))
    ln = g.op("LayerNormalization", [res, gamma, beta], "ln1", axis=-1, epsilon=1e-5)
    assert isinstance(ln, str)
    ln = qz.qdq(ln, act)
    h = linear("ffn.up", ln, hidden, ffn)
    e = g.op("Div", [h, g.f32("sqrt2", np.sqrt(2.0))], "gelu.div")
    e = g.op("Erf", [e], "gelu.erf")
    e = g.op("Add", [e, g.f32("one", 1.0)], "gelu.add")
    e = g.op("Mul", [h, e], "gelu.mul")
    e = g.op("Mul", [e, g.f32("half", 0.5)], "gelu.half")
    assert isinstance(e, str)
    e = qz.qdq(e, act)
    down = linear("ffn.down", e, ffn, hidden)
    out = g.op("Add", [ln, down], "residual2")
    assert isinstance(out, str)
    out = qz.qdq(out, act)
    pooled = g.op("ReduceMean", [out], "pool", outputs=["pooled"], axes=[1], keepdims=0)
    assert isinstance(pooled, str)
    g.output("pooled", FLOAT, [1, hidden])
    return g.model(opset=17, ir_version=8, doc=first_doc_paragraph(qdq_encoder))


ALL_QDQ: dict[str, Callable[[], onnx.ModelProto]] = {
    "qdq_cnn": qdq_cnn,
    "qdq_encoder": qdq_encoder,
}
