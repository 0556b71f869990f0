"""The two ORT sessions a validation compares, opened only after both models load at ORT defaults.

``open_sessions`` picks the mode (providers.provider_mode: ``auto`` → cuda when it is offered, else
emulate; and emulate again when it is offered but does not start), runs the load
check (``load_check``: a child process per check, so a crash is reported instead of suffered),
opens reference and candidate for the mode, and collects what the reader must know about the
mode and the models.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from amp_convert.errors import ValidationError
from amp_convert.validation.load_check import (
    ModelFile,
    ModelToCheck,
    check_default_load,
)
from amp_convert.validation.options import PROVIDERS as PROVIDERS  # re-exported: the one list
from amp_convert.validation.providers import provider_mode, runtime_target
from amp_convert.validation.runtime import (
    CPU_EP,
    CUDA_EP,
    CudaStartError,
    ModelSource,
    Runner,
    make_session,
)

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

if TYPE_CHECKING:  # the emulator loads only when a validation uses it (amp-convert start-up)
    from amp_convert.validation.emulate import EmulatedModel


@dataclass
class Sessions:
    """Reference and candidate runners for ``mode``, and the warnings opening them raised."""

    mode: str  # "cuda", "cpu" or "emulate"
    reference: Runner
    candidate: Runner
    emulated: EmulatedModel | None
    warnings: list[str] = field(default_factory=list)


def default_load_check(
    ref_src: ModelSource, cand_src: ModelSource, mode: str, *, strict: bool = True
) -> list[str]:
    """Both models loaded once with ORT's default session options in a child (see load_check).

    A crash always raises LoadCrashError. A load error raises too, except a missing CPU kernel
    under emulate (a warning: emulation does not need it) and, when not ``strict``, any error
    (provider auto probing CUDA: the session that follows decides).
    """
    providers = [CUDA_EP, CPU_EP] if mode == "cuda" else [CPU_EP]
    with ModelFile(ref_src.ort_input) as ref, ModelFile(cand_src.ort_input) as cand:
        models = [
            ModelToCheck(ref.path, f"the original model ({ref_src.label})"),
            ModelToCheck(cand.path, f"the converted model ({cand_src.label})"),
        ]
        return check_default_load(
            models,
            providers=providers,
            tolerate_missing_kernels=mode == "emulate",
            tolerate_errors=not strict,
        )


def open_sessions(
    ref_src: ModelSource,
    cand_src: ModelSource,
    provider: str,
    stack: ExitStack,
    cuda_options: Mapping[str, str] | None = None,
) -> Sessions:
    """Check both models load at ORT defaults, then open them for the mode (see the module);
    on CUDA with the provider options ``cuda_options`` (``--cuda-option``)."""
    warnings: list[str] = []
    mode = provider_mode(provider)
    warnings += default_load_check(ref_src, cand_src, mode, strict=provider != "auto")
    try:
        ref, cand, emulated = _open(ref_src, cand_src, mode, stack, cuda_options)
    except CudaStartError as e:
        if provider != "auto":
            raise ValidationError(f"provider cuda: {e}") from None
        warnings.append(
            f"provider auto: the CUDA provider is installed but failed to start ({e}); "
            "fell back to emulate"
        )
        mode = "emulate"
        warnings += default_load_check(ref_src, cand_src, mode)
        ref, cand, emulated = _open(ref_src, cand_src, mode, stack)
    if cuda_options and mode != "cuda":
        # auto on an ORT without the CUDA provider, or after CUDA failed to start
        warnings.append(f"provider {provider} ran {mode}: --cuda-option was not used")
    warnings += _mode_warnings(mode, ref_src, cand_src, emulated)
    return Sessions(mode, ref, cand, emulated, warnings)


def _mode_warnings(
    mode: str, ref_src: ModelSource, cand_src: ModelSource, emulated: EmulatedModel | None
) -> list[str]:
    warnings = []
    if mode == "cpu":
        warnings.append(CPU_WARNING)
    elif mode == "emulate":
        warnings.append(EMULATE_WARNING)
    from amp_convert.validation.emulate import low_dtype_names

    if not low_dtype_names(cand_src.proto):
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
    return warnings


def _open(
    ref_src: ModelSource,
    cand_src: ModelSource,
    mode: str,
    stack: ExitStack,
    cuda_options: Mapping[str, str] | None = None,
) -> tuple[Runner, Runner, EmulatedModel | None]:
    """Sessions for ``mode``, closed by ``stack``; CudaStartError when CUDA does not start."""

    def session(src: ModelSource, role: str, device: str, plain: bool, **kw: Any) -> Runner:
        runner = make_session(src, role, device=device, disable_optimizations=plain, **kw)
        stack.callback(runner.close)
        return runner

    if mode == "emulate":
        from amp_convert.validation.emulate import build_emulated_model

        emulated = build_emulated_model(cand_src.proto, cand_src.base_dir, runtime_target(mode))
        # the reference as users run it (ORT's default optimisations: constant folding feeds
        # prepacking kernels their weights); only the emulated copy keeps its Casts unoptimised
        ref = session(ref_src, "reference", "cpu", False)
        cand = session(cand_src, "candidate", "cpu", True, model_override=emulated.model)
        return ref, cand, emulated
    if mode == "cpu":
        return (
            session(ref_src, "reference", "cpu", False),
            session(cand_src, "candidate", "cpu", False),
            None,
        )
    ref = session(ref_src, "reference", "cuda", False, cuda_options=cuda_options)
    cand = session(cand_src, "candidate", "cuda", False, cuda_options=cuda_options)
    return ref, cand, None
