"""Small FP32 / hand-made FP16-BF16 model pairs for the validator's tests.

Why hand-made: the validator must be testable without the converter, and each pair is built to
show one thing (FP16 overflow, BF16 rounding, ids and masks, control flow, dtype attributes). Each
builder returns ``(reference_fp32, candidate_low)`` as onnx.ModelProto, opset 17, IR version 9
(what current ONNX Runtime releases accept). Deterministic: weights come from a seeded generator.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 9
F32 = TensorProto.FLOAT
F16 = TensorProto.FLOAT16
BF16 = TensorProto.BFLOAT16
I64 = TensorProto.INT64
BOOL = TensorProto.BOOL
_NP_LOW = {F16: np.float16}


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )
    m.producer_name = "amp-convert-validation-models"
    return m


def _tensor(name: str, arr: np.ndarray, dtype: int = F32) -> onnx.TensorProto:
    """Initializer of ``dtype`` (BF16 rounded to nearest even, like a converter would store it)."""
    arr = np.asarray(arr, dtype=np.float32)
    if dtype == F32:
        return numpy_helper.from_array(arr, name)
    if dtype == F16:
        return numpy_helper.from_array(arr.astype(np.float16), name)
    import ml_dtypes

    bits = arr.astype(ml_dtypes.bfloat16).view(np.uint16)
    t = helper.make_tensor(name, BF16, list(arr.shape), bits.tobytes(), raw=True)
    return t


def _vi(name: str, dtype: int, shape: list | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def overflow_pair(width: int = 8) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """y = (1000 x)^2 / 1000 / 1000: the square exceeds 65504 (FP16 max) whenever |x| > 0.256.

    Fine in FP32; on a GPU the FP16 candidate gives inf there. ORT CPU computes the FP16 nodes in
    FP32 and so shows no inf, which is why the emulate provider exists.
    """
    shape = ["batch", width]

    def graph(dtype: int, name: str) -> onnx.GraphProto:
        low = dtype != F32
        nodes = [helper.make_node("Cast", ["x"], ["x_low"], to=dtype)] if low else []
        nodes += [
            helper.make_node("Mul", ["x_low" if low else "x", "k1000"], ["a"]),
            helper.make_node("Mul", ["a", "a"], ["b"]),
            helper.make_node("Div", ["b", "k1000"], ["c"]),
            helper.make_node("Div", ["c", "k1000"], ["y_low" if low else "y"]),
        ]
        if low:
            nodes.append(helper.make_node("Cast", ["y_low"], ["y"], to=F32))
        return helper.make_graph(
            nodes,
            name,
            [_vi("x", F32, shape)],
            [_vi("y", F32, shape)],
            [_tensor("k1000", np.array(1000.0), dtype)],
        )

    return _model(graph(F32, "overflow_fp32")), _model(graph(F16, "overflow_fp16"))


def mlp_pair(low: int = BF16, seed: int = 0) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """x[2,16] → MatMul+Add → Relu → MatMul → y[2,4]; candidate computes and stores in ``low``."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((16, 32)).astype(np.float32) / 4
    b1 = rng.standard_normal(32).astype(np.float32) / 4
    w2 = rng.standard_normal((32, 4)).astype(np.float32) / 4

    def graph(dtype: int, name: str) -> onnx.GraphProto:
        nodes = []
        x = "x"
        if dtype != F32:
            nodes.append(helper.make_node("Cast", ["x"], ["x_low"], to=dtype))
            x = "x_low"
        nodes += [
            helper.make_node("MatMul", [x, "w1"], ["h0"]),
            helper.make_node("Add", ["h0", "b1"], ["h1"]),
            helper.make_node("Relu", ["h1"], ["h2"]),
            helper.make_node("MatMul", ["h2", "w2"], ["y_low" if dtype != F32 else "y"]),
        ]
        if dtype != F32:
            nodes.append(helper.make_node("Cast", ["y_low"], ["y"], to=F32))
        inits = [_tensor("w1", w1, dtype), _tensor("b1", b1, dtype), _tensor("w2", w2, dtype)]
        return helper.make_graph(
            nodes, name, [_vi("x", F32, [2, 16])], [_vi("y", F32, [2, 4])], inits
        )

    return _model(graph(F32, "mlp_fp32")), _model(graph(low, "mlp_low"))


def multi_io_pair(seed: int = 0) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Token model: int64 ids / mask / token types and a bool flag in; float logits, an int64
    argmax and a bool mask out. The embedding table has 30 rows (ids must stay below 30)."""
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((30, 8)).astype(np.float32)
    types = rng.standard_normal((2, 8)).astype(np.float32)
    wout = rng.standard_normal((8, 5)).astype(np.float32)
    bout = rng.standard_normal(5).astype(np.float32)
    seq = ["batch", "seq"]
    inputs = [
        _vi("input_ids", I64, seq),
        _vi("attention_mask", I64, seq),
        _vi("token_type_ids", I64, seq),
        _vi("use_bias", BOOL, []),
    ]
    outputs = [
        _vi("logits", F32, ["batch", "seq", 5]),
        _vi("pred", I64, seq),
        _vi("is_padding", BOOL, seq),
    ]

    def graph(dtype: int, name: str) -> onnx.GraphProto:
        sfx = "" if dtype == F32 else "_low"
        nodes = [
            helper.make_node("Gather", ["emb", "input_ids"], ["e"]),
            helper.make_node("Gather", ["types", "token_type_ids"], ["t"]),
            helper.make_node("Add", ["e", "t"], ["h"]),
            helper.make_node("Cast", ["attention_mask"], ["m"], to=dtype),
            helper.make_node("Unsqueeze", ["m", "axes"], ["m3"]),
            helper.make_node("Mul", ["h", "m3"], ["hm"]),
            helper.make_node("MatMul", ["hm", "wout"], ["l0"]),
            helper.make_node("Add", ["l0", "bout"], ["l1"]),
            helper.make_node("Where", ["use_bias", "l1", "l0"], ["logits" + sfx]),
            helper.make_node("ArgMax", ["logits" + sfx], ["pred"], axis=-1, keepdims=0),
            helper.make_node("Equal", ["attention_mask", "zero"], ["is_padding"]),
        ]
        if dtype != F32:
            nodes.append(helper.make_node("Cast", ["logits_low"], ["logits"], to=F32))
        inits = [
            _tensor("emb", emb, dtype),
            _tensor("types", types, dtype),
            _tensor("wout", wout, dtype),
            _tensor("bout", bout, dtype),
            numpy_helper.from_array(np.array([-1], np.int64), "axes"),
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
        ]
        return helper.make_graph(nodes, name, inputs, outputs, inits)

    return _model(graph(F32, "tokens_fp32")), _model(graph(F16, "tokens_fp16"))


def if_pair() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """If(c): then (1000 x)^2 / 1e6 (overflows FP16 inside the branch), else x + x."""

    def graph(dtype: int, name: str) -> onnx.GraphProto:
        low = dtype != F32
        x = "x_low" if low else "x"
        then = helper.make_graph(
            [
                helper.make_node("Mul", [x, "k1000"], ["t_a"]),
                helper.make_node("Mul", ["t_a", "t_a"], ["t_b"]),
                helper.make_node("Div", ["t_b", "k1000"], ["t_c"]),
                helper.make_node("Div", ["t_c", "k1000"], ["t_out"]),
            ],
            "then",
            [],
            [_vi("t_out", dtype, [4])],
        )
        other = helper.make_graph(
            [helper.make_node("Add", [x, x], ["e_out"])], "else", [], [_vi("e_out", dtype, [4])]
        )
        nodes = [helper.make_node("Cast", ["x"], ["x_low"], to=dtype)] if low else []
        nodes.append(
            helper.make_node(
                "If", ["c"], ["r_low" if low else "y"], then_branch=then, else_branch=other
            )
        )
        if low:
            nodes.append(helper.make_node("Cast", ["r_low"], ["y"], to=F32))
        inits = [_tensor("k1000", np.array(1000.0), dtype)]
        return helper.make_graph(
            nodes, name, [_vi("x", F32, [4]), _vi("c", BOOL, [])], [_vi("y", F32, [4])], inits
        )

    return _model(graph(F32, "if_fp32")), _model(graph(F16, "if_fp16"))


def loop_pair(trips: int = 4) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Loop ``trips`` times: v = v * 30 (30^4 = 810000: FP16 overflows for |x| > 0.081)."""

    def graph(dtype: int, name: str) -> onnx.GraphProto:
        low = dtype != F32
        body = helper.make_graph(
            [
                helper.make_node("Mul", ["v_in", "k30"], ["v_out"]),
                helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            ],
            "body",
            [_vi("i", I64, []), _vi("cond_in", BOOL, []), _vi("v_in", dtype, [4])],
            [_vi("cond_out", BOOL, []), _vi("v_out", dtype, [4])],
        )
        nodes = [helper.make_node("Cast", ["x"], ["x_low"], to=dtype)] if low else []
        nodes.append(
            helper.make_node(
                "Loop",
                ["trips", "cond", "x_low" if low else "x"],
                ["v_low" if low else "y"],
                body=body,
            )
        )
        if low:
            nodes.append(helper.make_node("Cast", ["v_low"], ["y"], to=F32))
        inits = [
            _tensor("k30", np.array(30.0), dtype),
            numpy_helper.from_array(np.array(trips, np.int64), "trips"),
            numpy_helper.from_array(np.array(True), "cond"),
        ]
        return helper.make_graph(nodes, name, [_vi("x", F32, [4])], [_vi("y", F32, [4])], inits)

    return _model(graph(F32, "loop_fp32")), _model(graph(F16, "loop_fp16"))


def dtype_attributes_pair() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Candidate uses FP16 in attributes: ConstantOfShape ``value``, Constant ``value``, Cast ``to``
    and EyeLike ``dtype``: y = (x + 0.1) * 0.3 + eye, all rounded to FP16 at every step."""
    shape = [3, 3]

    def graph(dtype: int, name: str) -> onnx.GraphProto:
        np_t = np.float32 if dtype == F32 else _NP_LOW[dtype]
        value = numpy_helper.from_array(np.array([0.1], np_t), "value")
        const = numpy_helper.from_array(np.array(0.3, np_t), "c")
        x = "x_low" if dtype != F32 else "x"
        nodes = [helper.make_node("Cast", ["x"], ["x_low"], to=dtype)] if dtype != F32 else []
        nodes += [
            helper.make_node("Shape", [x], ["s"]),
            helper.make_node("ConstantOfShape", ["s"], ["fill"], value=value),
            helper.make_node("Add", [x, "fill"], ["a"]),
            helper.make_node("Constant", [], ["c"], value=const),
            helper.make_node("Mul", ["a", "c"], ["b"]),
            helper.make_node("EyeLike", ["s_f"], ["eye"], dtype=dtype),
            helper.make_node("Add", ["b", "eye"], ["y_low" if dtype != F32 else "y"]),
        ]
        if dtype != F32:
            nodes.append(helper.make_node("Cast", ["y_low"], ["y"], to=F32))
        inits = [numpy_helper.from_array(np.zeros(shape, np.int64), "s_f")]
        return helper.make_graph(nodes, name, [_vi("x", F32, shape)], [_vi("y", F32, shape)], inits)

    return _model(graph(F32, "attrs_fp32")), _model(graph(F16, "attrs_fp16"))


def cast_pair(low: int = F16) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Candidate only rounds: y = Cast(Cast(x, low), FLOAT) with x of any length."""
    ref = _model(
        helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "id_fp32",
            [_vi("x", F32, ["n"])],
            [_vi("y", F32, ["n"])],
        )
    )
    cand = _model(
        helper.make_graph(
            [
                helper.make_node("Cast", ["x"], ["x_low"], to=low),
                helper.make_node("Cast", ["x_low"], ["y"], to=F32),
            ],
            "cast_low",
            [_vi("x", F32, ["n"])],
            [_vi("y", F32, ["n"])],
        )
    )
    return ref, cand


def low_io_pair(low: int = F16) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Candidate with low-precision graph input and output (keep_io_types off): y = x * 3."""
    ref = _model(
        helper.make_graph(
            [helper.make_node("Mul", ["x", "k"], ["y"])],
            "io_fp32",
            [_vi("x", F32, [2, 5])],
            [_vi("y", F32, [2, 5])],
            [_tensor("k", np.array(3.0))],
        )
    )
    cand = _model(
        helper.make_graph(
            [helper.make_node("Mul", ["x", "k"], ["y"])],
            "io_low",
            [_vi("x", low, [2, 5])],
            [_vi("y", low, [2, 5])],
            [_tensor("k", np.array(3.0), low)],
        )
    )
    return ref, cand


def kv_concat_model(
    width: int = 4,
    vocab: int = 20,
    seed: int = 5,
    mask_dim: str = "past_sequence_length + sequence_length",
) -> onnx.ModelProto:
    """A decoder's cache step as optimum exports it: the mask's dim is an expression.

    ``present = Concat(past, Gather(emb, input_ids))`` along the sequence axis, scaled by the
    attention mask, whose length is ``past_sequence_length + sequence_length``: inputs whose mask
    does not have that length fail in ORT (the Mul cannot broadcast). ``mask_dim`` lets a test
    write the same axis under another name, as exporters sometimes do.
    """
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((vocab, width)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["x"]),
        helper.make_node("Concat", ["past", "x"], ["kv"], axis=1),
        helper.make_node("Cast", ["attention_mask"], ["m"], to=F32),
        helper.make_node("Unsqueeze", ["m", "axes"], ["m3"]),
        helper.make_node("Mul", ["kv", "m3"], ["present"]),
        helper.make_node("ReduceMean", ["present"], ["logits"], axes=[1], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "kv_concat",
        [
            _vi("input_ids", I64, ["batch_size", "sequence_length"]),
            _vi("past", F32, ["batch_size", "past_sequence_length", width]),
            _vi("attention_mask", I64, ["batch_size", mask_dim]),
        ],
        [
            _vi("present", F32, ["batch_size", "past_sequence_length + sequence_length", width]),
            _vi("logits", F32, ["batch_size", width]),
        ],
        [
            _tensor("emb", emb),
            numpy_helper.from_array(np.array([-1], np.int64), "axes"),
        ],
    )
    model = _model(graph)
    helper.set_model_props(model, {"input_range:input_ids": f"0,{vocab}"})
    return model


PAIRS = {
    "overflow": overflow_pair,
    "mlp_bf16": lambda: mlp_pair(BF16),
    "mlp_fp16": lambda: mlp_pair(F16),
    "multi_io": multi_io_pair,
    "if": if_pair,
    "loop": loop_pair,
    "dtype_attributes": dtype_attributes_pair,
    "cast_fp16": lambda: cast_pair(F16),
    "cast_bf16": lambda: cast_pair(BF16),
    "low_io_fp16": lambda: low_io_pair(F16),
    "low_io_bf16": lambda: low_io_pair(BF16),
}


def matmul_nbits_pair(
    k: int = 64, n: int = 16, block: int = 32, seed: int = 6
) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """An int4 linear layer as ORT GenAI's builder writes it (``-p int4``): com.microsoft
    MatMulNBits, ``accuracy_level=4``, 4-bit weights packed two per byte in blocks of ``block``
    along K, one scale per block, no zero points (8 implied).

    The reference reads FP32 activations and scales; the candidate casts its input to FP16 and
    stores the scales in FP16, as the FP16 GenAI model does. ORT's CPU kernel prepacks the weight
    with its scales, so the scales must be a constant input of the node.
    """
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 16, (n, k), dtype=np.uint8)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, k // block, block // 2)
    scales = (rng.random((n, k // block)) * 0.05 + 0.01).astype(np.float32).reshape(-1)
    attrs = {"K": k, "N": n, "bits": 4, "block_size": block, "accuracy_level": 4}

    def model(dtype: int, name: str) -> onnx.ModelProto:
        low = dtype != F32
        nodes = [helper.make_node("Cast", ["x"], ["x_low"], to=dtype)] if low else []
        nodes.append(
            helper.make_node(
                "MatMulNBits",
                ["x_low" if low else "x", "B", "scales"],
                ["y_low" if low else "y"],
                name="proj/MatMulNBits",
                domain="com.microsoft",
                **attrs,
            )
        )
        if low:
            nodes.append(helper.make_node("Cast", ["y_low"], ["y"], to=F32))
        inits = [numpy_helper.from_array(packed, "B"), _tensor("scales", scales, dtype)]
        graph = helper.make_graph(
            nodes, name, [_vi("x", F32, ["batch", k])], [_vi("y", F32, ["batch", n])], inits
        )
        m = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
            ir_version=IR_VERSION,
        )
        m.producer_name = "amp-convert-validation-models"
        return m

    return model(F32, "nbits_fp32"), model(F16, "nbits_fp16")
