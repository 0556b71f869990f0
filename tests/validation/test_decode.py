"""validate --decode-steps: both models rolled out as decoders on their own tokens and KV cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

from models.decoders import decoder_model_merged, decoder_with_past

pytest.importorskip("onnxruntime")

import amp_convert
from amp_convert.commands.validate import validate_command
from amp_convert.errors import ValidationError
from amp_convert.validation import validate
from amp_convert.validation.decode import decoder_io, next_feeds

pytestmark = pytest.mark.integration

BUILDERS = {"with_past": decoder_with_past, "merged": decoder_model_merged}
STRICT = {"min_cosine": 0.999}


class _Converted(dict):
    """Each decoder and its O2 conversion, converted in-process on first use."""

    def __missing__(self, kind: str) -> tuple[onnx.ModelProto, onnx.ModelProto]:
        model = BUILDERS[kind]()
        self[kind] = (model, amp_convert.convert(model, level="O2"))
        return self[kind]


@pytest.fixture(scope="module")
def o2() -> _Converted:
    return _Converted()


def _broken(model: onnx.ModelProto, std: float = 4.0) -> onnx.ModelProto:
    """The FP32 model with a fixed noise vector added to its logits (a wrong LM head)."""
    broken = onnx.ModelProto()
    broken.CopyFrom(model)
    g = broken.graph  # the head (or the merged decoder's If) writes logits_raw now
    for node in g.node:
        node.output[:] = ["logits_raw" if o == "logits" else o for o in node.output]
    vocab = g.output[0].type.tensor_type.shape.dim[-1].dim_value
    noise = np.random.default_rng(3).standard_normal(vocab).astype(np.float32) * std
    g.initializer.append(numpy_helper.from_array(noise, "logits_noise"))
    g.node.append(helper.make_node("Add", ["logits_raw", "logits_noise"], ["logits"]))
    return broken


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_o2_decodes_8_steps_with_the_same_tokens(o2, kind: str) -> None:
    ref, cand = o2[kind]
    report = validate(ref, cand, provider="emulate", decode_steps=8, thresholds=STRICT)
    assert report.decode is not None
    steps = report.decode.steps
    assert [s.step for s in steps] == list(range(1, 9))
    assert report.decode.token_agreement == 1.0 and report.decode.first_divergence is None
    assert all(s.same_token and not s.failed for s in steps)
    assert report.passed, report.summary_line()
    # each step after the first reads one more cached position than the one before
    lengths = [next(o for o in s.outputs if o.name == "present.0.key").shape[2] for s in steps]
    # the 128 positions of wpe less the 8 steps: merged: step 1 without past, 120 tokens;
    # with past: 60 + 60
    first = 120
    assert lengths == list(range(first, first + 8))
    assert all(len(s.outputs) == 5 for s in steps)
    assert all(o.cosine is not None and o.cosine >= 0.999 for s in steps for o in s.outputs)
    d = report.to_dict()["decode"]
    assert len(d["steps"]) == 8 and d["token_agreement"] == 1.0 and d["first_divergence"] is None
    assert d["merged"] is (kind == "merged") and d["kv_pairs"] == 4
    table = report.format_table()
    assert "decode: 8 steps" in table and "same greedy token in 8/8 (100.0%)" in table
    assert "first divergence: none" in table


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_low_io_kv_cache_feeds_back_in_the_candidates_dtype(kind: str) -> None:
    """--low-io KV cache: the candidate's present.* come out FP16 and go back in as FP16."""
    ref = BUILDERS[kind]()
    cand = amp_convert.convert(ref, level="O2", low_io=[r"past_key_values\..*", r"present\..*"])
    kv = [v for v in (*cand.graph.input, *cand.graph.output) if "." in v.name and "key" in v.name]
    assert kv and all(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for v in kv)
    for provider in ("emulate", "cpu"):
        report = validate(ref, cand, provider=provider, decode_steps=8, thresholds=STRICT)
        assert report.decode is not None and report.decode.token_agreement == 1.0
        assert report.passed, report.summary_line()
    assert report.output("present.0.key").candidate_dtype == "float16"  # cpu: FP16 as it ran


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_a_broken_candidate_diverges_and_fails(kind: str) -> None:
    ref = BUILDERS[kind]()
    report = validate(ref, _broken(ref), provider="emulate", decode_steps=8, thresholds=STRICT)
    dec = report.decode
    assert dec is not None and len(dec.steps) == 8
    assert dec.token_agreement < 1.0 and dec.first_divergence is not None
    assert dec.steps[dec.first_divergence - 1].same_token is False
    assert all(s.same_token for s in dec.steps[: dec.first_divergence - 1])
    assert report.failed and "logits" in report.failed_outputs
    assert all(s.failed for s in dec.steps)  # thresholds hold at every step
    assert f"first divergence: step {dec.first_divergence}" in report.format_table()
    assert report.to_dict()["decode"]["steps"][0]["status"] == "fail"


def test_a_step_that_fails_alone_fails_the_report(o2) -> None:
    """Thresholds apply to every step, not only to the single run on the first inputs."""
    ref, cand = o2["with_past"]
    dims = {"sequence_length": 16, "past_sequence_length": 16}
    loose = validate(
        ref, cand, provider="emulate", decode_steps=3, thresholds={"atol": 1.0}, dims=dims
    )
    assert loose.passed
    worst = max(o.max_abs or 0.0 for s in loose.decode.steps for o in s.outputs)  # type: ignore[union-attr]
    single = max(
        o.max_abs or 0.0 for o in validate(ref, cand, provider="emulate", dims=dims).outputs
    )
    assert max(o.max_abs or 0.0 for o in loose.outputs) == max(worst, single)


def test_feeds_follow_each_models_own_state() -> None:
    model = decoder_with_past()
    specs = {
        i.name: (
            "tensor(float)",
            [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim],
        )
        for i in model.graph.input
    }
    io = decoder_io(specs, [o.name for o in model.graph.output])
    assert io.logits == "logits" and not io.merged and io.past_dims == ("past_sequence_length",)
    assert ("past_key_values.1.value", "present.1.value") in io.kv and len(io.kv) == 4
    feeds = {
        "input_ids": np.array([[5, 6, 7]]),
        "attention_mask": np.ones((1, 5), np.int64),
        "position_ids": np.array([[2, 3, 4]]),
        **{p: np.zeros((1, 4, 2, 8), np.float32) for p, _ in io.kv},
    }
    outs = {o: np.full((1, 4, 5, 8), 1.5, np.float16) for _, o in io.kv}
    nxt = next_feeds(io, feeds, outs, np.array([9]))
    assert nxt["input_ids"].tolist() == [[9]] and nxt["input_ids"].dtype == np.int64
    assert nxt["attention_mask"].shape == (1, 6) and nxt["attention_mask"].min() == 1
    assert nxt["position_ids"].tolist() == [[5]]
    assert nxt["past_key_values.0.key"] is outs["present.0.key"]  # its own cache, as it came
    # ORT's GPT-2 naming (past_0 / present_0), and the merged decoder's flag
    gpt2 = decoder_io(
        {
            "input_ids": ("tensor(int64)", ["batch", "seq"]),
            "past_0": ("tensor(float)", [2]),
            "use_cache_branch": ("tensor(bool)", [1]),
        },
        ["logits", "present_0"],
    )
    assert gpt2.kv == (("past_0", "present_0"),) and gpt2.merged and not gpt2.has_mask


def test_decode_steps_on_a_model_without_past_is_refused(tmp_path: Path) -> None:
    from models import validation_models as vm

    ref, cand = vm.multi_io_pair()
    with pytest.raises(ValidationError, match=r"no past_key_values.* input with a matching"):
        validate(ref, cand, provider="emulate", decode_steps=2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValidationError, match="decode steps must be an integer >= 1"):
            validate(ref, cand, provider="emulate", decode_steps=bad)  # type: ignore[arg-type]


def test_cli_exit_codes(tmp_path: Path, o2) -> None:
    from models import validation_models as vm

    runner = CliRunner()
    ref, cand = o2["with_past"]
    paths = {}
    for name, model in (("ref", ref), ("cand", cand), ("broken", _broken(ref))):
        paths[name] = str(tmp_path / f"{name}.onnx")
        onnx.save(model, paths[name])
    report = tmp_path / "r.json"
    args = ["--provider", "emulate", "--min-cosine", "0.999", "-q"]
    res = runner.invoke(
        validate_command,
        [paths["ref"], paths["cand"], "--decode-steps", "8", *args, "--report", str(report)],
    )
    assert res.exit_code == 0, res.output
    d = json.loads(report.read_text())
    assert len(d["decode"]["steps"]) == 8 and d["decode"]["token_agreement"] == 1.0
    res = runner.invoke(
        validate_command, [paths["ref"], paths["broken"], "--decode-steps", "4", *args]
    )
    assert res.exit_code == 1, res.output
    plain_ref, plain_cand = vm.multi_io_pair()
    for name, model in (("plain", plain_ref), ("plain_c", plain_cand)):
        paths[name] = str(tmp_path / f"{name}.onnx")
        onnx.save(model, paths[name])
    res = runner.invoke(
        validate_command, [paths["plain"], paths["plain_c"], "--decode-steps", "2", *args]
    )
    assert res.exit_code == 2
    errors = [line for line in res.output.splitlines() if line.startswith("amp-convert: error:")]
    assert len(errors) == 1 and "no past_key_values.* input with a matching present.*" in errors[0]
    assert "Traceback" not in res.output
    res = runner.invoke(validate_command, [paths["ref"], paths["cand"], "--decode-steps", "0"])
    assert res.exit_code == 2 and "0 is not in the range 1<=x<=10000" in res.output
