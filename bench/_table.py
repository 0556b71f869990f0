"""The one table formatter of bench/: text and Markdown tables, and the cell formats they share.

Every bench script that prints a table (compare.py, convert_bench.py, emulation_fidelity.py) builds
rows of strings and hands them here, so a column added to one table is added the same way
everywhere, and a size or a duration reads the same in every table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

GB = 10**9


@dataclass(frozen=True)
class Column:
    """A column: its title, right-aligned or not, and (optionally) its title in Markdown."""

    title: str
    right: bool = False
    md_title: str | None = None  # e.g. "× floor" where the text table says "x floor"
    width: int = 0  # the narrowest it may be (fixed width for rows printed one at a time)


class Wide(str):
    """A cell that may run past its column (an error message): left-aligned, never widens it."""


def columns(*titles: str, right_from: int | None = None) -> list[Column]:
    """Columns from titles; those from index `right_from` on are right-aligned."""
    n = len(titles) if right_from is None else right_from
    return [Column(t, right=i >= n) for i, t in enumerate(titles)]


def _grouped(rows: Sequence[Sequence[str]]) -> list[list[str]]:
    """The first cell blanked where it repeats the row above's (rows of one model)."""
    out, prev = [], None
    for r in rows:
        out.append([("" if r[0] == prev else r[0]), *r[1:]])
        prev = r[0]
    return out


def fit_widths(cols: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column as wide as its title, its widest cell (Wide cells excepted) and its minimum."""
    return [
        max([c.width, len(c.title)] + [len(r[i]) for r in rows if not isinstance(r[i], Wide)])
        for i, c in enumerate(cols)
    ]


def text_row(
    cells: Sequence[str], cols: Sequence[Column], widths: Sequence[int], *, justify: bool = True
) -> str:
    """One line; `justify=False` left-aligns every column (tables whose cells are mostly prose)."""
    return "  ".join(
        cell.rjust(w) if justify and c.right and not isinstance(cell, Wide) else cell.ljust(w)
        for cell, c, w in zip(cells, cols, widths, strict=True)
    ).rstrip()


def text_header(cols: Sequence[Column], widths: Sequence[int], *, justify: bool = True) -> str:
    """The title line and the dashes under it."""
    head = text_row([c.title for c in cols], cols, widths, justify=justify)
    return head + "\n" + "  ".join("-" * w for w in widths)


def text_table(
    cols: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    group_first: bool = False,
    justify: bool = True,
) -> str:
    """A plain-text table, columns two spaces apart; `group_first` blanks a repeated first cell."""
    body = _grouped(rows) if group_first else [list(r) for r in rows]
    widths = fit_widths(cols, [[c.title for c in cols], *body])
    lines = [text_header(cols, widths, justify=justify)]
    lines += [text_row(r, cols, widths, justify=justify) for r in body]
    return "\n".join(lines)


def markdown_table(
    cols: Sequence[Column], rows: Sequence[Sequence[str]], *, group_first: bool = False
) -> str:
    """A Markdown table (pipes in cells escaped); `group_first` blanks a repeated first cell."""
    body = _grouped(rows) if group_first else rows
    lines = ["| " + " | ".join(c.md_title or c.title for c in cols) + " |"]
    lines.append("|" + "".join("---:|" if c.right else "---|" for c in cols))
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# cells
# ----------------------------------------------------------------------------------------------
def size_text(n: float | None) -> str:
    """Bytes as GB / MB / kB (decimal units); "-" for no figure."""
    if n is None:
        return "-"
    if n >= GB:
        return f"{n / GB:.2f} GB"
    if n >= 10**6:
        return f"{n / 10**6:.1f} MB"
    return f"{n / 10**3:.1f} kB"


def secs_text(s: float | None) -> str:
    """Seconds as "1.23 s" or "45 ms"; "-" for no figure."""
    if s is None:
        return "-"
    return f"{s:.2f} s" if s >= 1 else f"{s * 1000:.0f} ms"


def float_text(v: Any, fmt: str) -> str:
    """A float in `fmt`; "-" for None; "nan" / "inf" (the JSON-safe strings) as they are."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return format(v, fmt)


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, "..." marking the cut."""
    return text if len(text) <= width else text[: width - 3] + "..."
