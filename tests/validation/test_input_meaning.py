"""Random inputs that mean what the model's inputs mean: images sized as images,
exporters' batch names, decoders fed consistently, sample rates at their real values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner

from models import input_meaning as im
from models.decoders import decoder_with_past
from models.encdec_merged import seq2seq_decoder_merged

pytest.importorskip("onnxruntime")

import onnxruntime as ort

import amp_convert
from amp_convert.commands.validate import validate_command
from amp_convert.cost.shapes import assumed_dims
from amp_convert.errors import ValidationError
from amp_convert.validation import validate
from amp_convert.validation.decode import decoder_io, next_feeds
from amp_convert.validation.input_dims import IMAGE_LADDER, SEQUENCE_LADDER, DimPlan
from amp_convert.validation.inputs import InputSpec

pytestmark = pytest.mark.integration

STRICT = {"min_cosine": 0.999}


def _specs(model: onnx.ModelProto) -> list[InputSpec]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [InputSpec(i.name, i.type, list(i.shape)) for i in sess.get_inputs()]


def _pair(model: onnx.ModelProto) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    return model, amp_convert.convert(model, level="O2")


def _save(tmp_path: Path, model: onnx.ModelProto, name: str) -> tuple[str, str]:
    ref, cand = _pair(model)
    paths = (tmp_path / f"{name}.onnx", tmp_path / f"{name}.fp16.onnx")
    onnx.save(ref, paths[0])
    onnx.save(cand, paths[1])
    return str(paths[0]), str(paths[1])


def test_unnamed_image_dims_are_image_sized_and_the_cost_estimate_agrees() -> None:
    """A CNN with [?, 3, ?, ?] input ran on a 1x1 image; now 224x224, the estimate's size too."""
    model = im.unnamed_hw_cnn()
    report = validate(*_pair(model), provider="emulate", runs=0, thresholds=STRICT)
    assert report.input_shapes == {"x": [1, 3, 224, 224]}
    assert not any("default dims" in w for w in report.warnings)  # ran on the first attempt
    assert report.passed
    assert (
        assumed_dims(ir.from_proto(model), {})
        == report.dims
        == {
            "x[0]": 1,
            "x[2]": 224,
            "x[3]": 224,
        }
    )


def test_paddle_dynamic_dimension_names_are_a_batch_and_an_image() -> None:
    model = im.paddle_text_detector()
    plan = DimPlan.of(_specs(model))
    p2o = "p2o.DynamicDimension.{}".format
    assert plan.defaults == {p2o(0): 1, p2o(1): 224, p2o(2): 224}
    assert plan.ladders[p2o(0)] == () and plan.ladders[p2o(1)] == IMAGE_LADDER  # never batch 64
    assert assumed_dims(ir.from_proto(model), {}) == plan.defaults  # one set of defaults


def test_num_channels_is_three_and_a_kv_cache_is_never_an_image() -> None:
    specs = [
        InputSpec("pixel_values", "tensor(float)", ["batch_size", "num_channels", "height", "w"]),
        InputSpec("past_key_values.0.key", "tensor(float)", ["batch_size", 4, "past", 8]),
    ]
    plan = DimPlan.of(specs)
    assert plan.defaults["num_channels"] == 3 and plan.ladders["num_channels"] == ()
    assert plan.defaults["height"] == plan.defaults["w"] == 224
    # four heads look like four channels: still a sequence, grown as one
    assert plan.defaults["past"] == 128 and plan.ladders["past"] == SEQUENCE_LADDER


def test_merged_decoder_whose_mask_axis_is_named_sequence_length_validates(tmp_path) -> None:
    """optimum's merged decoder: the mask spans past + current whatever its axis is named."""
    ref, cand = _save(tmp_path, im.merged_decoder_misnamed_mask(), "merged")
    res = CliRunner().invoke(
        validate_command, [ref, cand, "--provider", "emulate", "--min-cosine", "0.999"]
    )
    assert res.exit_code == 0, res.output
    assert "result: PASS" in res.output
    # past 64 + current 64: the mask spans both, and both fit the 128 positions of wpe
    assert "attention_mask[1, 128]" in res.output
    assert "past_key_values.0.key[1, 4, 64, 8]" in res.output  # never grown as an image


def test_genai_decoder_with_kv_cache_dim_validates_without_dim(tmp_path) -> None:
    ref, cand = _save(tmp_path, im.genai_kv_cache_dim_decoder(), "genai")
    res = CliRunner().invoke(
        validate_command, [ref, cand, "--provider", "emulate", "--min-cosine", "0.999"]
    )
    assert res.exit_code == 0, res.output
    # past (kv_cache_dim) + current within the 128 rows of the rotary cache, the mask spans both
    assert "kv_cache_dim=64" in res.output and "attention_mask[1, 128]" in res.output


def test_head_size_comes_from_the_models_present_outputs() -> None:
    model = decoder_with_past()
    for value in model.graph.input:
        if value.name.startswith("past_key_values"):
            value.type.tensor_type.shape.dim[3].dim_param = "head_size"
    outputs = {"present.0.key": ["batch_size", 4, "total", 8]}
    plan = DimPlan.of(_specs(model), outputs=outputs)
    assert plan.defaults["head_size"] == 8 and plan.ladders["head_size"] == ()


def _roll_out(model: onnx.ModelProto, feeds: dict, steps: int) -> list[int]:
    """A generation loop done by hand: the cross-attention cache computed once and kept."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    feeds = {**feeds, "use_cache_branch": np.array([False])}
    tokens = []
    for _ in range(steps):
        out = dict(zip(names, sess.run(None, feeds), strict=True))
        tok = int(np.argmax(out["logits"][0, -1]))
        tokens.append(tok)
        feeds = dict(feeds)
        feeds["input_ids"] = np.array([[tok]], np.int64)
        for n in names[1:]:
            if "encoder" in n and feeds["use_cache_branch"][0]:
                continue
            feeds[n.replace("present", "past_key_values")] = out[n]
        feeds["use_cache_branch"] = np.array([True])
    return tokens


def test_encoder_decoder_merged_decoder_decodes_8_steps(tmp_path) -> None:
    """Whisper/T5 merged decoders return an empty cross-attention placeholder on the cached
    branch: it is never fed back, and the encoder states span the cross cache's length."""
    model = seq2seq_decoder_merged()
    ref, cand = _save(tmp_path, model, "s2s")
    report = validate(ref, cand, provider="emulate", decode_steps=8, thresholds=STRICT)
    assert report.passed and report.decode is not None
    assert report.decode.token_agreement == 1.0
    assert report.input_shapes["encoder_hidden_states"][1] == 128
    assert report.input_shapes["past_key_values.0.encoder.key"][2] == 128
    # the tokens are those of a generation loop that keeps the cross-attention cache
    from amp_convert.validation.inputs import random_inputs

    specs = _specs(model)
    first = random_inputs(specs, model, dims={"past_decoder_sequence_length": 0})
    expected = _roll_out(model, first.arrays, 8)
    assert [s.reference_tokens[0] for s in report.decode.steps] == expected
    args = [ref, cand, "--provider", "emulate", "--decode-steps", "8", "--min-cosine", "0.999"]
    res = CliRunner().invoke(validate_command, args)
    assert res.exit_code == 0, res.output


def test_an_empty_present_never_replaces_a_cache() -> None:
    model = seq2seq_decoder_merged()
    specs = _specs(model)
    io = decoder_io(
        {s.name: (s.type_str, s.shape) for s in specs}, [o.name for o in model.graph.output]
    )
    cache = np.ones((1, 4, 5, 8), np.float32)
    feeds = {"input_ids": np.zeros((1, 1), np.int64), "use_cache_branch": np.array([True])}
    feeds.update(
        {
            f"past_key_values.0.{kind}.{kv}": cache
            for kind in ("encoder", "decoder")
            for kv in ("key", "value")
        }
    )
    empty = np.zeros((1, 4, 0, 8), np.float32)
    grown = np.ones((1, 4, 6, 8), np.float32)
    outputs = {
        "present.0.encoder.key": empty,
        "present.0.encoder.value": empty,
        "present.0.decoder.key": grown,
        "present.0.decoder.value": grown,
    }
    nxt = next_feeds(io, feeds, outputs, np.array([3]))
    assert nxt["past_key_values.0.encoder.key"] is cache
    assert nxt["past_key_values.0.decoder.key"] is grown


@pytest.mark.parametrize(("rate", "samples"), [(16000, 1024), (8000, 256)])
def test_a_sample_rate_input_is_fed_a_real_rate(rate: int, samples: int) -> None:
    report = validate(*_pair(im.vad_model(rate)), provider="emulate", runs=0, thresholds=STRICT)
    assert report.passed and report.input_shapes["input"] == [1, samples]
    assert any(f"'sr' set to {rate}" in w for w in report.warnings)


def test_a_sample_rate_no_convention_fits_is_named_in_the_error() -> None:
    with pytest.raises(ValidationError) as err:
        validate(*_pair(im.vad_model(11025)), provider="emulate", runs=0)
    assert "sample-rate input 'sr' tried at 16000, 8000, 22050, 44100, 48000" in str(err.value)
    assert "--inputs FILE.npz" in str(err.value)


def test_a_recognizer_needing_height_48_validates_on_default_inputs() -> None:
    """H dynamic in the file, but the last convolution collapses only a 33-48 pixel line to 1:
    224 and 640 are refused by shape inference (no ORT run), the text-line height 48 runs."""
    report = validate(*_pair(im.text_recognizer()), provider="emulate", runs=0, thresholds=STRICT)
    assert report.passed, report.format_table()
    assert report.input_shapes == {"x": [1, 3, 48, 320]}
    note = next(w for w in report.warnings if "default dims" in w)
    assert "Squeeze" in note and "x[2]=48, x[3]=320" in note


def test_a_vad_state_inputs_batch_follows_the_audio_batch() -> None:
    """silero-style ``state`` [2, ?, 128]: its unnamed axis is the LSTM's batch, not a length."""
    model = im.vad_state_model()
    report = validate(*_pair(model), provider="emulate", runs=0, thresholds=STRICT)
    assert report.passed, report.format_table()
    assert report.input_shapes["state"] == [2, 1, 128]
    assert report.input_shapes["input"][0] == 1
    plan = DimPlan.of(_specs(model), {"input[0]": 3})
    assert plan.shape(_specs(model)[1], {"input[0]": 3}) == [2, 3, 128]
    assert "state[1]" not in plan.keys  # computed from the batch, no dim of its own


def test_a_packed_gqa_decoder_gets_its_head_size_from_the_model(tmp_path) -> None:
    """ORT GenAI's packed layout: past [batch, 2, past, kv_cache_dim], head 32 (not 128) only in
    GroupQueryAttention's num_heads/kv_num_heads and the qkv_proj width; no --dim needed."""
    ref, cand = _save(tmp_path, im.genai_packed_decoder(head_dim=32), "packed")
    res = CliRunner().invoke(
        validate_command, [ref, cand, "--provider", "emulate", "--min-cosine", "0.999"]
    )
    assert res.exit_code == 0, res.output
    assert "kv_cache_dim=32" in res.output
    assert "cannot run on the default dims" not in res.output  # right the first time


def test_decode_steps_leave_room_in_a_decoders_positions(tmp_path) -> None:
    """24 rotary positions and 8 steps: the start (past + current) leaves 8 positions free."""
    ref, cand = _save(tmp_path, im.genai_packed_decoder(max_positions=24), "short")
    args = [ref, cand, "--provider", "emulate", "--min-cosine", "0.99", "--decode-steps", "8"]
    res = CliRunner().invoke(validate_command, args)
    assert res.exit_code == 0, res.output
    assert "decode: 8 steps" in res.output
    assert "attention_mask[1, 16]" in res.output  # 8 + 8, then 8 steps: 24


def test_a_roll_out_past_the_positions_stops_there_and_says_so(tmp_path) -> None:
    """Dims the user set leave no room: the steps the model can run are judged, the report says
    where and why it stopped instead of failing the whole validation."""
    ref, cand = _save(tmp_path, im.genai_packed_decoder(max_positions=24), "short")
    report = validate(
        ref,
        cand,
        provider="emulate",
        runs=0,
        thresholds=STRICT,
        decode_steps=8,
        dims={"sequence_length": 10, "past_sequence_length": 10},
    )
    assert report.decode is not None
    ran = len(report.decode.steps)
    assert 1 <= ran < 8
    assert report.decode.to_dict()["requested"] == 8
    assert any(f"stopped after step {ran} of 8" in n for n in report.decode.notes)
    assert f"decode: {ran} steps of 8 asked" in report.format_table()
