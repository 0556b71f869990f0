"""Byte-flip fuzz of real models through the CLI.

Sources: small models from the onnx wheel's backend test data and from the models/ builders (If
and Loop capture, NMS, custom domain, a BERT-style encoder, a sequence model, and one model whose
weights are in external data, so flips also hit data locations, offsets and lengths). Each
mutation XORs 1-3 random bytes of the .onnx file (seeded, so every case is reproducible by its
id) and runs ``amp-convert MUT.onnx -o OUT.onnx`` through click's runner. Every outcome must be:

* exit 0 and an output that passes ``onnx.checker.check_model(full_check=True)``, or
* exit 2 with one line ``amp-convert: error: ...``, no traceback, and no output file;

never exit 3 ("internal error") or an escaped exception, and the mutated input is never modified.
Cases that break this today are listed in KNOWN_FAILURES with the defect they show and
marked xfail(strict=True): when the fix lands they pass, strict xfail turns that into a failure,
and the entry must be removed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from amp_convert.commands.cli import cli
from models.blocks import bert_encoder
from models.focused import (
    custom_domain,
    if_outer_capture,
    loop_outer_capture,
    nms_model,
    resize_scales,
)

BACKEND = Path(onnx.__file__).parent / "backend" / "test" / "data"
FLIPS_PER_SOURCE = 25

#: name -> function returning the model bytes (and, for external data, the data file's bytes)
SOURCES: dict[str, Callable[[], tuple[bytes, bytes | None]]] = {}


def _backend(rel: str) -> Callable[[], tuple[bytes, bytes | None]]:
    return lambda: ((BACKEND / rel).read_bytes(), None)


def _built(build: Callable[[], onnx.ModelProto]) -> Callable[[], tuple[bytes, bytes | None]]:
    return lambda: (build().SerializeToString(), None)


def _external() -> tuple[bytes, bytes | None]:
    """loop_outer_capture with every initializer in SRC.onnx.data (location/offset/length)."""
    from onnx import external_data_helper as ext

    model = loop_outer_capture(features=4, trips=2)
    ext.convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location="src.onnx.data", size_threshold=0
    )
    data = bytearray()
    for t in ext._get_all_tensors(model):
        if ext.uses_external_data(t):
            offset = len(data)
            data += t.raw_data
            ext.set_external_data(t, "src.onnx.data", offset=offset, length=len(t.raw_data))
            t.ClearField("raw_data")
    return model.SerializeToString(), bytes(data)


SOURCES.update(
    {
        "linear": _backend("pytorch-converted/test_Linear/model.onnx"),
        "conv2d": _backend("pytorch-converted/test_Conv2d/model.onnx"),
        "convtranspose": _backend("pytorch-operator/test_operator_convtranspose/model.onnx"),
        "sequence": _backend("simple/test_sequence_model3/model.onnx"),
        "alexnet": _backend("light/light_bvlc_alexnet.onnx"),
        "squeezenet": _backend("light/light_squeezenet.onnx"),
        "if_capture": _built(lambda: if_outer_capture(features=8, hidden=8)),
        "loop_capture": _built(lambda: loop_outer_capture(features=4, trips=2)),
        "resize": _built(lambda: resize_scales(channels=2, size=4)),
        "nms": _built(lambda: nms_model(boxes=4)),
        "custom_domain": _built(lambda: custom_domain(features=4, inner=4)),
        "bert": _built(
            lambda: bert_encoder(layers=1, hidden=8, heads=2, vocab=10, max_positions=8)
        ),
        "external": _external,
    }
)

#: What fails today -> the cases that show it (one clear error, exit 2, instead
#: of "internal error" or of writing a model the checker rejects). Regenerate after a fix by
#: running this file and removing the ids that XPASS.
KNOWN_FAILURES: dict[str, str] = {}  # reason -> space-separated case ids (none left)
KNOWN_BY_CASE = {case: why for why, cases in KNOWN_FAILURES.items() for case in cases.split()}


@cache
def _source(name: str) -> tuple[bytes, bytes | None]:
    return SOURCES[name]()


def mutate(data: bytes, source_index: int, i: int) -> bytes:
    """XOR 1-3 bytes at seeded positions (seed: the source's index and the mutation number)."""
    rng = np.random.default_rng([source_index, i])
    buf = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        buf[int(rng.integers(0, len(buf)))] ^= int(rng.integers(1, 256))
    return bytes(buf)


def _cases() -> list:
    cases = []
    for s, name in enumerate(SOURCES):
        for i in range(FLIPS_PER_SOURCE):
            case_id = f"{name}-{i}"
            marks = []
            if case_id in KNOWN_BY_CASE:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BY_CASE[case_id]))
            cases.append(pytest.param(name, s, i, id=case_id, marks=marks))
    return cases


@pytest.mark.integration
@pytest.mark.parametrize(("name", "source_index", "i"), _cases())
def test_byte_flip_gives_a_model_or_a_clean_error(
    name: str, source_index: int, i: int, tmp_path: Path
) -> None:
    model_bytes, data = _source(name)
    src = tmp_path / "src.onnx"
    mutated = mutate(model_bytes, source_index, i)
    src.write_bytes(mutated)
    if data is not None:
        (tmp_path / "src.onnx.data").write_bytes(data)
    out = tmp_path / "out.onnx"
    result = CliRunner().invoke(cli, [str(src), "-o", str(out)])
    stderr = result.stderr if hasattr(result, "stderr") else result.output
    assert result.exit_code in (0, 2), f"exit {result.exit_code}: {stderr.strip()[:500]}" + (
        f" ({type(result.exception).__name__})" if result.exception else ""
    )
    assert "Traceback" not in result.output
    assert src.read_bytes() == mutated, "the input was modified"
    if result.exit_code == 0:
        onnx.checker.check_model(str(out), full_check=True)
    else:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("amp-convert: error: "), stderr
        assert not out.exists(), "a failed conversion left an output behind"
        assert not any(p.name.startswith("out.onnx") for p in tmp_path.iterdir()), os.listdir(
            tmp_path
        )
