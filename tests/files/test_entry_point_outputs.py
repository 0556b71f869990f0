"""One output policy for every entry point: the API, the passes and the commands.

Grouped by family: the API's files go through the output registry (never an input, never an
existing file without ``force``); an exit 2 (an error raised) leaves no new file, or says which
it left; every output of a run is committed together, so a late failure (a report name taken
during the run, a full disk on the last report) leaves none of them.
"""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import amp_convert
from amp_convert.auto import auto_convert
from amp_convert.commands.cli import cli
from amp_convert.errors import OutputError, ValidationError
from amp_convert.files import pair_write, safe_write
from amp_convert.validation import validate
from tests.graphs import mlp

pytest.importorskip("onnxruntime")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    ref, cand = tmp_path / "ref.onnx", tmp_path / "cand.onnx"
    onnx.save(mlp(layers=2, width=16), ref)
    amp_convert.convert_file(ref, cand)
    return ref, cand


# ------------------------------------------------------------------ the API's files, registered


@pytest.mark.parametrize("target", ["ref", "cand"])
def test_api_validate_never_replaces_a_model_with_its_inputs(pair, target: str) -> None:
    """validate(ref, cand, save_inputs=ref) replaced the reference with a zip of inputs."""
    ref, cand = pair
    path = ref if target == "ref" else cand
    before = digest(path)
    with pytest.raises(OutputError, match="would overwrite the input"):
        validate(ref, cand, provider="emulate", runs=0, save_inputs=path)
    assert digest(path) == before


def test_api_validate_never_replaces_an_inputs_file(pair, tmp_path: Path) -> None:
    ref, cand = pair
    npz = tmp_path / "x.npz"
    np.savez(npz, x=np.ones((1, 16), np.float32))
    before = digest(npz)
    with pytest.raises(OutputError, match="would overwrite the input"):
        validate(ref, cand, provider="emulate", runs=0, inputs=str(npz), save_inputs=npz)
    assert digest(npz) == before


@pytest.mark.integration
def test_api_save_inputs_replaces_an_existing_file_only_with_force(pair, tmp_path: Path) -> None:
    ref, cand = pair
    old = tmp_path / "old.npz"
    old.write_bytes(b"mine")
    with pytest.raises(OutputError, match="exists"):
        validate(ref, cand, provider="emulate", runs=0, save_inputs=old)
    assert old.read_bytes() == b"mine"
    validate(ref, cand, provider="emulate", runs=0, save_inputs=old, force=True)
    assert set(np.load(old)) == {"x"}


def test_api_auto_convert_never_replaces_the_model_with_its_inputs(pair) -> None:
    ref, _ = pair
    before = digest(ref)
    with pytest.raises(OutputError, match="would overwrite the input"):
        auto_convert(
            str(ref), validation=amp_convert.ValidateOptions(provider="emulate", save_inputs=ref)
        )
    assert digest(ref) == before


@pytest.mark.integration
def test_api_validate_error_after_sampling_leaves_no_inputs_file(pair, tmp_path, monkeypatch):
    """The reference ran (samples drawn), then the candidate could not: no .npz is left."""
    from amp_convert.validation import core

    ref, cand = pair
    real = core.run_once

    def run(runner, feeds, label):
        if label.startswith("candidate"):
            raise ValidationError(f"{label}: failed to run")
        return real(runner, feeds, label)

    monkeypatch.setattr(core, "run_once", run)
    out = tmp_path / "x.npz"
    with pytest.raises(ValidationError, match="failed to run"):
        validate(ref, cand, provider="emulate", runs=0, save_inputs=out)
    assert listing(tmp_path) == ["cand.onnx", "ref.onnx"]


# ------------------------------------------------------------------ exit 2 leaves nothing new


def _empty_output_model() -> onnx.ModelProto:
    """A model whose only output has no element: nothing to compare, --auto refuses."""
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "s", "e"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 0])],
        [
            onnx.numpy_helper.from_array(np.array([0], np.int64), "s"),
            onnx.numpy_helper.from_array(np.array([0], np.int64), "e"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_auto_save_inputs_is_not_written_when_the_search_refuses(tmp_path: Path) -> None:
    """--auto --save-inputs wrote the .npz, then refused the input (exit 2, a file left)."""
    src = tmp_path / "m.onnx"
    onnx.save(_empty_output_model(), src)
    res = CliRunner().invoke(
        cli,
        [
            str(src),
            "--auto",
            "--provider",
            "emulate",
            "-q",
            "--save-inputs",
            str(tmp_path / "x.npz"),
        ],
    )
    assert res.exit_code == 2, res.output
    assert "nothing to compare" in res.output
    assert listing(tmp_path) == ["m.onnx"]


def test_auto_refusing_a_degenerate_reference_says_it_wrote_the_inputs(tmp_path: Path) -> None:
    """The refusal tells the user to start from the generated inputs: they are kept, and the
    one line says where (an exit 2 that leaves a file says so)."""
    from models import input_meaning as im

    src = tmp_path / "det.onnx"
    onnx.save(im.paddle_text_detector(), src)
    npz = tmp_path / "x.npz"
    res = CliRunner().invoke(
        cli, [str(src), "--auto", "--provider", "emulate", "-q", "--save-inputs", str(npz)]
    )
    assert res.exit_code == 2, res.output
    assert f"the generated inputs were written to {npz}" in res.output
    assert listing(tmp_path) == ["det.onnx", "x.npz"]


# ------------------------------------------------------------------ all outputs or none


def test_a_report_name_taken_during_the_run_leaves_no_model(tmp_path: Path, monkeypatch) -> None:
    """The report's name appeared while converting: the model was committed (exit 2 anyway)."""
    src = tmp_path / "m.onnx"
    onnx.save(mlp(layers=2, width=16), src)
    report = tmp_path / "r.json"

    def appear(step: pair_write.Step) -> None:
        if step is pair_write.Step.WRITTEN:
            report.write_text("someone else's")

    monkeypatch.setattr(pair_write, "on_step", appear)
    res = CliRunner().invoke(
        cli, [str(src), "-o", str(tmp_path / "o.onnx"), "--report", str(report), "-q"]
    )
    assert res.exit_code == 2, res.output
    assert "appeared during the run" in res.output
    assert listing(tmp_path) == ["m.onnx", "r.json"]
    assert report.read_text() == "someone else's"


@pytest.mark.integration
def test_a_full_disk_on_the_last_report_leaves_no_report(pair, tmp_path: Path, monkeypatch):
    """validate --report --junit: the JUnit file hit a full disk after the JSON was written."""
    ref, cand = pair
    real = safe_write.StagedFile.__init__

    def full(self, slot, data) -> None:
        if slot.label == "JUnit report":
            raise safe_write.write_error(slot, OSError(errno.ENOSPC, "No space left on device"))
        real(self, slot, data)

    monkeypatch.setattr(safe_write.StagedFile, "__init__", full)
    out = tmp_path / "out"
    out.mkdir()
    res = CliRunner().invoke(
        cli,
        [
            "validate",
            str(ref),
            str(cand),
            "--provider",
            "emulate",
            "--runs",
            "0",
            "--report",
            str(out / "r.json"),
            "--junit",
            str(out / "r.xml"),
            "--save-inputs",
            str(out / "x.npz"),
        ],
    )
    assert res.exit_code == 2, res.output
    assert "No space left on device" in res.output
    assert listing(out) == []


def test_a_model_that_cannot_be_committed_takes_its_reports_back(tmp_path: Path, monkeypatch):
    """convert --validate --report --validation-report --junit: the model's commit fails last;
    the reports already in place are rolled back, a replaced one comes back as it was."""
    src = tmp_path / "m.onnx"
    onnx.save(mlp(layers=2, width=16), src)
    old = tmp_path / "r.json"
    old.write_text('{"old": true}')

    monkeypatch.setattr(safe_write, "commit", _failing_for("o.onnx", safe_write.commit))
    res = CliRunner().invoke(
        cli,
        [
            str(src),
            "-o",
            str(tmp_path / "o.onnx"),
            "--force",
            "--report",
            str(old),
            "--validate",
            "--provider",
            "emulate",
            "--runs",
            "0",
            "--validation-report",
            str(tmp_path / "v.json"),
            "--junit",
            str(tmp_path / "v.xml"),
            "-q",
        ],
    )
    assert res.exit_code == 2, res.output
    assert json.loads(old.read_text()) == {"old": True}
    assert listing(tmp_path) == ["m.onnx", "r.json"]


def _failing_for(name: str, real):
    def commit(slot, tmp) -> None:
        if slot.name == name:
            raise OSError(errno.EIO, "Input/output error", slot.name)
        real(slot, tmp)

    return commit
