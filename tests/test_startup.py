"""Start-up: the command line loads only what a command uses; bench/startup.py times it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from models.blocks import bert_encoder

REPO = Path(__file__).resolve().parent.parent


def _modules_after(args: list[str]) -> tuple[int, set[str], str]:
    """Run the console entry point with `args` in a fresh interpreter: (exit code, modules, out)."""
    code = (
        "import sys, json\n"
        f"sys.argv = ['amp-convert', *{args!r}]\n"
        "from amp_convert.startup import main\n"
        "rc = 0\n"
        "try:\n    main()\nexcept SystemExit as e:\n    rc = e.code or 0\n"
        "print('MODULES=' + json.dumps([rc, sorted(sys.modules)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("MODULES="))
    rc, modules = json.loads(line.removeprefix("MODULES="))
    return rc, set(modules), done.stdout


def _modules_of(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_version_loads_nothing_heavy() -> None:
    rc, modules, out = _modules_after(["--version"])
    assert rc == 0 and "amp-convert, version " in out
    assert not {"onnx", "onnx_ir", "numpy", "click", "sympy"} & modules


@pytest.mark.integration
def test_conversion_skips_sympy_validation_auto_and_onnxruntime(tmp_path: Path) -> None:
    src, dst = tmp_path / "m.onnx", tmp_path / "m.fp16.onnx"
    onnx.save(bert_encoder(layers=1, hidden=32, heads=4, vocab=50), str(src))
    rc, modules, _out = _modules_after([str(src), "-o", str(dst), "-q"])
    assert rc == 0 and dst.exists()
    unused = {
        "sympy.core",
        "onnxruntime",
        "amp_convert.validation.emulate",
        "amp_convert.auto.search",
        "amp_convert.pages.html",
        "amp_convert.validation.runtime",  # --validate's flags need only their declarations
        "amp_convert.validation.decode",
        "amp_convert.validation.metrics",
    }
    assert not unused & modules, unused & modules
    # temporary names read os.urandom directly; an older dependency may import secrets itself
    assert "secrets" not in modules - _modules_of(
        "import click, ml_dtypes, numpy, onnx, onnx_ir, re2"
    )
    assert "onnx_ir" in modules  # it did convert


@pytest.mark.integration
def test_deferred_sympy_still_works_when_used() -> None:
    code = (
        "import sys\n"
        "from amp_convert.startup import defer_sympy\n"
        "assert defer_sympy()\n"
        "import onnx_ir as ir\n"
        "assert 'sympy.core' not in sys.modules\n"
        "d = ir.SymbolicDim('seq')\n"
        "print(d * 2 + 1, 'sympy.core' in sys.modules)\n"
        "import sympy\n"
        "print(sympy.Symbol('x') + 1)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert done.stdout.split("\n")[:2] == ["2*seq + 1 True", "x + 1"]


def test_public_names_resolve_on_demand() -> None:
    import amp_convert

    for name in amp_convert.__all__:
        assert getattr(amp_convert, name) is not None
    assert set(amp_convert.__all__) <= set(dir(amp_convert))


@pytest.mark.integration
def test_the_command_line_runs_one_blas_thread_unless_told_otherwise(tmp_path: Path) -> None:
    """numpy's BLAS would spin a thread per core; the user's own setting is kept."""
    code = (
        "import os, sys\n"
        "sys.argv = ['amp-convert', '--help']\n"
        "from amp_convert.startup import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "import gc\n"
        "blas = os.environ['OPENBLAS_NUM_THREADS']\n"
        "print('BLAS=' + blas, gc.isenabled(), gc.get_freeze_count() > 0)\n"
    )
    for env, want in (({}, "BLAS=1"), ({"OPENBLAS_NUM_THREADS": "3"}, "BLAS=3")):
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
            env={k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | env,
        )
        assert done.stdout.splitlines()[-1] == f"{want} True True"
