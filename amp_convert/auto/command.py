"""The ``amp-convert MODEL --auto`` flow: search, print, write the reports, write the model.

Exit codes: 0 thresholds met (model written), 1 not met (nothing written unless --force-write),
2 usage or input errors (raised as AmpConvertError to the CLI).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from amp_convert import io, output_rules
from amp_convert.auto.search import auto_convert
from amp_convert.errors import OptionError
from amp_convert.validation.command import thresholds_from_options


def run_auto(
    model: Path,
    output: Path,
    options: dict[str, Any],
    validation: Mapping[str, Any],
    *,
    force: bool,
    force_write: bool,
    report_path: Path | None,
    html_path: Path | None,
    quiet: bool,
) -> int:
    """Run the search for the CLI and return its exit code."""
    files = validation.get("inputs") or ()
    if isinstance(files, str | Path):
        files = (files,)
    inputs_read = output_rules.model_files(Path(model))
    writes = [
        ("output", Path(output)),
        ("output data file", output_rules.data_file_name(Path(output))),
        *((label, Path(p)) for label, p in (("report", report_path), ("HTML report", html_path))
          if p is not None),
    ]  # fmt: skip
    output_rules.check_outputs(writes, [inputs_read, *([Path(f)] for f in files)], force)
    provider = validation.get("provider") or "auto"
    if provider == "cpu":
        raise OptionError(
            "--auto needs --provider emulate or cuda (ORT CPU runs FP16 nodes in FP32 and hides "
            "the errors the search looks for)"
        )
    dims = dict(options.pop("dims", None) or validation.get("dim") or {})
    result, report = auto_convert(
        model,
        inputs=[str(f) for f in files] or None,
        thresholds=thresholds_from_options(validation),
        provider=provider,
        dims=dims or None,
        seed=validation.get("seed") or 0,
        **options,
    )
    if not quiet:
        click.echo(report.summary())
    if report_path is not None:
        report.to_json(report_path)
    if html_path is not None:
        from amp_convert import html_report

        page = html_report.auto_page(report, f"amp-convert --auto: {Path(model).name}")
        html_report.write(page, html_path)
    if report.passed or force_write:
        io.save_model(result, output, keep=inputs_read)
        if not quiet:
            click.echo(f"wrote {output}")
    else:
        click.echo(
            "amp-convert: the thresholds cannot be met with these inputs; nothing written "
            "(--force-write writes the closest model anyway)",
            err=True,
        )
    return 0 if report.passed else 1
