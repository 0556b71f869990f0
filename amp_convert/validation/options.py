"""What a validation (and ``--auto``'s judging) is asked for, declared once and checked once.

`ValidateOptions` is built by ``validate()``, by the command line (``validate``, ``convert
--validate``) and by ``--auto``. Each field is declared once with its metadata (flag, help, kind;
options/declare.py): the command line's flags, their defaults, the names list and the flags
``--auto`` refuses are generated from it, and ``__post_init__`` checks and normalises every value
(the one parser of ``--dim``, ``--match`` and the threshold flags), so the steps that read it
trust it. ``PROVIDERS`` is the one list of providers; ``--auto``'s own defaults (provider,
threshold) and the providers it refuses are decided here too (`auto_judging`). Light imports only:
the command line builds these without loading onnxruntime.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from amp_convert.cost.dims import Dims
from amp_convert.errors import OptionError, ValidationError
from amp_convert.options import declare
from amp_convert.options.declare import ThresholdFlag, check_names, option
from amp_convert.validation.thresholds import (
    DEFAULT_THRESHOLDS_SPEC,
    MATCH_MODES,
    Thresholds,
    check_error_stat,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from amp_convert.options.convert import ConvertOptions

#: most decode steps a validation runs (validation/decode.py)
MAX_DECODE_STEPS = 10_000
#: ``auto``: cuda when it starts, else emulate; cpu: ORT CPU as is; emulate: CPU with rounding
PROVIDERS = ("auto", "cuda", "cpu", "emulate")
#: providers ``--auto`` refuses, and why
AUTO_REFUSED_PROVIDERS = {
    "cpu": "--auto needs --provider emulate or cuda (ORT CPU runs FP16 nodes in FP32 and hides "
    "the errors the search looks for)"
}
#: what auto_convert judges on when the caller gives no provider (the command line's is ``auto``)
AUTO_PROVIDER = "emulate"
#: the threshold ``--auto`` (and auto_convert, the Olive pass) meets when none is given
AUTO_MIN_COSINE = float(DEFAULT_THRESHOLDS_SPEC["min_cosine"])


class ValidateKwargs(TypedDict, total=False):
    """ValidateOptions' fields as keywords of ``validate()``, in the loose forms they accept."""

    provider: str
    dims: Mapping[str, int] | Iterable[str] | Iterable[tuple[str, int]] | None
    inputs: Any
    seed: int
    runs: int | None
    warmup: int
    thresholds: Thresholds | Mapping[str, Any] | None
    top1: str | Collection[str]
    match: Mapping[str, str] | Iterable[str] | None
    decode_steps: int | None
    save_inputs: str | os.PathLike[str] | None
    report_only: bool
    cuda_options: Mapping[str, str | int | bool] | Iterable[str] | None


@dataclass(frozen=True)
class ValidateOptions:
    """Provider, inputs and thresholds of one validation; see ``validate()`` for their meaning."""

    provider: str = option(
        "auto",
        ("--provider",),
        "cuda, emulate (FP16/BF16 rounding on the CPU), cpu (errors understated) or auto "
        "(cuda if it starts, else emulate).",
        "choice",
        choices=PROVIDERS,
        case_sensitive=True,
    )
    dims: Mapping[str, int] = option(
        Dims(),
        ("--dim",),
        "Size of a dynamic dim (repeatable; INPUT[AXIS]=VALUE for an unnamed one). Defaults: "
        "batch 1, image H/W 224, others 128.",
        "dims",
        metavar="NAME=VALUE",
        param="dim",
    )
    #: None (seeded random inputs), an ``.npz`` path or dict of arrays, or a list of them
    inputs: Any = option(
        None,
        ("--inputs",),
        "Real inputs, one array per model input by name (repeatable: one sample each).",
        "inputs",
        metavar="FILE.npz",
    )
    seed: int = option(0, ("--seed",), "Seed of the random inputs.", "int", min=0)
    runs: int | None = option(
        None,
        ("--runs",),
        "Timed runs per model (default 20 on cuda; none on emulate and cpu, whose latency "
        "means nothing).",
        "int",
        min=0,
        auto=False,
    )
    warmup: int = option(3, ("--warmup",), "Untimed runs before timing.", "int", min=0, auto=False)
    thresholds: Thresholds = option(
        default_factory=Thresholds,
        kind="thresholds",
        parts=(
            ThresholdFlag(
                "atol",
                "Absolute tolerance: pass when |cand-ref| <= atol + rtol*|ref| per element.",
            ),
            ThresholdFlag("rtol", "Relative tolerance (see --atol)."),
            ThresholdFlag(
                "min_cosine",
                "Lowest cosine similarity (0.999 when no threshold is given).",
            ),
            ThresholdFlag(
                "max_nan",
                "Most new NaN/Inf values allowed (default 0).",
                metavar="[NAME:]COUNT",
            ),
            ThresholdFlag(
                "error_stat",
                "Check --atol/--rtol on a statistic of the error instead of every element: max, "
                "mean, median or pNN (p99.9).",
                metavar="[NAME:]STAT",
            ),
            ThresholdFlag(
                "max_mismatch",
                "Share of the elements (0-1) allowed past the --atol/--rtol bound (1e-3 for "
                "probability maps).",
                metavar="[NAME:]FRACTION",
            ),
        ),
    )
    report_only: bool = option(
        False,
        ("--report-only",),
        "Judge nothing: no default thresholds, the result is NOT JUDGED (new NaN/Inf still fail).",
        "flag",
        auto=False,
    )
    top1: frozenset[str] = option(
        frozenset(),
        ("--top1",),
        "Report top-1 agreement for output NAME too (repeatable; shown anyway for [N, C] "
        "class scores).",
        "multiple",
        metavar="NAME",
        auto=False,
    )
    match: Mapping[str, str] = option(
        default_factory=dict,
        flags=("--match",),
        help="Compare output NAME after sorting along the last axis (repeatable): scores after "
        "NMS or TopK.",
        kind="multiple",
        metavar="NAME:sort",
        auto=False,
    )
    decode_steps: int | None = option(
        None,
        ("--decode-steps",),
        f"Also run both models as decoders for N greedy steps (at most {MAX_DECODE_STEPS}), "
        "each on its own KV cache; thresholds apply to every step.",
        "int",
        min=1,
        max=MAX_DECODE_STEPS,
        metavar="N",
        commands=("validate",),
    )
    #: write the (first sample's) inputs here as an ``.npz`` that ``inputs`` reads back (on the
    #: command line an output of each command, declared with its others)
    save_inputs: str | os.PathLike[str] | None = option(None)
    cuda_options: Mapping[str, str] = option(
        default_factory=dict,
        flags=("--cuda-option",),
        help="A CUDA provider option for both sessions (repeatable), e.g. prefer_nhwc=1, to time "
        "the model as it is served.",
        kind="multiple",
        metavar="KEY=VALUE",
        param="cuda_option",
        auto=False,
    )

    def __post_init__(self) -> None:
        put = functools.partial(object.__setattr__, self)
        if self.provider not in PROVIDERS:
            raise ValidationError(
                f"provider {self.provider!r}: expected one of {', '.join(PROVIDERS)}"
            )
        for name in ("runs", "warmup", "seed"):
            value = getattr(self, name)
            if name == "runs" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
                raise ValidationError(f"{name} must be a non-negative integer, got {value!r}")
            put(name, int(value))
        steps = self.decode_steps
        if steps is not None:
            if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 1:
                raise ValidationError(f"decode steps must be an integer >= 1, got {steps!r}")
            if steps > MAX_DECODE_STEPS:
                raise ValidationError(
                    f"decode steps: at most {MAX_DECODE_STEPS} (each step runs both models), "
                    f"got {steps}"
                )
            put("decode_steps", int(steps))
        put("dims", Dims(self.dims))
        put("inputs", _inputs(self.inputs))
        put("thresholds", _judged_by(_thresholds(self.thresholds), bool(self.report_only)))
        put("report_only", bool(self.report_only))
        put("top1", frozenset((self.top1,) if isinstance(self.top1, str) else self.top1))
        put("match", parse_match(self.match))
        put("cuda_options", parse_cuda_options(self.cuda_options))
        if self.cuda_options and self.provider in ("cpu", "emulate"):
            raise ValidationError(
                f"--cuda-option sets options of ONNX Runtime's CUDA provider: it needs "
                f"--provider cuda (or auto), not {self.provider}"
            )

    @classmethod
    def from_kwargs(cls, **kwargs: Unpack[ValidateKwargs]) -> ValidateOptions:
        """The options from keywords; an unknown name is an OptionError."""
        _check_names(kwargs)
        return cls(**kwargs)  # type: ignore[arg-type]  # loose values, normalised above

    def replace(self, **kwargs: Unpack[ValidateKwargs]) -> ValidateOptions:
        """These options with some changed (checked again)."""
        _check_names(kwargs)
        return dataclasses.replace(self, **kwargs)  # type: ignore[arg-type]


def _check_names(kwargs: Mapping[str, Any]) -> None:
    check_names(kwargs, declare.option_names(ValidateOptions), "validation option")


def resolve(options: ValidateOptions | None, kwargs: Mapping[str, Any]) -> ValidateOptions:
    """An entry point's options: ``options`` (default ValidateOptions()) with ``kwargs`` over it."""
    if options is None:
        return ValidateOptions.from_kwargs(**kwargs)
    if not isinstance(options, ValidateOptions):
        raise OptionError(f"options must be a ValidateOptions, not {type(options).__name__}")
    return options.replace(**kwargs) if kwargs else options


def parse_match(items: Any) -> dict[str, str]:
    """``{"boxes": "sort"}`` or ``("boxes:sort",)`` → ``{"boxes": "sort"}``."""
    if isinstance(items, Mapping):
        bad = sorted({str(m) for m in items.values() if m not in MATCH_MODES})
        if bad:
            raise ValidationError(f"match {bad[0]!r}: expected one of {', '.join(MATCH_MODES)}")
        return {str(k): str(v) for k, v in items.items()}
    if isinstance(items, str):
        items = (items,)
    out: dict[str, str] = {}
    for item in items or ():
        name, sep, mode = str(item).rpartition(":")
        if not sep or not name or mode not in MATCH_MODES:
            raise ValidationError(
                f"--match {item!r}: expected NAME:MODE with MODE one of {', '.join(MATCH_MODES)}"
            )
        if out.get(name, mode) != mode:
            raise ValidationError(f"--match given twice for output {name!r}")
        out[name] = mode
    return out


def parse_cuda_options(items: Any) -> dict[str, str]:
    """``{"prefer_nhwc": 1}`` or ``("prefer_nhwc=1",)`` → ``{"prefer_nhwc": "1"}`` (ORT takes
    provider options as text; True/False are 1/0). ONNX Runtime checks the names themselves."""
    if items is None:
        return {}
    pairs: list[tuple[Any, Any]]
    if isinstance(items, Mapping):
        pairs = list(items.items())
    else:
        pairs = []
        for item in (items,) if isinstance(items, str) else items:
            key, sep, value = str(item).partition("=")
            if not sep:
                raise ValidationError(f"--cuda-option {item!r}: expected KEY=VALUE")
            pairs.append((key, value))
    out: dict[str, str] = {}
    for key, value in pairs:
        name = str(key).strip()
        text = str(int(value)) if isinstance(value, bool) else str(value).strip()
        if not name or not text or not name.replace("_", "").isalnum():
            raise ValidationError(
                f"--cuda-option {key}={value}: expected KEY=VALUE with a name of letters, "
                "digits and _ and a value"
            )
        if out.get(name, text) != text:
            raise ValidationError(f"--cuda-option {name} given twice with different values")
        out[name] = text
    return out


def _inputs(inputs: Any) -> Any:
    """The command line's repeatable --inputs as the API's forms: one file, or a list of them."""
    if isinstance(inputs, tuple):
        return inputs[0] if len(inputs) == 1 else list(inputs)
    return inputs


@dataclass(frozen=True)
class ThresholdOption:
    """A threshold flag's parsed values: the global one and per-output overrides."""

    value: float | int | None = None
    per_output: dict[str, float | int] = dataclasses.field(default_factory=dict)


def parse_threshold(key: str, items: tuple[str, ...] | list[str]) -> ThresholdOption:
    """``("1e-2", "logits:5e-2")`` → ThresholdOption(0.01, {"logits": 0.05}).

    The name is everything before the last ``:``, so TF-style names such as ``output:0:1e-3``
    work.
    """
    glob: float | int | None = None
    per: dict[str, float | int] = {}
    flag = "--" + key.replace("_", "-")
    glob_stat: list[str] = []  # --error-stat takes a name, not a number
    stats: dict[str, str] = {}
    for item in items:
        name, sep, text = item.rpartition(":")
        if key == "error_stat":
            if sep and not name:
                raise ValidationError(f"{flag} {item!r}: empty output name before ':'")
            stat = check_error_stat(text)
            if not sep:
                glob_stat.append(stat)
            elif name in stats:
                raise ValidationError(f"{flag} given twice for output {name!r}")
            else:
                stats[name] = stat
            continue
        try:
            value: float | int = int(text) if key == "max_nan" else float(text)
        except ValueError:
            kind = "an integer" if key == "max_nan" else "a number"
            raise ValidationError(f"{flag} {item!r}: expected [NAME:]VALUE with {kind}") from None
        if not math.isfinite(value):
            raise ValidationError(f"{flag} {item!r}: must be a finite number")
        if value < 0:
            raise ValidationError(f"{flag} {item!r}: must not be negative")
        if key == "min_cosine" and value > 1:
            raise ValidationError(f"{flag} {item!r}: a cosine is at most 1")
        if key == "max_mismatch" and value > 1:
            raise ValidationError(f"{flag} {item!r}: a share of the elements is at most 1")
        if sep and not name:
            raise ValidationError(f"{flag} {item!r}: empty output name before ':'")
        if not sep:
            if glob is not None:
                raise ValidationError(f"{flag} given twice without an output name")
            glob = value
        else:
            if name in per:
                raise ValidationError(f"{flag} given twice for output {name!r}")
            per[name] = value
    if key == "error_stat":
        if len(glob_stat) > 1:
            raise ValidationError(f"{flag} given twice without an output name")
        return ThresholdOption(glob_stat[0] if glob_stat else None, stats)  # type: ignore[arg-type]
    return ThresholdOption(glob, per)


def _judged_by(thresholds: Thresholds, report_only: bool) -> Thresholds:
    """The thresholds a validation judges by: the user's, else the defaults every command
    shares (``DEFAULT_THRESHOLDS_SPEC``), else none with ``report_only`` (and then no user
    threshold either: asking for both is a contradiction)."""
    defaults = Thresholds.coerce(DEFAULT_THRESHOLDS_SPEC)
    if report_only:
        if thresholds == defaults:  # options replaced with report_only: the defaults go
            return Thresholds()
        if thresholds.any_set:
            raise ValidationError(
                "--report-only judges nothing: drop it, or drop the thresholds "
                f"({', '.join(k for k, v in thresholds.to_dict().items() if v is not None)})"
            )
        return thresholds
    if thresholds.any_set:
        return thresholds
    return dataclasses.replace(defaults, per_output=thresholds.per_output)  # names still checked


def _thresholds(value: Any) -> Thresholds:
    """Thresholds from a Thresholds, a dict of values, or the flags' ``[NAME:]VALUE`` items
    (``{"atol": ("1e-2", "logits:5e-2")}``, what the command line gives)."""
    if not isinstance(value, Mapping):
        return Thresholds.coerce(value)
    flat: dict[str, Any] = {}
    per: dict[str, dict[str, Any]] = {
        str(n): dict(t.to_dict() if isinstance(t, Thresholds) else t)
        for n, t in (value.get("per_output") or {}).items()
    }
    for key, raw in value.items():
        if key == "per_output":
            continue
        if not isinstance(raw, tuple | list):
            flat[key] = raw
            continue
        parsed = parse_threshold(key, tuple(str(r) for r in raw))
        if parsed.value is not None:
            flat[key] = parsed.value
        for name, v in parsed.per_output.items():
            per.setdefault(name, {})[key] = v
    return Thresholds.coerce({**flat, "per_output": per} if per else flat)


def provider_refused_by_auto(provider: str) -> None:
    """``--auto`` refuses a provider that would hide the errors it searches for."""
    refused = AUTO_REFUSED_PROVIDERS.get(provider)
    if refused is not None:
        raise OptionError(refused)


def auto_judging(
    validation: ValidateOptions | None, options: ConvertOptions, **given: Any
) -> ValidateOptions:
    """What ``--auto`` judges with: ``validation`` (default: `AUTO_PROVIDER`) with the keywords
    given over it; the conversion's --dim sizes the random inputs unless the validation has its
    own."""
    base = validation if validation is not None else ValidateOptions(provider=AUTO_PROVIDER)
    if not isinstance(base, ValidateOptions):
        raise OptionError(f"validation must be a ValidateOptions, not {type(base).__name__}")
    changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if not base.dims and options.dims:
        changes["dims"] = options.dims
    judge = dataclasses.replace(base, **changes) if changes else base
    provider_refused_by_auto(judge.provider)
    return judge


def auto_thresholds(thresholds: Any, **flat: Any) -> Thresholds:
    """``--auto``'s limits: `thresholds` with the flat keywords over them; `AUTO_MIN_COSINE`
    when nothing is set."""
    base = Thresholds.coerce(thresholds)
    extra = {k: v for k, v in flat.items() if v is not None}
    if extra:
        base = Thresholds.coerce({**base.to_dict(), **extra})
    if not base.active:
        base = Thresholds.coerce({**base.to_dict(), "min_cosine": AUTO_MIN_COSINE})
    return base
