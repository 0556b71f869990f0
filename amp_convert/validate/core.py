"""validate(): run the original and the converted model on the same inputs and compare."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from amp_convert.errors import ValidationError
from amp_convert.validate.emulate import build_emulated_model, low_dtype_names
from amp_convert.validate.inputs import InputSpec, load_inputs, random_inputs
from amp_convert.validate.metrics import Thresholds, check_names, compare_output
from amp_convert.validate.progress import progress_bar, progress_wanted
from amp_convert.validate.report import LatencyStats, ValidationReport
from amp_convert.validate.runtime import (
    ModelSource,
    Runner,
    cuda_available,
    import_ort,
    load_source,
    make_session,
    run_once,
    time_runs,
)

PROVIDERS = ("auto", "cuda", "cpu", "emulate")

CPU_WARNING = (
    "provider cpu: ONNX Runtime runs FP16 nodes in FP32 on CPU and removes the casts between "
    "them, so FP16 rounding and overflow mostly do not happen here: errors are understated, and "
    "latency says nothing about a GPU (use --provider emulate or cuda for faithful numbers)"
)
EMULATE_WARNING = (
    "provider emulate: FP16/BF16 rounding and overflow are reproduced at every low-precision "
    "value, but each op computes in FP32 on CPU (GPU kernels may accumulate differently), and "
    "latency is that of the emulation on CPU, not a GPU figure"
)

_LOW_NP = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}

ModelArg = str | os.PathLike | bytes | Any  # also onnx.ModelProto and onnx_ir.Model


def validate(
    reference: ModelArg,
    candidate: ModelArg,
    *,
    provider: str = "auto",
    inputs: str | os.PathLike | Mapping[str, np.ndarray] | None = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    runs: int = 20,
    warmup: int = 3,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    progress: bool = False,
) -> ValidationReport:
    """Run ``reference`` (FP32) and ``candidate`` (converted) on the same inputs and provider.

    Models are paths, bytes, onnx.ModelProto or onnx_ir.Model; pass paths for models with external
    data. ``provider``: ``cuda`` (ORT CUDA), ``cpu`` (ORT CPU as is; errors understated),
    ``emulate`` (CPU, FP16/BF16 rounding reproduced), ``auto`` = cuda if available else emulate.
    ``inputs``: None for seeded random inputs (``dims`` sets dynamic dims), or an ``.npz`` path /
    dict of arrays. ``thresholds`` (see ``Thresholds``) decide ``report.passed``; none set means
    report only. ``runs=0`` skips timing.
    """
    ort = import_ort()
    if provider not in PROVIDERS:
        raise ValidationError(f"provider {provider!r}: expected one of {', '.join(PROVIDERS)}")
    for name, value in (("runs", runs), ("warmup", warmup), ("seed", seed)):
        if not isinstance(value, int | np.integer) or value < 0:
            raise ValidationError(f"{name} must be a non-negative integer, got {value!r}")
    limits = Thresholds.coerce(thresholds)
    ref_src = load_source(reference, "reference")
    cand_src = load_source(candidate, "candidate")
    runners: list[Runner] = []
    try:
        return _validate(
            ort, ref_src, cand_src, provider=provider, inputs=inputs, dims=dims, seed=seed,
            runs=runs, warmup=warmup, limits=limits, progress=progress, runners=runners,
        )  # fmt: skip
    finally:
        for runner in runners:
            runner.session = None  # close the session before deleting what it may map
            if runner.keep_alive is not None:
                runner.keep_alive.cleanup()
        for src in (ref_src, cand_src):
            if src._tmp is not None:  # temporary external-data folders of >2 GiB models
                src._tmp.cleanup()


def _validate(
    ort: Any,
    ref_src: ModelSource,
    cand_src: ModelSource,
    *,
    provider: str,
    inputs: Any,
    dims: Mapping[str, int] | None,
    seed: int,
    runs: int,
    warmup: int,
    limits: Thresholds,
    progress: bool,
    runners: list[Runner],
) -> ValidationReport:
    warnings: list[str] = []

    mode = provider
    if provider == "auto":
        mode = "cuda" if cuda_available() else "emulate"
    ref_runner, cand_runner, emulated = _open(ref_src, cand_src, mode)
    runners.extend(r for r in (ref_runner, cand_runner) if r is not None)
    if mode == "cuda" and ref_runner is None:  # auto: CUDA listed but failed to start
        warnings.append("provider auto: the CUDA provider failed to start; fell back to emulate")
        mode = "emulate"
        ref_runner, cand_runner, emulated = _open(ref_src, cand_src, mode)
        runners.extend((ref_runner, cand_runner))
    assert ref_runner is not None and cand_runner is not None

    if mode == "cpu":
        warnings.append(CPU_WARNING)
    elif mode == "emulate":
        warnings.append(EMULATE_WARNING)
    cand_low = low_dtype_names(cand_src.proto)
    if not cand_low:
        warnings.append("the candidate has no FP16/BF16 values: nothing is in low precision")
    if low_dtype_names(ref_src.proto):
        warnings.append("the reference itself has FP16/BF16 values; it runs as is")
    if emulated is not None and emulated.unknown_types:
        names = emulated.unknown_types
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        warnings.append(
            f"emulate: element type unknown for {len(names)} values ({', '.join(names[:5])}"
            f"{more}); they are not rounded"
        )

    specs = [InputSpec(n, t, s) for n, (t, s) in ref_runner.inputs.items()]
    _check_same_io(ref_runner, cand_runner, warnings)
    out_names = [n for n, _ in ref_runner.outputs]
    check_names(limits, out_names)

    if inputs is None:
        feeds = random_inputs(specs, ref_src.proto, dims=dims, seed=seed)
    else:
        feeds = load_inputs(inputs, specs)
        if dims:
            warnings.append("dims are ignored when inputs are given (shapes come from the data)")
    cand_feeds = dict(feeds.arrays)
    if emulated is not None:
        for name, low in emulated.low_inputs.items():
            if name in cand_feeds:
                rounded = cand_feeds[name].astype(_LOW_NP[low]).astype(np.float32)
                cand_feeds[name] = rounded

    ref_out = run_once(ref_runner, feeds.arrays)
    cand_out = run_once(cand_runner, cand_feeds)
    results = [compare_output(n, ref_out[n], cand_out[n], limits.for_output(n)) for n in out_names]
    skipped = [r.name for r in results if r.kind == "skipped"]
    if skipped:
        warnings.append(f"non-tensor outputs not compared: {', '.join(skipped)}")

    ref_lat = cand_lat = None
    if runs > 0:
        enabled = progress and progress_wanted()
        with progress_bar(2 * runs, "timing reference", enabled) as bar:
            ref_times = time_runs(ref_runner, feeds.arrays, runs=runs, warmup=warmup, tick=bar.tick)
            bar.phase("timing candidate")
            cand_times = time_runs(cand_runner, cand_feeds, runs=runs, warmup=warmup, tick=bar.tick)
        ref_lat = LatencyStats.from_times(ref_times)
        cand_lat = LatencyStats.from_times(cand_times)

    return ValidationReport(
        reference=ref_src.label,
        candidate=cand_src.label,
        provider_requested=provider,
        provider=mode,
        ort_providers=cand_runner.providers,
        onnxruntime_version=str(getattr(ort, "__version__", "unknown")),
        graph_optimizations="disabled" if mode == "emulate" else "default",
        inputs_source=feeds.source,
        seed=int(seed),
        dims=feeds.dims,
        input_shapes=feeds.shapes,
        input_dtypes=feeds.dtypes,
        thresholds=limits.to_dict(),
        outputs=results,
        warmup=int(warmup),
        runs=int(runs),
        reference_latency=ref_lat,
        candidate_latency=cand_lat,
        emulation=None if emulated is None else emulated.summary(),
        warnings=warnings,
    )


def _open(ref_src: ModelSource, cand_src: ModelSource, mode: str):
    """Sessions for ``mode``; (None, None, None) when auto-selected CUDA fails to start."""
    if mode == "emulate":
        emulated = build_emulated_model(cand_src.proto)
        ref = make_session(ref_src, "reference", device="cpu", disable_optimizations=True)
        cand = make_session(
            cand_src, "candidate", device="cpu", disable_optimizations=True,
            model_override=emulated.model,
        )  # fmt: skip
        return ref, cand, emulated
    if mode == "cpu":
        ref = make_session(ref_src, "reference", device="cpu", disable_optimizations=False)
        cand = make_session(cand_src, "candidate", device="cpu", disable_optimizations=False)
        return ref, cand, None
    if not cuda_available():
        ort = import_ort()
        raise ValidationError(
            "provider cuda: this onnxruntime has no CUDAExecutionProvider (it offers "
            f"{', '.join(ort.get_available_providers())}); install amp-convert[gpu] "
            "(onnxruntime-gpu) or use --provider emulate"
        )
    try:
        ref = make_session(ref_src, "reference", device="cuda", disable_optimizations=False)
    except ValidationError as e:
        if "CUDA provider failed to start" in str(e):
            return None, None, None
        raise
    cand = make_session(cand_src, "candidate", device="cuda", disable_optimizations=False)
    return ref, cand, None


def _check_same_io(ref: Runner, cand: Runner, warnings: list[str]) -> None:
    """Both models must take the same inputs and give at least the reference's outputs."""
    if set(ref.inputs) != set(cand.inputs):
        missing = sorted(set(ref.inputs) - set(cand.inputs))
        extra = sorted(set(cand.inputs) - set(ref.inputs))
        raise ValidationError(
            "the models take different inputs: "
            + "; ".join(
                p
                for p in (
                    f"only the reference has {', '.join(missing)}" if missing else "",
                    f"only the candidate has {', '.join(extra)}" if extra else "",
                )
                if p
            )
        )
    ref_out = [n for n, _ in ref.outputs]
    cand_out = {n for n, _ in cand.outputs}
    missing = [n for n in ref_out if n not in cand_out]
    if missing:
        raise ValidationError(
            f"the candidate lacks output {', '.join(missing)} of the reference "
            f"(candidate outputs: {', '.join(sorted(cand_out))})"
        )
    extra = sorted(cand_out - set(ref_out))
    if extra:
        warnings.append(f"candidate-only outputs not compared: {', '.join(extra)}")
