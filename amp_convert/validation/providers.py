"""What a validation's provider means: the one reading of ``auto``, and the runtime each mode
judges for.

``auto`` is cuda when this ONNX Runtime offers the CUDA provider, else emulate (sessions.py falls
back to emulate when CUDA is offered but fails to start); an explicit ``cuda`` it does not offer
is an error, never a silent fallback. A mode judges for a Target: cuda runs ORT CUDA, emulate
reproduces ORT CUDA's kernels (the sums they hold in the low type too), cpu runs ORT CPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amp_convert.errors import ValidationError
from amp_convert.validation import runtime

if TYPE_CHECKING:
    from amp_convert.targets import Target

#: the execution provider each validation mode judges for: emulate reproduces ORT CUDA's kernels
MODE_PROVIDERS = {"cuda": runtime.CUDA_EP, "emulate": runtime.CUDA_EP, "cpu": runtime.CPU_EP}


def provider_mode(provider: str) -> str:
    """The mode a provider runs in (see the module docstring)."""
    if provider == "auto":
        return "cuda" if runtime.cuda_available() else "emulate"
    if provider == "cuda" and not runtime.cuda_available():
        ort = runtime.import_ort()
        raise ValidationError(
            "provider cuda: this onnxruntime has no CUDAExecutionProvider (it offers "
            f"{', '.join(ort.get_available_providers())}); install amp-convert[gpu] "
            "(onnxruntime-gpu) or use --provider emulate"
        )
    return provider


def runtime_target(mode: str) -> Target:
    """The Target a validation mode (``cuda``, ``emulate``, ``cpu``; ``auto`` as provider_mode
    reads it) judges for: its kernels, and the sums they hold in the low type."""
    from amp_convert.targets import target_for_provider  # on use: the CLI starts without it

    mode = provider_mode(mode) if mode == "auto" else mode
    target = target_for_provider(MODE_PROVIDERS[mode])
    assert target is not None, mode  # every mode's provider is a shipped target
    return target
