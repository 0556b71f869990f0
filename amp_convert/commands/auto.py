"""The ``amp-convert MODEL --auto`` flow: search, print, write the reports, write the model.

Exit codes: 0 thresholds met (model written), 1 not met (nothing written unless --force-write),
2 usage or input errors (raised as AmpConvertError to the CLI).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from amp_convert.auto.search import auto_convert
from amp_convert.core.user_text import printable, terminal
from amp_convert.files import io
from amp_convert.files import outputs as output_rules
from amp_convert.files.output_set import OutputSet
from amp_convert.options.convert import ConvertOptions
from amp_convert.pages import html as html_report
from amp_convert.pages.auto import auto_page
from amp_convert.validation.options import ValidateOptions, provider_refused_by_auto


def run_auto(
    model: str | Path,
    outputs: Sequence[tuple[str, Path | None]],
    options: ConvertOptions,
    validation: ValidateOptions,
    *,
    force: bool,
    force_write: bool,
    quiet: bool,
    extra_inputs: Sequence[Sequence[Path]] = (),
) -> int:
    """Run the search for the CLI and return its exit code.

    `outputs` are the command's declared outputs by label ("output", "report", "HTML report");
    with the output's data file they are checked together before the search (output_rules).
    """
    files = validation.inputs or ()
    if isinstance(files, str | Path):
        files = (files,)
    inputs_read = output_rules.model_files(Path(model))
    by_label = dict(outputs)
    output = Path(by_label["output"])  # type: ignore[arg-type]
    writes = [
        ("output", output),
        ("output data file", output_rules.data_file_name(output)),
        *((label, p) for label, p in outputs if label != "output"),
    ]
    read = [inputs_read, *([Path(f)] for f in files), *extra_inputs]
    provider_refused_by_auto(validation.provider)  # before the outputs are planned
    with output_rules.plan_outputs(writes, read, force) as plan, OutputSet() as staged:
        samples = validation.replace(  # one sample per file
            inputs=[str(f) for f in files] or None, save_inputs=plan.get("inputs file")
        )
        result, report = auto_convert(
            model, options=options, validation=samples, progress=not quiet, outputs=staged
        )
        if not quiet:
            click.echo(terminal(report.summary()))
        # the reports are staged first (a report that cannot be written fails the run before
        # anything is replaced), put in place when the model is written and not yet committed,
        # and rolled back if the model's commit fails: all of the outputs or none
        if plan.get("report") is not None:
            staged.stage(plan["report"], report.json_bytes())
        if plan.get("HTML report") is not None:
            page = auto_page(report, f"amp-convert --auto: {Path(model).name}")
            staged.stage(plan["HTML report"], html_report.render(page).encode("utf-8"))
        if report.passed or force_write:
            # an input with external data gives an output with external data (never one
            # protobuf holding every weight)
            external = True if len(inputs_read) > 1 else None
            try:
                io.save_model(
                    result,
                    plan["output"],
                    external=external,
                    keep=inputs_read,
                    before_commit=lambda size: staged.commit(),
                )
            except BaseException:
                staged.roll_back()
                raise
        else:
            staged.commit()
        if report.passed or force_write:
            if not quiet:
                click.echo(printable(f"wrote {output}"))
        else:
            click.echo(
                "amp-convert: the thresholds cannot be met with these inputs; the model was not "
                "written (--force-write writes the closest model anyway)",
                err=True,
            )
    return 0 if report.passed else 1
