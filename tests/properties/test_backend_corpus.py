"""Every model shipped in the onnx wheel's backend test data, converted at O1/O2/O3 to FP16.

Each result must pass the full ONNX checker, load and run in ONNX Runtime CPU, and match the
expected outputs stored next to the model. Tolerance: FP16 keeps 11 significant bits (unit
roundoff 4.9e-4); weights and boundary activations are rounded once each, and errors add up over
the depth of these nets (up to ~20 layers), so we allow 1% of each output's scale (max |ref|) —
a broken conversion (wrong types, clamped weights, misplaced casts) is off by far more.
Models whose *original* ONNX Runtime cannot load (opset < 7 kernels, training ops, locales
missing on the machine) are still converted and checked, and their run is skipped with the reason.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import amp_convert
from tests.helpers import rel_error, run, session

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
RTOL_FP16 = 1e-2


def _cases() -> list[str]:
    paths = sorted(glob.glob(os.path.join(DATA, "light", "*.onnx")))
    for sub in ("pytorch-converted", "pytorch-operator", "simple"):
        paths += sorted(glob.glob(os.path.join(DATA, sub, "*", "model.onnx")))
    return paths


def _case_id(path: str) -> str:
    rel = os.path.relpath(path, DATA)
    return rel.replace("/model.onnx", "").replace(".onnx", "")


def _read(path: str, vi: onnx.ValueInfoProto):
    with open(path, "rb") as f:
        data = f.read()
    if vi.type.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    return numpy_helper.to_array(tensor)


def _light_input(vi: onnx.ValueInfoProto) -> np.ndarray:
    """The input onnx's own runner feeds to light models (arange / n, see generate_dummy_data)."""
    shape = tuple(
        d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim
    )
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def _data(path: str, model: onnx.ModelProto):
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    if "/light/" in path.replace(os.sep, "/"):
        feeds = {vi.name: _light_input(vi) for vi in inputs}
        prefix = path[: -len(".onnx")]
        expected = [_read(f"{prefix}_output_{i}.pb", vi) for i, vi in enumerate(model.graph.output)]
        return feeds, expected
    folder = os.path.join(os.path.dirname(path), "test_data_set_0")
    feeds = {
        vi.name: _read(os.path.join(folder, f"input_{i}.pb"), vi) for i, vi in enumerate(inputs)
    }
    expected = [
        _read(os.path.join(folder, f"output_{i}.pb"), vi) for i, vi in enumerate(model.graph.output)
    ]
    return feeds, expected


_LOADS: dict[str, str | None] = {}


def _original_load_error(path: str) -> str | None:
    if path not in _LOADS:
        try:
            session(path)
            _LOADS[path] = None
        except Exception as e:  # ORT raises its own exception types
            _LOADS[path] = str(e).splitlines()[0][:160]
    return _LOADS[path]


def _compare(expected, got) -> None:
    if isinstance(expected, list):
        assert len(expected) == len(got)
        for e, g in zip(expected, got, strict=True):
            _compare(e, g)
        return
    assert got.shape == expected.shape
    if expected.dtype.kind == "f":
        assert np.isfinite(got).all() == np.isfinite(expected).all()
        if expected.size and np.isfinite(expected).all():
            assert rel_error(expected, got) <= RTOL_FP16
    else:
        np.testing.assert_array_equal(got, expected)


def _inits(model: onnx.ModelProto) -> set[str]:
    return {t.name for t in model.graph.initializer}


@pytest.mark.slow
@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
@pytest.mark.parametrize("path", _cases(), ids=_case_id)
def test_backend_model(path: str, level: str, tmp_path) -> None:
    model = onnx.load(path)
    converted = amp_convert.convert(model, level=level, dtype="fp16")
    out = tmp_path / "converted.onnx"
    onnx.save(converted, out)
    onnx.checker.check_model(str(out), full_check=True)
    # interface types are kept FP32. Initializers listed as inputs are weights (below IR 4 ONNX
    # Runtime cannot even override them): the converter makes them plain initializers
    feeds = [i for i in model.graph.input if i.name not in _inits(model)]
    assert [i.type for i in converted.graph.input] == [i.type for i in feeds]
    if model.ir_version < 4:
        assert converted.ir_version == 4
    assert [o.type.tensor_type.elem_type for o in converted.graph.output] == [
        o.type.tensor_type.elem_type for o in model.graph.output
    ]
    reason = _original_load_error(path)
    if reason is not None:
        pytest.skip(f"original model does not load in ONNX Runtime either: {reason}")
    feeds, expected = _data(path, model)
    got = run(str(out), feeds)
    for e, g in zip(expected, got, strict=True):
        _compare(e, g)
