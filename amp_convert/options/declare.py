"""An option is declared once: a dataclass field whose metadata says how every surface shows it.

`ConvertOptions` and `ValidateOptions` declare their fields with `option()`. From that one
declaration the command line builds its flags (commands/flags.py), the API its keyword names
(`option_names`, checked by `check_names`), Olive its pass parameters (olive.py) and ``--auto`` the
list of validation flags it does not use. Adding an option is adding one field.

``kind`` says how the command line reads the value (the options object then checks and
normalises it in ``__post_init__``, the one parser for every entry point):

============  ===========================================================================
choice        one of ``choices`` (``case_sensitive`` False unless said)
switch        ``--x/--no-x``
flag          ``--x``: True when given
path          a file the command reads
multiple      repeatable text (``metavar`` REGEX, NAME...)
ops           repeatable ``OP,OP`` lists
dims          repeatable ``NAME=VALUE`` (``--dim``)
int           an integer in [``min``, ``max``]
inputs        repeatable input files (one sample each)
thresholds    one repeatable ``[NAME:]VALUE`` flag per part (``parts``: `ThresholdFlag`)
api           no flag: a typed value of the API only
============  ===========================================================================

Other metadata: ``param`` (the click parameter's name when it is not the field's), ``commands``
(the only commands that show the flag), ``auto`` (False: ``--auto`` refuses the flag) and
``olive`` (a dict: the field is an Olive pass parameter; ``default``/``search`` override).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from amp_convert.core import spelling
from amp_convert.errors import OptionError


@dataclass(frozen=True)
class ThresholdFlag:
    """One command-line flag of a threshold field: ``--atol [NAME:]VALUE`` (repeatable)."""

    key: str  # the Thresholds field it sets
    help: str
    metavar: str = "[NAME:]VALUE"

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


def option(
    default: Any = MISSING,
    flags: tuple[str, ...] = (),
    help: str = "",
    kind: str = "api",
    *,
    default_factory: Callable[[], Any] | None = None,
    **extra: Any,
) -> Any:
    """A field whose metadata says how it appears on the command line, the API and Olive."""
    meta = {"flags": flags, "help": help, "kind": kind, **extra}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def user_fields(cls: type) -> Iterator[Field]:
    """The fields a user sets (derived ones left out), in declaration order."""
    return (f for f in fields(cls) if not f.metadata.get("derived"))


def option_names(cls: type) -> tuple[str, ...]:
    """The API's keyword names of `cls`."""
    return tuple(f.name for f in user_fields(cls))


def cli_fields(cls: type, command: str | None = None) -> Iterator[Field]:
    """The fields the command line shows (API-only ones left out); with `command`, those it has
    (a field limited to other ``commands`` left out)."""
    for f in user_fields(cls):
        if f.metadata.get("kind", "api") == "api":
            continue
        only = f.metadata.get("commands")
        if only is not None and command not in only:
            continue
        yield f


def param_names(f: Field) -> tuple[str, ...]:
    """The click parameters one field's flags fill (a threshold field has one per part)."""
    if f.metadata.get("kind") == "thresholds":
        return tuple(p.key for p in f.metadata["parts"])
    return (f.metadata.get("param", f.name),)


def default_of(f: Field) -> Any:
    """The field's declared default (a factory's value)."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def given_values(cls: type, params: Mapping[str, Any], command: str | None = None) -> dict:
    """The field values a command line gave, from its click parameters (`params`).

    A parameter left at nothing (None, an empty repeatable) is left out: the field's default
    holds. A threshold field gets ``{part key: items}`` of its parts that were given.
    """
    out: dict[str, Any] = {}
    for f in cli_fields(cls, command):
        if f.metadata["kind"] == "thresholds":
            parts = {k: params[k] for k in param_names(f) if _given(params.get(k))}
            if parts:
                out[f.name] = parts
        elif _given(value := params.get(param_names(f)[0])):
            out[f.name] = value
    return out


def _given(value: Any) -> bool:
    return value is not None and not (isinstance(value, tuple | list) and not value)


def check_names(kwargs: Mapping[str, Any], known: Iterable[str], what: str) -> None:
    """Refuse keyword names not in `known` (one OptionError line, with the closest known name)."""
    known = list(known)
    unknown = set(kwargs) - set(known)
    if unknown:
        close = [c for u in sorted(unknown) if (c := spelling.closest(u, known))]
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise OptionError(
            f"unknown {what}(s) {', '.join(sorted(unknown))} (known: {', '.join(known)}){hint}"
        )
