"""ORT plumbing: temporary folders are cleaned through the public API, one I/O-binding helper."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from models import validation_models as vm

pytest.importorskip("onnxruntime")

from amp_convert.errors import ValidationError
from amp_convert.validation import runtime, validate
from amp_convert.validation.runtime import (
    bind_feeds,
    load_source,
    make_session,
    run_once,
    time_runs,
)


@pytest.fixture
def private_tmp(monkeypatch, tmp_path: Path) -> Path:
    """Models count as over 2 GiB, and temporary folders go where the test can see them."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(runtime, "_PROTO_LIMIT", 0)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_model_source_close_deletes_its_temporary_folder(private_tmp: Path) -> None:
    ref, _ = vm.mlp_pair(TensorProto.FLOAT16)
    with load_source(ref, "reference") as src:
        assert isinstance(src.ort_input, str) and Path(src.ort_input).is_file()
        runner = make_session(src, "reference", device="cpu", disable_optimizations=False)
        out = run_once(runner, {"x": np.ones((2, 16), np.float32)})
        assert out["y"].shape == (2, 4)
        runner.close()
        assert runner.session is None
    assert list(private_tmp.iterdir()) == []
    src.close()  # idempotent


@pytest.mark.integration
@pytest.mark.parametrize("provider", ["emulate", "cpu"])
def test_validate_leaves_no_temporary_folder(private_tmp: Path, provider: str) -> None:
    ref, cand = vm.mlp_pair(TensorProto.FLOAT16)
    report = validate(ref, cand, provider=provider, runs=1, warmup=0)
    assert report.output("y").max_abs > 0
    assert list(private_tmp.iterdir()) == []
    # also when validation stops with an error after the sessions were opened
    with pytest.raises(ValidationError, match="expected shape"):
        validate(ref, cand, provider=provider, inputs={"x": np.ones((2, 3), np.float32)})
    assert list(private_tmp.iterdir()) == []


def test_run_once_and_time_runs_share_bind_feeds(monkeypatch) -> None:
    ref, _ = vm.mlp_pair(TensorProto.FLOAT16)
    src = load_source(ref, "reference")
    runner = make_session(src, "reference", device="cpu", disable_optimizations=False)
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    want = runner.session.run(None, {"x": x})[0]
    call, binding = bind_feeds(runner, {"x": x}, outputs_on="cpu")
    assert binding is None  # on CPU the call returns the outputs itself
    (ov,) = call()
    np.testing.assert_array_equal(ov.numpy(), want)
    calls: list[str] = []
    real = runtime.bind_feeds

    def spy(r, feeds, *, outputs_on, **kw):
        calls.append(outputs_on)
        return real(r, feeds, outputs_on=outputs_on, **kw)

    monkeypatch.setattr(runtime, "bind_feeds", spy)
    np.testing.assert_array_equal(run_once(runner, {"x": x})["y"], want)
    assert len(time_runs(runner, {"x": x}, runs=3, warmup=1)) == 3
    assert calls == ["cpu", "cuda"]  # timing keeps outputs on the device (ignored on CPU)
