"""The pair writer interrupted at every step leaves the old pair or the new.

A signal is delivered from pair_write's step hook (never by timing) at each step of a --force
replacement of an external-data output, with SIGINT and with SIGTERM. Each time the output must
load with its weights and compute either the old output's values or the new ones, with no
temporary file and no data file but the one it references left in the folder.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import amp_convert
from amp_convert import OutputError
from amp_convert.files import pair_write, safe_write
from amp_convert.files.pair_write import Step
from tests.helpers import run

X = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)


def mlp(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(3):
        w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
        inits.append(onnx.numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        prev = f"m{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 64])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def external(path: Path, seed: int) -> Path:
    onnx.save_model(
        mlp(seed), path, save_as_external_data=True, location=path.name + ".data", size_threshold=0
    )
    return path


def result(path: Path) -> np.ndarray:
    return run(str(path), {"x": X})[0].astype(np.float32)


def referenced(path: Path) -> set[str]:
    proto = onnx.load(str(path), load_external_data=False)
    return {
        e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"
    }


@pytest.fixture
def folder(tmp_path: Path):
    """An input model and an old output pair converted from another model (different values)."""
    src = external(tmp_path / "m.onnx", seed=0)
    old_src = external(tmp_path / "old.onnx", seed=5)
    out = tmp_path / "o.onnx"
    amp_convert.convert_file(old_src, out)
    (tmp_path / "old.onnx").unlink()
    (tmp_path / "old.onnx.data").unlink()
    new = tmp_path / "new" / "o.onnx"
    new.parent.mkdir()
    amp_convert.convert_file(src, new)
    return src, out, result(out), result(new)


STEPS = list(Step)


@pytest.mark.integration
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("step", STEPS, ids=[s.name for s in STEPS])
def test_interrupted_pair_write_leaves_old_or_new_pair(folder, monkeypatch, step, signum) -> None:
    src, out, old_values, new_values = folder
    sent: list[Step] = []

    def deliver(at: Step) -> None:
        if at is step and not sent:
            sent.append(at)
            os.kill(os.getpid(), signum)

    terminated: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: terminated.append(s))
    monkeypatch.setattr(pair_write, "on_step", deliver)
    outcome = "finished"
    try:
        amp_convert.convert_file(src, out, force=True)
    except KeyboardInterrupt:
        outcome = "interrupted"
    except OutputError as e:
        assert "interrupted by SIGTERM" in str(e)
        outcome = "interrupted"
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert sent == [step]
    if signum == signal.SIGTERM:
        assert terminated == [signal.SIGTERM] or outcome == "finished"
    got = result(out)
    is_old = np.array_equal(got, old_values)
    is_new = np.array_equal(got, new_values)
    assert is_old != is_new, "the output computes neither the old nor the new values"
    if step.value in (Step.START.value, Step.RESERVED.value, Step.WRITTEN.value):
        assert is_old and outcome == "interrupted"
    names = sorted(p.name for p in out.parent.iterdir() if p.is_file())
    assert not [n for n in names if n.startswith(".")], names
    assert names == sorted({"m.onnx", "m.onnx.data", "o.onnx", *referenced(out)}), names
    onnx.checker.check_model(str(out), full_check=True)


def test_signal_held_during_the_commit_is_delivered_after_it(folder, monkeypatch) -> None:
    """The old bug's window: the graph renamed, the write not yet marked done."""
    src, out, _, new_values = folder
    monkeypatch.setattr(
        pair_write,
        "on_step",
        lambda at: os.kill(os.getpid(), signal.SIGINT) if at is Step.GRAPH_IN_PLACE else None,
    )
    with pytest.raises(KeyboardInterrupt):
        amp_convert.convert_file(src, out, force=True)
    np.testing.assert_array_equal(result(out), new_values)
    assert len(referenced(out)) == 1


def test_deferred_signals_are_delivered_once_on_leaving() -> None:
    with pytest.raises(KeyboardInterrupt), safe_write.signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        reached = True
    assert reached


_CLI_CHILD = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job's child: reset
from amp_convert.files import pair_write
step, signame, *argv = sys.argv[1:]

def deliver(at):
    if at.name == step:
        os.kill(os.getpid(), getattr(signal, signame))

pair_write.on_step = deliver
sys.argv = ["amp-convert", *argv]
from amp_convert.startup import main
main()
"""


@pytest.mark.integration
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("step", ["WRITTEN", "GRAPH_IN_PLACE"])
def test_the_command_interrupted_mid_commit_ends_as_documented(folder, step, signame) -> None:
    """The real process: SIGINT is 130 and one line, SIGTERM ends it by SIGTERM; old or new."""
    import subprocess
    import sys

    src, out, old_values, new_values = folder
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _CLI_CHILD,
            step,
            signame,
            str(src),
            "-o",
            str(out),
            "--force",
            "-q",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=120,
        check=False,
    )
    if signame == "SIGINT":
        assert done.returncode == 130 and done.stderr.strip() == "amp-convert: interrupted"
    else:
        assert done.returncode == -signal.SIGTERM and done.stderr == ""
    expected = old_values if step == "WRITTEN" else new_values
    np.testing.assert_array_equal(result(out), expected)
    names = sorted(p.name for p in out.parent.iterdir() if p.is_file())
    assert names == sorted({"m.onnx", "m.onnx.data", "o.onnx", *referenced(out)}), names
