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
* :func:`text_recognizer`: a CRNN-style text-line recognizer whose H is dynamic in the file but
  must be 33-48 pixels: its last convolution collapses the height to 1 for a Squeeze.
* :func:`vad_state_model`: a VAD with a recurrent ``state`` input ``[2, ?, 128]`` whose unnamed
  axis is the batch (the LSTM's initial state), beside ``input`` and ``sr``.
* :func:`genai_packed_decoder`: ORT GenAI's packed-QKV GroupQueryAttention layout whose cache
  head axis is the symbolic ``kv_cache_dim``, with a head size other than the default 128.
"""

from __future__ import annotations

import numpy as np
import onnx

from models._graph import FLOAT, INT64, GraphBuilder, first_doc_paragraph

__all__ = [
    "genai_kv_cache_dim_decoder",
    "genai_packed_decoder",
    "merged_decoder_misnamed_mask",
    "paddle_text_detector",
    "text_like_image",
    "text_recognizer",
    "unnamed_hw_cnn",
    "vad_model",
    "vad_state_model",
]


def unnamed_hw_cnn(classes: int = 10, channels: int = 16, seed: int = 3) -> onnx.ModelProto:
    """Conv(stride 2) → Relu → Conv → Relu → GlobalAveragePool → Gemm, input ``[?, 3, ?, ?]``."""
    b = GraphBuilder("unnamed_hw_cnn", seed)
    x = b.input("x", FLOAT, [None, 3, None, None])
    w1 = b.weight("conv1.weight", [channels, 3, 3, 3])
    h = b.op(
        "Conv",
        [x, w1, b.weight("conv1.bias", [channels])],
        "conv1/Conv",
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    h = b.op("Relu", [h], "conv1/Relu")
    w2 = b.weight("conv2.weight", [channels, channels, 3, 3])
    h = b.op(
        "Conv",
        [h, w2, b.weight("conv2.bias", [channels])],
        "conv2/Conv",
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
    )
    h = b.op("Relu", [h], "conv2/Relu")
    h = b.op("GlobalAveragePool", [h], "pool/GlobalAveragePool")
    h = b.op("Flatten", [h], "pool/Flatten", axis=1)
    fc = b.weight("fc.weight", [classes, channels])
    b.op("Gemm", [h, fc, b.weight("fc.bias", [classes])], "fc/Gemm", transB=1, outputs=["logits"])
    b.output("logits", FLOAT, [None, classes])
    return b.model(doc=first_doc_paragraph(unnamed_hw_cnn))


P2O = "p2o.DynamicDimension.{}"


def paddle_text_detector(seed: int = 9, gain: float = 50.0) -> onnx.ModelProto:
    """DBNet-style head as paddle2onnx exports it: near zero on noise, high on text strokes.

    A 5x5 box filter over the three channels finds bright strokes (mean above 0.8: text, never
    Gaussian noise, whose 75-sample mean has a standard deviation of 0.12); a small random
    convolution adds texture; the probability map is ``Sigmoid(gain * strokes + texture - 9)``
    (``gain`` 50; a steeper edge, 400, puts the FP16 rounding of the box filter's output at
    ~0.02 on the pixels along the strokes' edges, as a deep detector's accumulated error does).
    """
    b = GraphBuilder("paddle_text_detector", seed)
    x = b.input("x", FLOAT, [P2O.format(0), 3, P2O.format(1), P2O.format(2)])
    box = b.initializer("conv2d_0.w_0", np.full((1, 3, 5, 5), 1 / 75, np.float32))
    mean = b.op("Conv", [x, box], "conv2d_0", kernel_shape=[5, 5], pads=[2, 2, 2, 2])
    strokes = b.op("Relu", [b.op("Sub", [mean, b.f32("thr", 0.8)], "sub_0")], "relu_0")
    tex_w = (b.rng.standard_normal((1, 3, 5, 5)) * 0.05).astype(np.float32)
    texture = b.op(
        "Conv",
        [x, b.initializer("conv2d_1.w_0", tex_w)],
        "conv2d_1",
        kernel_shape=[5, 5],
        pads=[2, 2, 2, 2],
    )
    logit = b.op("Mul", [strokes, b.f32("gain", gain)], "scale_0")
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
    size = b.op(
        "Mul", [b.op("Div", [sr, b.i64("k1000", 1000)], "frame/Div"), b.i64("k32", 32)], "frame/Mul"
    )
    shape = b.op(
        "Concat",
        [b.i64("lead", [0, -1]), b.op("Unsqueeze", [size, b.i64("ax0", [0])], "frame/Unsqueeze")],
        "frame/Concat",
        axis=0,
    )
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


def text_recognizer(classes: int = 12, channels: int = 8, seed: int = 21) -> onnx.ModelProto:
    """CRNN-style recognizer ``[?, 3, ?, ?]`` that runs only on 33-48 pixel high text lines.

    Four 3x3 convolutions (strides 2x2, 2x2, 2x1, 2x1: H/16, W/4), a 3x1 convolution without
    padding that leaves a height of 1 only when H/16 is 3, a Squeeze of that axis, then per
    column a linear layer and a Softmax over the classes: ``probs`` [batch, columns, classes].
    """
    b = GraphBuilder("text_recognizer", seed)
    x = b.input("x", FLOAT, [None, 3, None, None])
    h, c_in = x, 3
    for i, stride in enumerate(([2, 2], [2, 2], [2, 1], [2, 1])):
        w = b.weight(f"backbone.conv{i}.weight", [channels, c_in, 3, 3])
        h = b.op(
            "Conv",
            [h, w, b.weight(f"backbone.conv{i}.bias", [channels])],
            f"backbone/conv{i}/Conv",
            kernel_shape=[3, 3],
            strides=stride,
            pads=[1, 1, 1, 1],
        )
        h = b.op("Relu", [h], f"backbone/conv{i}/Relu")
        c_in = channels
    w = b.weight("neck.collapse.weight", [channels, channels, 3, 1])
    h = b.op("Conv", [h, w], "neck/collapse/Conv", kernel_shape=[3, 1])
    h = b.op("Squeeze", [h, b.i64("neck.axes", [2])], "neck/Squeeze")
    h = b.op("Transpose", [h], "neck/Transpose", perm=[0, 2, 1])
    h = b.op("MatMul", [h, b.weight("head.fc.weight", [channels, classes])], "head/fc/MatMul")
    h = b.op("Add", [h, b.weight("head.fc.bias", [classes])], "head/fc/Add")
    b.op("Softmax", [h], "head/Softmax", axis=-1, outputs=["probs"])
    b.output("probs", FLOAT, [None, None, classes])
    return b.model(doc=first_doc_paragraph(text_recognizer))


def vad_state_model(hidden: int = 128, seed: int = 22) -> onnx.ModelProto:
    """A silero-style VAD: ``input`` [?, ?] audio, ``state`` [2, ?, hidden], ``sr`` int64 scalar.

    The audio is cut into frames of ``sr // 250`` samples (64 at 16 kHz) and run through an LSTM
    whose initial hidden and cell states are the two rows of ``state``: ORT refuses a state whose
    batch differs from the audio's. Outputs ``output`` [?, 1] (speech probability) and
    ``stateN`` [2, ?, hidden].
    """
    b = GraphBuilder("vad_state_model", seed)
    audio = b.input("input", FLOAT, [None, None])
    state = b.input("state", FLOAT, [2, None, hidden])
    sr = b.input("sr", INT64, [])
    frame = b.op("Div", [sr, b.i64("k250", 250)], "frame/Div")
    shape = b.op(
        "Concat",
        [b.i64("lead", [0, -1]), b.op("Unsqueeze", [frame, b.i64("ax0", [0])], "frame/Unsqueeze")],
        "frame/Concat",
        axis=0,
    )
    frames = b.op("Reshape", [audio, shape], "frame/Reshape")  # [B, T, 64]
    seq = b.op("Transpose", [frames], "frame/Transpose", perm=[1, 0, 2])  # [T, B, 64]
    h0 = b.op("Slice", [state, b.i64("s0", [0]), b.i64("s1", [1]), b.i64("sax", [0])], "state/h0")
    c0 = b.op("Slice", [state, b.i64("s1b", [1]), b.i64("s2", [2]), b.i64("sax2", [0])], "state/c0")
    w = b.weight("lstm.W", [1, 4 * hidden, 64], std=0.05)
    r = b.weight("lstm.R", [1, 4 * hidden, hidden], std=0.05)
    bias = b.weight("lstm.B", [1, 8 * hidden], std=0.05)
    _, y_h, y_c = b.op(
        "LSTM",
        [seq, w, r, bias, "", h0, c0],
        "lstm/LSTM",
        hidden_size=hidden,
        outputs=["lstm/Y", "lstm/Y_h", "lstm/Y_c"],
    )
    b.op("Concat", [y_h, y_c], "state/Concat", axis=0, outputs=["stateN"])
    last = b.op("Squeeze", [y_h, b.i64("sq0", [0])], "head/Squeeze")  # [B, hidden]
    score = b.op(
        "MatMul",
        [b.op("Relu", [last], "head/Relu"), b.weight("head.weight", [hidden, 1])],
        "head/MatMul",
    )
    b.op("Sigmoid", [score], "head/Sigmoid", outputs=["output"])
    b.output("output", FLOAT, [None, 1])
    b.output("stateN", FLOAT, [2, None, hidden])
    return b.model(doc=first_doc_paragraph(vad_state_model))


def genai_packed_decoder(head_dim: int = 32, max_positions: int = 128) -> onnx.ModelProto:
    """ORT GenAI's packed GroupQueryAttention Llama (``models.fused.genai_llama(packed=True)``):
    head size ``head_dim`` (not the default 128), cache head axis ``kv_cache_dim``."""
    from models.fused import genai_llama

    model = genai_llama(
        hidden=4 * head_dim, heads=4, kv_heads=2, max_positions=max_positions, packed=True
    )
    model.doc_string = first_doc_paragraph(genai_packed_decoder)
    return model
