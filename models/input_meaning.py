"""Models whose inputs mean something random data does not: the cases validation must size right.

* :func:`unnamed_hw_cnn`: a classifier whose batch, H and W are dynamic and unnamed
  (``[?, 3, ?, ?]``): validated on a 1x1 image before image-sized defaults.
* :func:`paddle_text_detector`: paddle2onnx names every dynamic dim
  ``p2o.DynamicDimension.N``; a DBNet-style probability head that stays near zero on Gaussian
  noise (the reference never leaves ~1e-4) and lights up on text-like images
  (:func:`text_like_image`).
* :func:`vad_model`: a speech model with a scalar ``sr`` input whose *value* sets the frame size:
  it runs at its sample rate (16000 or 8000) and at no random integer.
* :func:`genai_kv_cache_dim_decoder`: ORT GenAI's builder layout with the cache's past axis named
  ``kv_cache_dim`` (the mask's ``total_sequence_length`` is past + current all the same).
* :func:`merged_decoder_misnamed_mask`: optimum's merged decoder whose ``attention_mask`` axis is
  named ``sequence_length`` though the with-cache branch needs past + current columns.
"""

from __future__ import annotations

import numpy as np
import onnx

from models._graph import FLOAT, INT64, GraphBuilder, first_doc_paragraph

__all__ = [
    "genai_kv_cache_dim_decoder",
    "merged_decoder_misnamed_mask",
    "paddle_text_detector",
    "text_like_image",
    "unnamed_hw_cnn",
    "vad_model",
]


def unnamed_hw_cnn(classes: int = 10, channels: int = 16, seed: int = 3) -> onnx.ModelProto:
    """Conv(stride 2) → Relu → Conv → Relu → GlobalAveragePool → Gemm, input ``[?, 3, ?, ?]``."""
    b = GraphBuilder("unnamed_hw_cnn", seed)
    x = b.input("x", FLOAT, [None, 3, None, None])
    w1 = b.weight("conv1.weight", [channels, 3, 3, 3])
    h = b.op("Conv", [x, w1, b.weight("conv1.bias", [channels])], "conv1/Conv",
             kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])  # fmt: skip
    h = b.op("Relu", [h], "conv1/Relu")
    w2 = b.weight("conv2.weight", [channels, channels, 3, 3])
    h = b.op("Conv", [h, w2, b.weight("conv2.bias", [channels])], "conv2/Conv",
             kernel_shape=[3, 3], pads=[1, 1, 1, 1])  # fmt: skip
    h = b.op("Relu", [h], "conv2/Relu")
    h = b.op("GlobalAveragePool", [h], "pool/GlobalAveragePool")
    h = b.op("Flatten", [h], "pool/Flatten", axis=1)
    fc = b.weight("fc.weight", [classes, channels])
    b.op("Gemm", [h, fc, b.weight("fc.bias", [classes])], "fc/Gemm", transB=1,
         outputs=["logits"])  # fmt: skip
    b.output("logits", FLOAT, [None, classes])
    return b.model(doc=first_doc_paragraph(unnamed_hw_cnn))


P2O = "p2o.DynamicDimension.{}"


def paddle_text_detector(seed: int = 9) -> onnx.ModelProto:
    """DBNet-style head as paddle2onnx exports it: near zero on noise, high on text strokes.

    A 5x5 box filter over the three channels finds bright strokes (mean above 0.8: text, never
    Gaussian noise, whose 75-sample mean has a standard deviation of 0.12); a small random
    convolution adds texture; the probability map is ``Sigmoid(50 * strokes + texture - 9)``.
    """
    b = GraphBuilder("paddle_text_detector", seed)
    x = b.input("x", FLOAT, [P2O.format(0), 3, P2O.format(1), P2O.format(2)])
    box = b.initializer("conv2d_0.w_0", np.full((1, 3, 5, 5), 1 / 75, np.float32))
    mean = b.op("Conv", [x, box], "conv2d_0", kernel_shape=[5, 5], pads=[2, 2, 2, 2])
    strokes = b.op("Relu", [b.op("Sub", [mean, b.f32("thr", 0.8)], "sub_0")], "relu_0")
    tex_w = (b.rng.standard_normal((1, 3, 5, 5)) * 0.05).astype(np.float32)
    texture = b.op("Conv", [x, b.initializer("conv2d_1.w_0", tex_w)], "conv2d_1",
                   kernel_shape=[5, 5], pads=[2, 2, 2, 2])  # fmt: skip
    logit = b.op("Mul", [strokes, b.f32("gain", 50.0)], "scale_0")
    logit = b.op("Add", [logit, texture], "add_0")
    logit = b.op("Add", [logit, b.f32("bias", -9.0)], "add_1")
    b.op("Sigmoid", [logit], "sigmoid_0", outputs=["sigmoid_0.tmp_0"])
    b.output("sigmoid_0.tmp_0", FLOAT, [P2O.format(0), 1, P2O.format(1), P2O.format(2)])
    return b.model(doc=first_doc_paragraph(paddle_text_detector))


def text_like_image(height: int = 96, width: int = 160, seed: int = 0) -> np.ndarray:
    """A synthetic page: dark background, bright horizontal strokes in lines (``[1, 3, H, W]``)."""
    rng = np.random.default_rng(seed)
    img = np.full((1, 3, height, width), 0.05, np.float32)
    for top in range(8, height - 12, 24):
        x = 6
        while x < width - 20:
            length = int(rng.integers(8, 24))
            img[:, :, top : top + 10, x : x + length] = 1.0
            x += length + int(rng.integers(4, 10))
    img += rng.normal(0, 0.02, img.shape).astype(np.float32)
    return img


def vad_model(rate: int = 16000, seed: int = 13) -> onnx.ModelProto:
    """A voice-activity detector whose frame size is ``sr // 1000 * 32`` samples (512 at 16 kHz).

    Inputs: ``input`` [batch, samples] and ``sr`` (int64 scalar); the frames are projected by a
    weight built for ``rate``, so the model runs only when ``sr`` is that rate (and ``samples``
    a multiple of the frame): the value of ``sr`` matters, not only its shape.
    """
    frame = rate // 1000 * 32
    b = GraphBuilder("vad_model", seed)
    audio = b.input("input", FLOAT, ["batch", "samples"])
    sr = b.input("sr", INT64, [])
    size = b.op("Mul", [b.op("Div", [sr, b.i64("k1000", 1000)], "frame/Div"), b.i64("k32", 32)],
                "frame/Mul")  # fmt: skip
    shape = b.op("Concat", [b.i64("lead", [0, -1]), b.op("Unsqueeze", [size, b.i64("ax0", [0])],
                 "frame/Unsqueeze")], "frame/Concat", axis=0)  # fmt: skip
    frames = b.op("Reshape", [audio, shape], "frame/Reshape")
    proj = b.weight("proj.weight", [frame, 8])
    h = b.op("Relu", [b.op("MatMul", [frames, proj], "proj/MatMul")], "proj/Relu")
    score = b.op("MatMul", [h, b.weight("out.weight", [8, 1])], "out/MatMul")
    b.op("Sigmoid", [score], "out/Sigmoid", outputs=["output"])
    b.output("output", FLOAT, ["batch", "frames", 1])
    return b.model(doc=first_doc_paragraph(vad_model))


def genai_kv_cache_dim_decoder() -> onnx.ModelProto:
    """ORT GenAI's Llama layout (models.fused.genai_llama, MultiHeadAttention) with the cache's
    past axis named ``kv_cache_dim``: nothing by name says the mask spans past + current."""
    from models.fused import genai_llama

    model = genai_llama(attention="mha")
    for value in model.graph.input:
        for d in value.type.tensor_type.shape.dim:
            if d.dim_param == "past_sequence_length":
                d.dim_param = "kv_cache_dim"
    model.doc_string = first_doc_paragraph(genai_kv_cache_dim_decoder)
    return model


def merged_decoder_misnamed_mask() -> onnx.ModelProto:
    """optimum's merged decoder with ``attention_mask`` [batch_size, sequence_length]."""
    from models.decoders import SEQ, decoder_model_merged

    return decoder_model_merged(mask_axis=SEQ)
