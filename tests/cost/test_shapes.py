"""The cost model's shapes: symbolic dims, rules ONNX lacks, the neighbour estimate, defaults."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from amp_convert.cost.shapes import ShapeBook, assumed_dims, parse_dim
from amp_convert.cost.symdim import Sym, add, evaluate, floordiv, mul, prod, sub
from models.exporters import gpt2_past_decoder

SEQ, PAST = Sym.name("seq"), Sym.name("past")


def test_polynomial_arithmetic_is_exact() -> None:
    two_seq = mul(2, SEQ)
    assert str(two_seq) == "2*seq" and evaluate(two_seq, {"seq": 77}) == 154
    total = add(SEQ, PAST)
    assert str(total) == "past+seq" and evaluate(total, {"seq": 5, "past": 37}) == 42
    assert sub(total, PAST) == SEQ  # (seq + past) - past is seq again, not a new unknown
    assert floordiv(mul(SEQ, 64), 4) == mul(16, SEQ)  # exact division stays a polynomial
    assert floordiv(mul(SEQ, PAST), PAST) == SEQ
    area = prod([1, mul(2, SEQ), add(SEQ, 1)])
    assert evaluate(area, {"seq": 3}) == 2 * 3 * 4
    assert add(SEQ, None) is None and evaluate(SEQ, {}) is None


def test_floor_division_that_does_not_divide_stays_exact_at_evaluation() -> None:
    half = floordiv(add(SEQ, 1), 2)  # a stride-2 conv's output length
    assert isinstance(half, Sym)
    assert evaluate(half, {"seq": 7}) == 4 and evaluate(half, {"seq": 8}) == 4


def test_exporter_dim_expressions_are_parsed() -> None:
    assert parse_dim("past_sequence_length + sequence_length") == add(
        Sym.name("past_sequence_length"), Sym.name("sequence_length")
    )
    assert evaluate(parse_dim("2*s0 - 1"), {"s0": 10}) == 19
    assert evaluate(parse_dim("(s1 + 1)//2"), {"s1": 9}) == 5
    assert evaluate(parse_dim("floor(s0/2)"), {"s0": 9}) == 4
    assert parse_dim("12") == 12
    assert evaluate(parse_dim("unk__3"), {}) is None  # a name no input dim sets stays unknown


def test_default_dims_batch_one_others_128_inputs_only() -> None:
    model = ir.from_proto(gpt2_past_decoder(layers=1))
    assert assumed_dims(model, {}) == {
        "batch_size": 1,
        "sequence_length": 128,
        "past_sequence_length": 128,
    }
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, 48, -1])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    paddle = ir.from_proto(helper.make_model(graph))
    # Paddle's unnamed -1: the leading axis is a batch, the width of an image 224, the user wins
    assert assumed_dims(paddle, {}) == {"x[0]": 1, "x[3]": 224}
    assert assumed_dims(paddle, {"x[3]": 320}) == {"x[0]": 1, "x[3]": 320}


def test_seq_plus_past_through_concat_and_shape_derived_slices() -> None:
    model = ir.from_proto(gpt2_past_decoder(layers=1))
    book = ShapeBook(model, {"batch_size": 2, "sequence_length": 5, "past_sequence_length": 37})
    values = {v.name: v for n in model.graph for v in n.outputs}
    assert book.symbolic(values["present.0.key"]) == (
        "[batch_size, 4, past_sequence_length+sequence_length, 16]"
    )
    assert book.shape(values["h.0/scores/MatMul_out"]) == (2, 4, 5, 42)
    # the causal mask is Sliced from a 1024x1024 buffer with Shape-derived starts and ends
    assert book.shape(values["mask/Slice_cols_out"]) == (1, 1, 5, 42)
    assert book.estimated == 0


def _data_dependent_model() -> onnx.ModelProto:
    """x -> NonZero (size known only at run time) -> Transpose -> GatherND(x) -> Relu."""
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "idx"], ["picked"]),
        helper.make_node("Relu", ["picked"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 300])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_unknown_sizes_come_from_the_producers_inputs_and_are_counted() -> None:
    model = ir.from_proto(_data_dependent_model())
    book = ShapeBook(model, {"batch": 4})
    v = {v.name: v for n in model.graph for v in n.outputs}
    assert book.estimated >= 3  # nz, idx, picked, y have data-dependent sizes
    # never a fixed 128 per dim: the neighbours' sizes (x is 4 x 300)
    assert book.elements(v["nz"]) == 4 * 300
    assert book.elements(v["picked"]) == max(4 * 300, book.elements(v["idx"]))
    assert book.elements(v["y"]) == book.elements(v["picked"])


def test_loop_body_shapes_and_runs_per_trip() -> None:
    from models.blocks import loop_rnn

    model = ir.from_proto(loop_rnn(seq=8))
    book = ShapeBook(model, {"batch": 3})
    loop = next(n for n in model.graph if n.op_type == "Loop")
    body = loop.attributes["body"].value
    assert book.runs(body) == 8
    tanh = next(n for n in body if n.op_type == "Tanh")
    assert book.shape(tanh.outputs[0]) == (3, 32)
    assert book.shape(loop.outputs[1]) == (8, 3, 32)
    # a Cast of a body value runs once per trip: placement and the report weigh it so
    assert book.cast_bytes(tanh.outputs[0], ir.DataType.FLOAT16) == 8 * 3 * 32 * (4 + 2)
    assert book.cast_bytes(loop.outputs[0], ir.DataType.FLOAT16) == 3 * 32 * (4 + 2)


def test_weights_are_not_read_to_resolve_shapes(tmp_path) -> None:
    """A model whose weight file is gone still resolves: only shapes and small constants count."""
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[w],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path), save_as_external_data=True, location="w.bin")
    (tmp_path / "w.bin").unlink()
    model = ir.load(str(path))
    book = ShapeBook(model, {"n": 5})
    y = model.graph.outputs[0]
    assert book.shape(y) == (5, 64) and book.elements(model.graph.initializers["w"]) == 64 * 64


@pytest.mark.parametrize("dims", [{}, {"s0": 3, "s1": 17}])
def test_dynamo_unnamed_intermediates_resolve(dims: dict[str, int]) -> None:
    from models.exporters import dynamo_bert

    model = ir.from_proto(dynamo_bert(layers=1))
    book = ShapeBook(model, dims)
    scores = next(n for n in model.graph if n.name.endswith("attn/Softmax")).outputs[0]
    b, s = (dims["s0"], dims["s1"]) if dims else (1, 128)
    assert book.shape(scores) == (b, 4, s, s) and book.estimated == 0
