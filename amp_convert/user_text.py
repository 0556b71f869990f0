"""Strings from outside, in one place: checked on the way in, made safe on the way out.

In: every command-line argument (patterns for --exclude-nodes and --low-io, node and output
names, paths) and every external-data location a model names must be text we can hand on:
valid UTF-8 (a Latin-1 terminal passes bytes that Python keeps as lone surrogates, which then
fail deep inside RE2, protobuf or ONNX Runtime) and free of NUL (which no file name can hold).
``check_text`` refuses anything else with one line naming where it came from, the bytes shown
escaped.

Out: names read from a model (outputs, nodes) may hold any character. ``printable`` escapes
what a terminal would obey (ESC sequences, other C0/C1 controls, DEL) and what XML 1.0 cannot
carry (NUL, form feed, U+FFFE, lone surrogates), so one form serves the terminal and JUnit XML;
HTML pages are rendered, then passed through ``markup`` (the same escapes, line breaks kept).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Iterable
from typing import Any

#: what is escaped by printable(): C0 controls (tab and newline too: a name is one line), DEL,
#: C1 controls, lone surrogates, and the noncharacters XML 1.0 excludes
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object) -> str:
    """`text` with control characters and non-XML characters escaped (\\x1b, \\ufffe...)."""
    return _UNSAFE.sub(_escape, str(text))


#: printable()'s set less the line breaks and tabs a page's own markup uses
_UNSAFE_IN_MARKUP = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def markup(text: str) -> str:
    """A whole rendered page (HTML, XML) with printable()'s escapes for what no name may carry
    raw; the page's own markup has none of these characters, so only names change."""
    return _UNSAFE_IN_MARKUP.sub(_escape, text)


def terminal(text: object) -> str:
    """Several lines for the terminal: each line printable(), the line breaks kept."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


class PrintableFormatter(logging.Formatter):
    """Log records (node names in -v's lines) as terminal() text."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal(super().format(record))


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """warnings.showwarning for the command line: one line, no source path or code excerpt.

    A library's FutureWarning or UserWarning printed "/path/to/site-packages/x.py:12: ..." and
    the line of code; the user gets what it says, and nothing of where it was raised.
    """
    stream = file if file is not None else sys.stderr
    with contextlib.suppress(OSError, ValueError):
        stream.write(f"amp-convert: warning: {printable(_one_line(str(message)))}\n")


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


class TextError(ValueError):
    """A user-supplied string that is not text we can use (the message is one line)."""


def text_problem(value: str) -> str | None:
    """Why `value` cannot be used as text, or None."""
    for ch in value:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            return f"not valid UTF-8 (byte 0x{code - 0xDC00:02x})"
        if 0xD800 <= code <= 0xDFFF:
            return f"not valid UTF-8 (lone surrogate U+{code:04X})"
    if "\x00" in value:
        return "contains a NUL byte"
    return None


def check_text(value: str, where: str) -> str:
    """`value` unchanged when it is usable text; else TextError "WHERE 'VALUE': WHY"."""
    problem = text_problem(value)
    if problem is not None:
        raise TextError(f"{where} '{printable(value)}': {problem}")
    return value


def check_args(args: Iterable[str]) -> None:
    """Every command-line argument as text; the error names the option it belongs to."""
    option = None
    for arg in args:
        problem = text_problem(arg)
        if problem is not None:
            if arg.startswith("--") and "=" in arg:
                option, _, arg = arg.partition("=")
            where = f"{option} value" if option else "argument"
            raise TextError(
                f"{where} '{printable(arg)}': {problem}; amp-convert takes UTF-8 text only "
                "(ONNX names, patterns and file names are stored as UTF-8)"
            )
        option = arg if arg.startswith("-") else None
