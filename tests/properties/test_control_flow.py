"""If/Loop/Scan boundaries: merged decoders convert; outputs and carried state stay low across."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

import amp_convert
from models.blocks import loop_rnn, scan_rnn
from models.decoders import decoder_model_merged
from models.inputs import sample_inputs
from tests.helpers import FLOAT, FLOAT16, all_nodes, casts, io_types, session

pytest.importorskip("onnxruntime")
from amp_convert.testing import assert_converted_close

pytestmark = pytest.mark.integration

LEVELS = ["O1", "O2", "O3"]
KV = [f"{p}.{i}.{kv}" for p in ("past_key_values",) for i in range(2) for kv in ("key", "value")]
OUTPUTS = ["logits"] + [f"present.{i}.{kv}" for i in range(2) for kv in ("key", "value")]


def _branches(model: onnx.ModelProto) -> dict[str, onnx.GraphProto]:
    (node,) = [n for n in model.graph.node if n.op_type == "If"]
    return {a.name: a.g for a in node.attribute}


def _cast_targets(graph: onnx.GraphProto) -> Counter[int]:
    return Counter(n.attribute[0].i for n in graph.node if n.op_type == "Cast")


def _feeds(model: onnx.ModelProto, use_cache: bool) -> dict[str, np.ndarray]:
    feeds = sample_inputs(model, seed=0)
    feeds["use_cache_branch"] = np.array([use_cache])
    return feeds


def _round_trips(model: onnx.ModelProto) -> list[str]:
    """If outputs cast to FP32 inside a branch and back to a low type after the If."""
    (node,) = [n for n in model.graph.node if n.op_type == "If"]
    widened = set()
    for branch in _branches(model).values():
        producers = {o: n for n in branch.node for o in n.output}
        for k, out in enumerate(branch.output):
            cast = producers.get(out.name)
            if cast is not None and cast.op_type == "Cast" and cast.attribute[0].i == FLOAT:
                widened.add(node.output[k])
    narrowed = {
        n.input[0] for n in model.graph.node if n.op_type == "Cast" and n.attribute[0].i != FLOAT
    }
    return sorted(widened & narrowed)


@pytest.mark.parametrize("level", LEVELS)
def test_merged_decoder_converts_with_no_cast_pair_at_the_if(level: str) -> None:
    original = decoder_model_merged()
    out, report = amp_convert.convert(original, level=level, return_report=True)
    onnx.checker.check_model(out, full_check=True)
    assert _round_trips(out) == []
    branches = _branches(out)
    # logits come out of an ALLOW MatMul in both branches: handed on low, one Cast after the If
    assert all(b.output[0].type.tensor_type.elem_type == FLOAT16 for b in branches.values())
    if level == "O3":  # O1/O2: with an FP32 KV interface, FP32 Concats in the with-past branch
        # move fewer bytes (the cut's choice: past + 2 * seq elements cast instead of 2 * past +
        # seq); the KV cache goes low end to end with --low-io (test_low_io)
        for name, branch in branches.items():
            # every present.* too: no Cast back to FP32 inside a branch
            assert [o.type.tensor_type.elem_type for o in branch.output] == [FLOAT16] * 5, name
            assert _cast_targets(branch)[FLOAT] == 0, name
        # keep_io_types: one Cast per FP32 interface value, outside the If (4 past in, 5 out)
        assert _cast_targets(out.graph) == {FLOAT16: 4, FLOAT: 5}
        assert report.casts_after - report.casts_before == 9
    assert io_types(out)[1] == [FLOAT] * 5
    assert_converted_close(original, out, provider="emulate")  # the validator's default inputs
    for use_cache in (True, False):
        feeds = _feeds(original, use_cache)
        assert_converted_close(original, out, provider="emulate", inputs=feeds)
        assert_converted_close(original, out, provider="cpu", inputs=feeds)


def test_merged_decoder_keeps_branch_local_names_apart() -> None:
    out = amp_convert.convert(decoder_model_merged(), level="O2")
    produced = [o for n in all_nodes(out.graph) for o in n.output if o]
    assert len(produced) == len(set(produced)), "every value named once, model-wide"
    then, other = (_branches(out)[k] for k in ("then_branch", "else_branch"))
    assert produced.count("t") == 1  # one branch keeps it, the other's is renamed
    ranges = [n.output[0] for n in then.node if n.op_type == "Range"]
    tanhs = [n.output[0] for n in other.node if n.op_type == "Tanh"]
    assert {ranges[0], tanhs[0]} == {"t", "t_1"}  # int64 in one branch, float in the other
    # the main graph keeps its names (the user's interface); branch outputs are renamed
    assert [o.name for o in out.graph.output] == OUTPUTS
    assert {o.name for o in other.output}.isdisjoint(OUTPUTS)


@pytest.mark.parametrize("level", LEVELS)
def test_merged_decoder_no_keep_io_types_adds_no_cast(level: str) -> None:
    original = decoder_model_merged()
    out, report = amp_convert.convert(
        original, level=level, keep_io_types=False, return_report=True
    )
    assert report.casts_after == report.casts_before == casts(original) == 2  # the mask's
    ins, outs = io_types(out)
    assert outs == [FLOAT16] * 5
    assert [t for i, t in zip(original.graph.input, ins, strict=True) if i.name in KV] == [
        FLOAT16
    ] * 4
    session(out)  # ORT loads it
    for use_cache in (True, False):
        feeds = _feeds(original, use_cache)
        ref = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
        assert_converted_close(original, out, provider="emulate", inputs=feeds)
        session(out).run(None, ref)  # FP16 KV cache in


@pytest.mark.parametrize("builder", [loop_rnn, scan_rnn], ids=["loop_rnn", "scan_rnn"])
@pytest.mark.parametrize("level", ["O2", "O3"])
def test_rnn_carried_state_stays_low(builder, level: str) -> None:
    original = builder()
    out, report = amp_convert.convert(original, level=level, return_report=True)
    traffic = report.traffic
    # was 1.88x (O2) / 2.8x (O3) of the all-low estimate with the state FP32 at the boundary
    assert traffic["result"] <= traffic["all_low"]
    (node,) = [n for n in out.graph.node if n.op_type in ("Loop", "Scan")]
    body = node.attribute[0].g
    state = 2 if node.op_type == "Loop" else 0
    assert body.input[state].type.tensor_type.elem_type == FLOAT16
    assert body.output[state - 1 if state else 0].type.tensor_type.elem_type == FLOAT16
    assert _cast_targets(body)[FLOAT16] == 0  # no cast down of the state per iteration
    assert casts(out) == 3
    assert_converted_close(original, out, provider="emulate")
    assert_converted_close(original, out, provider="cpu")


def test_bench_prints_casts_and_traffic(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import control_flow

    assert control_flow.main(["--levels", "O2"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    rows = {
        cells[0]: cells[1:]
        for cells in ([c.strip() for c in r.strip("|").split("|")] for r in lines)
    }
    for rnn in ("loop_rnn", "scan_rnn"):  # carried state low: no Cast in the body, all-low traffic
        assert rows[rnn][:3] == ["O2", "0 -> 3", "0"]
        assert float(rows[rnn][4].rstrip("x")) <= 1.01
    assert rows["decoder_with_past --low-io KV"][:3] == ["O2", "1 -> 2", "0"]
    assert rows["decoder_model_merged --low-io KV"][:3] == ["O2", "2 -> 3", "2"]  # the mask's
