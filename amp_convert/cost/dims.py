"""Symbolic dims: the one ``--dim NAME=VALUE`` parser, and dims written as expressions.

One parser serves the converter (sizes for the cast-cost estimate), ``validate``, ``--auto`` and the
HTML probes, so a value accepted by one is accepted by all: ``Dims`` is its result, the form every
options object holds (parsed once, passed on as is). Values are non-negative integers: 0 is a real
size (an empty KV cache, ``past_sequence_length=0``, on a decoder's first step). One check,
``check_dim_names``, refuses a name the model does not have, with the closest one it has.

Exporters write some dims as expressions over others: optimum's decoders
``past_sequence_length + sequence_length``, torch dynamo ``2*s0`` or ``s0 + 1``. ``DimExpr``
evaluates them without ``eval()``: the text is parsed by Python's ``ast`` and only integer
constants, names, ``+ - * // / %``, unary minus and ``floor``/``ceil``/``min``/``max`` calls are
accepted; anything else means the text is a plain name.
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from amp_convert.errors import OptionError

_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Div, ast.Mod)
_CALLS = {"floor", "ceil", "min", "max", "Min", "Max", "floordiv", "FloorDiv"}


class Dims(Mapping[str, int]):
    """``--dim`` values parsed once: NAME -> size, in name order; hashable (options hold it).

    Built from any form ``parse_dims`` reads; built from a Dims it is that Dims' copy, so an
    object handed down is never parsed again.
    """

    __slots__ = ("_pairs",)

    def __init__(self, dims: Any = None) -> None:
        pairs = dims._pairs if isinstance(dims, Dims) else tuple(sorted(parse_dims(dims).items()))
        self._pairs: tuple[tuple[str, int], ...] = pairs

    def __getitem__(self, name: str) -> int:
        for key, value in self._pairs:
            if key == name:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def __hash__(self) -> int:
        return hash(self._pairs)

    def __repr__(self) -> str:
        return f"Dims({dict(self._pairs)!r})"


def check_dim_names(
    dims: Iterable[str],
    names: Collection[str],
    *,
    inputs: Collection[str] | None = None,
    listed: str | None = None,
) -> None:
    """Every ``--dim`` NAME is one of `names` (or, with `inputs`, INPUT[AXIS] of one of them): a
    misspelt name would size nothing, silently. One OptionError line with the closest name;
    `listed` says what the model offers (default: `names`)."""
    for name in dims:
        if name in names:
            continue
        base = name.split("[", 1)[0]
        if inputs is not None and "[" in name and name.endswith("]"):
            if base in inputs:
                continue
            raise OptionError(f"--dim {name}: the model has no input named {base!r}")
        close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        offered = listed if listed is not None else (", ".join(sorted(names)) or "none")
        raise OptionError(
            f"--dim {name}: the model has no dim named {name!r}{hint} (its dims: {offered})"
        )


def parse_dims(dims: Any) -> dict[str, int]:
    """``["batch=1", "seq=16"]`` / ``{"batch": 1}`` / ``(("batch", 1),)`` → ``{"batch": 1, ...}``.

    Names keep their inner spelling (``input_ids[1]`` sets an unnamed axis); a name given twice
    with two values is an error, never a silent last-wins.
    """
    if dims is None:
        return {}
    if isinstance(dims, Mapping):
        items: Iterable[Any] = dims.items()
    elif isinstance(dims, str):
        items = (dims,)
    else:
        items = dims
    out: dict[str, int] = {}
    for item in items:
        if isinstance(item, str):
            name, sep, text = item.rpartition("=")
            if not sep:
                raise OptionError(f"--dim {item!r}: expected NAME=VALUE")
        else:
            try:
                name, text = item
            except (TypeError, ValueError):
                raise OptionError(f"--dim: expected NAME=VALUE pairs, not {item!r}") from None
        name = str(name).strip()
        value = _dim_value(name, text)
        if not name:
            raise OptionError(f"--dim ={text}: empty name before '='")
        if name in out and out[name] != value:
            raise OptionError(f"--dim {name} given twice ({out[name]} and {value})")
        out[name] = value
    return out


def _dim_value(name: str, text: Any) -> int:
    if isinstance(text, bool):
        raise OptionError(f"--dim {name}={text}: the value must be a non-negative integer")
    try:
        value = int(text.strip()) if isinstance(text, str) else int(text)
        if not isinstance(text, str) and value != text:
            raise ValueError
    except (TypeError, ValueError):
        raise OptionError(
            f"--dim {name}={text}: the value must be a non-negative integer"
        ) from None
    if value < 0:
        raise OptionError(f"--dim {name}={text}: the value must be a non-negative integer")
    return value


@dataclass(frozen=True)
class DimExpr:
    """A dim written as an arithmetic expression over other dims (see the module docstring)."""

    text: str
    names: frozenset[str]
    _tree: ast.expr

    def evaluate(self, values: Mapping[str, int]) -> int:
        """The integer value given the dims it names; ValueError if it is not a size."""
        result = _eval(self._tree, values)
        if result.denominator != 1:
            raise ValueError(f"dim {self.text!r} is {float(result):g}, not an integer")
        if result < 0:
            raise ValueError(f"dim {self.text!r} is {int(result)}, a negative size")
        return int(result)


def parse_dim_expression(text: str) -> DimExpr | None:
    """The expression in ``text``, or None when it is a plain name, a number or not arithmetic."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if isinstance(tree, ast.Name | ast.Constant):
        return None
    names: set[str] = set()
    if not _allowed(tree, names):
        return None
    return DimExpr(text, frozenset(names), tree)


def _allowed(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        names.add(node.id)
        return True
    if isinstance(node, ast.BinOp):
        return (
            isinstance(node.op, _BINOPS)
            and _allowed(node.left, names)
            and _allowed(node.right, names)
        )
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.USub | ast.UAdd) and _allowed(node.operand, names)
    if isinstance(node, ast.Call):
        return (
            isinstance(node.func, ast.Name)
            and node.func.id in _CALLS
            and not node.keywords
            and 1 <= len(node.args) <= 2
            and all(_allowed(a, names) for a in node.args)
        )
    return False


def _eval(node: ast.expr, values: Mapping[str, int]) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return Fraction(node.value)
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise ValueError(f"dim {node.id!r} has no value")
        return Fraction(values[node.id])
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, values)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, values), _eval(node.right, values)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if b == 0:
            raise ValueError("division by zero in a dim expression")
        if isinstance(node.op, ast.Div):
            return a / b
        if isinstance(node.op, ast.FloorDiv):
            return Fraction(math.floor(a / b))
        return a - b * math.floor(a / b)  # Mod, Python's sign convention
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        args = [_eval(a, values) for a in node.args]
        fn = node.func.id
        if fn in ("floor", "ceil"):
            if len(args) != 1:
                raise ValueError(f"{fn} takes one argument")
            return Fraction(math.floor(args[0]) if fn == "floor" else math.ceil(args[0]))
        if fn in ("floordiv", "FloorDiv"):
            if len(args) != 2 or args[1] == 0:
                raise ValueError(f"{fn} takes two arguments, the second not 0")
            return Fraction(math.floor(args[0] / args[1]))
        return min(args) if fn.lower() == "min" else max(args)
    raise ValueError("not a dim expression")  # unreachable: _allowed vetted the tree
