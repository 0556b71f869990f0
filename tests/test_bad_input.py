"""Issue 25: hostile moments and hostile strings end as one line and the documented exit code.

Grouped by family: signals at any moment of the command (start-up, after the verdict), user
strings that are not text (non-UTF-8 bytes, NUL, control characters), writes that fail (a file
size limit, a report after the model), and bounds on what a number option may ask for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]


def mlp(width: int = 64, layers: int = 2) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / 8).astype(np.float32)
        inits.append(onnx.numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"))
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, width])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def saved(path: Path, model: onnx.ModelProto | None = None) -> Path:
    onnx.save(model or mlp(), str(path))
    return path


def child(script: str, *args: object, env: dict[str, str] | None = None):
    """Run `script` in a fresh interpreter with SIGINT at its default (a background job's pytest
    hands its children SIGINT ignored)."""
    prologue = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    return subprocess.run(
        [sys.executable, "-c", prologue + textwrap.dedent(script), *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=120,
        check=False,
    )


# ------------------------------------------------------------------ signals at any moment


_SIGNAL_ON_IMPORT = """
import os, signal, sys, time
module, signame, *argv = sys.argv[1:]

class Trap:  # a meta-path finder: the signal arrives as `module` starts to import
    def find_spec(self, name, path=None, target=None):
        if name == module:
            os.kill(os.getpid(), getattr(signal, signame))
            time.sleep(1)
        return None

sys.meta_path.insert(0, Trap())
sys.argv = ["amp-convert", *argv]
from amp_convert.startup import main
main()
print("FINISHED")
"""


@pytest.mark.parametrize(
    "module, extra",
    [
        ("onnx", ()),
        ("onnx_ir", ()),
        ("amp_convert.pipeline", ()),
        ("onnxruntime", ("--validate",)),
    ],
)
def test_sigint_while_packages_import_is_130_and_one_line(tmp_path: Path, module, extra) -> None:
    """Was a traceback and death by SIGINT (or a RuntimeError, or "needs ONNX Runtime")."""
    src = saved(tmp_path / "m.onnx")
    done = child(_SIGNAL_ON_IMPORT, module, "SIGINT", src, "-o", tmp_path / "o.onnx", *extra)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "amp-convert: interrupted"
    assert "FINISHED" not in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_sigterm_while_packages_import_ends_by_sigterm_quietly(tmp_path: Path) -> None:
    src = saved(tmp_path / "m.onnx")
    done = child(_SIGNAL_ON_IMPORT, "onnx_ir", "SIGTERM", src, "-o", tmp_path / "o.onnx")
    assert done.returncode == -signal.SIGTERM
    assert done.stderr == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


_SIGINT_AFTER_VERDICT = """
import atexit, os, signal, sys, time

def interrupt():  # the command has finished and printed its verdict; the process is ending
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)

atexit.register(interrupt)
sys.argv = ["amp-convert", *sys.argv[1:]]
from amp_convert.startup import main
main()
"""


def test_sigint_after_the_verdict_is_130_and_one_line(tmp_path: Path) -> None:
    """SIGINT after the verdict line killed silently."""
    src = saved(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    done = child(_SIGINT_AFTER_VERDICT, src, "-o", out)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "amp-convert: interrupted"
    assert f"wrote {out}" in done.stdout  # the verdict was printed before, and kept
    onnx.checker.check_model(str(out))


def test_a_broken_onnxruntime_import_is_not_reported_missing(monkeypatch) -> None:
    """An import cut short (a half-initialised package) said "validation needs ONNX Runtime"."""
    import builtins

    from amp_convert import ValidationError
    from amp_convert.validation import runtime

    real = builtins.__import__

    def half(name, *a, **k):
        if name == "onnxruntime":
            raise ImportError("cannot import name 'x' from partially initialized module")
        return real(name, *a, **k)

    monkeypatch.delitem(sys.modules, "onnxruntime", raising=False)
    monkeypatch.setattr(builtins, "__import__", half)
    with pytest.raises(ValidationError) as e:
        runtime.import_ort()
    assert "installed but does not import" in str(e.value)
    assert "pip install" not in str(e.value)
