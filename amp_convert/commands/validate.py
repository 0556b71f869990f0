"""CLI pieces for validation, shared by ``amp-convert validate`` and ``convert --validate``.

* ``validate_command``: the click command ``validate ORIGINAL CONVERTED``;
* ``validation_options``: decorator adding the validation options, generated from ValidateOptions'
  declarations (not ``--report``, ``--junit``, ``--save-inputs`` or ``-q``, the outputs and
  switches each command names itself), as the keyword arguments ``VALIDATION_OPTION_NAMES``;
* ``run_cli_validation``: runs, prints the table, writes the reports, returns the exit code:
  0 when nothing failed (verdict ``pass``; with no threshold given the default set judges,
  cosine 0.999 and no new NaN/Inf; ``not_judged`` only with ``--report-only``: the table then
  ends with "result: NOT JUDGED", never PASS), 1 when an output fails (a threshold, a shape
  mismatch, or new NaN/Inf, which fail even without thresholds), 2 on an error such as an
  unreadable model or inputs file, an explicit ``--provider cuda`` that cannot start, or a
  reference that runs on none of the generated inputs.

Provider: ``auto`` picks cuda when onnxruntime offers the CUDA provider and it starts, else
emulate (a warning says so when CUDA is installed but fails to start); an explicit ``cuda`` that
cannot start is an error, never a silent fallback.

Threshold options take a global value and/or repeatable per-output overrides:
``--atol 1e-2 --atol logits:5e-2`` (the name is everything before the last ``:``, so TF-style
names such as ``output:0:1e-3`` work; validation/options.parse_threshold).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from amp_convert.commands.flags import click_options, say_error, say_internal
from amp_convert.commands.paths import InputPath, OutputPath, declared_inputs, declared_outputs
from amp_convert.core.user_text import printable, terminal
from amp_convert.errors import AmpConvertError
from amp_convert.files.output_set import OutputSet
from amp_convert.files.outputs import model_files, plan_outputs
from amp_convert.files.safe_write import Slot, sigterm_cleans_up
from amp_convert.options.declare import cli_fields, given_values, param_names
from amp_convert.validation.options import ValidateOptions, parse_threshold

if TYPE_CHECKING:  # annotations only: the validation library loads when a command runs
    from amp_convert.validation.core import Verdict

__all__ = ["parse_threshold"]  # re-exported: the threshold flags' grammar lives with the options

F = TypeVar("F", bound=Callable[..., Any])

#: the validation options every validating command has (``validate`` adds its own, such as
#: --decode-steps: fields declared with ``commands=("validate",)``)
validation_options = click_options(cli_fields(ValidateOptions))
#: keyword arguments ``validation_options`` adds to the decorated command
VALIDATION_OPTION_NAMES = tuple(n for f in cli_fields(ValidateOptions) for n in param_names(f))
#: those ``--auto`` refuses (it judges by the thresholds): fields declared ``auto=False``
NOT_FOR_AUTO = tuple(
    n
    for f in cli_fields(ValidateOptions)
    if f.metadata.get("auto") is False
    for n in param_names(f)
)


def cli_validate_options(
    values: Mapping[str, Any],
    decode_steps: int | None = None,
    save_inputs: str | os.PathLike[str] | None = None,
    command: str | None = None,
) -> ValidateOptions:
    """ValidateOptions from the values the generated flags parsed (a threshold flag's items, a
    single --inputs file or several; a bare string counts as one item)."""
    raw = {k: (v,) if isinstance(v, str) and k != "provider" else v for k, v in values.items()}
    given = given_values(ValidateOptions, raw, command)
    if decode_steps is not None:
        given["decode_steps"] = decode_steps
    return ValidateOptions(**given, save_inputs=save_inputs)


def _input_files(options: ValidateOptions) -> list[Path]:
    files = options.inputs
    listed = files if isinstance(files, list | tuple) else [files]
    return [Path(f) for f in listed if isinstance(f, str | Path)]


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
    on_verdict: Callable[[Verdict], None] | None = None,
    save_inputs: str | os.PathLike | None = None,
    outputs: OutputSet | None = None,
    options: ValidateOptions | None = None,
    **validation_option_values: Any,
) -> int:
    """Validate, print the table (stdout) or errors (stderr), write reports; return exit code.

    ``options``: the command's ValidateOptions, made once; without them they are made here from
    ``validation_option_values`` (the flags' values, ``VALIDATION_OPTION_NAMES``),
    ``decode_steps`` (``validate --decode-steps N``) and ``save_inputs`` (``--save-inputs
    FILE.npz``: the inputs used, for ``--inputs``). The report paths are checked before anything
    runs: never one of the models' files (or the inputs file), never each other, an existing
    file only with `force` (Slots from a command's output plan are checked already).
    ``on_verdict`` receives the verdict the exit code comes from: its report, options and
    samples (``--html`` shows that very verdict).
    Every file is staged and committed together once nothing else can fail (exit 2 leaves no
    new file); with ``outputs`` they are staged there and the caller commits them with its own.
    """
    unknown = set(validation_option_values) - set(VALIDATION_OPTION_NAMES)
    if unknown:
        raise TypeError(f"run_cli_validation: unknown option(s) {', '.join(sorted(unknown))}")
    with ExitStack() as stack:
        owned = outputs is None
        try:
            if options is None:
                options = cli_validate_options(validation_option_values, decode_steps, save_inputs)
            read = [model_files(Path(reference_path)), model_files(Path(candidate_path))]
            slots = _slots(
                stack,
                {
                    "report": report_path,
                    "JUnit report": junit_path,
                    "inputs file": options.save_inputs,
                },
                [*read, _input_files(options)],
                force,
            )
            # after the plan: committed (or discarded) while the folders are still held
            staged = stack.enter_context(OutputSet()) if outputs is None else outputs
            options = options.replace(save_inputs=slots.get("inputs file"))
            from amp_convert.validation.core import judge  # on use: --help stays light

            verdict = judge(
                reference_path, candidate_path, options, staged, progress=not quiet, force=force
            )
        except AmpConvertError as e:
            say_error(e)
            return 2
        except MemoryError:  # the machine, not a bug: one line, exit 2
            say_error("out of memory; give smaller inputs (--dim)")
            return 2
        except Exception as e:  # a bug: one line (exit 3), never a traceback read as "failed"
            say_internal(e)
            return 3
        report = verdict.report
        name_worst_node(reference_path, candidate_path, verdict, quiet)
        if on_verdict is not None:
            on_verdict(verdict)
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
            say_error(f"{e}; no file was written")
            return 2
    return 1 if report.failed else 0


#: the flags only ``validate`` has (fields declared with ``commands=("validate",)``)
_validate_only_options = click_options(
    f for f in cli_fields(ValidateOptions, "validate") if f.metadata.get("commands")
)


@click.command(
    "validate",
    epilog="Example: amp-convert validate model.onnx model.fp16.onnx --provider emulate",
)
@click.argument("original", type=InputPath(model=True))
@click.argument("converted", type=InputPath(model=True))
@validation_options
@click.option(
    "--report",
    "report_path",
    type=OutputPath("report"),
    metavar="FILE.json",
    help="Write the full report as JSON.",
)
@click.option(
    "--junit",
    "junit_path",
    type=OutputPath("JUnit report"),
    metavar="FILE.xml",
    help="Write JUnit XML (one testcase per output).",
)
@click.option("--force", is_flag=True, help="Overwrite the report files if they exist.")
@click.option(
    "--html",
    "html_path",
    type=OutputPath("HTML report"),
    metavar="FILE.html",
    help="Write an HTML page: the error along the graph, precision by op type.",
)
@_validate_only_options
@click.option(
    "--save-inputs",
    "save_inputs",
    type=OutputPath("inputs file"),
    metavar="FILE.npz",
    help="Write the inputs both models ran on as an .npz that --inputs reads back.",
)
@click.option("-q", "--quiet", is_flag=True, help="No table or progress; failures on stderr.")
def validate_command(
    original: Path,
    converted: Path,
    report_path: Path | None,
    junit_path: Path | None,
    force: bool,
    quiet: bool,
    html_path: Path | None = None,
    save_inputs: Path | None = None,
    **values: Any,
) -> None:
    """Run ORIGINAL (FP32) and CONVERTED on the same inputs and compare every output.

    With no threshold given it judges by --min-cosine 0.999 and no new NaN/Inf. Exit 0: every
    output passes; 1: an output fails; 2: usage, load or run errors.
    \f
    Every file it writes is checked first (output_rules): never a model, its data or the inputs
    file, never another of its outputs, an existing file only with --force.
    """
    ctx = click.get_current_context()
    try:
        options = ValidateOptions(**given_values(ValidateOptions, values, "validate"))
        plan = plan_outputs(declared_outputs(ctx), declared_inputs(ctx), force)
    except AmpConvertError as e:
        say_error(e)
        ctx.exit(2)
    with plan, sigterm_cleans_up(), OutputSet() as outputs:
        verdicts: list[Verdict] = []
        code = run_cli_validation(
            original,
            converted,
            options=options.replace(save_inputs=plan.get("inputs file")),
            report_path=plan.get("report"),
            junit_path=plan.get("JUnit report"),
            force=force,
            quiet=quiet,
            on_verdict=verdicts.append,
            outputs=outputs,
        )
        html = plan.get("HTML report")
        if html is not None and code not in (2, 3):
            # on use: the page's probes load --auto's machinery, which `validate` alone never needs
            from amp_convert.pages.trace import validation_html

            try:
                # exit 0 or 1: run_cli_validation handed over the verdict it came from
                outputs.stage(html, validation_html(original, converted, verdicts[0]))
            except AmpConvertError as e:
                say_error(f"cannot write HTML report {html_path}: {e}; no file was written")
                code = 2
            except Exception as e:  # a bug: one line (exit 3), never a traceback
                say_internal(e, "HTML report")
                code = 3
        if code not in (2, 3):
            try:
                outputs.commit()
            except AmpConvertError as e:
                say_error(f"{e}; no file was written")
                code = 2
    ctx.exit(code)


def name_worst_node(
    reference: str | Path, candidate: str | Path, verdict: Verdict, quiet: bool
) -> None:
    """A FAIL far from any threshold (``report.broken``): localise where the output breaks (the
    per-node trace the HTML page draws, two more sessions) and say it; a localisation that cannot
    run changes nothing of the verdict."""
    report, options = verdict.report, verdict.options
    if not report.broken:
        return
    from amp_convert.pages.worst import worst_node  # on use: only a broken model needs it

    if not quiet:
        click.echo("amp-convert validate: localising where the output breaks", err=True)
    try:
        found = worst_node(
            reference,
            candidate,
            provider=report.provider,
            inputs=options.inputs,
            dims=report.dims if options.inputs is None else None,
            seed=options.seed,
        )
    except AmpConvertError:
        return
    if found is None:
        return
    report.worst_node = found
    error = found["error"]
    text = f"{error:.3g}" if isinstance(error, float) else str(error)
    report.warnings.append(
        f"the output breaks at node {found['name']!r} ({found['op_type']}, "
        f"{found['precision']}): error {text} there; --exclude-nodes "
        f"'{found['name']}' keeps it FP32, --auto finds every node that must stay FP32"
    )
