"""Load each model once, in a child process, with ONNX Runtime's default session options.

Why: validation runs models under settings of its own (emulate disables ORT's graph optimizer),
so a model that crashes ORT at its defaults, which is how users serve it, could be judged PASS.
A crash (SIGSEGV in an optimizer, seen with ORT 1.32's CPU provider on a converted TorchScript
encoder) would also kill the validator itself without a word. The child takes the crash; the
parent names it, finds the settings at which the model does load, and refuses to give a verdict.

One child loads the models in order and says ``ok <index>`` after each, so when it dies the
model being loaded is known. Only when a model fails are further children run, one per setting
tried (lower optimization levels, then ORT_ENABLE_ALL with one suspected optimizer disabled).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from amp_convert import safe_write
from amp_convert.errors import ValidationError
from amp_convert.validation.runtime import NO_KERNEL_HINT, is_missing_kernel

#: what a child runs: argv[1:] = level, providers (comma-separated), disabled optimizers
#: (comma-separated, may be empty), then the model paths. Exit 1 with ORT's message on a load error.
CHILD_CODE = r"""
import sys
import onnxruntime as ort
level, providers, disabled = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
for i, path in enumerate(sys.argv[4:]):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    if level != "default":
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    kw = {"disabled_optimizers": disabled.split(",")} if disabled else {}
    try:
        ort.InferenceSession(path, so, providers=providers, **kw)
    except Exception as e:
        text = str(e).strip()
        print(f"error {i} " + (text.splitlines()[0] if text else type(e).__name__), flush=True)
        sys.exit(1)
    print(f"ok {i}", flush=True)
"""

#: lower optimization levels tried, in order, when a model fails at the default
FALLBACK_LEVELS = ("ORT_ENABLE_EXTENDED", "ORT_ENABLE_BASIC", "ORT_DISABLE_ALL")
#: optimizers seen crashing ORT on converted models (issue 18); each is tried disabled alone
SUSPECT_OPTIMIZERS = ("NchwcTransformer", "MatmulTransposeFusion")


class LoadCrashError(ValidationError):
    """ONNX Runtime crashed (or refused) loading a model at its default settings: no verdict."""


@dataclass(frozen=True)
class ModelToCheck:
    """A model file ORT can open, and the words that name it in messages."""

    path: str
    what: str  # "the converted model", "the original model"


@dataclass(frozen=True)
class ChildResult:
    """How one child ended: the index it reached, and the signal or ORT message if it failed."""

    loaded: int  # models loaded before the failure (all of them when ok)
    signal: str | None = None
    error: str | None = None
    code: int = 0

    @property
    def ok(self) -> bool:
        return self.signal is None and self.error is None


def run_child(
    paths: Sequence[str],
    *,
    level: str = "default",
    providers: Sequence[str] = ("CPUExecutionProvider",),
    disabled: Sequence[str] = (),
) -> ChildResult:
    """Load ``paths`` in one child process; report how far it got and how it ended."""
    argv = [sys.executable, "-c", CHILD_CODE, level, ",".join(providers), ",".join(disabled)]
    proc = subprocess.run([*argv, *paths], capture_output=True, text=True, check=False)
    lines = proc.stdout.splitlines()
    loaded = sum(1 for line in lines if line.startswith("ok "))
    if proc.returncode < 0:
        return ChildResult(loaded, signal=_signal_name(-proc.returncode), code=proc.returncode)
    if proc.returncode == 0:
        return ChildResult(loaded)
    error = next((line.split(" ", 2)[2] for line in lines if line.startswith("error ")), None)
    if error is None:  # died without our message: a Python-level crash or an abort handler
        tail = proc.stderr.strip().splitlines()
        error = f"exit code {proc.returncode}" + (f" ({tail[-1]})" if tail else "")
    return ChildResult(loaded, error=error, code=proc.returncode)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def check_default_load(
    models: Sequence[ModelToCheck],
    *,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    tolerate_missing_kernels: bool = False,
    tolerate_errors: bool = False,
) -> list[str]:
    """Raise LoadCrashError if ORT crashes or fails loading a model at its default options.

    Returns warnings: with ``tolerate_missing_kernels`` (emulate, where ORT CPU's missing
    FP16/BF16 kernels do not matter), a "no kernel" load error is a warning instead; with
    ``tolerate_errors`` every load error is left to the caller's own session (a crash never is).
    """
    warnings: list[str] = []
    pending = list(models)
    while pending:
        result = run_child([m.path for m in pending], providers=providers)
        if result.ok:
            return warnings
        failed, pending = pending[result.loaded], pending[result.loaded + 1 :]
        if result.signal is not None:
            raise LoadCrashError(_crash_message(failed, result.signal, providers))
        error = result.error or "unknown error"
        if tolerate_errors:
            continue
        missing_kernel = is_missing_kernel(error)
        if tolerate_missing_kernels and missing_kernel:
            warnings.append(
                f"ONNX Runtime ({', '.join(providers)}) cannot load {failed.what} at its default "
                f"settings: {error}; this device lacks the kernel, the emulated run goes on"
            )
            continue
        raise LoadCrashError(
            f"ONNX Runtime cannot load {failed.what} at its default session options: {error}"
            + (NO_KERNEL_HINT if missing_kernel else "")
        )
    return warnings


def _crash_message(model: ModelToCheck, sig: str, providers: Sequence[str]) -> str:
    """The crash, and the settings at which the model does load (each tried in a child)."""
    head = (
        f"ONNX Runtime ({providers[0]}) crashes loading {model.what} at its default "
        f"optimizations ({sig}); "
    )
    for level in FALLBACK_LEVELS:
        if run_child([model.path], level=level, providers=providers).ok:
            works = [f"it loads with {level}"]
            break
    else:
        return head + "it crashes or fails at every optimization level too"
    avoid = [
        name
        for name in SUSPECT_OPTIMIZERS
        if run_child([model.path], providers=providers, disabled=(name,)).ok
    ]
    if avoid:
        works.append(
            "or at ORT_ENABLE_ALL with "
            + " or ".join(avoid)
            + " disabled (InferenceSession(..., disabled_optimizers=[...]))"
        )
    return head + " ".join(works)


class ModelFile:
    """A path ORT can open for ``ort_input`` (a path, or bytes written to a temporary file)."""

    def __init__(self, ort_input: str | bytes) -> None:
        self._tmp: tempfile.TemporaryDirectory | None = None
        if isinstance(ort_input, str):
            self.path = ort_input
        else:
            self._tmp = safe_write.temp_folder("amp-loadcheck-")
            self.path = os.path.join(self._tmp.name, "model.onnx")
            try:
                with safe_write.temp_writes("amp-loadcheck-"), open(self.path, "wb") as f:
                    f.write(ort_input)
            except BaseException:
                self._tmp.cleanup()
                raise

    def __enter__(self) -> ModelFile:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
