"""Click options generated from the options' declarations (options/declare.py), and the command
line's one error prefix.

`click_options` turns the fields of ConvertOptions or ValidateOptions into click options: the
flag, its help, default and type come from the field's metadata, so a new option is a new field.
The values are passed on raw (a --dim is parsed by the options object, the one parser); click
checks only what its types know (a choice, an integer range, an input file that exists).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import Field
from typing import Any, TypeVar

import click

from amp_convert.commands.paths import InputPath
from amp_convert.core import user_text
from amp_convert.options.declare import default_of

F = TypeVar("F", bound=Callable[..., Any])
#: every line the command line prints about a failure starts with it
PREFIX = "amp-convert:"


def say_error(message: object) -> None:
    """``amp-convert: error: MESSAGE`` on stderr (one line, names from models made printable)."""
    click.echo(f"{PREFIX} error: {user_text.printable(message)}", err=True)


def say_internal(error: BaseException, what: str = "", where: str = "") -> None:
    """``amp-convert: internal error: [WHAT: ]TYPE: MESSAGE[ (WHERE)]`` on stderr: a bug (exit 3),
    never a verdict."""
    head = f"{what}: " if what else ""
    tail = f" ({where})" if where else ""
    text = user_text.printable(f"{head}{type(error).__name__}: {error}{tail}")
    click.echo(f"{PREFIX} internal error: {text}", err=True)


class DeclaredChoice(click.Choice):
    """A choice shown as declared (``[O0|O1|O2|O3]``), in the help and in the refusal.

    From click 8.2 a case-insensitive choice is printed case-folded (``[o0|o1|o2|o3]``, "'O7' is
    not one of 'o0', ..."), while the option's help, its default and the docs say O2.
    """

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return f"[{'|'.join(map(str, self.choices))}]"

    def get_invalid_choice_message(self, value: Any, ctx: click.Context | None) -> str:
        return f"{value!r} is not one of {', '.join(map(repr, map(str, self.choices)))}."


def _click_option(f: Field) -> list[Callable[[F], F]]:
    """The click option(s) for one declared field."""
    meta = f.metadata
    kind, flags, help_text = meta["kind"], meta["flags"], meta["help"]
    name = meta.get("param", f.name)
    default = default_of(f)
    if kind == "thresholds":
        return [
            click.option(part.flag, part.key, multiple=True, metavar=part.metavar, help=part.help)
            for part in meta["parts"]
        ]
    if kind == "choice":
        choice = DeclaredChoice(meta["choices"], case_sensitive=meta.get("case_sensitive", False))
        value = default.value if isinstance(default, enum.Enum) else default
        return [
            click.option(
                *flags, name, type=choice, default=value, show_default=True, help=help_text
            )
        ]
    if kind == "switch":
        return [click.option(*flags, name, default=default, show_default=True, help=help_text)]
    if kind == "flag":
        return [click.option(*flags, name, is_flag=True, help=help_text)]
    if kind == "path":
        path_type = InputPath(must_exist=False)  # the options object says why a file is missing
        return [click.option(*flags, name, type=path_type, help=help_text)]
    if kind == "int":
        int_type = click.IntRange(min=meta.get("min"), max=meta.get("max"))
        return [
            click.option(
                *flags,
                name,
                type=int_type,
                default=default,
                show_default=default is not None,
                metavar=meta.get("metavar"),
                help=help_text,
            )
        ]
    if kind == "inputs":
        return [
            click.option(
                *flags,
                name,
                type=InputPath(),
                multiple=True,
                metavar=meta.get("metavar"),
                help=help_text,
            )
        ]
    metavar = meta.get("metavar", "OP,..." if kind == "ops" else None)
    return [click.option(*flags, name, multiple=True, metavar=metavar, help=help_text)]


def click_options(declared: Iterable[Field]) -> Callable[[F], F]:
    """A decorator adding the click options of `declared`, in declaration order."""
    options = [option for f in declared for option in _click_option(f)]

    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate
