"""gpu_bench.py's measuring half: variants on disk, ORT sessions, one measurement per variant.

A variant is measured in ONE session (loading a GPT-2-sized model on a GPU costs seconds of the
device time): its first run has ORT's profiler on and fetches the outputs to the host (accuracy and
node placement), ``end_profiling()`` then stops the profiler, and the timed runs follow with I/O
binding — inputs copied to the device once, outputs left there — so no host copy is timed.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import amp_convert
from amp_convert.validation.metrics import Thresholds, compare_output
from amp_convert.validation.runtime import CPU_EP, CUDA_EP, Runner, import_ort, run_once, time_runs
from bench._compare_analyze import first_line
from bench._gpu_profile import Placement, read_profile

VARIANTS = ("FP32", "O1", "O2", "O3", "OCC")
PROVIDERS = ("cuda", "cpu")


# ----------------------------------------------------------------------------------------------
# is there a GPU?
# ----------------------------------------------------------------------------------------------
def _probe_model() -> bytes:
    """A one-node float model: enough to make the CUDA provider start (or fail to)."""
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    graph = onnx.helper.make_graph([node], "probe", [x], [y])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


def cuda_unavailable_reason() -> str | None:
    """None when ORT's CUDA provider starts here, else why not (one line)."""
    ort = import_ort()
    if CUDA_EP not in ort.get_available_providers():
        return f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (a CPU build)"
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:  # finds the CUDA/cuDNN libraries pip's nvidia-* packages (torch) ship
        with contextlib.redirect_stdout(sys.stderr):  # it prints its warnings; stdout is the table
            try:
                preload()
            except Exception as e:
                print(f"onnxruntime.preload_dlls() failed: {first_line(e)}", file=sys.stderr)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(_probe_model(), so, providers=[CUDA_EP, CPU_EP])
        if CUDA_EP not in sess.get_providers():
            return "the CUDA provider did not start (ORT fell back to the CPU)"
        sess.run(None, {"x": np.ones(4, np.float32)})
    except Exception as e:  # EPFail, CUDA driver errors: any failure means no GPU to measure
        return f"the CUDA provider failed to start: {first_line(e)}"
    return None


# ----------------------------------------------------------------------------------------------
# variants
# ----------------------------------------------------------------------------------------------
def make_variant(variant: str, src: Path, folder: Path, *, target: str) -> Path:
    """The ``variant`` of the FP32 model ``src`` as a file in ``folder`` (FP32: ``src`` itself).

    O1/O2/O3: ``amp_convert.convert_file`` (weights streamed, external data kept); ``O2+upgrade``:
    the same with ``opset_upgrade=True`` (a QDQ model moved to opset 19).
    OCC: onnxconverter-common's ``float16.convert_float_to_float16(model, keep_io_types=True)``;
    its exceptions propagate, for the caller to report.
    """
    if variant == "FP32":
        return src
    dst = folder / f"{src.stem}.{variant}.onnx"
    if variant == "OCC":
        from onnxconverter_common import float16

        with warnings.catch_warnings():  # one "will be truncated" line per tiny weight value
            warnings.simplefilter("ignore", UserWarning)
            model = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
        onnx.save_model(
            model,
            str(dst),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=dst.name + ".data",
            size_threshold=1024,
        )
    else:
        level, _, extra = variant.partition("+")
        upgrade = {"opset_upgrade": True} if extra == "upgrade" else {}
        amp_convert.convert_file(src, dst, level=level, target=target, force=True, **upgrade)
    return dst


# ----------------------------------------------------------------------------------------------
# sessions
# ----------------------------------------------------------------------------------------------
#: CUDA provider options that make a variant's NHWC column (ORT's NHWC kernels for convolutions)
NHWC = {"prefer_nhwc": "1"}


def open_session(
    path: Path,
    provider: str,
    *,
    tf32: bool = True,
    profile_prefix: str | None = None,
    options: dict[str, str] | None = None,
) -> Runner:
    """An ORT session on ``provider`` ("cuda": CUDA first, CPU for what CUDA cannot run).

    ``options``: CUDA provider options (``--cuda-option``, ``prefer_nhwc``...). ``tf32=False``
    sets ``use_tf32=0`` over them: ORT's FP32 default runs MatMul and Conv in TF32 (10-bit
    mantissa), which is no reference for FP16 errors.
    """
    ort = import_ort()
    so = ort.SessionOptions()
    so.log_severity_level = 3  # not the "nodes not assigned to the preferred EP" warning
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    if provider == "cuda":
        cuda = dict(options or {}) | ({} if tf32 else {"use_tf32": "0"})
        providers: list[Any] = [(CUDA_EP, cuda), CPU_EP]
    else:
        providers = [CPU_EP]
    sess = ort.InferenceSession(str(path), so, providers=providers)
    if provider == "cuda" and CUDA_EP not in sess.get_providers():
        raise RuntimeError("the CUDA provider did not start for this model")
    inputs = {i.name: (i.type, list(i.shape)) for i in sess.get_inputs()}
    outputs = [(o.name, o.type) for o in sess.get_outputs()]
    return Runner(sess, provider, inputs, outputs)


def reference_outputs(
    path: Path, provider: str, feeds: dict[str, np.ndarray]
) -> tuple[dict[str, Any], str]:
    """FP32 outputs with TF32 off, and which reference that was.

    CUDA with ``use_tf32=0``; should that session fail (an ORT without the option), the CPU
    provider's FP32 instead — also free of TF32 — rather than no error figures at all.
    """
    if provider == "cuda":
        try:
            return _run_reference(path, "cuda", feeds), "FP32, CUDA provider, use_tf32=0"
        except Exception as e:
            note = f"FP32, CPU provider (CUDA with use_tf32=0 failed: {first_line(e)})"
            print(f"{path.stem}: reference {note}", file=sys.stderr)
            return _run_reference(path, "cpu", feeds), note
    return _run_reference(path, provider, feeds), "FP32, CPU provider"


def _run_reference(path: Path, provider: str, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    runner = open_session(path, provider, tf32=False)
    try:
        return run_once(runner, feeds, "FP32 reference")
    finally:
        runner.close()


# ----------------------------------------------------------------------------------------------
# one measurement
# ----------------------------------------------------------------------------------------------
@dataclass
class OutputError:
    """One output against the reference: ``rel`` is max|Δ| / max|ref| (scale-relative)."""

    name: str
    rel: float | None
    cosine: float | None
    max_abs: float | None
    max_rel_elementwise: float | None
    nonfinite: int

    def to_dict(self) -> dict[str, Any]:
        return {k: _json_float(v) for k, v in self.__dict__.items()}


@dataclass
class Measurement:
    """A variant's figures, or the error that stopped it (``error``) and at which ``stage``."""

    variant: str
    convert_s: float | None = None
    median_ms: float | None = None
    p90_ms: float | None = None
    times_ms: list[float] = field(default_factory=list)
    #: the same variant timed in a second session with prefer_nhwc=1 (``--nhwc``)
    nhwc_median_ms: float | None = None
    nhwc_p90_ms: float | None = None
    outputs: list[OutputError] = field(default_factory=list)
    placement: Placement | None = None
    error: str | None = None
    stage: str | None = None  # "convert", "load" or "run" when error is set

    @property
    def worst_rel(self) -> float | None:
        vals = [o.rel for o in self.outputs if o.rel is not None]
        return max(vals) if vals else None

    @property
    def worst_cosine(self) -> float | None:
        vals = [o.cosine for o in self.outputs if o.cosine is not None]
        return min(vals) if vals else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "convert_s": self.convert_s,
            "median_ms": self.median_ms,
            "p90_ms": self.p90_ms,
            "times_ms": self.times_ms,
            "nhwc_median_ms": self.nhwc_median_ms,
            "nhwc_p90_ms": self.nhwc_p90_ms,
            "max_rel_err": _json_float(self.worst_rel),
            "min_cosine": _json_float(self.worst_cosine),
            "outputs": [o.to_dict() for o in self.outputs],
            "placement": self.placement.to_dict() if self.placement else None,
            "error": self.error,
            "stage": self.stage,
        }


def _json_float(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def output_errors(ref: dict[str, Any], cand: dict[str, Any]) -> list[OutputError]:
    """Each output against the reference: ``amp-convert validate``'s metrics, max|Δ|/max|ref|."""
    errs = []
    for name, r in ref.items():
        res = compare_output(name, r, cand.get(name), Thresholds())
        rel = None
        if res.kind == "float" and res.max_abs is not None:
            finite = np.asarray(r)[np.isfinite(r)]
            scale = float(np.abs(finite).max()) if finite.size else 0.0
            rel = res.max_abs / scale if scale > 0 else (0.0 if res.max_abs == 0 else math.inf)
        errs.append(OutputError(name, rel, res.cosine, res.max_abs, res.max_rel, res.nonfinite))
    return errs


def measure(
    variant: str,
    path: Path,
    provider: str,
    feeds: dict[str, np.ndarray],
    reference: dict[str, Any],
    *,
    runs: int,
    warmup: int,
    profile_prefix: str,
    options: dict[str, str] | None = None,
    nhwc: bool = False,
) -> Measurement:
    """Profiled accuracy run, then ``warmup`` + ``runs`` timed runs, in one session with the
    CUDA provider ``options``; with ``nhwc`` the timing again in a session that adds
    prefer_nhwc=1."""
    m = Measurement(variant)
    try:
        runner = open_session(path, provider, profile_prefix=profile_prefix, options=options)
    except Exception as e:
        m.error, m.stage = first_line(e), "load"
        return m
    try:
        outs = run_once(runner, feeds, variant)
        m.placement = read_profile(runner.session.end_profiling())
        m.outputs = output_errors(reference, outs)
        del outs
        m.times_ms = time_runs(runner, feeds, runs=runs, warmup=warmup)
        m.median_ms = float(np.median(m.times_ms))
        m.p90_ms = float(np.percentile(m.times_ms, 90))
    except Exception as e:
        m.error, m.stage = first_line(e), "run"
    finally:
        runner.close()
    if nhwc and m.error is None:
        try:
            runner = open_session(path, provider, options=dict(options or {}) | NHWC)
            try:
                times = time_runs(runner, feeds, runs=runs, warmup=warmup)
            finally:
                runner.close()
            m.nhwc_median_ms = float(np.median(times))
            m.nhwc_p90_ms = float(np.percentile(times, 90))
        except Exception as e:
            m.error, m.stage = f"with prefer_nhwc=1: {first_line(e)}", "nhwc"
    return m


def convert_and_measure(
    variant: str,
    src: Path,
    folder: Path,
    feeds: dict[str, np.ndarray],
    reference: dict[str, Any],
    *,
    provider: str,
    target: str,
    runs: int,
    warmup: int,
    options: dict[str, str] | None = None,
    nhwc: bool = False,
) -> Measurement:
    """Make the variant (timing it), then measure it; a failure at either step is recorded."""
    t0 = time.perf_counter()
    try:
        path = make_variant(variant, src, folder, target=target)
    except Exception as e:
        m = Measurement(variant, error=first_line(e), stage="convert")
        return m
    convert_s = time.perf_counter() - t0 if variant != "FP32" else None
    prefix = str(folder / f"profile_{src.stem}_{variant}")
    m = measure(
        variant,
        path,
        provider,
        feeds,
        reference,
        runs=runs,
        warmup=warmup,
        profile_prefix=prefix,
        options=options,
        nhwc=nhwc,
    )
    m.convert_s = convert_s
    return m
