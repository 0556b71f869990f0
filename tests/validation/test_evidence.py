"""Evidence a user can trust: weak references flagged, --auto refusing to search
against one, the search keeping its best candidate, --save-inputs, and on FAIL the smallest
thresholds that would pass."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from models import input_meaning as im
from models import overflow as ov

pytest.importorskip("onnxruntime")


import amp_convert
from amp_convert.auto import auto_convert
from amp_convert.commands.cli import cli
from amp_convert.commands.validate import validate_command
from amp_convert.errors import ValidationError
from amp_convert.pages.trace import validation_page
from amp_convert.validation import validate
from amp_convert.validation.evidence import weak_outputs
from tests.helpers import SessionCounter, one_line_error

pytestmark = pytest.mark.integration

MAP = "sigmoid_0.tmp_0"


@pytest.fixture(scope="module")
def detector(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("det")
    model = im.paddle_text_detector()
    paths = {"ref": tmp / "det.onnx", "cand": tmp / "det.fp16.onnx", "text": tmp / "text.npz"}
    onnx.save(model, paths["ref"])
    onnx.save(amp_convert.convert(model, level="O2"), paths["cand"])
    np.savez(paths["text"], x=im.text_like_image())
    return paths


def test_weak_outputs_near_zero_and_nearly_constant() -> None:
    refs = [
        {
            "map": np.full((4, 4), 2e-4, np.float32) + np.eye(4, dtype=np.float32) * 1e-4,
            "flat": np.full((8,), 0.5, np.float32) + np.arange(8, dtype=np.float32) * 1e-8,
            "fine": np.linspace(-1, 1, 9, dtype=np.float32),
            "scalar": np.array([0.0], np.float32),
            "ids": np.zeros((3,), np.int64),
        }
    ]
    weak = weak_outputs(refs)
    assert weak["map"] == "near zero (max |value| 0.0003)"
    assert weak["flat"].startswith("nearly constant (0.5 to 0.5")
    assert set(weak) == {"map", "flat"}  # a scalar and integers are never called weak


def test_validate_flags_a_near_zero_reference_and_random_inputs(detector, tmp_path) -> None:
    ref, cand = str(detector["ref"]), str(detector["cand"])
    args = [ref, cand, "--provider", "emulate", "--min-cosine", "0.99"]
    res = CliRunner().invoke(validate_command, [*args, "--report", str(tmp_path / "r.json")])
    result = [ln for ln in res.output.splitlines() if ln.startswith("result:")][-1]
    assert result.endswith(f"; weak evidence: random inputs, reference '{MAP}' near zero")
    assert f"reference output '{MAP}' is near zero (max |value| 0.0006" in res.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["weak_evidence"] == ["random inputs", f"reference '{MAP}' near zero"]
    # on a text-like page the same model gives evidence worth the name
    real = validate(
        ref,
        cand,
        provider="emulate",
        inputs=str(detector["text"]),
        thresholds={"min_cosine": 0.999},
    )
    assert real.weak_evidence == [] and "weak evidence" not in real.result_line()
    assert real.passed


def test_the_validate_page_flags_weak_evidence(detector) -> None:
    page = validation_page(
        detector["ref"], detector["cand"], provider="emulate", thresholds={"min_cosine": 0.99}
    )
    assert any(f"reference output '{MAP}' is near zero" in w for w in page.warnings)
    assert any("the inputs are random" in w for w in page.warnings)


def test_auto_refuses_a_degenerate_reference_in_few_sessions(detector, monkeypatch) -> None:
    """The DBNet-on-noise case: no search against a map that never leaves 1e-3 (exit 2)."""
    counter = SessionCounter(monkeypatch)
    with pytest.raises(ValidationError) as err:
        auto_convert(str(detector["ref"]), provider="emulate")
    assert counter.count <= 4
    message = str(err.value)
    assert f"the reference output '{MAP}' is near zero" in message and "--inputs" in message
    res = CliRunner().invoke(
        cli,
        [
            str(detector["ref"]),
            "--auto",
            "--provider",
            "emulate",
            "-q",
            "-o",
            str(detector["ref"].with_name("out.onnx")),
        ],
    )
    one_line_error(res, MAP, "near zero", "--inputs FILE.npz")
    assert not detector["ref"].with_name("out.onnx").exists()


def test_auto_on_real_inputs_meets_the_thresholds(detector, tmp_path) -> None:
    out = tmp_path / "det.auto.onnx"
    res = CliRunner().invoke(
        cli,
        [
            str(detector["ref"]),
            "--auto",
            "--provider",
            "emulate",
            "--inputs",
            str(detector["text"]),
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "thresholds met" in res.output and out.exists()
    report = validate(
        detector["ref"],
        out,
        provider="emulate",
        inputs=str(detector["text"]),
        thresholds={"min_cosine": 0.999},
    )
    assert report.passed


def test_auto_stops_when_a_round_does_not_improve_and_keeps_the_best(monkeypatch) -> None:
    """Localisation that keeps blaming a node whose pin does not help (the DBNet rounds): the
    search stops at the first round that does not improve, with the best candidate."""
    import amp_convert.auto.search as search
    from amp_convert.auto.localise import Blame

    def unhelpful(*args, **kwargs):
        return [Blame("fc1/Relu", 0.1, 0.1, 0.0, "isolated")], {}

    monkeypatch.setattr(search, "localise", unhelpful)
    model, _ = ov.mlp_ok()
    _, report = auto_convert(model, inputs=ov.calibration(model), atol=0.0, rtol=0.0)
    assert not report.passed and report.rounds <= 3
    assert any("did not improve the worst output" in w for w in report.warnings)
    worst = [min(o["cosine"] for o in h["outputs"].values()) for h in report.history]
    assert min(o.cosine for o in report.outputs if o.cosine is not None) == max(worst)
    steps = [w for w in report.warnings if w.startswith("next step")]
    assert any("--exclude-nodes" in w for w in steps), report.warnings
    assert any(f"--min-cosine {report.outputs[0].name}:" in w for w in steps)


def test_validate_save_inputs_is_reusable_with_inputs(tmp_path) -> None:
    ref, cand = ov.mlp_ok()[0], None
    cand = amp_convert.convert(ref)
    paths = [tmp_path / "m.onnx", tmp_path / "c.onnx"]
    onnx.save(ref, paths[0])
    onnx.save(cand, paths[1])
    saved = tmp_path / "inputs.npz"
    args = [str(paths[0]), str(paths[1]), "--provider", "emulate", "--min-cosine", "0.99"]
    res = CliRunner().invoke(validate_command, [*args, "--save-inputs", str(saved)])
    assert res.exit_code == 0, res.output
    with np.load(saved) as npz:
        assert set(npz.files) == {i.name for i in ref.graph.input}
    first = validate(paths[0], paths[1], provider="emulate")
    again = validate(paths[0], paths[1], provider="emulate", inputs=str(saved))
    assert again.inputs_source == f"npz:{saved}"
    assert [o.max_abs for o in again.outputs] == [o.max_abs for o in first.outputs]
    # an existing file is an output like any other: refused without --force
    res = CliRunner().invoke(validate_command, [*args, "--save-inputs", str(saved)])
    assert res.exit_code == 2 and "exists" in res.output


def test_auto_save_inputs(tmp_path) -> None:
    model, _ = ov.mlp_ok()
    onnx.save(model, tmp_path / "m.onnx")
    saved = tmp_path / "calib.npz"
    res = CliRunner().invoke(
        cli,
        [str(tmp_path / "m.onnx"), "--auto", "--provider", "emulate", "--save-inputs", str(saved)],
    )
    assert res.exit_code == 0, res.output
    with np.load(saved) as npz:
        assert set(npz.files) == {i.name for i in model.graph.input}
    # it goes with --auto only
    res = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), "--save-inputs", str(saved)])
    assert res.exit_code == 2


def test_fail_prints_the_smallest_thresholds_that_would_pass(tmp_path) -> None:
    ref = ov.mlp_ok()[0]
    cand = amp_convert.convert(ref)
    strict = {"atol": 1e-9, "min_cosine": 0.99999999}
    report = validate(ref, cand, provider="emulate", thresholds=strict)
    assert report.failed
    (line,) = [w for w in report.warnings if w.startswith("smallest thresholds")]
    name = report.outputs[0].name
    atol = float(line.split(f"--atol {name}:")[1].split(",")[0])
    cosine = float(line.split(f"--min-cosine {name}:")[1].split(",")[0])
    assert atol >= report.outputs[0].max_abs  # rtol 0: the largest error
    assert cosine <= report.outputs[0].cosine
    per_output = {name: {"atol": atol, "min_cosine": cosine}}
    loose = validate(ref, cand, provider="emulate", thresholds={"per_output": per_output})
    assert loose.passed, loose.summary_line()


def _noisy(model: onnx.ModelProto, std: float) -> onnx.ModelProto:
    """``model`` with a fixed noise vector added to its output: a conversion gone wrong."""
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    name = g.output[0].name
    cols = g.output[0].type.tensor_type.shape.dim[-1].dim_value
    for node in g.node:
        node.output[:] = [f"{name}_raw" if o == name else o for o in node.output]
    noise = np.random.default_rng(5).standard_normal(cols).astype(np.float32) * std
    g.initializer.append(numpy_helper.from_array(noise, "noise"))
    g.node.append(helper.make_node("Add", [f"{name}_raw", "noise"], [name], "noise/Add"))
    return out


def test_a_broken_model_gets_no_smallest_thresholds_advice() -> None:
    """Cosine far below any bar a working conversion meets: the tool says the model is broken,
    never which threshold would let it through."""
    ref = ov.mlp_ok()[0]
    report = validate(ref, _noisy(ref, 50.0), provider="emulate", thresholds={"min_cosine": 0.999})
    assert report.failed
    assert not any(w.startswith("smallest thresholds") for w in report.warnings)
    name = report.outputs[0].name
    (line,) = [w for w in report.warnings if "far from any threshold" in w]
    assert f"{name!r} is far from any threshold (cosine " in line
    assert "broken" in line and "--auto" in line and "--min-cosine" not in line
    assert report.broken == [name] and report.to_dict()["broken"] == [name]


def test_a_fail_near_the_bar_still_gets_the_smallest_thresholds() -> None:
    ref = ov.mlp_ok()[0]
    report = validate(ref, _noisy(ref, 0.02), provider="emulate", thresholds={"min_cosine": 1.0})
    assert report.failed and report.outputs[0].cosine >= 0.99
    assert any(w.startswith("smallest thresholds") for w in report.warnings)
    assert report.broken == []


def test_a_saved_generated_npz_keeps_the_weak_evidence_label(tmp_path) -> None:
    """--save-inputs of generated inputs, fed back with --inputs: still random, and said so."""
    ref = ov.mlp_ok()[0]
    cand = amp_convert.convert(ref)
    saved = tmp_path / "gen.npz"
    first = validate(ref, cand, provider="emulate", save_inputs=saved, thresholds={"atol": 1})
    assert "random inputs" in first.weak_evidence
    again = validate(ref, cand, provider="emulate", inputs=str(saved), thresholds={"atol": 1})
    (flag,) = again.weak_evidence
    assert flag.startswith("random inputs, generated by amp-convert (seed 0, dims batch=1)")
    assert "weak evidence: random inputs, generated by amp-convert" in again.result_line()
    # the arrays are untouched: numpy reads them as before, and data re-saved is the user's
    with np.load(saved) as npz:
        arrays = {k: npz[k] for k in npz.files}
    assert set(arrays) == {"x"}
    np.savez(tmp_path / "mine.npz", **arrays)
    mine = validate(
        ref, cand, provider="emulate", inputs=str(tmp_path / "mine.npz"), thresholds={"atol": 1}
    )
    assert mine.weak_evidence == []


def test_the_weak_evidence_line_states_the_scale_and_names_inputs_it_may_miss() -> None:
    """Random floats are N(0, 1): an audio front end fed raw int16-scale samples, or a model
    that expects 0-255 pixels, sees other values; the line names such inputs and the way out."""
    audio = validate(
        *(lambda m: (m, amp_convert.convert(m)))(im.vad_model()), provider="emulate", runs=0
    )
    (line,) = [w for w in audio.warnings if w.startswith("weak evidence: the inputs are random")]
    assert "assumed scale: floats drawn from N(0, 1)" in line
    assert "'input' may be audio samples" in line and "32768" in line
    assert "--inputs FILE.npz" in line and "--auto" in line
    image = validate(
        *(lambda m: (m, amp_convert.convert(m)))(im.unnamed_hw_cnn()), provider="emulate", runs=0
    )
    (line,) = [w for w in image.warnings if w.startswith("weak evidence: the inputs are random")]
    assert "'x' may be pixels" in line and "0-255" in line
