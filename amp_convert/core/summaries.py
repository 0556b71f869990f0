"""A step's result in one short line, for the DEBUG log.

A result's repr can hold onnx-ir values whose own repr walks their producers and constant
tensors: on a deep graph that is megabytes of text, or a RecursionError inside logging (seen when
a test left the package's logger at DEBUG). The log says what a result counts instead: numbers,
strings and flags as they are, collections by their length, anything else by its type's name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sized


def _field(value: object) -> str:
    if value is None or isinstance(value, bool | int | float | str):
        return repr(value)
    if isinstance(value, Mapping | Sized):
        return f"{len(value)} items"
    return type(value).__name__


def one_line(result: object) -> str:
    """``Name(field=value, ...)`` with only scalars shown in full (see the module docstring)."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        fields = ", ".join(
            f"{f.name}={_field(getattr(result, f.name))}" for f in dataclasses.fields(result)
        )
        return f"{type(result).__name__}({fields})"
    return _field(result)
