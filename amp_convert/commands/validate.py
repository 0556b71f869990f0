"""CLI pieces for validation, shared by ``amp-convert validate`` and ``convert --validate``.

* ``validate_command``: the click command ``validate ORIGINAL CONVERTED``;
* ``validation_options``: decorator adding the validation options (not ``--report``, ``--junit``
  or ``-q``, which each command names itself) as keyword arguments ``provider, dim, inputs, seed,
  runs, warmup, atol, rtol, min_cosine, max_nan, top1, match``;
* ``run_cli_validation``: runs, prints the table, writes the reports, returns the exit code:
  0 when nothing failed (verdict ``pass``, or ``not_judged`` when no threshold was set: the table
  then ends with "result: NOT JUDGED", never PASS), 1 when an output fails (a threshold, a shape
  mismatch, or new NaN/Inf, which fail even without thresholds), 2 on an error such as an
  unreadable model or inputs file, an explicit ``--provider cuda`` that cannot start, or a
  reference that runs on none of the generated inputs.

Provider: ``auto`` picks cuda when onnxruntime offers the CUDA provider and it starts, else
emulate (a warning says so when CUDA is installed but fails to start); an explicit ``cuda`` that
cannot start is an error, never a silent fallback.

Threshold options take a global value and/or repeatable per-output overrides:
``--atol 1e-2 --atol logits:5e-2`` (the name is everything before the last ``:``, so TF-style
names such as ``output:0:1e-3`` work).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from amp_convert.commands.paths import InputPath, OutputPath, declared_inputs, declared_outputs
from amp_convert.core.user_text import printable, terminal
from amp_convert.cost.dims import parse_dims
from amp_convert.errors import AmpConvertError, ValidationError
from amp_convert.files.output_set import OutputSet
from amp_convert.files.outputs import model_files, plan_outputs
from amp_convert.files.safe_write import Slot, sigterm_cleans_up
from amp_convert.validation.decode import MAX_DECODE_STEPS
from amp_convert.validation.metrics import Thresholds
from amp_convert.validation.options import PROVIDERS, ValidateOptions, parse_match

if TYPE_CHECKING:  # annotations only: the validation library loads when a command runs
    from amp_convert.validation.report import ValidationReport

F = TypeVar("F", bound=Callable[..., Any])

#: keyword arguments ``validation_options`` adds to the decorated command
VALIDATION_OPTION_NAMES = (
    "provider", "dim", "inputs", "seed", "runs", "warmup", "atol", "rtol", "min_cosine", "max_nan",
    "top1", "match",
)  # fmt: skip
_THRESHOLD_KEYS = ("atol", "rtol", "min_cosine", "max_nan")


@dataclass(frozen=True)
class ThresholdOption:
    """A threshold option's parsed values: the global one and per-output overrides."""

    value: float | int | None = None
    per_output: dict[str, float | int] = field(default_factory=dict)


def parse_threshold(key: str, items: tuple[str, ...] | list[str]) -> ThresholdOption:
    """``("1e-2", "logits:5e-2")`` → ThresholdOption(0.01, {"logits": 0.05})."""
    glob: float | int | None = None
    per: dict[str, float | int] = {}
    flag = "--" + key.replace("_", "-")
    for item in items:
        name, sep, text = item.rpartition(":")
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
    return ThresholdOption(glob, per)


def _dim_callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict:
    try:
        return parse_dims(value)
    except AmpConvertError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


def _match_callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict:
    try:
        return parse_match(value)
    except ValidationError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


def _threshold_callback(key: str) -> Callable[..., ThresholdOption]:
    def callback(
        ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
    ) -> ThresholdOption:
        try:
            return parse_threshold(key, value)
        except ValidationError as e:
            raise click.BadParameter(str(e), ctx=ctx, param=param) from None

    return callback


def validation_options(f: F) -> F:
    """Add the validation options (everything but --report/--junit/-q) to a click command."""
    options = [
        click.option(
            "--provider", type=click.Choice(PROVIDERS), default="auto", show_default=True,
            help="cuda: ORT CUDA (an error if it cannot start); cpu: ORT CPU as is (FP16 errors "
            "understated); emulate: CPU with FP16/BF16 rounding reproduced; auto: cuda if it "
            "starts, else emulate with a warning.",
        ),
        click.option(
            "--dim", "dim", multiple=True, metavar="NAME=VALUE", callback=_dim_callback,
            help="Value of a dynamic dim for random inputs (repeatable; unnamed dims and ?, -1, "
            "None as INPUT[AXIS]=VALUE). Defaults, the cost estimate's: batches 1, image H/W 224, "
            "num_channels 3, others 128; larger ones (256/1024, 640 for image H/W) are tried "
            "when the original cannot run on them.",
        ),
        click.option(
            "--inputs", type=InputPath(),
            multiple=True, metavar="FILE.npz",
            help="Real inputs: one array per model input, by name (repeatable: each file is a "
            "sample, every sample is judged).",
        ),
        click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Seed of the random inputs."),
        click.option("--runs", type=click.IntRange(min=0), default=None,
                     help="Timed runs per model (0 skips timing). Default: 20 on cuda, none "
                     "under emulate or cpu, whose latency says nothing about a GPU."),
        click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True,
                     help="Untimed runs before timing."),
        click.option(
            "--atol", multiple=True, metavar="[NAME:]VALUE", callback=_threshold_callback("atol"),
            help="Absolute tolerance: pass when |cand-ref| <= atol + rtol*|ref| elementwise.",
        ),
        click.option(
            "--rtol", multiple=True, metavar="[NAME:]VALUE", callback=_threshold_callback("rtol"),
            help="Relative tolerance (see --atol).",
        ),
        click.option(
            "--min-cosine", "min_cosine", multiple=True, metavar="[NAME:]VALUE",
            callback=_threshold_callback("min_cosine"),
            help="Lowest acceptable cosine similarity.",
        ),
        click.option(
            "--max-nan", "max_nan", multiple=True, metavar="[NAME:]COUNT",
            callback=_threshold_callback("max_nan"),
            help="Most new NaN/Inf values allowed (default 0: new NaN/Inf fail even without "
            "other thresholds).",
        ),
        click.option(
            "--top1", "top1", multiple=True, metavar="NAME",
            help="Also report top-1 agreement (argmax over the last axis) for output NAME "
            "(repeatable); it is shown anyway for class logits, rank 2 [N, C] with C > 1.",
        ),
        click.option(
            "--match", "match", multiple=True, metavar="NAME:sort", callback=_match_callback,
            help="Compare output NAME after sorting both along the last axis (repeatable): "
            "order-insensitive outputs such as scores after NMS or TopK, where near-equal "
            "values may swap places. The report names the outputs compared that way.",
        ),
    ]  # fmt: skip
    for option in reversed(options):
        f = option(f)
    return f


def thresholds_from_options(values: Mapping[str, Any]) -> Thresholds:
    """Build Thresholds from the four threshold option values (parsed or raw strings)."""
    glob: dict[str, Any] = {}
    per: dict[str, dict[str, Any]] = {}
    for key in _THRESHOLD_KEYS:
        raw = values.get(key)
        if raw is None:
            continue
        opt = raw if isinstance(raw, ThresholdOption) else _coerce_threshold(key, raw)
        if opt.value is not None:
            glob[key] = opt.value
        for name, v in opt.per_output.items():
            per.setdefault(name, {})[key] = v
    return Thresholds.coerce({**glob, "per_output": per})


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def cli_validate_options(
    values: Mapping[str, Any],
    decode_steps: int | None = None,
    save_inputs: str | os.PathLike[str] | None = None,
) -> ValidateOptions:
    """ValidateOptions from the values ``validation_options`` parsed (one --dim, one --inputs
    list: a file is one sample)."""
    files = values.get("inputs")
    if isinstance(files, list | tuple):  # repeatable: one sample per file
        files = list(files) if len(files) > 1 else (files[0] if files else None)
    return ValidateOptions(
        provider=values.get("provider") or "auto",
        inputs=files,
        dims=values.get("dim") or {},
        seed=_or(values.get("seed"), 0),
        runs=values.get("runs"),
        warmup=_or(values.get("warmup"), 3),
        thresholds=thresholds_from_options(values),
        top1=frozenset(values.get("top1") or ()),
        match=parse_match(values.get("match") or ()),
        decode_steps=decode_steps,
        save_inputs=save_inputs,
    )


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _coerce_threshold(key: str, raw: Any) -> ThresholdOption:
    if isinstance(raw, str):
        return parse_threshold(key, (raw,))
    if isinstance(raw, int | float):
        return ThresholdOption(raw)
    return parse_threshold(key, tuple(str(r) for r in raw))


def _slots(
    stack: ExitStack,
    paths: dict[str, str | os.PathLike | None],
    read: list[list[Path]],
    force: bool,
) -> dict[str, Slot]:
    """The output paths as Slots: planned by the output registry here unless a command's plan
    made them already (never one of the models' files or the inputs, never each other, an
    existing file only with `force`)."""
    given = {label: p for label, p in paths.items() if p is not None}
    todo = [(label, Path(p)) for label, p in given.items() if not isinstance(p, Slot)]
    plan = stack.enter_context(plan_outputs(todo, read, force)) if todo else None
    return {
        label: p if isinstance(p, Slot) else plan[label]  # type: ignore[index]
        for label, p in given.items()
    }


def run_cli_validation(
    reference_path: str | Path,
    candidate_path: str | Path,
    *,
    report_path: str | os.PathLike | None = None,
    junit_path: str | os.PathLike | None = None,
    force: bool = False,
    quiet: bool = False,
    decode_steps: int | None = None,
    on_report: Callable[[ValidationReport], None] | None = None,
    save_inputs: str | os.PathLike | None = None,
    outputs: OutputSet | None = None,
    **validation_option_values: Any,
) -> int:
    """Validate, print the table (stdout) or errors (stderr), write reports; return exit code.

    The report paths are checked before anything runs: never one of the models' files (or the
    inputs file), never each other, an existing file only with `force` (Slots from a command's
    output plan are checked already). ``decode_steps``: ``validate --decode-steps N``;
    ``save_inputs``: ``--save-inputs FILE.npz`` (the inputs used, for ``--inputs``).
    ``on_report`` receives the report the exit code comes from (``--html`` shows its verdict).
    Every file is staged and committed together once nothing else can fail (exit 2 leaves no
    new file); with ``outputs`` they are staged there and the caller commits them with its own.
    """
    unknown = set(validation_option_values) - set(VALIDATION_OPTION_NAMES)
    if unknown:
        raise TypeError(f"run_cli_validation: unknown option(s) {', '.join(sorted(unknown))}")
    files = validation_option_values.get("inputs")
    input_files = [Path(f) for f in _as_list(files) if isinstance(f, str | Path)]
    with ExitStack() as stack:
        owned = outputs is None
        try:
            read = [model_files(Path(reference_path)), model_files(Path(candidate_path))]
            slots = _slots(
                stack,
                {"report": report_path, "JUnit report": junit_path, "inputs file": save_inputs},
                [*read, input_files],
                force,
            )
            # after the plan: committed (or discarded) while the folders are still held
            staged = stack.enter_context(OutputSet()) if outputs is None else outputs
            options = cli_validate_options(
                validation_option_values, decode_steps, slots.get("inputs file")
            )
            from amp_convert.validation.core import validate_into  # on use: --help stays light

            report = validate_into(
                reference_path, candidate_path, options, staged, progress=not quiet, force=force
            )
        except AmpConvertError as e:
            click.echo(f"error: {printable(e)}", err=True)
            return 2
        except Exception as e:  # a bug: one line (exit 3), never a traceback read as "failed"
            click.echo(f"internal error: {type(e).__name__}: {printable(e)}", err=True)
            return 3
        if on_report is not None:
            on_report(report)
        if not quiet:
            click.echo(terminal(report.format_table()))
        elif report.failed:
            click.echo(printable(report.summary_line()), err=True)
        try:
            writers = {"report": report.json_bytes, "JUnit report": report.junit_bytes}
            for label, data in writers.items():
                if label in slots:
                    staged.stage(slots[label], data())
            if owned:
                staged.commit()
        except AmpConvertError as e:
            click.echo(f"error: {printable(e)}; no file was written", err=True)
            return 2
    return 1 if report.failed else 0


@click.command("validate")
@click.argument("original", type=InputPath(model=True))
@click.argument("converted", type=InputPath(model=True))
@validation_options
@click.option("--report", "report_path", type=OutputPath("report"),
              metavar="FILE.json", help="Write the full report as JSON.")  # fmt: skip
@click.option("--junit", "junit_path", type=OutputPath("JUnit report"),
              metavar="FILE.xml", help="Write JUnit XML (one testcase per output).")  # fmt: skip
@click.option("--force", is_flag=True, help="Overwrite the report files if they exist.")
@click.option("--html", "html_path", type=OutputPath("HTML report"),
              metavar="FILE.html", help="Write a self-contained HTML report (error along the "
              "graph, precision by op type).")  # fmt: skip
@click.option("--decode-steps", "decode_steps", type=click.IntRange(1, MAX_DECODE_STEPS),
              default=None, metavar="N", help="Also run both models as decoders for N greedy "
              f"steps (at most {MAX_DECODE_STEPS}, and as many as the memory budget holds "
              "the growing KV cache for), each "
              "feeding its own present.* back as past_key_values.* and its own next token "
              "(merged decoders: step 1 without past); reports per-step errors, token agreement "
              "and the first divergence; thresholds apply to every step.")  # fmt: skip
@click.option("--save-inputs", "save_inputs", type=OutputPath("inputs file"),
              metavar="FILE.npz", help="Write the inputs both models ran on (the generated ones, "
              "or the first --inputs sample) as an .npz that --inputs reads back.")  # fmt: skip
@click.option("-q", "--quiet", is_flag=True, help="No table or progress; failures on stderr.")
def validate_command(
    original: Path,
    converted: Path,
    report_path: Path | None,
    junit_path: Path | None,
    force: bool,
    quiet: bool,
    html_path: Path | None = None,
    decode_steps: int | None = None,
    save_inputs: Path | None = None,
    **values: Any,
) -> None:
    """Run ORIGINAL (FP32) and CONVERTED on the same inputs and compare every output.

    Exit code 0 when nothing fails (with no thresholds the result is NOT JUDGED, not PASS), 1 when
    an output fails its thresholds or has new NaN/Inf (thresholds or not), 2 on usage errors,
    models/inputs that cannot be loaded or run, or an explicit --provider cuda that cannot start.
    Every file it writes is checked first (output_rules): never a model, its data or the inputs
    file, never another of its outputs, an existing file only with --force.
    """
    ctx = click.get_current_context()
    try:
        plan = plan_outputs(declared_outputs(ctx), declared_inputs(ctx), force)
    except AmpConvertError as e:
        click.echo(f"error: {printable(e)}", err=True)
        ctx.exit(2)
    with plan, sigterm_cleans_up(), OutputSet() as outputs:
        reports: list[ValidationReport] = []
        code = run_cli_validation(
            original, converted, report_path=plan.get("report"),
            junit_path=plan.get("JUnit report"), force=force, quiet=quiet,
            decode_steps=decode_steps, save_inputs=plan.get("inputs file"),
            on_report=reports.append, outputs=outputs, **values,
        )  # fmt: skip
        html = plan.get("HTML report")
        if html is not None and code not in (2, 3):
            # on use: the page's probes load --auto's machinery, which `validate` alone never needs
            from amp_convert.pages.trace import validation_html

            try:
                outputs.stage(html, validation_html(
                    original, converted, thresholds=thresholds_from_options(values),
                    provider=values.get("provider"), inputs=values.get("inputs"),
                    dims=values.get("dim"), seed=values.get("seed") or 0,
                    report=reports[0] if reports else None,
                ))  # fmt: skip
            except AmpConvertError as e:
                click.echo(f"error: cannot write HTML report {printable(html_path)}: "
                           f"{printable(e)}; no file was written", err=True)  # fmt: skip
                code = 2
            except Exception as e:  # a bug: one line (exit 3), never a traceback
                click.echo(f"internal error: HTML report: {type(e).__name__}: {printable(e)}",
                           err=True)  # fmt: skip
                code = 3
        if code not in (2, 3):
            try:
                outputs.commit()
            except AmpConvertError as e:
                click.echo(f"error: {printable(e)}; no file was written", err=True)
                code = 2
    ctx.exit(code)
