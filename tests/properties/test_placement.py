"""Fast by construction: placement by bytes, weights stored low, FP32 statistics
through stash_type, Softmax with low I/O where ORT's CUDA kernel accumulates in FP32."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import amp_convert
from models.blocks import bert_encoder, gpt_decoder
from models.inputs import sample_inputs
from tests.helpers import FLOAT16, all_nodes, casts


def _converted(model: onnx.ModelProto, **options):
    out, report = amp_convert.convert(model, return_report=True, **options)
    onnx.checker.check_model(out, full_check=True)
    return out, report


def _weight_bytes(model: onnx.ModelProto) -> tuple[int, int]:
    """(bytes of FP16 float weights, bytes of all float weights)."""
    low = total = 0
    for t in model.graph.initializer:
        if t.data_type in (onnx.TensorProto.FLOAT, FLOAT16):
            size = int(np.prod(t.dims)) * (2 if t.data_type == FLOAT16 else 4)
            total += size
            low += size if t.data_type == FLOAT16 else 0
    return low, total


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_tied_embedding_is_stored_low_and_never_cast(level: str) -> None:
    """GPT-2's embedding table feeds a Gather and the lm_head MatMul: one low copy, no Cast."""
    model = gpt_decoder()
    out, report = _converted(model, level=level)
    initializers = {t.name for t in out.graph.initializer}
    cast_inputs = {n.input[0] for n in all_nodes(out.graph) if n.op_type == "Cast"}
    assert not cast_inputs & initializers, "a runtime Cast reads a weight"
    low, total = _weight_bytes(out)
    assert low / total >= 0.99, (low, total)
    assert report.traffic["result"] <= 1.10 * report.traffic["all_low"]


@pytest.mark.integration
@pytest.mark.parametrize("builder", [bert_encoder, gpt_decoder])
def test_softmax_between_low_neighbours_has_no_casts_and_the_same_error(builder) -> None:
    model = builder()
    fast, _ = _converted(model, level="O2")
    cast, _ = _converted(model, level="O2", target="none")
    by_output = {o: n for n in fast.graph.node for o in n.output}
    for node in fast.graph.node:
        if node.op_type != "Softmax":
            continue
        producer = by_output[node.input[0]]
        readers = [n for n in fast.graph.node if node.output[0] in n.input]
        assert producer.op_type != "Cast" and all(r.op_type != "Cast" for r in readers)
    assert casts(fast) < casts(cast)
    feeds = sample_inputs(model, seed=0)
    a = amp_convert.validate(model, fast, provider="emulate", inputs=feeds, runs=0)
    b = amp_convert.validate(model, cast, provider="emulate", inputs=feeds, runs=0)
    for name in (o.name for o in model.graph.output):
        err_fast = a.output(name).max_abs
        err_cast = b.output(name).max_abs
        assert err_fast == pytest.approx(err_cast, rel=0.01, abs=1e-6), name


def test_fp32_neighbour_keeps_softmax_fp32() -> None:
    """A Softmax whose reader stays FP32 keeps FP32 math, with explicit casts."""
    model = bert_encoder(layers=1)
    _, report = _converted(model, level="O2", exclude_nodes="attn/context/MatMul")
    softmax = [d for d in report.nodes if d.op_type == "Softmax"]
    assert softmax and all(d.precision == "fp32" for d in softmax)
    assert all("FP32 next to an FP32 neighbour" in d.reason for d in softmax)


def test_traffic_is_reported_per_cast() -> None:
    _, report = _converted(bert_encoder(layers=1), level="O2", target="none")
    assert report.casts and all(c.bytes > 0 for c in report.casts)
    assert [c.bytes for c in report.casts] == sorted((c.bytes for c in report.casts), reverse=True)
    line = next(x for x in report.summary().splitlines() if x.startswith("traffic"))
    # absolute bytes for the original, the result and all-low, the ratios, and the dims assumed
    assert line.startswith("traffic per inference: ") and line.count(" MB") == 3
    assert "1.00 → " in line and "estimated for dims batch=1, seq=128" in line
    assert report.traffic_dims == {"batch": 1, "seq": 128} and report.traffic_estimated == 0
    assert report.traffic["all_low"] < report.traffic["result"] < report.traffic["original"]


def test_dims_change_the_estimate_not_the_graph() -> None:
    model = bert_encoder(layers=1)
    small, r1 = _converted(model, level="O2", dims={"batch": 1, "seq": 8})
    large, r2 = _converted(model, level="O2", dims={"batch": 64, "seq": 128})
    assert r2.traffic["original"] > 20 * r1.traffic["original"]
    assert casts(small) == casts(large)


@pytest.mark.integration
@pytest.mark.parametrize("opset", [11, 17])
def test_conv_bn_hardswish_cnn_needs_only_interface_casts(opset: int) -> None:
    """A Paddle/MobileNet-style CNN (Conv→BN→decomposed HardSwish) at O2: its BNs fold
    into the Convs, so nothing stays FP32 and only the input and the logits are cast."""
    from models.cnn import mobilenet_cnn

    model = mobilenet_cnn(opset=opset)
    out, report = _converted(model, level="O2")
    assert report.casts_inserted == 2
    assert report.nodes_fp32 == 0
    assert not [n for n in out.graph.node if n.op_type == "BatchNormalization"]
    assert report.traffic["result"] <= 1.10 * report.traffic["all_low"]
    feeds = sample_inputs(model, seed=0)
    result = amp_convert.validate(model, out, provider="emulate", inputs=feeds, runs=0)
    assert all(o.cosine > 0.9999 for o in result.outputs)
