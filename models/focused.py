"""Tiny FP32 models, one per converter rule or known trap (each about 1-10 nodes).

Each builder's docstring says which rule it pins down; the same text is stored in the model's
``doc_string``. Unless stated, the input is float32 ``x`` of shape ``[batch, features]``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from models._graph import BOOL, FLOAT, INT64, GraphBuilder, first_doc_paragraph

__all__ = [
    "ALL_FOCUSED",
    "constant_of_shape",
    "custom_domain",
    "existing_cast_to_float",
    "fp16_overflow",
    "graph_input_initializers",
    "if_outer_capture",
    "loop_outer_capture",
    "multi_output_int",
    "nms_model",
    "out_of_range_weights",
    "quantized_model",
    "random_normal_like",
    "range_model",
    "resize_scales",
    "shared_initializer",
    "topk_model",
]


def resize_scales(channels: int = 4, size: int = 16, seed: int = 10) -> onnx.ModelProto:
    """Conv → Resize(scales initializer) → Relu: Resize's ``scales`` slot is float32-only.

    The Conv and Relu may go LOW and Resize's data input may be FP16, but the ``scales``
    initializer must stay float32 (and ``roi`` stays the empty optional input).
    """
    b = GraphBuilder("resize_scales", seed)
    x = b.input("x", FLOAT, ["batch", 3, size, size])
    w = b.weight("conv/weight", [channels, 3, 3, 3])
    cb = b.weight("conv/bias", [channels])
    y = b.op("Conv", [x, w, cb], "conv/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    scales = b.f32("upsample/scales", [1.0, 1.0, 2.0, 2.0])
    y = b.op("Resize", [y, "", scales], "upsample/Resize", mode="nearest")
    y = b.op("Relu", [y], "act/Relu", outputs=["y"])
    b.output(y, FLOAT, ["batch", channels, 2 * size, 2 * size])
    return b.model(doc=first_doc_paragraph(resize_scales))


def range_model(features: int = 8, seed: int = 11) -> onnx.ModelProto:
    """Range with float start/limit/delta computed from x; Range has no FP16 kernel/schema type.

    start = ReduceMin(x), limit = ReduceMax(x), delta = (limit - start) / (features - 0.5), so the
    Range always has exactly ``features`` elements; its output multiplies x. Range (T excludes
    float16) and the reductions feeding it must stay FP32 even when the Mul goes LOW.
    """
    b = GraphBuilder("range_model", seed)
    x = b.input("x", FLOAT, ["batch", features])
    lo = b.op("ReduceMin", [x], "range/start/ReduceMin", keepdims=0)
    hi = b.op("ReduceMax", [x], "range/limit/ReduceMax", keepdims=0)
    span = b.op("Sub", [hi, lo], "range/span/Sub")
    delta = b.op("Div", [span, b.f32("range/steps", features - 0.5)], "range/delta/Div")
    r = b.op("Range", [lo, hi, delta], "range/Range")
    y = b.op("Mul", [x, r], "out/Mul", outputs=["y"])
    b.output(y, FLOAT, ["batch", features])
    return b.model(doc=first_doc_paragraph(range_model))


def topk_model(features: int = 16, out: int = 32, k: int = 5, seed: int = 12) -> onnx.ModelProto:
    """MatMul → TopK(K int64 initializer): float values plus int64 indices as outputs.

    The ``K`` input is int64 and must never be touched; ``values`` is a float graph output that
    keeps FP32 at the interface, ``indices`` an int64 output.
    """
    b = GraphBuilder("topk_model", seed)
    x = b.input("x", FLOAT, ["batch", features])
    h = b.op("MatMul", [x, b.weight("proj/weight", [features, out])], "proj/MatMul")
    values, indices = b.op(
        "TopK", [h, b.i64("topk/k", [k])], "topk/TopK", outputs=["values", "indices"], axis=-1
    )
    b.output(values, FLOAT, ["batch", k])
    b.output(indices, INT64, ["batch", k])
    return b.model(doc=first_doc_paragraph(topk_model))


def nms_model(boxes: int = 32, classes: int = 3, seed: int = 13) -> onnx.ModelProto:
    """NonMaxSuppression fed by float math: boxes/scores/thresholds slots are float32-only.

    Inputs ``boxes`` [batch, N, 4] and ``scores`` [batch, C, N] (float32); boxes are scaled and
    shifted, scores go through Sigmoid, then NMS; ``selected_indices`` (int64) picks boxes back
    out with Gather/GatherND.
    """
    b = GraphBuilder("nms_model", seed)
    bx = b.input("boxes", FLOAT, ["batch", boxes, 4])
    sc = b.input("scores", FLOAT, ["batch", classes, boxes])
    bx = b.op("Mul", [bx, b.f32("boxes/scale", 16.0)], "boxes/Mul")
    bx = b.op("Add", [bx, b.f32("boxes/offset", 32.0)], "boxes/Add")
    sc = b.op("Sigmoid", [sc], "scores/Sigmoid")
    sel = b.op(
        "NonMaxSuppression",
        [
            bx,
            sc,
            b.i64("nms/max_output_boxes_per_class", [5]),
            b.f32("nms/iou_threshold", [0.5]),
            b.f32("nms/score_threshold", [0.3]),
        ],
        "nms/NonMaxSuppression",
        outputs=["selected_indices"],
    )
    idx = b.op("Gather", [sel, b.i64("nms/batch_box_cols", [0, 2])], "select/Gather", axis=1)
    picked = b.op("GatherND", [bx, idx], "select/GatherND", outputs=["selected_boxes"])
    b.output(sel, INT64, ["num_selected", 3])
    b.output(picked, FLOAT, ["num_selected", 4])
    return b.model(doc=first_doc_paragraph(nms_model))


def if_outer_capture(features: int = 64, hidden: int = 32, seed: int = 14) -> onnx.ModelProto:
    """If whose branches read outer-scope values (a MatMul output and initializers), VAD-style.

    Like Silero VAD: the then-branch Pads (reflect), Slices and Reshapes the outer MatMul output
    ``enc/MatMul_out`` and multiplies by the outer initializer ``branch/gain``; the else-branch
    Reshapes it and adds rows Gathered from the outer initializer ``branch/table``. The
    condition (mean of x > 0) is computed in FP32 from x, so ``-x`` takes the other branch.
    """
    if hidden % 4:
        raise ValueError("hidden must be divisible by 4")
    rows, cols = 4, hidden // 4
    b = GraphBuilder("if_outer_capture", seed)
    x = b.input("x", FLOAT, ["batch", features])
    h = b.op("MatMul", [x, b.weight("enc/weight", [features, hidden])], "enc/MatMul")
    gain = b.initializer("branch/gain", b.rng.uniform(0.5, 1.5, (rows, cols)).astype(np.float32))
    table = b.weight("branch/table", [10, cols], std=0.1)
    mean = b.op("ReduceMean", [x], "cond/ReduceMean", keepdims=0)
    cond = b.op("Greater", [mean, b.f32("cond/zero", 0.0)], "cond/Greater")
    shape3 = b.i64("const/shape_rows_cols", [-1, rows, cols])

    then_b = b.subgraph("then_branch")
    p = then_b.op(
        "Pad", [h, then_b.i64("then/pads", [0, 4, 0, 4])], "then/Pad", mode="reflect"
    )  # outer h
    s = then_b.op(
        "Slice",
        [
            p,
            then_b.i64("then/starts", [2]),
            then_b.i64("then/ends", [2 + hidden]),
            then_b.i64("then/axes", [1]),
        ],
        "then/Slice",
    )
    r = then_b.op("Reshape", [s, shape3], "then/Reshape")
    t_out = then_b.op("Mul", [r, gain], "then/Mul")  # outer initializer
    then_b.output(t_out, FLOAT, ["batch", rows, cols])

    else_b = b.subgraph("else_branch")
    r = else_b.op("Reshape", [h, shape3], "else/Reshape")  # outer h
    g = else_b.op(
        "Gather", [table, else_b.i64("else/rows", [1, 3, 5, 7])], "else/Gather", axis=0
    )  # outer initializer
    e_out = else_b.op("Add", [r, g], "else/Add")
    else_b.output(e_out, FLOAT, ["batch", rows, cols])

    y = b.op(
        "If",
        [cond],
        "branch/If",
        then_branch=then_b.graph(),
        else_branch=else_b.graph(),
    )
    y = b.op("MatMul", [y, b.weight("out/weight", [cols, cols])], "out/MatMul", outputs=["y"])
    b.output(y, FLOAT, ["batch", rows, cols])
    return b.model(doc=first_doc_paragraph(if_outer_capture))


def loop_outer_capture(features: int = 16, trips: int = 3, seed: int = 15) -> onnx.ModelProto:
    """Loop body reading an outer MatMul output and an outer initializer by capture.

    state' = Tanh(MatMul(state, ``loop/W_rec``) + ``enc/MatMul_out``) for ``trips`` iterations;
    both ``loop/W_rec`` (outer initializer) and ``enc/MatMul_out`` (outer node output) are read
    inside the body without being body inputs.
    """
    b = GraphBuilder("loop_outer_capture", seed)
    x = b.input("x", FLOAT, ["batch", features])
    h = b.op("MatMul", [x, b.weight("enc/weight", [features, features])], "enc/MatMul")
    w_rec = b.weight("loop/W_rec", [features, features], std=0.5 / np.sqrt(features))
    s0 = b.op("Relu", [x], "loop/init/Relu")

    body = b.subgraph("loop_body")
    body.input("loop/body/iter", INT64, [])
    cond_in = body.input("loop/body/cond_in", BOOL, [])
    s = body.input("loop/body/state_in", FLOAT, ["batch", features])
    m = body.op("MatMul", [s, w_rec], "loop/body/MatMul")  # outer initializer
    a = body.op("Add", [m, h], "loop/body/Add")  # outer node output
    s_next = body.op("Tanh", [a], "loop/body/Tanh")
    cond_out = body.op("Identity", [cond_in], "loop/body/cond/Identity")
    trace = body.op("Identity", [s_next], "loop/body/trace/Identity")
    body.output(cond_out, BOOL, [])
    body.output(s_next, FLOAT, ["batch", features])
    body.output(trace, FLOAT, ["batch", features])

    y, tr = b.op(
        "Loop",
        [b.i64("loop/trip_count", trips), b.const("loop/cond", True, np.bool_), s0],
        "loop/Loop",
        outputs=["y", "trace"],
        body=body.graph(),
    )
    b.output(y, FLOAT, ["batch", features])
    b.output(tr, FLOAT, [trips, "batch", features])
    return b.model(doc=first_doc_paragraph(loop_outer_capture))


def shared_initializer(features: int = 16, seed: int = 16) -> onnx.ModelProto:
    """One float initializer read by a MatMul (LOW) and by Softmax (DENY, HIGH) at once.

    ``shared/weight`` feeds MatMul(x, W) and Softmax(W) → MatMul; ``shared/ln_scale`` feeds
    LayerNormalization's scale and a Mul. The converter must keep one copy plus a Cast (or store
    low and cast up), never duplicate or silently retype it for the FP32 reader.
    """
    b = GraphBuilder("shared_initializer", seed)
    x = b.input("x", FLOAT, ["batch", features])
    w = b.weight("shared/weight", [features, features])
    g = b.initializer(
        "shared/ln_scale", (1.0 + 0.1 * b.rng.standard_normal(features)).astype(np.float32)
    )
    a = b.op("MatMul", [x, w], "direct/MatMul")
    sw = b.op("Softmax", [w], "softmax/Softmax", axis=-1)
    c = b.op("MatMul", [x, sw], "softmax/MatMul")
    s = b.op("Add", [a, c], "merge/Add")
    n = b.op(
        "LayerNormalization",
        [s, g, b.weight("norm/bias", [features])],
        "norm/LayerNormalization",
        axis=-1,
        epsilon=1e-5,
    )
    y = b.op("Mul", [n, g], "scale/Mul", outputs=["y"])
    b.output(y, FLOAT, ["batch", features])
    return b.model(doc=first_doc_paragraph(shared_initializer))


def existing_cast_to_float(features: int = 16, seed: int = 17) -> onnx.ModelProto:
    """TorchScript-style Cast(to=FLOAT) on a float value (a no-op) and on an int64 input.

    Inputs: float32 ``x`` [batch, F] and int64 ``ids`` [batch, F] (values in [0, 10)). A
    converter retargeting ``to`` must turn the float→float Cast into float16→float16 (or drop it)
    but keep the int64→float Cast's meaning, and both feed MatMul/Add.
    """
    b = GraphBuilder("existing_cast_to_float", seed)
    x = b.input("x", FLOAT, ["batch", features])
    ids = b.input("ids", INT64, ["batch", features], value_range=(0, 10))
    xc = b.op("Cast", [x], "x/Cast", to=FLOAT)
    ic = b.op("Cast", [ids], "ids/Cast", to=FLOAT)
    ic = b.op("Mul", [ic, b.f32("ids/scale", 0.1)], "ids/Mul")
    m = b.op("MatMul", [xc, b.weight("proj/weight", [features, features])], "proj/MatMul")
    y = b.op("Add", [m, ic], "out/Add", outputs=["y"])
    b.output(y, FLOAT, ["batch", features])
    return b.model(doc=first_doc_paragraph(existing_cast_to_float))


def random_normal_like(features: int = 16, seed: int = 18) -> onnx.ModelProto:
    """RandomNormalLike/RandomUniformLike/EyeLike/Bernoulli without ``dtype``: type follows input.

    With no ``dtype`` attribute the output type is the input's, so retyping the input retypes
    the output (fine), but a converter that *adds* a ``dtype`` or Casts must keep them
    consistent with the Add/Mul/MatMul consumers.
    """
    b = GraphBuilder("random_normal_like", seed)
    x = b.input("x", FLOAT, ["batch", features])
    n = b.op("RandomNormalLike", [x], "noise/RandomNormalLike", mean=0.0, scale=0.01, seed=1.0)
    u = b.op("RandomUniformLike", [x], "noise/RandomUniformLike", low=0.9, high=1.1, seed=2.0)
    e = b.op("EyeLike", [x], "eye/EyeLike")
    p = b.op("Sigmoid", [x], "dropout/Sigmoid")
    keep = b.op("Bernoulli", [p], "dropout/Bernoulli", seed=3.0)
    a = b.op("Add", [x, n], "noise/Add")
    a = b.op("Mul", [a, u], "noise/Mul")
    a = b.op("Mul", [a, keep], "dropout/Mul")
    a = b.op("Add", [a, e], "eye/Add")
    y = b.op(
        "MatMul", [a, b.weight("proj/weight", [features, features])], "proj/MatMul", outputs=["y"]
    )
    b.output(
        y,
        FLOAT,
        ["batch", features],
    )
    return b.model(doc=first_doc_paragraph(random_normal_like))


def constant_of_shape(features: int = 16, out: int = 8, seed: int = 19) -> onnx.ModelProto:
    """ConstantOfShape with a float ``value`` and a Constant float tensor feeding a MatMul.

    Both carry their dtype in an attribute (``value``), so converting their consumers to FP16
    means retargeting the attribute tensor (or casting), not just the value's type.
    """
    b = GraphBuilder("constant_of_shape", seed)
    x = b.input("x", FLOAT, ["batch", features])
    shape = b.op("Shape", [x], "fill/Shape")
    fill = b.op(
        "ConstantOfShape",
        [shape],
        "fill/ConstantOfShape",
        value=numpy_helper.from_array(np.array([0.5], dtype=np.float32), "value"),
    )
    a = b.op("Add", [x, fill], "fill/Add")
    w = (b.rng.standard_normal((features, out)) / np.sqrt(features)).astype(np.float32)
    c = b.op("Constant", [], "proj/Constant", value=numpy_helper.from_array(w, "value"))
    y = b.op("MatMul", [a, c], "proj/MatMul", outputs=["y"])
    b.output(y, FLOAT, ["batch", out])
    return b.model(doc=first_doc_paragraph(constant_of_shape))


def custom_domain(features: int = 16, inner: int = 32, seed: int = 20) -> onnx.ModelProto:
    """``com.microsoft`` BiasGelu and FusedMatMul (ORT CPU kernels) between standard MatMuls.

    The ONNX checker has no schema for these, so type inference stops at them; the converter
    must know (or be told) their float16 support and keep the ``com.microsoft`` opset import.
    """
    b = GraphBuilder("custom_domain", seed)
    x = b.input("x", FLOAT, ["batch", features])
    h = b.op("MatMul", [x, b.weight("fc1/weight", [features, inner])], "fc1/MatMul")
    h = b.op("BiasGelu", [h, b.weight("fc1/bias", [inner])], "fc1/BiasGelu", domain="com.microsoft")
    h = b.op(
        "FusedMatMul",
        [h, b.weight("fc2/weight", [features, inner])],
        "fc2/FusedMatMul",
        domain="com.microsoft",
        alpha=1.0,
        transA=0,
        transB=1,
    )
    y = b.op("MatMul", [h, b.weight("fc3/weight", [features, features])], "fc3/MatMul")
    y = b.op("Add", [y, b.weight("fc3/bias", [features])], "fc3/Add", outputs=["y"])
    b.output(y, FLOAT, ["batch", features])
    return b.model(doc=first_doc_paragraph(custom_domain), extra_opsets={"com.microsoft": 1})


def out_of_range_weights(
    features: int = 16, seed: int = 21, foldable: bool = True
) -> onnx.ModelProto:
    """Weights beyond FP16's range: BatchNorm running_var up to 1e8, a MatMul weight of 1e5.

    ``big/weight[0, 0] = 1e5`` (> 65504) makes channel 0 of the MatMul output ~5e4, which the
    BatchNormalization (running_var[0] = 1e8, running_mean[0] = 1e3) normalises back to O(1).
    A converter must not silently clamp these to 65504: keep the nodes HIGH or report the clamp.
    The BN folds into the MatMul (its folded weight is in range); with ``foldable=False`` a Relu
    comes first and ``running_var[0] = 1e10``, so the BN has nothing to fold into and its
    decomposed scale (~1e-5) would underflow: both out-of-range weights survive the fold step.
    """
    b = GraphBuilder("out_of_range_weights", seed)
    x = b.input("x", FLOAT, ["batch", features])
    w = (b.rng.standard_normal((features, features)) / np.sqrt(features)).astype(np.float32)
    w[0, 0] = 1e5
    h = b.op("MatMul", [x, b.initializer("big/weight", w)], "big/MatMul")
    rng = b.rng
    var = rng.uniform(0.5, 2.0, features).astype(np.float32)
    var[0] = 1e8 if foldable else 1e10
    var[1] = 3e6
    mean = (0.1 * rng.standard_normal(features)).astype(np.float32)
    mean[0] = 1e3
    if not foldable:
        h = b.op("Relu", [h], "act0/Relu")
    h = b.op(
        "BatchNormalization",
        [
            h,
            b.initializer("bn/weight", rng.uniform(0.5, 1.5, features).astype(np.float32)),
            b.weight("bn/bias", [features], std=0.1),
            b.initializer("bn/running_mean", mean),
            b.initializer("bn/running_var", var),
        ],
        "bn/BatchNormalization",
        epsilon=1e-5,
    )
    h = b.op("Relu", [h], "act/Relu")
    y = b.op("MatMul", [h, b.weight("fc/weight", [features, features])], "fc/MatMul")
    y = b.op("Add", [y, b.weight("fc/bias", [features])], "fc/Add", outputs=["y"])
    b.output(y, FLOAT, ["batch", features])
    return b.model(doc=first_doc_paragraph(out_of_range_weights))


def quantized_model(features: int = 16, inner: int = 32, seed: int = 22) -> onnx.ModelProto:
    """ORT dynamic-quantization pattern: DynamicQuantizeLinear → MatMulInteger → Cast → Mul.

    The scale outputs and ``Cast(to=FLOAT)`` rescale path belong to the quantization scheme and
    should stay FP32 (``DynamicQuantizeLinear`` is float32-only); the float Add/MatMul after it
    may go LOW.
    """
    b = GraphBuilder("quantized_model", seed)
    x = b.input("x", FLOAT, ["batch", features])
    xq, xs, xz = b.op("DynamicQuantizeLinear", [x], "fc1/quant/DynamicQuantizeLinear", outputs=3)
    wf = b.rng.standard_normal((features, inner)) / np.sqrt(features)
    w_scale = float(np.abs(wf).max() / 127.0)
    wq = (np.clip(np.round(wf / w_scale), -127, 127) + 128).astype(np.uint8)
    mi = b.op(
        "MatMulInteger",
        [
            xq,
            b.initializer("fc1/weight_quantized", wq),
            xz,
            b.const("fc1/weight_zero_point", 128, np.uint8),
        ],
        "fc1/MatMulInteger",
    )
    mf = b.op("Cast", [mi], "fc1/Cast", to=FLOAT)
    scale = b.op("Mul", [xs, b.f32("fc1/weight_scale", w_scale)], "fc1/scale/Mul")
    h = b.op("Mul", [mf, scale], "fc1/rescale/Mul")
    h = b.op("Add", [h, b.weight("fc1/bias", [inner])], "fc1/Add")
    h = b.op("Relu", [h], "act/Relu")
    y = b.op("MatMul", [h, b.weight("fc2/weight", [inner, features])], "fc2/MatMul", outputs=["y"])
    b.output(y, FLOAT, ["batch", features])
    return b.model(doc=first_doc_paragraph(quantized_model))


def graph_input_initializers(
    features: int = 16, inner: int = 32, seed: int = 23
) -> onnx.ModelProto:
    """Old-style model (IR version 3, opset 9) whose initializers are also graph inputs.

    Initializers listed in ``graph.input`` are overridable inputs: retyping an initializer to
    FP16 must retype its graph-input entry too (or drop the entry), and IR 3 needs it listed.
    """
    b = GraphBuilder("graph_input_initializers", seed)
    x = b.input("x", FLOAT, ["batch", features])
    h = b.op("MatMul", [x, b.weight("fc1/weight", [features, inner])], "fc1/MatMul")
    h = b.op("Add", [h, b.weight("fc1/bias", [inner])], "fc1/Add")
    h = b.op("Relu", [h], "act/Relu")
    h = b.op(
        "Gemm",
        [h, b.weight("fc2/weight", [inner, features]), b.weight("fc2/bias", [features])],
        "fc2/Gemm",
    )
    y = b.op("Softmax", [h], "out/Softmax", axis=1, outputs=["y"])
    b.output(y, FLOAT, ["batch", features])
    for init in b.initializers:
        b.inputs.append(
            onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
        )
    return b.model(opset=9, ir_version=3, doc=first_doc_paragraph(graph_input_initializers))


def fp16_overflow(features: int = 16, seed: int = 24) -> onnx.ModelProto:
    """Intermediates exceed 65504 while the FP32 output stays O(10): naive FP16 gives inf/NaN.

    Path A: MatMul(x * 1000) reaches ~2e3, squared ~2e6, then scaled by 1e-6. Path B: MatMul(x)
    times 1e5 (~2e5), then times 1e-5. Both paths are added. The validator must see inf/NaN or
    large error from a converter that keeps these Muls LOW.
    """
    b = GraphBuilder("fp16_overflow", seed)
    x = b.input("x", FLOAT, ["batch", features])
    a = b.op("Mul", [x, b.f32("a/up", 1000.0)], "a/up/Mul")
    a = b.op("MatMul", [a, b.weight("a/weight", [features, features])], "a/MatMul")
    a = b.op("Mul", [a, a], "a/square/Mul")
    a = b.op("Mul", [a, b.f32("a/down", 1e-6)], "a/down/Mul")
    c = b.op("MatMul", [x, b.weight("b/weight", [features, features])], "b/MatMul")
    c = b.op("Mul", [c, b.f32("b/up", 1e5)], "b/up/Mul")
    c = b.op("Mul", [c, b.f32("b/down", 1e-5)], "b/down/Mul")
    y = b.op("Add", [a, c], "out/Add", outputs=["y"])
    b.output(y, FLOAT, ["batch", features])
    return b.model(doc=first_doc_paragraph(fp16_overflow))


def multi_output_int(
    features: int = 16, tokens: int = 4, vocab: int = 100, out: int = 8, seed: int = 25
) -> onnx.ModelProto:
    """Mixed-dtype interface: float x, int64 ids, bool flag in; float, int64, bool out.

    Inputs: ``x`` float32 [batch, F], ``ids`` int64 [batch, T] (values in [0, vocab)),
    ``flag`` bool [batch]. Outputs: ``y`` float32 (masked logits), ``argmax`` int64 (ArgMax),
    ``positive`` bool (Greater). keep-io-types must touch only the float ones.
    """
    b = GraphBuilder("multi_output_int", seed)
    x = b.input("x", FLOAT, ["batch", features])
    ids = b.input("ids", INT64, ["batch", tokens], value_range=(0, vocab))
    flag = b.input("flag", BOOL, ["batch"])
    e = b.op("Gather", [b.weight("embed/weight", [vocab, features], std=0.5), ids], "embed/Gather")
    e = b.op("ReduceMean", [e], "embed/ReduceMean", axes=[1], keepdims=0)
    h = b.op("Add", [x, e], "merge/Add")
    logits = b.op("MatMul", [h, b.weight("proj/weight", [features, out])], "proj/MatMul")
    f = b.op("Unsqueeze", [flag, b.i64("flag/axes", [1])], "flag/Unsqueeze")
    y = b.op("Where", [f, logits, b.f32("flag/zero", 0.0)], "mask/Where", outputs=["y"])
    am = b.op("ArgMax", [logits], "argmax/ArgMax", axis=1, keepdims=0, outputs=["argmax"])
    pos = b.op(
        "Greater", [logits, b.f32("positive/zero", 0.0)], "positive/Greater", outputs=["positive"]
    )
    b.output(y, FLOAT, ["batch", out])
    b.output(am, INT64, ["batch"])
    b.output(pos, BOOL, ["batch", out])
    return b.model(doc=first_doc_paragraph(multi_output_int))


#: Every focused builder by name; each takes only keyword options with small defaults.
ALL_FOCUSED: dict[str, Callable[[], onnx.ModelProto]] = {
    "resize_scales": resize_scales,
    "range_model": range_model,
    "topk_model": topk_model,
    "nms_model": nms_model,
    "if_outer_capture": if_outer_capture,
    "loop_outer_capture": loop_outer_capture,
    "shared_initializer": shared_initializer,
    "existing_cast_to_float": existing_cast_to_float,
    "random_normal_like": random_normal_like,
    "constant_of_shape": constant_of_shape,
    "custom_domain": custom_domain,
    "out_of_range_weights": out_of_range_weights,
    "quantized_model": quantized_model,
    "graph_input_initializers": graph_input_initializers,
    "fp16_overflow": fp16_overflow,
    "multi_output_int": multi_output_int,
}
