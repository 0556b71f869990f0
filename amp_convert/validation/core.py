"""validate(): run the original and the converted model on the same inputs and compare."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from contextlib import ExitStack
from typing import Any

import ml_dtypes
import numpy as np

from amp_convert.errors import ValidationError
from amp_convert.validation.emulate import build_emulated_model, low_dtype_names
from amp_convert.validation.inputs import (
    Inputs,
    InputSpec,
    dims_attempts,
    load_inputs,
    random_inputs,
)
from amp_convert.validation.metrics import Thresholds, check_names, compare_output
from amp_convert.validation.progress import progress_bar, progress_wanted
from amp_convert.validation.report import LatencyStats, ValidationReport
from amp_convert.validation.runtime import (
    CudaStartError,
    ModelSource,
    RunError,
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
    top1: Collection[str] = (),
    progress: bool = False,
) -> ValidationReport:
    """Run ``reference`` (FP32) and ``candidate`` (converted) on the same inputs and provider.

    Models are paths, bytes, onnx.ModelProto or onnx_ir.Model; pass paths for models with external
    data. ``provider``: ``cuda`` (ORT CUDA; an error if it cannot start), ``cpu`` (ORT CPU as is;
    errors understated), ``emulate`` (CPU, FP16/BF16 rounding reproduced), ``auto`` = cuda when
    it starts, else emulate with a warning. ``inputs``: None for seeded random inputs (``dims``
    sets dynamic dims; defaults the reference cannot run on are grown, see inputs.py), or an
    ``.npz`` path / dict of arrays. ``thresholds`` (see ``Thresholds``) decide the verdict: with
    none set, new NaN/Inf still fail and anything else is ``not_judged`` (``report.passed`` is
    False, ``report.failed`` tells whether something failed). ``top1``: output names to report
    top-1 agreement for beyond the class-logit shapes it is shown for anyway. ``runs=0`` skips
    timing.
    """
    ort = import_ort()
    if provider not in PROVIDERS:
        raise ValidationError(f"provider {provider!r}: expected one of {', '.join(PROVIDERS)}")
    for name, value in (("runs", runs), ("warmup", warmup), ("seed", seed)):
        if not isinstance(value, int | np.integer) or value < 0:
            raise ValidationError(f"{name} must be a non-negative integer, got {value!r}")
    limits = Thresholds.coerce(thresholds)
    if isinstance(top1, str):
        top1 = (top1,)
    # sources close last: the runners' sessions may map their temporary files
    with ExitStack() as stack:
        ref_src = stack.enter_context(load_source(reference, "reference"))
        cand_src = stack.enter_context(load_source(candidate, "candidate"))
        return _validate(
            ort, ref_src, cand_src, provider=provider, inputs=inputs, dims=dims, seed=seed,
            runs=runs, warmup=warmup, limits=limits, top1=frozenset(top1), progress=progress,
            stack=stack,
        )  # fmt: skip


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
    top1: frozenset[str],
    progress: bool,
    stack: ExitStack,
) -> ValidationReport:
    warnings: list[str] = []

    mode = provider
    if provider == "auto":
        mode = "cuda" if cuda_available() else "emulate"
    try:
        ref_runner, cand_runner, emulated = _open(ref_src, cand_src, mode, stack)
    except CudaStartError as e:
        if provider != "auto":
            raise ValidationError(f"provider cuda: {e}") from None
        warnings.append(
            f"provider auto: the CUDA provider is installed but failed to start ({e}); "
            "fell back to emulate"
        )
        mode = "emulate"
        ref_runner, cand_runner, emulated = _open(ref_src, cand_src, mode, stack)

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
    out_names = ref_runner.output_names
    check_names(limits, out_names)
    unknown_top1 = sorted(top1 - set(out_names))
    if unknown_top1:
        raise ValidationError(
            f"top1 for unknown output {', '.join(repr(u) for u in unknown_top1)} "
            f"(model outputs: {', '.join(out_names)})"
        )

    if inputs is None:
        feeds, ref_out = _run_reference_on_generated(
            ref_runner, ref_src, specs, dims=dims, seed=seed, warnings=warnings
        )
    else:
        feeds = load_inputs(inputs, specs)
        if dims:
            warnings.append("dims are ignored when inputs are given (shapes come from the data)")
        ref_out = run_once(ref_runner, feeds.arrays, f"reference {ref_src.label}")
    cand_feeds = dict(feeds.arrays)
    if emulated is not None:
        for name, low in emulated.low_inputs.items():
            if name in cand_feeds:
                rounded = cand_feeds[name].astype(_LOW_NP[low]).astype(np.float32)
                cand_feeds[name] = rounded

    cand_out = run_once(cand_runner, cand_feeds, f"candidate {cand_src.label}")
    results = [
        compare_output(
            n, ref_out[n], cand_out[n], limits.for_output(n), top1=True if n in top1 else None
        )
        for n in out_names
    ]
    skipped = [r.name for r in results if r.kind == "skipped"]
    if skipped:
        warnings.append(f"non-tensor outputs not compared: {', '.join(skipped)}")
    no_top1 = [r.name for r in results if r.name in top1 and r.top1 is None]
    if no_top1:
        warnings.append(
            f"top1 not computed for {', '.join(no_top1)}: it needs a float output whose last "
            "axis has 2 or more elements"
        )

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


def _open(ref_src: ModelSource, cand_src: ModelSource, mode: str, stack: ExitStack):
    """Sessions for ``mode``, closed by ``stack``; CudaStartError when CUDA does not start."""

    def session(src: ModelSource, role: str, device: str, plain: bool, **kw: Any) -> Runner:
        runner = make_session(src, role, device=device, disable_optimizations=plain, **kw)
        stack.callback(runner.close)
        return runner

    if mode == "emulate":
        emulated = build_emulated_model(cand_src.proto)
        ref = session(ref_src, "reference", "cpu", True)
        cand = session(cand_src, "candidate", "cpu", True, model_override=emulated.model)
        return ref, cand, emulated
    if mode == "cpu":
        return (
            session(ref_src, "reference", "cpu", False),
            session(cand_src, "candidate", "cpu", False),
            None,
        )
    if not cuda_available():
        ort = import_ort()
        raise ValidationError(
            "provider cuda: this onnxruntime has no CUDAExecutionProvider (it offers "
            f"{', '.join(ort.get_available_providers())}); install amp-convert[gpu] "
            "(onnxruntime-gpu) or use --provider emulate"
        )
    ref = session(ref_src, "reference", "cuda", False)
    cand = session(cand_src, "candidate", "cuda", False)
    return ref, cand, None


def _run_reference_on_generated(
    runner: Runner,
    src: ModelSource,
    specs: list[InputSpec],
    *,
    dims: Mapping[str, int] | None,
    seed: int,
    warnings: list[str],
) -> tuple[Inputs, dict[str, np.ndarray | None]]:
    """Random inputs the reference runs on: the default dims, else the next larger ones.

    Stops at the first set of dims the reference runs on and says which when it is not the
    first; one clear error naming the model, every shape tried and the way out when none runs.
    """
    tried: list[tuple[Inputs, str]] = []
    for attempt in dims_attempts(specs, dims):
        feeds = random_inputs(specs, src.proto, dims=attempt, seed=seed)
        try:
            out = run_once(runner, feeds.arrays, f"reference {src.label}")
        except RunError as e:
            tried.append((feeds, _ort_status(e.detail)))
            continue
        if tried:
            warnings.append(
                f"the reference cannot run on the default dims {_fmt_dims(tried[0][0].dims)} "
                f"({tried[0][1]}); these dims worked: {_fmt_dims(feeds.dims)} "
                "(set them with --dim to skip the search)"
            )
        return feeds, out
    shapes = "; ".join(
        ", ".join(f"{n}{list(a.shape)}" for n, a in f.arrays.items()) for f, _ in tried
    )
    keys = sorted({k for f, _ in tried for k in f.dims})
    how = f"set the dynamic dims with --dim NAME=VALUE ({', '.join(keys)}) or " if keys else ""
    raise ValidationError(
        f"reference {src.label} cannot run on the generated inputs; shapes tried: {shapes} "
        f"(on the first: {tried[0][1]}); {how}give real inputs with --inputs FILE.npz"
    )


def _ort_status(detail: str) -> str:
    """The node and its status message from ORT's run error, without the boilerplate."""
    node, sep, status = detail.partition(" Status Message: ")
    if not sep:
        return detail
    op = node.split("running ", 1)[-1].split(" node.", 1)[0] if "running " in node else ""
    status = status.split(" was false. ", 1)[-1]  # drop the source location of ORT's check
    return f"{op}: {status}" if op else status


def _fmt_dims(dims: Mapping[str, int]) -> str:
    return "(" + (", ".join(f"{k}={v}" for k, v in dims.items()) or "none") + ")"


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
