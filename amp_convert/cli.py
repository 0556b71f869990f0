"""The command line: `amp-convert MODEL [options]` converts, `amp-convert validate` checks.

It only turns arguments into API calls and errors into one line; the conversion options come
from ConvertOptions' declaration (amp_convert/options.py), so they are written once.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from amp_convert import __version__
from amp_convert.errors import AmpConvertError, InputError
from amp_convert.io import default_output_path
from amp_convert.options import option_names, user_fields
from amp_convert.validation.command import run_cli_validation, validate_command, validation_options

EXIT_ERROR = 2
F = TypeVar("F", bound=Callable[..., Any])


def _click_option(f: dataclasses.Field) -> Callable[[F], F]:
    """The click option for one ConvertOptions field, from the field's metadata."""
    meta = f.metadata
    kind, flags, help_text = meta["kind"], meta["flags"], meta["help"]
    if kind == "choice":
        return click.option(
            *flags,
            f.name,
            type=click.Choice(meta["choices"], case_sensitive=False),
            default=f.default.value if isinstance(f.default, enum.Enum) else f.default,
            show_default=True,
            help=help_text,
        )
    if kind == "switch":
        return click.option(*flags, f.name, default=f.default, show_default=True, help=help_text)
    if kind == "flag":
        return click.option(*flags, f.name, is_flag=True, help=help_text)
    if kind == "path":
        path_type = click.Path(dir_okay=False, path_type=Path)
        return click.option(*flags, f.name, type=path_type, help=help_text)
    metavar = meta.get("metavar", "OP,..." if kind == "ops" else None)
    return click.option(*flags, f.name, multiple=True, metavar=metavar, help=help_text)


def conversion_options(f: F) -> F:
    """Every ConvertOptions field as a command-line option (--dim comes with validation's)."""
    for field in reversed(list(user_fields())):
        if field.metadata["kind"] != "dims":
            f = _click_option(field)(f)
    return f


class _ConvertByDefault(click.Group):
    """`amp-convert model.onnx ...` means `amp-convert convert model.onnx ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["convert", *args]
        return super().parse_args(ctx, args)


@click.group(
    cls=_ConvertByDefault,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Convert is the default command: amp-convert model.onnx --level O2",
)
@click.version_option(__version__, "--version", prog_name="amp-convert")
def cli() -> None:
    """Convert FP32 ONNX models to mixed precision (FP16/BF16) and validate the result."""


def _fail(error: BaseException, verbose: bool, code: int = EXIT_ERROR) -> None:
    if verbose:
        traceback.print_exception(error)
    if isinstance(error, AmpConvertError):
        click.echo(f"amp-convert: error: {error}", err=True)
    else:
        click.echo(f"amp-convert: internal error: {type(error).__name__}: {error}", err=True)
    sys.exit(code)


@cli.command("convert", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model", type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Output path [default: MODEL.fp16.onnx / MODEL.bf16.onnx next to MODEL].",
)
@conversion_options
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the full ConversionReport (per-node decisions and reasons) as JSON.",
)
@click.option("--force", is_flag=True, help="Overwrite the output and report files if they exist.")
@click.option(
    "--auto",
    "auto",
    is_flag=True,
    help="Accuracy-driven: start from --level (default O3 here) and keep FP32 only the nodes the "
    "calibration --inputs show overflow or introduce the error, until the thresholds "
    "(default --min-cosine 0.999) hold. Exit 1 and write nothing when they cannot be met.",
)
@click.option(
    "--force-write",
    is_flag=True,
    help="With --auto: write the model even when the thresholds are not met (still exit 1).",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --auto: write a self-contained HTML report (error along the graph, pinned nodes).",
)
@click.option(
    "--validate",
    "do_validate",
    is_flag=True,
    help="Validate the converted model against the original afterwards.",
)
@click.option(
    "--validation-report",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --validate: write the ValidationReport as JSON.",
)
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
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
    **kwargs: Any,
) -> None:
    """Convert MODEL to mixed precision (writes MODEL.fp16.onnx unless -o is given)."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(message)s")
    if verbose:  # each conversion step and node decision (pipeline.run and the passes log them)
        logging.getLogger("amp_convert").setLevel(logging.DEBUG)
    options = {name: kwargs.pop(name) for name in option_names() if name in kwargs}
    validation = kwargs
    # one --dim serves both the cast-cost estimate and the validation inputs
    options["dims"] = validation.get("dim") or {}
    options["dtype"] = options["dtype"].lower()
    if auto:
        output = output or default_output_path(model or ".", options["dtype"])
        from amp_convert.auto.command import run_auto

        level_given = click.get_current_context().get_parameter_source("level")
        if level_given == click.core.ParameterSource.DEFAULT:
            options["level"] = "O3"
        try:
            code = run_auto(
                model, output, options, validation, force=force, force_write=force_write,
                report_path=report_path, html_path=html_path, quiet=quiet,
            )  # fmt: skip
        except AmpConvertError as e:
            _fail(e, verbose)
        except Exception as e:  # a bug: still one line, traceback with -v
            _fail(e, verbose, code=3)
        sys.exit(code)
    if html_path is not None or force_write:
        misplaced = AmpConvertError("--html and --force-write go with --auto (or validate --html)")
        _fail(misplaced, verbose)
    try:
        if not model:
            raise InputError("empty model path ''")
        output = output or default_output_path(model, options["dtype"])
        # every file this run writes, checked with -o before any work (never an input, never
        # twice, --force to replace)
        reports = {"report": report_path}
        if do_validate:
            reports |= {"validation report": validation_report, "JUnit report": junit}
        others = {label: p for label, p in reports.items() if p is not None}
        from amp_convert.api import convert_file  # imported on use: --help/--version stay light

        report = convert_file(model, output, force=force, other_outputs=others, **options)
        if report_path is not None:
            report.to_json(report_path)
    except AmpConvertError as e:
        _fail(e, verbose)
    except Exception as e:  # a bug: still one line, traceback with -v
        _fail(e, verbose, code=3)
    if not quiet:
        click.echo(f"wrote {output}")
        click.echo(report.summary())
        if verbose:
            for n in report.nodes:
                click.echo(f"  {n.precision:5s} {n.op_type:22s} {n.name}: {n.reason}")
    if do_validate:
        code = run_cli_validation(
            model,
            output,
            report_path=validation_report,
            junit_path=junit,
            force=force,
            quiet=quiet,
            **validation,
        )
        sys.exit(code)


cli.add_command(validate_command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="amp-convert")


if __name__ == "__main__":
    main()
