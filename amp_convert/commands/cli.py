"""The command line: `amp-convert MODEL [options]` converts, `amp-convert validate` checks.

It only turns arguments into API calls and errors into one line; the conversion and validation
options come from the declarations of ConvertOptions and ValidateOptions (commands/flags.py builds
the flags), so they are written once, and each command makes its two options objects once, before
any work, and hands them down.
"""

from __future__ import annotations

from amp_convert.commands.deferred import defer_sympy

defer_sympy()  # before the imports below load onnx-ir: the command line does no symbolic math

import logging
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from amp_convert._version import __version__
from amp_convert.commands.flags import click_options, say_error, say_internal
from amp_convert.commands.paths import InputPath, OutputPath, check_needs, declared_outputs
from amp_convert.commands.validate import (
    NOT_FOR_AUTO,
    VALIDATION_OPTION_NAMES,
    run_cli_validation,
    validate_command,
    validation_options,
)
from amp_convert.core import spelling, user_text
from amp_convert.errors import AmpConvertError, InputError
from amp_convert.files import safe_write
from amp_convert.files.output_set import OutputSet
from amp_convert.files.outputs import default_output_path
from amp_convert.options.convert import ConvertOptions, resolve
from amp_convert.options.declare import cli_fields, given_values, param_names
from amp_convert.validation.options import ValidateOptions

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
F = TypeVar("F", bound=Callable[..., Any])


#: the conversion's flags; one it shares with validation (--dim) comes with validation's
conversion_options = click_options(
    f for f in cli_fields(ConvertOptions) if param_names(f)[0] not in VALIDATION_OPTION_NAMES
)
#: validation flags that mean nothing without --validate or --auto (--dim sizes the conversion)
_VALIDATION_ONLY = tuple(
    n
    for n in VALIDATION_OPTION_NAMES
    if n not in {p for f in cli_fields(ConvertOptions) for p in param_names(f)}
)


class _ConvertByDefault(click.Group):
    """`amp-convert model.onnx ...` means `amp-convert convert model.onnx ...`.

    Every error ends as one line on stderr: usage errors exit 2, Ctrl-C exits 130 (never 1, the
    "thresholds not met" code); a first word that is no file but close to a command name gets
    "did you mean".
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            user_text.check_args(args)
        except user_text.TextError as e:
            raise click.UsageError(str(e), ctx) from None
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            word = args[0]
            unknown = not word.startswith("-") and not os.path.lexists(word)
            close = unknown and spelling.closest(word, [c for c in self.commands if c != "convert"])
            if close:
                raise click.UsageError(
                    f"no such command or model file {word!r}; did you mean {close!r}?", ctx
                )
            args = ["convert", *args]
        return super().parse_args(ctx, args)

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        standalone_mode: bool = True,
        **kw: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, standalone_mode=False, **kw)
        try:
            code = super().main(args, prog_name, standalone_mode=False, **kw)
        except click.ClickException as e:
            say_error(_one_line(e.format_message()))
            sys.exit(e.exit_code)
        except (click.exceptions.Abort, KeyboardInterrupt):
            click.echo("amp-convert: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        sys.exit(code if isinstance(code, int) else 0)


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


@click.group(
    cls=_ConvertByDefault,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Example: amp-convert model.onnx --level O2 (convert is the default command)",
)
@click.version_option(__version__, "--version", prog_name="amp-convert")
def cli() -> None:
    """Convert FP32 ONNX models to mixed precision (FP16/BF16) and validate the result."""


def _fail(error: BaseException, verbose: bool, code: int = EXIT_ERROR) -> None:
    if verbose:
        traceback.print_exception(error)
    if isinstance(error, AmpConvertError):
        say_error(error)
    else:  # the notes name the conversion step it escaped
        say_internal(error, where="; ".join(getattr(error, "__notes__", ())))
    sys.exit(code)


@cli.command(
    "convert",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Example: amp-convert model.onnx -o model.fp16.onnx --validate",
)
@click.argument("model", type=InputPath(model=True, must_exist=False, as_str=True))
@click.option(
    "-o",
    "--output",
    type=OutputPath("output"),
    help="Output path [default: MODEL.fp16.onnx / MODEL.bf16.onnx next to MODEL].",
)
@conversion_options
@click.option(
    "--report",
    "report_path",
    type=OutputPath("report"),
    help="Write the full ConversionReport (per-node decisions and reasons) as JSON.",
)
@click.option("--force", is_flag=True, help="Overwrite the output and report files if they exist.")
@click.option(
    "--auto",
    "auto",
    is_flag=True,
    help="Search from --level (O3 here): keep FP32 only the nodes --inputs show must be; exit 1, "
    "nothing written, if it fails.",
)
@click.option(
    "--force-write",
    is_flag=True,
    help="With --auto or --validate: write the model even when it fails (still exit 1).",
)
@click.option(
    "--html",
    "html_path",
    type=OutputPath("HTML report", needs=("--auto",)),
    help="With --auto: write an HTML page (error along the graph, the nodes kept FP32).",
)
@click.option(
    "--save-inputs",
    "save_inputs",
    type=OutputPath("inputs file", needs=("--auto",)),
    metavar="FILE.npz",
    help="With --auto: write the calibration inputs as an .npz that --inputs reads back.",
)
@click.option(
    "--validate",
    "do_validate",
    is_flag=True,
    help="Validate before writing: exit 1 and write nothing when an output fails.",
)
@click.option(
    "--validation-report",
    type=OutputPath("validation report", needs=("--validate",)),
    help="With --validate: write the ValidationReport as JSON.",
)
@click.option(
    "--junit",
    type=OutputPath("JUnit report", needs=("--validate",)),
    help="With --validate: write a JUnit XML file (one test case per output).",
)
@validation_options
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("-v", "--verbose", is_flag=True, help="Print per-node decisions and tracebacks.")
def convert_command(
    model: str,
    output: Path | None,
    report_path: Path | None,
    force: bool,
    do_validate: bool,
    validation_report: Path | None,
    junit: Path | None,
    quiet: bool,
    verbose: bool,
    auto: bool,
    force_write: bool,
    html_path: Path | None,
    save_inputs: Path | None = None,
    **kwargs: Any,
) -> None:
    """Convert MODEL to mixed precision (writes MODEL.fp16.onnx unless -o is given)."""
    handler = logging.StreamHandler()
    handler.setFormatter(user_text.PrintableFormatter("%(message)s"))  # names from the model
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    if verbose:  # each conversion step and node decision (pipeline.run and the passes log them)
        logging.getLogger("amp_convert").setLevel(logging.DEBUG)
    ctx = click.get_current_context()
    _check_companions(ctx, auto=auto, do_validate=do_validate, force_write=force_write)
    values = given_values(ConvertOptions, kwargs)
    if auto and ctx.get_parameter_source("level") == click.core.ParameterSource.DEFAULT:
        del values["level"]  # --auto's own default (options/convert.resolve)
    try:
        if not model:
            raise InputError("empty model path ''")
        options = resolve(None, values, auto=auto)  # checked once, here
        validation = None
        if auto or do_validate:  # one --dim: the conversion's, parsed once
            validation = ValidateOptions(
                **given_values(ValidateOptions, kwargs) | {"dims": options.dims}
            )
        output = output or default_output_path(model, options.dtype)
        with safe_write.sigterm_cleans_up():
            run = _Run(ctx, model, output, options, validation, force, quiet)
            code = _run_auto(run) if auto else _run_convert(run, verbose)
    except AmpConvertError as e:
        _fail(e, verbose)
    except MemoryError:  # past what the budget foresaw: one line, never exit 3
        _fail(AmpConvertError(OUT_OF_MEMORY), verbose)
    except Exception as e:  # a bug: still one line, traceback with -v
        _fail(e, verbose, code=3)
    sys.exit(code)


def _check_companions(
    ctx: click.Context, *, auto: bool, do_validate: bool, force_write: bool
) -> None:
    """Options that do nothing without --validate / --auto are refused, never ignored."""
    check_needs(ctx, {"--auto": auto, "--validate": do_validate})
    if force_write and not (auto or do_validate):
        raise click.UsageError("--force-write goes with --auto or --validate", ctx)
    if do_validate and auto:
        raise click.UsageError("--validate and --auto do not go together (--auto validates)", ctx)
    if auto:  # options the search does not use are refused, never silently ignored
        for name in NOT_FOR_AUTO:
            if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT:
                flag = "--" + name.replace("_", "-")
                raise click.UsageError(
                    f"{flag} goes with --validate (the --auto search judges by the thresholds)",
                    ctx,
                )
    if do_validate or auto:
        return
    for name in _VALIDATION_ONLY:
        if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT:
            flag = "--" + name.replace("_", "-")
            raise click.UsageError(f"{flag} goes with --validate or --auto", ctx)


@dataclass(frozen=True)
class _Run:
    """One conversion command as parsed: what --auto and a plain conversion both take."""

    ctx: click.Context
    model: str
    output: Path
    options: ConvertOptions
    validation: ValidateOptions | None  # with --validate or --auto
    force: bool
    quiet: bool


def _run_auto(run: _Run) -> int:
    from amp_convert.commands.auto import run_auto

    outputs = [
        (label, run.output if label == "output" else p) for label, p in declared_outputs(run.ctx)
    ]
    assert run.validation is not None
    return run_auto(
        run.model,
        outputs,
        run.options,
        run.validation,
        force=run.force,
        force_write=run.ctx.params["force_write"],
        quiet=run.quiet,
        extra_inputs=_other_inputs(run.ctx),
    )


def _other_inputs(ctx: click.Context) -> list[list[Path]]:
    """Files the run reads besides the model (an --inputs file, an --op-lists file)."""
    return [
        [Path(p)] for p in _paths(ctx.params.get("inputs")) + _paths(ctx.params.get("op_lists"))
    ]


def _paths(value: Any) -> list[Path]:
    if value is None:
        return []
    return [Path(v) for v in value] if isinstance(value, list | tuple) else [Path(value)]


def _run_convert(run: _Run, verbose: bool) -> int:
    from amp_convert.api import open_file_conversion  # imported on use: --help/--version stay light

    validating = run.ctx.params["do_validate"]
    if validating:  # before anything is written: no model left by a check that cannot run
        from amp_convert.validation.runtime import import_ort

        import_ort()
    others = {label: p for label, p in declared_outputs(run.ctx) if label != "output"}
    with open_file_conversion(
        run.model,
        run.output,
        force=run.force,
        other_outputs=others,
        extra_inputs=_other_inputs(run.ctx),
        options=run.options,
    ) as conversion:
        plan = conversion.plan
        codes: list[int] = []
        outputs = OutputSet()
        report_slot = plan.get("report")

        def show(report: Any) -> None:
            if not run.quiet:
                click.echo(user_text.terminal(report.summary()))
                if verbose:
                    for n in report.nodes:
                        line = f"  {n.precision:5s} {n.op_type:22s} {n.name}: {n.reason}"
                        click.echo(user_text.printable(line))

        def commit_others(report: Any) -> None:
            """The model is written, not yet in place: stage its report, then put every other
            output in place (a failure here leaves the old files); the model commits last, and
            if it fails they are rolled back."""
            if report_slot is not None:
                outputs.stage(report_slot, report.json_bytes())
            outputs.commit()

        def gate(model: Any, report: Any, external: bool | None) -> bool:
            """--validate: judge the converted model before it is written."""
            show(report)
            codes.append(_validate_staged(run, plan, model, external, outputs))
            return codes[0] == 0 or run.ctx.params["force_write"]

        with outputs:
            try:
                report = conversion.run(gate if validating else None, before_commit=commit_others)
            except BaseException:
                outputs.roll_back()
                raise
            written = not validating or codes[0] == 0 or run.ctx.params["force_write"]
            if not written and codes[0] == 1:  # the model stays unwritten; its reports are due
                commit_others(report)
        if written and not run.quiet:
            click.echo(user_text.printable(f"wrote {run.output}"))
        if not validating:
            show(report)
        if not written:
            why = "the validation failed" if codes[0] == 1 else "the validation could not run"
            click.echo(
                f"amp-convert: {why}; nothing written (--force-write writes the model anyway)",
                err=True,
            )
        return codes[0] if validating else 0


def _validate_staged(
    run: _Run, plan: Any, model: Any, external: bool | None, outputs: OutputSet
) -> int:
    """The converted model, saved in a temporary folder under its output's name, validated
    against the original (the exit code ``validate`` would give); the folder goes afterwards.
    Its reports are staged in ``outputs``, committed with the model."""
    from amp_convert.files import io

    with safe_write.temp_folder("amp-validate-") as tmp:
        staged = Path(tmp) / run.output.name
        io.save_model(model, staged, external=external)

        def relabel(verdict: Any) -> None:  # the file the user will have, not our staging copy
            verdict.report.candidate = str(run.output)

        return run_cli_validation(
            run.model,
            staged,
            options=run.validation,
            report_path=plan.get("validation report"),
            junit_path=plan.get("JUnit report"),
            force=run.force,
            quiet=run.quiet,
            on_verdict=relabel,
            outputs=outputs,
        )


#: the line a run that ran out of memory ends with (exit 2: the machine, not a bug)
OUT_OF_MEMORY = (
    "out of memory; give smaller inputs (--dim), or set AMP_CONVERT_MEMORY_BUDGET to what this "
    "machine can hold"
)

cli.add_command(validate_command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="amp-convert")


if __name__ == "__main__":
    main()
