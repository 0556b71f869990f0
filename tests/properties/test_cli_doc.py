"""docs/cli.md is each command's --help, so the reference cannot drift from the declarations."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import gen_cli_doc  # noqa: E402


def test_cli_md_is_the_help_of_every_command() -> None:
    """Fails when an option's declaration (or a command's text) changed and docs/cli.md did not:
    run ``python scripts/gen_cli_doc.py`` and commit the page."""
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert page == gen_cli_doc.page(), "docs/cli.md is stale: run python scripts/gen_cli_doc.py"


@pytest.mark.parametrize("args", gen_cli_doc.COMMANDS, ids=lambda a: " ".join(a) or "amp-convert")
def test_each_help_block_is_in_the_page(args: tuple[str, ...]) -> None:
    """The same, command by command, so a failure says which help changed."""
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert gen_cli_doc.help_text(args).rstrip() in page


def test_every_command_and_flag_is_documented() -> None:
    """A command added to the group, or a flag added to one, appears in the page."""
    from amp_convert.commands.cli import cli

    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    shown = {args[0] for args in gen_cli_doc.COMMANDS if args}
    assert shown == set(cli.commands), set(cli.commands) ^ shown
    for command in cli.commands.values():
        for param in command.params:
            for flag in getattr(param, "opts", []):
                if flag.startswith("--"):
                    assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", page), flag


def test_each_command_help_gives_one_example() -> None:
    """--help stays short and shows how a command is used, once."""
    for args in gen_cli_doc.COMMANDS:
        text = gen_cli_doc.help_text(args)
        examples = [line for line in text.splitlines() if line.strip().startswith("Example:")]
        assert len(examples) == 1, (args, examples)


def test_option_help_stays_short() -> None:
    """At most three lines of --help per option: the guides in docs/ say the rest."""
    from amp_convert.commands.cli import cli

    for name, command in cli.commands.items():
        for param in command.params:
            text = getattr(param, "help", None) or ""
            assert len(text) <= 130, (name, param.opts, len(text))
