"""validate(): run the original and the converted model on the same inputs and compare.

The steps, in order (``_validate``): open both models for the provider after checking that ORT
loads them at its defaults (``sessions``), check that they have the same interface, find the
samples (``input_search``) and run the reference on them, run the candidate and compare every
output of every sample (``metrics``), time both when asked, and assemble the report.
``judge`` returns it as a `Verdict`, with the options and the samples it was judged on, for a
second reader of the same evidence (``validate --html``); ``validate`` returns the report.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_convert.core.dtypes import low_numpy_type
from amp_convert.errors import ValidationError
from amp_convert.files.output_set import OutputSet
from amp_convert.files.outputs import planned_inputs_file
from amp_convert.files.safe_write import Slot
from amp_convert.validation.decode import (
    DecodeResult,
    DecoderIO,
    badness,
    decoder_io,
    roll_out,
)
from amp_convert.validation.evidence import (
    ZERO_REFERENCE,
    Tolerances,
    all_zero,
    npz_bytes,
    weak_flags,
    weak_notes,
    weak_outputs,
)
from amp_convert.validation.input_search import Samples, gather_samples
from amp_convert.validation.inputs import InputSpec
from amp_convert.validation.metrics import OutputResult, check_names, compare_output
from amp_convert.validation.options import ValidateKwargs, ValidateOptions, resolve
from amp_convert.validation.progress import PhaseLog, progress_bar, progress_wanted
from amp_convert.validation.report import LatencyStats, ValidationReport
from amp_convert.validation.runtime import (
    ModelSource,
    Runner,
    import_ort,
    load_source,
    run_once,
    time_runs,
)
from amp_convert.validation.sessions import Sessions, open_sessions

OUT_OF_MEMORY = (
    "validation ran out of memory (the inputs, both models' outputs and ONNX Runtime's copies "
    "did not fit); give smaller inputs (--dim) or set AMP_CONVERT_MEMORY_BUDGET to what this "
    "machine can hold"
)
#: timed runs when ``runs`` is not given: only a GPU's latency means anything
DEFAULT_CUDA_RUNS = 20

ModelArg = str | os.PathLike | bytes | Any  # also onnx.ModelProto and onnx_ir.Model
RefOutputs = dict[str, np.ndarray | None]

if TYPE_CHECKING:  # the emulator loads only when a validation uses it (amp-convert start-up)
    from typing_extensions import Unpack

    from amp_convert.validation.emulate import EmulatedModel


@dataclass(frozen=True)
class Verdict:
    """One validation: the report, the options it ran with, and the samples it judged (their
    inputs and provenance; the reference outputs dropped), so that a second reader of the
    evidence (``validate --html``) probes exactly what the verdict ran on."""

    report: ValidationReport
    options: ValidateOptions
    samples: Samples[None]


def validate(
    reference: ModelArg,
    candidate: ModelArg,
    *,
    options: ValidateOptions | None = None,
    progress: bool = False,
    force: bool = False,
    **kwargs: Unpack[ValidateKwargs],
) -> ValidationReport:
    """Run ``reference`` (FP32) and ``candidate`` (converted) on the same inputs and provider.

    Models are paths, bytes, onnx.ModelProto or onnx_ir.Model; pass paths for models with external
    data. Options: a ValidateOptions as ``options`` and/or its fields as keywords (ValidateKwargs,
    over the object's values; an unknown name is an OptionError). Before anything runs, both are
    loaded once with ORT's default session options in a child
    process: a crash or load error there raises ``LoadCrashError`` (no verdict on a model users
    cannot load). ``provider``: ``cuda`` (ORT CUDA; an error if it cannot start), ``cpu`` (ORT
    CPU as is; errors understated), ``emulate`` (CPU, FP16/BF16 rounding reproduced), ``auto`` =
    cuda when it starts, else emulate with a warning. ``inputs``: None for seeded random inputs
    (``dims`` sets dynamic dims; defaults the reference cannot run on are grown, see
    input_dims.py), an ``.npz`` path / dict of arrays, or a list of them (one sample each, every
    sample judged). ``thresholds`` (see ``Thresholds``) decide the verdict: with none set, new
    NaN/Inf still fail and anything else is ``not_judged``. ``top1``: output names to report
    top-1 agreement for beyond the class-logit shapes. ``match``: output name → ``"sort"`` to
    compare it after sorting along its last axis. ``runs``: timed runs per model; None times 20
    runs on cuda and none under emulate/cpu (CPU latency says nothing about a GPU).
    ``progress``: one line per phase on stderr. ``decode_steps``: also run both models as
    decoders for that many greedy steps, each on its own KV cache and tokens (see decode.py);
    the report's ``decode`` holds every step, and every step is judged. ``save_inputs``: write
    the (first sample's) inputs as an ``.npz`` that ``inputs`` reads back. The report's
    ``weak_evidence`` flags random inputs and reference outputs near zero or nearly constant;
    on FAIL a warning gives the smallest thresholds that would pass when the result is near
    them, and says the output is broken (``broken``) when it is far from them (evidence.py).
    ``save_inputs`` goes through the output registry as the command line's does (never one of
    the models, their data or the inputs files; an existing file only with ``force``) and is
    written only when the validation reaches a verdict: an error leaves no new file.
    """
    req = resolve(options, kwargs)
    with ExitStack() as stack:  # the folder held open until the file is committed
        save = planned_inputs_file(
            stack, req.save_inputs, [reference, candidate], req.inputs, force
        )
        if save is not None:
            req = dataclasses.replace(req, save_inputs=save)
        outputs = stack.enter_context(OutputSet())
        report = validate_into(reference, candidate, req, outputs, progress=progress, force=force)
        outputs.commit()
    return report


def validate_into(
    reference: ModelArg,
    candidate: ModelArg,
    req: ValidateOptions,
    outputs: OutputSet,
    *,
    progress: bool = False,
    force: bool = False,
) -> ValidationReport:
    """``validate``, its files staged in ``outputs`` for the caller to commit with its own (a
    ``save_inputs`` path is planned here; a Slot is used as it is, its folder held by the
    caller until the commit)."""
    return judge(reference, candidate, req, outputs, progress=progress, force=force).report


def judge(
    reference: ModelArg,
    candidate: ModelArg,
    req: ValidateOptions,
    outputs: OutputSet,
    *,
    progress: bool = False,
    force: bool = False,
) -> Verdict:
    """``validate_into``, keeping what the verdict was judged on (see `Verdict`)."""
    ort = import_ort()
    log = PhaseLog(progress)
    # sources close last: the runners' sessions may map their temporary files
    with ExitStack() as stack:
        save = planned_inputs_file(
            stack, req.save_inputs, [reference, candidate], req.inputs, force
        )
        ref_src = stack.enter_context(load_source(reference, "reference"))
        cand_src = stack.enter_context(load_source(candidate, "candidate"))
        check_order(ref_src, cand_src)
        try:
            report, samples = _validate(ort, ref_src, cand_src, req, log, stack, save, outputs)
        except MemoryError:  # past the budget's estimate (outputs far larger than the inputs)
            raise ValidationError(OUT_OF_MEMORY) from None
    return Verdict(report, req, samples.inputs_only())


def _validate(
    ort: Any,
    ref_src: ModelSource,
    cand_src: ModelSource,
    req: ValidateOptions,
    log: PhaseLog,
    stack: ExitStack,
    save: Slot | None = None,
    outputs: OutputSet | None = None,
) -> tuple[ValidationReport, Samples[RefOutputs]]:
    """The steps of a validation, in order (see the module docstring)."""
    log.phase("loading both models once with ONNX Runtime's default options (crash check)")
    sessions = open_sessions(ref_src, cand_src, req.provider, stack, req.cuda_options)
    warnings = list(sessions.warnings)
    log.phase(f"opened both models for provider {sessions.mode}")
    _check_interface(sessions, req, warnings)
    ref, cand = sessions.reference, sessions.candidate
    specs = [InputSpec(n, t, s) for n, (t, s) in ref.inputs.items()]
    io = None if req.decode_steps is None else decoder_io(ref.inputs, ref.output_names)
    log.phase("running the reference")
    samples = gather_samples(
        specs,
        ref_src.proto,
        lambda feeds: run_once(ref, feeds, f"reference {ref_src.label}"),
        inputs=req.inputs,
        dims=_first_step_dims(io, req.dims),
        seed=req.seed,
        what=f"reference {ref_src.label}",
        reserve=req.decode_steps or 0,
    )
    warnings += samples.warnings
    if (
        save is not None and outputs is not None
    ):  # staged: committed with the verdict; generated inputs carry their origin
        outputs.stage(save, npz_bytes(samples.first.arrays, samples.provenance))
    if all_zero(s.result for s in samples.items):
        raise ValidationError(ZERO_REFERENCE.format(label=ref_src.label))
    weak = weak_outputs(s.result for s in samples.items)
    warnings += weak_notes(weak, samples.random, samples.first.arrays, samples.origin)
    log.phase(f"running the candidate on {samples.describe()}")
    needs = Tolerances()
    results, cand_feeds = _compare_samples(sessions, samples, req, cand_src.label, needs)
    decode = None
    if io is not None and req.decode_steps is not None:
        log.phase(f"decoding {req.decode_steps} steps with each model's own tokens and cache")
        decode = _decode(sessions, io, samples, req, cand_src.label, needs)
        results = _worst_of(results, decode)
    warnings += _result_warnings(results, req)
    warnings += needs.lines(results, req.thresholds)
    runs = req.runs
    if runs is None:
        runs = DEFAULT_CUDA_RUNS if sessions.mode == "cuda" else 0
    latency = None
    if runs > 0:
        log.phase(f"timing {runs} runs of each model after {req.warmup} warm-up runs")
        latency = _time_both(ref, cand, samples.first.arrays, cand_feeds, runs, req.warmup, log)
    report = _report(ort, ref_src, cand_src, sessions, samples, req, results, runs, latency)
    report.warnings.extend(warnings)
    report.decode = decode
    report.weak_evidence = weak_flags(weak, samples.random, samples.origin)
    report.broken = needs.broken(results)
    log.phase(report.result_line())
    return report, samples


def check_order(ref_src: ModelSource, cand_src: ModelSource) -> None:
    """Refuse swapped arguments: a reference amp-convert converted (its stamp) against a
    candidate it did not convert that holds less in low precision would "pass" with the roles
    reversed, and a CI gate would go green on the FP32 file. Judged by the stamp and by how much
    of each graph is low (``low_share``), never by whether the candidate holds any low value at
    all: an FP32 original may hold one FP16 round trip."""
    from amp_convert.pipeline import STAMP_KEY  # on use: the converter is not needed to validate
    from amp_convert.validation.emulate import low_dtype_names, low_share

    def stamped(src: ModelSource) -> bool:
        return any(p.key == STAMP_KEY for p in src.proto.metadata_props)

    if not stamped(ref_src) or stamped(cand_src):
        return
    ref_low = low_dtype_names(ref_src.proto)
    ref_share, cand_share = low_share(ref_src.proto), low_share(cand_src.proto)
    if not ref_low or ref_share <= cand_share:
        return
    raise ValidationError(
        f"the arguments look swapped: the reference {ref_src.label} was converted by amp-convert "
        f"({ref_share:.0%} of it in {', '.join(ref_low)}) and the candidate {cand_src.label} was "
        f"not ({cand_share:.0%} low); pass the original FP32 model first, then the converted one"
    )


def _check_interface(sessions: Sessions, req: ValidateOptions, warnings: list[str]) -> None:
    """Same inputs, the reference's outputs present; options name real outputs."""
    ref, cand = sessions.reference, sessions.candidate
    if set(ref.inputs) != set(cand.inputs):
        missing = sorted(set(ref.inputs) - set(cand.inputs))
        extra = sorted(set(cand.inputs) - set(ref.inputs))
        parts = [
            f"only the reference has {', '.join(missing)}" if missing else "",
            f"only the candidate has {', '.join(extra)}" if extra else "",
        ]
        differ = "; ".join(p for p in parts if p)
        raise ValidationError(f"the models take different inputs: {differ}")
    ref_out = ref.output_names
    cand_out = set(cand.output_names)
    missing = [n for n in ref_out if n not in cand_out]
    if missing:
        raise ValidationError(
            f"the candidate lacks output {', '.join(missing)} of the reference "
            f"(candidate outputs: {', '.join(sorted(cand_out))})"
        )
    extra = sorted(cand_out - set(ref_out))
    if extra:
        warnings.append(f"candidate-only outputs not compared: {', '.join(extra)}")
    check_names(req.thresholds, ref_out)
    for what, names in (("top1", req.top1), ("match", set(req.match))):
        unknown = sorted(set(names) - set(ref_out))
        if unknown:
            raise ValidationError(
                f"{what} for unknown output {', '.join(repr(u) for u in unknown)} "
                f"(model outputs: {', '.join(ref_out)})"
            )


def _candidate_feeds(feeds: dict[str, np.ndarray], emulated: EmulatedModel | None) -> dict:
    """The emulated candidate reads its low-precision inputs rounded, as the real one would."""
    cand_feeds = dict(feeds)
    if emulated is not None:
        for name, low in emulated.low_inputs.items():
            if name in cand_feeds:
                cand_feeds[name] = cand_feeds[name].astype(low_numpy_type(low)).astype(np.float32)
    return cand_feeds


def _compare_samples(
    sessions: Sessions,
    samples: Samples[RefOutputs],
    req: ValidateOptions,
    label: str,
    needs: Tolerances,
) -> tuple[list[OutputResult], dict[str, np.ndarray]]:
    """Per output, the worst result over the samples (a failure first, then the lowest cosine).

    Returns the results and the candidate's feeds of the first sample (for timing).
    """
    names = sessions.reference.output_names
    worst: dict[str, OutputResult] = {}
    first_feeds: dict[str, np.ndarray] = {}
    several = len(samples.items) > 1
    for i, sample in enumerate(samples.items):
        cand_feeds = _candidate_feeds(sample.inputs.arrays, sessions.emulated)
        if i == 0:
            first_feeds = cand_feeds
        cand_out = run_once(sessions.candidate, cand_feeds, f"candidate {label}")
        for n in names:
            r = compare_output(
                n,
                sample.result[n],
                cand_out[n],
                req.thresholds.for_output(n),
                top1=True if n in req.top1 else None,
                match=req.match.get(n, "position"),
            )
            if r.failed:  # a run that passes needs nothing looser (evidence.py)
                needs.see(n, sample.result[n], cand_out[n], req.thresholds, r.match)
            if several:
                r.sample = i
            if n not in worst or _badness(r) > _badness(worst[n]):
                worst[n] = r
    return [worst[n] for n in names], first_feeds


_badness = badness


def _first_step_dims(io: DecoderIO | None, dims: Mapping[str, int] | None) -> Any:
    """A merged decoder's first decode step runs without past: its past dims default to 0."""
    if io is None or not io.merged:
        return dims
    return {**dict.fromkeys(io.past_dims, 0), **(dims or {})}


def _decode(
    sessions: Sessions,
    io: DecoderIO,
    samples: Samples[RefOutputs],
    req: ValidateOptions,
    label: str,
    needs: Tolerances,
) -> DecodeResult:
    """Roll both models out from the first sample (decode.py), every output judged per step."""
    ref, cand = sessions.reference, sessions.candidate

    def compare(n: str, r: np.ndarray | None, c: np.ndarray | None) -> OutputResult:
        result = compare_output(
            n,
            r,
            c,
            req.thresholds.for_output(n),
            top1=True if n in req.top1 else None,
            match=req.match.get(n, "position"),
        )
        if result.failed:
            needs.see(n, r, c, req.thresholds, result.match)
        return result

    return roll_out(
        io,
        samples.first.arrays,
        req.decode_steps or 0,
        lambda feeds: run_once(ref, feeds, "reference (decoding)"),
        lambda feeds: run_once(
            cand, _candidate_feeds(feeds, sessions.emulated), f"candidate {label} (decoding)"
        ),
        compare,
        ref.output_names,
    )


def _worst_of(results: list[OutputResult], decode: DecodeResult) -> list[OutputResult]:
    """Each output's worst of the single run and every decode step (thresholds hold on all)."""
    worst = decode.worst()
    return [
        worst[r.name] if r.name in worst and badness(worst[r.name]) > badness(r) else r
        for r in results
    ]


def _result_warnings(results: list[OutputResult], req: ValidateOptions) -> list[str]:
    warnings = []
    skipped = [r.name for r in results if r.kind == "skipped" and r.reference_dtype == "non-tensor"]
    if skipped:
        warnings.append(f"non-tensor outputs not compared: {', '.join(skipped)}")
    no_top1 = [r.name for r in results if r.name in req.top1 and r.top1 is None]
    if no_top1:
        warnings.append(
            f"top1 not computed for {', '.join(no_top1)}: it needs a float output whose last "
            "axis has 2 or more elements"
        )
    return warnings


def _time_both(
    ref: Runner,
    cand: Runner,
    ref_feeds: dict[str, np.ndarray],
    cand_feeds: dict[str, np.ndarray],
    runs: int,
    warmup: int,
    log: PhaseLog,
) -> tuple[LatencyStats, LatencyStats]:
    enabled = log.enabled and progress_wanted()
    with progress_bar(2 * runs, "timing reference", enabled) as bar:
        ref_times = time_runs(ref, ref_feeds, runs=runs, warmup=warmup, tick=bar.tick)
        bar.phase("timing candidate")
        cand_times = time_runs(cand, cand_feeds, runs=runs, warmup=warmup, tick=bar.tick)
    return LatencyStats.from_times(ref_times), LatencyStats.from_times(cand_times)


def _report(
    ort: Any,
    ref_src: ModelSource,
    cand_src: ModelSource,
    sessions: Sessions,
    samples: Samples[RefOutputs],
    req: ValidateOptions,
    results: list[OutputResult],
    runs: int,
    latency: tuple[LatencyStats, LatencyStats] | None,
) -> ValidationReport:
    first = samples.first
    return ValidationReport(
        reference=ref_src.label,
        candidate=cand_src.label,
        provider_requested=req.provider,
        provider=sessions.mode,
        provider_options=dict(req.cuda_options) if sessions.mode == "cuda" else {},
        ort_providers=sessions.candidate.providers,
        onnxruntime_version=str(getattr(ort, "__version__", "unknown")),
        graph_optimizations=(
            "default (the emulated candidate: disabled)"
            if sessions.mode == "emulate"
            else "default"
        ),
        inputs_source=first.source,
        seed=req.seed,
        dims=first.dims,
        input_shapes=first.shapes,
        input_dtypes=first.dtypes,
        thresholds=req.thresholds.to_dict(),
        outputs=results,
        warmup=req.warmup,
        runs=runs,
        reference_latency=None if latency is None else latency[0],
        candidate_latency=None if latency is None else latency[1],
        emulation=None if sessions.emulated is None else sessions.emulated.summary(),
        samples=[
            {"source": s.inputs.source, "dims": dict(s.inputs.dims), "shapes": s.inputs.shapes}
            for s in samples.items
        ]
        if len(samples.items) > 1
        else [],
    )
