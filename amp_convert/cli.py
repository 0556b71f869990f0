"""The command line: `amp-convert MODEL [options]` converts, `amp-convert validate` checks.

Nothing imports this module; it only turns arguments into API calls and errors into one line.
"""

from __future__ import annotations

import logging
import sys
import traceback
from pathlib import Path

import click

from amp_convert import __version__
from amp_convert.api import convert_file
from amp_convert.errors import AmpConvertError
from amp_convert.io import default_output_path
from amp_convert.validate.command import run_cli_validation, validate_command, validation_options

EXIT_ERROR = 2


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
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Output path [default: MODEL.fp16.onnx / MODEL.bf16.onnx next to MODEL].",
)
@click.option(
    "--level",
    type=click.Choice(["O0", "O1", "O2", "O3"], case_sensitive=False),
    default="O2",
    show_default=True,
    help="O0 nothing, O1 allow-list ops only, O2 all but deny-list, O3 all the schemas allow.",
)
@click.option(
    "--dtype",
    type=click.Choice(["fp16", "bf16"], case_sensitive=False),
    default="fp16",
    show_default=True,
    help="Low-precision type.",
)
@click.option(
    "--keep-io-types/--no-keep-io-types",
    default=True,
    show_default=True,
    help="Keep FP32 model inputs/outputs (casts at the boundary).",
)
@click.option(
    "--fp32-ops",
    "fp32_ops",
    multiple=True,
    metavar="OP,...",
    help="Ops to keep FP32 (added to the deny list; repeatable).",
)
@click.option(
    "--fp16-ops",
    "fp16_ops",
    multiple=True,
    metavar="OP,...",
    help="Ops to run in low precision (added to the allow list; repeatable).",
)
@click.option(
    "--exclude-nodes",
    multiple=True,
    metavar="REGEX",
    help="Keep nodes whose name matches REGEX in FP32 (repeatable).",
)
@click.option(
    "--cast-optional-params",
    is_flag=True,
    help="Store weights low even where an FP32 reader then needs a cast (MXNet style).",
)
@click.option(
    "--op-lists",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Op list file with [allow]/[infer]/[clear]/[deny]/[rules] sections.",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the full ConversionReport (per-node decisions and reasons) as JSON.",
)
@click.option("--force", is_flag=True, help="Overwrite the output if it exists.")
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
    model: Path,
    output: Path | None,
    level: str,
    dtype: str,
    keep_io_types: bool,
    fp32_ops: tuple[str, ...],
    fp16_ops: tuple[str, ...],
    exclude_nodes: tuple[str, ...],
    cast_optional_params: bool,
    op_lists: Path | None,
    report_path: Path | None,
    force: bool,
    do_validate: bool,
    validation_report: Path | None,
    junit: Path | None,
    quiet: bool,
    verbose: bool,
    **validation: object,
) -> None:
    """Convert MODEL to mixed precision (writes MODEL.fp16.onnx unless -o is given)."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(message)s")
    dtype = dtype.lower()
    output = output or default_output_path(model, dtype)
    try:
        report = convert_file(
            model,
            output,
            force=force,
            level=level.upper(),
            dtype=dtype,
            keep_io_types=keep_io_types,
            fp32_ops=fp32_ops,
            fp16_ops=fp16_ops,
            exclude_nodes=exclude_nodes,
            cast_optional_params=cast_optional_params,
            op_lists=op_lists,
        )
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
