"""Write docs/cli.md: each command's ``--help`` as the command line prints it.

    python scripts/gen_cli_doc.py            # rewrite docs/cli.md
    python scripts/gen_cli_doc.py --check    # exit 1 when docs/cli.md differs from --help

The help texts come from the option declarations (amp_convert/options/, the ``help`` of each
field) and the commands' docstrings, so the reference is never written by hand: change a
declaration, run this, commit both. ``tests/properties/test_cli_doc.py`` fails when they differ.
Rendered at 80 columns (click wraps help to the terminal's width, at most 80).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: the commands in the order the page shows them (argv after ``amp-convert``)
COMMANDS: tuple[tuple[str, ...], ...] = ((), ("convert",), ("validate",))
WIDTH = "80"
HEADER = """\
# Command-line reference

Generated from the option declarations by `python scripts/gen_cli_doc.py`; do not edit by hand
(`tests/properties/test_cli_doc.py` fails when this page and `--help` differ). What the options
mean in depth: [converting](converting.md), [validating](validating.md), [`--auto`](auto.md);
what each message means: [troubleshooting](troubleshooting.md). `amp-convert MODEL ...` is short
for `amp-convert convert MODEL ...`.
"""


def help_text(args: tuple[str, ...]) -> str:
    """`amp-convert ARGS --help` as printed on an 80-column terminal."""
    from click.testing import CliRunner

    from amp_convert.commands.cli import cli

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        result = CliRunner().invoke(cli, [*args, "--help"], prog_name="amp-convert")
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    if result.exit_code != 0:
        raise SystemExit(f"amp-convert {' '.join(args)} --help failed: {result.output}")
    return result.output


def page() -> str:
    """The whole of docs/cli.md."""
    parts = [HEADER]
    for args in COMMANDS:
        title = " ".join(("amp-convert", *args))
        parts.append(f"\n## `{title}`\n\n```text\n{help_text(args).rstrip()}\n```\n")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="compare instead of writing")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "cli.md")
    args = p.parse_args(argv)
    text = page()
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'differs from --help; run ' + __file__}")
        return 0 if same else 1
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
